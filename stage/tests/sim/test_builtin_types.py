"""The built-in types of the spec through their typed clients, and the kubectl verbs that
patch them (label, annotate, patch with each patch type)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from test.cluster import Cluster, Kubectl
from test.manifests import WIDGET_CRD, pod, served, widget


@pytest.mark.conformance
def test_leases_and_controller_revisions(cluster: Cluster) -> None:
    leases = client.CoordinationV1Api(cluster.api)
    lease = leases.create_namespaced_lease(
        "kube-node-lease",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "node-a"},
            "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 40},
        },
    )
    # A MicroTime: the client writes a datetime in isoformat, which has microseconds only
    # when they are not zero, and kube-apiserver accepts only six digits.
    lease.spec.renew_time = "2026-11-30T00:00:00.123456Z"
    renewed = leases.replace_namespaced_lease("node-a", "kube-node-lease", lease)
    assert int(renewed.metadata.resource_version) > int(lease.metadata.resource_version)
    apps = client.AppsV1Api(cluster.api)
    apps.create_namespaced_controller_revision(
        "default",
        {
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {"name": "r-1"},
            "revision": 1,
            "data": {"spec": {"x": 1}},
        },
    )
    assert [r.revision for r in apps.list_namespaced_controller_revision("default").items] == [1]


@pytest.mark.conformance
def test_node_status_is_written_through_its_subresource(cluster: Cluster) -> None:
    core = cluster.core()
    cluster.request(
        "POST",
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1"},
            "status": {"capacity": {"google.com/tpu": "4"}},
        },
    )
    node = core.read_node("n1")
    assert node.status.capacity == {"google.com/tpu": "4"}, "a node registers with its status"
    core.patch_node_status("n1", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    core.patch_node("n1", {"spec": {"unschedulable": True}, "status": {"conditions": []}})
    node = core.read_node("n1")
    assert node.spec.unschedulable is True
    assert [c.type for c in node.status.conditions] == ["Ready"]
    listed = core.list_node(field_selector="spec.unschedulable=true")
    assert [n.metadata.name for n in listed.items] == ["n1"]


@pytest.mark.conformance
def test_events_by_involved_object_and_reason(cluster: Cluster) -> None:
    core = cluster.core()
    for name, reason, obj in (
        ("e1", "SliceLost", "a"),
        ("e2", "SliceLost", "b"),
        ("e3", "Other", "a"),
    ):
        core.create_namespaced_event(
            "default",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name},
                "involvedObject": {"kind": "Widget", "name": obj, "namespace": "default"},
                "reason": reason,
                "message": "m",
                "type": "Warning",
            },
        )
    by_reason = core.list_namespaced_event("default", field_selector="reason=SliceLost")
    assert sorted(e.metadata.name for e in by_reason.items) == ["e1", "e2"]
    both = core.list_namespaced_event(
        "default", field_selector="involvedObject.name=a,involvedObject.kind=Widget,reason!=Other"
    )
    assert [e.metadata.name for e in both.items] == ["e1"]


@pytest.mark.conformance
def test_services_get_a_cluster_ip_and_defaults(cluster: Cluster, kubectl: Kubectl) -> None:
    kubectl("create", "service", "clusterip", "web", "--tcp=80:8080")
    svc = cluster.core().read_namespaced_service("web", "default")
    assert svc.spec.type == "ClusterIP"
    assert svc.spec.ports[0].port == 80 and svc.spec.ports[0].target_port == 8080


@pytest.mark.conformance
def test_kubectl_label_annotate_and_patch(cluster: Cluster, kubectl: Kubectl) -> None:
    core = cluster.core()
    core.create_namespaced_pod("default", pod("p", labels={"app": "x"}))
    kubectl("label", "pod", "p", "tier=web")
    kubectl("annotate", "pod", "p", "example.com/note=hello")
    kubectl("patch", "pod", "p", "-p", json.dumps({"metadata": {"labels": {"app": None}}}))
    got = core.read_namespaced_pod("p", "default")
    assert got.metadata.labels == {"tier": "web"}
    assert got.metadata.annotations == {"example.com/note": "hello"}
    kubectl("apply", "-f", "-", input=json.dumps(WIDGET_CRD))
    served(cluster, WIDGET_CRD)
    kubectl("apply", "-f", "-", input=json.dumps(widget("w")))
    kubectl("patch", "widget", "w", "--type=merge", "-p", '{"spec":{"size":"large"}}')
    kubectl(
        "patch",
        "widget",
        "w",
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/replicas","value":4}]',
    )
    spec = cluster.custom().get_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", "w"
    )["spec"]
    assert spec == {"size": "large", "replicas": 4}
    out = kubectl("patch", "widget", "w", "-p", '{"spec":{"size":"small"}}', check=False)
    assert out.returncode != 0, "strategic merge patch is refused for custom resources"
    kubectl("label", "widget", "w", "team=a")
    assert (
        kubectl("get", "widgets", "-l", "team=a", "-o", "name").stdout.strip()
        == "widget.example.com/w"
    )


@pytest.mark.conformance
def test_kubectl_create_configmap_and_secret_through_protobuf(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    kubectl("create", "configmap", "cfg", "--from-literal=a=1", "--from-literal=b=2")
    kubectl("create", "secret", "generic", "sec", "--from-literal=token=abc")
    assert cluster.core().read_namespaced_config_map("cfg", "default").data == {"a": "1", "b": "2"}
    secret = cluster.core().read_namespaced_secret("sec", "default")
    assert secret.data == {"token": "YWJj"} and secret.type == "Opaque"

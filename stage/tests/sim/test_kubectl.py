"""The kubectl verbs the walkthrough uses, run as a user would against the embedded server."""

from __future__ import annotations

import json
import subprocess
import threading

import pytest
from test.cluster import Cluster, Kubectl
from test.manifests import WIDGET_CRD, pod, served, widget


def _event(name: str, reason: str, obj: str, message: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "name": obj,
            "namespace": "default",
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "count": 1,
        "firstTimestamp": "2026-11-30T00:00:00Z",
        "lastTimestamp": "2026-11-30T00:00:00Z",
        "source": {"component": "test"},
    }


@pytest.mark.conformance
def test_apply_creates_then_updates(kubectl: Kubectl, cluster: Cluster) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(WIDGET_CRD))
    served(cluster, WIDGET_CRD)
    out = kubectl("apply", "-f", "-", input=json.dumps(widget("w", replicas=1)))
    assert "widget.example.com/w created" in out.stdout
    out = kubectl("apply", "-f", "-", input=json.dumps(widget("w", replicas=2)))
    assert "widget.example.com/w configured" in out.stdout
    got = cluster.custom().get_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", "w"
    )
    assert got["spec"]["replicas"] == 2
    assert "kubectl.kubernetes.io/last-applied-configuration" in got["metadata"]["annotations"]
    out = kubectl("apply", "-f", "-", input=json.dumps(widget("w", replicas=2)))
    assert "widget.example.com/w unchanged" in out.stdout


@pytest.mark.conformance
def test_apply_of_a_builtin_type_and_reapply(kubectl: Kubectl, cluster: Cluster) -> None:
    body = pod("p", labels={"app": "x"})
    assert "pod/p created" in kubectl("apply", "-f", "-", input=json.dumps(body)).stdout
    body["metadata"]["labels"]["tier"] = "web"
    assert "pod/p configured" in kubectl("apply", "-f", "-", input=json.dumps(body)).stdout
    assert cluster.core().read_namespaced_pod("p", "default").metadata.labels == {
        "app": "x",
        "tier": "web",
    }


@pytest.mark.conformance
def test_apply_rejects_unknown_fields_like_kube(kubectl: Kubectl, cluster: Cluster) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(WIDGET_CRD))
    served(cluster, WIDGET_CRD)
    body = widget("w")
    body["spec"]["colour"] = "red"
    out = kubectl("apply", "-f", "-", input=json.dumps(body), check=False)
    assert out.returncode != 0
    assert 'unknown field "spec.colour"' in out.stderr


@pytest.mark.conformance
def test_get_crd_and_custom_columns_with_a_jsonpath_filter(
    kubectl: Kubectl, cluster: Cluster
) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(WIDGET_CRD))
    served(cluster, WIDGET_CRD)
    assert "widgets.example.com" in kubectl("get", "crd").stdout
    kubectl("apply", "-f", "-", input=json.dumps(widget("w")))
    cluster.custom().patch_namespaced_custom_object_status(
        "example.com",
        "v1",
        "default",
        "widgets",
        "w",
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "ACTIVE"},
                    {"type": "Other", "status": "False", "reason": "NOPE"},
                ]
            }
        },
    )
    out = kubectl(
        "get",
        "widgets",
        "-o",
        'custom-columns=NAME:.metadata.name,STATE:.status.conditions[?(@.type=="Ready")].reason',
    ).stdout.splitlines()
    assert out[0].split() == ["NAME", "STATE"]
    assert out[1].split() == ["w", "ACTIVE"]


@pytest.mark.conformance
def test_wait_for_condition_ready(kubectl: Kubectl, cluster: Cluster) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(WIDGET_CRD))
    served(cluster, WIDGET_CRD)
    kubectl("apply", "-f", "-", input=json.dumps(widget("w")))
    started = threading.Event()
    result: dict[str, subprocess.CompletedProcess[str] | object] = {}

    def wait() -> None:
        started.set()
        result["out"] = kubectl(
            "wait", "--for=condition=Ready", "widget/w", "--timeout=30s", check=False
        )

    waiter = threading.Thread(target=wait)
    waiter.start()
    started.wait()
    # Not ready yet: kubectl must still be waiting on its watch when the condition turns.
    assert waiter.is_alive()
    cluster.custom().patch_namespaced_custom_object_status(
        "example.com",
        "v1",
        "default",
        "widgets",
        "w",
        {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "ACTIVE"}]}},
    )
    waiter.join(40)
    out = result["out"]
    assert out.returncode == 0, out.stderr  # type: ignore[attr-defined]
    assert "widget.example.com/w condition met" in out.stdout  # type: ignore[attr-defined]


@pytest.mark.conformance
def test_describe_shows_the_object_and_its_events(kubectl: Kubectl, cluster: Cluster) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(WIDGET_CRD))
    served(cluster, WIDGET_CRD)
    kubectl("apply", "-f", "-", input=json.dumps(widget("w")))
    uid = cluster.custom().get_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", "w"
    )["metadata"]["uid"]
    event = _event("w.1", "SliceReadyTimeout", "w", "slice not ready in time")
    event["involvedObject"]["uid"] = uid
    cluster.core().create_namespaced_event("default", event)
    out = kubectl("describe", "widget", "w").stdout
    assert "Name:" in out and "w" in out and "Size:" in out
    assert "SliceReadyTimeout" in out and "slice not ready in time" in out


@pytest.mark.conformance
def test_get_events_by_reason(kubectl: Kubectl, cluster: Cluster) -> None:
    core = cluster.core()
    core.create_namespaced_event("default", _event("e1", "SliceLost", "w", "lost it"))
    core.create_namespaced_event("default", _event("e2", "Other", "w", "something else"))
    out = kubectl("get", "events", "--field-selector", "reason=SliceLost").stdout
    assert "lost it" in out and "something else" not in out
    header = out.splitlines()[0].split()
    assert header[:4] == ["LAST", "SEEN", "TYPE", "REASON"]


@pytest.mark.conformance
def test_get_pods_with_label_selectors(kubectl: Kubectl, cluster: Cluster) -> None:
    core = cluster.core()
    core.create_namespaced_pod("default", pod("a", labels={"env": "prod", "tier": "web"}))
    core.create_namespaced_pod("default", pod("b", labels={"env": "dev"}))
    core.create_namespaced_pod("default", pod("c", labels={"env": "test", "canary": "yes"}))

    def names(selector: str) -> list[str]:
        out = kubectl("get", "pods", "-l", selector, "-o", "name").stdout.split()
        api = sorted(
            p.metadata.name
            for p in core.list_namespaced_pod("default", label_selector=selector).items
        )
        kubectl_names = sorted(n.split("/")[1] for n in out)
        assert kubectl_names == api
        return api

    assert names("env in (prod,dev)") == ["a", "b"]
    assert names("env notin (prod,dev)") == ["c"]
    assert names("!canary") == ["a", "b"]
    assert names("env!=prod") == ["b", "c"]
    assert names("tier") == ["a"]
    table = kubectl("get", "pods").stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert table[1].split()[:3] == ["a", "0/1", "Pending"]


@pytest.mark.conformance
def test_field_selector_on_node_name(kubectl: Kubectl, cluster: Cluster) -> None:
    core = cluster.core()
    core.create_namespaced_pod("default", pod("on-n1", node_name="n1"))
    core.create_namespaced_pod("default", pod("on-n2", node_name="n2"))
    out = kubectl(
        "get", "pods", "--field-selector", "spec.nodeName=n1", "-o", "name"
    ).stdout.split()
    assert out == ["pod/on-n1"]
    api = core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=n1")
    assert [p.metadata.name for p in api.items] == ["on-n2"]


@pytest.mark.conformance
def test_delete_and_create_namespace(kubectl: Kubectl, cluster: Cluster) -> None:
    assert "namespace/team-a created" in kubectl("create", "namespace", "team-a").stdout
    kubectl("apply", "-f", "-", input=json.dumps(WIDGET_CRD))
    served(cluster, WIDGET_CRD)
    kubectl("apply", "-n", "team-a", "-f", "-", input=json.dumps(widget("w", namespace="team-a")))
    out = kubectl("delete", "-n", "team-a", "widget", "w")
    assert 'widget.example.com "w" deleted' in out.stdout
    out = kubectl("delete", "namespace", "team-a", timeout=60)
    assert 'namespace "team-a" deleted' in out.stdout
    assert "team-a" not in kubectl("get", "namespaces").stdout


@pytest.mark.conformance
def test_get_nodes_table(kubectl: Kubectl, cluster: Cluster) -> None:
    cluster.request(
        "POST",
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "tpu-0", "labels": {"node-role.kubernetes.io/worker": ""}},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"kubeletVersion": "v1.32.0"},
            },
        },
    )
    out = kubectl("get", "nodes").stdout.splitlines()
    assert out[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert out[1].split()[:3] == ["tpu-0", "Ready", "worker"]


@pytest.mark.conformance
def test_api_resources_lists_builtins_and_crds(kubectl: Kubectl, cluster: Cluster) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(WIDGET_CRD))
    served(cluster, WIDGET_CRD)
    out = kubectl("api-resources").stdout
    for name in (
        "pods",
        "nodes",
        "leases",
        "controllerrevisions",
        "customresourcedefinitions",
        "validatingwebhookconfigurations",
        "widgets",
    ):
        assert name in out

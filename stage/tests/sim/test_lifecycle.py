"""Deletion as a real control plane does it: finalizers, owner-reference garbage collection,
orphan and foreground propagation, namespace deletion, pod binding and graceful deletion."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import V1DeleteOptions
from kubernetes.client.exceptions import ApiException
from test.cluster import Cluster, Kubectl
from test.helpers import eventually, gone
from test.manifests import configmap, pod

from tests.sim.test_watch import stream


@pytest.mark.conformance
def test_finalizers_hold_a_deleted_object_until_removed(cluster: Cluster) -> None:
    core = cluster.core()
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", configmap("held", finalizers=["example.com/hold"]))
    core.delete_namespaced_config_map("held", "default")
    held = core.read_namespaced_config_map("held", "default")
    assert held.metadata.deletion_timestamp is not None
    # A finalizer cannot be added once deletion started.
    with pytest.raises(ApiException) as e:
        core.patch_namespaced_config_map(
            "held",
            "default",
            {"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}},
        )
    assert e.value.status == 422
    core.patch_namespaced_config_map("held", "default", {"metadata": {"finalizers": None}})
    assert gone(lambda: core.read_namespaced_config_map("held", "default"))
    events = list(
        stream(
            cluster,
            f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=1",
        )
    )
    # Emptying the finalizers is not written: the object is deleted as it was stored.
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert events[1]["object"]["metadata"]["deletionTimestamp"]
    assert events[2]["object"]["metadata"]["finalizers"] == ["example.com/hold"]


def _owned(name: str, owner: Any, **extra: Any) -> dict[str, Any]:
    body = configmap(name)
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": owner.metadata.name,
            "uid": owner.metadata.uid,
            **extra,
        }
    ]
    return body


@pytest.mark.conformance
def test_deleting_an_owner_garbage_collects_its_dependents(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    core = cluster.core()
    owner = core.create_namespaced_config_map("default", configmap("owner"))
    core.create_namespaced_config_map("default", _owned("dep-1", owner))
    core.create_namespaced_config_map("default", _owned("dep-2", owner))
    kubectl("delete", "configmap", "owner")
    eventually(lambda: gone(lambda: core.read_namespaced_config_map("dep-1", "default")))
    eventually(lambda: gone(lambda: core.read_namespaced_config_map("dep-2", "default")))


@pytest.mark.conformance
def test_a_dependent_with_a_living_owner_loses_only_the_dangling_reference(
    cluster: Cluster,
) -> None:
    core = cluster.core()
    a = core.create_namespaced_config_map("default", configmap("a"))
    b = core.create_namespaced_config_map("default", configmap("b"))
    dep = _owned("dep", a)
    dep["metadata"]["ownerReferences"].append(
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "b", "uid": b.metadata.uid}
    )
    core.create_namespaced_config_map("default", dep)
    core.delete_namespaced_config_map("a", "default")

    def only_b() -> bool:
        refs = core.read_namespaced_config_map("dep", "default").metadata.owner_references
        return [r.name for r in refs] == ["b"]

    eventually(only_b)


@pytest.mark.conformance
def test_orphan_propagation_keeps_dependents(cluster: Cluster) -> None:
    core = cluster.core()
    owner = core.create_namespaced_config_map("default", configmap("owner"))
    core.create_namespaced_config_map("default", _owned("dep", owner))
    core.delete_namespaced_config_map(
        "owner", "default", body=V1DeleteOptions(propagation_policy="Orphan")
    )
    eventually(lambda: gone(lambda: core.read_namespaced_config_map("owner", "default")))
    assert not core.read_namespaced_config_map("dep", "default").metadata.owner_references


@pytest.mark.conformance
def test_foreground_propagation_deletes_dependents_before_the_owner(cluster: Cluster) -> None:
    core = cluster.core()
    owner = core.create_namespaced_config_map("default", configmap("owner"))
    core.create_namespaced_config_map("default", _owned("dep", owner, blockOwnerDeletion=True) | {})
    core.patch_namespaced_config_map(
        "dep", "default", {"metadata": {"finalizers": ["example.com/hold"]}}
    )
    core.delete_namespaced_config_map(
        "owner", "default", body=V1DeleteOptions(propagation_policy="Foreground")
    )
    held = eventually(
        lambda: core.read_namespaced_config_map("dep", "default").metadata.deletion_timestamp
    )
    assert held
    assert (
        "foregroundDeletion"
        in core.read_namespaced_config_map("owner", "default").metadata.finalizers
    )
    core.patch_namespaced_config_map("dep", "default", {"metadata": {"finalizers": None}})
    eventually(lambda: gone(lambda: core.read_namespaced_config_map("owner", "default")))


@pytest.mark.conformance
def test_a_dependent_of_a_missing_owner_is_collected(cluster: Cluster) -> None:
    core = cluster.core()
    body = configmap("orphaned")
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "never", "uid": "0000-never"}
    ]
    core.create_namespaced_config_map("default", body)
    eventually(lambda: gone(lambda: core.read_namespaced_config_map("orphaned", "default")))


@pytest.mark.conformance
def test_deleting_a_namespace_removes_its_objects_then_itself(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    core = cluster.core()
    kubectl("create", "namespace", "doomed")
    core.create_namespaced_config_map("doomed", configmap("a", namespace="doomed"))
    core.create_namespaced_config_map(
        "doomed", configmap("held", namespace="doomed", finalizers=["example.com/hold"])
    )
    core.create_namespaced_config_map("default", configmap("survivor"))
    core.delete_namespace("doomed")
    ns = core.read_namespace("doomed")
    assert ns.status.phase == "Terminating"
    # New content is refused while the namespace terminates.
    with pytest.raises(ApiException) as e:
        core.create_namespaced_config_map("doomed", configmap("late", namespace="doomed"))
    assert e.value.status == 403
    assert "because it is being terminated" in json.loads(e.value.body)["message"]
    eventually(lambda: gone(lambda: core.read_namespaced_config_map("a", "doomed")))
    assert core.read_namespace("doomed").status.phase == "Terminating"  # held by the finalizer
    core.patch_namespaced_config_map("held", "doomed", {"metadata": {"finalizers": None}})
    eventually(lambda: gone(lambda: core.read_namespace("doomed")))
    assert core.read_namespaced_config_map("survivor", "default")
    out = kubectl("get", "namespace", "doomed", check=False)
    assert out.returncode != 0 and 'namespaces "doomed" not found' in out.stderr


@pytest.mark.conformance
def test_binding_assigns_a_node_once(cluster: Cluster) -> None:
    core = cluster.core()
    core.create_namespaced_pod("default", pod("p"))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p"},
        "target": {"kind": "Node", "name": "n1"},
    }
    status, _, _ = cluster.request("POST", "/api/v1/namespaces/default/pods/p/binding", binding)
    assert status == 201
    bound = core.read_namespaced_pod("p", "default")
    assert bound.spec.node_name == "n1"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in bound.status.conditions)
    status, body, _ = cluster.request("POST", "/api/v1/namespaces/default/pods/p/binding", binding)
    assert status == 409 and "already assigned" in body["message"]


@pytest.mark.conformance
def test_a_bound_pod_is_deleted_gracefully_and_an_unbound_one_at_once(cluster: Cluster) -> None:
    core = cluster.core()
    core.create_namespaced_pod("default", pod("unbound"))
    core.delete_namespaced_pod("unbound", "default")
    assert gone(lambda: core.read_namespaced_pod("unbound", "default"))
    core.create_namespaced_pod("default", pod("bound", node_name="n1"))
    core.delete_namespaced_pod("bound", "default")
    terminating = core.read_namespaced_pod("bound", "default")
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 30
    # The kubelet finishes it with a zero grace period.
    core.delete_namespaced_pod("bound", "default", grace_period_seconds=0)
    assert gone(lambda: core.read_namespaced_pod("bound", "default"))

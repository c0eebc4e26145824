"""JSON merge, JSON (RFC 6902) and strategic merge patches, as kubectl sends them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ome_sim.apiserver.errors import APIError
from ome_sim.apiserver.patch import (
    REJECTED,
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
)

JSON = dict[str, Any]


def pod() -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "default",
            "labels": {"app": "web", "tier": "front"},
            "finalizers": ["a.io/x", "b.io/y"],
            "ownerReferences": [
                {"uid": "u1", "name": "rs1", "kind": "ReplicaSet", "apiVersion": "apps/v1"}
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "app:1",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 80, "name": "http"}],
                },
                {"name": "sidecar", "image": "proxy:1"},
            ],
            "tolerations": [{"key": "a", "operator": "Exists"}],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "Initialized", "status": "True"},
            ],
            "containerStatuses": [{"name": "app", "ready": False}, {"name": "sidecar"}],
        },
    }


# -- merge patch ---------------------------------------------------------------------------------


def test_merge_patch_merges_maps_deletes_nulls_and_replaces_lists() -> None:
    target = pod()
    before = copy.deepcopy(target)
    out = apply_merge_patch(
        target,
        {
            "metadata": {"labels": {"tier": None, "new": "x"}},
            "spec": {"tolerations": [{"key": "b"}]},
        },
    )
    assert out["metadata"]["labels"] == {"app": "web", "new": "x"}
    assert out["spec"]["tolerations"] == [{"key": "b"}]
    assert out["spec"]["containers"] == before["spec"]["containers"]
    assert target == before


def test_merge_patch_object_over_scalar_and_nulls_in_new_objects() -> None:
    out = apply_merge_patch({"a": "scalar", "b": 1}, {"a": {"x": 1, "y": None}, "c": {"z": None}})
    assert out == {"a": {"x": 1}, "b": 1, "c": {}}


@pytest.mark.parametrize("patch", [[{"op": "add"}], "x", 3, None])
def test_merge_patch_must_be_an_object(patch: Any) -> None:
    with pytest.raises(APIError) as raised:
        apply_merge_patch(pod(), patch)
    assert raised.value.code == 400
    assert raised.value.reason == "BadRequest"


# -- JSON patch ----------------------------------------------------------------------------------


def test_json_patch_operations_apply_in_order() -> None:
    target = {"metadata": {"labels": {"a": "1"}}, "spec": {"list": [1, 2, 3], "x": {"y": 1}}}
    before = copy.deepcopy(target)
    out = apply_json_patch(
        target,
        [
            {"op": "test", "path": "/spec/x/y", "value": 1},
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
            {"op": "add", "path": "/spec/list/1", "value": 9},
            {"op": "add", "path": "/spec/list/-", "value": 4},
            {"op": "remove", "path": "/spec/list/0"},
            {"op": "replace", "path": "/spec/x/y", "value": {"deep": True}},
            {"op": "copy", "from": "/spec/x", "path": "/spec/copied"},
            {"op": "move", "from": "/metadata/labels/a", "path": "/metadata/labels/moved"},
        ],
    )
    assert out == {
        "metadata": {"labels": {"b": "2", "moved": "1"}},
        "spec": {"list": [9, 2, 3, 4], "x": {"y": {"deep": True}}, "copied": {"y": {"deep": True}}},
    }
    assert target == before


def test_json_patch_escaped_pointer_for_annotation_keys() -> None:
    out = apply_json_patch(
        {"metadata": {"annotations": {}}},
        [{"op": "add", "path": "/metadata/annotations/ome.io~1role", "value": "x~y"}],
    )
    assert out["metadata"]["annotations"] == {"ome.io/role": "x~y"}


@pytest.mark.parametrize(
    ("ops", "cause"),
    [
        (
            [{"op": "test", "path": "/spec/replicas", "value": 2}],
            "testing value /spec/replicas failed: test failed",
        ),
        (
            [{"op": "test", "path": "/spec/flag", "value": 1}],
            "testing value /spec/flag failed: test failed",
        ),
        (
            [{"op": "remove", "path": "/spec/x"}],
            'remove operation does not apply: doc is missing path: "/spec/x": missing value',
        ),
        (
            [{"op": "replace", "path": "/spec/x", "value": 1}],
            "replace operation does not apply: doc is missing key: /spec/x: missing value",
        ),
        (
            [{"op": "add", "path": "/spec/missing/child", "value": 1}],
            'add operation does not apply: doc is missing path: "/spec/missing/child": '
            "missing value",
        ),
        (
            [{"op": "move", "from": "/spec/nope", "path": "/spec/y"}],
            "move operation does not apply: doc is missing from path: /spec/nope: missing value",
        ),
        (
            [{"op": "add", "path": "/spec/list/5", "value": 1}],
            "Unable to access invalid index: 5: invalid index referenced",
        ),
    ],
)
def test_json_patch_op_that_cannot_apply_is_422(ops: list[JSON], cause: str) -> None:
    target = {"spec": {"replicas": 3, "flag": True, "list": [1]}}
    with pytest.raises(APIError) as raised:
        apply_json_patch(target, ops)
    assert raised.value.code == 422
    assert raised.value.reason == "Invalid"
    assert raised.value.message == REJECTED
    assert raised.value.details == {"causes": [{"message": cause}]}


def test_json_patch_failure_applies_nothing() -> None:
    target = {"spec": {"a": 1}}
    with pytest.raises(APIError):
        apply_json_patch(
            target,
            [{"op": "add", "path": "/spec/b", "value": 2}, {"op": "remove", "path": "/spec/zz"}],
        )
    assert target == {"spec": {"a": 1}}


@pytest.mark.parametrize(
    "ops",
    [
        {"op": "add", "path": "/a", "value": 1},
        ["add"],
        [{"op": "frobnicate", "path": "/a"}],
        [{"op": "add", "value": 1}],
        [{"op": "add", "path": "/a"}],
        [{"op": "move", "path": "/a"}],
        [{"op": "add", "path": "a", "value": 1}],
    ],
)
def test_json_patch_malformed_document_is_400(ops: Any) -> None:
    with pytest.raises(APIError) as raised:
        apply_json_patch({"a": 0}, ops)
    assert raised.value.code == 400
    assert raised.value.reason == "BadRequest"


# -- strategic merge patch -----------------------------------------------------------------------


def test_smp_label_patch_like_kubectl_label() -> None:
    out = apply_strategic_merge_patch(pod(), {"metadata": {"labels": {"a": "b"}}}, "Pod")
    assert out["metadata"]["labels"] == {"app": "web", "tier": "front", "a": "b"}
    assert out["spec"] == pod()["spec"]


def test_smp_does_not_modify_inputs() -> None:
    target = pod()
    patch: JSON = {"spec": {"containers": [{"name": "app", "image": "app:2"}]}}
    before_target, before_patch = copy.deepcopy(target), copy.deepcopy(patch)
    apply_strategic_merge_patch(target, patch, "Pod")
    assert target == before_target
    assert patch == before_patch


def test_smp_containers_merge_by_name_with_set_element_order() -> None:
    # What `kubectl apply` sends after changing one image.
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
            "containers": [{"name": "app", "image": "app:2"}],
        }
    }
    out = apply_strategic_merge_patch(pod(), patch, "Pod")
    app, sidecar = out["spec"]["containers"]
    assert app["name"] == "app"
    assert app["image"] == "app:2"
    assert app["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert sidecar == {"name": "sidecar", "image": "proxy:1"}
    assert "$setElementOrder/containers" not in out["spec"]


def test_smp_set_element_order_reorders_merged_list() -> None:
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}],
            "containers": [{"name": "app", "image": "app:3"}],
        }
    }
    out = apply_strategic_merge_patch(pod(), patch, "Pod")
    assert [c["name"] for c in out["spec"]["containers"]] == ["sidecar", "app"]
    assert out["spec"]["containers"][1]["image"] == "app:3"


def test_smp_set_element_order_keeps_server_only_elements_in_place() -> None:
    target = pod()
    target["spec"]["containers"].insert(0, {"name": "injected", "image": "mesh:1"})
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}],
            "containers": [{"name": "sidecar", "image": "proxy:2"}],
        }
    }
    out = apply_strategic_merge_patch(target, patch, "Pod")
    assert [c["name"] for c in out["spec"]["containers"]] == ["injected", "sidecar", "app"]


def test_smp_new_container_is_appended_and_env_merges_by_name() -> None:
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}],
                },
                {"name": "debug", "image": "busybox"},
            ]
        }
    }
    out = apply_strategic_merge_patch(pod(), patch, "Pod")
    # kube's mergeSortedSlice: a new element lands before server-only elements that follow
    # the last patched element in the live list.
    names = [c["name"] for c in out["spec"]["containers"]]
    assert names == ["app", "debug", "sidecar"]
    assert out["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "two"},
        {"name": "C", "value": "3"},
    ]


def test_smp_ports_merge_by_container_port() -> None:
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "ports": [{"containerPort": 80, "name": "web"}, {"containerPort": 443}],
                }
            ]
        }
    }
    out = apply_strategic_merge_patch(pod(), patch, "Pod")
    assert out["spec"]["containers"][0]["ports"] == [
        {"containerPort": 80, "name": "web"},
        {"containerPort": 443},
    ]


def test_smp_delete_directive_in_list_removes_by_merge_key() -> None:
    patch = {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}
    out = apply_strategic_merge_patch(pod(), patch, "Pod")
    assert [c["name"] for c in out["spec"]["containers"]] == ["app"]


def test_smp_replace_directive_in_list_replaces_the_list() -> None:
    patch = {"spec": {"volumes": [{"name": "cache", "emptyDir": {}}, {"$patch": "replace"}]}}
    out = apply_strategic_merge_patch(pod(), patch, "Pod")
    assert out["spec"]["volumes"] == [{"name": "cache", "emptyDir": {}}]


def test_smp_replace_directive_on_map() -> None:
    patch = {"metadata": {"labels": {"only": "this", "$patch": "replace"}}}
    out = apply_strategic_merge_patch(pod(), patch, "Pod")
    assert out["metadata"]["labels"] == {"only": "this"}


def test_smp_delete_directive_on_map() -> None:
    patch = {"metadata": {"labels": {"$patch": "delete"}}}
    out = apply_strategic_merge_patch(pod(), patch, "Pod")
    assert out["metadata"]["labels"] == {}


def test_smp_merge_directive_on_map_merges() -> None:
    patch = {"metadata": {"labels": {"$patch": "merge", "x": "y"}}}
    out = apply_strategic_merge_patch(pod(), patch, "Pod")
    assert out["metadata"]["labels"] == {"app": "web", "tier": "front", "x": "y"}


def test_smp_null_deletes_field() -> None:
    out = apply_strategic_merge_patch(pod(), {"metadata": {"labels": {"tier": None}}}, "Pod")
    assert out["metadata"]["labels"] == {"app": "web"}


def test_smp_lists_without_strategy_are_replaced() -> None:
    patch: JSON = {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}
    out = apply_strategic_merge_patch(pod(), patch, "Pod")
    assert out["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]
    patch = {"status": {"containerStatuses": [{"name": "app", "ready": True}]}}
    out = apply_strategic_merge_patch(pod(), patch, "Pod")
    assert out["status"]["containerStatuses"] == [{"name": "app", "ready": True}]


def test_smp_finalizers_union_in_kubes_order() -> None:
    # Union without duplicates; patched values keep the patch's order and, as in kube, new
    # values go ahead of live values that are not in the patch.
    patch = {"metadata": {"finalizers": ["c.io/z", "a.io/x"]}}
    out = apply_strategic_merge_patch(pod(), patch, "Pod")
    assert out["metadata"]["finalizers"] == ["c.io/z", "a.io/x", "b.io/y"]
    added = apply_strategic_merge_patch(pod(), {"metadata": {"finalizers": ["c.io/z"]}}, "Pod")
    assert added["metadata"]["finalizers"] == ["c.io/z", "a.io/x", "b.io/y"]
    same = apply_strategic_merge_patch(pod(), {"metadata": {"finalizers": ["b.io/y"]}}, "Pod")
    assert same["metadata"]["finalizers"] == ["a.io/x", "b.io/y"]


def test_smp_delete_from_primitive_list() -> None:
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.io/x"]}}
    out = apply_strategic_merge_patch(pod(), patch, "Pod")
    assert out["metadata"]["finalizers"] == ["b.io/y"]
    assert "$deleteFromPrimitiveList/finalizers" not in out["metadata"]


def test_smp_owner_references_merge_by_uid() -> None:
    patch = {
        "metadata": {
            "ownerReferences": [{"uid": "u1", "controller": True}, {"uid": "u2", "name": "o2"}]
        }
    }
    out = apply_strategic_merge_patch(pod(), patch, "Pod")
    refs = out["metadata"]["ownerReferences"]
    assert [r["uid"] for r in refs] == ["u1", "u2"]
    assert refs[0]["controller"] is True
    assert refs[0]["name"] == "rs1"


def test_smp_pod_conditions_merge_by_type() -> None:
    patch = {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "PodScheduled", "status": "True"},
            ]
        }
    }
    out = apply_strategic_merge_patch(pod(), patch, "Pod")
    assert {c["type"]: c["status"] for c in out["status"]["conditions"]} == {
        "Ready": "True",
        "Initialized": "True",
        "PodScheduled": "True",
    }
    assert out["status"]["phase"] == "Running"


def test_smp_node_addresses_and_conditions_merge_images_replace() -> None:
    node = {
        "metadata": {"name": "n"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "Unknown"}],
            "images": [{"names": ["a"]}, {"names": ["b"]}],
        },
    }
    patch = {
        "status": {
            "addresses": [{"type": "Hostname", "address": "n"}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": [{"names": ["c"]}],
        }
    }
    out = apply_strategic_merge_patch(node, patch, "Node")
    assert out["status"]["addresses"] == [
        {"type": "Hostname", "address": "n"},
        {"type": "InternalIP", "address": "10.0.0.1"},
    ]
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    assert out["status"]["images"] == [{"names": ["c"]}]


def test_smp_service_ports_merge_by_port() -> None:
    svc = {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80, "targetPort": 8080}]}}
    patch = {"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "targetPort": 8443}]}}
    out = apply_strategic_merge_patch(svc, patch, "Service")
    assert out["spec"]["ports"] == [
        {"port": 80, "targetPort": 8080, "name": "http"},
        {"port": 443, "targetPort": 8443},
    ]


def test_smp_configmap_data_merges() -> None:
    cm = {"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}
    out = apply_strategic_merge_patch(cm, {"data": {"b": None, "c": "3"}}, "ConfigMap")
    assert out["data"] == {"a": "1", "c": "3"}


def test_smp_controller_revision_data_is_replaced() -> None:
    rev = {"metadata": {"name": "r"}, "data": {"spec": {"a": 1, "b": 2}}, "revision": 1}
    out = apply_strategic_merge_patch(rev, {"data": {"spec": {"c": 3}}}, "ControllerRevision")
    assert out["data"] == {"spec": {"c": 3}}


def test_smp_retain_keys_drops_unlisted_keys() -> None:
    target = {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}
    patch = {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}
    out = apply_strategic_merge_patch(target, patch, "Pod")
    assert out["spec"]["strategy"] == {"type": "Recreate"}


def test_smp_retain_keys_must_list_patched_keys() -> None:
    patch = {"spec": {"strategy": {"$retainKeys": ["type"], "other": 1}}}
    with pytest.raises(APIError) as raised:
        apply_strategic_merge_patch({"spec": {}}, patch, "Pod")
    assert raised.value.code == 400
    assert raised.value.message == "invalid patch format of retainKeys"


def test_smp_directives_in_new_subtrees_are_not_stored() -> None:
    target: JSON = {"metadata": {"name": "p"}}
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "a"}],
            "containers": [{"name": "a", "image": "x", "env": [{"name": "E", "value": None}]}],
        }
    }
    out = apply_strategic_merge_patch(target, patch, "Pod")
    assert out["spec"] == {"containers": [{"name": "a", "image": "x", "env": [{"name": "E"}]}]}


def test_smp_missing_merge_key_is_rejected() -> None:
    with pytest.raises(APIError) as raised:
        apply_strategic_merge_patch(pod(), {"spec": {"containers": [{"image": "x"}]}}, "Pod")
    assert raised.value.code == 400


def test_smp_unknown_kind_is_415() -> None:
    with pytest.raises(APIError) as raised:
        apply_strategic_merge_patch({"spec": {}}, {"spec": {"a": 1}}, "InferenceService")
    assert raised.value.code == 415
    assert raised.value.reason == "UnsupportedMediaType"
    assert raised.value.message == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )


@pytest.mark.parametrize("patch", [["a"], "x", 1])
def test_smp_body_must_be_an_object(patch: Any) -> None:
    with pytest.raises(APIError) as raised:
        apply_strategic_merge_patch(pod(), patch, "Pod")
    assert raised.value.code == 400
    assert "cannot unmarshal" in raised.value.message

"""What the manager's caches keep of objects: every informer drops ``managedFields``, and the
node informer keeps only what the slice reconcilers read of a host (``host_view``), so a
host reads the same through the view as whole."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ome.controllers.slices.reconciler import host_view
from ome.kube import JSON, json_copy
from ome.runtime.informer import Informer
from ome.runtime.rest import NODES
from ome.tpuslice.hosts import Host

LABEL = "cloud.google.com/gke-tpu-slice"

conditions = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["Ready", "MemoryPressure", "DiskPressure"]),
            "status": st.sampled_from(["True", "False", "Unknown"]),
            "lastHeartbeatTime": st.sampled_from(["2026-12-03T05:00:00Z", "2026-12-03T05:01:00Z"]),
        }
    ),
    max_size=4,
)
nodes = st.builds(
    lambda name, labels, unschedulable, conds, taints: {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {
            "taints": taints,
            **({} if unschedulable is None else {"unschedulable": unschedulable}),
        },
        "status": {"conditions": conds, "capacity": {"google.com/tpu": "4"}, "images": [{"n": 1}]},
    },
    st.text(min_size=1, max_size=8),
    st.dictionaries(st.sampled_from([LABEL, "pool", "accelerator"]), st.text(max_size=5)),
    st.none() | st.booleans(),
    conditions,
    st.lists(st.fixed_dictionaries({"key": st.text(max_size=3), "effect": st.just("NoSchedule")})),
)


@given(nodes)
def test_a_host_reads_the_same_through_the_view(node: JSON) -> None:
    original = json_copy(node)
    view = host_view(node)
    assert Host.from_node(view, LABEL) == Host.from_node(node, LABEL)
    assert view["metadata"]["labels"] == node["metadata"]["labels"]
    assert node == original  # the view takes nothing away from the object it reads


@given(nodes)
def test_a_heartbeat_changes_nothing_in_the_view_but_the_resource_version(node: JSON) -> None:
    beat = json_copy(node)
    beat["metadata"]["resourceVersion"] = "8"
    for condition in beat["status"]["conditions"]:
        condition["lastHeartbeatTime"] = "2026-12-03T06:00:00Z"
    before, after = host_view(node), host_view(beat)
    after["metadata"]["resourceVersion"] = "7"
    assert before == after


def test_the_view_keeps_less_than_the_node() -> None:
    node: JSON = {
        "metadata": {"name": "n", "resourceVersion": "1", "labels": {LABEL: "s"}},
        "status": {"images": [{"names": ["x" * 100]}] * 20, "conditions": []},
    }
    assert "images" not in host_view(node)["status"]


class _Rest:
    """Lists one page of objects, as ``Rest.list_all`` does, through its ``transform``."""

    def __init__(self, items: list[JSON]) -> None:
        self.items = items

    def list_all(self, *_args: Any, transform: Any = None, **_kw: Any) -> tuple[list[JSON], str]:
        return [transform(o) if transform else o for o in self.items], "10"


def _managed(name: str) -> JSON:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "3",
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:metadata": {}}}],
        }
    }


def test_every_informer_drops_managed_fields_before_its_transform() -> None:
    seen: list[JSON] = []

    def transform(obj: JSON) -> JSON:
        seen.append(json_copy(obj))
        return obj

    for informer in (
        Informer(_Rest([_managed("a")]), NODES),  # type: ignore[arg-type]
        Informer(_Rest([_managed("b")]), NODES, transform=transform),  # type: ignore[arg-type]
    ):
        informer._relist()
        (cached,) = informer.peek_list()
        assert "managedFields" not in cached["metadata"]
    assert seen and "managedFields" not in seen[0]["metadata"]


def test_a_watched_object_loses_its_managed_fields_too() -> None:
    informer = Informer(_Rest([]), NODES)  # type: ignore[arg-type]
    informer._relist()
    informer._apply({"type": "ADDED", "object": _managed("c")})
    assert (
        "managedFields"
        not in (informer.peek("c") or {"metadata": {"managedFields": 1}})["metadata"]
    )

"""``kubectl ome capacity``'s rows from plain values: which row a host counts in, how OME's
and foreign Slices, free, cordoned, not-ready and unreachable hosts, idle chips and waiting
Instances are counted, as the controller's own rules judge them; the table, wide and the
document; and malformed objects never raise."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ome.cli import capacity
from ome.controllers.holds import hold_failure_message
from ome.kube import rfc3339
from ome.tpuslice import config
from ome.tpuslice.types import GUIDE_CONFIG_JSON

JSON = dict[str, Any]
NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
CONFIG = config.parse_config(GUIDE_CONFIG_JSON)
assert CONFIG is not None

ACC = "cloud.google.com/gke-tpu-accelerator"
SLICE = "cloud.google.com/gke-tpu-slice"
TOPO = "cloud.google.com/gke-tpu-topology"
MODE = "cloud.google.com/gke-accelerator-topology-mode"
UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}


def node(
    name: str,
    *,
    slice_name: str = "",
    acc: str = "tpu7x",
    provision_only: bool = True,
    ready: str = "True",
    cordoned: bool = False,
) -> JSON:
    labels = {ACC: acc}
    if provision_only:
        labels[MODE] = "PROVISION_ONLY"
    if slice_name:
        labels[SLICE] = slice_name
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": cordoned},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def slice_(
    name: str,
    *,
    owner: str = "u-1",
    topology: str = "2x2x1",
    state: str = "ACTIVE",
    terminating: bool = False,
) -> JSON:
    meta: JSON = {"name": name, "uid": f"uid-{name}", "labels": {}}
    if owner:
        meta["labels"]["ome.io/slice-owner-uid"] = owner
    if terminating:
        meta["deletionTimestamp"] = rfc3339(NOW)
    conditions = [{"type": "Ready", "status": "True", "reason": state}] if state else []
    return {
        "metadata": meta,
        "spec": {"type": "tpu7x", "topology": topology, "partitionIds": ["p"]},
        "status": {"conditions": conditions},
    }


def pod(slice_name: str, phase: str = "Running") -> JSON:
    return {
        "metadata": {"name": f"pod-on-{slice_name}", "namespace": "ns"},
        "spec": {"nodeSelector": {SLICE: slice_name}},
        "status": {"phase": phase},
    }


def waiting_row(index: int, waited: int) -> JSON:
    pod_name = f"svc-engine-{index}-default-0"
    return {
        "index": index,
        "phase": "Creating",
        "operation": {"type": "Create", "waiting": "CapacityProvisioning", "deadline": None},
        "lastFailure": {
            "podName": pod_name,
            "containerName": "",
            "reason": "CapacityProvisioning",
            "exitCode": None,
            "message": hold_failure_message(
                "CapacityProvisioning", pod_name, "slice s is waiting for partition assignment"
            ),
            "time": rfc3339(NOW - timedelta(seconds=waited)),
        },
    }


def replica(rows: list[JSON] | None = None, tolerations: list[JSON] | None = None) -> JSON:
    """An opted-in replica of one 4-chip pod per Instance on a 2x2x1 tpu7x Slice."""
    spec: JSON = {
        "nodeSelector": {ACC: "tpu7x", TOPO: "2x2x1"},
        "containers": [{"name": "c", "resources": {"limits": {"google.com/tpu": "4"}}}],
    }
    if tolerations is not None:
        spec["tolerations"] = tolerations
    template = {
        "metadata": {"annotations": {"ome.io/tpu-slice-provisioning": "true"}},
        "spec": spec,
    }
    return {
        "metadata": {"name": "svc-engine", "namespace": "ns", "uid": "u-1"},
        "spec": {
            "component": "engine",
            "replicas": max(1, len(rows or [])),
            "runners": [{"name": "default", "template": template}],
        },
        "status": {"instanceStatuses": rows or []},
    }


def rows(
    nodes: list[JSON],
    slices: list[JSON] = [],  # noqa: B006 (never mutated)
    replicas: list[JSON] = [],  # noqa: B006
    pods: list[JSON] = [],  # noqa: B006
    accelerator: str | None = None,
) -> list[capacity.CapacityRow]:
    assert CONFIG is not None
    return capacity.rows(nodes, slices, replicas, pods, CONFIG, NOW, accelerator)


def test_an_empty_pool_is_one_row_of_free_hosts_and_static_hosts_do_not_count() -> None:
    (row,) = rows([node("h0"), node("h1"), node("s0", provision_only=False)])
    assert (row.accelerator, row.topology) == ("tpu7x", "")
    assert row.hosts == row.free == ("h0", "h1")
    assert capacity.render([row], wide=False) == (
        "ACCELERATOR   TOPOLOGY   HOSTS   OME   FOREIGN   FREE   CORDONED   NOT-READY   "
        "UNREACHABLE   IDLE-CHIPS   WAITING   LONGEST-WAIT\n"
        "tpu7x         <none>     2       0     0         2      0          0           "
        "0             0            0         <none>\n"
    )


def test_no_provision_only_host_is_no_row() -> None:
    assert rows([node("s0", provision_only=False)]) == []


def test_a_host_counts_in_the_row_of_its_slices_topology_by_the_slices_state() -> None:
    nodes = [
        node("h0", slice_name="ours-a"),
        node("h1", slice_name="ours-b"),
        node("h2", slice_name="ours-b"),
        node("h3", slice_name="going"),
        node("h4"),
    ]
    slices = [
        slice_("ours-a", state="ACTIVATING"),
        slice_("ours-b", topology="2x2x2", state="ACTIVE_DEGRADED"),
        slice_("going", terminating=True),
    ]
    free, one, two = rows(nodes, slices)
    assert (free.topology, free.free) == ("", ("h4",))
    assert (one.topology, one.ome) == ("2x2x1", (("ACTIVATING", ("h0",)), ("terminating", ("h3",))))
    assert (two.topology, two.ome) == ("2x2x2", (("ACTIVE_DEGRADED", ("h1", "h2")),))
    assert one.cells(wide=False)[3] == "ACTIVATING=1,terminating=1"


def test_a_slice_without_a_state_is_pending() -> None:
    (_, row) = rows([node("h0", slice_name="new")], [slice_("new", state="")])
    assert row.ome == (("pending", ("h0",)),)


def test_a_slice_without_the_owner_label_or_not_listed_is_foreign() -> None:
    """A Slice not listed has no topology to read but the host's label; without one, its
    host counts in the row without a topology."""
    nodes = [
        node("h0", slice_name="theirs"),
        node("h1", slice_name="unlisted"),
        {**node("h2", slice_name="labelled"), "metadata": {
            "name": "h2", "labels": {ACC: "tpu7x", MODE: "PROVISION_ONLY", SLICE: "labelled",
                                     TOPO: "2x2x1"}}},
    ]  # fmt: skip
    (none, row) = rows(nodes, [slice_("theirs", owner="")])
    assert (none.foreign, none.free) == (("h1",), ())
    assert (row.foreign, row.ome) == (("h0", "h2"), ())


def test_cordoned_not_ready_and_unreachable_hosts_are_not_free() -> None:
    nodes = [
        node("h0", cordoned=True),
        node("h1", ready="False"),
        node("h2", ready="Unknown"),
        node("h3", cordoned=True, ready="Unknown"),
        node("h4"),
    ]
    (row,) = rows(nodes)
    assert row.free == ("h4",)
    assert (row.cordoned, row.not_ready, row.unreachable) == (("h0", "h3"), ("h1",), ("h2", "h3"))
    wide = row.cells(wide=True)
    assert wide[15] == "h0(cordoned),h1(not-ready),h2(unreachable),h3(cordoned,unreachable)"


def test_a_cordon_the_replicas_pods_tolerate_is_no_problem() -> None:
    """F1 with the tolerations of the pods that would use the host, as E6 judges."""
    cordoned = [node("h0", cordoned=True)]
    (row,) = rows(cordoned, replicas=[replica(tolerations=[UNSCHEDULABLE])])
    assert (row.free, row.cordoned) == (("h0",), ())
    (row,) = rows(cordoned, replicas=[replica()])
    assert (row.free, row.cordoned) == ((), ("h0",))


def test_a_ready_ome_slice_with_no_running_pod_holds_idle_chips() -> None:
    nodes = [
        node("h0", slice_name="idle"),
        node("h1", slice_name="busy"),
        node("h2", slice_name="big"),
        node("h3", slice_name="big"),
        node("h4", slice_name="activating"),
        node("h5", slice_name="foreign"),
    ]
    slices = [
        slice_("idle"),
        slice_("busy"),
        slice_("big", topology="2x2x2"),
        slice_("activating", state="ACTIVATING"),
        slice_("foreign", owner=""),
    ]
    pods = [pod("busy"), pod("idle", phase="Pending")]
    _, one, two = rows(nodes, slices, pods=pods)
    assert (one.idle_chips, one.idle_slices) == (4, ("idle",))
    assert (two.idle_chips, two.idle_slices) == (8, ("big",))  # counted once, not per host


def test_instances_waiting_on_capacity_count_in_their_demands_row_with_the_longest_wait() -> None:
    held = replica([waiting_row(0, 30), waiting_row(1, 190), {"index": 2, "phase": "Ready"}])
    free, row = rows([node("h0")], replicas=[held])
    assert free.waiting == ()
    assert (row.accelerator, row.topology, row.hosts) == ("tpu7x", "2x2x1", ())
    assert [(w.ref, w.waited) for w in row.waiting] == [
        ("ns/svc-engine[0]", timedelta(seconds=30)),
        ("ns/svc-engine[1]", timedelta(seconds=190)),
    ]
    cells = row.cells(wide=True)
    assert cells[10:12] == ["2", "3m10s"]
    assert cells[-1] == "ns/svc-engine[0],ns/svc-engine[1]"
    assert row.document()["longestWaitSeconds"] == 190
    assert row.document()["waiting"][0] == {
        "namespace": "ns",
        "inferenceReplica": "svc-engine",
        "instance": 0,
        "waitedSeconds": 30,
    }


def test_a_hold_on_another_token_or_an_invalid_demand_is_not_waiting_on_capacity() -> None:
    other = waiting_row(0, 30)
    other["operation"]["waiting"] = "Unschedulable"
    bad = replica([waiting_row(0, 30)])
    bad["metadata"] = {"name": "bad-engine", "namespace": "ns", "uid": "u-2"}
    bad["spec"]["runners"][0]["template"]["spec"]["containers"][0]["resources"]["limits"] = {
        "google.com/tpu": "2"
    }
    assert [r.waiting for r in rows([node("h0")], replicas=[replica([other]), bad])] == [()]


def test_the_accelerator_filter_keeps_its_rows_only() -> None:
    nodes = [node("h0"), node("v0", acc="v6e")]
    assert [r.accelerator for r in rows(nodes)] == ["tpu7x", "v6e"]
    assert [r.accelerator for r in rows(nodes, accelerator="v6e")] == ["v6e"]
    held = replica([waiting_row(0, 5)])
    assert [r.accelerator for r in rows(nodes, replicas=[held], accelerator="v6e")] == ["v6e"]


def test_the_document_gives_the_same_as_the_table() -> None:
    nodes = [node("h0", slice_name="ours"), node("h1", cordoned=True)]
    free, row = rows(nodes, [slice_("ours")])
    assert free.document() == {
        "accelerator": "tpu7x",
        "topology": "",
        "hosts": ["h1"],
        "omeSlices": [],
        "foreign": [],
        "free": [],
        "cordoned": ["h1"],
        "notReady": [],
        "unreachable": [],
        "idleChips": 0,
        "idleSlices": [],
        "waiting": [],
        "longestWaitSeconds": None,
    }
    assert row.document()["omeSlices"] == [{"state": "ACTIVE", "hosts": ["h0"]}]
    assert row.document()["idleChips"] == 4


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)


@settings(max_examples=100, deadline=None)
@given(st.lists(_JSONISH, max_size=3), st.lists(_JSONISH, max_size=3), st.lists(_JSONISH))
def test_malformed_objects_never_raise(found: list[Any], nodes: list[Any], more: list[Any]) -> None:
    dicts = [x for x in more if isinstance(x, dict)]
    broken = copy.deepcopy(replica([waiting_row(0, 5)]))
    broken["status"]["instanceStatuses"] += dicts
    out = rows(
        [node("h0", slice_name="s"), *(n for n in nodes if isinstance(n, dict))],
        [s for s in found if isinstance(s, dict)],
        [broken, *dicts],
        dicts,
    )
    capacity.render(out, wide=True)
    for row in out:
        row.document()

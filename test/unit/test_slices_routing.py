"""Which replica a Slice's events wake (the slice controllers' key mapping): by the owner
annotation OME writes, and by name, since a name carries its replica's hash (D2) and a
foreign Slice at one of our names has no annotation of ours; and which updates of nodes and
of other workloads' pods wake anyone at all (the watches' update predicates)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ome.api.v1beta1 import LABEL_MANAGED_BY, MANAGED_BY_OMENATIVE
from ome.controllers.slices.model import Replica, wanted_slots
from ome.controllers.slices.reconciler import (
    SliceReconcilers,
    annotated_owner_keys,
    holder_changed,
    holder_view,
    owners_by_name,
    pod_view,
)
from ome.provider import gke
from ome.runtime.views import ByVersion
from ome.tpuslice.naming import Slot, owner_hash, slice_name
from test.unit import slicekit
from test.unit.slicekit import CONFIG, DELETED_AT, JSON, NAME, NAMESPACE, SLICE, UID, create_op, row


def replica(name: str = NAME, uid: str = UID, namespace: str = NAMESPACE) -> JSON:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid}}


def a_slice(name: str, annotations: dict[str, str] | None = None) -> JSON:
    return {"metadata": {"name": name, "annotations": annotations or {}}}


OURS = slice_name(NAME, Slot(2, 1), owner_hash(NAMESPACE, NAME, UID))


def test_a_foreign_slice_at_one_of_our_names_wakes_the_replica_that_gives_the_name() -> None:
    foreign = a_slice(OURS, {"team": "other"})
    assert annotated_owner_keys(foreign) == []
    assert owners_by_name(foreign, [replica()]) == [f"{NAMESPACE}/{NAME}"]


def test_a_name_another_replica_would_give_wakes_only_that_one() -> None:
    other = replica("other-engine", "uid-2")
    assert owners_by_name(a_slice(OURS), [replica(), other]) == [f"{NAMESPACE}/{NAME}"]
    # A replica of the same name but another UID (deleted and re-created) has another hash.
    assert owners_by_name(a_slice(OURS), [replica(uid="uid-3")]) == []


def test_a_name_no_replica_gives_wakes_none() -> None:
    for name in ("team-slice", f"{NAME}-2-1-0000000g", f"{NAME}-x-1-{OURS[-8:]}", ""):
        assert owners_by_name(a_slice(name), [replica()]) == []
    assert owners_by_name({"metadata": {}}, [replica()]) == []


def test_the_owner_annotation_names_its_replica_key() -> None:
    assert annotated_owner_keys(a_slice(OURS, {"ome.io/slice-owner": "ns/name"})) == ["ns/name"]
    for bad in ("name", "a/b/c", ""):
        assert annotated_owner_keys(a_slice(OURS, {"ome.io/slice-owner": bad})) == []


def node(
    labels: JSON | None = None, ready: str = "True", beat: str = "12:00:00", **spec: object
) -> JSON:
    return {
        "metadata": {"name": "node-a", "resourceVersion": beat, "labels": labels or {}},
        "spec": dict(spec),
        "status": {
            "conditions": [
                {"type": "Ready", "status": ready, "lastHeartbeatTime": f"2025-03-01T{beat}Z"}
            ]
        },
    }


def test_a_nodes_heartbeat_wakes_no_one_but_what_its_hosts_read_does() -> None:
    """Update predicates of the node watches: a heartbeat (a new lastHeartbeatTime and
    resourceVersion) is no news; the slice label, a cordon and the Ready status are."""
    changed = routing_only().host_changed
    before = node({SLICE: "s"})
    assert not changed(before, node({SLICE: "s"}, beat="12:01:00"))
    assert changed(before, node({SLICE: "t"}))
    assert changed(before, node({}))
    assert changed(before, node({SLICE: "s"}, unschedulable=True))
    assert changed(before, node({SLICE: "s"}, ready="Unknown"))
    assert changed(before, node({SLICE: "s", "pool": "other"}))


def test_a_host_joining_a_slice_or_its_usability_is_no_news_to_release_and_loss() -> None:
    """Release and loss read of a host only which Slice it is on (H3's "moved off"), and
    only as the bound pods' nodes: a host leaving its Slice (the label removed or changed)
    is news to them, a host joining one, a cordon or a Ready change is news only to the
    passes they gate (``host_changed``), and so is the topology label that comes with the
    slice label; the provision-only label of its pool, which B6.3 reads, is news to both."""
    news = routing_only().release_host_news
    joined = node({SLICE: "s"})
    assert not news(node({}), joined)
    assert news(joined, node({}))
    assert news(joined, node({SLICE: "t"}))
    assert not news(joined, node({SLICE: "s"}, unschedulable=True))
    assert not news(joined, node({SLICE: "s"}, ready="Unknown"))
    topology = "cloud.google.com/gke-tpu-topology"
    assert not news(node({}), node({SLICE: "s", topology: "4x4"}))
    assert news(node({SLICE: "s", topology: "4x4"}), node({}))
    pool = {CONFIG.accelerator_label: "tpu-v6e-slice"}
    provision_only = {**pool, CONFIG.provision_only_key: CONFIG.provision_only_value}
    assert news(node({SLICE: "s", **pool}), node({SLICE: "s", **provision_only}))
    assert not news(node({SLICE: "s", **pool}), node({SLICE: "s", **pool, "team": "a"}))


CHIPS = {"limits": {CONFIG.chip_resource: "4"}, "requests": {CONFIG.chip_resource: "4"}}


def test_a_holders_status_only_update_wakes_no_one() -> None:
    """The holders' watch sees pods through ``holder_view``: a change of what G2 reads (its
    node, whether its phase is terminal, deletion, chips, slice selector) is news; a new resourceVersion alone, which
    is what a status change outside the view leaves, is not."""
    view = holder_view(CONFIG)
    pod = {
        "metadata": {"name": "p", "namespace": "n", "uid": "u", "resourceVersion": "1"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "resources": CHIPS}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]},
    }
    later = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "2"}}
    later["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    assert not holder_changed(view(pod), view(later))
    # G2 reads of a phase only whether it is terminal: a bound holder starting to run (its
    # kubelet's Pending to Running) is no news either.
    pending = {**pod, "status": {"phase": "Pending"}}
    assert not holder_changed(view(pending), view(later))
    done = {**later, "status": {"phase": "Succeeded"}}
    assert holder_changed(view(later), view(done))
    going = {
        **later,
        "metadata": {**later["metadata"], "deletionTimestamp": "2025-03-01T12:00:00Z"},
    }
    assert holder_changed(view(later), view(going))


def routing_only() -> SliceReconcilers:
    """A SliceReconcilers with only its configuration: what its predicates read."""
    reconcilers = SliceReconcilers.__new__(SliceReconcilers)
    reconcilers.config = CONFIG
    reconcilers.slice_view = ByVersion(gke.parse)
    reconcilers.replica_view = ByVersion(Replica.from_json)
    return reconcilers


def test_a_pod_that_requests_no_chips_is_kept_as_its_name_and_is_never_news() -> None:
    """G2: a holder requests chips (B3), and a pod's requests do not change: the holders'
    cache keeps a pod without chips as its identity alone (most of a cluster's pods), and its
    binding, phase or deletion wakes no one. Unreadable chips count as holding: kept whole."""
    view = holder_view(CONFIG)
    meta = {"name": "web", "namespace": "n", "uid": "u", "resourceVersion": "1"}
    cpu = {"requests": {"cpu": "100m"}}
    pod = {"metadata": meta, "spec": {"containers": [{"name": "c", "resources": cpu}]}}
    assert view(pod) == {"metadata": meta}
    bound = {
        "metadata": {**meta, "resourceVersion": "2", "deletionTimestamp": "2025-03-01T12:00:00Z"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "resources": cpu}]},
        "status": {"phase": "Succeeded"},
    }
    assert not holder_changed(view(pod), view(bound))
    assert routing_only().holder_owner_keys(view(bound)) == []
    bad = {"limits": {CONFIG.chip_resource: "four"}}
    unreadable = {**bound, "spec": {"nodeName": "node-a", "containers": [{"resources": bad}]}}
    assert view(unreadable)["spec"]["nodeName"] == "node-a"


def test_a_replicas_row_reworded_or_ready_wakes_no_release_but_what_g3_reads_does() -> None:
    """The tpuslice controller's replica update predicate: release and loss read the spec
    and metadata, and of the rows only what G3 wants Slices from (index, Deleting, the
    operation, the active ordinal); the InferenceReplica pass rewording a row (held, pods
    created, Ready) is no news to them."""
    news = routing_only().release_news
    base = slicekit.replica(rows=[row(0, phase="Pending")]).raw
    rows = base["status"]["instanceStatuses"]

    def with_(status_rows: list[JSON] | None = None, rv: str = "8", **meta: Any) -> JSON:
        changed = copy.deepcopy(base)
        changed["metadata"] = {**changed["metadata"], "resourceVersion": rv, **meta}
        if status_rows is not None:
            changed["status"]["instanceStatuses"] = status_rows
        return changed

    reworded = [{**rows[0], "reason": "CapacityProvisioning", "message": "on its way"}]
    assert not news(base, with_(reworded))
    assert not news(base, with_([{**rows[0], "phase": "Ready", "ready": True}], rv="9"))
    assert news(base, with_([{**rows[0], "phase": "Deleting"}], rv="10"))
    assert news(base, with_([{**rows[0], "activeOrdinal": 1}], rv="11"))
    assert news(base, with_([{**rows[0], "operation": create_op(surge=3)}], rv="12"))
    assert news(base, with_([*rows, row(1)], rv="13"))
    assert news(base, with_(rv="14", deletionTimestamp=DELETED_AT))
    assert news(base, with_(rv="16", annotations={"a": "b"}))
    respec = with_(rv="15")
    respec["spec"] = {**respec["spec"], "replicas": 2}
    assert news(base, respec)


def test_an_operations_progress_wakes_no_release_but_its_start_end_and_surge_do() -> None:
    """G3 reads of a row's operation only whether there is one and its surge index. The
    InferenceReplica pass moving an operation on (its step, progress time, waiting text,
    retries) on each status write is no news to release and loss."""
    news = routing_only().release_news
    started = {**create_op(), "lastProgressAt": "2026-12-07T06:00:00Z", "waiting": None}
    base = slicekit.replica(rows=[row(0, phase="Creating", operation=started)]).raw

    def with_op(operation: JSON | None, rv: str) -> JSON:
        changed = copy.deepcopy(base)
        changed["metadata"]["resourceVersion"] = rv
        changed["status"]["instanceStatuses"][0]["operation"] = operation
        return changed

    moved = {
        **started,
        "step": "WaitReady",
        "lastProgressAt": "2026-12-07T06:00:09Z",
        "waiting": {"reason": "SliceNotReady", "message": "TPU slice s is ACTIVATING"},
        "retryCount": 1,
        "capacityRefusedAt": "2026-12-07T06:00:05Z",
    }
    assert not news(base, with_op(moved, "8"))
    assert news(base, with_op(None, "9"))
    assert news(base, with_op({**started, "surgeIndex": 2}, "10"))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "index": st.integers(0, 3),
                "phase": st.sampled_from(["Creating", "Ready", "Deleting", "Restarting"]),
                "activeOrdinal": st.integers(0, 1),
                "operation": st.none() | st.builds(create_op, st.none() | st.integers(0, 5)),
            }
        ),
        max_size=3,
    ),
    st.lists(
        st.tuples(
            st.sampled_from(["step", "lastProgressAt", "waiting", "retryCount", "reason"]),
            st.text(max_size=3),
        ),
        max_size=4,
    ),
    st.booleans(),
)
def test_whatever_a_row_change_does_to_the_wanted_slots_wakes_release(
    rows: list[JSON], progress: list[tuple[str, str]], multi: bool
) -> None:
    """The predicate never hides a change of what G3 wants: two versions of a replica whose
    rows differ only in an operation's progress want the same slots, and a change that
    moves the wanted slots is always news."""
    news = routing_only().release_news
    runners = slicekit.multi() if multi else None
    before = slicekit.replica(runners, rows=rows).raw
    after = copy.deepcopy(before)
    after["metadata"]["resourceVersion"] = "8"
    for r in after["status"]["instanceStatuses"]:
        if r["operation"] is not None:
            r["operation"].update(progress)
    assert not news(before, after)
    assert wanted_slots(Replica.from_json(before)) == wanted_slots(Replica.from_json(after))
    for i, r in enumerate(after["status"]["instanceStatuses"]):
        for change in ({"operation": None}, {"phase": "Deleting"}, {"activeOrdinal": 1}):
            moved = copy.deepcopy(after)
            moved["metadata"]["resourceVersion"] = "9"
            moved["status"]["instanceStatuses"][i] = {**r, **change}
            if wanted_slots(Replica.from_json(moved)) != wanted_slots(Replica.from_json(after)):
                assert news(after, moved)


def test_a_pods_readiness_wakes_no_release_but_where_it_runs_and_its_going_do() -> None:
    """The tpuslice controller's pod update predicate: release and loss read a pod's node,
    Slice selector, deletion, phase (terminal) and chips, not its conditions."""
    news = routing_only().pod_news
    pod: JSON = {
        "metadata": {"name": "p", "namespace": NAMESPACE, "uid": "u", "resourceVersion": "1"},
        "spec": {
            "nodeSelector": {SLICE: "s"},
            "containers": [{"name": "c", "resources": CHIPS}],
        },
        "status": {"phase": "Pending"},
    }

    def later(rv: str, **parts: Any) -> JSON:
        out = copy.deepcopy(pod)
        for section, values in parts.items():
            out[section] = {**out.get(section, {}), **values}
        out["metadata"]["resourceVersion"] = rv
        return out

    bound = later("2", spec={"nodeName": "node-a"})
    assert news(pod, bound)
    running = later("3", spec={"nodeName": "node-a"}, status={"phase": "Running"})
    assert not news(bound, running)
    ready = later(
        "4",
        spec={"nodeName": "node-a"},
        status={"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    )
    assert not news(running, ready)
    assert news(ready, later("5", spec={"nodeName": "node-a"}, status={"phase": "Failed"}))
    going = copy.deepcopy(ready)
    going["metadata"]["deletionTimestamp"] = DELETED_AT
    assert news(ready, going)


def test_one_pod_informer_keeps_omes_pods_whole_and_cuts_the_others_to_what_g2_reads() -> None:
    """``pod_view``: the manager watches pods once. OME's pods are cached whole (the
    InferenceReplica pass reads their status); another workload's pod is what
    ``holder_view`` keeps of it."""
    view = pod_view(CONFIG)
    ours: JSON = {
        "metadata": {
            "name": "e-0",
            "namespace": NAMESPACE,
            "uid": "u",
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_OMENATIVE, "x": "y"},
        },
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "resources": CHIPS}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert view(ours) is ours
    theirs = {**ours, "metadata": {**ours["metadata"], "labels": {"app": "batch"}}}
    assert view(theirs) == holder_view(CONFIG)(theirs)
    assert "labels" not in view(theirs)["metadata"]

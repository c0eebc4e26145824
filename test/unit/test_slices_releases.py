"""Release (C2, D4, G1 to G5): which of our Slices the sweep releases
(``releases.keep``, ``pinned``, ``unwanted``), who defers a release (``holders``), the decision
again on live values (``confirm_sweep``) and teardown of a deleted replica (``teardown``)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ome.controllers.holds import Hold
from ome.controllers.slices.model import Pod, Replica
from ome.controllers.slices.readiness import SlotVerdict, judge_slot
from ome.controllers.slices.releases import (
    Defer,
    Delete,
    InUse,
    Releasing,
    confirm_sweep,
    holders,
    keep,
    pinned,
    release_or_defer,
    teardown,
    unwanted,
)
from ome.controllers.slices.validation import Verdict, validate
from ome.tpuslice.hosts import Host
from ome.tpuslice.naming import Slot
from ome.tpuslice.slices import SliceInfo
from ome.tpuslice.types import Accelerator, Config
from test.unit import slicekit
from test.unit.slicekit import (
    CONFIG,
    HASH,
    JSON,
    NAME,
    NOW,
    SLICE,
    TPU,
    UID,
    n,
    pod,
    replica,
    row,
    update_op,
)

#: Both accelerators have provision-only nodes.
BOTH_PROVISION_ONLY = frozenset({"tpu7x", "tpu7y"})
#: Two accelerators that share topology 2x2x1.
TWO_TYPES = replace(
    CONFIG,
    accelerators={
        **CONFIG.accelerators,
        "tpu7y": Accelerator("tpu7y", "tpu7y", 4, ("2x2x1",)),
    },
)
#: This file's runners tolerate nothing: release does not read tolerations.
single = partial(slicekit.single, tolerations=None)
multi = partial(slicekit.multi, tolerations=None)
#: This file's Slices were created at NOW.
sl = partial(slicekit.sl, created=NOW)


def verdict_of(rep: Replica, config: Config = CONFIG) -> Verdict:
    return validate(rep, config, BOTH_PROVISION_ONLY)


# -- regression: the type counts, not only the topology ---------------------------------------


def test_a_wrong_type_slice_of_the_right_topology_is_released() -> None:
    rep = replica(single(), [row(0)])
    verdict = verdict_of(rep, TWO_TYPES)
    assert verdict.demand is not None and verdict.demand.accelerator.slice_type == "tpu7x"
    other_type = sl(type_="tpu7y", topology="2x2x1")
    assert not keep(other_type, rep, verdict.demand, frozenset({Slot(0, 0)}))
    assert unwanted(rep, verdict, [other_type], []) == [other_type]
    verdict_for_slot = judge_slot(
        0, other_type, [Host("a", n(0))], rep, verdict.demand, TWO_TYPES, NOW
    )
    assert verdict_for_slot == SlotVerdict(
        Hold(
            "CapacityProvisioning",
            "slice qwen3-tpu-engine-0-0-30d2d711 is tpu7y 2x2x1, want tpu7x 2x2x1; it is "
            "replaced once no pod holds it",
        )
    )
    # The right type at the same slot is kept.
    assert unwanted(rep, verdict, [sl()], []) == []


# -- G3: what the sweep keeps -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("runners", "rows", "kept"),
    [
        pytest.param(single(), [row(0, active=0)], {Slot(0, 0)}, id="single: active ordinal 0"),
        pytest.param(single(), [row(0, active=1)], {Slot(0, 1)}, id="single: active ordinal 1"),
        pytest.param(
            single(),
            [row(0, "Updating", operation=update_op())],
            {Slot(0, 0), Slot(0, 1)},
            id="single with an operation: both ordinals",
        ),
        pytest.param(
            single(),
            [{"index": 0, "phase": "Ready"}],
            {Slot(0, 0)},
            id="single: row without activeOrdinal",
        ),
        pytest.param(
            single(),
            [row(0, "Deleting", operation=update_op())],
            set(),
            id="a Deleting row wants none",
        ),
        pytest.param(single(), [], set(), id="no rows want nothing"),
        pytest.param(single(), [row(0), row(3)], {Slot(0, 0), Slot(3, 0)}, id="two instances"),
        pytest.param(multi(), [row(0, active=1)], {Slot(0, 0)}, id="multi-pod: ordinal 0"),
        pytest.param(
            multi(),
            [row(0, "Updating", operation=update_op(surge=3))],
            {Slot(0, 0), Slot(3, 0)},
            id="multi-pod: the surge target counts",
        ),
    ],
)
def test_the_sweep_keeps_exactly_the_slices_of_wanted_slots(
    runners: list[JSON], rows: list[JSON], kept: set[Slot]
) -> None:
    rep = replica(runners, rows)
    verdict = verdict_of(rep)
    assert verdict.demand is not None
    topology = str(verdict.demand.topology)
    owned = [
        sl(slot=s, topology=topology) for s in (Slot(0, 0), Slot(0, 1), Slot(1, 0), Slot(3, 0))
    ]
    released = unwanted(rep, verdict, owned, [])
    assert [s.slot for s in released] == [s.slot for s in owned if s.slot not in kept]


@pytest.mark.parametrize(
    ("found", "kept"),
    [
        pytest.param(sl(), True, id="wanted slot, its name, the demand's shape"),
        pytest.param(sl(n(0), slot=None), False, id="labels that name no slot"),
        pytest.param(sl(n(0), slot=Slot(1, 0)), False, id="labels name another slot than the name"),
        pytest.param(sl(f"{NAME}-0-0-deadbeef"), False, id="another hash's name"),
        pytest.param(sl(topology="2x2x2"), False, id="another topology"),
        pytest.param(sl(type_="tpu7y"), False, id="another type"),
    ],
)
def test_a_slice_is_kept_only_with_a_wanted_slot_its_name_and_the_demands_shape(
    found: SliceInfo, kept: bool
) -> None:
    rep = replica(single(), [row(0), row(1)])
    verdict = verdict_of(rep)
    wanted = frozenset({Slot(0, 0), Slot(1, 0)})
    assert keep(found, rep, verdict.demand, wanted) is kept
    assert unwanted(rep, verdict, [found], []) == ([] if kept else [found])


def test_no_slice_is_kept_without_a_demand() -> None:
    rep = replica(single(), [row(0)])
    assert not keep(sl(), rep, None, frozenset({Slot(0, 0)}))


@pytest.mark.parametrize(
    ("pods", "is_pinned"),
    [
        pytest.param([pod("p", n(0))], True, id="a running pod names it"),
        pytest.param([pod("p", n(0), terminating=True)], True, id="a deleting pod still pins"),
        pytest.param([pod("p", n(0), node="")], True, id="an unbound pod pins"),
        pytest.param([pod("p", n(0), terminal=True)], False, id="a finished pod does not"),
        pytest.param(
            [pod("p", n(0), terminal=True, terminating=True)],
            False,
            id="a finished deleting pod does not",
        ),
        pytest.param([pod("p", n(1))], False, id="a pod naming another slice"),
        pytest.param([pod("p")], False, id="an unconfined pod"),
        pytest.param([], False, id="no pods"),
    ],
)
def test_a_slice_named_by_an_unfinished_pod_of_the_component_is_pinned(
    pods: list[Pod], is_pinned: bool
) -> None:
    assert pinned(n(0), pods) is is_pinned
    rep = replica(single(), [row(1)])  # slot (0, 0) is not wanted any more
    assert unwanted(rep, verdict_of(rep), [sl()], pods) == ([] if is_pinned else [sl()])


@pytest.mark.parametrize(
    ("rep", "provision_only"),
    [
        pytest.param(replica(single(opt_in=None), [row(0)]), BOTH_PROVISION_ONLY, id="opted out"),
        pytest.param(
            replica(single(opt_in="false"), [row(0)]), BOTH_PROVISION_ONLY, id="opted out by false"
        ),
        pytest.param(replica(single(), [row(0)]), frozenset(), id="no demand: a static pool"),
    ],
)
def test_a_replica_without_a_demand_releases_every_slice_it_owns(
    rep: Replica, provision_only: frozenset[str]
) -> None:
    verdict = validate(rep, CONFIG, provision_only)
    assert verdict == Verdict()
    ours = [sl(slot=Slot(1, 0)), sl(slot=Slot(0, 0))]
    others = [
        sl(f"other-0-0-{HASH}", owner="someone-else"),
        sl(slot=Slot(2, 0), terminating=True),
    ]
    assert unwanted(rep, verdict, [*ours, *others], []) == [
        sl(slot=Slot(0, 0)),
        sl(slot=Slot(1, 0)),
    ]


def test_an_invalid_demand_releases_nothing() -> None:
    rep = replica(single(chips=3, requests=False), [row(1)])
    verdict = verdict_of(rep)
    assert verdict.error
    assert unwanted(rep, verdict, [sl(), sl(slot=Slot(0, 1), topology="2x2x2")], []) == []


def test_a_deleting_replica_releases_nothing_in_the_sweep() -> None:
    """G5: a deleting replica's Slices are teardown's."""
    rep = replica(single(), [row(1)], deleting=True)
    assert unwanted(rep, verdict_of(rep), [sl()], []) == []
    assert unwanted(rep, Verdict(), [sl()], []) == []


@pytest.mark.parametrize(
    "found",
    [
        pytest.param(sl(owner="someone-else"), id="another owner"),
        pytest.param(sl(owner=""), id="no owner label"),
        pytest.param(sl(terminating=True), id="terminating: on its way"),
    ],
)
def test_foreign_and_terminating_slices_are_never_swept(found: SliceInfo) -> None:
    rep = replica(single(opt_in=None), [])
    assert unwanted(rep, Verdict(), [found], []) == []


# -- G2: holders --------------------------------------------------------------------------------


def test_holders_are_other_workloads_unfinished_chip_pods_on_the_hosts_sorted() -> None:
    host_pods = [
        pod("indexer-1", namespace="tpu-batch"),
        pod("indexer-0", namespace="tpu-batch"),
        pod("trainer", namespace="ml", terminating=True),  # deleting pods still count
        pod("done", namespace="ml", terminal=True),
        pod("cpu-only", namespace="ml", chips=0),
        pod("ours", slice_name=n(0)),  # confined to this Slice
        pod("elsewhere", namespace="ml", slice_name=n(1)),  # confined to another Slice
    ]
    assert holders(n(0), host_pods) == [
        "ml/elsewhere",
        "ml/trainer",
        "tpu-batch/indexer-0",
        "tpu-batch/indexer-1",
    ]


def test_a_holder_is_named_once_however_often_it_is_listed() -> None:
    twice = [pod("indexer-0", namespace="tpu-batch"), pod("indexer-0", namespace="tpu-batch")]
    assert holders(n(0), twice) == ["tpu-batch/indexer-0"]


def _pod_json(
    phase: str, chips: object, selector: JSON | None = None, deleting: bool = False
) -> JSON:
    meta: JSON = {"name": "indexer-0", "namespace": "tpu-batch", "uid": "u1"}
    if deleting:
        meta["deletionTimestamp"] = "2025-03-01T11:59:00Z"
    return {
        "metadata": meta,
        "spec": {
            "nodeName": "node-a",
            "nodeSelector": selector or {},
            "initContainers": [{"name": "init", "resources": {"limits": {TPU: 4}}}],
            "containers": [{"name": "c", "resources": {"limits": {TPU: chips}}}],
        },
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("obj", "held"),
    [
        pytest.param(_pod_json("Running", 4), True, id="running with chips"),
        pytest.param(_pod_json("Pending", "1500m"), True, id="pending, rounded up"),
        pytest.param(_pod_json("Running", 4, deleting=True), True, id="deleting"),
        pytest.param(_pod_json("Running", "lots"), True, id="a quantity that does not parse holds"),
        pytest.param(_pod_json("Running", 0), False, id="no chips; init containers do not count"),
        pytest.param(_pod_json("Succeeded", 4), False, id="succeeded"),
        pytest.param(_pod_json("Failed", 4), False, id="failed"),
        pytest.param(_pod_json("Running", 4, {SLICE: n(0)}), False, id="confined to this slice"),
    ],
)
def test_a_pod_read_from_the_api_holds_the_slice_per_g2(obj: JSON, held: bool) -> None:
    host_pod = Pod.from_json(obj, SLICE, TPU)
    assert holders(n(0), [host_pod]) == (["tpu-batch/indexer-0"] if held else [])


def test_a_held_slice_is_deferred_and_a_free_one_deleted() -> None:
    live = sl(rv="42")
    held = [pod("indexer-0", namespace="tpu-batch")]
    assert release_or_defer(live, held, with_version=True) == Defer(live, ("tpu-batch/indexer-0",))
    assert release_or_defer(live, [], with_version=True) == Delete(live, "42")
    assert release_or_defer(live, [], with_version=False) == Delete(live, "")


# -- confirm_sweep ------------------------------------------------------------------------------


def _sweep_replica(rows: list[JSON] | None = None) -> Replica:
    return replica(single(), rows if rows is not None else [row(1)])


@pytest.mark.parametrize(
    ("live", "rows", "pods"),
    [
        pytest.param(None, None, [], id="the slice is gone"),
        pytest.param(sl(uid="uid-recreated"), None, [], id="another UID: replaced"),
        pytest.param(sl(), [row(0), row(1)], [], id="wanted now"),
        pytest.param(sl(), None, [pod("p", n(0))], id="pinned now"),
        pytest.param(sl(terminating=True), None, [], id="terminating now"),
        pytest.param(sl(owner="someone-else"), None, [], id="not ours now"),
    ],
)
def test_a_sweep_is_dropped_when_the_live_values_no_longer_call_for_it(
    live: SliceInfo | None, rows: list[JSON] | None, pods: list[Pod]
) -> None:
    rep = _sweep_replica(rows)
    assert confirm_sweep(sl(), live, rep, verdict_of(rep), pods, []) is None


def test_a_confirmed_sweep_deletes_under_the_live_resource_version() -> None:
    rep = _sweep_replica()
    cached, live = sl(rv="41"), sl(rv="42")
    assert confirm_sweep(cached, live, rep, verdict_of(rep), [], []) == Delete(live, "42")


def test_a_confirmed_sweep_is_deferred_while_another_workload_holds_chips() -> None:
    rep = _sweep_replica()
    live = sl(rv="42")
    host_pods = [pod("indexer-0", namespace="tpu-batch"), pod("ours", slice_name=n(0))]
    assert confirm_sweep(sl(), live, rep, verdict_of(rep), [], host_pods) == Defer(
        live, ("tpu-batch/indexer-0",)
    )


def test_an_invalid_demand_confirms_no_sweep() -> None:
    rep = replica(single(chips=3, requests=False), [row(1)])
    assert confirm_sweep(sl(), sl(), rep, verdict_of(rep), [], []) is None


# -- G4, G5: teardown ---------------------------------------------------------------------------


def test_teardown_releases_every_slice_of_ours_without_a_resource_version() -> None:
    free = sl(slot=Slot(0, 0), rv="41")
    held = sl(slot=Slot(1, 0), rv="43")
    going = sl(slot=Slot(2, 0), terminating=True)
    foreign = sl(f"other-0-0-{HASH}", owner="someone-else")
    steps = teardown(
        [going, foreign, held, free],
        UID,
        {held.name: [pod("indexer-0", namespace="tpu-batch")], foreign.name: []},
    )
    assert steps == [
        Delete(free, ""),
        Defer(held, ("tpu-batch/indexer-0",)),
        Releasing(going),
    ]


def test_teardown_of_a_replica_without_slices_does_nothing() -> None:
    assert teardown([], UID, {}) == []
    assert teardown([sl(owner="someone-else")], UID, {}) == []


def test_teardown_keeps_a_slice_its_own_pods_still_run_on_until_the_deadline() -> None:
    """G4, G5: a pod of the replica itself on a Slice, terminating or not, keeps it (the
    engine may be serving through its grace period), before holders are even asked; a
    finished pod keeps nothing; past the deadline the Slice goes anyway (still deferred
    while other workloads hold chips)."""
    used = sl(slot=Slot(0, 0))
    held = sl(slot=Slot(1, 0))
    free = sl(slot=Slot(2, 0))
    own = [
        pod(f"{NAME}-0-default-0", slice_name=used.name, terminating=True),
        pod(f"{NAME}-1-default-0", slice_name=held.name),
        pod(f"{NAME}-2-default-0", slice_name=free.name, terminal=True),
    ]
    hosts = {held.name: [pod("indexer-0", namespace="tpu-batch")]}
    assert teardown([used, held, free], UID, hosts, own) == [
        InUse(used, (f"{NAME}-0-default-0",)),
        InUse(held, (f"{NAME}-1-default-0",)),
        Delete(free, ""),
    ]
    assert teardown([used, held, free], UID, hosts, own, past_deadline=True) == [
        Delete(used, ""),
        Defer(held, ("tpu-batch/indexer-0",)),
        Delete(free, ""),
    ]


# -- properties --------------------------------------------------------------------------------


@st.composite
def owned_slices(draw: st.DrawFn) -> list[SliceInfo]:
    out = []
    for i, (instance, ordinal) in enumerate(
        draw(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1)), max_size=6, unique=True))
    ):
        out.append(
            sl(
                slot=draw(st.sampled_from([Slot(instance, ordinal), None, Slot(instance + 1, 0)])),
                name=n(instance, ordinal),
                owner=draw(st.sampled_from([UID, UID, "someone-else", ""])),
                type_=draw(st.sampled_from(["tpu7x", "tpu7y"])),
                topology=draw(st.sampled_from(["2x2x1", "2x2x2"])),
                terminating=draw(st.booleans()),
                uid=f"uid-{i}",
            )
        )
    return out


@st.composite
def rows_strategy(draw: st.DrawFn) -> list[JSON]:
    return [
        row(
            i,
            draw(st.sampled_from(["Ready", "Updating", "Deleting"])),
            draw(st.sampled_from([0, 1])),
            draw(st.one_of(st.none(), st.just(update_op()), st.integers(0, 3).map(update_op))),
        )
        for i in sorted(draw(st.sets(st.integers(0, 3), max_size=3)))
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["single", "multi", "opted-out", "invalid"]),
    rows_strategy(),
    st.booleans(),
    owned_slices(),
    st.lists(
        st.builds(
            lambda name, i, o, terminating, terminal: pod(
                name, n(i, o), terminating=terminating, terminal=terminal
            ),
            st.sampled_from(["p0", "p1", "p2"]),
            st.integers(0, 3),
            st.integers(0, 1),
            st.booleans(),
            st.booleans(),
        ),
        max_size=4,
    ),
)
def test_the_sweep_never_releases_a_foreign_terminating_pinned_or_kept_slice(
    kind: str, rows: list[JSON], deleting: bool, owned: list[SliceInfo], pods: list[Pod]
) -> None:
    runners = {
        "single": single(),
        "multi": multi(),
        "opted-out": single(opt_in=None),
        "invalid": single(chips=3, requests=False),
    }[kind]
    rep = replica(runners, rows, deleting=deleting)
    verdict = verdict_of(rep)
    released = unwanted(rep, verdict, owned, pods)
    assert [s.name for s in released] == sorted(s.name for s in released)
    if deleting or verdict.error:
        assert released == []
    for s in released:
        assert s in owned
        assert s.owned_by(UID)
        assert not s.terminating
        assert not pinned(s.name, pods)
        assert not any(p.slice_name == s.name and not p.terminal for p in pods)
    if not deleting and not verdict.error and verdict.demand is None:
        for s in owned:
            if s.owned_by(UID) and not s.terminating and not pinned(s.name, pods):
                assert s in released, "C2: no demand wants no Slice"
    # Each released Slice, confirmed on the same values with no holder, is deleted.
    for s in released:
        assert confirm_sweep(s, s, rep, verdict, pods, []) == Delete(s, s.resource_version)


@pytest.mark.parametrize("runners", [single(), multi()], ids=["single-pod", "multi-pod"])
def test_an_instance_the_spec_wants_keeps_its_slice_before_its_row_is_stored(
    runners: list[JSON],
) -> None:
    """G3: "single-pod without a row [0]" (multi-pod always [0]): an Instance index below
    ``spec.replicas`` that has no row yet wants slot (i, 0), so its new Slice is not swept."""
    found = sl(topology="2x2x2" if runners == multi() else "2x2x1")
    rep = replica(runners, [], replicas=1)
    assert unwanted(rep, verdict_of(rep), [found], []) == []
    beyond = replica(runners, [], replicas=0)
    assert unwanted(beyond, verdict_of(beyond), [found], []) == [found]

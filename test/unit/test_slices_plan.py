"""The two passes that compose the slice reconcilers (B6, D1 to H4, I1 to I4):
``plan.gate_pass`` (demand, then provisioning, then gating, for the Instances about to get
pods) and ``plan.release_pass`` (release of unwanted Slices, then suspicion of lost ones)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ome.controllers.holds import Hold
from ome.controllers.slices.model import Event, Pod, Replica
from ome.controllers.slices.plan import (
    GateObservation,
    GatePlan,
    ReleaseObservation,
    ReleasePlan,
    gate_pass,
    release_pass,
)
from ome.controllers.slices.provisioning import Create
from ome.controllers.slices.readiness import Recycle
from ome.controllers.slices.validation import Verdict
from ome.tpuslice.hosts import Host
from ome.tpuslice.naming import Slot
from ome.tpuslice.placement import Demand
from ome.tpuslice.shape import Topology
from ome.tpuslice.slices import SliceInfo
from test.unit import slicekit
from test.unit.slicekit import (
    BAD,
    CAP,
    CONFIG,
    NAME,
    NOW,
    PROVISION_ONLY,
    RECYCLED,
    TPU7X,
    UID,
    create_op,
    n,
    row,
    single,
)

#: The replica with, unless given other rows, Instances 0 to 7 being created.
replica = partial(
    slicekit.replica, rows=[row(i, "Creating", operation=create_op()) for i in range(8)]
)
#: This file's pods are our replica's, started 30 seconds ago.
pod = partial(slicekit.pod, created=NOW - timedelta(seconds=30), replica=NAME)


def sl(name: str, *, slot: Slot | None = None, state: str = "ACTIVE", **kw: Any) -> SliceInfo:
    """``slicekit.sl`` at no slot unless given, its status True in an ACTIVE state, else False."""
    status = "True" if state.startswith("ACTIVE") else "False"
    return slicekit.sl(name, slot=slot, state=state, status=status, **kw)


def observe(
    rep: Replica,
    slots: dict[int, Slot],
    slices: Sequence[SliceInfo] = (),
    hosts: dict[str, tuple[Host, ...]] | None = None,
    *,
    provision_only: frozenset[str] | None = PROVISION_ONLY,
    creating: frozenset[str] = frozenset(),
    releasing: frozenset[str] = frozenset(),
) -> GateObservation:
    return GateObservation(
        replica=rep,
        config=CONFIG,
        slots=slots,
        provision_only=provision_only,
        slices={s.name: s for s in slices},
        hosts=hosts or {},
        creating=creating,
        releasing=releasing,
        now=NOW,
    )


# -- gate_pass ----------------------------------------------------------------------------------


def test_an_invalid_demand_withholds_every_instance_about_to_get_pods_with_a_warning() -> None:
    rep = replica(single(chips=2))
    ready = sl(n(1))
    obs = observe(rep, {2: Slot(2, 0), 1: Slot(1, 0)}, [ready], {ready.name: (Host("a", n(1)),)})
    assert gate_pass(obs) == GatePlan(
        Verdict(error=BAD),
        holds={1: Hold("SliceDemandInvalid", BAD), 2: Hold("SliceDemandInvalid", BAD)},
        events=[
            Event(
                "SliceDemandInvalid",
                f"OMENative component=engine instance=1 withheld: {BAD}",
                lasting="component=engine instance=1",
            ),
            Event(
                "SliceDemandInvalid",
                f"OMENative component=engine instance=2 withheld: {BAD}",
                lasting="component=engine instance=2",
            ),
        ],
    )


@pytest.mark.parametrize(
    ("rep", "provision_only", "slots"),
    [
        pytest.param(replica(single(opt_in=None)), PROVISION_ONLY, {0: Slot(0, 0)}, id="opted out"),
        pytest.param(
            replica(single(chips=2, opt_in=None)),
            PROVISION_ONLY,
            {0: Slot(0, 0)},
            id="opted out with a bad shape",
        ),
        pytest.param(replica(), frozenset(), {0: Slot(0, 0)}, id="a static pool"),
        pytest.param(replica(), PROVISION_ONLY, {}, id="no instance about to get pods"),
    ],
)
def test_without_a_demand_or_instances_nothing_is_held_created_or_confined(
    rep: Replica, provision_only: frozenset[str], slots: dict[int, Slot]
) -> None:
    ready = sl(n(0))
    obs = observe(
        rep, slots, [ready], {ready.name: (Host("a", n(0)),)}, provision_only=provision_only
    )
    plan = gate_pass(obs)
    assert plan == GatePlan(plan.verdict)
    assert not plan.verdict.error


def test_the_gate_pass_provisions_absent_slots_and_gates_existing_ones() -> None:
    rep = replica()
    ready = sl(n(2))
    activating = sl(n(3), state="ACTIVATING")
    foreign = sl(n(4), owner="someone-else")
    timed_out = sl(n(5), state="ACTIVATING", last_transition=NOW - timedelta(minutes=11, seconds=3))
    deleting = sl(n(6))
    slots = {i: Slot(i, 0) for i in range(7)}
    obs = observe(
        rep,
        slots,
        [ready, activating, foreign, timed_out, deleting],
        {n(2): (Host("a", n(2)),), n(6): (Host("f", n(6)),)},
        creating=frozenset({n(1)}),
        releasing=frozenset({n(6)}),
    )
    timeout_text = (
        f"slice {n(5)} is ACTIVATING for 11m3s, longer than the 10m0s ready timeout; {RECYCLED}"
    )
    conflict = f"slice is owned by another object: {n(4)}"
    assert gate_pass(obs) == GatePlan(
        Verdict(Demand(TPU7X, Topology((2, 2, 1)), 1, 1, 4)),
        holds={
            0: Hold(CAP, f"slice {n(0)} is waiting for partition assignment"),
            1: Hold(CAP, f"slice {n(1)} is waiting for partition assignment"),
            3: Hold(CAP, f"slice {n(3)} is ACTIVATING"),
            4: Hold(CAP, conflict),
            5: Hold(CAP, timeout_text),
            6: Hold(CAP, f"slice {n(6)} is being released"),
        },
        creates=[Create(0, Slot(0, 0), n(0))],
        recycles=[
            Recycle(
                5,
                timed_out,
                "SliceReadyTimeout",
                timeout_text,
                f"{timed_out.uid}: slice {n(5)} is ACTIVATING",
            )
        ],
        events=[
            Event(
                "SliceOwnershipConflict",
                f"OMENative component=engine instance=4 withheld: {conflict}",
                lasting="component=engine instance=4",
            )
        ],
        confine={2: n(2)},
        ready=[ready],
    )


def test_a_failed_node_read_still_provisions_a_valid_demand() -> None:
    plan = gate_pass(observe(replica(), {0: Slot(0, 0)}, provision_only=None))
    assert plan.creates == [Create(0, Slot(0, 0), n(0))]
    assert plan.holds == {0: Hold(CAP, f"slice {n(0)} is waiting for partition assignment")}


def test_a_slot_the_stored_rows_do_not_want_yet_waits_without_a_create() -> None:
    plan = gate_pass(observe(replica(rows=[]), {0: Slot(0, 0)}))
    assert plan.creates == []
    assert plan.holds == {0: Hold(CAP, f"slice {n(0)} is waiting for partition assignment")}


# -- release_pass -------------------------------------------------------------------------------


def release_observe(
    rep: Replica,
    owned: list[SliceInfo],
    pods: Sequence[Pod] = (),
    nodes: dict[str, Host | None] | None = None,
    releasing: frozenset[str] = frozenset(),
) -> ReleaseObservation:
    return ReleaseObservation(
        replica=rep,
        config=CONFIG,
        provision_only=PROVISION_ONLY,
        owned=tuple(owned),
        named={s.name: s for s in owned},
        pods=tuple(pods),
        nodes=nodes or {},
        releasing=releasing,
    )


def test_the_release_pass_releases_unwanted_slices_once_and_suspects_lost_ones() -> None:
    rep = replica(rows=[row(0, "Ready"), row(1, "Ready")])
    kept = sl(n(0), slot=Slot(0, 0))
    moved = sl(n(1), slot=Slot(1, 0))
    scaled_down = sl(n(2), slot=Slot(2, 0))
    already_going = sl(n(3), slot=Slot(3, 0))
    pods = [pod("p0", n(0), "node-0"), pod("p1", n(1), "node-1")]
    nodes: dict[str, Host | None] = {"node-0": Host("node-0", n(0)), "node-1": Host("node-1", "")}
    obs = release_observe(
        rep, [already_going, scaled_down, moved, kept], pods, nodes, frozenset({n(3)})
    )
    assert release_pass(obs) == ReleasePlan(
        Verdict(Demand(TPU7X, Topology((2, 2, 1)), 1, 1, 4)),
        releases=[scaled_down],
        suspects=[n(1)],
    )


def test_a_deleting_replica_gets_neither_releases_nor_suspects() -> None:
    rep = replica(rows=[row(0, "Ready")], deleting=True)
    pods = [pod("p0", n(0), "node-0")]
    obs = release_observe(rep, [sl(n(1), slot=Slot(1, 0))], pods, {"node-0": None})
    plan = release_pass(obs)
    assert plan.releases == [] and plan.suspects == []


def test_an_invalid_demand_releases_nothing_but_lost_slices_are_still_suspected() -> None:
    rep = replica(single(chips=2), rows=[row(0, "Ready")])
    pods = [pod("p0", n(0), "node-0")]
    obs = release_observe(rep, [sl(n(1), slot=Slot(1, 0))], pods, {"node-0": None})
    assert release_pass(obs) == ReleasePlan(Verdict(error=BAD), releases=[], suspects=[n(0)])


def test_an_opted_out_replica_releases_every_slice_it_owns() -> None:
    rep = replica(single(opt_in=None), rows=[row(0, "Ready")])
    owned = [sl(n(0), slot=Slot(0, 0)), sl(n(1), slot=Slot(1, 0))]
    plan = release_pass(release_observe(rep, owned))
    assert plan == ReleasePlan(Verdict(), releases=owned, suspects=[])


# -- properties ---------------------------------------------------------------------------------


@st.composite
def gate_observations(draw: st.DrawFn) -> GateObservation:
    chips = draw(st.sampled_from([4, 4, 2]))
    opt_in = draw(st.sampled_from(["true", "true", None]))
    rows = [
        row(i, draw(st.sampled_from(["Creating", "Deleting"])), operation=create_op())
        for i in sorted(draw(st.sets(st.integers(0, 5), max_size=5)))
    ]
    rep = replica(single(chips=chips, opt_in=opt_in), rows=rows, deleting=draw(st.booleans()))
    pending = draw(st.dictionaries(st.integers(0, 5), st.integers(0, 1), max_size=4))
    slots = {i: Slot(i, o) for i, o in pending.items()}
    names = [n(i, o) for i in range(6) for o in (0, 1)]
    slices = []
    for name in draw(st.lists(st.sampled_from(names), unique=True, max_size=6)):
        ago = draw(st.one_of(st.none(), st.integers(0, 3600)))
        slices.append(
            sl(
                name,
                owner=draw(st.sampled_from([UID, "someone-else"])),
                topology=draw(st.sampled_from(["2x2x1", "2x2x2"])),
                state=draw(st.sampled_from(["", "ACTIVE", "ACTIVATING"])),
                partitions=draw(st.sampled_from([(), ("p1",)])),
                last_transition=None if ago is None else NOW - timedelta(seconds=ago),
                terminating=draw(st.booleans()),
            )
        )
    hosts = {
        s.name: tuple(
            Host(f"node-{k}", s.name, draw(st.booleans()), draw(st.sampled_from(["True", "False"])))
            for k in range(draw(st.integers(0, 2)))
        )
        for s in slices
    }
    subset = st.sets(st.sampled_from(names), max_size=3).map(frozenset)
    return observe(
        rep,
        slots,
        slices,
        hosts,
        provision_only=draw(st.sampled_from([PROVISION_ONLY, frozenset(), None])),
        creating=draw(subset),
        releasing=draw(subset),
    )


@settings(max_examples=300, deadline=None)
@given(gate_observations())
def test_the_gate_pass_never_raises_and_never_confines_an_instance_it_holds(
    obs: GateObservation,
) -> None:
    plan = gate_pass(obs)
    assert plan == gate_pass(obs), "deterministic"
    assert not set(plan.holds) & set(plan.confine)
    assert set(plan.holds) | set(plan.confine) <= set(obs.slots)
    assert all(
        h.token in ("CapacityProvisioning", "SliceDemandInvalid") for h in plan.holds.values()
    )
    if plan.verdict.error:
        assert set(plan.holds) == set(obs.slots)
        assert all(h.token == "SliceDemandInvalid" for h in plan.holds.values())
        assert not (plan.creates or plan.recycles or plan.confine)
    elif plan.verdict.demand is None:
        assert plan == GatePlan(plan.verdict)
    else:
        assert set(plan.holds) | set(plan.confine) == set(obs.slots), "every Instance answered"
    for c in plan.creates:
        assert c.index in plan.holds
        assert c.name not in obs.slices and c.name not in obs.creating
    for index, name in plan.confine.items():
        found = obs.slices[name]
        assert found.owned_by(UID) and not found.terminating and name not in obs.releasing
        assert found.partitions and name == n(obs.slots[index].instance, obs.slots[index].ordinal)
    for recycle in plan.recycles:
        assert recycle.index in plan.holds and recycle.slice.owned_by(UID)
    for event in plan.events:
        assert event.reason in ("SliceDemandInvalid", "SliceOwnershipConflict")


@settings(max_examples=200, deadline=None)
@given(gate_observations(), st.sets(st.sampled_from([n(i) for i in range(6)]), max_size=3))
def test_the_release_pass_releases_only_our_slices_not_already_on_their_way(
    gate_obs: GateObservation, releasing: set[str]
) -> None:
    owned = list(gate_obs.slices.values())
    obs = release_observe(gate_obs.replica, owned, releasing=frozenset(releasing))
    plan = release_pass(obs)
    for s in plan.releases:
        assert s in owned and s.owned_by(UID) and not s.terminating
        assert s.name not in releasing
    if gate_obs.replica.deleting:
        assert plan.releases == [] and plan.suspects == []

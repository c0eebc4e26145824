"""Readiness gating (E1 to E6, F1, F2, I2): why a slot's pods wait for its Slice
(``readiness.wait_reason``, in E3's order), how long a Slice has waited (``readiness.waited``,
E5), and what the gate says of one slot (``readiness.judge_slot``) and of every Instance about
to get pods (``readiness.judge_slots``): holds, recycles, ownership conflicts and confinement,
every text verbatim."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ome.controllers.holds import HELD_LOOK_AGAIN, Hold
from ome.controllers.slices.model import Event
from ome.controllers.slices.readiness import (
    Recycle,
    SlotVerdict,
    SlotVerdicts,
    judge_slot,
    judge_slots,
    wait_reason,
    waited,
)
from ome.tpuslice.hosts import Host
from ome.tpuslice.naming import Slot
from ome.tpuslice.slices import SliceInfo
from ome.tpuslice.types import Config
from test.unit import slicekit
from test.unit.slicekit import (
    CAP,
    CONFIG,
    JSON,
    NOW,
    ONE_HOST,
    READY_STATES,
    RECYCLED,
    TPU_TOLERATION,
    TWO_HOSTS,
    UID,
    UNSCHEDULABLE_TOLERATION,
    N,
    host,
    multi,
    n,
    single,
    sl,
    template,
)

NO_TIMEOUT = replace(CONFIG, slice=replace(CONFIG.slice, ready_timeout=None))
HOUR_TIMEOUT = replace(CONFIG, slice=replace(CONFIG.slice, ready_timeout=timedelta(hours=1)))
#: The replica with one Instance, 0, being created.
replica = partial(
    slicekit.replica, rows=[{"index": 0, "phase": "Creating", "operation": {}}], replicas=1
)


def hold(text: str) -> Hold:
    return Hold(CAP, text)


# -- E3 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("found", "reason"),
    [
        pytest.param(
            sl(owner="someone-else", terminating=True, type_="x"),
            ("conflict", f"slice is owned by another object: {N}"),
            id="not ours first even if terminating and of the wrong type",
        ),
        pytest.param(
            sl(owner=""),
            ("conflict", f"slice is owned by another object: {N}"),
            id="an empty owner label is not ours",
        ),
        pytest.param(
            sl(terminating=True, type_="x"),
            ("terminating", f"slice {N} is being released"),
            id="terminating",
        ),
        pytest.param(
            sl(type_="tpu7y"),
            (
                "wrong-shape",
                f"slice {N} is tpu7y 2x2x1, want tpu7x 2x2x1; it is replaced once no pod holds it",
            ),
            id="wrong type",
        ),
        pytest.param(
            sl(topology="2x2x2", state="", status="", partitions=()),
            (
                "wrong-shape",
                f"slice {N} is tpu7x 2x2x2, want tpu7x 2x2x1; it is replaced once no pod holds it",
            ),
            id="wrong topology",
        ),
        pytest.param(
            sl(state="", status="", partitions=()),
            ("not-ready", f"slice {N} is waiting for partition assignment"),
            id="no state, no partitions",
        ),
        pytest.param(
            sl(state="", status="False", message="queued", partitions=()),
            ("not-ready", f"slice {N} is waiting for partition assignment"),
            id="empty reason, no partitions",
        ),
        pytest.param(
            sl(state="", status=""),
            ("not-ready", f"slice {N} has partitions assigned and no state yet"),
            id="partitions, no state",
        ),
        pytest.param(
            sl(state="ACTIVE", status="Unknown"),
            ("not-ready", f"slice {N} is ACTIVE, but its readiness is unknown"),
            id="unknown",
        ),
        pytest.param(
            sl(state="ACTIVATING", status="Unknown", message="lost contact"),
            ("not-ready", f"slice {N} is ACTIVATING, but its readiness is unknown: lost contact"),
            id="unknown with message",
        ),
        pytest.param(
            sl(state="ACTIVATING", status="False"),
            ("not-ready", f"slice {N} is ACTIVATING"),
            id="not a ready state",
        ),
        pytest.param(
            sl(state="FAILED", status="False", message="no capacity"),
            ("not-ready", f"slice {N} is FAILED: no capacity"),
            id="not a ready state, with message",
        ),
        pytest.param(
            sl(state="ACTIVATING", status="False", partitions=()),
            ("not-ready", f"slice {N} is ACTIVATING"),
            id="a state without partitions",
        ),
        pytest.param(sl(state="ACTIVE_DEGRADED", status="True"), None, id="ready"),
        pytest.param(sl(state="ACTIVE", status="False"), None, id="ready with status False"),
    ],
)
def test_a_slot_waits_for_its_slice_and_says_why_in_e3_order(
    found: SliceInfo, reason: tuple[str, str] | None
) -> None:
    assert wait_reason(found, UID, ONE_HOST, READY_STATES) == reason


def test_a_replica_without_a_uid_owns_no_slice() -> None:
    assert wait_reason(sl(owner=""), "", ONE_HOST, READY_STATES) == (
        "conflict",
        f"slice is owned by another object: {N}",
    )


# -- E5: waited --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        pytest.param(
            sl(created=NOW - timedelta(hours=2), last_transition=NOW - timedelta(minutes=3)),
            timedelta(minutes=3),
            id="since the ready condition's last transition",
        ),
        pytest.param(
            sl(created=NOW - timedelta(minutes=11, seconds=3), last_transition=None),
            timedelta(minutes=11, seconds=3),
            id="since creation without a condition",
        ),
        pytest.param(sl(created=None, last_transition=None), None, id="neither known"),
    ],
)
def test_the_wait_is_measured_from_the_last_transition_or_else_the_creation(
    found: SliceInfo, expected: timedelta | None
) -> None:
    assert waited(found, NOW) == expected


# -- judge_slot: E3 holds ---------------------------------------------------------------------


def test_a_foreign_slice_at_our_name_holds_the_slot_with_an_ownership_conflict() -> None:
    found = sl(owner="someone-else")
    text = f"slice is owned by another object: {N}"
    verdict = judge_slot(3, found, [host("a")], replica(), ONE_HOST, CONFIG, NOW)
    assert verdict == SlotVerdict(
        hold=Hold(CAP, text),
        event=Event(
            "SliceOwnershipConflict",
            f"OMENative component=engine instance=3 withheld: slice is owned by another object: {N}",
            lasting="component=engine instance=3",
        ),
    )
    assert verdict.event is not None and verdict.event.on == "service"


def test_a_foreign_slice_is_a_conflict_even_while_a_delete_of_that_name_is_in_flight() -> None:
    verdict = judge_slot(0, sl(owner="x"), [], replica(), ONE_HOST, CONFIG, NOW, releasing=True)
    assert verdict.hold == hold(f"slice is owned by another object: {N}")
    assert verdict.event is not None and verdict.event.reason == "SliceOwnershipConflict"


@pytest.mark.parametrize(
    ("found", "releasing"),
    [
        pytest.param(sl(), True, id="our delete is in flight"),
        pytest.param(sl(terminating=True), False, id="terminating"),
        pytest.param(
            sl(terminating=True, state="ACTIVATING", last_transition=NOW - timedelta(hours=1)),
            False,
            id="terminating past the ready timeout",
        ),
    ],
)
def test_a_slice_being_released_holds_its_slot(found: SliceInfo, releasing: bool) -> None:
    verdict = judge_slot(
        0, found, [host("a")], replica(), ONE_HOST, CONFIG, NOW, releasing=releasing
    )
    assert verdict == SlotVerdict(hold(f"slice {N} is being released"))


def test_a_wrong_topology_slice_holds_and_is_never_timed_out() -> None:
    found = sl(topology="2x2x2", state="ACTIVATING", last_transition=NOW - timedelta(hours=5))
    verdict = judge_slot(0, found, [], replica(), ONE_HOST, CONFIG, NOW)
    assert verdict == SlotVerdict(
        hold(f"slice {N} is tpu7x 2x2x2, want tpu7x 2x2x1; it is replaced once no pod holds it")
    )


# -- judge_slot: E4, E5 -------------------------------------------------------------------------


def test_a_timed_out_slices_hold_carries_the_full_ready_timeout_text() -> None:
    found = sl(
        state="ACTIVATING",
        status="False",
        last_transition=NOW - timedelta(minutes=11, seconds=3),
    )
    text = (
        f"slice {N} is ACTIVATING for 11m3s, longer than the 10m0s ready timeout; it is "
        "released and provisioned again once no pod holds it"
    )
    assert text == (
        "slice qwen3-tpu-engine-0-0-30d2d711 is ACTIVATING for 11m3s, longer than the 10m0s "
        "ready timeout; it is released and provisioned again once no pod holds it"
    )
    verdict = judge_slot(0, found, [], replica(), ONE_HOST, CONFIG, NOW)
    assert verdict == SlotVerdict(
        hold=Hold(CAP, text),
        recycle=Recycle(
            0, found, "SliceReadyTimeout", text, f"{found.uid}: slice {N} is ACTIVATING"
        ),
    )


@pytest.mark.parametrize(
    ("found", "config", "text", "recycled"),
    [
        pytest.param(
            sl(
                state="ACTIVATING",
                message="waiting for hosts",
                last_transition=NOW - timedelta(minutes=11, seconds=3),
            ),
            CONFIG,
            f"slice {N} is ACTIVATING: waiting for hosts for 11m3s, longer than the 10m0s "
            f"ready timeout; {RECYCLED}",
            True,
            id="the E3 reason with its message",
        ),
        pytest.param(
            sl(
                state="",
                status="",
                created=NOW - timedelta(minutes=11, seconds=3),
                last_transition=None,
            ),
            CONFIG,
            f"slice {N} has partitions assigned and no state yet for 11m3s, longer than the "
            f"10m0s ready timeout; {RECYCLED}",
            True,
            id="measured from creation without a condition",
        ),
        pytest.param(
            sl(
                state="ACTIVATING",
                created=NOW - timedelta(hours=2),
                last_transition=NOW - timedelta(minutes=5),
            ),
            CONFIG,
            f"slice {N} is ACTIVATING",
            False,
            id="measured from the last transition, not creation",
        ),
        pytest.param(
            sl(state="ACTIVATING", last_transition=NOW - timedelta(minutes=10)),
            CONFIG,
            f"slice {N} is ACTIVATING",
            False,
            id="never at exactly the timeout",
        ),
        pytest.param(
            sl(state="ACTIVATING", last_transition=NOW - timedelta(minutes=10, seconds=1)),
            CONFIG,
            f"slice {N} is ACTIVATING for 10m1s, longer than the 10m0s ready timeout; {RECYCLED}",
            True,
            id="one second past the timeout",
        ),
        pytest.param(
            sl(
                state="ACTIVE",
                status="Unknown",
                last_transition=NOW - timedelta(minutes=11, seconds=3),
            ),
            CONFIG,
            f"slice {N} is ACTIVE, but its readiness is unknown for 11m3s, longer than the "
            f"10m0s ready timeout; {RECYCLED}",
            True,
            id="unknown readiness times out",
        ),
        pytest.param(
            sl(state="ACTIVATING", partitions=(), last_transition=NOW - timedelta(hours=3)),
            CONFIG,
            f"slice {N} is ACTIVATING",
            False,
            id="never without partitions (E4)",
        ),
        pytest.param(
            sl(state="", status="", partitions=(), created=NOW - timedelta(hours=3)),
            CONFIG,
            f"slice {N} is waiting for partition assignment",
            False,
            id="waiting for partitions is never timed out (E4)",
        ),
        pytest.param(
            sl(state="ACTIVATING", last_transition=NOW - timedelta(hours=3)),
            NO_TIMEOUT,
            f"slice {N} is ACTIVATING",
            False,
            id="never without a timeout",
        ),
        pytest.param(
            sl(state="ACTIVATING", created=None, last_transition=None),
            CONFIG,
            f"slice {N} is ACTIVATING",
            False,
            id="never without a known time",
        ),
        pytest.param(
            sl(state="ACTIVATING", last_transition=NOW - timedelta(hours=1, seconds=1)),
            HOUR_TIMEOUT,
            f"slice {N} is ACTIVATING for 1h0m1s, longer than the 1h0m0s ready timeout; {RECYCLED}",
            True,
            id="durations print as Go does",
        ),
    ],
)
def test_a_slice_with_partitions_short_of_ready_past_the_timeout_is_recycled(
    found: SliceInfo, config: Config, text: str, recycled: bool
) -> None:
    verdict = judge_slot(2, found, [], replica(), ONE_HOST, config, NOW)
    assert verdict.hold == Hold(CAP, text)
    # The gist is the Slice and its E3 reason: a longer wait is no news.
    gist = f"{found.uid}: {text.rsplit(' for ', 1)[0]}"
    assert verdict.recycle == (
        Recycle(2, found, "SliceReadyTimeout", text, gist) if recycled else None
    )
    assert verdict.event is None
    assert not verdict.ready


def test_a_ready_slice_without_partitions_waits_for_partition_assignment() -> None:
    found = sl(
        state="ACTIVE", status="True", partitions=(), last_transition=NOW - timedelta(hours=2)
    )
    verdict = judge_slot(0, found, [], replica(), ONE_HOST, CONFIG, NOW)
    assert verdict == SlotVerdict(
        hold("slice qwen3-tpu-engine-0-0-30d2d711 is waiting for partition assignment")
    )
    assert verdict.recycle is None and not verdict.ready


# -- judge_slot: E6, F --------------------------------------------------------------------------


def test_host_availability_comes_before_the_visible_host_count() -> None:
    rep = replica(multi())
    found = sl(topology="2x2x2")
    hosts = [host("gke-tpu-pool-node-3", cordoned=True)]
    text = (
        f"slice {N} is ACTIVE, but node gke-tpu-pool-node-3 is cordoned; it is released and "
        "provisioned again once no pod holds it"
    )
    verdict = judge_slot(0, found, hosts, rep, TWO_HOSTS, CONFIG, NOW)
    assert verdict == SlotVerdict(
        hold(text), Recycle(0, found, "SliceHostUnavailable", text, f"{found.uid}: {text}")
    )
    assert "only 1 of its 2 hosts" not in verdict.hold.message  # type: ignore[union-attr]


def test_a_host_is_usable_only_if_every_pod_tolerates_it() -> None:
    rep = replica(
        multi(leader=template("2x2x2", tolerations=[TPU_TOLERATION, UNSCHEDULABLE_TOLERATION]))
    )
    assert len(rep.tolerations) == 2
    found = sl(topology="2x2x2")
    hosts = [host("a", cordoned=True), host("b")]
    text = f"slice {N} is ACTIVE, but node a is cordoned; {RECYCLED}"
    verdict = judge_slot(0, found, hosts, rep, TWO_HOSTS, CONFIG, NOW)
    assert verdict == SlotVerdict(
        hold(text), Recycle(0, found, "SliceHostUnavailable", text, f"{found.uid}: {text}")
    )
    # Once every pod tolerates the cordon, the Slice is ready.
    both = replica(multi(tolerations=[UNSCHEDULABLE_TOLERATION]))
    assert judge_slot(0, found, hosts, both, TWO_HOSTS, CONFIG, NOW) == SlotVerdict(ready=True)


@pytest.mark.parametrize(
    ("state", "hosts", "reasons"),
    [
        pytest.param(
            "ACTIVE",
            [host("b", ready="False"), host("a", cordoned=True)],
            "node a is cordoned, node b is not ready",
            id="sorted",
        ),
        pytest.param(
            "ACTIVE_DEGRADED",
            [host("a"), host("c", ready="Unknown")],
            "node c is unreachable",
            id="unreachable",
        ),
        pytest.param(
            "ACTIVE",
            [host("a", cordoned=True, ready=""), host("b")],
            "node a is cordoned, node a is not ready",
            id="cordoned and without a Ready condition",
        ),
        pytest.param(
            "ACTIVE",
            [host("a", cordoned=True, ready="Unknown"), host("b", ready="False")],
            "node a is cordoned, node a is unreachable, node b is not ready",
            id="three reasons",
        ),
    ],
)
def test_a_ready_slice_with_a_host_its_pods_cannot_use_is_recycled(
    state: str, hosts: list[Host], reasons: str
) -> None:
    found = sl(topology="2x2x2", state=state)
    text = f"slice {N} is {state}, but {reasons}; it is released and provisioned again once no pod holds it"
    verdict = judge_slot(1, found, hosts, replica(multi()), TWO_HOSTS, CONFIG, NOW)
    assert verdict == SlotVerdict(
        hold(text), Recycle(1, found, "SliceHostUnavailable", text, f"{found.uid}: {text}")
    )


@pytest.mark.parametrize(
    ("hosts", "found"),
    [
        pytest.param([host("a")], 1, id="one of two"),
        pytest.param([], 0, id="none yet"),
    ],
)
def test_a_ready_slice_whose_hosts_are_not_all_visible_waits_without_an_event(
    hosts: list[Host], found: int
) -> None:
    verdict = judge_slot(0, sl(topology="2x2x2"), hosts, replica(multi()), TWO_HOSTS, CONFIG, NOW)
    assert verdict == SlotVerdict(
        hold(f"slice {N} is ACTIVE, but only {found} of its 2 hosts are visible yet")
    )


@pytest.mark.parametrize(
    ("tolerations", "ready"),
    [
        pytest.param([TPU_TOLERATION], False, id="the tpu toleration alone"),
        pytest.param([UNSCHEDULABLE_TOLERATION], True, id="tolerates the cordon"),
        pytest.param([{"operator": "Exists"}], True, id="tolerates everything"),
        pytest.param(
            [{**UNSCHEDULABLE_TOLERATION, "effect": "NoExecute"}],
            False,
            id="another effect",
        ),
        pytest.param(
            [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
            True,
            id="Equal with an empty value",
        ),
        pytest.param(
            [{"key": "node.kubernetes.io/unschedulable", "value": "yes", "effect": "NoSchedule"}],
            False,
            id="Equal with another value",
        ),
    ],
)
def test_a_cordoned_host_is_usable_when_the_pods_tolerate_the_unschedulable_taint(
    tolerations: list[JSON], ready: bool
) -> None:
    verdict = judge_slot(
        0,
        sl(),
        [host("a", cordoned=True)],
        replica(single(tolerations=tolerations)),
        ONE_HOST,
        CONFIG,
        NOW,
    )
    assert verdict.ready is ready
    assert (verdict.recycle is None) is ready


def test_a_ready_slice_with_every_host_visible_and_usable_confines_the_pods() -> None:
    verdict = judge_slot(
        0, sl(topology="2x2x2"), [host("a"), host("b")], replica(multi()), TWO_HOSTS, CONFIG, NOW
    )
    assert verdict == SlotVerdict(ready=True)


# -- judge_slots --------------------------------------------------------------------------------


def test_the_gate_judges_each_instance_whose_slice_exists_and_confines_the_ready_ones() -> None:
    rep = replica(single())
    ready = sl(n(0))
    activating = sl(n(1), state="ACTIVATING")
    timed_out = sl(n(2), state="ACTIVATING", last_transition=NOW - timedelta(minutes=11, seconds=3))
    foreign = sl(n(3), owner="someone-else")
    broken = sl(n(5))
    slots = {i: Slot(i, 0) for i in (5, 4, 3, 2, 1, 0)}
    slices = {s.name: s for s in (ready, activating, timed_out, foreign, broken)}
    hosts = {
        n(0): (host("a", slice_name=n(0)),),
        n(5): (host("e", slice_name=n(5), cordoned=True),),
    }
    out = judge_slots(rep, ONE_HOST, slots, slices, hosts, frozenset(), CONFIG, NOW)
    timeout_text = (
        f"slice {n(2)} is ACTIVATING for 11m3s, longer than the 10m0s ready timeout; {RECYCLED}"
    )
    host_text = f"slice {n(5)} is ACTIVE, but node e is cordoned; {RECYCLED}"
    assert out == SlotVerdicts(
        holds={
            1: hold(f"slice {n(1)} is ACTIVATING"),
            2: hold(timeout_text),
            3: hold(f"slice is owned by another object: {n(3)}"),
            5: hold(host_text),
        },
        recycles=[
            Recycle(
                2,
                timed_out,
                "SliceReadyTimeout",
                timeout_text,
                f"{timed_out.uid}: slice {n(2)} is ACTIVATING",
            ),
            Recycle(5, broken, "SliceHostUnavailable", host_text, f"{broken.uid}: {host_text}"),
        ],
        events=[
            Event(
                "SliceOwnershipConflict",
                f"OMENative component=engine instance=3 withheld: slice is owned by another "
                f"object: {n(3)}",
                lasting="component=engine instance=3",
            )
        ],
        confine={0: n(0)},
        ready=[ready],
    )
    assert 4 not in out.holds, "a slot without a Slice is provisioning's"


def test_the_gate_holds_a_slice_whose_delete_is_in_flight() -> None:
    slices = {N: sl()}
    out = judge_slots(
        replica(), ONE_HOST, {0: Slot(0, 0)}, slices, {N: (host("a"),)}, frozenset({N}), CONFIG, NOW
    )
    assert out == SlotVerdicts(holds={0: hold(f"slice {N} is being released")})


def test_a_surge_pods_slot_is_gated_on_its_own_slice() -> None:
    rep = replica(single())
    active, surge = sl(n(0, 0)), sl(n(0, 1), state="ACTIVATING")
    out = judge_slots(
        rep,
        ONE_HOST,
        {0: Slot(0, 1)},
        {active.name: active, surge.name: surge},
        {active.name: (host("a", slice_name=active.name),)},
        frozenset(),
        CONFIG,
        NOW,
    )
    assert out == SlotVerdicts(holds={0: hold(f"slice {n(0, 1)} is ACTIVATING")})


# -- properties --------------------------------------------------------------------------------


@st.composite
def slices(draw: st.DrawFn) -> SliceInfo:
    ago = draw(st.one_of(st.none(), st.integers(0, 7200).map(lambda s: NOW - timedelta(seconds=s))))
    return sl(
        owner=draw(st.sampled_from([UID, "someone-else", ""])),
        type_=draw(st.sampled_from(["tpu7x", "tpu7y"])),
        topology=draw(st.sampled_from(["2x2x1", "2x2x2"])),
        state=draw(st.sampled_from(["", "ACTIVE", "ACTIVE_DEGRADED", "ACTIVATING", "FAILED"])),
        status=draw(st.sampled_from(["", "True", "False", "Unknown"])),
        message=draw(st.sampled_from(["", "queued"])),
        partitions=draw(st.sampled_from([(), ("p1",), ("p1", "p2")])),
        terminating=draw(st.booleans()),
        created=draw(st.one_of(st.none(), st.just(NOW - timedelta(hours=3)))),
        last_transition=ago,
    )


hosts_strategy = st.lists(
    st.builds(
        Host,
        st.sampled_from(["a", "b", "c"]),
        st.just(N),
        st.booleans(),
        st.sampled_from(["True", "False", "Unknown", ""]),
    ),
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(
    slices(),
    hosts_strategy,
    st.booleans(),
    st.booleans(),
    st.sampled_from([CONFIG, NO_TIMEOUT]),
    st.sampled_from([[TPU_TOLERATION], [UNSCHEDULABLE_TOLERATION], [{"operator": "Exists"}]]),
)
def test_judge_slot_holds_or_confines_and_recycles_only_what_e5_and_e6_allow(
    found: SliceInfo,
    hosts: list[Host],
    two_hosts: bool,
    releasing: bool,
    config: Config,
    tolerations: list[JSON],
) -> None:
    demand = TWO_HOSTS if two_hosts else ONE_HOST
    rep = replica(multi(tolerations=tolerations) if two_hosts else single(tolerations=tolerations))
    verdict = judge_slot(0, found, hosts, rep, demand, config, NOW, releasing)
    assert (verdict.hold is None) == verdict.ready
    if verdict.hold is not None:
        assert verdict.hold.token == CAP
    if verdict.ready:
        assert found.owned_by(UID) and not found.terminating and not releasing
        assert (found.slice_type, found.topology) == ("tpu7x", str(demand.topology))
        assert found.state in READY_STATES and found.status != "Unknown"
        assert found.partitions and len(hosts) >= demand.hosts
        assert verdict.recycle is None and verdict.event is None
    if verdict.event is not None:
        assert verdict.event.reason == "SliceOwnershipConflict"
        assert not found.owned_by(UID)
    if verdict.recycle is not None:
        recycle = verdict.recycle
        assert verdict.hold is not None and verdict.hold.message == recycle.text
        assert recycle.slice == found and recycle.index == 0
        assert found.owned_by(UID) and not found.terminating and not releasing
        assert found.partitions, "E4: a Slice without partitions is never recycled"
        assert recycle.text.endswith(f"; {RECYCLED}")
        if recycle.reason == "SliceReadyTimeout":
            assert config.slice.ready_timeout is not None
            since = found.last_transition or found.created
            assert since is not None and NOW - since > config.slice.ready_timeout
        else:
            assert recycle.reason == "SliceHostUnavailable"
            assert found.ready(READY_STATES)


def test_a_slice_short_of_ready_within_its_timeout_is_looked_at_again_as_any_held_one() -> None:
    """E5 with no event to announce it: a Slice that stays ACTIVATING changes nothing the
    replica watches, so while a ready timeout applies its routine hold is looked at again as
    often as any held Instance (``HELD_LOOK_AGAIN``), the pass that finds it timed out
    recycles it. A wait that never times out (no partitions yet: E4) waits on events."""
    found = sl(state="ACTIVATING", status="False", last_transition=NOW - timedelta(minutes=4))
    verdict = judge_slot(0, found, [], replica(), ONE_HOST, CONFIG, NOW)
    assert verdict.hold is not None and verdict.recycle is None
    assert verdict.hold.look_again == HELD_LOOK_AGAIN == 5.0
    later = NOW + timedelta(minutes=6, seconds=1)
    assert judge_slot(0, found, [], replica(), ONE_HOST, CONFIG, later).recycle is not None
    waiting = sl(state="ACTIVE", status="True", partitions=(), last_transition=NOW)
    held = judge_slot(0, waiting, [], replica(), ONE_HOST, CONFIG, NOW).hold
    assert held is not None and held.look_again is None

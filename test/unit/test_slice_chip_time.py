"""Chip time (K6, K7) from plain values and a fake clock: a Slice's phase, chips x seconds
added to the phase it was in however rarely anything scrapes, and only while leading."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from ome.controllers.slices.chiptime import (
    REOBSERVE_AFTER,
    ChipTime,
    Held,
    Phase,
    chips_of,
    held,
    phase_of,
)
from ome.controllers.slices.metrics import SliceGauge
from ome.tpuslice.slices import SliceInfo

READY = ("ACTIVE",)
SHAPE = {"slice_type": "tpu7x", "topology": "2x2x1"}
SECONDS = "ome_tpu_slice_chip_seconds_total"
IDLE = "ome_tpu_slice_idle_chips"


def info(**kw: object) -> SliceInfo:
    fields: dict = {"slice_type": "tpu7x", "topology": "2x2x1", "owner_uid": "r1", **kw}
    return SliceInfo(name="s", uid="u-s", **fields)


ACTIVE = {"state": "ACTIVE", "status": "True"}


@pytest.mark.parametrize(
    ("kw", "owned", "running", "phase"),
    [
        ({}, True, False, Phase.PROVISIONING),
        ({"state": "ACTIVATING", "status": "False"}, True, True, Phase.PROVISIONING),
        ({"state": "ACTIVE", "status": "Unknown"}, True, False, Phase.PROVISIONING),
        (ACTIVE, True, True, Phase.SERVING),
        (ACTIVE, True, False, Phase.IDLE),
        (ACTIVE, False, False, Phase.ORPHANED),
        ({}, False, False, Phase.ORPHANED),
        ({**ACTIVE, "terminating": True}, True, True, Phase.TERMINATING),
        ({"terminating": True}, False, False, Phase.TERMINATING),
    ],
)
def test_the_phase_of_a_slice(kw: dict, owned: bool, running: bool, phase: Phase) -> None:
    assert phase_of(info(**kw), owned, running, READY) == phase


def test_chips_come_from_the_topology_and_an_unparsable_one_holds_none() -> None:
    assert (chips_of("2x2x1"), chips_of("4x4x4"), chips_of("2x2"), chips_of("bad")) == (
        4,
        64,
        4,
        0,
    )


def k4_state(s: SliceInfo, owned: bool) -> str:
    """The state the ``ome_tpu_slices`` gauge gives the Slice."""
    registry = CollectorRegistry()
    owners = {s.owner_uid} if owned else set()
    registry.register(SliceGauge(lambda: [s], lambda: True, lambda: owners, READY))
    return next(
        sample.labels["state"]
        for family in registry.collect()
        if family.name == "ome_tpu_slices"
        for sample in family.samples
    )


K4 = {
    Phase.TERMINATING: "terminating",
    Phase.ORPHANED: "orphaned",
    Phase.PROVISIONING: "pending",
    Phase.SERVING: "ready",
    Phase.IDLE: "ready",
}


@given(
    state=st.sampled_from(["", "ACTIVE", "ACTIVATING", "FAILED"]),
    status=st.sampled_from(["", "True", "False", "Unknown"]),
    terminating=st.booleans(),
    owned=st.booleans(),
    running=st.booleans(),
)
def test_a_phase_agrees_with_the_slices_gauge_and_the_idle_chips(
    state: str, status: str, terminating: bool, owned: bool, running: bool
) -> None:
    s = info(state=state, status=status, terminating=terminating)
    h = held(s, owned, running, READY)
    assert K4[h.phase] == k4_state(s, owned)
    assert h.chips == 4
    assert h.idle == (s.ready(READY) and not running)
    assert h.phase != Phase.SERVING or running
    assert h.phase != Phase.IDLE or h.idle


@dataclass
class World:
    """What the caches show, a fake clock, and whether this replica leads."""

    now: float = 1000.0
    leading: bool = True
    slices: dict[str, Held] = field(default_factory=dict)
    reads: int = 0

    def clock(self) -> float:
        self.reads += 1
        return self.now

    def chip_time(self, shapes: tuple[tuple[str, str], ...] = ()) -> ChipTime:
        return ChipTime(
            self.slices.get, lambda: dict(self.slices), lambda: self.leading, shapes, self.clock
        )


def seen(phase: Phase, chips_topology: str = "2x2x1", idle: bool = False) -> Held:
    return Held("tpu7x", chips_topology, chips_of(chips_topology), phase, idle)


def scrape(chip_time: ChipTime) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(chip_time)
    return registry


def seconds(registry: CollectorRegistry, phase: Phase, topology: str = "2x2x1") -> float | None:
    labels = {"slice_type": "tpu7x", "topology": topology, "phase": phase.value}
    return registry.get_sample_value(SECONDS, labels)


def test_chips_times_seconds_exactly_in_the_phase_held() -> None:
    world = World(slices={"a": seen(Phase.SERVING), "b": seen(Phase.IDLE, "2x2x2", idle=True)})
    registry = scrape(world.chip_time())
    assert seconds(registry, Phase.SERVING) == 0.0  # accounting starts at the first collect
    world.now += 12.5
    assert seconds(registry, Phase.SERVING) == 4 * 12.5
    assert seconds(registry, Phase.IDLE, "2x2x2") == 8 * 12.5
    assert registry.get_sample_value(IDLE, {"slice_type": "tpu7x", "topology": "2x2x2"}) == 8
    assert registry.get_sample_value(IDLE, SHAPE) is None  # a serving Slice is not idle


def test_a_scrape_free_interval_is_counted_at_the_next_collect_in_the_phases_it_had() -> None:
    world = World(slices={"a": seen(Phase.PROVISIONING)})
    chip_time = world.chip_time()
    registry = scrape(chip_time)
    registry.get_sample_value(SECONDS, {})  # a collect: accounting starts at 1000
    world.now = 1030.0  # ready, and its pod runs: the events touch it, nobody scrapes
    world.slices["a"] = seen(Phase.SERVING)
    chip_time.touch(["a"])
    world.now = 1100.0  # its owner goes: an orphan, ready and idle
    world.slices["a"] = seen(Phase.ORPHANED, idle=True)
    chip_time.touch(["a"])
    world.now = 1400.0
    assert seconds(registry, Phase.PROVISIONING) == 4 * 30
    assert seconds(registry, Phase.SERVING) == 4 * 70
    assert seconds(registry, Phase.ORPHANED) == 4 * 300
    assert registry.get_sample_value(IDLE, SHAPE) == 4


def test_a_slice_counts_from_the_event_that_shows_it_to_the_one_that_shows_it_gone() -> None:
    world = World()
    chip_time = world.chip_time()
    registry = scrape(chip_time)
    assert registry.get_sample_value(SECONDS, {**SHAPE, "phase": "provisioning"}) is None
    world.now += 5
    world.slices["a"] = seen(Phase.PROVISIONING)
    chip_time.touch(["a"])
    world.now += 20
    world.slices.pop("a")
    chip_time.touch(["a"])
    world.now += 1000
    assert seconds(registry, Phase.PROVISIONING) == 4 * 20


def test_a_collect_adds_time_to_the_phases_the_events_keep_and_reobserves_every_minute() -> None:
    """A scrape does not observe every Slice again (the events keep each phase current), so
    a change no event announced is counted in its old phase until the next collect after
    ``REOBSERVE_AFTER``, which observes them all: the net for a missed event."""
    world = World(slices={"a": seen(Phase.PROVISIONING)})
    registry = scrape(world.chip_time())
    registry.get_sample_value(SECONDS, {})  # accounting starts at 1000, everything observed
    world.slices["a"] = seen(Phase.SERVING)  # no event says so
    world.now += 10
    assert seconds(registry, Phase.PROVISIONING) == 4 * 10
    assert seconds(registry, Phase.SERVING) is None
    world.now = 1000 + REOBSERVE_AFTER  # this collect observes it again
    assert seconds(registry, Phase.PROVISIONING) == 4 * REOBSERVE_AFTER
    world.now += 5
    assert seconds(registry, Phase.SERVING) == 4 * 5


def test_every_configured_shape_and_phase_starts_at_zero_and_idle_chips_at_zero() -> None:
    registry = scrape(World().chip_time((("tpu7x", "2x2x1"), ("tpu7x", "2x2x2"))))
    for topology in ("2x2x1", "2x2x2"):
        for phase in Phase:
            assert seconds(registry, phase, topology) == 0.0
        assert registry.get_sample_value(IDLE, {"slice_type": "tpu7x", "topology": topology}) == 0


def test_a_replica_that_does_not_lead_reports_nothing_and_counts_only_time_while_leading() -> None:
    world = World(leading=False, slices={"a": seen(Phase.SERVING)})
    chip_time = world.chip_time((("tpu7x", "2x2x1"),))
    registry = scrape(chip_time)
    chip_time.touch(["a"])
    world.now += 100
    assert [s for m in registry.collect() for s in m.samples] == []
    world.leading = True  # takes over: counts from its first collect or event
    chip_time.touch(["a"])
    world.now += 10
    assert seconds(registry, Phase.SERVING) == 40
    world.leading = False  # then a follower again: nothing reported, nothing added
    assert [s for m in registry.collect() for s in m.samples] == []
    world.now += 50
    chip_time.touch(["a"])
    world.leading = True
    assert seconds(registry, Phase.SERVING) == 40  # starts anew from here
    world.now += 1
    assert seconds(registry, Phase.SERVING) == 44


def test_overlapping_scrapes_and_events_count_each_second_once() -> None:
    """Every accounting reads the clock under the lock: however collects and events overlap,
    the total is the chips times the span from the first reading to the last."""
    readings: list[float] = []
    lock = threading.Lock()

    def clock() -> float:
        with lock:
            readings.append(float(len(readings)))
            return readings[-1]

    slices = {"a": seen(Phase.SERVING)}
    chip_time = ChipTime(slices.get, lambda: dict(slices), lambda: True, (), clock)
    registry = scrape(chip_time)

    def work(i: int) -> None:
        for _ in range(200):
            if i % 2:
                chip_time.touch(["a"])
            else:
                list(chip_time.collect())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = seconds(registry, Phase.SERVING)
    assert total == 4 * (readings[-1] - readings[0])
    assert len(readings) > 1000

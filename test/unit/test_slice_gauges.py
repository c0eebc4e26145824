"""The scrape-time Slice gauges, from plain SliceInfo values: the states, and the longest wait
for a partition that the capacity alert reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry

from ome.controllers.slices.metrics import SliceGauge
from ome.tpuslice.slices import SliceInfo

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
READY = ("ACTIVE",)


def info(name: str, owner: str = "r1", ago: float = 60.0, **kw: object) -> SliceInfo:
    fields: dict = {"slice_type": "tpu7x", "topology": "2x2x1", **kw}
    return SliceInfo(
        name=name, uid=f"u-{name}", owner_uid=owner, created=NOW - timedelta(seconds=ago), **fields
    )


def scrape(slices: list[SliceInfo], leading: bool = True) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(
        SliceGauge(lambda: slices, lambda: leading, lambda: {"r1"}, READY, lambda: NOW)
    )
    return registry


def test_the_longest_wait_for_a_partition_per_shape() -> None:
    registry = scrape(
        [
            info("waiting-long", ago=1800),
            info("waiting-short", ago=30),
            info("activating", ago=7200, partitions=("p1",), state="ACTIVATING"),
            info("ready", ago=9000, partitions=("p2",), state="ACTIVE", status="True"),
            info("big", ago=600, topology="2x2x2"),
            info("orphan", owner="gone", ago=99999),
            info("going", ago=99999, terminating=True),
        ]
    )
    wait = "ome_tpu_slice_capacity_wait_seconds"
    assert registry.get_sample_value(wait, {"slice_type": "tpu7x", "topology": "2x2x1"}) == 1800
    assert registry.get_sample_value(wait, {"slice_type": "tpu7x", "topology": "2x2x2"}) == 600
    state = {"slice_type": "tpu7x", "topology": "2x2x1"}
    assert registry.get_sample_value("ome_tpu_slices", {**state, "state": "pending"}) == 3
    assert registry.get_sample_value("ome_tpu_slices", {**state, "state": "ready"}) == 1
    assert registry.get_sample_value("ome_tpu_slices", {**state, "state": "orphaned"}) == 1
    assert registry.get_sample_value("ome_tpu_slices", {**state, "state": "terminating"}) == 1


def test_no_wait_series_while_nothing_waits_nor_on_a_replica_that_does_not_lead() -> None:
    assigned = info("activating", partitions=("p1",), state="ACTIVATING")
    names = {m.name for m in scrape([assigned]).collect() for _ in m.samples}
    assert names == {"ome_tpu_slices"}
    names = {m.name for m in scrape([info("waiting")], leading=False).collect() for _ in m.samples}
    assert names == set()

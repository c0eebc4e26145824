"""The TPU slice metrics (K1 to K5, and the orphans released, G6), with every configured
type x topology series pre-created at zero, as K2 says. Counting only: no decisions here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from ome.tpuslice.slices import SliceInfo
from ome.tpuslice.types import Config

LABELS = ("slice_type", "topology")
DURATION_BUCKETS = tuple(float(2**i) for i in range(15))  # 1, 2, 4 ... 16384


class SliceMetrics:
    def __init__(self, config: Config, registry: CollectorRegistry | None = None) -> None:
        reg = registry if registry is not None else REGISTRY
        self.created = Counter(
            "ome_tpu_slice_created_total", "TPU Slices created", LABELS, registry=reg
        )
        self.released = Counter(
            "ome_tpu_slice_released_total", "TPU Slices released", LABELS, registry=reg
        )
        self.release_deferred = Counter(
            "ome_tpu_slice_release_deferred_total",
            "Slice releases deferred because other workloads hold chips on its hosts",
            LABELS,
            registry=reg,
        )
        self.lost = Counter(
            "ome_tpu_slice_lost_total",
            "Slices lost from outside while pods ran on them",
            LABELS,
            registry=reg,
        )
        self.orphans_released = Counter(
            "ome_tpu_slice_orphans_released_total",
            "Orphaned Slices (no InferenceReplica has their owner UID) released",
            LABELS,
            registry=reg,
        )
        self.create_failures = Counter(
            "ome_tpu_slice_create_failures_total",
            "Slice creates that failed",
            (*LABELS, "reason"),
            registry=reg,
        )
        self.duration = Histogram(
            "ome_tpu_slice_provision_duration_seconds",
            "From a Slice's create to its first ready state",
            LABELS,
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        for acc in config.accelerators.values():
            for topology in acc.topologies:
                for family in (
                    self.created,
                    self.released,
                    self.release_deferred,
                    self.lost,
                    self.orphans_released,
                    self.duration,
                ):
                    family.labels(acc.slice_type, topology)


class SliceGauge:
    """Two gauges computed at scrape time from the Slice cache (Slices with an owner-UID
    label), and only while this replica leads (others report nothing):

    - ``ome_tpu_slices{slice_type,topology,state}``: terminating, orphaned (no replica has its
      owner UID), ready or pending;
    - ``ome_tpu_slice_capacity_wait_seconds{slice_type,topology}``: how long the pending Slice
      that has waited longest for a partition (none assigned yet) has waited, from its
      creation; no series while none waits. The alert on capacity waits reads it."""

    def __init__(
        self,
        slices: Callable[[], list[SliceInfo]],
        leading: Callable[[], bool],
        owner_uids: Callable[[], set[str]],
        ready_states: tuple[str, ...],
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._slices, self._leading, self._owner_uids = slices, leading, owner_uids
        self._ready_states = ready_states
        self._now = now

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "ome_tpu_slices", "OME's TPU Slices by state", labels=[*LABELS, "state"]
        )
        waits = GaugeMetricFamily(
            "ome_tpu_slice_capacity_wait_seconds",
            "How long the Slice waiting longest for a partition has waited, from its creation",
            labels=list(LABELS),
        )
        if self._leading():
            owners = self._owner_uids()
            now = self._now()
            counts: dict[tuple[str, str, str], int] = {}
            longest: dict[tuple[str, str], float] = {}
            for s in self._slices():
                if s.terminating:
                    kind = "terminating"
                elif s.owner_uid not in owners:
                    kind = "orphaned"
                elif s.ready(self._ready_states):
                    kind = "ready"
                else:
                    kind = "pending"
                    if not s.partitions and s.created is not None:
                        shape = (s.slice_type, s.topology)
                        waited = max(0.0, (now - s.created).total_seconds())
                        longest[shape] = max(longest.get(shape, 0.0), waited)
                key = (s.slice_type, s.topology, kind)
                counts[key] = counts.get(key, 0) + 1
            for (slice_type, topology, kind), n in sorted(counts.items()):
                family.add_metric([slice_type, topology, kind], n)
            for (slice_type, topology), waited in sorted(longest.items()):
                waits.add_metric([slice_type, topology], waited)
        yield family
        yield waits

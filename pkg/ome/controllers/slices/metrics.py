"""The TPU slice metrics of behaviour.md K, with every configured type x topology series
pre-created at zero, as the guide promises. Counting only: no decisions here."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

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
                    self.duration,
                ):
                    family.labels(acc.slice_type, topology)

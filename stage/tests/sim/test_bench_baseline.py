"""The bench's unit, the bare pod create, sampled on a real API server: each sample's pods
are deleted before it returns, so no burst, steady state or cold start meets them."""

from __future__ import annotations

import pytest
from test.cluster import Cluster, Kubectl

from ome.runtime.rest import Rest
from ome_sim import bench, system

pytestmark = pytest.mark.kubectl


class _Stage:
    """What ``baseline_samples`` uses of a bench stage: its client and its namespaces."""

    def __init__(self, rest: Rest) -> None:
        self.rest = rest

    def create_namespace(self, name: str) -> None:
        bench._create_ns(self.rest, name)


def test_each_sample_times_its_creates_and_leaves_no_pod(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    stage = _Stage(system.rest_from(cluster.kubeconfig, "ome-sim-bench-test/0"))
    first = bench.baseline_samples(stage, 0, samples=8)  # type: ignore[arg-type]
    again = bench.baseline_samples(stage, 1, samples=8)  # type: ignore[arg-type]
    assert len(first) == len(again) == 6  # the first quarter warms connections up
    assert all(0 < t < 10 for t in first + again)
    pods = kubectl("get", "pods", "-n", bench.BASELINE_NAMESPACE, "-o", "name").stdout
    assert pods.strip() == ""

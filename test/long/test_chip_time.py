"""Chip time over a minute of real time (K6; ``make long``, not ``make test``, which measures
the same over 10 s): a Ready service's Slice counts its chips times the 60 seconds as serving,
within 5%, and no other phase moves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from test.cluster import Cluster, Kubectl
from test.integration.test_slice_chip_time import serving_over
from test.integration.test_slices import Env, guide_env

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def env(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    yield from guide_env(cluster, kubectl)


def test_a_minute_of_serving_counts_its_chips_times_60_seconds(env: Env) -> None:
    serving_over(env, 60.0)

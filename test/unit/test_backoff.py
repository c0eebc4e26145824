"""The one capped exponential backoff, and the five places that space their retries by it."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ome.backoff import capped_exponential
from ome.controllers.inferencereplica.controller import RebuildBackoff
from ome.controllers.slices.act import Ledger
from ome.runtime.client import RetryPolicy
from ome.runtime.informer import Backoff
from ome.runtime.workqueue import ItemExponentialFailureRateLimiter

failures = st.integers(min_value=1, max_value=10_000)
seconds = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)
draws = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)
jitters = st.floats(min_value=0.0, max_value=4.0, allow_nan=False)


def test_the_waits_double_from_initial_up_to_the_cap():
    assert [capped_exponential(n, 0.5, 5.0) for n in range(1, 8)] == [
        0.5,
        1.0,
        2.0,
        4.0,
        5.0,
        5.0,
        5.0,
    ]


@given(failures, seconds, seconds, jitters, draws)
def test_a_wait_is_never_negative_nor_longer_than_the_cap(n, initial, cap, jitter, draw):
    wait = capped_exponential(n, initial, cap, jitter=jitter, draw=draw)
    assert 0.0 <= wait <= cap


@given(failures, seconds, seconds)
def test_without_jitter_a_wait_never_shortens_with_more_failures(n, initial, cap):
    assert capped_exponential(n, initial, cap) <= capped_exponential(n + 1, initial, cap)


@given(failures, seconds, seconds, jitters, draws)
def test_jitter_only_lengthens_and_by_at_most_its_fraction(n, initial, cap, jitter, draw):
    plain = capped_exponential(n, initial, cap)
    jittered = capped_exponential(n, initial, cap, jitter=jitter, draw=draw)
    assert plain <= jittered <= min(cap, plain * (1 + jitter)) * (1 + 1e-12)


def test_a_run_of_failures_past_the_floats_waits_the_cap():
    assert capped_exponential(10**9, 0.005, 1000.0) == 1000.0
    assert capped_exponential(10**9, 0.0, 1000.0) == 0.0


@pytest.mark.parametrize(
    ("args", "kwargs", "text"),
    [
        ((0, 1.0, 2.0), {}, "failures must be at least 1, not 0"),
        ((1, -1.0, 2.0), {}, "must not be negative"),
        ((1, 1.0, -2.0), {}, "must not be negative"),
        ((1, 1.0, 2.0), {"jitter": -0.1}, "must not be negative"),
        ((1, 1.0, 2.0), {"draw": 1.0}, "draw must be in [0, 1), not 1.0"),
    ],
)
def test_a_callers_bad_numbers_are_refused_with_what_was_wrong(args, kwargs, text):
    with pytest.raises(ValueError, match=re.escape(text)):
        capped_exponential(*args, **kwargs)


def test_the_informers_backoff_starts_at_0_8_s_caps_at_15_s_and_starts_over_after_quiet():
    now = [0.0]
    backoff = Backoff(rng=random.Random(0), clock=lambda: now[0])
    waits = []
    for _ in range(8):
        waits.append(backoff.next())
        now[0] += 1.0
    bases = [0.8, 1.6, 3.2, 6.4, 12.8, 15.0, 15.0, 15.0]
    for wait, base in zip(waits, bases, strict=True):
        assert base <= wait <= min(15.0, 2 * base)
    now[0] += 121.0
    assert 0.8 <= backoff.next() <= 1.6


def test_the_workqueues_limiter_waits_base_times_two_to_the_failures():
    limiter = ItemExponentialFailureRateLimiter(base=0.005, cap=1.0)
    assert [limiter.when("a") for _ in range(4)] == [0.005, 0.01, 0.02, 0.04]
    assert limiter.when("b") == 0.005
    for _ in range(100):
        limiter.when("a")
    assert limiter.when("a") == 1.0
    limiter.forget("a")
    assert limiter.when("a") == 0.005


class _State:
    """What RetryPolicy.wait reads of tenacity's RetryCallState."""

    def __init__(self, attempt: int) -> None:
        self.attempt_number = attempt
        self.outcome = None


def test_the_clients_retries_wait_0_2_s_doubling_with_up_to_half_again_of_jitter():
    policy = RetryPolicy(initial=0.2, cap=5.0)
    for attempt, base in [(1, 0.2), (2, 0.4), (3, 0.8), (4, 1.6), (8, 5.0)]:
        wait = policy.wait(_State(attempt))  # type: ignore[arg-type]
        assert base <= wait <= min(5.0, base * 1.5)


def test_a_release_that_does_not_go_is_retried_after_1_2_4_up_to_60_s():
    ledger = Ledger()
    assert [ledger.retry("s") for _ in range(8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    ledger.released("s")
    assert ledger.retry("s") == 1.0


def test_an_instance_rebuilt_too_often_waits_10_s_doubling_up_to_5_minutes():
    backoff = RebuildBackoff(allowed=3, window=timedelta(hours=1))
    start = datetime(2026, 12, 4, tzinfo=UTC)
    lefts = []
    for n in range(12):
        now = start + timedelta(seconds=n)
        backoff.rebuilt("ns/r", 0, now)
        held = backoff.hold("ns/r", 0, now)
        lefts.append(None if held is None else held[1])
    assert lefts[:3] == [None, None, None]
    assert lefts[3:9] == [10.0, 20.0, 40.0, 80.0, 160.0, 300.0]
    assert lefts[9:] == [300.0, 300.0, 300.0]

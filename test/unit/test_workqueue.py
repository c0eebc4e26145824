"""The workqueue: client-go's dedup, one-worker-per-key and FIFO rules, controller-runtime's
priorities, delays on a fake clock, rate limiters, shut down and drain, and the metrics."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from ome.runtime.workqueue import (
    DURATION_BUCKETS,
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    BucketRateLimiter,
    DelayingQueue,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimitingQueue,
    WorkQueue,
    WorkQueueMetrics,
    default_controller_rate_limiter,
)


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait for a state another thread reaches that no event announces (a getter blocking)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.001)


def drain_now(q: WorkQueue) -> list[Hashable]:
    """Everything queued right now, in order, each marked done."""
    out = []
    while (item := q.get(timeout=0)) is not None:
        out.append(item)
        q.done(item)
    return out


def start(target: Callable[[], object]) -> threading.Thread:
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


# --------------------------------------------------------------------------- queue semantics


@pytest.mark.parametrize(
    ("adds", "handed_out"),
    [
        ([], []),
        (["a"], ["a"]),
        (["a", "b", "c"], ["a", "b", "c"]),
        (["a", "a", "a"], ["a"]),
        (["a", "b", "a", "c", "b"], ["a", "b", "c"]),
        ([("ns", "x"), ("ns", "y"), ("ns", "x")], [("ns", "x"), ("ns", "y")]),
    ],
)
def test_fifo_and_dedup_while_queued(adds: list[Hashable], handed_out: list[Hashable]) -> None:
    q = WorkQueue()
    for item in adds:
        q.add(item)
    assert len(q) == len(handed_out)
    assert drain_now(q) == handed_out
    assert len(q) == 0


def test_key_added_while_processing_waits_for_done() -> None:
    q = WorkQueue()
    q.add("a")
    q.add("b")
    assert q.get() == "a"
    q.add("a")  # dirty while processing: not queued, so no second worker can take it
    q.add("a")
    assert len(q) == 1
    assert q.get() == "b"
    assert q.get(timeout=0) is None
    q.done("a")  # now re-queued, once
    assert len(q) == 1
    assert q.get() == "a"
    q.done("a")
    q.done("b")
    assert q.get(timeout=0) is None


def test_done_without_readd_does_not_requeue_and_stray_done_is_ignored() -> None:
    q = WorkQueue()
    q.add("a")
    assert q.get() == "a"
    q.done("a")
    q.done("a")
    q.done("never-added")
    assert len(q) == 0 and q.get(timeout=0) is None


def test_stray_done_of_a_queued_key_does_not_queue_it_twice() -> None:
    q = WorkQueue()
    q.add("a")
    q.done("a")
    assert drain_now(q) == ["a"]


def test_none_cannot_be_queued() -> None:
    with pytest.raises(ValueError, match="None cannot be queued"):
        WorkQueue().add(None)
    with pytest.raises(ValueError, match="None cannot be queued"):
        DelayingQueue().add_after(None, 1)
    with pytest.raises(ValueError, match="None cannot be queued"):
        RateLimitingQueue().add_rate_limited(None)


def test_get_times_out_with_none() -> None:
    q = WorkQueue()
    assert q.get(timeout=0) is None
    begin = time.monotonic()
    assert q.get(timeout=0.02) is None
    assert time.monotonic() - begin >= 0.015
    assert not q.shutting_down


def test_get_blocks_until_add() -> None:
    q = WorkQueue()
    got: list[Hashable] = []
    t = start(lambda: got.append(q.get()))
    eventually(lambda: q._getters_waiting == 1)
    q.add("a")
    t.join(5)
    assert got == ["a"]


# --------------------------------------------------------------------------- shut down and drain


def test_shut_down_wakes_every_blocked_getter() -> None:
    q = WorkQueue()
    results: list[Hashable] = []
    threads = [start(lambda: results.append(q.get())) for _ in range(3)]
    eventually(lambda: q._getters_waiting == 3)
    q.shut_down()
    for t in threads:
        t.join(5)
        assert not t.is_alive()
    assert results == [None, None, None]
    assert q.shutting_down


def test_after_shut_down_adds_are_ignored_and_queued_keys_still_come_out() -> None:
    clock = FakeClock()
    q = RateLimitingQueue(ItemExponentialFailureRateLimiter(1.0, 10.0), clock=clock)
    q.add("a")
    q.add("b")
    assert q.get() == "a"
    q.add("a")  # dirty before shut down: must not be lost
    q.add_after("w", 1)  # waiting at shut down: dropped, as client-go does
    q.shut_down()
    q.add("c")
    q.add_after("d", 0)
    q.add_after("e", 1)
    q.add_rate_limited("f")
    assert q.num_requeues("f") == 0  # the limiter was not even asked
    clock.advance(5)
    assert q.get() == "b"
    q.done("b")
    q.done("a")
    assert q.get() == "a"
    q.done("a")
    assert q.get() is None
    assert q.get(timeout=1) is None


def test_shut_down_with_drain_of_an_idle_queue_returns_true_at_once() -> None:
    q = WorkQueue()
    assert q.shut_down_with_drain(timeout=5) is True
    assert q.shutting_down
    assert q.get() is None


def test_shut_down_and_drop_forgets_queued_keys_and_lets_in_flight_ones_end() -> None:
    """A process that must stop acting at once: nothing queued comes out again, a key being
    processed finishes and is not queued again, even if it was re-added meanwhile."""
    q = WorkQueue()
    for key in ("a", "b", "c"):
        q.add(key)
    assert q.get() == "a"
    q.add("a")  # dirty while processing
    assert q.shut_down_and_drop() == 3  # "b", "c", and the re-added "a"
    assert q.get(timeout=0) is None
    q.done("a")
    assert q.get(timeout=0) is None and len(q) == 0
    q.add("d")  # ignored once shut down
    assert q.get(timeout=0) is None


def test_shut_down_and_drop_drops_delayed_keys_too() -> None:
    q = RateLimitingQueue()
    q.add_after("later", 0.01)
    q.add_rate_limited("retry")
    q.shut_down_and_drop()
    assert q.get(timeout=0.05) is None


def test_shut_down_with_drain_waits_for_in_flight_work() -> None:
    q = WorkQueue()
    q.add("a")
    assert q.get() == "a"
    q.add("a")  # dirty while processing: done re-queues it, and drain waits for that too
    result: list[bool] = []
    finished = threading.Event()

    def drain() -> None:
        result.append(q.shut_down_with_drain(timeout=10))
        finished.set()

    t = start(drain)
    eventually(lambda: q.shutting_down)
    q.add("late")  # ignored
    assert not finished.is_set()
    q.done("a")
    assert not finished.is_set()  # "a" is queued again
    assert q.get() == "a"
    assert not finished.is_set()
    q.done("a")
    t.join(5)
    assert result == [True]
    assert q.get() is None


def test_shut_down_with_drain_lets_workers_finish_what_is_queued() -> None:
    q = WorkQueue()
    for key in "abc":
        q.add(key)
    processed: list[Hashable] = []

    def worker() -> None:
        while (key := q.get()) is not None:
            processed.append(key)
            q.done(key)

    assert q.shut_down_with_drain(timeout=0) is False  # nobody is working yet
    t = start(worker)
    assert q.shut_down_with_drain(timeout=10) is True
    t.join(5)
    assert processed == ["a", "b", "c"]


def test_shut_down_with_drain_times_out_with_false() -> None:
    q = WorkQueue()
    q.add("stuck")
    assert q.get() == "stuck"
    assert q.shut_down_with_drain(timeout=0.02) is False
    q.done("stuck")
    assert q.shut_down_with_drain(timeout=1) is True


# --------------------------------------------------------------------------- delays


@pytest.mark.parametrize("delay", [0, -1, -0.5])
def test_add_after_without_a_positive_delay_adds_now(delay: float) -> None:
    q = DelayingQueue(clock=FakeClock())
    q.add_after("a", delay)
    assert len(q) == 1 and q.get(timeout=0) == "a"


@pytest.mark.parametrize(
    ("delays", "steps"),
    [
        # (key, delay) in call order; then what each one-second step hands out
        ([("a", 3), ("b", 1), ("c", 2)], [["b"], ["c"], ["a"]]),
        ([("a", 1), ("b", 1), ("c", 1)], [["a", "b", "c"]]),
        ([("a", 2), ("b", 1), ("a", 5)], [["b"], ["a"]]),  # later time for "a": ignored
        ([("a", 3), ("b", 2), ("a", 1)], [["a"], ["b"]]),  # earlier time for "a": moved up
        ([("a", 2), ("a", 2)], [[], ["a"]]),
    ],
)
def test_add_after_hands_out_due_items_earliest_first(
    delays: list[tuple[str, int]], steps: list[list[str]]
) -> None:
    clock = FakeClock()
    q = DelayingQueue(clock=clock)
    for key, delay in delays:
        q.add_after(key, delay)
    assert q.get(timeout=0) is None
    for expected in steps:
        clock.advance(1)
        assert drain_now(q) == expected
    clock.advance(100)
    assert drain_now(q) == []


def test_delayed_key_already_queued_is_still_handed_out_once() -> None:
    clock = FakeClock()
    q = DelayingQueue(clock=clock)
    q.add("a")
    q.add_after("a", 1)
    clock.advance(1)
    assert len(q) == 1
    assert drain_now(q) == ["a"]


def test_delayed_key_is_due_exactly_at_its_time() -> None:
    clock = FakeClock()
    q = DelayingQueue(clock=clock)
    q.add_after("a", 2.5)
    clock.advance(2.4)
    assert len(q) == 0
    clock.advance(0.1)
    assert len(q) == 1


def test_blocked_getter_wakes_for_a_delayed_item_on_the_real_clock() -> None:
    q = DelayingQueue()
    got: list[Hashable] = []
    t = start(lambda: got.append(q.get()))
    eventually(lambda: q._getters_waiting == 1)  # it waits with no timeout at all
    begin = time.monotonic()
    q.add_after("x", 0.02)
    t.join(5)
    assert got == ["x"]
    assert time.monotonic() - begin >= 0.015


# --------------------------------------------------------------------------- rate limiters


@pytest.mark.parametrize(
    ("base", "cap", "expected"),
    [
        (0.005, 1000.0, [0.005, 0.01, 0.02, 0.04, 0.08, 0.16]),
        (1.0, 10.0, [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]),
        (0.5, 0.5, [0.5, 0.5, 0.5]),
        (0.0, 1.0, [0.0, 0.0]),
    ],
)
def test_exponential_failure_rate_limiter_doubles_then_caps(
    base: float, cap: float, expected: list[float]
) -> None:
    limiter = ItemExponentialFailureRateLimiter(base, cap)
    assert [limiter.when("a") for _ in expected] == pytest.approx(expected)
    assert limiter.num_requeues("a") == len(expected)


def test_exponential_failure_rate_limiter_defaults_and_forget() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    assert [limiter.when("a") for _ in range(3)] == pytest.approx([0.005, 0.01, 0.02])
    assert limiter.when("b") == pytest.approx(0.005)  # per item
    assert limiter.num_requeues("a") == 3 and limiter.num_requeues("b") == 1
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)
    assert limiter.num_requeues("b") == 1
    limiter.forget("never-seen")


def test_exponential_failure_rate_limiter_stays_at_cap_without_overflow() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    waits = [limiter.when("a") for _ in range(3000)]
    assert waits[-1] == 1000.0
    assert max(waits) == 1000.0


@pytest.mark.parametrize(("base", "cap"), [(-1.0, 1.0), (1.0, -1.0)])
def test_exponential_failure_rate_limiter_rejects_negative_settings(
    base: float, cap: float
) -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        ItemExponentialFailureRateLimiter(base, cap)


def test_bucket_rate_limiter_allows_the_burst_then_spaces_by_one_over_qps() -> None:
    clock = FakeClock()
    limiter = BucketRateLimiter(qps=10, burst=3, clock=clock)
    waits = [limiter.when(f"k{i}") for i in range(6)]
    assert waits == pytest.approx([0.0, 0.0, 0.0, 0.1, 0.2, 0.3])
    clock.advance(1.0)  # the debt of 3 is repaid and the bucket refills, but only to the burst
    waits = [limiter.when("k") for _ in range(4)]
    assert waits == pytest.approx([0.0, 0.0, 0.0, 0.1])
    clock.advance(0.15)  # 1.5 tokens: the debt is paid, half a token is left
    assert limiter.when("k") == pytest.approx(0.05)
    limiter.forget("k")
    assert limiter.num_requeues("k") == 0


def test_bucket_rate_limiter_defaults_allow_a_burst_of_100() -> None:
    clock = FakeClock()
    limiter = BucketRateLimiter(clock=clock)
    assert all(limiter.when(i) == 0.0 for i in range(100))
    assert limiter.when(100) == pytest.approx(0.1)


@pytest.mark.parametrize(("qps", "burst"), [(0, 1), (-1, 1), (1, 0)])
def test_bucket_rate_limiter_rejects_bad_settings(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        BucketRateLimiter(qps=qps, burst=burst)


def test_max_of_rate_limiter_takes_the_longest_wait() -> None:
    clock = FakeClock()
    exp = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    bucket = BucketRateLimiter(qps=1, burst=2, clock=clock)
    limiter = MaxOfRateLimiter(exp, bucket)
    waits = [limiter.when("a") for _ in range(4)]
    assert waits == pytest.approx([0.005, 0.01, 1.0, 2.0])
    assert limiter.num_requeues("a") == 4
    limiter.forget("a")
    assert exp.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(3.0)  # the bucket is not per item


def test_max_of_rate_limiter_fans_out_num_requeues_and_forget() -> None:
    first = ItemExponentialFailureRateLimiter()
    second = ItemExponentialFailureRateLimiter()
    limiter = MaxOfRateLimiter(first, second)
    for _ in range(3):
        first.when("a")
    second.when("a")
    assert limiter.num_requeues("a") == 3
    limiter.forget("a")
    assert first.num_requeues("a") == 0 and second.num_requeues("a") == 0
    assert MaxOfRateLimiter().when("a") == 0.0
    assert MaxOfRateLimiter().num_requeues("a") == 0


def test_default_controller_rate_limiter() -> None:
    limiter = default_controller_rate_limiter()
    assert [limiter.when("a") for _ in range(3)] == pytest.approx([0.005, 0.01, 0.02])
    assert limiter.num_requeues("a") == 3
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0


def test_rate_limiting_queue_spaces_retries_and_forget_resets() -> None:
    clock = FakeClock()
    q = RateLimitingQueue(ItemExponentialFailureRateLimiter(1.0, 100.0), clock=clock)
    q.add_rate_limited("a")
    assert len(q) == 0
    clock.advance(1)
    assert q.get(timeout=0) == "a"
    q.done("a")
    q.add_rate_limited("a")
    clock.advance(1.9)
    assert q.get(timeout=0) is None
    clock.advance(0.1)
    assert q.get(timeout=0) == "a"
    q.done("a")
    assert q.num_requeues("a") == 2
    q.forget("a")
    assert q.num_requeues("a") == 0
    q.add_rate_limited("a")
    clock.advance(1)
    assert drain_now(q) == ["a"]


def test_rate_limiting_queue_uses_the_default_limiter() -> None:
    q = RateLimitingQueue()
    q.add_rate_limited("a")  # 5 ms on the real clock
    assert q.get(timeout=5) == "a"
    assert q.num_requeues("a") == 1


# --------------------------------------------------------------------------- metrics


def test_duration_buckets_are_client_gos() -> None:
    assert pytest.approx([10e-9 * 10**i for i in range(10)]) == list(DURATION_BUCKETS)


def test_metrics_follow_items_through_the_queue() -> None:
    registry = CollectorRegistry()
    clock = FakeClock()
    q = RateLimitingQueue(
        ItemExponentialFailureRateLimiter(1.0, 10.0),
        name="m",
        clock=clock,
        metrics=WorkQueueMetrics(registry),
    )

    def value(sample: str, **labels: str) -> float | None:
        if sample == "workqueue_depth":
            labels.setdefault("priority", "0")  # every add here is at PRIORITY_NORMAL
        return registry.get_sample_value(sample, {"name": "m", **labels})

    assert value("workqueue_depth") == 0
    assert value("workqueue_unfinished_work_seconds") == 0
    assert value("workqueue_longest_running_processor_seconds") == 0
    q.add("a")
    q.add("a")  # deduplicated: not an add
    q.add("b")
    assert value("workqueue_adds_total") == 2
    assert value("workqueue_depth") == 2

    clock.advance(2)
    assert q.get() == "a"
    assert value("workqueue_depth") == 1
    assert value("workqueue_queue_duration_seconds_count") == 1
    assert value("workqueue_queue_duration_seconds_sum") == pytest.approx(2)
    assert value("workqueue_queue_duration_seconds_bucket", le="1.0") == 0
    assert value("workqueue_queue_duration_seconds_bucket", le="10.0") == 1

    clock.advance(3)
    assert value("workqueue_unfinished_work_seconds") == pytest.approx(3)
    assert value("workqueue_longest_running_processor_seconds") == pytest.approx(3)
    assert q.get() == "b"
    clock.advance(1)
    assert value("workqueue_unfinished_work_seconds") == pytest.approx(4 + 1)
    assert value("workqueue_longest_running_processor_seconds") == pytest.approx(4)

    q.done("a")
    assert value("workqueue_work_duration_seconds_count") == 1
    assert value("workqueue_work_duration_seconds_sum") == pytest.approx(4)
    assert value("workqueue_unfinished_work_seconds") == pytest.approx(1)
    assert value("workqueue_longest_running_processor_seconds") == pytest.approx(1)

    q.add("b")  # while processing: counted as an add and in depth, not queued yet
    assert value("workqueue_adds_total") == 3
    assert value("workqueue_depth") == 1
    clock.advance(1)
    q.done("b")
    assert q.get() == "b"
    assert value("workqueue_queue_duration_seconds_sum") == pytest.approx(2 + 5 + 1)
    q.done("b")

    assert value("workqueue_retries_total") == 0
    q.add_rate_limited("a")
    q.add_rate_limited("a")
    assert value("workqueue_retries_total") == 2
    q.add_after("c", 1)  # a plain delayed add is not a retry
    assert value("workqueue_retries_total") == 2
    assert value("workqueue_depth") == 0
    clock.advance(1)
    assert len(q) == 2
    assert value("workqueue_depth") == 2


def test_queues_share_the_metric_families_of_a_registry() -> None:
    registry = CollectorRegistry()
    metrics = WorkQueueMetrics(registry)
    clock = FakeClock()
    one, two, twin = (WorkQueue(n, clock=clock, metrics=metrics) for n in ("one", "two", "two"))
    one.add("a")
    two.add("a")
    twin.add("b")
    for q in (one, two, twin):
        assert q.get() is not None
    clock.advance(2)
    assert registry.get_sample_value("workqueue_adds_total", {"name": "one"}) == 1
    assert registry.get_sample_value("workqueue_adds_total", {"name": "two"}) == 2
    # same-named queues give one series: work summed, longest the max
    assert registry.get_sample_value("workqueue_unfinished_work_seconds", {"name": "two"}) == 4
    labels = {"name": "two"}
    assert registry.get_sample_value("workqueue_longest_running_processor_seconds", labels) == 2
    with pytest.raises(ValueError, match="Duplicated"):
        WorkQueueMetrics(registry)


def test_default_metrics_are_made_once_on_the_global_registry() -> None:
    first = WorkQueue("test-workqueue-default-1")
    second = RateLimitingQueue(name="test-workqueue-default-2")
    WorkQueue("test-workqueue-default-3")  # no second registration of the families
    first.add("a")
    second.add("a")
    second.add("b")
    adds = "workqueue_adds_total"
    assert REGISTRY.get_sample_value(adds, {"name": "test-workqueue-default-1"}) == 1
    assert REGISTRY.get_sample_value(adds, {"name": "test-workqueue-default-2"}) == 2
    assert first._metrics is not None and second._metrics is not None


def test_an_unnamed_queue_records_no_metrics() -> None:
    registry = CollectorRegistry()
    q = WorkQueue(metrics=WorkQueueMetrics(registry))
    q.add("a")
    assert q._metrics is None
    assert registry.get_sample_value("workqueue_adds_total", {"name": ""}) is None


# --------------------------------------------------------------------------- priorities


class ScriptedLimiter:
    """A rate limiter whose next wait the test sets; it counts the failures it is told of."""

    def __init__(self) -> None:
        self.next_wait = 0.0
        self.failures: collections.Counter[Hashable] = collections.Counter()

    def when(self, item: Hashable) -> float:
        self.failures[item] += 1
        return self.next_wait

    def forget(self, item: Hashable) -> None:
        del self.failures[item]

    def num_requeues(self, item: Hashable) -> int:
        return self.failures[item]


def depths(registry: CollectorRegistry, name: str) -> dict[str, float]:
    """Every ``workqueue_depth`` series of queue ``name``, by its priority label."""
    return {
        sample.labels["priority"]: sample.value
        for family in registry.collect()
        if family.name == "workqueue_depth"
        for sample in family.samples
        if sample.labels["name"] == name
    }


def test_priority_constants_are_controller_runtimes() -> None:
    assert (PRIORITY_LOW, PRIORITY_NORMAL, PRIORITY_HIGH) == (-100, 0, 100)


def test_get_hands_out_the_highest_priority_first_and_fifo_among_equals() -> None:
    q = WorkQueue()
    q.add("n1")
    q.add("l1", PRIORITY_LOW)
    q.add("h1", PRIORITY_HIGH)
    q.add("n2", PRIORITY_NORMAL)
    q.add("odd", 7)
    q.add("h2", PRIORITY_HIGH)
    q.add("l2", PRIORITY_LOW)
    assert drain_now(q) == ["h1", "h2", "odd", "n1", "n2", "l1", "l2"]


def test_a_raised_key_keeps_its_first_queued_place_among_its_new_equals() -> None:
    q = WorkQueue()
    q.add("a")
    q.add("b", PRIORITY_HIGH)
    q.add("c")
    q.add("a", PRIORITY_HIGH)  # raised: queued before "b", so ahead of it
    assert len(q) == 3
    assert drain_now(q) == ["a", "b", "c"]


def test_adding_a_queued_key_at_a_lower_or_equal_priority_changes_nothing() -> None:
    q = WorkQueue()
    q.add("a", PRIORITY_HIGH)
    q.add("b", PRIORITY_HIGH)
    q.add("a", PRIORITY_LOW)
    q.add("a", PRIORITY_HIGH)  # equal: keeps its place too
    q.add("c", 50)
    assert len(q) == 3
    assert drain_now(q) == ["a", "b", "c"]


def test_a_key_readded_while_processing_comes_back_at_the_highest_priority_readded() -> None:
    q = WorkQueue()
    q.add("a")
    q.add("n")
    assert q.get() == "a"
    q.add("a", PRIORITY_LOW)
    q.add("a", PRIORITY_HIGH)
    q.add("a")
    assert len(q) == 1
    assert q.get() == "n"  # never "a" again before done, whatever its priority
    assert q.get(timeout=0) is None
    q.add("m")
    q.done("a")
    assert len(q) == 2
    assert q.get() == "a"  # high, so ahead of "m" which was queued first
    assert q.get() == "m"


def test_keys_need_not_be_orderable() -> None:
    """Heap entries never tie on (priority, sequence), so keys are never compared."""
    q = WorkQueue()
    a, b, c = object(), object(), object()
    q.add(a)
    q.add(b)
    q.add(c, PRIORITY_LOW)
    q.add(c)
    q.add(b, PRIORITY_HIGH)
    assert drain_now(q) == [b, a, c]


def test_a_stale_heap_entry_never_hands_a_key_out_out_of_turn() -> None:
    """A raise leaves the key's old entry behind; once the key is queued again, behind others,
    that old entry must not stand in for it."""
    q = WorkQueue()
    q.add("k")
    q.add("k", PRIORITY_HIGH)
    assert q.get() == "k"
    q.done("k")
    q.add("x")
    q.add("k")
    assert drain_now(q) == ["x", "k"]


def test_many_raises_keep_the_heap_small_and_the_order_right() -> None:
    q = WorkQueue()
    for key in range(10):
        q.add(key, -1000)
    for priority in range(-999, 1):
        q.add(priority % 10, priority)
        assert len(q._heap) <= 2 * len(q._queued) + 33
    assert drain_now(q) == [0, 9, 8, 7, 6, 5, 4, 3, 2, 1]


def test_a_key_woken_high_goes_ahead_of_earlier_normal_keys() -> None:
    clock = FakeClock()
    q = DelayingQueue(clock=clock)
    q.add_after("woken", 1, PRIORITY_HIGH)
    q.add("a")
    q.add("b")
    clock.advance(1)
    assert drain_now(q) == ["woken", "a", "b"]


def test_a_key_woken_low_goes_after_later_normal_keys() -> None:
    clock = FakeClock()
    q = DelayingQueue(clock=clock)
    q.add_after("woken", 1, PRIORITY_LOW)
    clock.advance(1)
    assert len(q) == 1
    q.add("a")
    assert drain_now(q) == ["a", "woken"]


def test_a_timer_on_a_queued_key_raises_it_at_once_and_waits_no_more() -> None:
    """controller-runtime's priority queue: one entry per key, and this one is due now."""
    clock = FakeClock()
    q = DelayingQueue(clock=clock)
    q.add("a")
    q.add("b")
    q.add_after("b", 1, PRIORITY_HIGH)
    assert drain_now(q) == ["b", "a"]
    clock.advance(1)
    assert drain_now(q) == []  # its pass ran: it would have asked for another timer


def test_adding_a_key_now_takes_its_waiting_timer_and_its_priority_with_it() -> None:
    clock = FakeClock()
    q = DelayingQueue(clock=clock)
    q.add_after("held", 5, PRIORITY_HIGH)  # a wait's timer...
    q.add("a")
    q.add("held")  # ...ended early by an event
    assert drain_now(q) == ["held", "a"]
    clock.advance(5)
    assert drain_now(q) == []  # no pass for a wait that is over


def test_a_timer_asked_for_while_the_key_is_added_again_during_its_pass_is_dropped() -> None:
    clock = FakeClock()
    q = DelayingQueue(clock=clock)
    q.add("x")
    assert q.get(timeout=0) == "x"
    q.add("x")  # an event during the pass
    q.add_after("x", 1)  # the pass's own timer
    q.done("x")
    assert drain_now(q) == ["x"]  # the event's pass, which asks for its own timer
    clock.advance(1)
    assert drain_now(q) == []


def test_a_timer_set_during_a_pass_with_no_event_fires() -> None:
    clock = FakeClock()
    q = DelayingQueue(clock=clock)
    q.add("x")
    assert q.get(timeout=0) == "x"
    q.add_after("x", 1)
    q.done("x")
    assert drain_now(q) == []
    clock.advance(1)
    assert drain_now(q) == ["x"]


def test_a_retry_waits_its_whole_delay_whatever_adds_the_key_meanwhile() -> None:
    """client-go's: an event's pass runs now, and the retry still comes when it is due."""
    clock = FakeClock()
    limiter = ScriptedLimiter()
    limiter.next_wait = 2
    q = RateLimitingQueue(limiter, clock=clock)
    q.add("x")
    assert q.get(timeout=0) == "x"
    q.add("x")  # an event during the failing pass
    q.add_rate_limited("x")
    q.done("x")
    assert drain_now(q) == ["x"]
    q.add("x")  # and another after it
    assert drain_now(q) == ["x"]
    clock.advance(1)
    assert drain_now(q) == []
    clock.advance(1)
    assert drain_now(q) == ["x"]


def test_add_after_twice_keeps_the_earlier_due_time_and_the_higher_priority() -> None:
    clock = FakeClock()
    q = DelayingQueue(clock=clock)
    q.add_after("x", 1, PRIORITY_HIGH)
    q.add_after("x", 5, PRIORITY_LOW)  # later and lower: changes nothing
    q.add_after("y", 2, PRIORITY_LOW)
    q.add_after("y", 9, PRIORITY_HIGH)  # later, but higher: raises the pending priority
    q.add_after("z", 3)
    q.add_after("z", 1, PRIORITY_LOW)  # earlier: moved up, and keeps the higher priority
    q.add("n")
    clock.advance(1)
    assert drain_now(q) == ["x", "n", "z"]
    q.add("n")
    clock.advance(1)
    assert drain_now(q) == ["y", "n"]
    clock.advance(10)
    assert drain_now(q) == []


@pytest.mark.parametrize("delay", [0, -1])
def test_add_after_without_a_positive_delay_adds_now_at_its_priority(delay: float) -> None:
    q = DelayingQueue(clock=FakeClock())
    q.add("n")
    q.add_after("h", delay, PRIORITY_HIGH)
    assert drain_now(q) == ["h", "n"]


def test_a_high_priority_retry_still_waits_its_full_backoff() -> None:
    clock = FakeClock()
    q = RateLimitingQueue(ItemExponentialFailureRateLimiter(1.0, 100.0), clock=clock)
    q.add_rate_limited("a", PRIORITY_HIGH)  # first failure: 1 s
    q.add("n", PRIORITY_LOW)
    clock.advance(0.875)
    assert drain_now(q) == ["n"]
    clock.advance(0.125)
    q.add("n", PRIORITY_LOW)
    assert drain_now(q) == ["a", "n"]
    q.add_rate_limited("a", PRIORITY_HIGH)  # second failure: 2 s, high or not
    clock.advance(1.875)
    assert drain_now(q) == []
    clock.advance(0.125)
    assert drain_now(q) == ["a"]
    assert q.num_requeues("a") == 2


def test_shut_down_drains_queued_keys_by_priority_then_gives_none() -> None:
    q = WorkQueue()
    q.add("n")
    q.add("busy", PRIORITY_LOW)
    assert q.get() == "n"
    q.add("n", PRIORITY_HIGH)  # dirty while processing: comes back, high, after done
    q.add("l", PRIORITY_LOW)
    q.add("h", PRIORITY_HIGH)
    q.shut_down()
    q.add("late", PRIORITY_HIGH)  # ignored
    q.add("l", PRIORITY_HIGH)  # ignored too: no raise once shutting down
    assert q.get() == "h"
    q.done("h")
    q.done("n")
    assert [q.get(), q.get(), q.get()] == ["n", "busy", "l"]
    assert q.get() is None


def test_shut_down_and_drop_counts_every_dirty_key_and_zeroes_depth() -> None:
    registry = CollectorRegistry()
    q = WorkQueue("drop", metrics=WorkQueueMetrics(registry))
    q.add("a", PRIORITY_HIGH)
    q.add("b", PRIORITY_LOW)
    q.add("c")
    assert q.get() == "a"
    q.add("a", 5)
    q.add("c", PRIORITY_HIGH)
    assert depths(registry, "drop") == {"0": 0, "100": 1, "-100": 1, "5": 1}
    assert q.shut_down_and_drop() == 3
    assert set(depths(registry, "drop").values()) == {0}
    q.done("a")
    assert q.get(timeout=0) is None


def test_shut_down_with_drain_returns_once_prioritised_work_is_done() -> None:
    q = WorkQueue()
    for key, priority in [("l", PRIORITY_LOW), ("n", PRIORITY_NORMAL), ("h", PRIORITY_HIGH)]:
        q.add(key, priority)
    assert q.get() == "h"
    q.add("h", PRIORITY_LOW)
    processed: list[Hashable] = ["h"]
    q.done("h")

    def worker() -> None:
        while (key := q.get()) is not None:
            processed.append(key)
            q.done(key)

    assert q.shut_down_with_drain(timeout=0) is False
    t = start(worker)
    assert q.shut_down_with_drain(timeout=10) is True
    t.join(5)
    assert processed == ["h", "n", "l", "h"]  # the re-added "h" came back low, FIFO after "l"


def test_depth_has_a_priority_zero_series_before_any_add() -> None:
    registry = CollectorRegistry()
    WorkQueue("fresh", metrics=WorkQueueMetrics(registry))
    text = generate_latest(registry).decode()
    assert 'workqueue_depth{name="fresh",priority="0"} 0.0' in text
    assert depths(registry, "fresh") == {"0": 0}


def test_depth_is_counted_per_priority_and_a_raise_moves_it() -> None:
    registry = CollectorRegistry()
    clock = FakeClock()
    q = DelayingQueue("depth", clock=clock, metrics=WorkQueueMetrics(registry))
    q.add("a")
    q.add("b")
    q.add("c", PRIORITY_LOW)
    assert depths(registry, "depth") == {"0": 2, "-100": 1}
    q.add("c", PRIORITY_HIGH)
    assert depths(registry, "depth") == {"0": 2, "-100": 0, "100": 1}
    assert q.get() == "c"
    q.add("c", PRIORITY_LOW)  # dirty while processing: counted at its priority
    q.add("c", 3)
    assert depths(registry, "depth") == {"0": 2, "-100": 0, "100": 0, "3": 1}
    q.add_after("d", 1, PRIORITY_HIGH)  # waiting is not depth
    assert depths(registry, "depth")["100"] == 0
    clock.advance(1)
    assert len(q) == 3
    assert depths(registry, "depth") == {"0": 2, "-100": 0, "100": 1, "3": 1}
    assert registry.get_sample_value("workqueue_adds_total", {"name": "depth"}) == 5


@pytest.mark.parametrize("priority", [1.5, "1", True, None])
def test_a_priority_must_be_an_int(priority: object) -> None:
    q = RateLimitingQueue()
    with pytest.raises(TypeError, match="a priority is an int"):
        q.add("a", priority)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a priority is an int"):
        q.add_after("a", 1, priority)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a priority is an int"):
        q.add_rate_limited("a", priority)  # type: ignore[arg-type]
    assert len(q) == 0 and q.num_requeues("a") == 0


# --------------------------------------------------------------------------- properties

keys = st.integers(0, 4)


@given(st.lists(keys, max_size=40))
def test_a_key_added_many_times_while_queued_is_handed_out_once(adds: list[int]) -> None:
    q = WorkQueue()
    for key in adds:
        q.add(key)
    assert drain_now(q) == list(dict.fromkeys(adds))


PRIORITIES = (PRIORITY_LOW, -1, PRIORITY_NORMAL, 1, PRIORITY_HIGH)
priorities = st.sampled_from(PRIORITIES)


def by_priority_then_first_queued(adds: list[tuple[int, int]]) -> list[int]:
    """The order a fresh queue hands out keys added as (key, priority): each once, at the
    highest priority it was added with, in the order it was first added among equals."""
    first: dict[int, int] = {}
    highest: dict[int, int] = {}
    for index, (key, priority) in enumerate(adds):
        first.setdefault(key, index)
        highest[key] = max(highest.get(key, priority), priority)
    return sorted(first, key=lambda key: (-highest[key], first[key]))


@given(st.lists(st.tuples(keys, priorities), max_size=40))
def test_get_hands_out_by_priority_then_first_queued_and_each_key_once(
    adds: list[tuple[int, int]],
) -> None:
    q = WorkQueue()
    for key, priority in adds:
        q.add(key, priority)
    assert drain_now(q) == by_priority_then_first_queued(adds)


@given(
    before=st.lists(st.tuples(keys, priorities), max_size=20),
    readds=st.lists(priorities, max_size=4),
    after=st.lists(st.tuples(keys, priorities), max_size=10),
)
def test_after_shut_down_queued_keys_come_out_by_priority_then_none(
    before: list[tuple[int, int]], readds: list[int], after: list[tuple[int, int]]
) -> None:
    """Keys queued before shut down drain in priority order, with a key re-added while a worker
    held it coming back at the highest priority it was re-added with; later adds are ignored."""
    q = WorkQueue()
    busy = 99
    q.add(busy, PRIORITY_HIGH + 1)
    assert q.get() == busy
    for key, priority in before:
        q.add(key, priority)
    for priority in readds:
        q.add(busy, priority)
    q.shut_down()
    for key, priority in after:
        q.add(key, priority)
    expected = by_priority_then_first_queued(before)
    assert drain_now(q) == expected
    q.done(busy)
    if readds:
        assert q.get(timeout=0) == busy
        q.done(busy)
    assert q.get(timeout=5) is None
    assert q.shut_down_with_drain(timeout=0) is True


@given(
    failures=st.integers(0, 6),
    priority=priorities,
    base=st.sampled_from([0.125, 0.25, 1.0]),
)
def test_a_retry_waits_exactly_the_limiters_delay_whatever_its_priority(
    failures: int, priority: int, base: float
) -> None:
    clock = FakeClock()
    q = RateLimitingQueue(ItemExponentialFailureRateLimiter(base, 4.0), clock=clock)
    expected = ItemExponentialFailureRateLimiter(base, 4.0)
    for _ in range(failures + 1):
        wait = expected.when("k")
        q.add_rate_limited("k", priority)
        q.add("other", PRIORITY_LOW)
        clock.advance(wait - 0.0625)
        assert drain_now(q) == ["other"]
        clock.advance(0.0625)
        assert drain_now(q) == ["k"]
    assert q.num_requeues("k") == failures + 1


class WorkQueueModel(RuleBasedStateMachine):
    """The queue against a model of client-go's rules with controller-runtime's priorities, one
    step at a time on a fake clock, with a rate limiter whose waits the steps choose."""

    def __init__(self) -> None:
        super().__init__()
        self.registry = CollectorRegistry()
        self.clock = FakeClock()
        self.limiter = ScriptedLimiter()
        self.q = RateLimitingQueue(
            self.limiter, "model", clock=self.clock, metrics=WorkQueueMetrics(self.registry)
        )
        self.queued: dict[int, tuple[int, int]] = {}  # key -> (priority, order first queued)
        self.dirty: dict[int, int] = {}  # key -> priority
        self.processing: set[int] = set()
        # key -> (due, order, priority, whether any of its delays was a retry)
        self.waiting: dict[int, tuple[float, int, int, bool]] = {}
        self.order = 0
        self.retries = 0
        self.shut = False

    def _next_order(self) -> int:
        self.order += 1
        return self.order

    def _model_add(self, key: int, priority: int) -> None:
        if self.shut:
            return
        if key in self.waiting and not self.waiting[key][3]:
            # due now: its timer goes, and its priority with it
            priority = max(priority, self.waiting.pop(key)[2])
        if key in self.dirty:
            if priority > self.dirty[key]:
                self.dirty[key] = priority
                if key in self.queued:
                    self.queued[key] = (priority, self.queued[key][1])
            return
        self.dirty[key] = priority
        if key not in self.processing:
            self.queued[key] = (priority, self._next_order())

    def _model_add_after(self, key: int, delay: float, priority: int, retry: bool) -> None:
        if self.shut:
            return
        if delay <= 0:
            self._model_add(key, priority)
            return
        if not retry and key in self.dirty:
            self._model_add(key, priority)  # due a pass already: no timer, at most raised
            return
        due = self.clock.now + delay
        if key in self.waiting:
            old_due, order, old_priority, old_retry = self.waiting[key]
            priority = max(priority, old_priority)
            retry = retry or old_retry
            if old_due <= due:
                self.waiting[key] = (old_due, order, priority, retry)
                return
        self.waiting[key] = (due, self._next_order(), priority, retry)

    @rule(key=keys, priority=priorities)
    def add(self, key: int, priority: int) -> None:
        self.q.add(key, priority)
        self._model_add(key, priority)

    @rule(key=keys, delay=st.integers(-1, 3), priority=priorities)
    def add_after(self, key: int, delay: int, priority: int) -> None:
        self.q.add_after(key, delay, priority)
        self._model_add_after(key, delay, priority, retry=False)

    @rule(key=keys, wait=st.integers(0, 3), priority=priorities)
    def add_rate_limited(self, key: int, wait: int, priority: int) -> None:
        self.limiter.next_wait = wait
        failures = self.limiter.num_requeues(key)
        self.q.add_rate_limited(key, priority)
        if self.shut:
            assert self.limiter.num_requeues(key) == failures  # not even asked
            return
        assert self.limiter.num_requeues(key) == failures + 1
        self.retries += 1
        # the limiter's wait, whatever the priority and whatever adds the key meanwhile
        self._model_add_after(key, wait, priority, retry=True)

    @rule(seconds=st.integers(1, 3))
    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds)
        due = sorted(
            (due, order, key)
            for key, (due, order, _, _) in self.waiting.items()
            if due <= self.clock.now
        )
        for _, _, key in due:
            _, _, priority, _ = self.waiting.pop(key)
            self._model_add(key, priority)

    @rule()
    def get(self) -> None:
        got = self.q.get(timeout=0)
        if not self.queued:
            assert got is None
            return
        expected = max(self.queued, key=lambda k: (self.queued[k][0], -self.queued[k][1]))
        assert got == expected  # the highest priority, first queued among equals
        assert got not in self.processing  # never with two workers
        del self.queued[expected]
        del self.dirty[expected]
        self.processing.add(expected)

    @precondition(lambda self: bool(self.processing))
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.processing)))
        self.q.done(key)
        self.processing.discard(key)
        if key in self.dirty:
            self.queued[key] = (self.dirty[key], self._next_order())

    @rule(how=st.sampled_from(["shut_down", "shut_down_and_drop", "shut_down_with_drain"]))
    def shut_down(self, how: str) -> None:
        """One rule for the three ways, so that most runs do some work before shutting down."""
        if how == "shut_down":
            self.q.shut_down()
        elif how == "shut_down_and_drop":
            assert self.q.shut_down_and_drop() == len(self.dirty)
            self.queued.clear()
            self.dirty.clear()
        else:
            idle = not self.queued and not self.processing
            assert self.q.shut_down_with_drain(timeout=0) is idle
        self.shut = True
        self.waiting.clear()

    @invariant()
    def agrees_with_the_model(self) -> None:
        assert len(self.q) == len(self.queued)  # also moves due keys in, as the model did
        assert self.q.shutting_down == self.shut
        assert set(self.queued) == set(self.dirty) - self.processing
        assert not set(self.queued) & self.processing
        # what waits, and which waits are retries (a timer on a key due a pass is gone)
        assert set(self.q._ready_at) == set(self.waiting)
        assert self.q._retrying == {k for k, w in self.waiting.items() if w[3]}

    @invariant()
    def depth_per_priority_is_the_dirty_keys_at_it(self) -> None:
        scraped = depths(self.registry, "model")
        assert "0" in scraped
        assert {p: v for p, v in scraped.items() if v} == collections.Counter(
            str(p) for p in self.dirty.values()
        )
        retries = self.registry.get_sample_value("workqueue_retries_total", {"name": "model"})
        assert retries == self.retries


TestWorkQueueModel = WorkQueueModel.TestCase
TestWorkQueueModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


@settings(max_examples=40, deadline=None)
@given(
    adds=st.lists(st.integers(0, 7), min_size=1, max_size=60),
    readds=st.lists(st.integers(0, 7), max_size=15),
    retries=st.lists(st.integers(0, 7), max_size=10),
    workers=st.integers(1, 4),
)
def test_threads_never_share_a_key_and_every_add_is_processed(
    adds: list[int], readds: list[int], retries: list[int], workers: int
) -> None:
    """Workers add their key again while processing it, and retry it with rate limiting; the
    producer adds from another thread. Every add bumps the key's version first, and a worker
    records the version it sees after ``get``: each version must be seen (so no add is lost),
    and no key may be in two workers' hands at once."""
    q = RateLimitingQueue(ItemExponentialFailureRateLimiter(0.0001, 0.001))
    progress = threading.Condition()
    in_progress: set[int] = set()
    overlaps: list[int] = []
    version: dict[int, int] = {}
    seen: dict[int, int] = {}
    # only keys the producer adds can use a budget, so a working queue spends them all
    readd_budget = collections.Counter(k for k in readds if k in adds)
    retry_budget = collections.Counter(k for k in retries if k in adds)

    def bump(key: int) -> None:
        version[key] = version.get(key, 0) + 1

    def worker() -> None:
        while (key := q.get()) is not None:
            assert isinstance(key, int)
            with progress:
                if key in in_progress:
                    overlaps.append(key)
                in_progress.add(key)
                seen[key] = max(seen.get(key, 0), version[key])
                readd = readd_budget[key] > 0
                retry = not readd and retry_budget[key] > 0
                readd_budget[key] -= readd
                retry_budget[key] -= retry
                if readd or retry:
                    bump(key)
                progress.notify_all()
            if readd:
                q.add(key)
                # hold the key a moment: a queue that handed it out again would show it here
                time.sleep(0.0005)
            with progress:
                in_progress.discard(key)
            if retry:
                q.add_rate_limited(key)
            else:
                q.forget(key)
            q.done(key)

    def settled() -> bool:
        spent = not +readd_budget and not +retry_budget
        return spent and all(seen.get(k, 0) >= v for k, v in version.items())

    threads = [start(worker) for _ in range(workers)]
    for key in adds:
        with progress:
            bump(key)
        q.add(key)
    with progress:
        assert progress.wait_for(settled, timeout=10), (version, seen)
    assert q.shut_down_with_drain(timeout=10)
    for t in threads:
        t.join(5)
        assert not t.is_alive()
    assert overlaps == []

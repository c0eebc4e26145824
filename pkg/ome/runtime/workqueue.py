"""Work queues for controllers, after client-go's ``util/workqueue``: owns which key is queued,
which is being processed, when a retry is due and the queue's metrics. It must never run
reconcile work itself, never hand one key to two workers at once, and never lose an added key.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterable
from typing import Protocol, TypeAlias

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from ome.backoff import capped_exponential

__all__ = [
    "PRIORITY_HIGH",
    "PRIORITY_LOW",
    "PRIORITY_NORMAL",
    "BucketRateLimiter",
    "DelayingQueue",
    "Item",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "RateLimitingQueue",
    "WorkQueue",
    "WorkQueueMetrics",
    "default_controller_rate_limiter",
]

Item: TypeAlias = Hashable
Clock: TypeAlias = Callable[[], float]

#: Priorities of queued keys, as controller-runtime's priority queue has them: any int will do,
#: and a higher one is handed out first.
PRIORITY_LOW = -100
PRIORITY_NORMAL = 0
PRIORITY_HIGH = 100

# The longest a getter sleeps on a pending delayed item before looking at the clock again, as
# client-go's waiting loop does: a guard against a clock that jumps, not part of the design.
_MAX_DELAY_WAIT = 10.0


# --------------------------------------------------------------------------- rate limiters


class RateLimiter(Protocol):
    """How long an item waits before its next retry."""

    def when(self, item: Item) -> float:
        """Seconds to wait before retrying ``item``; counts as one more failure of it."""

    def forget(self, item: Item) -> None:
        """Stop tracking ``item``: its next failure starts afresh."""

    def num_requeues(self, item: Item) -> int:
        """How many failures of ``item`` are being remembered."""


class ItemExponentialFailureRateLimiter:
    """``base * 2**failures`` seconds for each item, capped at ``cap``."""

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        if base < 0 or cap < 0:
            raise ValueError(f"base ({base}) and cap ({cap}) must not be negative")
        self._base = base
        self._cap = cap
        self._failures: dict[Item, int] = {}
        self._lock = threading.Lock()

    def when(self, item: Item) -> float:
        with self._lock:
            exp = self._failures.get(item, 0)
            self._failures[item] = exp + 1
        return capped_exponential(exp + 1, self._base, self._cap)

    def forget(self, item: Item) -> None:
        with self._lock:
            self._failures.pop(item, None)

    def num_requeues(self, item: Item) -> int:
        with self._lock:
            return self._failures.get(item, 0)


class BucketRateLimiter:
    """A token bucket over all items (``golang.org/x/time/rate``): ``burst`` tokens, refilled at
    ``qps``. ``when`` reserves a token, going into debt if need be, and returns the wait until
    that token exists; so after the burst, retries come ``1/qps`` apart."""

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock = time.monotonic) -> None:
        if not qps > 0:
            raise ValueError(f"qps must be positive, not {qps}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, not {burst}")
        self._qps = qps
        self._burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def when(self, item: Item) -> float:
        if math.isinf(self._qps):
            return 0.0
        with self._lock:
            now = self._clock()
            elapsed = max(0.0, now - self._last)
            self._tokens = min(float(self._burst), self._tokens + elapsed * self._qps) - 1.0
            self._last = max(now, self._last)
            return 0.0 if self._tokens >= 0 else -self._tokens / self._qps

    def forget(self, item: Item) -> None:
        """Nothing to forget: the bucket is shared by all items."""

    def num_requeues(self, item: Item) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest wait any of its limiters asks for; ``forget`` and ``num_requeues`` go to all
    of them (``num_requeues`` is the largest count)."""

    def __init__(self, *limiters: RateLimiter) -> None:
        self._limiters = limiters

    def when(self, item: Item) -> float:
        # Every limiter must hear of the failure, so no short-circuit.
        return max((limiter.when(item) for limiter in self._limiters), default=0.0)

    def forget(self, item: Item) -> None:
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: Item) -> int:
        return max((limiter.num_requeues(item) for limiter in self._limiters), default=0)


def default_controller_rate_limiter() -> MaxOfRateLimiter:
    """client-go's default: per-item exponential 5 ms .. 1000 s, and 10 qps overall, burst 100."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(0.005, 1000.0),
        BucketRateLimiter(qps=10.0, burst=100),
    )


# --------------------------------------------------------------------------- metrics

# client-go's ExponentialBuckets(10e-9, 10, 10), written out to avoid float drift.
DURATION_BUCKETS = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)


class WorkQueueMetrics:
    """client-go's workqueue metric families, labelled by queue ``name``, on one registry
    (``None``: the global one). Register each registry's families once and share the object
    between queues. Work in progress is measured when the registry is scraped.

    ``workqueue_depth`` is also labelled by ``priority`` (the decimal int), as controller-runtime's
    priority queue has it: each key waiting to be processed counts once, under its current
    priority."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = REGISTRY if registry is None else registry
        labels = ("name",)
        self.depth = Gauge(
            "workqueue_depth", "Current depth of workqueue", ("name", "priority"), registry=reg
        )
        self.adds = Counter(
            "workqueue_adds_total",
            "Total number of adds handled by workqueue",
            labels,
            registry=reg,
        )
        self.queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            labels,
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            labels,
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        self.retries = Counter(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            labels,
            registry=reg,
        )
        self._queues: weakref.WeakSet[WorkQueue] = weakref.WeakSet()
        self._queues_lock = threading.Lock()
        reg.register(_InFlightCollector(self))

    def _track(self, queue: WorkQueue) -> None:
        with self._queues_lock:
            self._queues.add(queue)

    def _tracked(self) -> list[WorkQueue]:
        with self._queues_lock:
            return list(self._queues)


class _InFlightCollector:
    """``workqueue_unfinished_work_seconds`` and ``workqueue_longest_running_processor_seconds``,
    worked out from each queue's in-flight items at scrape time."""

    UNFINISHED = "workqueue_unfinished_work_seconds"
    LONGEST = "workqueue_longest_running_processor_seconds"

    def __init__(self, metrics: WorkQueueMetrics) -> None:
        self._metrics = metrics

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                self.UNFINISHED,
                "How many seconds of work has been done that is in progress and hasn't been "
                "observed by work_duration. Large values indicate stuck threads.",
                labels=["name"],
            ),
            GaugeMetricFamily(
                self.LONGEST,
                "How many seconds has the longest running processor for workqueue been running.",
                labels=["name"],
            ),
        )

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        # Queues sharing a name are summed (unfinished) and maxed (longest): one series each.
        totals: dict[str, tuple[float, float]] = {}
        for queue in self._metrics._tracked():
            total, longest = queue._in_flight_ages()
            prev_total, prev_longest = totals.get(queue.name, (0.0, 0.0))
            totals[queue.name] = (prev_total + total, max(prev_longest, longest))
        unfinished, longest_family = self._families()
        for name, (total, longest) in sorted(totals.items()):
            unfinished.add_metric([name], total)
            longest_family.add_metric([name], longest)
        return (unfinished, longest_family)


class _SharedMetrics:
    """The default ``WorkQueueMetrics`` on the global registry, made on first use, once."""

    lock = threading.Lock()
    metrics: WorkQueueMetrics | None = None

    @classmethod
    def get(cls) -> WorkQueueMetrics:
        with cls.lock:
            if cls.metrics is None:
                cls.metrics = WorkQueueMetrics()
            return cls.metrics


# --------------------------------------------------------------------------- queues


class WorkQueue:
    """A priority queue of keys for worker threads, with client-go's guarantees and
    controller-runtime's priorities: ``get`` hands out the queued key with the highest priority,
    and among equal priorities the one queued first.

    Invariants (every structure below is shared between threads and only touched under
    ``_lock``):
    - ``_dirty`` maps every key that needs processing to its priority. A key added again while
      dirty is not queued twice: it only ever rises to the higher priority, so a key added N
      times before a worker gets it is handed out once, at the highest priority it was added
      with.
    - ``_queued`` maps each key waiting for a worker to the ``(-priority, sequence)`` of its one
      live entry in the heap ``_heap``; its keys are the keys of ``_dirty`` not in
      ``_processing``, and ``-priority`` is the key's ``_dirty`` priority. ``_heap`` also holds
      stale entries (left by a raise, or by ``get``'s pops) that match no ``_queued`` value and
      are skipped when they come to the top. A sequence is taken from ``_sequence`` when a key
      is queued and kept when it is raised, so equal priorities come out first queued, first
      out; no two live or stale entries are equal, so the heap never compares keys.
    - ``_processing`` holds the keys handed out by ``get`` and not yet ``done``; no key in
      ``_processing`` is in ``_queued``, so no key is ever with two workers at once. A key added
      while processing goes into ``_dirty`` only (at the highest priority it is added with
      meanwhile), and ``done`` queues it at that priority.
    - Once ``_shutting_down``, adds are ignored, but keys already dirty still come out of
      ``get``, in priority order (and keys re-added during processing are re-queued by
      ``done``), so nothing added before shut down is lost while workers keep draining;
      ``shut_down_and_drop`` instead empties ``_dirty``, ``_queued`` and ``_heap`` at once.
    - ``_added_at`` and ``_started_at`` (for metrics, on the injected clock) have the keys of
      ``_dirty`` and ``_processing`` respectively; the depth metric counts the keys of
      ``_dirty`` by their priority.

    Timeouts passed to ``get`` and ``shut_down_with_drain`` are real waits; the injected clock
    times metrics and delays. An unnamed queue records no metrics, as in client-go.
    """

    def __init__(
        self, name: str = "", clock: Clock = time.monotonic, metrics: WorkQueueMetrics | None = None
    ) -> None:
        self._name = name
        self._clock = clock
        self._heap: list[tuple[int, int, Item]] = []
        self._queued: dict[Item, tuple[int, int]] = {}
        self._dirty: dict[Item, int] = {}
        self._processing: set[Item] = set()
        self._added_at: dict[Item, float] = {}
        self._started_at: dict[Item, float] = {}
        self._sequence = itertools.count()
        self._shutting_down = False
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)  # getters wait here
        self._idle = threading.Condition(self._lock)  # drainers wait here
        self._getters_waiting = 0  # for tests: how many getters are blocked
        self._metrics: _QueueMetrics | None = None
        if name:
            shared = metrics if metrics is not None else _SharedMetrics.get()
            self._metrics = _QueueMetrics(shared, name)
            shared._track(self)

    @property
    def name(self) -> str:
        return self._name

    @property
    def shutting_down(self) -> bool:
        with self._lock:
            return self._shutting_down

    def __len__(self) -> int:
        """Keys waiting for a worker (not those being processed)."""
        with self._lock:
            self._promote_due_locked()
            return len(self._queued)

    def add(self, item: Item, priority: int = PRIORITY_NORMAL) -> None:
        """Queue ``item`` at ``priority`` unless it is already queued, in which case it only
        rises to ``priority`` if that is higher; if it is being processed, queue it again when
        that is done (at the highest priority it was added with meanwhile). Ignored once
        shutting down."""
        _check_item(item)
        _check_priority(priority)
        with self._lock:
            self._add_locked(item, priority)

    def get(self, timeout: float | None = None) -> Item | None:
        """The queued key with the highest priority (the first queued among equals), now marked
        as processing: call ``done`` with it. Blocks while the queue is empty; ``None`` once
        shut down with nothing left queued, or after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with self._lock:
            while True:
                next_due = self._promote_due_locked()
                if self._queued:
                    break
                if self._shutting_down:
                    return None
                wait = next_due
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                self._getters_waiting += 1
                try:
                    self._not_empty.wait(wait)
                finally:
                    self._getters_waiting -= 1
            item = self._pop_locked()
            priority = self._dirty.pop(item)
            self._processing.add(item)
            now = self._clock()
            added = self._added_at.pop(item, now)
            self._started_at[item] = now
            if self._metrics is not None:
                self._metrics.got(priority, now - added)
            return item

    def done(self, item: Item) -> None:
        """Processing of ``item`` has finished; if it was added meanwhile, queue it again.
        Ignored for a key that is not being processed."""
        with self._lock:
            if item not in self._processing:
                return
            self._processing.discard(item)
            started = self._started_at.pop(item)
            if self._metrics is not None:
                self._metrics.done(self._clock() - started)
            priority = self._dirty.get(item)
            if priority is not None:
                self._push_locked(item, priority, next(self._sequence))
                self._not_empty.notify()
            elif self._is_idle_locked():
                self._idle.notify_all()

    def shut_down(self) -> None:
        """Ignore adds from now on; blocked getters get ``None`` at once, and later getters once
        the keys still queued have been handed out, highest priority first."""
        with self._lock:
            self._shut_down_locked()

    def shut_down_and_drop(self) -> int:
        """Shut down and forget every key still queued (keys being processed finish, and are
        not queued again): for a process that must stop acting at once. Returns how many
        keys were dropped."""
        with self._lock:
            dropped = len(self._dirty)
            if self._metrics is not None:
                for priority in self._dirty.values():
                    self._metrics.dropped(priority)
            self._heap.clear()
            self._queued.clear()
            self._dirty.clear()
            self._added_at.clear()
            self._shut_down_locked()
            return dropped

    def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        """Shut down, then wait until every key queued or being processed is done (workers must
        keep calling ``get``/``done``). True if that happened within ``timeout`` seconds."""
        with self._lock:
            self._shut_down_locked()
            return self._idle.wait_for(self._is_idle_locked, timeout)

    # -- locked helpers; subclasses extend these

    def _add_locked(self, item: Item, priority: int) -> None:
        if self._shutting_down:
            return
        current = self._dirty.get(item)
        if current is not None:
            if priority > current:
                self._raise_locked(item, current, priority)
            return
        self._dirty[item] = priority
        self._added_at[item] = self._clock()
        if self._metrics is not None:
            self._metrics.added(priority)
        if item in self._processing:
            return
        self._push_locked(item, priority, next(self._sequence))
        self._not_empty.notify()

    def _raise_locked(self, item: Item, current: int, priority: int) -> None:
        """Move dirty ``item`` from ``current`` up to ``priority``, keeping its place among
        keys queued at ``priority``; a key being processed is only remembered higher."""
        self._dirty[item] = priority
        if self._metrics is not None:
            self._metrics.moved(current, priority)
        entry = self._queued.get(item)
        if entry is None:
            return
        self._push_locked(item, priority, entry[1])
        if len(self._heap) > 2 * len(self._queued) + 32:
            self._heap = [(*live, key) for key, live in self._queued.items()]
            heapq.heapify(self._heap)

    def _push_locked(self, item: Item, priority: int, sequence: int) -> None:
        entry = (-priority, sequence)
        self._queued[item] = entry
        heapq.heappush(self._heap, (*entry, item))

    def _pop_locked(self) -> Item:
        """Take the live heap entry with the highest priority; ``_queued`` must not be empty."""
        while True:
            negated, sequence, item = heapq.heappop(self._heap)
            if self._queued.get(item) == (negated, sequence):
                del self._queued[item]
                return item

    def _promote_due_locked(self) -> float | None:
        """Move due delayed keys onto the queue; seconds until the next is due, or None."""
        return None

    def _shut_down_locked(self) -> None:
        self._shutting_down = True
        self._not_empty.notify_all()
        if self._is_idle_locked():
            self._idle.notify_all()

    def _is_idle_locked(self) -> bool:
        return not self._queued and not self._processing

    def _in_flight_ages(self) -> tuple[float, float]:
        """Seconds of work in progress, summed and the longest, for the scrape-time gauges."""
        with self._lock:
            now = self._clock()
            ages = [now - started for started in self._started_at.values()]
        return sum(ages), max(ages, default=0.0)


class DelayingQueue(WorkQueue):
    """A ``WorkQueue`` whose keys can be added after a delay, at a priority.

    A delay is a timer or a retry (``RateLimitingQueue.add_rate_limited``). A timer asks for a
    pass by then, as controller-runtime's priority queue has it (one entry per key, waiting or
    ready): a key already due a pass (queued, or added while it is processed) waits no more,
    and adding a key now takes its waiting timer with it, since the pass it is due runs
    sooner and asks for its own timer. Without this, a timer set for a wait that an event has
    already ended (a held Instance's Slice turning ready) still woke the key for a pass that
    found nothing to do: at 2,000 services at once, 2.7 passes per service. A retry
    waits its whole delay whatever else adds the key, as client-go's does.

    Invariants (under ``_lock``), besides ``WorkQueue``'s:
    - ``_ready_at`` maps each waiting key to the ``(due, sequence)`` of its one live entry in
      ``_waiting``; a key waits at most once, and a second delay only ever moves it earlier,
      as client-go does. No key waits on a timer alone while it is in ``_dirty``.
    - ``_delayed_priority`` has the keys of ``_ready_at``: the highest priority each waiting
      key was delayed with, the one it is added with when due.
    - ``_retrying`` holds the keys of ``_ready_at`` that any of their delays was a retry for:
      an add now leaves their wait where it is.
    - ``_waiting`` is a heap of (due, sequence, key) holding the live entry of each waiting
      key, plus stale entries (matching no ``_ready_at`` value) skipped when popped; keys due
      at the same time come out in the order they were delayed.
    - No extra thread: a getter waits no longer than until the earliest due time, and whoever
      next takes the lock after that moves due keys onto the queue, earliest first. Shutting
      down drops the keys still waiting.
    """

    def __init__(
        self, name: str = "", clock: Clock = time.monotonic, metrics: WorkQueueMetrics | None = None
    ) -> None:
        super().__init__(name=name, clock=clock, metrics=metrics)
        self._waiting: list[tuple[float, int, Item]] = []
        self._ready_at: dict[Item, tuple[float, int]] = {}
        self._delayed_priority: dict[Item, int] = {}
        self._retrying: set[Item] = set()

    def add_after(self, item: Item, delay: float, priority: int = PRIORITY_NORMAL) -> None:
        """Add ``item`` at ``priority`` once ``delay`` seconds have passed on the clock; now if
        ``delay <= 0``. A key already waiting keeps the earlier of its two due times and the
        higher of its two priorities; a key already due a pass (queued, or added again while
        it is processed) does not wait at all (it only rises to ``priority`` if that is
        higher): that pass runs first."""
        _check_item(item)
        _check_priority(priority)
        with self._lock:
            self._add_after_locked(item, delay, priority, retry=False)

    def _add_after_locked(self, item: Item, delay: float, priority: int, retry: bool) -> None:
        if self._shutting_down:
            return
        if delay <= 0:
            self._add_locked(item, priority)
            return
        current_priority = self._dirty.get(item)
        if not retry and current_priority is not None:
            if priority > current_priority:  # due now, as controller-runtime has it
                self._raise_locked(item, current_priority, priority)
            return
        ready = self._clock() + delay
        current = self._ready_at.get(item)
        if retry:
            self._retrying.add(item)
        if current is not None:
            self._delayed_priority[item] = max(self._delayed_priority[item], priority)
            if current[0] <= ready:
                return
        else:
            self._delayed_priority[item] = priority
        earliest = self._earliest_locked()
        entry = (ready, next(self._sequence))
        self._ready_at[item] = entry
        heapq.heappush(self._waiting, (*entry, item))
        if earliest is None or ready < earliest:
            # Getters sleep until the old earliest due time: have them look again.
            self._not_empty.notify_all()

    def _add_locked(self, item: Item, priority: int) -> None:
        """Add ``item`` now; a timer it waits on goes with it (its priority too), since the
        pass it is now due runs first. A retry it waits on stays."""
        if item in self._ready_at and item not in self._retrying:  # none wait once shut down
            del self._ready_at[item]  # its heap entry is stale from now on
            priority = max(priority, self._delayed_priority.pop(item))
        super()._add_locked(item, priority)

    def _earliest_locked(self) -> float | None:
        while self._waiting:
            ready, sequence, item = self._waiting[0]
            if self._ready_at.get(item) == (ready, sequence):
                return ready
            heapq.heappop(self._waiting)  # stale: the key was moved earlier or already added
        return None

    def _promote_due_locked(self) -> float | None:
        if not self._waiting:
            return None
        now = self._clock()
        while (earliest := self._earliest_locked()) is not None and earliest <= now:
            _, _, item = heapq.heappop(self._waiting)
            del self._ready_at[item]
            self._retrying.discard(item)
            self._add_locked(item, self._delayed_priority.pop(item))
        if earliest is None:
            return None
        return min(earliest - now, _MAX_DELAY_WAIT)

    def _shut_down_locked(self) -> None:
        self._waiting.clear()
        self._ready_at.clear()
        self._delayed_priority.clear()
        self._retrying.clear()
        super()._shut_down_locked()


class RateLimitingQueue(DelayingQueue):
    """A ``DelayingQueue`` that spaces each key's retries by a ``RateLimiter``."""

    def __init__(
        self,
        rate_limiter: RateLimiter | None = None,
        name: str = "",
        clock: Clock = time.monotonic,
        metrics: WorkQueueMetrics | None = None,
    ) -> None:
        super().__init__(name=name, clock=clock, metrics=metrics)
        self._limiter: RateLimiter = (
            rate_limiter if rate_limiter is not None else default_controller_rate_limiter()
        )

    def add_rate_limited(self, item: Item, priority: int = PRIORITY_NORMAL) -> None:
        """Add ``item`` at ``priority`` after the wait its rate limiter asks for; counts a
        retry. The priority orders the key once it is due, never shortens its wait."""
        _check_item(item)
        _check_priority(priority)
        if self.shutting_down:
            return
        if self._metrics is not None:
            self._metrics.retried()
        delay = self._limiter.when(item)
        with self._lock:
            self._add_after_locked(item, delay, priority, retry=True)

    def forget(self, item: Item) -> None:
        """The key succeeded (or is given up on): its rate limiter starts afresh."""
        self._limiter.forget(item)

    def num_requeues(self, item: Item) -> int:
        return self._limiter.num_requeues(item)


class _QueueMetrics:
    """One queue's children of the shared families; depth has a child per priority seen, and
    always one for ``PRIORITY_NORMAL``, so the queue's depth is scraped before any add. Used only
    under its queue's ``_lock``, which guards ``_depths``."""

    def __init__(self, metrics: WorkQueueMetrics, name: str) -> None:
        self._name = name
        self._depth_family = metrics.depth
        self._depths: dict[int, Gauge] = {}
        self._depth(PRIORITY_NORMAL)
        self._adds = metrics.adds.labels(name)
        self._queue_duration = metrics.queue_duration.labels(name)
        self._work_duration = metrics.work_duration.labels(name)
        self._retries = metrics.retries.labels(name)

    def _depth(self, priority: int) -> Gauge:
        child = self._depths.get(priority)
        if child is None:
            child = self._depths[priority] = self._depth_family.labels(self._name, str(priority))
        return child

    def added(self, priority: int) -> None:
        self._adds.inc()
        self._depth(priority).inc()

    def moved(self, old: int, new: int) -> None:
        self._depth(old).dec()
        self._depth(new).inc()

    def dropped(self, priority: int) -> None:
        self._depth(priority).dec()

    def got(self, priority: int, waited: float) -> None:
        self._depth(priority).dec()
        self._queue_duration.observe(waited)

    def done(self, worked: float) -> None:
        self._work_duration.observe(worked)

    def retried(self) -> None:
        self._retries.inc()


def _check_item(item: Item) -> None:
    if item is None:
        raise ValueError("None cannot be queued: get() returns None for shut down or timeout")


def _check_priority(priority: object) -> None:
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"a priority is an int, not {type(priority).__name__}: {priority!r}")

"""A controller in controller-runtime's shape: informer events become keys on a
rate-limited workqueue, and N workers call ``reconcile(key)`` for them.

A reconcile returns a ``Result`` or raises. An error requeues the key with rate limiting,
``requeue_after`` schedules it, success forgets its failures. A worker never dies: an API
error is logged in one line, any other exception (a bug) with its traceback; both are
counted and retried. ``look_after`` is a timer that queues its key only if a look, once it
is due, says so. It knows nothing of TPUs.

Its workers take keys only once every informer its passes read (``sources``: those it
watches, and those named with ``reads``) has synced, as each controller-runtime controller
waits for its own sources: a controller whose caches are small starts while the others still
list.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from ome.kube import JSON

from .client import NotLeadingError, api_error, describe_error, tracing_on
from .informer import DeletedFinalStateUnknown, EventHandler, Informer, deleted_object, object_key
from .logs import reconcile_context
from .workqueue import (
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    DelayingQueue,
    RateLimitingQueue,
)

log = logging.getLogger(__name__)
tracer = trace.get_tracer("ome.runtime.controller")


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for next: nothing, a rate-limited retry, or a visit later."""

    requeue: bool = False
    requeue_after: float | None = None


#: controller-runtime's ``result`` label values, each pre-created at zero per controller.
RESULTS = ("success", "error", "requeue", "requeue_after")

Reconcile = Callable[[str], Result | None]
KeysOf = Callable[[JSON], Iterable[str]]
#: Whether an update (old, new) is news to a watch.
Changed = Callable[[JSON, JSON], bool]
#: The workqueue priority of an event: (old, new) for an update, (None, obj) for an add and
#: (obj, None) for a delete (controller-runtime's handlers that raise an item's priority).
Prioritize = Callable[[JSON | None, JSON | None], int]
#: A look at a key some time after ``Controller.look_after`` asked for it: the seconds until
#: the key is due a pass (0 or less: now, and it is queued), or None (no pass is due).
Look = Callable[[str], float | None]


def gone_high(_old: JSON | None, new: JSON | None) -> int:
    """An object's going unblocks work (what waited for it to leave): first; its coming and
    its changes are new work."""
    return PRIORITY_HIGH if new is None else PRIORITY_NORMAL


class ControllerMetrics:
    """controller-runtime's reconcile metrics, labelled by controller."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = registry if registry is not None else REGISTRY
        self.total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=reg,
        )
        self.errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=reg,
        )
        self.time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=(
                0.005,
                0.01,
                0.025,
                0.05,
                0.1,
                0.15,
                0.2,
                0.25,
                0.3,
                0.35,
                0.4,
                0.45,
                0.5,
                0.6,
                0.7,
                0.8,
                0.9,
                1.0,
                1.25,
                1.5,
                1.75,
                2.0,
                2.5,
                3.0,
                3.5,
                4.0,
                4.5,
                5,
                6,
                7,
                8,
                9,
                10,
                15,
                20,
                25,
                30,
                40,
                50,
                60,
            ),
            registry=reg,
        )


_default_metrics: ControllerMetrics | None = None
_default_lock = threading.Lock()


def default_metrics() -> ControllerMetrics:
    global _default_metrics  # noqa: PLW0603 - one family set per process registry
    with _default_lock:
        if _default_metrics is None:
            _default_metrics = ControllerMetrics()
        return _default_metrics


class Controller:
    """Reconciles keys from its queue with ``workers`` threads."""

    def __init__(
        self,
        name: str,
        reconcile: Reconcile,
        workers: int = 1,
        queue: RateLimitingQueue | None = None,
        metrics: ControllerMetrics | None = None,
        look: Look | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("a controller needs at least one worker")
        self.name = name
        self.reconcile = reconcile
        self.workers = workers
        self.queue = queue if queue is not None else RateLimitingQueue(name=name)
        self.metrics = metrics or default_metrics()
        self.look = look
        #: the keys ``look`` is to see later (``look_after``), by one thread of their own; an
        #: unnamed queue, which records no metrics
        self._looks = DelayingQueue()
        self._threads: list[threading.Thread] = []
        #: the informers whose caches the passes read: a worker takes no key before each has
        #: synced (filled by ``watch`` and ``reads`` while wiring, read-only once started)
        self.sources: list[Informer] = []
        #: set by ``stop``: a worker still waiting for the sources gives up
        self._stopping = threading.Event()
        #: set by the first worker to see every source synced
        self._synced = threading.Event()
        # Every series starts at zero, as controller-runtime's do; each pass counts in its
        # own (looked up once here, not twice per reconcile).
        self._totals = {result: self.metrics.total.labels(name, result) for result in RESULTS}
        self._errors = self.metrics.errors.labels(name)
        self._time = self.metrics.time.labels(name)

    # -- sources -------------------------------------------------------------------------

    def enqueue(self, key: str, priority: int = PRIORITY_NORMAL) -> None:
        self.queue.add(key, priority)

    def reads(self, *informers: Informer) -> None:
        """Name informers whose caches the passes read without watching them (``watch``
        names those it watches): no pass runs before they have synced."""
        for informer in informers:
            if informer not in self.sources:
                self.sources.append(informer)

    def look_after(self, key: str, delay: float) -> None:
        """Have ``look`` see ``key`` once ``delay`` seconds have passed (a key asked for twice
        is seen at the earlier time), and queue the key then only if ``look`` says it is due
        a pass. A timer on a state that may be gone by then: unlike ``queue.add_after``, one
        whose state went costs no reconcile."""
        if self.look is None:
            raise ValueError(f"controller {self.name} has no look")
        self._looks.add_after(key, delay)

    def watch(
        self,
        informer: Informer,
        keys: KeysOf | None = None,
        changed: Changed | None = None,
        priority: Prioritize | None = None,
        also: Iterable[Controller] = (),
        changed_here: Changed | None = None,
    ) -> None:
        """Queue the keys ``keys`` maps each changed object to (its own key by default);
        an update queues both the old and the new object's keys, and only when ``changed``
        (old, new) says it matters, when given (controller-runtime's update predicate: a
        node's heartbeat is no news to a controller that reads its labels).

        Keys go at ``priority``'s answer for the event (normal without one), except that the
        adds of the informer's first list go at low priority, as controller-runtime's
        priority queue has them: a restart's thousands of objects wait behind any event
        that unblocks work.

        ``also``: other controllers that watch the informer alike (the same keys, predicate
        and priority); each event's keys and priority are worked out once and queued for
        every one of them, not once per controller. ``changed_here``: a narrower update
        predicate for this controller alone, when it reads less of the objects than they do;
        an update that ``changed`` passes and it does not is queued for them only."""
        mapper: KeysOf = keys or (lambda obj: [object_key(obj)])
        rank: Prioritize = priority or (lambda _old, _new: PRIORITY_NORMAL)
        also = list(also)
        queues = [self.queue, *(c.queue for c in also)]
        theirs = queues[1:]
        for controller in (self, *also):
            controller.reads(informer)

        def add(obj: JSON) -> None:
            level = rank(None, obj) if informer.has_synced() else PRIORITY_LOW
            for key in mapper(obj):
                for queue in queues:
                    queue.add(key, level)

        def update(old: JSON, new: JSON) -> None:
            if changed is not None and not changed(old, new):
                return
            targets = queues
            if changed_here is not None and not changed_here(old, new):
                if not theirs:
                    return
                targets = theirs
            level = rank(old, new)
            for key in {*mapper(old), *mapper(new)}:
                for queue in targets:
                    queue.add(key, level)

        def delete(obj: JSON | DeletedFinalStateUnknown) -> None:
            gone = deleted_object(obj)
            level = rank(gone, None)
            for key in mapper(gone):
                for queue in queues:
                    queue.add(key, level)

        informer.add_handler(EventHandler(add, update, delete))

    # -- workers -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the workers (and the looks' thread); each waits for the sources to sync
        before it takes a key."""
        for i in range(self.workers):
            t = threading.Thread(target=self._work, name=f"{self.name}-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        if self.look is not None:
            t = threading.Thread(target=self._watch_looks, name=f"{self.name}-looks", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 30.0, drain: bool = True) -> bool:
        """Stop taking keys and wait for in-flight reconciles; True if they finished. With
        ``drain``, the keys already queued are reconciled first (a graceful stop); without,
        they are dropped: for a process that must stop acting at once (its lease is lost). Keys
        queued while the sources never synced are dropped too: no pass could run them."""
        self._stopping.set()
        if not drain or not self._synced.is_set():
            dropped = self.queue.shut_down_and_drop()
            if dropped:
                log.info("%s: dropped %d queued keys", self.name, dropped)
            drained = True
        else:
            drained = self.queue.shut_down_with_drain(timeout)
        self._looks.shut_down_and_drop()  # the queue takes no more keys: nor do the looks
        for t in self._threads:
            t.join(timeout)
        self._threads.clear()
        return drained

    def _sources_synced(self) -> bool:
        """Wait until every source has synced (True), or until ``stop`` (False)."""
        for informer in self.sources:
            while not informer.wait_for_sync(0.2):
                if self._stopping.is_set():
                    return False
        if self._stopping.is_set():
            return False
        self._synced.set()
        return True

    def _work(self) -> None:
        if not self._sources_synced():
            return
        while True:
            key = self.queue.get()
            if key is None:
                return
            try:
                self._reconcile_one(str(key))
            finally:
                self.queue.done(key)

    def _watch_looks(self) -> None:
        """Each key ``look_after`` asked for, once due: queued if ``look`` says it is due a
        pass, looked at again later if it says when; a look that raises (a bug) is logged
        with its traceback and asks for nothing."""
        look = self.look
        assert look is not None
        if not self._sources_synced():
            return
        while True:
            key = self._looks.get()
            if key is None:
                return
            try:
                due = look(str(key))
            except Exception:
                log.exception("%s: look at %s failed", self.name, key)
                due = None
            finally:
                self._looks.done(key)
            if due is not None and due <= 0:
                self.queue.add(key)
            elif due is not None:
                self._looks.add_after(key, due)

    def _reconcile_one(self, key: str) -> None:
        start = time.monotonic()
        # Its log lines name the object, as the span does. With tracing off there is no span
        # to make: the API's no-op span still cost a context manager per reconcile.
        with reconcile_context(self.name, key):
            if not tracing_on():
                outcome = self._run(key, None)
            else:
                with tracer.start_as_current_span(
                    f"reconcile {self.name}", attributes={"controller": self.name, "key": key}
                ) as span:
                    outcome = self._run(key, span)
                    span.set_attribute("result", outcome)
        self._totals[outcome].inc()
        self._time.observe(time.monotonic() - start)

    def _run(self, key: str, span: trace.Span | None) -> str:
        """Reconcile ``key`` and queue it again as its result asks; the outcome's name."""
        outcome = "success"
        try:
            result = self.reconcile(key) or Result()
        except Exception as e:
            outcome = "error"
            if isinstance(e, NotLeadingError):
                # The fence doing its job: the lease is lost and the queue is about to be
                # dropped. The leader elector says so once; a line per key taken meanwhile
                # (a hundred, with a hundred queued) would bury it.
                log.debug("%s: reconcile %s stopped: %s", self.name, key, e)
            elif api_error(e):
                log.error("%s: reconcile %s failed: %s", self.name, key, describe_error(e))
            else:
                log.exception("%s: reconcile %s failed", self.name, key)
            self._errors.inc()
            if span is not None:
                span.record_exception(e)
                span.set_status(Status(StatusCode.ERROR, f"{type(e).__name__}: {e}"))
            self.queue.add_rate_limited(key)
        else:
            if result.requeue_after is not None and result.requeue_after > 0:
                outcome = "requeue_after"
                self.queue.forget(key)
                self.queue.add_after(key, result.requeue_after)
            elif result.requeue:
                outcome = "requeue"
                self.queue.add_rate_limited(key)
            else:
                self.queue.forget(key)
        return outcome

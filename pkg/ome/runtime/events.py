"""Kubernetes Events for any object, recorded as client-go's ``tools/record`` does: queued,
correlated (deduplicated, aggregated, spam-filtered) and written by one background thread.
It knows nothing of TPUs, and must never raise to, nor block, the caller of ``event()``.

Two choices client-go leaves to its user are made here, so that the Warnings a user is told
to read are not lost among those a lasting condition repeats:
- the spam filter's key (client-go's ``SpamKeyFunc``) may keep a budget per reason, and
  exempt reasons whose every occurrence matters (``spam_key_by_reason``);
- ``lasting()`` records the Warning of a condition that a controller sees again on each
  pass when it starts or its gist changes, and then refreshes it (one more ``count``) at
  most once per ``lasting_refresh`` while it lasts.

Invariants:
- ``event()`` only builds a core/v1 Event dict and queues it; every API call happens on the
  writer thread. A full queue (1000, as client-go's broadcaster) drops the event with a log.
- The correlator's caches (LRU, 4096 entries each) are touched only by the writer thread.
- Correlation runs as client-go's ``EventCorrelate``: aggregate, then observe (count and
  patch), then the spam filter; so a filtered repeat still counts toward the next ``count``.
- ``_lasting`` (LRU, 4096 entries) maps (involved object, reason, subject) to the gist last
  recorded and when; it is read and written under ``_lasting_lock`` by the callers'
  threads. An entry evicted or expired only means the next sighting is recorded again.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cachetools import LRUCache
from kubernetes.client.exceptions import ApiException

from ome.kube import JSON

from .client import Client, api_error, describe_error, namespace_terminating
from .rest import EVENTS

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"

#: client-go's numbers (tools/record/events_cache.go and event.go).
MAX_LRU_CACHE_ENTRIES = 4096
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL_SECONDS = 600.0
SPAM_BURST = 25
SPAM_REFILL_SECONDS = 300.0
MAX_QUEUED_EVENTS = 1000
#: How often the Warning of a condition that lasts is recorded again (one more ``count``).
LASTING_REFRESH_SECONDS = 60.0
COMBINED_PREFIX = "(combined from similar events): "


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _timestamp(t: datetime) -> str:
    """``metav1.Time`` as JSON: RFC 3339 in UTC, whole seconds."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _unix_ns(t: datetime) -> int:
    delta = t - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def _text(d: Any, *path: str) -> str:
    for key in path:
        if not isinstance(d, dict):
            return ""
        d = d.get(key)
    return d if isinstance(d, str) else ""


# -- keys (client-go's getEventKey, getSpamKey, EventAggregatorByReasonFunc) ---------------


def _event_key(ev: JSON) -> str:
    ref = ev.get("involvedObject") or {}
    return "".join(
        [
            _text(ev, "source", "component"),
            _text(ev, "source", "host"),
            _text(ref, "kind"),
            _text(ref, "namespace"),
            _text(ref, "name"),
            _text(ref, "fieldPath"),
            _text(ref, "uid"),
            _text(ref, "apiVersion"),
            _text(ev, "type"),
            _text(ev, "reason"),
            _text(ev, "message"),
        ]
    )


#: The key of an event's spam budget; None exempts the event from the spam filter.
SpamKeyFunc = Callable[[JSON], "str | None"]


def spam_key(ev: JSON) -> str:
    """client-go's ``getSpamKey``: one budget per involved object (and source)."""
    ref = ev.get("involvedObject") or {}
    return "".join(
        [
            _text(ev, "source", "component"),
            _text(ev, "source", "host"),
            _text(ref, "kind"),
            _text(ref, "namespace"),
            _text(ref, "name"),
            _text(ref, "uid"),
            _text(ref, "apiVersion"),
        ]
    )


def spam_key_by_reason(exempt: Collection[str] = ()) -> SpamKeyFunc:
    """A spam key of one budget per involved object and reason, so that a reason repeated
    often cannot use up the budget of another; events whose reason is in ``exempt`` are never
    filtered (occurrences a user must see, each of which a controller records once)."""
    never = frozenset(exempt)

    def key(ev: JSON) -> str | None:
        reason = _text(ev, "reason")
        return None if reason in never else f"{spam_key(ev)}\x00{reason}"

    return key


def _aggregate_key(ev: JSON) -> tuple[str, str]:
    """(the key similar events share, the key that tells them apart)."""
    ref = ev.get("involvedObject") or {}
    similar = "".join(
        [
            _text(ev, "source", "component"),
            _text(ev, "source", "host"),
            _text(ref, "kind"),
            _text(ref, "namespace"),
            _text(ref, "name"),
            _text(ref, "uid"),
            _text(ref, "apiVersion"),
            _text(ev, "type"),
            _text(ev, "reason"),
            _text(ev, "reportingComponent"),
            _text(ev, "reportingInstance"),
        ]
    )
    return similar, _text(ev, "message")


def _describe(ev: JSON) -> str:
    meta = ev.get("metadata") or {}
    ref = ev.get("involvedObject") or {}
    return (
        f"{meta.get('namespace', '')}/{meta.get('name', '')} ({ev.get('type')} "
        f"{ev.get('reason')} on {ref.get('kind', '')} {ref.get('name', '')})"
    )


# -- the correlator ----------------------------------------------------------------------


@dataclass
class _AggregateRecord:
    local_keys: dict[str, None] = field(default_factory=dict)  # an ordered set
    last: datetime | None = None


@dataclass
class _Observation:
    count: int
    first_timestamp: str
    name: str


@dataclass
class _TokenBucket:
    """golang.org/x/time/rate's passive limiter: starts full, refills continuously."""

    tokens: float
    last: datetime

    def try_accept(self, now: datetime, burst: int, refill_seconds: float) -> bool:
        elapsed = max(0.0, (now - self.last).total_seconds())
        self.tokens = min(float(burst), self.tokens + elapsed / refill_seconds)
        self.last = max(now, self.last)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass
class Correlated:
    """What to write: the Event, and the merge patch for an existing one (``None``: create)."""

    event: JSON
    patch: JSON | None
    key: str


class EventCorrelator:
    """client-go's ``EventCorrelator``: aggregates similar events, counts identical ones and
    drops those over the spam budget. Not thread-safe: one writer thread owns it."""

    def __init__(
        self,
        unique_ns: Callable[[datetime], int],
        burst: int = SPAM_BURST,
        refill_seconds: float = SPAM_REFILL_SECONDS,
        max_entries: int = MAX_LRU_CACHE_ENTRIES,
        spam_key: SpamKeyFunc = spam_key,
    ) -> None:
        self._unique_ns = unique_ns
        self._spam_key = spam_key
        self._burst = burst
        self._refill_seconds = refill_seconds
        self._aggregates: LRUCache[str, _AggregateRecord] = LRUCache(max_entries)
        self._observations: LRUCache[str, _Observation] = LRUCache(max_entries)
        self._spam: LRUCache[str, _TokenBucket] = LRUCache(max_entries)

    def correlate(self, new: JSON, now: datetime) -> Correlated | None:
        """The event to write, or ``None`` when the spam filter drops it. ``now`` is when
        the event happened (client-go reads its clock here, when the event is written)."""
        event, key = self._aggregate(new, now)
        observed, patch = self._observe(event, key)
        if self._filtered(observed, now):
            return None
        return Correlated(observed, patch, key)

    def update_state(self, key: str, written: JSON) -> None:
        """Remember what the server answered, so the next repeat patches that Event."""
        self._observations[key] = _Observation(
            count=int(written.get("count") or 1),
            first_timestamp=str(written.get("firstTimestamp") or ""),
            name=_text(written, "metadata", "name"),
        )

    def _aggregate(self, new: JSON, now: datetime) -> tuple[JSON, str]:
        event_key = _event_key(new)
        aggregate_key, local_key = _aggregate_key(new)
        record = self._aggregates.get(aggregate_key)
        if (
            record is None
            or record.last is None
            or (now - record.last).total_seconds() > AGGREGATE_INTERVAL_SECONDS
        ):
            record = _AggregateRecord()
        record.local_keys[local_key] = None
        record.last = now
        self._aggregates[aggregate_key] = record
        if len(record.local_keys) < AGGREGATE_MAX_EVENTS:
            return new, event_key
        # Keep the set from growing past the maximum. client-go pops an arbitrary member;
        # the oldest is popped here, so that runs repeat exactly.
        del record.local_keys[next(iter(record.local_keys))]
        ref = new["involvedObject"]
        stamp = _timestamp(now)
        combined: JSON = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{ref.get('name', '')}.{self._unique_ns(now):x}",
                "namespace": new["metadata"]["namespace"],
            },
            "involvedObject": ref,
            "reason": new.get("reason"),
            "message": COMBINED_PREFIX + str(new.get("message") or ""),
            "type": new.get("type"),
            "source": new.get("source"),
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": new.get("reportingComponent", ""),
            "reportingInstance": new.get("reportingInstance", ""),
        }
        return combined, aggregate_key

    def _observe(self, event: JSON, key: str) -> tuple[JSON, JSON | None]:
        event = {**event, "metadata": dict(event["metadata"])}
        last = self._observations.get(key)
        patch: JSON | None = None
        if last is not None and last.count > 0:
            event["metadata"]["name"] = last.name
            event["firstTimestamp"] = last.first_timestamp
            event["count"] = last.count + 1
            patch = {
                "count": event["count"],
                "lastTimestamp": event["lastTimestamp"],
                "message": event["message"],
            }
        self._observations[key] = _Observation(
            count=int(event["count"]),
            first_timestamp=str(event["firstTimestamp"]),
            name=event["metadata"]["name"],
        )
        return event, patch

    def _filtered(self, event: JSON, now: datetime) -> bool:
        key = self._spam_key(event)
        if key is None:
            return False
        bucket = self._spam.get(key)
        if bucket is None:
            bucket = _TokenBucket(tokens=float(self._burst), last=now)
        accepted = bucket.try_accept(now, self._burst, self._refill_seconds)
        self._spam[key] = bucket
        return not accepted


# -- the recorder ------------------------------------------------------------------------


class EventRecorder:
    """Records Events about objects. ``event()`` queues; ``lasting()`` queues what a lasting
    condition has not recorded lately; ``start()`` runs the writer thread; ``flush()`` waits
    for what is queued; ``stop()`` flushes, then ends the thread."""

    def __init__(
        self,
        client: Client,
        component: str,
        host: str = "",
        clock: Callable[[], datetime] = _utc_now,
        burst: int = SPAM_BURST,
        refill_seconds: float = SPAM_REFILL_SECONDS,
        *,
        max_queued: int = MAX_QUEUED_EVENTS,
        spam_key: SpamKeyFunc = spam_key,
        lasting_refresh: float = LASTING_REFRESH_SECONDS,
    ) -> None:
        self._client = client
        self._source: JSON = {"component": component}
        if host:
            self._source["host"] = host
        self._component, self._host = component, host
        self._clock = clock
        self._max_queued = max_queued
        self._name_lock = threading.Lock()
        self._last_ns = 0
        self._correlator = EventCorrelator(
            self._unique_ns, burst, refill_seconds, spam_key=spam_key
        )
        self._lasting_refresh = lasting_refresh
        self._lasting_lock = threading.Lock()
        self._lasting: LRUCache[tuple[str, str, str], tuple[str, datetime]] = LRUCache(
            MAX_LRU_CACHE_ENTRIES
        )
        self._cond = threading.Condition()
        self._queue: deque[tuple[JSON, datetime]] = deque()
        self._queued = 0  # events accepted into the queue, ever
        self._handled = 0  # of those, events written, dropped or failed
        self._closed = False  # no more events accepted; the writer ends when the queue is
        self._abort = threading.Event()  # the writer drops what is left and ends now
        self._thread: threading.Thread | None = None

    # -- the caller's side ---------------------------------------------------------------

    def event(self, obj: JSON, type: str, reason: str, message: str) -> None:
        """Queue an Event about ``obj`` (a plain dict). Never raises, never waits on the API."""
        try:
            self._event(obj, type, reason, message)
        except Exception:
            log.exception("could not record event %s %s", type, reason)

    def lasting(
        self,
        obj: JSON,
        type: str,
        reason: str,
        message: str,
        *,
        subject: str = "",
        gist: str | None = None,
    ) -> None:
        """Record the Event of a condition that lasts, which the caller sees (and reports)
        again on every pass: when it starts, when its ``gist`` (the message unless given: the
        part whose change is news) changes, and otherwise at most once per
        ``lasting_refresh`` while it lasts, so that its ``count`` still grows. ``subject``
        tells apart conditions of one reason about one object (an Instance, a Slice). Never
        raises, never waits on the API."""
        try:
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            key = (
                "/".join(
                    (
                        str(obj.get("kind") or ""),
                        _text(meta, "namespace"),
                        _text(meta, "name"),
                        _text(meta, "uid"),
                    )
                ),
                reason,
                subject,
            )
            now, gist = self._now(), message if gist is None else gist
            with self._lasting_lock:
                seen = self._lasting.get(key)
                if (
                    seen is not None
                    and seen[0] == gist
                    and (now - seen[1]).total_seconds() < self._lasting_refresh
                ):
                    return
                self._lasting[key] = (gist, now)
        except Exception:
            log.exception("could not record event %s %s", type, reason)
            return
        self.event(obj, type, reason, message)

    def _now(self) -> datetime:
        now = self._clock()
        return now.replace(tzinfo=UTC) if now.tzinfo is None else now  # naive reads UTC

    def _event(self, obj: JSON, type_: str, reason: str, message: str) -> None:
        if type_ not in (NORMAL, WARNING):
            log.error("unsupported event type %r (reason %r): not recorded", type_, reason)
            return
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        name = _text(meta, "name")
        if not name:
            log.error("event %s about an object without metadata.name: not recorded", reason)
            return
        ref: JSON = {}
        for key, value in (
            ("kind", obj.get("kind")),
            ("namespace", _text(meta, "namespace")),
            ("name", name),
            ("uid", _text(meta, "uid")),
            ("apiVersion", obj.get("apiVersion")),
            ("resourceVersion", _text(meta, "resourceVersion")),
        ):
            if value:
                ref[key] = value
        now = self._now()
        stamp = _timestamp(now)
        ev: JSON = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{name}.{self._unique_ns(now):x}",
                "namespace": ref.get("namespace") or "default",
            },
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "type": type_,
            "source": dict(self._source),
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": self._component,
            "reportingInstance": self._host,
        }
        with self._cond:
            if self._closed:
                log.debug("event recorder stopped: dropping %s", _describe(ev))
                return
            if len(self._queue) >= self._max_queued:
                log.error("event queue full (%d): dropping %s", self._max_queued, _describe(ev))
                return
            self._queue.append((ev, now))
            self._queued += 1
            self._cond.notify_all()

    def _unique_ns(self, t: datetime) -> int:
        """The time in ns for an Event's name, made strictly increasing: ``datetime`` has
        only microseconds, and two Events about one object must not share a name."""
        with self._name_lock:
            self._last_ns = max(_unix_ns(t), self._last_ns + 1)
            return self._last_ns

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("an event recorder cannot start again after stop()")
            if self._thread is not None:
                return
            self._thread = threading.Thread(
                target=self._run, name=f"event-recorder-{self._component}", daemon=True
            )
            self._thread.start()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every event queued before this call is written (or dropped); False
        when that takes longer than ``timeout``."""
        with self._cond:
            target = self._queued
            return self._cond.wait_for(lambda: self._handled >= target, timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Flush for up to ``timeout``, then end the writer; what is still queued is dropped."""
        flushed = self.flush(timeout) if self._thread is not None else True
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._abort.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if not flushed:
            log.error("event recorder stopped before every queued event was written")

    # -- the writer thread ---------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue) or self._closed)
                if self._abort.is_set() or (self._closed and not self._queue):
                    dropped = len(self._queue)
                    self._queue.clear()
                    self._handled += dropped
                    self._cond.notify_all()
                    if dropped:
                        log.error("event recorder stopping: dropped %d queued events", dropped)
                    return
                ev, when = self._queue.popleft()
            try:
                self._record(ev, when)
            except Exception:
                log.exception("event %s not written", _describe(ev))
            finally:
                with self._cond:
                    self._handled += 1
                    self._cond.notify_all()

    def _record(self, ev: JSON, when: datetime) -> None:
        result = self._correlator.correlate(ev, when)
        if result is None:
            log.debug("event %s dropped by the spam filter", _describe(ev))
            return
        try:
            self._write(result)
        except Exception as e:
            if not api_error(e):
                raise
            if namespace_terminating(e):  # its object goes with the namespace
                log.debug("event %s not written: its namespace is being deleted", _describe(ev))
                return
            # The client has retried what was transient; the event is lost, the caller not.
            log.error("event %s not written: %s", _describe(ev), describe_error(e))

    def _write(self, result: Correlated) -> None:
        """Patch a repeat, else create; the client retries transient failures."""
        event = result.event
        namespace = event["metadata"]["namespace"]
        written: JSON | None = None
        if result.patch is not None:
            try:
                written = self._client.patch(
                    EVENTS, event["metadata"]["name"], result.patch, namespace
                )
            except ApiException as e:
                if e.status != 404:
                    raise
        if written is None:  # new, or the Event to patch expired or was deleted
            try:
                written = self._client.create(EVENTS, event, namespace)
            except ApiException as e:
                if e.status != 409:
                    raise
                log.debug("event %s already exists: not retried", _describe(event))
                return
        self._correlator.update_state(result.key, written)

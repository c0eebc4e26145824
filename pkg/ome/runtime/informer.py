"""Reflector and informer: list, then watch from the list's resourceVersion, and keep a
cache of plain JSON dicts that handlers hear about, as client-go's ``tools/cache`` does.

Written here rather than taken from ``kubernetes.informer``: that one deserializes into
pydantic models (which reject objects missing model-required fields), sets no read timeout
(a dead connection hangs it), has no backoff and cannot be stopped until an event arrives.
It knows nothing of TPUs.

Its reflector behaves as client-go's, so that a failing server costs it little and its cache
never goes stale for long:
- every failed list-and-watch cycle backs off (0.8 s doubling to 15 s, jittered), whatever
  the error and however it arrives: an error answer, a dropped connection, an ERROR event,
  or a watch that ends at once without an event;
- a 410 (Gone) re-lists, after the backoff; so does a watch that fails twice in a row, so
  that through an outage of the watches the cache is never older than the backoff's cap plus
  a list. A 429 is the server asking for less: the watch is retried from where it was,
  never re-listed for it;
- a streak of failures is logged on its 1st, 2nd, 4th, 8th ... failure (the log backs off
  as the retries do), and its end once; an expired watch (410) is routine, logged at debug.

Invariants:
- ``_rv`` is the resourceVersion the next watch resumes from; ``None`` means re-list.
- The cache changes only on the reflector's thread, under ``_lock``; readers get copies, so
  nothing a reader does can change the cache.
- Handlers run on the reflector's thread, in event order; they must be quick (enqueue keys).
"""

from __future__ import annotations

import builtins
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from ome.backoff import capped_exponential
from ome.kube import JSON, Resource, json_copy

from .client import describe_error, retry_after
from .rest import Rest, WatchStream

log = logging.getLogger(__name__)

#: How many Retry-After hints in a row are honoured before the exponential backoff.
MAX_HINTED_WAITS = 10


def object_key(obj: JSON) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))


@dataclass(frozen=True)
class DeletedFinalStateUnknown:
    """A delete noticed by a re-list: the object is gone, and ``obj`` is the last state the
    cache had, which may be stale (client-go's tombstone)."""

    key: str
    obj: JSON


def deleted_object(obj: JSON | DeletedFinalStateUnknown) -> JSON:
    """The object of a delete notification, tombstone or not."""
    return obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj


@dataclass
class EventHandler:
    """What an informer tells: an object appeared, changed (old, new) or went (its last
    state, or a ``DeletedFinalStateUnknown`` when a re-list found it gone).

    Handlers get the cached objects themselves, as client-go's do, not copies: a copy per
    handler per event was a fifth of the manager's CPU in a burst. A handler must never
    change what it is given; one that needs to keeps its own ``json_copy``."""

    on_add: Callable[[JSON], None] | None = None
    on_update: Callable[[JSON, JSON], None] | None = None
    on_delete: Callable[[JSON | DeletedFinalStateUnknown], None] | None = None


IndexFunc = Callable[[JSON], "builtins.list[str]"]
#: Reduces an object before it is cached (see ``Informer``).
Transform = Callable[[JSON], JSON]


def index_by_label(label: str) -> IndexFunc:
    """Index objects by the value of one label (objects without it are not indexed)."""

    def index(obj: JSON) -> builtins.list[str]:
        value = ((obj.get("metadata") or {}).get("labels") or {}).get(label)
        return [value] if value is not None else []

    return index


def index_by_node_name(obj: JSON) -> builtins.list[str]:
    """Index pods by ``spec.nodeName`` (unbound pods are not indexed)."""
    node = (obj.get("spec") or {}).get("nodeName")
    return [node] if node else []


class WatchExpiredError(Exception):
    """The watch's resourceVersion is too old (410 Gone): only a re-list can go on."""


class ShortWatchError(Exception):
    """A watch that ended at once without an event: a server that ends watches so would
    make the reflector spin (client-go's "very short watch")."""


class Backoff:
    """Exponential backoff with jitter, from ``initial`` to ``cap`` seconds, that starts over
    after ``reset_after`` seconds without a failure. The jitter (up to +100%) stays within
    the cap, so that a wait is never longer than ``cap``.

    client-go's reflector waits 800 ms doubling to 30 s (60 s with its jitter), reset after
    2 minutes. The start and the reset are its; the cap is 15 s, because through an outage of
    the watches each re-list is what a cache learns by, and a user's change reaches its
    effect through a chain of them (the InferenceService's informer, then its replica's, then
    the pods'): two hops of at most 15 s apply a scale-down within about half a minute."""

    def __init__(
        self,
        initial: float = 0.8,
        cap: float = 15.0,
        reset_after: float = 120.0,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.initial, self.cap, self.reset_after = initial, cap, reset_after
        self._rng = rng or random.Random()
        self._clock = clock
        self._failures = 0
        self._last_failure: float | None = None

    def next(self) -> float:
        now = self._clock()
        if self._last_failure is not None and now - self._last_failure > self.reset_after:
            self._failures = 0
        self._last_failure = now
        self._failures += 1
        return capped_exponential(
            self._failures, self.initial, self.cap, jitter=1.0, draw=self._rng.random()
        )


class Informer:
    """A cached, watched view of one resource (optionally one namespace and selectors)."""

    def __init__(
        self,
        rest: Rest,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout: tuple[int, int] = (300, 600),
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        transform: Transform | None = None,
    ) -> None:
        """``transform`` reduces each object before it is cached and handed to handlers
        (controller-runtime's cache ``TransformFunc``): an informer over many objects keeps
        only the fields its readers use. It must be pure and keep ``metadata``'s name,
        namespace and resourceVersion. Every informer drops ``metadata.managedFields`` first
        (controller-runtime's ``TransformStripManagedFields``): the server-side apply
        bookkeeping is often the largest part of an object, and no reader here uses it (an
        update without it leaves the server's as they are)."""
        self.rest = rest
        self.transform = transform
        self._reduce: Transform = (
            _strip_managed_fields
            if transform is None
            else lambda obj: transform(_strip_managed_fields(obj))
        )
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_timeout = watch_timeout
        self.backoff = backoff or Backoff()
        self._rng = rng or random.Random()
        self._lock = threading.RLock()
        self._cache: dict[str, JSON] = {}
        #: index name -> function, and index name -> value -> keys; kept with the cache
        self._index_funcs: dict[str, IndexFunc] = {}
        self._indices: dict[str, dict[str, set[str]]] = {}
        self._handlers: builtins.list[EventHandler] = []
        self._rv: str | None = None
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None
        # The reflector's own state, touched by its thread only: failed cycles in a row,
        # failed watches in a row (a list in between does not end it), Retry-After hints
        # honoured in a row, and whether this streak was logged as a warning.
        self._streak = self._watch_failures = self._hinted_waits = 0
        self._warned = False

    @property
    def name(self) -> str:
        sel = ",".join(s for s in (self.label_selector, self.field_selector) if s)
        return f"{self.resource.plural}{'[' + sel + ']' if sel else ''}"

    # -- readers -------------------------------------------------------------------------

    def get(self, key: str) -> JSON | None:
        with self._lock:
            obj = self._cache.get(key)
            return json_copy(obj) if obj is not None else None

    def peek(self, key: str) -> JSON | None:
        """The cached object itself, not a copy (see ``peek_list``)."""
        with self._lock:
            return self._cache.get(key)

    def list(self) -> builtins.list[JSON]:
        with self._lock:
            return [json_copy(o) for o in self._cache.values()]

    def peek_list(self) -> builtins.list[JSON]:
        """The cached objects themselves, not copies: for a reader that only reads and scans
        many objects (a deep copy of each is most of the cost of a scan over thousands).
        Never change what it returns: the cache and every other reader share it."""
        with self._lock:
            return list(self._cache.values())

    def keys(self) -> builtins.list[str]:
        with self._lock:
            return list(self._cache)

    def add_indexer(self, name: str, func: IndexFunc) -> None:
        """Index the cache by ``func``'s values; works before or after the start."""
        with self._lock:
            self._index_funcs[name] = func
            self._indices[name] = {}
            for key, obj in self._cache.items():
                self._index(name, key, None, obj)

    def by_index(self, name: str, value: str) -> builtins.list[JSON]:
        """Copies of the objects whose index ``name`` includes ``value``."""
        with self._lock:
            keys = sorted(self._indices[name].get(value, set()))
            return [json_copy(self._cache[k]) for k in keys]

    def peek_by_index(self, name: str, value: str) -> builtins.list[JSON]:
        """The cached objects themselves whose index ``name`` includes ``value``, in key
        order: for readers that only read (see ``peek_list``)."""
        with self._lock:
            keys = sorted(self._indices[name].get(value, set()))
            return [self._cache[k] for k in keys]

    def index_values(self, name: str) -> builtins.list[str]:
        """The values index ``name`` currently has objects for."""
        with self._lock:
            return sorted(v for v, keys in self._indices[name].items() if keys)

    def index_keys(self, name: str, value: str) -> builtins.list[str]:
        with self._lock:
            return sorted(self._indices[name].get(value, set()))

    def _index(self, name: str, key: str, old: JSON | None, new: JSON | None) -> None:
        func, index = self._index_funcs[name], self._indices[name]
        for value in func(old) if old is not None else []:
            bucket = index.get(value)
            if bucket is not None:
                bucket.discard(key)
                if not bucket:
                    del index[value]
        for value in func(new) if new is not None else []:
            index.setdefault(value, set()).add(key)

    def _store(self, key: str, obj: JSON | None) -> JSON | None:
        """Put (or, with None, remove) one object; keeps the indices. Holds the lock."""
        old = self._cache.pop(key, None) if obj is None else self._cache.get(key)
        if obj is not None:
            self._cache[key] = obj
        for name in self._index_funcs:
            self._index(name, key, old, obj)
        return old

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    # -- lifecycle -----------------------------------------------------------------------

    def add_handler(self, handler: EventHandler) -> None:
        """Register a handler; if the cache is already filled it hears an add per object."""
        with self._lock:
            self._handlers.append(handler)
            existing = list(self._cache.values()) if self._synced.is_set() else []
        for obj in existing:
            if handler.on_add:
                handler.on_add(obj)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the reflector -------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            watching = False
            try:
                if self._rv is None:
                    self._relist()
                    self._hinted_waits = 0  # a request went through
                watching = True
                started = time.monotonic()
                events = self._watch_once()
                if events == 0 and time.monotonic() - started < 1.0:
                    raise ShortWatchError("the watch ended at once without an event")
                self._healthy()
            except Exception as e:
                if self._stop.is_set():
                    break
                self._streak += 1
                if watching:
                    self._watch_failures += 1
                    if self._relists_after(e, self._watch_failures):
                        self._rv = None
                hinted = retry_after(e)
                if hinted is not None and self._hinted_waits < MAX_HINTED_WAITS:
                    # The server said when to come back (429, 503): as client-go's request
                    # layer, wait that long, up to ten times in a row, before backing off.
                    self._hinted_waits += 1
                    delay = max(hinted, 0.1)
                else:
                    delay = self.backoff.next()
                self._warned |= self._log_failure(e, self._streak, delay)
                self._stop.wait(delay)

    def _healthy(self) -> None:
        """The watch works (it delivered an event, or ended on its own after a while): the
        failure streak, if any, is over."""
        if self._streak:
            log.log(
                logging.INFO if self._warned else logging.DEBUG,
                "%s: list/watch works again after %d failed attempts",
                self.name,
                self._streak,
            )
        self._streak = self._watch_failures = self._hinted_waits = 0
        self._warned = False

    @staticmethod
    def _relists_after(error: Exception, failures: int) -> bool:
        """Whether a failed watch re-lists: always on a 410, which nothing else answers;
        never for a 429 (the server asks for less, and a list costs it more than a watch);
        else from the second failure in a row, so that a watch outage leaves the cache no
        older than the backoff's cap plus a list (the first is retried from where it was: a
        dropped connection is often just that)."""
        if isinstance(error, WatchExpiredError):
            return True
        if isinstance(error, ApiException) and error.status == 410:
            return True
        if isinstance(error, ApiException) and error.status == 429:
            return False
        return failures >= 2

    def _log_failure(self, error: Exception, streak: int, delay: float) -> bool:
        """One line for the 1st, 2nd, 4th, 8th ... failure in a row; an expired watch is
        routine (debug), as a re-list answers it. True when it warned."""
        expired = isinstance(error, WatchExpiredError) or (
            isinstance(error, ApiException) and error.status == 410
        )
        if expired:
            level = logging.DEBUG
        else:
            level = logging.WARNING if streak & (streak - 1) == 0 else logging.DEBUG
        if not log.isEnabledFor(level):
            return False
        ours = isinstance(error, WatchExpiredError | ShortWatchError)
        what = str(error) if ours else describe_error(error)
        again = "re-listing" if self._rv is None else "watching again"
        log.log(
            level,
            "%s: list/watch failed (%d in a row): %s; %s in %.1fs",
            self.name,
            streak,
            what,
            again,
            delay,
        )
        return level == logging.WARNING

    def _relist(self) -> None:
        items, rv = self.rest.list_all(
            self.resource,
            self.namespace,
            self.label_selector,
            self.field_selector,
            transform=self._reduce,
        )
        fresh = {object_key(o): o for o in items}
        with self._lock:
            old = self._cache
            self._cache = fresh
            for name in self._index_funcs:
                self._indices[name] = {}
                for key, obj in fresh.items():
                    self._index(name, key, None, obj)
            handlers = list(self._handlers)
        for key, obj in old.items():
            if key not in fresh:
                self._fire(handlers, "delete", DeletedFinalStateUnknown(key, obj))
        for key, obj in fresh.items():
            if key not in old:
                self._fire(handlers, "add", obj)
            elif _rv_of(old[key]) != _rv_of(obj):
                self._fire(handlers, "update", obj, old[key])
        self._rv = rv
        self._synced.set()

    def _watch_once(self) -> int:
        low, high = self.watch_timeout
        timeout = self._rng.randint(low, high)
        assert self._rv is not None
        stream = self.rest.watch(
            self.resource,
            self._rv,
            self.namespace,
            self.label_selector,
            self.field_selector,
            timeout_seconds=timeout,
            read_timeout=timeout + 30.0,
        )
        self._stream = stream
        self._hinted_waits = 0  # the watch request went through
        count = 0
        try:
            for event in stream:
                if self._stop.is_set():
                    break
                self._apply(event)
                count += 1
                if count == 1:
                    self._healthy()
        finally:
            self._stream = None
        return count

    def _apply(self, event: JSON) -> None:
        """Apply one watch event; an ERROR event raises (``WatchExpiredError`` for a 410)."""
        etype, obj = event.get("type"), event.get("object") or {}
        if etype == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise WatchExpiredError(f"watch expired (410): {obj.get('message') or 'Gone'}")
            raise ApiException(status=code or 500, reason=obj.get("message", "watch error"))
        rv = _rv_of(obj)
        if etype == "BOOKMARK":
            if rv:
                self._rv = rv
            return
        obj = self._reduce(obj)
        key = object_key(obj)
        with self._lock:
            old = self._store(key, None if etype == "DELETED" else obj)
            handlers = list(self._handlers)
        if rv:
            self._rv = rv
        if etype == "DELETED":
            self._fire(handlers, "delete", obj)
        elif old is None:
            self._fire(handlers, "add", obj)
        else:
            self._fire(handlers, "update", obj, old)

    def _fire(
        self,
        handlers: builtins.list[EventHandler],
        kind: str,
        obj: JSON | DeletedFinalStateUnknown,
        old: JSON | None = None,
    ) -> None:
        for h in handlers:
            try:
                if isinstance(obj, DeletedFinalStateUnknown):
                    if h.on_delete:
                        h.on_delete(obj)
                elif kind == "add" and h.on_add:
                    h.on_add(obj)
                elif kind == "update" and h.on_update:
                    h.on_update(old or {}, obj)
                elif kind == "delete" and h.on_delete:
                    h.on_delete(obj)
            except Exception:
                log.exception("%s: event handler failed", self.name)


def _strip_managed_fields(obj: JSON) -> JSON:
    """``obj`` without ``metadata.managedFields`` (changed in place: it is a fresh decode)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def _rv_of(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


class InformerFactory:
    """One informer per resource, namespace and selectors, shared by every controller that
    asks for it (client-go's SharedInformerFactory)."""

    def __init__(self, rest: Rest, **options: Any) -> None:
        self.rest = rest
        self._options = options
        self._informers: dict[
            tuple[Resource, str | None, str | None, str | None, Transform | None], Informer
        ] = {}
        self._lock = threading.Lock()
        self._started = False

    def informer(
        self,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = None,
    ) -> Informer:
        """The shared informer of these objects; one with a ``transform`` is shared only by
        callers passing that same function."""
        key = (resource, namespace, label_selector or None, field_selector or None, transform)
        with self._lock:
            informer = self._informers.get(key)
            if informer is None:
                informer = Informer(
                    self.rest,
                    resource,
                    namespace,
                    label_selector,
                    field_selector,
                    transform=transform,
                    **self._options,
                )
                self._informers[key] = informer
                if self._started:
                    informer.start()
            return informer

    def informers(self) -> builtins.list[Informer]:
        with self._lock:
            return list(self._informers.values())

    def start(self) -> None:
        with self._lock:
            self._started = True
            informers = list(self._informers.values())
        for informer in informers:
            informer.start()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for informer in self.informers():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not informer.wait_for_sync(left):
                return False
        return True

    def has_synced(self) -> bool:
        return all(i.has_synced() for i in self.informers())

    def stop(self) -> None:
        for informer in self.informers():
            informer.stop()

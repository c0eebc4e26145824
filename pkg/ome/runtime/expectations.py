"""What a controller wrote that its informer cache does not show yet, so that a pass planned
from a lagging cache never repeats a write: client-go's ``ControllerExpectations`` (creates
and deletes in flight, per controller key) and the read-your-own-write of an object's last
update. It knows nothing of TPUs, and is safe to share between workers and controllers.

Written here rather than taken from a library: cachetools' TTL caches are not thread-safe and
expire whole keys, while these expire single names within a key and need test-and-set.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")

#: client-go's ExpectationsTimeout: an expectation a lost watch event never meets stops
#: blocking after this long.
DEFAULT_TTL = 300.0


@dataclass
class _Entry:
    uid: str
    at: float
    in_flight: bool = False


class Expectations:
    """Creates and deletes in flight, per owner key (e.g. ``namespace/name`` of a replica),
    by object name.

    Invariants, all under ``_lock``:

    - ``_creates[key][name]`` exists from ``reserve_create`` until the cache shows an object
      at ``name`` (``observe``), the create fails (``create_failed``) or the entry is older than
      ``ttl``. While the create request is out it is ``in_flight`` and no cache view meets it;
      so at most one create per key and name is ever in flight: ``reserve_create`` is a
      test-and-set.
    - ``_deletes[key][name]`` holds the UID we deleted, from ``reserve_delete`` until the cache
      shows no object at ``name``, another UID there, or ours terminating; or until the
      delete fails, or ``ttl`` passes. ``reserve_delete`` is a test-and-set too.
    - A key with no entries is removed, so the maps hold only writes in flight.
    """

    def __init__(self, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._creates: dict[str, dict[str, _Entry]] = {}
        self._deletes: dict[str, dict[str, _Entry]] = {}

    # -- creates -------------------------------------------------------------------------

    def reserve_create(self, key: str, name: str) -> bool:
        """Claim the create of ``name`` for ``key``: False when one is already expected."""
        with self._lock:
            entries = self._creates.setdefault(key, {})
            self._expire(entries)
            if name in entries:
                return False
            entries[name] = _Entry("", self._clock(), in_flight=True)
            return True

    def created(self, key: str, name: str, uid: str) -> None:
        """The create was accepted: expected until the cache shows ``name``."""
        with self._lock:
            self._creates.setdefault(key, {})[name] = _Entry(uid, self._clock())

    def create_failed(self, key: str, name: str) -> None:
        """The create did not happen: nothing to wait for."""
        with self._lock:
            self._drop(self._creates, key, name)

    # -- deletes -------------------------------------------------------------------------

    def reserve_delete(self, key: str, name: str, uid: str) -> bool:
        """Claim the delete of ``name`` (object ``uid``): False when it is already expected."""
        with self._lock:
            entries = self._deletes.setdefault(key, {})
            self._expire(entries)
            held = entries.get(name)
            if held is not None and held.uid == uid:
                return False
            entries[name] = _Entry(uid, self._clock())
            return True

    def delete_failed(self, key: str, name: str) -> None:
        """The delete did not happen (or removed nothing we expected): nothing to wait for."""
        with self._lock:
            self._drop(self._deletes, key, name)

    # -- what the cache shows ------------------------------------------------------------

    def observe(
        self, key: str, cached: Mapping[str, tuple[str, bool]]
    ) -> tuple[frozenset[str], frozenset[str]]:
        """Meet the expectations of ``key`` that the cache now shows, and return the names
        still expected: ``(creating, deleting)``. ``cached`` maps the names the cache holds
        for ``key`` to ``(uid, terminating)``."""
        with self._lock:
            creates = self._creates.get(key, {})
            self._expire(creates)
            for name in [n for n, e in creates.items() if not e.in_flight and n in cached]:
                del creates[name]
            deletes = self._deletes.get(key, {})
            self._expire(deletes)
            for name, entry in list(deletes.items()):
                seen = cached.get(name)
                if seen is None or seen[0] != entry.uid or seen[1]:
                    del deletes[name]
            creating, deleting = frozenset(creates), frozenset(deletes)
            self._tidy(key)
            return creating, deleting

    def forget(self, key: str) -> None:
        """Drop every expectation of ``key`` (its owner is gone)."""
        with self._lock:
            self._creates.pop(key, None)
            self._deletes.pop(key, None)

    def pending(self, key: str) -> tuple[frozenset[str], frozenset[str]]:
        """The names expected for ``key``, ``(creating, deleting)``, without meeting any."""
        with self._lock:
            for table in (self._creates, self._deletes):
                self._expire(table.get(key, {}))
            pending = frozenset(self._creates.get(key, {})), frozenset(self._deletes.get(key, {}))
            self._tidy(key)
            return pending

    # -- internals (hold the lock) -------------------------------------------------------

    def _expire(self, entries: dict[str, _Entry]) -> None:
        now = self._clock()
        for name in [n for n, e in entries.items() if now - e.at > self.ttl]:
            del entries[name]

    def _drop(self, table: dict[str, dict[str, _Entry]], key: str, name: str) -> None:
        entries = table.get(key)
        if entries is not None:
            entries.pop(name, None)
        self._tidy(key)

    def _tidy(self, key: str) -> None:
        for table in (self._creates, self._deletes):
            if key in table and not table[key]:
                del table[key]


class LatestWrites(Generic[V]):
    """The object our last write stored, per key, until the cache shows a version we did not
    replace: so that a pass never plans from a version older than our last write
    (read-your-own-writes). Entries expire after ``ttl`` seconds.

    A cache can lag by more than one of our writes: three status writes in 10 ms while the
    informer thread waits for the GIL. So an entry keeps every version our writes replaced
    since the cache last showed one of its own, not only the last: each of them is older
    than what we stored last (the server took each write on top of it), and a pass that
    planned from the one before last would undo what the last write recorded.

    Invariants, under ``_lock``: ``_entries[key] = (versions replaced, stored value, time)``;
    ``get`` answers only while the cache shows one of the replaced versions; a write while
    an entry stands adds to its versions and replaces its value and time.
    """

    def __init__(self, ttl: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[frozenset[str], V, float]] = {}

    def wrote(self, key: str, replaced: str, stored: V) -> None:
        with self._lock:
            entry = self._entries.get(key)
            now = self._clock()
            versions = frozenset((replaced,))
            if entry is not None and now - entry[2] <= self.ttl:
                versions |= entry[0]
            self._entries[key] = (versions, stored, now)

    def get(self, key: str, cached_version: str) -> V | None:
        """What we stored last, if the cache shows ``cached_version``, one our writes replaced."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            replaced, stored, at = entry
            if self._clock() - at > self.ttl or cached_version not in replaced:
                del self._entries[key]
                return None
            return stored

    def forget(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

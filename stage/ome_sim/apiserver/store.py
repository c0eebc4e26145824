"""The in-memory object store: objects, the global resourceVersion, watch history and watchers.

Everything here runs on the server's event loop thread, so a write is atomic with respect to
every other request. It knows nothing of HTTP, admission or validation: callers decide what a
write is, the store records it, stamps it with the next resourceVersion and tells watchers.

Invariants:
- ``rv`` is one counter for all types; every committed write (create, update, delete)
  takes the next value, and the watch event of that write carries it.
- ``history`` holds the last ``history_size`` events in resourceVersion order. A watch from
  a resourceVersion ``R`` can be served only when ``R >= compacted_rv``: every event after
  ``R`` is still in the history. Older ones get 410 Gone.
- Stored objects are never handed out: readers get deep copies.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ome.kube import json_copy

JSON = dict[str, Any]
TypeKey = tuple[str, str]  # (group, plural)
ObjKey = tuple[str, str]  # (namespace, name); namespace "" when cluster-scoped


@dataclass(frozen=True)
class Change:
    """One committed write, as watchers and the history see it."""

    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    tkey: TypeKey
    obj: JSON  # the new object; for DELETED, the last state
    old: JSON | None  # the previous object, for MODIFIED and DELETED
    #: The watch event lines sent for it, by (API version, event type): encoded once for
    #: every watcher that sends the same line. Filled and read on the server's event loop
    #: only, so it needs no lock.
    encoded: dict[tuple[str, str], bytes] = field(default_factory=dict, compare=False, repr=False)


@dataclass(eq=False)
class Watcher:
    """A subscriber for one type. ``accept`` turns a change into the events to send."""

    tkey: TypeKey
    queue: asyncio.Queue[Change | None] = field(default_factory=asyncio.Queue)
    closed: bool = False

    def close(self) -> None:
        """End the stream: the handler sees ``None`` and finishes the response."""
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)


class Store:
    """Objects by type and key, with the global resourceVersion and the watch history."""

    def __init__(self, history_size: int = 10_000) -> None:
        self.rv = 1
        self.compacted_rv = 1
        self.history: deque[Change] = deque()
        self.history_size = history_size
        self._objects: dict[TypeKey, dict[ObjKey, JSON]] = {}
        self._by_uid: dict[str, tuple[TypeKey, ObjKey]] = {}
        #: Keys by (type, label key, label value), and pods' keys by (type, spec.nodeName):
        #: what a list with an equality label selector or a node's field selector scans
        #: instead of every object of its type. Kept with ``_objects`` in ``put``/``remove``.
        self._by_label: dict[tuple[TypeKey, str, str], set[ObjKey]] = {}
        self._by_node: dict[tuple[TypeKey, str], set[ObjKey]] = {}
        self._watchers: set[Watcher] = set()
        #: Called after every committed change (the garbage collector listens here).
        self.listeners: list[Callable[[Change], None]] = []

    # -- reads ---------------------------------------------------------------------------

    def get(self, tkey: TypeKey, okey: ObjKey) -> JSON | None:
        obj = self._objects.get(tkey, {}).get(okey)
        return json_copy(obj) if obj is not None else None

    def peek(self, tkey: TypeKey, okey: ObjKey) -> JSON | None:
        """The stored object itself, for read-only checks on the loop thread. Never mutate."""
        return self._objects.get(tkey, {}).get(okey)

    def items(
        self, tkey: TypeKey, namespace: str | None = None, after: ObjKey | None = None
    ) -> Iterator[JSON]:
        """Stored objects of a type (not copies), sorted by namespace and name; only those
        past ``after`` when given (a list page's continue key)."""
        objs = self._objects.get(tkey, {})
        keys = sorted(objs)
        for okey in keys[bisect.bisect_right(keys, after) if after is not None else 0 :]:
            if namespace is None or okey[0] == namespace:
                yield objs[okey]

    def candidates(
        self, tkey: TypeKey, labels: list[tuple[str, str]], node: str | None
    ) -> set[ObjKey] | None:
        """The keys that can match every ``key=value`` of ``labels`` and, for pods, the
        node ``node``, from the indexes; None when neither narrows the scan."""
        found: set[ObjKey] | None = None
        buckets = [self._by_label.get((tkey, k, v), set()) for k, v in labels]
        if node is not None:
            buckets.append(self._by_node.get((tkey, node), set()))
        for bucket in sorted(buckets, key=len):
            found = set(bucket) if found is None else found & bucket
        return found

    def items_among(
        self,
        tkey: TypeKey,
        keys: set[ObjKey],
        namespace: str | None = None,
        after: ObjKey | None = None,
    ) -> Iterator[JSON]:
        """The stored objects (not copies) at ``keys``, as ``items`` orders them."""
        objs = self._objects.get(tkey, {})
        ordered = sorted(keys)
        for okey in ordered[bisect.bisect_right(ordered, after) if after is not None else 0 :]:
            if (namespace is None or okey[0] == namespace) and okey in objs:
                yield objs[okey]

    def _reindex(self, tkey: TypeKey, okey: ObjKey, old: JSON | None, new: JSON | None) -> None:
        for obj, add in ((old, False), (new, True)):
            if obj is None:
                continue
            labels = (obj.get("metadata") or {}).get("labels") or {}
            entries: list[dict[Any, set[ObjKey]]] = []
            keys: list[Any] = [(tkey, k, v) for k, v in labels.items() if isinstance(v, str)]
            entries += [self._by_label] * len(keys)
            node = (obj.get("spec") or {}).get("nodeName") if tkey == ("", "pods") else None
            if isinstance(node, str) and node:
                keys.append((tkey, node))
                entries.append(self._by_node)
            for index, key in zip(entries, keys, strict=True):
                if add:
                    index.setdefault(key, set()).add(okey)
                else:
                    bucket = index.get(key)
                    if bucket is not None:
                        bucket.discard(okey)
                        if not bucket:
                            del index[key]

    def count(self, tkey: TypeKey, namespace: str | None = None) -> int:
        objs = self._objects.get(tkey, {})
        if namespace is None:
            return len(objs)
        return sum(1 for ns, _ in objs if ns == namespace)

    def by_uid(self, uid: str) -> tuple[TypeKey, ObjKey] | None:
        return self._by_uid.get(uid)

    def all_objects(self) -> Iterator[tuple[TypeKey, JSON]]:
        for tkey, objs in self._objects.items():
            for obj in objs.values():
                yield tkey, obj

    # -- writes --------------------------------------------------------------------------

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def put(self, tkey: TypeKey, okey: ObjKey, obj: JSON) -> JSON:
        """Create or replace; stamps the resourceVersion. Returns a copy of what is stored."""
        stored = json_copy(obj)
        stored["metadata"]["resourceVersion"] = self._next_rv()
        objs = self._objects.setdefault(tkey, {})
        old = objs.get(okey)
        objs[okey] = stored
        self._reindex(tkey, okey, old, stored)
        uid = stored["metadata"].get("uid")
        if uid:
            self._by_uid[uid] = (tkey, okey)
        self._record(Change(self.rv, "MODIFIED" if old else "ADDED", tkey, stored, old))
        return json_copy(stored)

    def remove(self, tkey: TypeKey, okey: ObjKey) -> JSON | None:
        """Delete; the DELETED event carries a new resourceVersion, as etcd's does."""
        objs = self._objects.get(tkey, {})
        old = objs.pop(okey, None)
        if old is None:
            return None
        self._reindex(tkey, okey, old, None)
        final = json_copy(old)
        final["metadata"]["resourceVersion"] = self._next_rv()
        self._by_uid.pop(old["metadata"].get("uid", ""), None)
        self._record(Change(self.rv, "DELETED", tkey, final, old))
        return json_copy(final)

    def drop_type(self, tkey: TypeKey) -> None:
        """Forget a type whose objects are all gone (a deleted CRD)."""
        if not self._objects.get(tkey):
            self._objects.pop(tkey, None)

    def _record(self, change: Change) -> None:
        self.history.append(change)
        while len(self.history) > self.history_size:
            dropped = self.history.popleft()
            self.compacted_rv = dropped.rv
        for w in list(self._watchers):
            if w.tkey == change.tkey and not w.closed:
                w.queue.put_nowait(change)
        for listener in self.listeners:
            listener(change)

    # -- watch ---------------------------------------------------------------------------

    def compact(self) -> None:
        """Forget the whole history: any watch from an older resourceVersion gets 410."""
        self.history.clear()
        self.compacted_rv = self.rv

    def too_old(self, rv: int) -> bool:
        return rv < self.compacted_rv

    def replay(self, tkey: TypeKey, since: int) -> list[Change]:
        """Changes of a type after ``since``; the caller has checked ``too_old``."""
        return [c for c in self.history if c.rv > since and c.tkey == tkey]

    def subscribe(self, tkey: TypeKey) -> Watcher:
        w = Watcher(tkey)
        self._watchers.add(w)
        return w

    def unsubscribe(self, w: Watcher) -> None:
        self._watchers.discard(w)

    def watchers(self, tkey: TypeKey | None = None) -> list[Watcher]:
        return [w for w in self._watchers if tkey is None or w.tkey == tkey]

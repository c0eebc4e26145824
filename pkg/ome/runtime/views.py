"""An object's parsed view, made once per version of the object: a controller reads the same
cached object on every pass and every event that routes to it, and parsing it again each time
(into a frozen value) was a good share of the manager's CPU per service. It knows nothing of
what the views are.

Written here rather than with ``cachetools.cached``: the key is read from inside the object
(its UID and resourceVersion, which the API server changes with every write), objects
without them (built in a test, or not from a server) are parsed every time, and the cache is
locked since workers and informer threads share it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from cachetools import LRUCache

V = TypeVar("V")

#: views kept: a few per object of a large cluster's busiest kinds
DEFAULT_SIZE = 32768


class ByVersion(Generic[V]):
    """``parse(obj, *args)``, remembered per ``(uid, resourceVersion)`` of ``obj`` and
    ``args`` (hashable values the view depends on besides the object, such as a set that
    changes seldom).

    The API server gives every write of an object a new resourceVersion, so two objects with
    the same UID and resourceVersion have the same content, and so the same view. ``parse``
    must be a pure function of the object and ``args``, and its views immutable (they are
    shared).

    Invariant, under ``_lock``: ``_views`` maps ``(uid, resourceVersion, *args)`` to
    ``parse`` of an object of that version with those ``args``, and holds at most ``size``
    views (least recently used go first)."""

    def __init__(self, parse: Callable[..., V], size: int = DEFAULT_SIZE) -> None:
        self._parse = parse
        self._lock = threading.Lock()
        self._views: LRUCache[tuple[Hashable, ...], V] = LRUCache(maxsize=size)

    def __call__(self, obj: Any, *args: Hashable) -> V:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        uid = meta.get("uid") if isinstance(meta, dict) else None
        version = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if not isinstance(uid, str) or not uid or not isinstance(version, str) or not version:
            return self._parse(obj, *args)
        key = (uid, version, *args)
        with self._lock:
            found = self._views.get(key)
        if found is not None:
            return found
        view = self._parse(obj, *args)  # outside the lock: two threads may both parse, and agree
        with self._lock:
            self._views[key] = view
        return view

    def __len__(self) -> int:
        with self._lock:
            return len(self._views)

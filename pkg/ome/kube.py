"""Plain values of the Kubernetes API that every layer shares: a JSON object, where a resource
lives, RFC 3339 times, and the few facts of core objects that are read the same way
everywhere (a pod's terminal phase). Pure: no I/O and no client; it imports nothing of ome,
so the pure core, the provider, the API types and the runtime can all stand on it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar, cast
from urllib.parse import quote

import orjson

_T = TypeVar("_T")

#: A Kubernetes object, or any part of one, as the API server sends it.
JSON = dict[str, Any]

#: Pod phases a pod never leaves: it holds nothing any more.
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def json_loads(data: bytes | str) -> Any:
    """A JSON document decoded by orjson (about twice as fast as ``json``, and it shares the
    strings of repeated keys, which is much of a cache's memory); the standard library's
    decoder for what orjson refuses and ``json`` takes (nesting deeper than 254), so both
    accept the same documents. An integer beyond 64 bits reads as a float, as in the API
    server's own decoding of unstructured objects, so it never sends one."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def json_dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON (orjson: ten times faster than ``json.dumps``); the
    standard library's encoder for what orjson refuses (integers beyond 64 bits, nesting
    deeper than 254, keys that are not strings), which raises ``TypeError``/``ValueError``
    for what is not JSON at all."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode()


def json_copy(value: _T) -> _T:
    """A deep copy of a JSON value (dicts, lists and scalars, as ``json.loads`` makes them).

    An orjson round trip, twice as fast as a walk in Python, for dicts and lists; the walk
    (``_copy``, by hand since ``copy.deepcopy`` keeps a memo and dispatches per type, four
    times slower on JSON) for what orjson refuses: values it cannot encode, and floats that
    are not finite, which it would turn into null.
    """
    if type(value) is dict or type(value) is list:
        try:
            encoded = orjson.dumps(value)
        except TypeError:
            pass
        else:
            if b"null" not in encoded or not _has_non_finite(value):
                return cast(_T, orjson.loads(encoded))
    try:
        return cast(_T, _copy(value))
    except RecursionError:  # nested deeper than the stack allows: what json.loads still takes
        return cast(_T, _copy_iteratively(value))


def _has_non_finite(value: Any) -> bool:
    """Whether a JSON value holds a NaN or an infinity (which orjson encodes as null)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is float and not math.isfinite(item):
            return True
    return False


def _copy_iteratively(value: Any) -> Any:
    """``_copy`` with a stack of its own, for values nested deeper than Python's recursion
    limit (``json.loads`` decodes about twice as deep as ``_copy`` reaches); slower, so only
    the fallback."""
    if type(value) is not dict and type(value) is not list:
        return value
    root: Any = {} if type(value) is dict else []
    stack = [(value, root)]
    while stack:
        source, target = stack.pop()
        pairs = source.items() if type(source) is dict else enumerate(source)
        for key, item in pairs:
            kind = type(item)
            copied: Any = {} if kind is dict else [] if kind is list else item
            if type(target) is dict:
                target[key] = copied
            else:
                target.append(copied)
            if kind is dict or kind is list:
                stack.append((item, copied))
    return root


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {k: _copy(v) for k, v in value.items()}
    if kind is list:
        return [_copy(v) for v in value]
    return value


@dataclass(frozen=True)
class Resource:
    """Where a resource lives: ``Resource("", "v1", "pods")`` or ``("accelerator.gke.io",
    "v1beta1", "slices", namespaced=False)``."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [root]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(self.plural)
        if name is not None:
            parts.append(quote(name, safe=""))
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


def rfc3339(t: datetime) -> str:
    """A time as the API server writes ``metav1.Time``: whole seconds, UTC, ``Z``."""
    return (
        t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if t.tzinfo
        else t.strftime("%Y-%m-%dT%H:%M:%SZ")
    )


def parse_time(text: object) -> datetime | None:
    """An RFC 3339 time from the API (``2026-01-02T03:04:05Z``), or None when absent or not
    one: a field the server always fills is never a reason to crash."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def pod_terminal(pod: JSON) -> bool:
    """Whether a pod has Succeeded or Failed: it runs nothing and holds nothing any more."""
    status = pod.get("status")
    phase = status.get("phase") if isinstance(status, dict) else None
    return isinstance(phase, str) and phase in TERMINAL_PHASES

"""Request accounting and fault injection for benchmarks and fault tests.

Both are mutated from test threads and read on the server's loop, so each holds a lock.
Faults are deterministic: a rule fires for the next ``times`` matching requests (or for every
one while it is installed), never at random, so fault tests do not flake.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

FAULT_CODES = (410, 429, 500, 503, 504)
#: The verbs that change something: what a fenced (deposed) client must never send.
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass(frozen=True)
class Write:
    """One write request, as it arrived: when (the server's monotonic clock), what, from whom."""

    at: float
    verb: str
    resource: str
    user_agent: str


@dataclass(frozen=True)
class RequestKey:
    verb: str  # get, list, watch, create, update, patch, delete, deletecollection
    resource: str  # plural, with "/subresource" when there is one; a path for non-resources
    user_agent: str


class Accounting:
    """Counts requests by verb, resource and user agent, and the single-object deletes that
    came without a uid precondition (write-discipline checks need that one property of a
    request, which a count by verb cannot show), and the last ``WRITES_KEPT`` writes with
    their arrival time, so a test can tell what a client wrote after a given moment."""

    WRITES_KEPT = 100_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[RequestKey] = Counter()
        self._unconditioned: Counter[RequestKey] = Counter()
        self._writes: deque[Write] = deque(maxlen=self.WRITES_KEPT)

    def record(self, verb: str, resource: str, user_agent: str) -> None:
        with self._lock:
            self._counts[RequestKey(verb, resource, user_agent)] += 1
            if verb in WRITE_VERBS:
                self._writes.append(Write(time.monotonic(), verb, resource, user_agent))

    def writes(self, user_agent: str | None = None, since: float | None = None) -> list[Write]:
        """The writes kept, oldest first; ``user_agent`` matches as a prefix, ``since`` is a
        ``time.monotonic()`` reading of this process (in-process servers only)."""
        with self._lock:
            return [
                w
                for w in self._writes
                if (user_agent is None or w.user_agent.startswith(user_agent))
                and (since is None or w.at > since)
            ]

    def record_delete(self, resource: str, user_agent: str, uid_precondition: bool) -> None:
        if not uid_precondition:
            with self._lock:
                self._unconditioned[RequestKey("delete", resource, user_agent)] += 1

    def deletes_without_uid(
        self, resource: str | None = None, user_agent: str | None = None
    ) -> int:
        """Single-object deletes that carried no ``preconditions.uid``; ``user_agent`` matches
        as a prefix."""
        with self._lock:
            return sum(
                n
                for k, n in self._unconditioned.items()
                if (resource is None or k.resource == resource)
                and (user_agent is None or k.user_agent.startswith(user_agent))
            )

    def snapshot(self, unconditioned_deletes: bool = False) -> list[JSON]:
        """Every count, or with ``unconditioned_deletes`` only the deletes without a uid
        precondition."""
        with self._lock:
            counts = self._unconditioned if unconditioned_deletes else self._counts
            items = sorted(
                counts.items(), key=lambda kv: (kv[0].verb, kv[0].resource, kv[0].user_agent)
            )
        return [
            {"verb": k.verb, "resource": k.resource, "userAgent": k.user_agent, "count": n}
            for k, n in items
        ]

    def total(
        self, verb: str | None = None, resource: str | None = None, user_agent: str | None = None
    ) -> int:
        """Requests matching every given part; ``user_agent`` matches as a prefix."""
        with self._lock:
            return sum(
                n
                for k, n in self._counts.items()
                if (verb is None or k.verb == verb)
                and (resource is None or k.resource == resource)
                and (user_agent is None or k.user_agent.startswith(user_agent))
            )

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self._unconditioned.clear()
            self._writes.clear()


@dataclass
class Fault:
    """One injected misbehaviour. Empty match fields match everything.

    ``code`` is one of 410, 429 (with ``Retry-After: retry_after``), 500, 503, 504, or 0 for
    latency only. A watch hit by a 410 fault gets the ERROR event a compacted watch gets.

    ``drop`` reads the request and closes its connection without a byte of answer (no status
    line, no headers), as a reset connection or a server that vanished mid-request looks: the
    client sees a transport error, never an HTTP status. The request is dropped before it is
    handled, so it has no effect on the store (it is still counted). It excludes ``code``
    (``from_json`` rejects both; in-process, ``drop`` wins); ``latency`` and ``hold`` delay the
    drop. Clients resend a dropped GET (urllib3, client-go), never a dropped POST.

    ``hold`` and ``answered`` are for in-process tests only (not JSON). ``hold`` pauses a
    matching request until the event is set, and the server sets ``answered`` once it has
    handled that request (its effect, if any, is in the store) or dropped it. A race is staged
    by acting while a request is known to be in flight, and its outcome read once it is done:
    no sleep.
    """

    verb: str = ""
    resource: str = ""
    namespace: str = ""
    name: str = ""
    user_agent: str = ""
    code: int = 0
    retry_after: int = 1
    latency: float = 0.0
    drop: bool = False
    times: int | None = 1
    hold: threading.Event | None = field(default=None, compare=False)
    answered: threading.Event | None = field(default=None, compare=False)

    def matches(self, verb: str, resource: str, namespace: str, name: str, agent: str) -> bool:
        return (
            (not self.verb or self.verb == verb)
            and (not self.resource or self.resource == resource)
            and (not self.namespace or self.namespace == namespace)
            and (not self.name or self.name == name)
            and (not self.user_agent or agent.startswith(self.user_agent))
        )

    @staticmethod
    def from_json(body: Any) -> Fault:
        """Parse a rule sent to ``POST /_sim/faults``; ValueError names what is wrong."""
        if not isinstance(body, dict):
            raise ValueError("a fault is a JSON object")
        known = {f for f in Fault.__dataclass_fields__} - {"hold", "answered"}
        unknown = sorted(set(body) - known)
        if unknown:
            raise ValueError(f"unknown fault fields: {', '.join(unknown)}")
        fault = Fault(**body)
        if fault.code and fault.code not in FAULT_CODES:
            raise ValueError(f"code must be one of {FAULT_CODES} or 0, not {fault.code}")
        if not isinstance(fault.drop, bool):
            raise ValueError(f"drop must be true or false, not {fault.drop!r}")
        if fault.drop and fault.code:
            raise ValueError(
                "drop closes the connection without an answer, so it takes no code "
                f"(got code {fault.code}): send code 0 or leave it out"
            )
        if fault.latency < 0 or (fault.times is not None and fault.times < 1):
            raise ValueError("latency must be >= 0 and times >= 1 (or null for always)")
        return fault


class Faults:
    """The installed fault rules; the first matching rule fires and uses up one of its times."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Fault] = []

    def add(self, fault: Fault) -> None:
        with self._lock:
            self._rules.append(fault)

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def rules(self) -> list[JSON]:
        with self._lock:
            return [
                {k: v for k, v in vars(f).items() if k not in ("hold", "answered")}
                | {"held": f.hold is not None}
                for f in self._rules
            ]

    def take(self, verb: str, resource: str, namespace: str, name: str, agent: str) -> Fault | None:
        with self._lock:
            for fault in self._rules:
                if fault.matches(verb, resource, namespace, name, agent):
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times == 0:
                            self._rules.remove(fault)
                    return fault
        return None

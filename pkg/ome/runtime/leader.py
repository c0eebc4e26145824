"""Leader election on one coordination.k8s.io/v1 Lease, as client-go's ``leaderelection`` does.
It owns that Lease and this process's claim to lead; it must never let the process act as leader
past ``renew_deadline`` without a renewal, nor judge expiry by another machine's clock.

Written here rather than taken from ``kubernetes.leaderelection``: that one cannot be stopped
(its acquire loop sleeps forever with no stop signal), never releases the lease on shutdown,
and stamps records with naive local datetimes. It knows nothing of TPUs.

Invariants (state lives on ``LeaderElector``; other threads read it under ``_lock``; it is
written by one thread at a time: ``run``'s, or the one call thread ``run`` waits on):
- ``_lease`` is the Lease last read or written; every update sends its resourceVersion, so a
  concurrent writer makes ours fail with 409 ("not acquired"), never overwrites it.
- ``_observed`` is the election record last seen and ``_observed_at`` the *local* clock reading
  when it last changed. Someone else's lease is expired when the local clock passes
  ``_observed_at + leaseDurationSeconds``; the record's ``renewTime`` is never compared with
  the local wall clock.
- ``_renewed_at`` is the local clock reading just before the last successful acquire or renew
  was sent. The process leads only while ``_leading`` and ``clock() < _renewed_at +
  renew_deadline``; since ``renew_deadline < lease_duration``, it stops before any other
  candidate may take over. Each API call's timeout ends by that deadline.
- The stop-leading event is set before ``on_stopped_leading`` runs and before the Lease is
  released, and the Lease is released only after ``on_started_leading`` has returned.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from functools import partial
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from ome.kube import JSON

from .rest import LEASES, Rest

log = logging.getLogger(__name__)

JITTER_FACTOR = 1.2
"""client-go's ``JitterFactor``: acquire retries wait ``retry_period * [1, 1 + 1.2)``."""

RECORD_FIELDS = (
    "holderIdentity",
    "leaseDurationSeconds",
    "acquireTime",
    "renewTime",
    "leaseTransitions",
)

# What a failed API call raises: an answer other than 2xx, a transport failure or timeout,
# or a body that is not a JSON object.
_API_ERRORS = (ApiException, HTTPError, OSError, ValueError)


@dataclass(frozen=True)
class LeaderElectionConfig:
    """Which Lease to contend for, as whom, and how fast (seconds).

    ``lease_duration`` is how long others wait after last seeing the record change before
    taking over (written as whole seconds, rounded up); ``renew_deadline`` is how long the
    leader keeps trying to renew before it gives up; ``retry_period`` is the pause between
    attempts. ``release_on_cancel`` gives the Lease up on a graceful stop.
    """

    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_cancel: bool = True

    def __post_init__(self) -> None:
        for field in ("namespace", "name", "identity"):
            if not getattr(self, field):
                raise ValueError(f"leader election {field} must not be empty")
        if self.retry_period <= 0:
            raise ValueError(f"retry_period ({self.retry_period}s) must be positive")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError(
                f"lease_duration ({self.lease_duration}s) must be greater than "
                f"renew_deadline ({self.renew_deadline}s)"
            )
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError(
                f"renew_deadline ({self.renew_deadline}s) must be greater than "
                f"retry_period * {JITTER_FACTOR} ({JITTER_FACTOR * self.retry_period:g}s)"
            )

    @property
    def lease_duration_seconds(self) -> int:
        """What goes in ``leaseDurationSeconds``: rounded up, so others never wait less."""
        return math.ceil(self.lease_duration)

    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"


class _Exit(Enum):
    STOPPED = "stopped"  # the caller's stop event
    LOST = "lost"  # no renewal within renew_deadline
    WORK_ENDED = "work ended"  # on_started_leading returned or raised on its own


class _OutOfTimeError(Exception):
    """No time is left before the renew deadline for another API call."""


def _now_rfc3339() -> str:
    """A MicroTime: RFC 3339 in UTC with microseconds, e.g. ``2026-11-30T08:00:00.000000Z``."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record_of(lease: JSON) -> JSON:
    spec = lease.get("spec") or {}
    return {k: spec.get(k) for k in RECORD_FIELDS}


class LeaderElector:
    """Contends for the Lease in ``config`` and runs ``on_started_leading`` while it holds it.

    ``on_started_leading`` runs in a new thread with a "stop leading" event and must return
    soon after the event is set. ``on_stopped_leading`` runs on the thread of ``run`` once this
    process has stopped leading (only if it led). ``on_new_leader`` hears each new holder,
    this one included, on a thread of its own.
    """

    def __init__(
        self,
        rest: Rest,
        config: LeaderElectionConfig,
        on_started_leading: Callable[[threading.Event], None],
        on_stopped_leading: Callable[[], None],
        on_new_leader: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rest = rest
        self._config = config
        self._on_started_leading = on_started_leading
        self._on_stopped_leading = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._clock = clock
        # No API call may take longer than half the renew deadline (client-go's choice for
        # the lock's client), so a renewal gets at least two tries.
        self._call_timeout = min(rest.request_timeout, config.renew_deadline / 2)
        self._rng = random.Random()
        self._lock = threading.Lock()
        self._running = False
        self._straggler: threading.Thread | None = None
        self._lease: JSON | None = None
        self._observed: JSON = {}
        self._observed_at = -math.inf
        self._renewed_at = -math.inf
        self._leading = False
        self._leader: str | None = None
        self._reported: str | None = None

    # -- public --------------------------------------------------------------------------

    @property
    def config(self) -> LeaderElectionConfig:
        return self._config

    def is_leader(self) -> bool:
        """True while this process holds the Lease and its last renewal is within the
        renew deadline."""
        with self._lock:
            return self._leading and self._clock() < self._renewed_at + self._config.renew_deadline

    @property
    def leader(self) -> str | None:
        """The holder in the record last observed (``None`` when nobody holds it)."""
        with self._lock:
            return self._leader

    def run(self, stop: threading.Event) -> None:
        """Acquire the Lease, lead, and keep renewing; return when ``stop`` is set, when a
        renewal fails for ``renew_deadline``, or when ``on_started_leading`` ends on its own.
        Blocks; one ``run`` at a time."""
        with self._lock:
            if self._running:
                raise RuntimeError("LeaderElector.run is already running")
            self._running = True
        try:
            if self._straggler is not None:  # a call abandoned by the last run: let it end
                self._straggler.join()
                self._straggler = None
            if not self._acquire(stop):
                return
            leading = threading.Event()
            worker = threading.Thread(
                target=self._lead,
                args=(leading,),
                name=f"leader-{self._config.name}",
                daemon=True,
            )
            worker.start()
            self._step_down(self._renew(stop, worker), leading, worker)
        finally:
            with self._lock:
                self._running = False

    # -- the loops -----------------------------------------------------------------------

    def _acquire(self, stop: threading.Event) -> bool:
        cfg = self._config
        log.debug("%s attempting to acquire lease %s", cfg.identity, cfg.describe())
        while not stop.is_set():
            if self._try_acquire_or_renew(deadline=None):
                with self._lock:
                    self._leading = True
                log.info("%s acquired lease %s", cfg.identity, cfg.describe())
                return True
            jitter = cfg.retry_period * JITTER_FACTOR * self._rng.random()
            if stop.wait(cfg.retry_period + jitter):
                break
        return False

    def _renew(self, stop: threading.Event, worker: threading.Thread) -> _Exit:
        cfg = self._config
        interval = cfg.retry_period
        while not stop.wait(interval):
            if not worker.is_alive():
                return _Exit.WORK_ENDED
            deadline = self._renewed_at + cfg.renew_deadline
            if self._guarded(partial(self._try_acquire_or_renew, deadline), deadline):
                interval = cfg.retry_period
                continue
            remaining = deadline - self._clock()
            if remaining <= 0:
                return _Exit.LOST
            interval = min(cfg.retry_period, remaining)
        return _Exit.STOPPED

    def _lead(self, leading: threading.Event) -> None:
        try:
            self._on_started_leading(leading)
        except Exception:
            log.exception("on_started_leading raised; giving up lease %s", self._config.describe())
            return
        if not leading.is_set():
            log.warning(
                "on_started_leading returned while still leading; giving up lease %s",
                self._config.describe(),
            )

    def _step_down(self, why: _Exit, leading: threading.Event, worker: threading.Thread) -> None:
        cfg = self._config
        with self._lock:
            self._leading = False
        leading.set()
        if why is _Exit.LOST:
            log.info(
                "%s lost lease %s: not renewed within %gs",
                cfg.identity,
                cfg.describe(),
                cfg.renew_deadline,
            )
        else:
            log.info(
                "%s stopping leading on lease %s (%s)", cfg.identity, cfg.describe(), why.value
            )
        # Nobody else may take over before our last renewal's lease runs out: give the work
        # until then to stop. Releasing while it still ran would let two leaders work at once.
        worker.join(max(0.0, self._renewed_at + cfg.lease_duration - self._clock()))
        if worker.is_alive():
            log.error(
                "on_started_leading has not returned after being told to stop; another "
                "candidate may take over lease %s while it still runs",
                cfg.describe(),
            )
        elif why is not _Exit.LOST and cfg.release_on_cancel:
            self._guarded(self._release, self._clock() + cfg.renew_deadline)
        try:
            self._on_stopped_leading()
        except Exception:
            log.exception("on_stopped_leading raised")

    # -- one attempt ---------------------------------------------------------------------

    def _guarded(self, attempt: Callable[[], bool], until: float) -> bool:
        """Run ``attempt`` on a thread of its own and wait for it until ``until`` (local clock).

        The per-call timeout keeps a deadline only while the client makes one attempt per
        call; with urllib3's default ``Retry`` a timed-out GET or PUT is retried up to three
        times, each with a fresh timeout (seen: 1.2 s for a 0.3 s timeout). An attempt still
        running at ``until`` counts as failed and is left to end on its own (its calls time
        out); no new attempt starts while it runs. Should its renewal land late, the Lease
        merely stays ours, unused, for one more lease duration."""
        straggler = self._straggler
        if straggler is not None:
            straggler.join(max(0.0, until - self._clock()))
            if straggler.is_alive():
                return False
            self._straggler = None
        result: list[bool] = []
        thread = threading.Thread(
            target=lambda: result.append(attempt()),
            name=f"leader-{self._config.name}-call",
            daemon=True,
        )
        thread.start()
        thread.join(max(0.0, until - self._clock()))
        if thread.is_alive():
            self._straggler = thread
            log.warning("lease %s: API call still running at its deadline", self._config.describe())
            return False
        return bool(result and result[0])

    def _try_acquire_or_renew(self, deadline: float | None) -> bool:
        """One client-go ``tryAcquireOrRenew``: True when this process holds the Lease with a
        fresh renewal. ``deadline`` (local clock) bounds every call it makes."""
        try:
            return self._attempt(deadline)
        except _OutOfTimeError:
            return False
        finally:
            self._report_transition()

    def _attempt(self, deadline: float | None) -> bool:
        cfg = self._config
        now = _now_rfc3339()
        record: JSON = {
            "holderIdentity": cfg.identity,
            "leaseDurationSeconds": cfg.lease_duration_seconds,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        }

        # 1. Fast path: the leader updates the Lease it last wrote, assuming nobody else has.
        with self._lock:
            lease, observed = self._lease, self._observed
        mine = observed.get("holderIdentity") == cfg.identity
        if lease is not None and mine and self._observed_valid():
            record["acquireTime"] = observed.get("acquireTime") or now
            record["leaseTransitions"] = observed.get("leaseTransitions") or 0
            try:
                self._update(lease, record, deadline)
                return True
            except _API_ERRORS as e:
                log.debug("optimistic renewal of %s failed: %s", cfg.describe(), _brief(e))

        # 2. Read the Lease, or create it when there is none.
        try:
            lease = self._call("GET", None, deadline)
        except ApiException as e:
            if e.status != 404:
                log.warning("cannot read lease %s: %s", cfg.describe(), _brief(e))
                return False
            return self._create(record, deadline)
        except _API_ERRORS as e:
            log.warning("cannot read lease %s: %s", cfg.describe(), _brief(e))
            return False
        self._observe(lease, self._clock())

        # 3. Someone else holds it and it has not expired by our clock: wait.
        current = _record_of(lease)
        holder = current.get("holderIdentity") or ""
        if holder and holder != cfg.identity and self._observed_valid():
            return False

        # 4. Ours, released or expired: take it, keeping the record's history.
        if holder == cfg.identity:
            record["acquireTime"] = current.get("acquireTime") or now
            record["leaseTransitions"] = current.get("leaseTransitions") or 0
        else:
            record["leaseTransitions"] = (current.get("leaseTransitions") or 0) + 1
        try:
            self._update(lease, record, deadline)
        except ApiException as e:
            if e.status == 409:
                log.debug("lease %s was written by someone else first", cfg.describe())
            else:
                log.warning("cannot update lease %s: %s", cfg.describe(), _brief(e))
            return False
        except _API_ERRORS as e:
            log.warning("cannot update lease %s: %s", cfg.describe(), _brief(e))
            return False
        return True

    def _create(self, record: JSON, deadline: float | None) -> bool:
        cfg = self._config
        body: JSON = {
            "apiVersion": LEASES.api_version,
            "kind": "Lease",
            "metadata": {"name": cfg.name, "namespace": cfg.namespace},
            "spec": record,
        }
        sent = self._clock()
        try:
            created = self._call("POST", body, deadline)
        except _API_ERRORS as e:
            if isinstance(e, ApiException) and e.status == 409:
                log.debug("lease %s was created by someone else first", cfg.describe())
            else:
                log.warning("cannot create lease %s: %s", cfg.describe(), _brief(e))
            return False
        self._observe(created, sent, renewed=True)
        return True

    def _update(self, lease: JSON, record: JSON, deadline: float | None) -> None:
        """Write ``record`` into ``lease`` (its resourceVersion is the precondition)."""
        spec = {**(lease.get("spec") or {}), **record}
        body = {**lease, "spec": spec}
        sent = self._clock()
        updated = self._call("PUT", body, deadline)
        self._observe(updated, sent, renewed=record.get("holderIdentity") == self._config.identity)

    def _release(self) -> bool:
        """Give the Lease up so another candidate takes over at once; only if we hold it."""
        cfg = self._config
        try:
            lease = self._call("GET", None, None)
            current = _record_of(lease)
            if current.get("holderIdentity") != cfg.identity:
                return True
            now = _now_rfc3339()
            released: JSON = {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": current.get("leaseTransitions") or 0,
            }
            self._update(lease, released, None)
        except (*_API_ERRORS, _OutOfTimeError) as e:
            log.warning("cannot release lease %s: %s", cfg.describe(), _brief(e))
            return False
        log.info("%s released lease %s", cfg.identity, cfg.describe())
        return True

    def _call(self, method: str, body: JSON | None, deadline: float | None) -> JSON:
        cfg = self._config
        timeout = self._call_timeout
        if deadline is not None:
            timeout = min(timeout, deadline - self._clock())
            if timeout <= 0.0:
                raise _OutOfTimeError()
        if method == "POST":
            path = LEASES.path(cfg.namespace)
        else:
            path = LEASES.path(cfg.namespace, cfg.name)
        result: Any = self._rest.request(method, path, body=body, timeout=timeout)
        if not isinstance(result, dict):
            raise ValueError(f"expected a Lease from the API server, got {type(result).__name__}")
        return result

    # -- observations --------------------------------------------------------------------

    def _observe(self, lease: JSON, at: float, renewed: bool = False) -> None:
        """Remember ``lease``; restart the expiry clock at ``at`` when its record changed."""
        record = _record_of(lease)
        with self._lock:
            self._lease = lease
            if record != self._observed:
                self._observed = record
                self._observed_at = at
            if renewed:
                self._renewed_at = at
            self._leader = record.get("holderIdentity") or None

    def _observed_valid(self) -> bool:
        """Whether the observed record's lease runs on, judged by the local clock only."""
        with self._lock:
            seconds = self._observed.get("leaseDurationSeconds")
            duration = float(seconds) if isinstance(seconds, int | float) else 0.0
            return self._clock() < self._observed_at + duration

    def _report_transition(self) -> None:
        with self._lock:
            holder = self._leader
            if holder is None or holder == self._reported:
                return
            self._reported = holder
        if holder != self._config.identity:
            log.info("new leader observed for lease %s: %s", self._config.describe(), holder)
        callback = self._on_new_leader
        if callback is not None:
            threading.Thread(
                target=_quietly, args=(callback, holder), name="leader-observed", daemon=True
            ).start()


def _quietly(callback: Callable[[str], None], holder: str) -> None:
    try:
        callback(holder)
    except Exception:
        log.exception("on_new_leader raised")


def _brief(error: BaseException) -> str:
    if isinstance(error, ApiException):
        return f"{error.status} {error.reason}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__

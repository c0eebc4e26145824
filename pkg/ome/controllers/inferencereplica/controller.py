"""The InferenceReplica reconciler: observes the replica and its pods, asks ``instances.plan``
what to do, asks its gates about the Instances about to get pods, settles the plan and
carries it out (pods, ControllerRevisions, status, the teardown finalizer). Keyed by
replica; pod events map to it by the replica label.

It never decides lifecycle itself: that is ``instances``. Deletes carry the pod's UID, a pod
the cache misses is confirmed with a live read before its Instance is rebuilt, and creates
and deletes the cache does not show yet are expected, so a lagging cache never repeats one.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from kubernetes.client.exceptions import ApiException

from ome.api.v1beta1 import (
    CONTROLLER_REVISIONS,
    INFERENCE_REPLICAS,
    LABEL_INFERENCE_REPLICA,
    LABEL_MANAGED_BY,
    LABEL_REVISION_HASH,
    controller_reference,
)
from ome.api.v1beta1 import FINALIZER_IR_TEARDOWN as TEARDOWN_FINALIZER
from ome.api.v1beta1 import MANAGED_BY_OMENATIVE as MANAGED_BY
from ome.backoff import capped_exponential
from ome.controllers.holds import Gated, GateFunc, Hold
from ome.durations import format_go_duration, parse_go_duration
from ome.kube import JSON, json_copy, parse_time, rfc3339
from ome.runtime.client import Client, api_error, describe_error, namespace_terminating
from ome.runtime.controller import Controller, Result, gone_high
from ome.runtime.events import EventRecorder
from ome.runtime.expectations import Expectations, LatestWrites
from ome.runtime.informer import Informer
from ome.runtime.rest import MERGE_PATCH, PODS, status_of
from ome.runtime.views import ByVersion

from . import instances
from .instances import Observed

log = logging.getLogger(__name__)

DEFAULT_TEARDOWN = timedelta(minutes=10)
#: G5: the Warning of a teardown that finished at its deadline with something still in the
#: way; it says what to clean up by hand, so the recorder never drops it.
TEARDOWN_DEADLINE_EXCEEDED = "TeardownDeadlineExceeded"


@dataclass(frozen=True)
class Waiting:
    """What a teardown step says is still in the way: ``text``, which the
    TeardownDeadlineExceeded Warning carries if it is still so at the deadline, and when to
    look again (``retry_after`` seconds) if nothing wakes the replica first; None when a
    change the replica's watches see ends the wait (a pod or a Slice going)."""

    text: str
    retry_after: float | None = None


#: Teardown steps other features add (e.g. releasing TPU slices): (replica, past its
#: teardown deadline) -> None when done, or what is still in the way. Past the deadline a
#: step lets go of whatever it can; an API error it raises is what is in the way.
TeardownHook = Callable[[JSON, bool], Waiting | None]

#: The longest a teardown waits between two looks when every wait ends with a change its
#: watches see: a safety net, not the pace.
MAX_TEARDOWN_WAIT = 60.0
#: When to look again after an API error in a teardown step (its client has retried first).
FAILED_TEARDOWN_RETRY = 5.0


def now_utc() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


#: The waiting token of an Instance rebuilt too often: its pods wait before the next rebuild.
REBUILD_BACKOFF = "RebuildBackoff"


class RebuildBackoff:
    """Spaces the rebuilds of an Instance that keeps losing its pods, as the kubelet spaces a
    crashing container's restarts: more than ``allowed`` rebuilds within ``window`` hold the
    next one back for 10 s, doubling with each further rebuild, up to 5 minutes. Whatever
    makes the Instance rebuild (a stale cache, a pod deleted from outside in a loop), it then
    costs a few writes a minute, not thousands; each backoff says why in one log line.

    Written here rather than taken from the workqueue's rate limiter: that one spaces the
    passes of a whole replica, while this holds one Instance and lets the others go on.

    Invariants, under ``_lock``: ``_times[(key, index)]`` are the times of that Instance's
    rebuilds within the last ``window``, oldest first; ``_told`` is the rebuild count last
    logged for it, so each backoff is logged once.
    """

    INITIAL, CAP = 10.0, 300.0

    def __init__(self, allowed: int = 3, window: timedelta = timedelta(minutes=1)) -> None:
        self.allowed, self.window = allowed, window
        self._lock = threading.Lock()
        self._times: dict[tuple[str, int], list[datetime]] = {}
        self._told: dict[tuple[str, int], int] = {}

    def rebuilt(self, key: str, index: int, now: datetime) -> None:
        with self._lock:
            times = self._recent(key, index, now)
            times.append(now)

    def hold(self, key: str, index: int, now: datetime) -> tuple[Hold, float] | None:
        """The hold on ``index``'s next rebuild, and the seconds it has left; None to go."""
        with self._lock:
            times = self._recent(key, index, now)
            excess = len(times) - self.allowed
            if excess <= 0:
                return None
            wait = capped_exponential(excess, self.INITIAL, self.CAP)
            left = (times[-1] + timedelta(seconds=wait) - now).total_seconds()
            if left <= 0:
                return None
            text = (
                f"instance {index} was rebuilt {len(times)} times in the last "
                f"{format_go_duration(self.window)}; its next rebuild waits "
                f"{format_go_duration(timedelta(seconds=wait))}"
            )
            if self._told.get((key, index)) != len(times):
                self._told[(key, index)] = len(times)
                log.warning("%s: %s", key, text)
            return Hold(REBUILD_BACKOFF, text), left

    def forget(self, key: str) -> None:
        with self._lock:
            for table in (self._times, self._told):
                for k in [k for k in table if k[0] == key]:
                    del table[k]

    def _recent(self, key: str, index: int, now: datetime) -> list[datetime]:
        times = [t for t in self._times.get((key, index), []) if now - t < self.window]
        self._times[(key, index)] = times
        return times


@dataclass
class Hooks:
    """What other features plug into the Instance lifecycle.

    - ``gates``: asked once per pass with every Instance about to get pods; they may act
      (e.g. provision capacity) and say which Instances must wait.
    - ``teardown``: asked while a deleted replica is torn down; None when done.
    """

    gates: list[GateFunc] = field(default_factory=list)
    teardown: list[TeardownHook] = field(default_factory=list)


class InferenceReplicaReconciler:
    def __init__(
        self,
        client: Client,
        replicas: Informer,
        pods: Informer,
        recorder: EventRecorder,
        hooks: Hooks | None = None,
        clock: Callable[[], datetime] = now_utc,
        expectations: Expectations | None = None,
    ) -> None:
        self.client = client
        self.replicas = replicas
        self.pods = pods
        self.recorder = recorder
        self.hooks = hooks or Hooks()
        self.clock = clock
        #: pods created and deleted per replica key that the cache does not show yet; shared
        #: with whatever else deletes this replica's pods (loss detection)
        self.expectations = expectations or Expectations()
        #: the runners' revision hash, computed once per version of the replica
        self._revision_of: ByVersion[str] = ByVersion(
            lambda r: instances.revision_hash(list(r["spec"].get("runners") or []))
        )
        #: the replica status our last write stored: the status is the Instances' memory, so
        #: a cache still showing the replaced version must not be planned from
        self._written: LatestWrites[JSON] = LatestWrites()
        self.backoff = RebuildBackoff()
        pods.add_indexer("replica", replica_key_of_pod)

    def controller(self, workers: int = 2) -> Controller:
        c = Controller("inferencereplica", self.reconcile, workers=workers)
        c.watch(self.replicas)
        c.watch(self.pods, keys=replica_key_of_pod, priority=gone_high)  # a loss goes first
        return c

    # -- reconcile -----------------------------------------------------------------------

    def reconcile(self, key: str) -> Result | None:
        # The cache's own replica and pods (no copies): a pass only reads them; what it
        # writes it builds anew or copies first (the planned rows, the status, the pods).
        replica = self.replicas.peek(key)
        if replica is None:
            self.expectations.forget(key)
            self._written.forget(key)
            self.backoff.forget(key)
            return None
        written = self._written.get(key, str(replica["metadata"].get("resourceVersion", "")))
        if written is not None:
            replica = json_copy(written)  # the cache has not caught up with our write
        meta = replica["metadata"]
        if meta.get("deletionTimestamp"):
            return self._teardown(replica)
        if TEARDOWN_FINALIZER not in (meta.get("finalizers") or []):
            self.client.patch(
                INFERENCE_REPLICAS,
                meta["name"],
                {
                    "metadata": {
                        "finalizers": [*(meta.get("finalizers") or []), TEARDOWN_FINALIZER],
                        "resourceVersion": meta["resourceVersion"],
                    }
                },
                meta["namespace"],
            )
            return None  # the update brings us back
        # Only pods this replica owns (its UID): a pod of an earlier replica of the same name
        # is garbage, never one of its Instances' pods, whatever the cache still shows.
        replica_uid = str(meta.get("uid", ""))
        pods = [p for p in self.pods.peek_by_index("replica", key) if _owned_by(p, replica_uid)]
        creating, going = self.expectations.observe(
            key,
            {
                p["metadata"]["name"]: (
                    str(p["metadata"].get("uid", "")),
                    bool(p["metadata"].get("deletionTimestamp")),
                )
                for p in pods
            },
        )
        now = self.clock()
        revision = self._revision_of(replica)
        obs = Observed(replica, pods, now, expected_new=creating, going=going, revision=revision)
        obs = dataclasses.replace(
            obs, confirmed_gone=self._confirm_gone(replica, instances.suspects(obs))
        )
        plan = instances.plan(obs)
        before = {
            r.get("index"): r.get("incarnation", 0)
            for r in (replica.get("status") or {}).get("instanceStatuses") or []
        }
        for row in plan.rows:
            if row.get("incarnation", 0) != before.get(row.get("index"), row.get("incarnation", 0)):
                self.backoff.rebuilt(key, int(row["index"]), now)
        # An Instance rebuilt too often waits first: its gates (its Slice) are not asked.
        pending = plan.about_to_create()
        holds: dict[int, Hold] = {}
        for index in list(pending):
            backing_off = self.backoff.hold(key, index, now)
            if backing_off is not None:
                holds[index] = backing_off[0]
                plan.wake_in(backing_off[1])
                del pending[index]
        gated = self._gate(replica, pending)
        holds.update(gated.holds)
        instances.settle(plan, holds)
        self._ensure_revision(replica, revision)
        failed = gated.failed
        for name, uid in plan.delete:
            failed |= not self._delete_pod(key, meta["namespace"], name, uid)
        for pod in plan.create:
            at = instances.index_of(pod)
            extra = gated.node_selectors.get(at, {}) if at is not None else {}
            if extra:
                pod["spec"].setdefault("nodeSelector", {}).update(extra)
            failed |= not self._create_pod(key, replica, pod)
        self._write_status(replica, plan.rows, revision)
        if failed:
            return Result(requeue=True)
        if plan.requeue_after is not None:
            return Result(requeue_after=plan.requeue_after)
        return None

    def _gate(self, replica: JSON, pending: Mapping[int, list[JSON]]) -> Gated:
        """Ask every gate about the Instances about to get pods; the first hold wins."""
        if not pending or not self.hooks.gates:
            return Gated()
        holds: dict[int, Hold] = {}
        selectors: dict[int, dict[str, str]] = {}
        failed = False
        for gate in self.hooks.gates:
            answer = gate(replica, pending)
            for index, hold in answer.holds.items():
                holds.setdefault(index, hold)
            for index, extra in answer.node_selectors.items():
                selectors.setdefault(index, {}).update(extra)
            failed |= answer.failed
        return Gated(holds, selectors, failed)

    def _confirm_gone(self, replica: JSON, names: list[str]) -> frozenset[str]:
        """Live reads for pods the cache misses: only a pod the server also lacks is gone."""
        gone = set()
        for name in names:
            if self.client.live_get_or_none(PODS, name, replica["metadata"]["namespace"]) is None:
                gone.add(name)
        return frozenset(gone)

    def _create_pod(self, key: str, replica: JSON, pod: JSON) -> bool:
        """Create a planned pod, expected until the cache shows it. False when the create
        failed in a way worth retrying soon; a spec problem is reported and left until the
        spec changes."""
        ns, name = replica["metadata"]["namespace"], pod["metadata"]["name"]
        if not self.expectations.reserve_create(key, name):
            return True  # already on its way
        try:
            created = self.client.create(PODS, pod, ns)
        except ApiException as e:
            if e.status == 409:
                self.expectations.created(key, name, "")  # already there (the cache lags)
                return True
            self.expectations.create_failed(key, name)
            if namespace_terminating(e):
                # The namespace is being deleted, this replica with it: nothing to report.
                log.debug("not creating pod %s/%s: its namespace is being deleted", ns, name)
                return True
            message = status_of(e).get("message") or f"{e.status} {e.reason}"
            self.recorder.event(
                replica,
                "Warning",
                "PodCreateFailed",
                f"creating pod {name} failed: {message}",
            )
            if e.status in (400, 403, 404, 422):
                return True  # a spec problem: reported, retried when the spec changes
            log.error("creating pod %s/%s failed: %s", ns, name, describe_error(e))
            return False
        except Exception as e:
            self.expectations.create_failed(key, name)
            if not api_error(e):
                raise
            log.error("creating pod %s/%s failed: %s", ns, name, describe_error(e))
            return False
        self.expectations.created(key, name, str(created["metadata"].get("uid", "")))
        return True

    def _delete_pod(self, key: str, namespace: str, name: str, uid: str) -> bool:
        """Delete a pod under its UID, expected until the cache shows it going. False when the
        delete failed and is worth retrying; a 409 means a replacement holds the name."""
        if not self.expectations.reserve_delete(key, name, uid):
            return True  # already on its way
        try:
            self.client.delete(PODS, name, namespace, uid=uid)
        except Exception as e:
            self.expectations.delete_failed(key, name)
            if isinstance(e, ApiException) and e.status == 409:
                return True  # a replacement with the same name; leave it
            if not api_error(e):
                raise
            log.error("deleting pod %s/%s failed: %s", namespace, name, describe_error(e))
            return False
        return True

    def _ensure_revision(self, replica: JSON, revision: str) -> None:
        meta = replica["metadata"]
        name = f"{meta['name']}-{revision}"
        status = replica.get("status") or {}
        if status.get("updateRevision") == revision:
            return
        existing = self.client.live_list(
            CONTROLLER_REVISIONS,
            meta["namespace"],
            label_selector=f"{LABEL_INFERENCE_REPLICA}={meta['name']}",
        )
        if any(r["metadata"]["name"] == name for r in existing):
            return
        number = max((int(r.get("revision", 0)) for r in existing), default=0) + 1
        body = {
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": {LABEL_INFERENCE_REPLICA: meta["name"], LABEL_REVISION_HASH: revision},
                "ownerReferences": [controller_reference(replica, "InferenceReplica")],
            },
            "revision": number,
            "data": {"runners": replica["spec"].get("runners") or []},
        }
        try:
            self.client.create(CONTROLLER_REVISIONS, body, meta["namespace"])
        except ApiException as e:
            if e.status != 409:
                raise

    def _write_status(self, replica: JSON, rows: list[JSON], revision: str) -> None:
        meta, spec = replica["metadata"], replica.get("spec") or {}
        old = replica.get("status") or {}
        serving = [r for r in rows if r.get("phase") != "Deleting"]
        ready = [r for r in serving if r.get("phase") == "Ready"]
        desired = int(spec.get("replicas") or 0)
        status = json_copy(old)
        status.update(
            {
                "observedGeneration": meta.get("generation", 1),
                "replicas": len(serving),
                "readyReplicas": len(ready),
                "availableReplicas": len(ready),
                "updatedReplicas": sum(1 for r in ready if r.get("runningRevision") == revision),
                "selector": f"{LABEL_INFERENCE_REPLICA}={meta['name']}",
                "currentRevision": _current_revision(ready, revision, old),
                "updateRevision": revision,
                "instanceStatuses": rows,
            }
        )
        ok = len(ready) >= desired and all(r.get("runningRevision") == revision for r in ready)
        status["conditions"] = _set_condition(
            old.get("conditions") or [],
            "Ready",
            "True" if ok else "False",
            "InstancesReady" if ok else "InstancesNotReady",
            f"{len(ready)} of {desired} instances ready",
            meta.get("generation", 1),
        )
        if status == old:
            return
        body = json_copy(replica)
        body["status"] = status
        try:
            stored = self.client.replace(
                INFERENCE_REPLICAS, body, meta["namespace"], subresource="status"
            )
        except ApiException as e:
            if e.status == 409:
                return  # a newer replica is on its way to us
            if e.status == 404:
                log.debug("%s/%s is gone: status not written", meta["namespace"], meta["name"])
                return  # deleted a moment ago: nothing to write to
            raise
        self._written.wrote(f"{meta['namespace']}/{meta['name']}", meta["resourceVersion"], stored)

    # -- teardown ------------------------------------------------------------------------

    def _delete_live(
        self, key: str, namespace: str, label: str, blocked: list[Waiting]
    ) -> list[JSON]:
        """The replica's pods, read live, each not going already deleted under its UID; an
        API error is added to ``blocked`` (and the cache's view is all there is)."""
        try:
            pods = self.client.live_list(PODS, namespace, label_selector=label)
            for pod in pods:
                if not pod["metadata"].get("deletionTimestamp"):
                    self._delete_pod(
                        key, namespace, pod["metadata"]["name"], pod["metadata"]["uid"]
                    )
        except Exception as e:
            if not api_error(e):
                raise
            blocked.append(
                Waiting(f"deleting pods failed: {describe_error(e)}", FAILED_TEARDOWN_RETRY)
            )
            return self.pods.by_index("replica", key)
        return pods

    def _teardown(self, replica: JSON) -> Result | None:
        """Delete the pods and run the teardown hooks until nothing is in the way, or until
        the teardown deadline: then the hooks let go of what they can, and the deletion
        finishes anyway, with a Warning that says what was still in the way (G5). An API
        error in any step is what is in the way; it never keeps the finalizer past the
        deadline. Between passes it waits on its watches (its pods and Slices going) and on
        the hooks' own backoff, not on a fixed poll."""
        meta = replica["metadata"]
        if TEARDOWN_FINALIZER not in (meta.get("finalizers") or []):
            return None
        key = f"{meta['namespace']}/{meta['name']}"
        ns = meta["namespace"]
        deadline_text = ((replica.get("spec") or {}).get("lifecycle") or {}).get("teardownTimeout")
        try:
            timeout = parse_go_duration(deadline_text) if deadline_text else DEFAULT_TEARDOWN
        except ValueError:
            timeout = DEFAULT_TEARDOWN
        started = parse_time(meta["deletionTimestamp"]) or self.clock()
        deadline = started + timeout
        past_deadline = self.clock() >= deadline
        blocked: list[Waiting] = []
        label = f"{LABEL_INFERENCE_REPLICA}={meta['name']}"
        # The pods as the cache shows them while they go, each one's going waking the
        # replica: the pass waits on the informer, and reads live only to delete what the
        # cache shows alive, and, before it finishes, to confirm that none is left.
        cached = self.pods.by_index("replica", key)
        pods: list[JSON] = cached
        if any(not p["metadata"].get("deletionTimestamp") for p in cached):
            pods = self._delete_live(key, ns, label, blocked)
        for hook in self.hooks.teardown:
            try:
                waiting = hook(replica, past_deadline)
            except Exception as e:
                if not api_error(e):
                    raise
                waiting = Waiting(describe_error(e), FAILED_TEARDOWN_RETRY)
            if waiting is not None:
                blocked.append(waiting)
        if not pods and not blocked and not past_deadline:
            # None cached and nothing else in the way: confirm, live.
            pods = self._delete_live(key, ns, label, blocked)
        if (pods or blocked) and not past_deadline:
            hints = [w.retry_after for w in blocked if w.retry_after is not None]
            wait = min(MAX_TEARDOWN_WAIT, *hints, (deadline - self.clock()).total_seconds())
            return Result(requeue_after=max(1.0, wait))
        if blocked:
            self.recorder.event(
                replica,
                "Warning",
                TEARDOWN_DEADLINE_EXCEEDED,
                f"teardown deadline exceeded; {'; '.join(w.text for w in blocked)}",
            )
        finalizers = [f for f in meta.get("finalizers") or [] if f != TEARDOWN_FINALIZER]
        try:
            stored = self.client.patch(
                INFERENCE_REPLICAS,
                meta["name"],
                {
                    "metadata": {
                        "finalizers": finalizers,
                        "resourceVersion": meta["resourceVersion"],
                    }
                },
                ns,
                patch_type=MERGE_PATCH,
            )
        except ApiException as e:
            if e.status not in (404, 409):
                raise
            return None
        # A pass before the cache shows the replica gone reads it without our finalizer,
        # and leaves it alone, instead of patching again.
        self._written.wrote(key, meta["resourceVersion"], stored)
        return None


def _owned_by(obj: JSON, uid: str) -> bool:
    """Whether ``obj``'s controller ownerReference is the object of ``uid``."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return bool(ref.get("uid") == uid)
    return False


def replica_key_of_pod(pod: JSON) -> list[str]:
    """The key of the replica an OMENative pod belongs to, by its replica label."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY or LABEL_INFERENCE_REPLICA not in labels:
        return []
    return [f"{meta.get('namespace', '')}/{labels[LABEL_INFERENCE_REPLICA]}"]


def _current_revision(ready: list[JSON], revision: str, old: JSON) -> str:
    if ready and all(r.get("runningRevision") == revision for r in ready):
        return revision
    return str(
        old.get("currentRevision") or (ready[0].get("runningRevision") if ready else revision)
    )


def _set_condition(
    conditions: list[JSON], ctype: str, status: str, reason: str, message: str, generation: int
) -> list[JSON]:
    out = [dict(c) for c in conditions if c.get("type") != ctype]
    old = next((c for c in conditions if c.get("type") == ctype), None)
    since = old.get("lastTransitionTime") if old and old.get("status") == status else None
    out.append(
        {
            "type": ctype,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since or rfc3339(now_utc()),
            "observedGeneration": generation,
        }
    )
    return sorted(out, key=lambda c: str(c["type"]))

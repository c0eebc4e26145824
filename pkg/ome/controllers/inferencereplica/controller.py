"""The InferenceReplica reconciler: observes the replica and its pods into ``Observed``,
asks ``instances.plan`` what to do, holds the Instances rebuilt too often (``decide``), asks
its gates about the other Instances about to get pods, settles the plan and carries it out
in one place (pods, ControllerRevisions, the status ``decide`` computes, the teardown
finalizer). Keyed by replica; pod events map to it by the replica label.

It never decides lifecycle itself: that is ``instances`` and ``decide``. Deletes carry the
pod's UID, a pod the cache misses is confirmed with a live read before its Instance is
rebuilt, and creates and deletes the cache does not show yet are expected, so a lagging
cache never repeats one.
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
    FINALIZER_IR_TEARDOWN,
    INFERENCE_REPLICAS,
    LABEL_INFERENCE_REPLICA,
    LABEL_MANAGED_BY,
    MANAGED_BY_OMENATIVE,
)
from ome.controllers.holds import Gated, GateFunc, Hold
from ome.durations import parse_go_duration
from ome.kube import JSON, json_copy, parse_time
from ome.runtime.client import Client, api_error, describe_error, namespace_terminating
from ome.runtime.controller import Controller, Result, gone_high
from ome.runtime.events import EventRecorder
from ome.runtime.expectations import Expectations, LatestWrites
from ome.runtime.informer import Informer
from ome.runtime.rest import MERGE_PATCH, PODS, status_of
from ome.runtime.views import ByVersion

from . import decide, instances
from .decide import REBUILD_WINDOW, REBUILDS_ALLOWED
from .instances import Observed, Plan

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


class RebuildBackoff:
    """The memory of each Instance's rebuilds, shared by the replica's workers: whether its
    next rebuild waits, and how long, is ``decide.rebuild_hold`` of these times (more than
    ``allowed`` within ``window`` hold it back for 10 s, doubling up to 5 minutes). Whatever
    makes the Instance rebuild (a stale cache, a pod deleted from outside in a loop), it then
    costs a few writes a minute, not thousands; each backoff says why in one log line.

    Written here rather than taken from the workqueue's rate limiter: that one spaces the
    passes of a whole replica, while this holds one Instance and lets the others go on.

    Invariants, under ``_lock``: ``_times[key][index]`` are the times of that Instance's
    rebuilds within the last ``window``, oldest first, and only Instances rebuilt within it
    have an entry; ``_told[key][index]`` is the rebuild count last logged for it while it
    has one, so each backoff is logged once. Both are keyed by replica first, so that
    forgetting a replica touches only its own entries: a scan of every entry made each
    deletion in a burst of 2,000 cost as much as the burst's size.
    """

    def __init__(self, allowed: int = REBUILDS_ALLOWED, window: timedelta = REBUILD_WINDOW) -> None:
        self.allowed, self.window = allowed, window
        self._lock = threading.Lock()
        self._times: dict[str, dict[int, list[datetime]]] = {}
        self._told: dict[str, dict[int, int]] = {}

    def rebuilt(self, key: str, index: int, now: datetime) -> None:
        with self._lock:
            times = [*self._recent(key, index, now), now]
            self._times.setdefault(key, {})[index] = times

    def hold(self, key: str, index: int, now: datetime) -> tuple[Hold, float] | None:
        """The hold on ``index``'s next rebuild, and the seconds it has left; None to go."""
        with self._lock:
            times = self._recent(key, index, now)
            held = decide.rebuild_hold(index, times, now, self.allowed, self.window)
            if held is not None:
                told = self._told.setdefault(key, {})
                if told.get(index) != len(times):
                    told[index] = len(times)
                    log.warning("%s: %s", key, held[0].message)
            return held

    def forget(self, key: str) -> None:
        with self._lock:
            self._times.pop(key, None)
            self._told.pop(key, None)

    def _recent(self, key: str, index: int, now: datetime) -> list[datetime]:
        """The Instance's rebuilds within the window. Once there are none, its entries go,
        what was logged of it too: a later backoff is another one, logged again."""
        by_index = self._times.get(key)
        if by_index is None or index not in by_index:
            return []
        times = decide.recent(by_index[index], now, self.window)
        if times:
            by_index[index] = times
            return times
        for table in (self._times, self._told):
            entries = table.get(key)
            if entries is not None:
                entries.pop(index, None)
                if not entries:
                    del table[key]
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
        if replica["metadata"].get("deletionTimestamp"):
            return self._teardown(replica)
        if FINALIZER_IR_TEARDOWN not in (replica["metadata"].get("finalizers") or []):
            self._add_finalizer(replica)
            return None  # the update brings us back
        obs = self._observe(key, replica)
        plan = instances.plan(obs)
        # An Instance rebuilt too often waits first: its gates (its Slice) are not asked.
        holds = self._hold_rebuilt(key, obs, plan)
        pending = {i: pods for i, pods in plan.about_to_create().items() if i not in holds}
        gated = self._gate(replica, pending)
        instances.settle(plan, {**holds, **gated.holds})
        return self._act(key, obs, plan, gated)

    # -- observing -----------------------------------------------------------------------

    def _observe(self, key: str, replica: JSON) -> Observed:
        """The replica's pods (only those it owns, by its UID: a pod of an earlier replica of
        the same name is garbage, never one of its Instances' pods, whatever the cache still
        shows), our creates and deletes the cache does not show yet, its revision, and the
        pods the cache misses that a live read confirms gone."""
        replica_uid = str(replica["metadata"].get("uid", ""))
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
        revision = self._revision_of(replica)
        obs = Observed(
            replica, pods, self.clock(), expected_new=creating, going=going, revision=revision
        )
        return dataclasses.replace(
            obs, confirmed_gone=self._confirm_gone(replica, instances.suspects(obs))
        )

    def _hold_rebuilt(self, key: str, obs: Observed, plan: Plan) -> dict[int, Hold]:
        """Remember the Instances this plan rebuilt; the holds on those about to get pods
        that were rebuilt too often, the plan woken when each hold ends."""
        previous = (obs.replica.get("status") or {}).get("instanceStatuses") or []
        for index in decide.rebuilt(previous, plan.rows):
            self.backoff.rebuilt(key, index, obs.now)
        holds: dict[int, Hold] = {}
        for index in sorted(plan.pending):
            backing_off = self.backoff.hold(key, index, obs.now)
            if backing_off is not None:
                holds[index] = backing_off[0]
                plan.wake_in(backing_off[1])
        return holds

    # -- acting --------------------------------------------------------------------------

    def _act(self, key: str, obs: Observed, plan: Plan, gated: Gated) -> Result | None:
        """Carry the settled plan out: the runners' ControllerRevision, the pod deletes, the
        pod creates (confined as the gates said), then the status; a failed write (a gate's
        too) retries the pass with backoff."""
        replica, revision = obs.replica, self._revision_of(obs.replica)
        self._ensure_revision(replica, revision)
        failed = gated.failed
        for name, uid in plan.delete:
            failed |= not self._delete_pod(key, replica["metadata"]["namespace"], name, uid)
        decide.confine(plan.create, gated.node_selectors)
        for pod in plan.create:
            failed |= not self._create_pod(key, replica, pod)
        self._write_status(
            replica, decide.replica_status(replica, plan.rows, revision, self.clock())
        )
        if failed:
            return Result(requeue=True)
        if plan.requeue_after is not None:
            return Result(requeue_after=plan.requeue_after)
        return None

    def _add_finalizer(self, replica: JSON) -> None:
        """The teardown finalizer, on a replica that lacks it; the patch carries the version
        it read, so it never lands on a newer one."""
        meta = replica["metadata"]
        self.client.patch(
            INFERENCE_REPLICAS,
            meta["name"],
            {
                "metadata": {
                    "finalizers": [*(meta.get("finalizers") or []), FINALIZER_IR_TEARDOWN],
                    "resourceVersion": meta["resourceVersion"],
                }
            },
            meta["namespace"],
        )

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
                return self._name_taken(key, replica, name)
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

    def _name_taken(self, key: str, replica: JSON, name: str) -> bool:
        """A pod create refused because the name is taken (AlreadyExists): by this replica's
        own pod, which the cache does not show yet, then expected like a create; or by
        another's, such as a pod of an earlier replica of the same name still terminating
        after that replica was removed by force, which this replica's cache never shows as
        its own (``_observe``). Then nothing is expected, and False: the pass is tried again,
        and that pod's going (the same replica label) wakes it, to create its own."""
        ns = replica["metadata"]["namespace"]
        self.expectations.create_failed(key, name)  # no create of ours is in flight any more
        live = self.client.live_get_or_none(PODS, name, ns)  # an API error fails the pass
        if live is not None and _owned_by(live, str(replica["metadata"].get("uid", ""))):
            self.expectations.created(key, name, str(live["metadata"].get("uid", "")))
            return True
        log.debug("pod %s/%s waits for another owner's pod of its name to go", ns, name)
        return False

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
        if decide.revision_recorded(replica, revision):
            return
        meta = replica["metadata"]
        existing = self.client.live_list(
            CONTROLLER_REVISIONS,
            meta["namespace"],
            label_selector=f"{LABEL_INFERENCE_REPLICA}={meta['name']}",
        )
        body = decide.revision_body(replica, revision, existing)
        if body is None:
            return
        try:
            self.client.create(CONTROLLER_REVISIONS, body, meta["namespace"])
        except ApiException as e:
            if e.status != 409:
                raise

    def _write_status(self, replica: JSON, status: JSON | None) -> None:
        """Write the decided status (None: unchanged, nothing to write), remembered until the
        cache shows it: the status is the Instances' memory."""
        if status is None:
            return
        meta = replica["metadata"]
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
        if FINALIZER_IR_TEARDOWN not in (meta.get("finalizers") or []):
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
        finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER_IR_TEARDOWN]
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
    if (
        labels.get(LABEL_MANAGED_BY) != MANAGED_BY_OMENATIVE
        or LABEL_INFERENCE_REPLICA not in labels
    ):
        return []
    return [f"{meta.get('namespace', '')}/{labels[LABEL_INFERENCE_REPLICA]}"]

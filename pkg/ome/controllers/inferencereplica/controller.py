"""The InferenceReplica reconciler: observes the replica and its pods, asks
``instances.plan`` what to do, and carries it out (pods, ControllerRevisions, status, the
teardown finalizer). Keyed by replica; pod events map to it by the replica label.

It never decides lifecycle itself: that is ``instances``. Deletes carry the pod's UID, and a
pod the cache misses is confirmed with a live read before its Instance is rebuilt.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from cachetools import TTLCache
from kubernetes.client.exceptions import ApiException

from ome.api.v1beta1 import (
    CONTROLLER_REVISIONS,
    INFERENCE_REPLICAS,
    LABEL_MANAGED_BY,
    LABEL_REVISION_HASH,
    controller_reference,
)
from ome.api.v1beta1 import FINALIZER_IR_TEARDOWN as TEARDOWN_FINALIZER
from ome.api.v1beta1 import MANAGED_BY_OMENATIVE as MANAGED_BY
from ome.durations import parse_go_duration
from ome.runtime.client import Client
from ome.runtime.controller import Controller, Result
from ome.runtime.events import EventRecorder
from ome.runtime.informer import Informer
from ome.runtime.rest import JSON, MERGE_PATCH, PODS, status_of

from . import instances
from .instances import LABEL_REPLICA, Hold, HoldFunc, Observed

log = logging.getLogger(__name__)

DEFAULT_TEARDOWN = timedelta(minutes=10)
#: How long a pod we created may stay unseen by the cache before we stop waiting for it.
EXPECTATION_TTL = 60.0

#: (replica, {instance index: the pods it is about to get}) -> {instance index: hold}
GateFunc = Callable[[JSON, dict[int, list[JSON]]], dict[int, Hold]]

#: Teardown steps other features add (e.g. releasing TPU slices): (replica) -> None when
#: done, or a message saying what is still in the way.
TeardownHook = Callable[[JSON], str | None]


def now_utc() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@dataclass
class Hooks:
    """What other features plug into the Instance lifecycle.

    - ``holds``: pure checks asked before an Instance's pods are created.
    - ``gates``: asked once per pass with every Instance about to get pods
      (``{index: pods}``); they may act (e.g. provision capacity) and return holds by index.
    - ``pod_mutators``: applied to every pod before it is created.
    - ``after_pass``: told the replica and its new rows after a pass that acted (e.g. to
      release what no Instance needs any more).
    - ``teardown``: asked while a deleted replica is torn down; None when done.
    """

    holds: list[HoldFunc] = field(default_factory=list)
    gates: list[GateFunc] = field(default_factory=list)
    teardown: list[TeardownHook] = field(default_factory=list)
    pod_mutators: list[Callable[[JSON, JSON], JSON]] = field(default_factory=list)
    after_pass: list[Callable[[JSON, list[JSON]], None]] = field(default_factory=list)


class InferenceReplicaReconciler:
    def __init__(
        self,
        client: Client,
        replicas: Informer,
        pods: Informer,
        recorder: EventRecorder,
        hooks: Hooks | None = None,
        clock: Callable[[], datetime] = now_utc,
    ) -> None:
        self.client = client
        self.replicas = replicas
        self.pods = pods
        self.recorder = recorder
        self.hooks = hooks or Hooks()
        self.clock = clock
        #: replica key -> pod names created and not yet seen by the cache
        self._expected: TTLCache[str, frozenset[str]] = TTLCache(
            maxsize=100_000, ttl=EXPECTATION_TTL
        )
        #: replica key -> (resourceVersion our last status write replaced, what it wrote):
        #: the status is the Instances' memory, so a cache still showing the replaced
        #: version must not be planned from.
        self._written: TTLCache[str, tuple[str, JSON]] = TTLCache(
            maxsize=100_000, ttl=EXPECTATION_TTL
        )
        pods.add_indexer("replica", _replica_key_of_pod)

    def controller(self, workers: int = 2) -> Controller:
        c = Controller("inferencereplica", self.reconcile, workers=workers)
        c.watch(self.replicas)
        c.watch(self.pods, keys=lambda pod: [k] if (k := _replica_key_of_pod_str(pod)) else [])
        return c

    # -- reconcile -----------------------------------------------------------------------

    def reconcile(self, key: str) -> Result | None:
        replica = self.replicas.get(key)
        if replica is None:
            self._expected.pop(key, None)
            self._written.pop(key, None)
            return None
        written = self._written.get(key)
        if written is not None and replica["metadata"].get("resourceVersion") == written[0]:
            replica = copy.deepcopy(written[1])  # the cache has not caught up with our write
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
        pods = self.pods.by_index("replica", key)
        seen = {p["metadata"]["name"] for p in pods}
        expected = frozenset(self._expected.get(key, frozenset()) - seen)
        now = self.clock()
        obs = Observed(replica, pods, now, expected_new=expected, holds=tuple(self.hooks.holds))
        gone = self._confirm_gone(replica, instances.suspects(obs))
        holds = tuple(self.hooks.holds)
        if self.hooks.gates:
            # A dry plan says which Instances are about to get pods; the gates act on that
            # (e.g. provision their Slices) and say which must wait.
            asked: dict[int, list[JSON]] = {}

            def probe(_r: JSON, index: int, wanted: list[JSON]) -> Hold | None:
                asked[index] = wanted
                return None

            instances.plan(
                Observed(
                    replica,
                    pods,
                    now,
                    expected_new=expected,
                    confirmed_gone=gone,
                    holds=(*holds, probe),
                )
            )
            gated: dict[int, Hold] = {}
            if asked:
                for gate in self.hooks.gates:
                    gated.update(gate(replica, asked))
            holds = (*holds, lambda _r, index, _p: gated.get(index))
        obs = Observed(replica, pods, now, expected_new=expected, confirmed_gone=gone, holds=holds)
        plan = instances.plan(obs)
        revision = instances.revision_hash(list(replica["spec"].get("runners") or []))
        self._ensure_revision(replica, revision)
        for name, uid in plan.delete:
            self._delete_pod(meta["namespace"], name, uid)
        created = set(expected)
        for planned in plan.create:
            pod = planned
            for mutate in self.hooks.pod_mutators:
                pod = mutate(replica, pod)
            if self._create_pod(replica, pod):
                created.add(pod["metadata"]["name"])
        if created:
            self._expected[key] = frozenset(created)
        else:
            self._expected.pop(key, None)
        self._write_status(replica, plan.rows, revision)
        for after in self.hooks.after_pass:
            after(replica, plan.rows)
        if plan.requeue_after is not None:
            return Result(requeue_after=plan.requeue_after)
        return None

    def _confirm_gone(self, replica: JSON, names: list[str]) -> frozenset[str]:
        """Live reads for pods the cache misses: only a pod the server also lacks is gone."""
        gone = set()
        for name in names:
            if self.client.live_get_or_none(PODS, name, replica["metadata"]["namespace"]) is None:
                gone.add(name)
        return frozenset(gone)

    def _create_pod(self, replica: JSON, pod: JSON) -> bool:
        ns = replica["metadata"]["namespace"]
        try:
            self.client.create(PODS, pod, ns)
            return True
        except ApiException as e:
            if e.status == 409:
                return True  # already there (the cache lags): wait for it
            message = status_of(e).get("message") or f"{e.status} {e.reason}"
            self.recorder.event(
                replica,
                "Warning",
                "PodCreateFailed",
                f"creating pod {pod['metadata']['name']} failed: {message}",
            )
            if e.status in (400, 403, 404, 422):
                return False  # a spec problem: reported, retried when the spec changes
            raise

    def _delete_pod(self, namespace: str, name: str, uid: str) -> None:
        try:
            self.client.delete(PODS, name, namespace, uid=uid)
        except ApiException as e:
            if e.status != 409:  # 409: a replacement with the same name; leave it
                raise

    def _ensure_revision(self, replica: JSON, revision: str) -> None:
        meta = replica["metadata"]
        name = f"{meta['name']}-{revision}"
        status = replica.get("status") or {}
        if status.get("updateRevision") == revision:
            return
        existing = self.client.live_list(
            CONTROLLER_REVISIONS,
            meta["namespace"],
            label_selector=f"{LABEL_REPLICA}={meta['name']}",
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
                "labels": {LABEL_REPLICA: meta["name"], LABEL_REVISION_HASH: revision},
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
        status = copy.deepcopy(old)
        status.update(
            {
                "observedGeneration": meta.get("generation", 1),
                "replicas": len(serving),
                "readyReplicas": len(ready),
                "availableReplicas": len(ready),
                "updatedReplicas": sum(1 for r in ready if r.get("runningRevision") == revision),
                "selector": f"{LABEL_REPLICA}={meta['name']}",
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
        body = copy.deepcopy(replica)
        body["status"] = status
        try:
            stored = self.client.replace(
                INFERENCE_REPLICAS, body, meta["namespace"], subresource="status"
            )
        except ApiException as e:
            if e.status == 409:
                return  # a newer replica is on its way to us
            raise
        self._written[f"{meta['namespace']}/{meta['name']}"] = (meta["resourceVersion"], stored)

    # -- teardown ------------------------------------------------------------------------

    def _teardown(self, replica: JSON) -> Result | None:
        meta = replica["metadata"]
        if TEARDOWN_FINALIZER not in (meta.get("finalizers") or []):
            return None
        ns = meta["namespace"]
        deadline_text = ((replica.get("spec") or {}).get("lifecycle") or {}).get("teardownTimeout")
        try:
            timeout = parse_go_duration(deadline_text) if deadline_text else DEFAULT_TEARDOWN
        except ValueError:
            timeout = DEFAULT_TEARDOWN
        started = instances.parse_time(meta["deletionTimestamp"]) or self.clock()
        past_deadline = self.clock() >= started + timeout
        pods = self.client.live_list(PODS, ns, label_selector=f"{LABEL_REPLICA}={meta['name']}")
        for pod in pods:
            if not pod["metadata"].get("deletionTimestamp"):
                self._delete_pod(ns, pod["metadata"]["name"], pod["metadata"]["uid"])
        waiting = [h(replica) for h in self.hooks.teardown]
        blocked = [w for w in waiting if w]
        if (pods or blocked) and not past_deadline:
            left = (started + timeout - self.clock()).total_seconds()
            return Result(requeue_after=max(1.0, min(5.0, left)))
        if blocked:
            self.recorder.event(
                replica,
                "Warning",
                "TeardownDeadlineExceeded",
                f"teardown deadline exceeded; {'; '.join(blocked)}",
            )
        finalizers = [f for f in meta.get("finalizers") or [] if f != TEARDOWN_FINALIZER]
        try:
            self.client.patch(
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


def _replica_key_of_pod_str(pod: JSON) -> str:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY or LABEL_REPLICA not in labels:
        return ""
    return f"{meta.get('namespace', '')}/{labels[LABEL_REPLICA]}"


def _replica_key_of_pod(pod: JSON) -> list[str]:
    key = _replica_key_of_pod_str(pod)
    return [key] if key else []


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
            "lastTransitionTime": since or instances.rfc3339(now_utc()),
            "observedGeneration": generation,
        }
    )
    return sorted(out, key=lambda c: str(c["type"]))

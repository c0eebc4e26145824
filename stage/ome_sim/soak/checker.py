"""The soak's invariants, judged from the API server's own record: the checker is hooked into
the embedded server in-process (``EmbeddedAPIServer.on_write`` for every write request, as it
arrives and before it is carried out; ``Store.listeners`` for every committed change), so
each request is judged against the state it actually meets, not a watcher's lagging copy.

Invariants (each judged on every request it concerns, counted, and logged):

- ``slice-gate``: OME creates a pod of an opted-in Instance only with the slice selector, on a
  Slice of its own that the server has recorded ready at least once (its current uid);
- ``slice-owner-label``: OME writes to a Slice only if it carries (for a create: gives it)
  the owner-UID label, and never to a foreign Slice;
- ``pod-delete-cause``: OME deletes a pod only when the server shows a cause: the replica
  going or gone, the Instance scaled away, an older revision, an Instance rebuilt (a pod of
  it terminal or missing, or its operation a restart or past its deadline), or its Slice
  lost (H3: absent, terminating, created after the pod, without partitions, or a bound
  pod's node without the slice label). A replacement pod deleted on a healthy Slice fails
  this invariant;
- ``uid-precondition``: every delete OME sends carries a UID precondition;
- ``lease``: every write OME sends (but the lease itself, and the webhook certificate's
  Secret and configuration, which every replica keeps) comes from the lease's holder while
  its lease is valid (renewed within leaseDurationSeconds).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ome.api.v1beta1 import (
    ANNOTATION_TPU_SLICE_PROVISIONING,
    LABEL_INSTANCE_INDEX,
    LABEL_MANAGED_BY,
    LABEL_REVISION_HASH,
)
from ome.controllers.inferencereplica import instances
from ome.kube import JSON, parse_time
from ome.provider import gke
from ome.tpuslice.naming import OWNER_UID_LABEL

from ..apiserver.server import WriteSeen
from ..apiserver.store import Change, Store

OME_AGENT = "ome-manager/"
PODS = ("", "pods")
NODES = ("", "nodes")
SLICES = (gke.GROUP, "slices")
REPLICAS = ("ome.io", "inferencereplicas")
LEASES = ("coordination.k8s.io", "leases")
#: Written by every replica, leader or not: the election itself, the webhook's certificate.
UNFENCED = {"leases", "secrets", "validatingwebhookconfigurations"}
WRITES = ("create", "update", "patch", "delete", "deletecollection")
INVARIANTS = ("slice-gate", "slice-owner-label", "pod-delete-cause", "uid-precondition", "lease")
HISTORY = 40


def identity_of(agent: str) -> str | None:
    """The leader-election identity in a manager's User-Agent (``ome-manager/<v> (<id>)``)."""
    if not agent.startswith(OME_AGENT) or not agent.endswith(")") or " (" not in agent:
        return None
    return agent.rsplit(" (", 1)[1][:-1]


def _meta(obj: JSON | None) -> JSON:
    meta = (obj or {}).get("metadata")
    return meta if isinstance(meta, dict) else {}


def _labels(obj: JSON | None) -> JSON:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, dict) else {}


def _selector(pod: JSON | None, slice_label: str) -> str:
    selector = ((pod or {}).get("spec") or {}).get("nodeSelector") or {}
    return str(selector.get(slice_label) or "")


def _terminal(pod: JSON) -> bool:
    return str((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed")


def _summary(tkey: tuple[str, str], obj: JSON, slice_label: str) -> JSON:
    """What the history of an object keeps of each of its states."""
    meta = _meta(obj)
    out: JSON = {"rv": meta.get("resourceVersion"), "uid": meta.get("uid")}
    if meta.get("deletionTimestamp"):
        out["deleting"] = True
    if tkey == PODS:
        out.update(
            phase=(obj.get("status") or {}).get("phase"),
            node=(obj.get("spec") or {}).get("nodeName"),
            slice=_selector(obj, slice_label) or None,
        )
    elif tkey == SLICES:
        info = gke.parse(obj)
        out.update(state=info.state, status=info.status, partitions=list(info.partitions))
        out["owner_uid"] = info.owner_uid or None
    elif tkey == NODES:
        ready = next(
            (
                c.get("status")
                for c in (obj.get("status") or {}).get("conditions") or []
                if c.get("type") == "Ready"
            ),
            None,
        )
        out.update(
            slice=_labels(obj).get(slice_label),
            unschedulable=bool((obj.get("spec") or {}).get("unschedulable")),
            ready=ready,
        )
    elif tkey == REPLICAS:
        out["replicas"] = (obj.get("spec") or {}).get("replicas")
    elif tkey == LEASES:
        spec = obj.get("spec") or {}
        out.update(holder=spec.get("holderIdentity"), renewed=spec.get("renewTime"))
    return out


@dataclass
class Violation:
    invariant: str
    at: float  # seconds since the checker started
    message: str
    objects: list[str]
    history: dict[str, list[JSON]] = field(default_factory=dict)

    def json(self) -> JSON:
        return {
            "invariant": self.invariant,
            "at": round(self.at, 3),
            "message": self.message,
            "objects": self.objects,
            "history": self.history,
        }


class Checker:
    """Judges requests and changes as the server's loop hands them over (``on_write``,
    ``on_change``); read by the soak's thread (``violations``, ``counts``, ``report``).

    Shared between the server's loop and the soak's thread: every field below is read and
    written under ``_lock``. Invariants: ``_ready_uids`` holds the uid of every Slice the
    store has committed in a ready state; ``_history`` holds, per object key, its last
    ``HISTORY`` states and the writes sent to it, oldest first; ``checks`` counts each
    invariant's judgements, ``log`` lists them (time, invariant, subject) and
    ``violations`` those that failed; ``foreign`` maps the name of each Slice the soak made
    for someone else to its uid."""

    def __init__(
        self,
        store: Store,
        ready_states: tuple[str, ...],
        slice_label: str,
        lease: tuple[str, str] = ("ome", "ome-controller-manager"),
        clock: Any = time.time,
    ) -> None:
        self.store = store
        self.ready_states = ready_states
        self.slice_label = slice_label
        self.lease = lease
        self.clock = clock
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._ready_uids: set[str] = set()
        self._history: dict[str, deque[JSON]] = {}
        self.checks: Counter[str] = Counter()
        self.log: list[tuple[float, str, str]] = []
        self.violations: list[Violation] = []
        self.foreign: dict[str, str] = {}
        #: Slice deletes OME sent, by the sender's identity (the released metric's check).
        self.slice_deletes: Counter[str] = Counter()
        #: Whether writes are judged at all (off while the stage is set up).
        self.enabled = True

    # -- hooks (the server's loop) ----------------------------------------------------------

    def attach(self, server: Any) -> None:
        server.on_write = self.on_write
        self.store.listeners.append(self.on_change)

    def on_change(self, change: Change) -> None:
        if change.tkey not in (PODS, NODES, SLICES, REPLICAS, LEASES):
            return
        obj = change.obj
        key = self._key(change.tkey, _meta(obj).get("namespace") or "", _meta(obj).get("name"))
        entry = {
            "t": self._now(),
            "event": change.type,
            **_summary(change.tkey, obj, self.slice_label),
        }
        with self._lock:
            self._history.setdefault(key, deque(maxlen=HISTORY)).append(entry)
            info = gke.parse(obj) if change.tkey == SLICES else None
            ready = info is not None and info.partitions and info.ready(self.ready_states)
            if info is not None and ready and change.type != "DELETED":
                self._ready_uids.add(info.uid)

    def on_write(self, seen: WriteSeen) -> None:
        identity = identity_of(seen.user_agent)
        if identity is None or not self.enabled:
            return
        plural = seen.resource.split("/", 1)[0]
        tkey = (seen.group, plural)
        key = self._key(tkey, seen.namespace, seen.name)
        with self._lock:
            self._history.setdefault(key, deque(maxlen=HISTORY)).append(
                {"t": self._now(), "request": f"{seen.verb} {seen.resource}", "by": identity}
            )
            if plural not in UNFENCED:
                self._judge_lease(seen, identity, key)
            if seen.verb in ("delete", "deletecollection"):
                self._judge_uid_precondition(seen, key)
            if tkey == SLICES:
                self._judge_slice_write(seen, key, identity)
            elif tkey == PODS and seen.resource == "pods":
                if seen.verb == "create":
                    self._judge_pod_create(seen, key)
                elif seen.verb == "delete":
                    self._judge_pod_delete(seen, key)

    # -- the invariants (called under _lock, on the loop) ------------------------------------

    def _judge_lease(self, seen: WriteSeen, identity: str, key: str) -> None:
        lease = self.store.peek(LEASES, self.lease)
        spec = (lease or {}).get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = parse_time(spec.get("renewTime"))
        duration = spec.get("leaseDurationSeconds")
        now = datetime.fromtimestamp(self.clock(), UTC)
        why = None
        if lease is None:
            why = "there is no lease"
        elif holder != identity:
            why = f"the lease is held by {holder}"
        elif renewed is None or not isinstance(duration, int):
            why = "the lease has no renewTime or leaseDurationSeconds"
        elif (now - renewed).total_seconds() > duration:
            why = (
                f"its lease expired {(now - renewed).total_seconds() - duration:.1f}s ago "
                f"(renewed {spec.get('renewTime')}, {duration}s)"
            )
        lease_key = self._key(LEASES, *self.lease)
        self._judged(
            "lease",
            key,
            None
            if why is None
            else f"{seen.verb} {seen.resource} {key} from {identity}, which does not lead: {why}",
            [key, lease_key],
        )

    def _judge_uid_precondition(self, seen: WriteSeen, key: str) -> None:
        pre = (seen.body or {}).get("preconditions") if isinstance(seen.body, dict) else None
        uid = (pre or {}).get("uid") if isinstance(pre, dict) else None
        self._judged(
            "uid-precondition",
            key,
            None if uid else f"{seen.verb} {seen.resource} {key} without a UID precondition",
            [key],
        )

    def _judge_slice_write(self, seen: WriteSeen, key: str, identity: str) -> None:
        if seen.verb == "create":
            obj = seen.body if isinstance(seen.body, dict) else {}
        else:
            obj = self.store.peek(SLICES, ("", seen.name)) or {}
            if not obj:
                return  # nothing there to write to: the request meets a NotFound
        uid = _meta(obj).get("uid")
        why = None
        if seen.name in self.foreign and (seen.verb == "create" or uid == self.foreign[seen.name]):
            why = f"{seen.verb} of the foreign Slice {seen.name}"
        elif not _labels(obj).get(OWNER_UID_LABEL):
            why = f"{seen.verb} of Slice {seen.name}, which has no {OWNER_UID_LABEL} label"
        self._judged("slice-owner-label", key, why, [key])
        if seen.verb == "delete" and why is None:
            self.slice_deletes[identity] += 1

    def _judge_pod_create(self, seen: WriteSeen, key: str) -> None:
        pod = seen.body if isinstance(seen.body, dict) else {}
        annotations = _meta(pod).get("annotations") or {}
        opted_in = str(annotations.get(ANNOTATION_TPU_SLICE_PROVISIONING, "")).lower() == "true"
        if _labels(pod).get(LABEL_MANAGED_BY) != "OMENative" or not opted_in:
            return
        name = _selector(pod, self.slice_label)
        why = None
        slice_key = self._key(SLICES, "", name) if name else ""
        if not name:
            why = f"pod {key} created without the {self.slice_label} node selector"
        else:
            obj = self.store.peek(SLICES, ("", name))
            owners = {r.get("uid") for r in _meta(pod).get("ownerReferences") or []}
            if obj is None:
                why = f"pod {key} created for Slice {name}, which does not exist"
            elif _labels(obj).get(OWNER_UID_LABEL) not in owners:
                why = f"pod {key} created on Slice {name}, which is not its replica's"
            elif str(_meta(obj).get("uid")) not in self._ready_uids:
                info = gke.parse(obj)
                why = (
                    f"pod {key} created before its Slice {name} was ever ready "
                    f"(state {info.state or '<none>'}, partitions {list(info.partitions)})"
                )
        self._judged("slice-gate", key, why, [key, slice_key] if slice_key else [key])

    def _judge_pod_delete(self, seen: WriteSeen, key: str) -> None:
        pod = self.store.peek(PODS, (seen.namespace, seen.name))
        if pod is None:
            return  # nothing to delete: a NotFound
        cause = self.pod_delete_cause(pod)
        name = _selector(pod, self.slice_label)
        objects = [key] + ([self._key(SLICES, "", name)] if name else [])
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            objects.append(self._key(NODES, "", node))
        why = None
        if cause is None:
            info = gke.parse(self.store.peek(SLICES, ("", name)) or {}) if name else None
            state = f"{info.state or '<none>'}, partitions {list(info.partitions)}" if info else "-"
            why = f"pod {key} deleted without a cause: its Slice {name or '-'} is {state}"
        self._judged("pod-delete-cause", key, why, objects)

    def pod_delete_cause(self, pod: JSON) -> str | None:
        """Why OME may delete ``pod`` now, from the store; None when nothing allows it."""
        meta = _meta(pod)
        ns = str(meta.get("namespace") or "")
        if meta.get("deletionTimestamp"):
            return "already deleting"
        if _terminal(pod):
            return "terminal"
        owner = next(
            (r for r in meta.get("ownerReferences") or [] if r.get("kind") == "InferenceReplica"),
            None,
        )
        replica = self.store.peek(REPLICAS, (ns, str((owner or {}).get("name")))) if owner else None
        if replica is None or _meta(replica).get("uid") != (owner or {}).get("uid"):
            return "its replica is gone"
        if _meta(replica).get("deletionTimestamp"):
            return "its replica is being deleted"
        spec = replica.get("spec") or {}
        labels = _labels(pod)
        try:
            index = int(str(labels.get(LABEL_INSTANCE_INDEX)))
        except ValueError:
            return None
        rows = {
            r.get("index"): r for r in (replica.get("status") or {}).get("instanceStatuses") or []
        }
        row = rows.get(index) or {}
        operation = row.get("operation") or {}
        surge_of = {
            (r.get("operation") or {}).get("surgeIndex"): r
            for r in rows.values()
            if r.get("operation")
        }
        if index >= int(spec.get("replicas") or 0) and index not in surge_of:
            return "its Instance is scaled away"
        revision = instances.revision_hash(list(spec.get("runners") or []))
        if labels.get(LABEL_REVISION_HASH) != revision:
            return "an older revision"
        if operation.get("type") in ("Restart", "Migrate", "Delete", "Update"):
            return f"its Instance's operation is {operation.get('type')}"
        if row.get("phase") in ("Restarting", "Failed", "Deleting", "Migrating", "Updating"):
            return f"its Instance is {row.get('phase')}"
        deadline = parse_time(operation.get("deadline"))
        if deadline is not None and deadline <= datetime.fromtimestamp(self.clock(), UTC):
            return "its Instance's operation is past its deadline"
        owner_uid = _meta(replica).get("uid")
        siblings = [
            p
            for p in self.store.items(PODS, ns)
            if _labels(p).get(LABEL_INSTANCE_INDEX) == labels.get(LABEL_INSTANCE_INDEX)
            and any(r.get("uid") == owner_uid for r in _meta(p).get("ownerReferences") or [])
        ]
        if any(_terminal(p) or _meta(p).get("deletionTimestamp") for p in siblings):
            return "a pod of its Instance failed or went"
        if len(siblings) < int(row.get("podCount") or 0):
            return "a pod of its Instance is missing"
        name = _selector(pod, self.slice_label)
        if name:
            lost = self.slice_lost(name, ns)
            if lost is not None:
                return f"its Slice {name} {lost}"
        return None

    def slice_lost(self, name: str, namespace: str) -> str | None:
        """H3 from the store: how Slice ``name`` is lost to the pods that select it."""
        obj = self.store.peek(SLICES, ("", name))
        if obj is None:
            return "is absent"
        info = gke.parse(obj)
        if info.terminating:
            return "is terminating"
        pods = [
            p for p in self.store.items(PODS, namespace) if _selector(p, self.slice_label) == name
        ]
        for p in pods:
            created = parse_time(_meta(p).get("creationTimestamp"))
            if info.created is not None and created is not None and info.created > created:
                return "was created after a pod of it"
        bound = [p for p in pods if (p.get("spec") or {}).get("nodeName")]
        if not bound:
            return None
        if not info.partitions:
            return "lost its partitions"
        for p in bound:
            node = self.store.peek(NODES, ("", str(p["spec"]["nodeName"])))
            if node is None or _labels(node).get(self.slice_label) != name:
                return f"moved off node {p['spec']['nodeName']}"
        return None

    # -- bookkeeping ---------------------------------------------------------------------------

    def _judged(
        self, invariant: str, subject: str, failure: str | None, objects: list[str]
    ) -> None:
        now = self._now()
        self.checks[invariant] += 1
        self.log.append((now, invariant, subject))
        if failure is not None:
            history = {k: list(self._history.get(k, ())) for k in objects}
            self.violations.append(Violation(invariant, now, failure, objects, history))

    @staticmethod
    def _key(tkey: tuple[str, str], namespace: str, name: object) -> str:
        return f"{tkey[1]}/{namespace + '/' if namespace else ''}{name}"

    def _now(self) -> float:
        return round(time.monotonic() - self.started, 3)

    # -- reading (the soak's thread) -----------------------------------------------------------

    def register_foreign(self, name: str, uid: str) -> None:
        with self._lock:
            self.foreign[name] = uid

    def snapshot(self) -> tuple[Counter[str], list[Violation]]:
        with self._lock:
            return Counter(self.checks), list(self.violations)

    def history(self, key: str) -> list[JSON]:
        with self._lock:
            return list(self._history.get(key, ()))

    def report(self) -> JSON:
        with self._lock:
            return {
                "checks": dict(self.checks),
                "violations": [v.json() for v in self.violations],
                "log": [list(entry) for entry in self.log],
            }

"""Wires the five slice reconcilers to the manager's shared informers: it observes (reads the
caches into ``plan``'s observed values), plans, and has ``act`` carry the plan out. Four
entry points share the caches and the expectations:

- ``slice_gate``, asked by the InferenceReplica pass about the Instances about to get pods: demand
  validation, slice provisioning and readiness gating, whose holds that pass settles;
- the ``tpuslice`` controller, keyed by replica: release and loss detection, woken by any
  change of the replica, its pods, its Slices, their hosts and the pods of others on those
  hosts, so that neither waits for (or depends on) the InferenceReplica pass;
- ``teardown``, the replica's teardown hook (G5);
- the ``tpuslice-orphans`` controller, keyed by owner UID: orphan collection (G6), the
  Slices of replicas that are gone, woken by such a Slice, a replica going, and a scan.

It owns no decision and writes nothing itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime

from ome.api.v1beta1 import LABEL_MANAGED_BY, MANAGED_BY_OMENATIVE
from ome.controllers.holds import Gated
from ome.controllers.inferencereplica.controller import Waiting, replica_key_of_pod
from ome.kube import JSON, pod_terminal
from ome.provider import gke
from ome.runtime.client import Client
from ome.runtime.controller import Controller, Result, gone_high
from ome.runtime.events import EventRecorder
from ome.runtime.expectations import Expectations
from ome.runtime.informer import (
    DeletedFinalStateUnknown,
    EventHandler,
    Informer,
    deleted_object,
    index_by_label,
    object_key,
)
from ome.runtime.views import ByVersion
from ome.runtime.workqueue import PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL
from ome.tpuslice import naming, placement
from ome.tpuslice.hosts import Host
from ome.tpuslice.naming import OWNER_ANNOTATION, OWNER_UID_LABEL
from ome.tpuslice.slices import SliceInfo
from ome.tpuslice.types import Config

from . import messages, orphans, releases
from .act import SliceActor
from .metrics import SliceMetrics
from .model import Pod, Replica, g3_reads, slots_of
from .plan import GateObservation, ReleaseObservation, gate_pass, release_pass
from .validation import Verdict, validate

log = logging.getLogger(__name__)

#: The index of OME's pods by the key of their replica (the InferenceReplica controller's
#: too: the same name and function).
BY_REPLICA = "replica"
#: The index of replicas by the owner hash their Slice names end with (D2).
BY_HASH = "slice-hash"
#: The index of replicas by UID, and of Slices by their owner-UID label (D4).
BY_UID = "uid"
BY_OWNER_UID = "owner"
#: The orphan controller's key for a look over every Slice in the cache (G6), queued at its
#: start and again every ``ORPHAN_SCAN_PERIOD`` seconds; every other key is an owner UID. A
#: label value never contains ``*``.
ORPHAN_SCAN = "*"
#: How often the orphan controller looks over every cached Slice, besides the Slice and
#: replica events that route orphans to it: a net for one that no event named (from the
#: cache only; no API request).
ORPHAN_SCAN_PERIOD = 600.0


def _owner_hash_of(replica: JSON) -> list[str]:
    meta = replica.get("metadata") or {}
    ns, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
    if not (isinstance(ns, str) and isinstance(name, str) and isinstance(uid, str) and uid):
        return []
    return [naming.owner_hash(ns, name, uid)]


def _now() -> datetime:
    return datetime.now(UTC)


_IDENTITY = ("name", "namespace", "uid", "resourceVersion")


def holder_view(config: Config) -> Callable[[JSON], JSON]:
    """The cache transform of the informer over every pod: only what G2 and the routing of a
    holder's changes read (identity, node, the slice selector, container resources, phase),
    so that watching all pods costs little memory. A pod that requests no chips is never a
    holder (G2, B3), and a pod's requests do not change: it is kept as its identity alone."""

    def strip(pod: JSON) -> JSON:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        try:
            chipless = placement.pod_chips(spec, config.chip_resource) <= 0
        except ValueError:
            chipless = False  # unreadable chips count as holding
        if chipless:
            return {"metadata": {k: meta[k] for k in _IDENTITY if k in meta}}
        selector = spec.get("nodeSelector") or {}
        kept_meta = {
            k: meta[k]
            for k in (
                "name",
                "namespace",
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "deletionTimestamp",
            )
            if k in meta
        }
        kept_spec: JSON = {
            "containers": [
                {"name": c.get("name"), "resources": c.get("resources") or {}}
                for c in spec.get("containers") or []
                if isinstance(c, dict)
            ]
        }
        if spec.get("nodeName"):
            kept_spec["nodeName"] = spec["nodeName"]
        if isinstance(selector, dict) and config.slice_label in selector:
            kept_spec["nodeSelector"] = {config.slice_label: selector[config.slice_label]}
        return {
            "metadata": kept_meta,
            "spec": kept_spec,
            "status": {"phase": (pod.get("status") or {}).get("phase")},
        }

    return strip


def pod_view(config: Config) -> Callable[[JSON], JSON]:
    """The cache transform of the one informer over every pod, when slices are provisioned:
    OME's pods whole (the InferenceReplica pass reads them), every other pod as
    ``holder_view`` keeps it. One watch then serves OME's pods and the holders: each pod
    event is decoded, cached and routed once, not once per informer."""
    strip = holder_view(config)

    def view(pod: JSON) -> JSON:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return pod if labels.get(LABEL_MANAGED_BY) == MANAGED_BY_OMENATIVE else strip(pod)

    return view


def host_view(node: JSON) -> JSON:
    """The cache transform of the node informer: only what the slice reconcilers read of a
    host (``Host.from_node``: its name, labels, ``spec.unschedulable`` and Ready condition;
    the provision-only and slice labels that index it), so that watching thousands of nodes
    costs little memory, and a heartbeat changes nothing but the resourceVersion."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status")
    kept_meta = {
        k: meta[k]
        for k in ("name", "uid", "resourceVersion", "labels", "deletionTimestamp")
        if k in meta
    }
    conditions = (status or {}).get("conditions") if isinstance(status, dict) else None
    ready = [
        {"type": "Ready", "status": c.get("status")}
        for c in (conditions if isinstance(conditions, list) else [])
        if isinstance(c, dict) and c.get("type") == "Ready"
    ]
    view: JSON = {"metadata": kept_meta, "status": {"conditions": ready[:1]}}
    if isinstance(spec, dict) and "unschedulable" in spec:
        view["spec"] = {"unschedulable": spec["unschedulable"]}
    return view


class SliceReconcilers:
    """The slice reconcilers of one manager, over its shared informers: ``slices`` (every
    Slice), ``nodes``, ``pods`` (OME's, indexed by replica), ``holders`` (every pod, through
    ``holder_view``; the manager's one pod informer is both, through ``pod_view``) and
    ``replicas``. ``pod_expectations`` are the InferenceReplica
    controller's, since loss detection deletes that controller's pods too.

    Observing and routing read the caches' own objects (``peek``, ``peek_by_index``) and
    only parse them into the model's frozen values (``gke.parse``, ``Pod.from_json``,
    ``Host.from_node`` keep no part of them), so they never copy and never change them.
    Slices and replicas are parsed once per version (``slice_view``, ``replica_view``): the
    same cached object is read by every pass and every event routed through it. A
    ``Replica`` keeps its raw object, which only events (as their target) and Slice bodies
    (built anew, by ``gke.body``) read."""

    def __init__(
        self,
        client: Client,
        config: Config,
        slices: Informer,
        nodes: Informer,
        pods: Informer,
        holders: Informer,
        replicas: Informer,
        recorder: EventRecorder,
        metrics: SliceMetrics,
        pod_expectations: Expectations,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.config = config
        self.slices, self.nodes, self.pods = slices, nodes, pods
        self.holders, self.replicas = holders, replicas
        self.clock = clock
        self._wake_teardown: Callable[[str], None] | None = None
        #: the orphan controller, once made (its scan queues owner UIDs on it)
        self._orphans: Controller | None = None
        #: our Slice creates and deletes the cache does not show yet, per replica key
        self.expectations = Expectations()
        #: the model's values of cached Slices and replicas, parsed once per version
        self.slice_view: ByVersion[SliceInfo] = ByVersion(gke.parse)
        self.replica_view: ByVersion[Replica] = ByVersion(Replica.from_json)
        #: C1 and B6 of a replica, once per version of it and set of accelerators with
        #: provision-only nodes: every gate pass and every release pass of a live replica
        #: asks, and the verdict is a pure function of the two
        self.verdict_view: ByVersion[Verdict] = ByVersion(
            lambda raw, provision_only: validate(self.replica_view(raw), config, provision_only)
        )
        self.actor = SliceActor(
            client, config, recorder, metrics, self.expectations, pod_expectations, clock
        )
        slices.add_indexer(BY_OWNER_UID, index_by_label(OWNER_UID_LABEL))
        nodes.add_indexer("slice", index_by_label(config.slice_label))
        nodes.add_indexer("provision-only", self._provision_only_accelerator)
        pods.add_indexer(BY_REPLICA, replica_key_of_pod)
        replicas.add_indexer(BY_HASH, _owner_hash_of)
        replicas.add_indexer(BY_UID, uid_of)

    # -- observing -----------------------------------------------------------------------

    def _provision_only_accelerator(self, node: JSON) -> list[str]:
        value = placement.provision_only_accelerator(node, self.config)
        return [value] if value else []

    def _provision_only(self) -> frozenset[str]:
        """B6.3: the accelerator label values that have provision-only nodes, from an index."""
        return frozenset(self.nodes.index_values("provision-only"))

    def _owned(self, replica: Replica) -> dict[str, SliceInfo]:
        return {
            s.name: s
            for s in (
                self.slice_view(o) for o in self.slices.peek_by_index(BY_OWNER_UID, replica.uid)
            )
            if s.owned_by(replica.uid)
        }

    def _at(self, names: Iterable[str]) -> dict[str, SliceInfo]:
        found = {}
        for name in names:
            obj = self.slices.peek(name)
            if obj is not None:
                found[name] = self.slice_view(obj)
        return found

    def _pods_of(self, replica: Replica) -> tuple[Pod, ...]:
        return tuple(
            Pod.from_json(p, self.config.slice_label, self.config.chip_resource)
            for p in self.pods.peek_by_index(BY_REPLICA, replica.key)
        )

    def _hosts(self, name: str) -> tuple[Host, ...]:
        return tuple(
            Host.from_node(n, self.config.slice_label)
            for n in self.nodes.peek_by_index("slice", name)
        )

    def _expected(
        self, replica: Replica, *views: Mapping[str, SliceInfo]
    ) -> tuple[frozenset[str], frozenset[str]]:
        cached = {n: (s.uid, s.terminating) for view in views for n, s in view.items()}
        return self.expectations.observe(replica.key, cached)

    # -- the gate (the InferenceReplica pass) ----------------------------------------------

    def slice_gate(self, raw: JSON, pending: Mapping[int, list[JSON]]) -> Gated:
        """The InferenceReplica pass's gate for TPU slices: observe, plan the gate pass and
        carry it out; the holds it answers are that pass's to settle."""
        replica = self.replica_view(raw)
        slots = slots_of(replica, pending)
        at = self._at(replica.slice_name(s) for s in slots.values())
        creating, releasing = self._expected(replica, self._owned(replica), at)
        provision_only = self._provision_only()
        obs = GateObservation(
            replica=replica,
            config=self.config,
            slots=slots,
            provision_only=provision_only,
            slices=at,
            hosts={name: self._hosts(name) for name in at},
            creating=creating,
            releasing=releasing,
            now=self.clock(),
            verdict=self.verdict_view(raw, provision_only),
        )
        outcome = self.actor.apply_gate_plan(obs, gate_pass(obs))
        selectors = {i: {self.config.slice_label: name} for i, name in outcome.confine.items()}
        return Gated(outcome.holds, selectors, outcome.failed)

    # -- the tpuslice controller: release and loss --------------------------------------------

    def reconcile(self, key: str) -> Result | None:
        raw = self.replicas.peek(key)  # only read: events name it, Slice bodies copy from it
        if raw is None:
            self.expectations.forget(key)
            return None
        replica = self.replica_view(raw)
        if replica.deleting:
            if self._wake_teardown is not None:
                self._wake_teardown(key)  # teardown's, which waits on what woke us
            return None
        owned = self._owned(replica)
        pods = self._pods_of(replica)
        named = self._at({p.slice_name for p in pods if p.slice_name})
        nodes: dict[str, Host | None] = {}
        for node in {p.node for p in pods if p.node}:
            obj = self.nodes.peek(node)
            nodes[node] = Host.from_node(obj, self.config.slice_label) if obj else None
        _, releasing = self._expected(replica, owned, named)
        provision_only = self._provision_only()
        obs = ReleaseObservation(
            replica=replica,
            config=self.config,
            provision_only=provision_only,
            owned=tuple(owned.values()),
            named=named,
            pods=pods,
            nodes=nodes,
            releasing=releasing,
            verdict=self.verdict_view(raw, provision_only),
        )
        outcome = self.actor.apply_release_plan(obs, release_pass(obs))
        if outcome.failed:
            return Result(requeue=True)
        if outcome.retry_after is not None:
            return Result(requeue_after=outcome.retry_after)
        return None

    def teardown(self, raw: JSON, past_deadline: bool) -> Waiting | None:
        """G4, G5 for a deleting replica. While the cache shows each of its Slices going (its
        delete accepted, GKE releasing it behind its finalizer), or still run on by the
        replica's own pods (before the deadline), the pass waits on the informers, whose
        events of the Slice's or the pods' going wake the replica, instead of reading live
        on each pass; otherwise (none cached, or one to delete) it acts on live reads, and is
        done only when one finds none."""
        replica = self.replica_view(raw)
        cached = self._owned(replica)
        _, releasing = self._expected(replica, cached)
        # Our deletes the cache does not show yet are as good as terminating.
        seen = [replace(s, terminating=True) if n in releasing else s for n, s in cached.items()]
        own = [] if past_deadline else self._pods_of(replica)
        steps = releases.teardown(seen, replica.uid, {}, own, past_deadline)
        if steps and all(isinstance(st, releases.Releasing | releases.InUse) for st in steps):
            texts = [releases.waiting_for(st) for st in steps]
            return Waiting(messages.teardown_failed(texts, replica.uid))
        waiting = self.actor.teardown(replica, past_deadline)
        if waiting is None:
            self.expectations.forget(replica.key)
        return waiting

    def on_teardown(self, wake: Callable[[str], None]) -> None:
        """``wake(key)`` is called when a change this controller watches (a holder or a
        node of a Slice, the Slice itself) concerns a replica being deleted: its teardown
        runs elsewhere (the InferenceReplica controller) and waits on such changes."""
        self._wake_teardown = wake

    def controller(self, workers: int = 2, gated: Iterable[Controller] = ()) -> Controller:
        """Release and loss, keyed by replica. ``gated``: the controllers whose passes ask
        this gate (the InferenceReplica controller), woken by the same Slice and host events
        at the same priorities; each event is routed once for all of them."""
        c = Controller("tpuslice", self.reconcile, workers=workers)
        c.watch(self.replicas, changed=self.release_news)
        c.watch(self.pods, keys=replica_key_of_pod, changed=self.pod_news, priority=gone_high)
        c.watch(
            self.slices,
            keys=self.slice_owner_keys,
            changed=self.slice_news,
            priority=self.slice_event_priority,
            also=gated,
            changed_here=self.release_slice_news,
        )
        c.watch(
            self.nodes,
            keys=self.node_owner_keys,
            changed=self.host_changed,
            priority=self.host_event_priority,
            also=gated,
            changed_here=self.release_host_news,
        )
        holder = holder_view(self.config)
        c.watch(
            self.holders,
            keys=self.holder_owner_keys,
            # the holders may be OME's pods whole (``pod_view``): compared as G2 reads them
            changed=lambda old, new: holder_changed(holder(old), holder(new)),
            priority=holder_event_priority,
        )
        return c

    def slice_event_priority(self, old: JSON | None, new: JSON | None) -> int:
        """High for a Slice event that unblocks or ends queued work: the Slice gone, turning
        ready or no longer ready, starting to terminate, losing partitions, or moving to a
        state off the usual way to ready (a failure, a loss, a recovery). Its creation, its
        partitions assigned and its states on the way (``messages.STATES_ON_THE_WAY``) let no
        pod go: new work, normal, behind the Slices that turn ready."""
        if new is None:
            return PRIORITY_HIGH
        if old is None:
            return PRIORITY_NORMAL
        was, now = self.slice_view(old), self.slice_view(new)
        ready = self.config.slice.ready_states
        if (
            was.ready(ready) != now.ready(ready)
            or was.terminating != now.terminating
            or not set(was.partitions) <= set(now.partitions)
            or (
                was.state and was.state != now.state and now.state not in messages.STATES_ON_THE_WAY
            )
        ):
            return PRIORITY_HIGH
        return PRIORITY_NORMAL

    def slice_news(self, old: JSON, new: JSON) -> bool:
        """Whether a Slice's update is news to the slice reconcilers and the passes they
        gate: what any of them reads of a Slice, which is all ``slice_view`` parses (E1), with
        the resourceVersion left out. An update of a field nobody parses (a finalizer,
        a status field of the provider's own) is not: the cache keeps the new version, which
        the next pass reads, and a release still deletes under the version it read."""
        was, now = self.slice_view(old), self.slice_view(new)
        return replace(was, resource_version="") != replace(now, resource_version="")

    def release_slice_news(self, old: JSON, new: JSON) -> bool:
        """Whether a Slice's update is news to release and loss themselves, a narrower
        question than ``slice_news`` (which the passes they gate read): they read a Slice's
        identity, owner, slot, shape, partitions (H3's loss), creation and deletion, never its
        state, status or message (the gate's E-rules). A Slice moving through its states
        wakes only the gated passes."""
        was, now = self.slice_view(old), self.slice_view(new)
        return _release_reads(was) != _release_reads(now)

    def host_event_priority(self, old: JSON | None, new: JSON | None) -> int:
        """High for a host event that can unblock or end work: the host gone, leaving its
        Slice (its label removed or changed), its usability changing (cordoned, Ready), or
        any change of a host of a ready Slice (a host joining it may let held pods go). A host
        joining a Slice still on its way is new work: normal."""
        label = self.config.slice_label
        if new is None:
            return PRIORITY_HIGH
        now = Host.from_node(new, label)
        if old is not None:
            was = Host.from_node(old, label)
            if (was.slice_name and was.slice_name != now.slice_name) or (
                was.unschedulable,
                was.ready,
            ) != (now.unschedulable, now.ready):
                return PRIORITY_HIGH
        found = self.slices.peek(now.slice_name) if now.slice_name else None
        if found is not None and self.slice_view(found).ready(self.config.slice.ready_states):
            return PRIORITY_HIGH
        return PRIORITY_NORMAL

    def release_news(self, old: JSON, new: JSON) -> bool:
        """Whether a replica's update is news to release and loss: anything but its status
        and resourceVersion (its spec, labels, annotations, deletion), or what G3 wants Slices
        from in its rows (``g3_reads``: index, Deleting, an operation and its surge index,
        active ordinal). The InferenceReplica pass rewording a row (held, pods created, Ready)
        or moving its operation on is not: they never read it."""
        was, now = self.replica_view(old), self.replica_view(new)
        return (
            _without_version(old) != _without_version(new)
            or old.get("spec") != new.get("spec")
            or list(map(g3_reads, was.rows)) != list(map(g3_reads, now.rows))
        )

    def pod_news(self, old: JSON, new: JSON) -> bool:
        """Whether an OME pod's update is news to release and loss: what they read of it
        (``Pod``: its node, Slice selector, deletion, phase once terminal, chips, labels),
        not its conditions (readiness), which the InferenceReplica pass reads."""
        label, chips = self.config.slice_label, self.config.chip_resource
        return Pod.from_json(old, label, chips) != Pod.from_json(new, label, chips)

    def host_changed(self, old: JSON, new: JSON) -> bool:
        """Whether a node's update is news to the slice reconcilers: its labels (the slice
        label, the pool's), or what makes it usable (F: cordoned, Ready), not a heartbeat."""
        return _labels(old) != _labels(new) or Host.from_node(
            old, self.config.slice_label
        ) != Host.from_node(new, self.config.slice_label)

    def release_host_news(self, old: JSON, new: JSON) -> bool:
        """Whether a node's update is news to release and loss themselves, a narrower question
        than ``host_changed`` (which the passes they gate read): of a host they read the
        Slice it is on, as the node of a bound pod (H3: a pod's node without its Slice's
        label has moved off), and whether its pool is provision-only (B6.3, through the
        cache's index). A host leaving its Slice (the label removed or changed) is news;
        joining one, with its topology label, cannot make a loss nor let a deferred release
        go (G2 waits on holders), and a cordon or a Ready change is the gate's (F)."""
        label = self.config.slice_label
        was, now = _labels(old), _labels(new)
        left = bool(was.get(label)) and was.get(label) != now.get(label)
        pool = placement.provision_only_accelerator(old, self.config)
        return left or pool != placement.provision_only_accelerator(new, self.config)

    # -- orphan collection (G6) -----------------------------------------------------------

    def _owner_cached(self, uid: str) -> bool:
        return bool(self.replicas.peek_by_index(BY_UID, uid))

    def collect_orphans(self, key: str) -> Result | None:
        """G6, keyed by owner UID: the Slices of that owner, if no cached replica has its
        UID, each released (confirmed live first) once it has been an orphan in the caches
        for ``orphans.ORPHAN_GRACE``; until then, looked at again when the first falls due.
        The scan key queues every owner UID with an orphan in the cache."""
        if key == ORPHAN_SCAN:
            found = {uid for obj in self.slices.peek_list() for uid in self.orphan_keys(obj)}
            if self._orphans is not None:
                for uid in sorted(found):
                    self._orphans.enqueue(uid, PRIORITY_LOW)
            return Result(requeue_after=ORPHAN_SCAN_PERIOD)
        owned = [self.slice_view(o) for o in self.slices.peek_by_index(BY_OWNER_UID, key)]
        cached = self._owner_cached(key)
        _, releasing = self.expectations.observe(
            key, {s.name: (s.uid, s.terminating) for s in owned}
        )
        candidates = [
            s
            for s in owned
            if s.owner_uid == key and s.name not in releasing and orphans.is_candidate(s, cached)
        ]
        plan = orphans.orphan_pass(
            candidates, self.actor.ledger.sightings(key), self.clock(), orphans.ORPHAN_GRACE
        )
        self.actor.ledger.sighted(key, plan.sightings)
        waits = [] if plan.look_again is None else [plan.look_again]
        if plan.due:
            outcome = self.actor.collect_orphans(key, plan.due)
            if outcome.retry_after is not None:
                waits.append(outcome.retry_after)
        if not candidates and not owned:
            self.expectations.forget(key)
        return Result(requeue_after=min(waits)) if waits else None

    def orphan_keys(self, slice_obj: JSON) -> list[str]:
        """A Slice routes to the orphan controller by its owner UID when the cache shows it
        as an orphan (G6): an owner-UID label no cached replica has, and not going. Only once
        the replica cache has synced: before, every Slice would look like one (the scan at
        the controller's start looks then)."""
        if not self.replicas.has_synced():
            return []
        found = self.slice_view(slice_obj)
        if not found.owner_uid or not orphans.is_candidate(
            found, self._owner_cached(found.owner_uid)
        ):
            return []
        return [found.owner_uid]

    def orphan_controller(self) -> Controller:
        """G6, keyed by owner UID, with one worker: woken by a Slice that the cache shows as
        an orphan, by a replica going that owns Slices, and by its scan, queued at start."""
        c = Controller("tpuslice-orphans", self.collect_orphans, workers=1)
        self._orphans = c
        c.watch(self.slices, keys=self.orphan_keys)
        c.reads(self.replicas, self.pods, self.holders, self.nodes)

        def gone(obj: JSON | DeletedFinalStateUnknown) -> None:
            for uid in uid_of(deleted_object(obj)):
                if self.slices.peek_by_index(BY_OWNER_UID, uid):
                    c.enqueue(uid)

        self.replicas.add_handler(EventHandler(on_delete=gone))
        c.enqueue(ORPHAN_SCAN, PRIORITY_LOW)
        return c

    # -- routing events to replica keys ---------------------------------------------------

    def slice_owner_keys(self, slice_obj: JSON) -> list[str]:
        """A Slice routes to the replica its ``ome.io/slice-owner`` annotation names, and to
        every replica that gives its name (``owners_by_name``), so that a foreign Slice at one
        of our names, which has no annotation of ours, still wakes the replica whose slot it
        takes: its replacement, its deletion."""
        name = (slice_obj.get("metadata") or {}).get("name")
        hash8 = name.rsplit("-", 1)[-1] if isinstance(name, str) else ""
        by_name = owners_by_name(
            slice_obj, self.replicas.peek_by_index(BY_HASH, hash8), self.replica_view
        )
        return sorted({*annotated_owner_keys(slice_obj), *by_name})

    def node_owner_keys(self, node: JSON) -> list[str]:
        """A node routes to the owner of the Slice its slice label names."""
        name = ((node.get("metadata") or {}).get("labels") or {}).get(self.config.slice_label)
        found = self.slices.peek(name) if isinstance(name, str) and name else None
        return self.slice_owner_keys(found) if found is not None else []

    def holder_owner_keys(self, pod: JSON) -> list[str]:
        """A pod that requests chips routes to the owner of the Slice on whose host it is
        bound: its going may let a deferred release go (G2)."""
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return []
        try:
            if placement.pod_chips(pod.get("spec") or {}, self.config.chip_resource) <= 0:
                return []
        except ValueError:
            pass  # unreadable chips count as holding
        host = self.nodes.peek(node)
        return self.node_owner_keys(host) if host is not None else []


def uid_of(obj: JSON) -> list[str]:
    """The object's UID, as an index value (none without one)."""
    uid = (obj.get("metadata") or {}).get("uid")
    return [uid] if isinstance(uid, str) and uid else []


def _release_reads(s: SliceInfo) -> SliceInfo:
    """A Slice as release and loss read it: without its resourceVersion (a delete reads it
    from the cache when it is sent), state, status, message and last transition."""
    return replace(s, resource_version="", state="", status="", message="", last_transition=None)


def _without_version(obj: JSON) -> JSON:
    """An object's metadata but its resourceVersion (which every write changes)."""
    return {k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"}


def _labels(obj: JSON) -> JSON:
    return (obj.get("metadata") or {}).get("labels") or {}


def holder_event_priority(old: JSON | None, new: JSON | None) -> int:
    """A holder's going or change (bound elsewhere, terminating, finished) may let a deferred
    release go (G2): high; a pod newly bound is new work."""
    return PRIORITY_NORMAL if old is None else PRIORITY_HIGH


def holder_changed(old: JSON, new: JSON) -> bool:
    """Whether a pod's update, as ``holder_view`` keeps it, is news to G2: anything but its
    resourceVersion (a status change the view does not keep) and its phase, of which G2
    reads only whether it is terminal (a holder is a pod not Succeeded nor Failed): a
    holder's kubelet starting it, Pending to Running, wakes no one."""

    def view(pod: JSON) -> JSON:
        meta = {k: v for k, v in (pod.get("metadata") or {}).items() if k != "resourceVersion"}
        return {**pod, "metadata": meta, "status": pod_terminal(pod)}

    return view(old) != view(new)


def owners_by_name(
    slice_obj: JSON,
    replicas: Iterable[JSON],
    view: Callable[[JSON], Replica] = Replica.from_json,
) -> list[str]:
    """The keys of the ``replicas`` that give this Slice's name to one of their slots (D2 read
    backwards: the name's suffix is a slot and the replica's owner hash)."""
    name = (slice_obj.get("metadata") or {}).get("name")
    if not isinstance(name, str):
        return []
    return [object_key(r) for r in replicas if view(r).slot_of(name) is not None]


def annotated_owner_keys(slice_obj: JSON) -> list[str]:
    """The replica key a Slice's ``ome.io/slice-owner`` annotation names (none if absent)."""
    owner = ((slice_obj.get("metadata") or {}).get("annotations") or {}).get(OWNER_ANNOTATION)
    return [owner] if isinstance(owner, str) and owner.count("/") == 1 else []

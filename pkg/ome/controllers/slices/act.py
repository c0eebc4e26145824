"""Carries the slice plans out: Slice creates, recycles, releases and loss deletes, with their
events and metrics. Before anything destructive it reads live what the decision depended on
(the Slice, its hosts, the pods that pin or hold it, the replica) and asks the same pure
function again with what it read; every delete carries the UID it means, and the
resourceVersion when the decision read the Slice's state. Writes in flight are expected
(``Expectations``), so a pass planned from a lagging cache never repeats one.

It decides nothing itself. API errors are routine: each is logged in one line, counted where
K1 says so, and reported to the caller as a failure to retry; they never escape.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

from cachetools import TTLCache
from kubernetes.client.exceptions import ApiException

from ome.api.v1beta1 import INFERENCE_REPLICAS, LABEL_INFERENCE_REPLICA
from ome.backoff import capped_exponential
from ome.controllers.holds import Hold
from ome.controllers.inferencereplica.controller import FAILED_TEARDOWN_RETRY, Waiting
from ome.kube import JSON
from ome.provider import gke
from ome.runtime.client import Client, api_error, describe_error
from ome.runtime.events import WARNING, EventRecorder
from ome.runtime.expectations import Expectations
from ome.runtime.rest import NODES, PODS, status_of
from ome.tpuslice.hosts import Host
from ome.tpuslice.naming import OWNER_UID_LABEL, Slot
from ome.tpuslice.placement import Demand
from ome.tpuslice.slices import SliceInfo
from ome.tpuslice.types import Config

from . import losses, messages, orphans, readiness, releases
from .metrics import SliceMetrics
from .model import Event, Pod, Replica, release_deferred, withheld
from .plan import GateObservation, GatePlan, ReleaseObservation, ReleasePlan
from .validation import Verdict, validate

log = logging.getLogger(__name__)

#: The longest wait between two tries of a release that did not go (deferred, or refused by
#: the API) when no event wakes its replica first.
MAX_RETRY_WAIT = 60.0


class Ledger:
    """What the act layer remembers between passes, shared by the workers of both
    controllers: when each Slice we created was created (for the create-to-first-ready
    histogram, observed once), and how often in a row each Slice's release did not go (for
    the retry backoff).

    Invariants, under ``_lock``: ``_born[name]`` exists from our create until the Slice is
    first seen ready (or a day passes); ``_retries[name]`` counts the consecutive releases of
    it that were deferred or refused, and is dropped once it is deleted (or a day passes);
    ``_noticed`` holds the (replica, reason, generation) notices already given;
    ``_sighted[owner UID]`` maps each Slice UID of that owner's orphans to its first sighting
    (G6), as the last orphan pass of that owner left it, and is dropped when none is left;
    ``_kept[name]`` is the last text logged of an orphan kept by its pods, so that it is
    logged once per change, not on every try.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._born: TTLCache[str, datetime] = TTLCache(maxsize=100_000, ttl=86_400)
        self._retries: TTLCache[str, int] = TTLCache(maxsize=100_000, ttl=86_400)
        self._noticed: TTLCache[tuple[str, str, int], bool] = TTLCache(maxsize=100_000, ttl=86_400)
        self._sighted: TTLCache[str, dict[str, datetime]] = TTLCache(maxsize=100_000, ttl=86_400)
        self._kept: TTLCache[str, str] = TTLCache(maxsize=100_000, ttl=86_400)

    def born(self, name: str, at: datetime) -> None:
        with self._lock:
            self._born[name] = at

    def first_ready(self, name: str) -> datetime | None:
        """When we created ``name``, the first time it is seen ready; None after that."""
        with self._lock:
            return self._born.pop(name, None)

    def retry(self, name: str) -> float:
        """Count a release of ``name`` that did not go (deferred, or refused by the API); the
        wait before the next try: 1, 2, 4 ... 60 s."""
        with self._lock:
            count = self._retries.get(name, 0) + 1
            self._retries[name] = count
        return capped_exponential(count, 1.0, MAX_RETRY_WAIT)

    def released(self, name: str) -> None:
        with self._lock:
            self._retries.pop(name, None)
            self._kept.pop(name, None)

    def sightings(self, owner_uid: str) -> dict[str, datetime]:
        """G6: the first sighting of each orphan of ``owner_uid``, by Slice UID (a copy)."""
        with self._lock:
            return dict(self._sighted.get(owner_uid) or {})

    def sighted(self, owner_uid: str, sightings: Mapping[str, datetime]) -> None:
        """Remember what the last orphan pass of ``owner_uid`` saw (nothing: forget it)."""
        with self._lock:
            if sightings:
                self._sighted[owner_uid] = dict(sightings)
            else:
                self._sighted.pop(owner_uid, None)

    def first_kept(self, name: str, text: str) -> bool:
        """True when ``text`` is not what was last logged of orphan ``name`` kept by pods."""
        with self._lock:
            if self._kept.get(name) == text:
                return False
            self._kept[name] = text
            return True

    def first_notice(self, key: str, reason: str, generation: int) -> bool:
        """True the first time ``reason`` is noticed for this generation of replica ``key``."""
        with self._lock:
            if (key, reason, generation) in self._noticed:
                return False
            self._noticed[(key, reason, generation)] = True
            return True


@dataclass
class GateOutcome:
    """The gate pass carried out: the holds as they stand after the writes (a create that met
    a foreign Slice holds on the conflict), the Slice each ready Instance's pods are confined
    to, and whether a write failed (retry with backoff)."""

    holds: dict[int, Hold]
    confine: dict[int, str]
    failed: bool = False


@dataclass
class ReleaseOutcome:
    """The release pass carried out: when to look again while a release is deferred (None:
    nothing deferred), and whether a write failed."""

    retry_after: float | None = None
    failed: bool = False

    def retry_in(self, seconds: float) -> None:
        self.retry_after = seconds if self.retry_after is None else min(self.retry_after, seconds)


@dataclass
class _Reads:
    """Live reads made once per pass and shared by its steps."""

    replica_pods: list[Pod] | None = None
    host_pods: dict[str, list[Pod]] = field(default_factory=dict)
    hosts: dict[str, list[Host]] = field(default_factory=dict)


class SliceActor:
    """Writes through ``client``; records events with ``recorder`` (on the InferenceService,
    the replica when it has none, or the replica itself); counts with ``metrics``."""

    def __init__(
        self,
        client: Client,
        config: Config,
        recorder: EventRecorder,
        metrics: SliceMetrics,
        slices: Expectations,
        pods: Expectations,
        clock: Callable[[], datetime],
    ) -> None:
        self.client = client
        self.config = config
        self.recorder = recorder
        self.metrics = metrics
        self.slices = slices
        self.pods = pods
        self.clock = clock
        self.ledger = Ledger()

    # -- events --------------------------------------------------------------------------

    def record(self, replica: Replica, events: Iterable[Event]) -> None:
        """Record each Warning on its object; a lasting condition's as ``lasting()`` does."""
        for event in events:
            target = replica.raw if event.on == "replica" else event_target(replica.raw)
            if event.lasting:
                self.recorder.lasting(
                    target,
                    WARNING,
                    event.reason,
                    event.message,
                    subject=event.lasting,
                    gist=event.gist or None,
                )
            else:
                self.recorder.event(target, WARNING, event.reason, event.message)

    # -- live reads ----------------------------------------------------------------------

    def _slice(self, name: str) -> SliceInfo | None:
        live = self.client.live_get_or_none(gke.SLICES, name)
        return gke.parse(live) if live is not None else None

    def _hosts(self, reads: _Reads, name: str) -> list[Host]:
        """The nodes labelled with the Slice's name, read live."""
        if name not in reads.hosts:
            label = self.config.slice_label
            reads.hosts[name] = [
                Host.from_node(n, label)
                for n in self.client.live_list(NODES, label_selector=f"{label}={name}")
            ]
        return reads.hosts[name]

    def _host_pods(self, reads: _Reads, name: str) -> list[Pod]:
        """G2: the pods bound to the Slice's nodes, read live."""
        if name not in reads.host_pods:
            pods: list[Pod] = []
            for host in self._hosts(reads, name):
                pods.extend(
                    self._pod(p)
                    for p in self.client.live_list(
                        PODS, field_selector=f"spec.nodeName={host.name}"
                    )
                )
            reads.host_pods[name] = pods
        return reads.host_pods[name]

    def _replica_pods(self, reads: _Reads, replica: Replica) -> list[Pod]:
        if reads.replica_pods is None:
            reads.replica_pods = [
                self._pod(p)
                for p in self.client.live_list(
                    PODS,
                    replica.namespace,
                    label_selector=f"{LABEL_INFERENCE_REPLICA}={replica.name}",
                )
            ]
        return reads.replica_pods

    def _pod(self, obj: JSON) -> Pod:
        return Pod.from_json(obj, self.config.slice_label, self.config.chip_resource)

    # -- the gate pass -------------------------------------------------------------------

    def apply_gate_plan(self, obs: GateObservation, plan: GatePlan) -> GateOutcome:
        """Record the plan's Warnings and its notices (once per generation), create its
        Slices, recycle its timed-out or broken ones, each confirmed on live values first, and
        observe how long each Slice we created took to be first seen ready."""
        replica = obs.replica
        out = GateOutcome(dict(plan.holds), dict(plan.confine))
        self.record(replica, plan.events)
        for notice in plan.notices:
            if self.ledger.first_notice(replica.key, notice.reason, replica.generation):
                log.warning("%s", notice.message, extra={"replica": replica.key})
                self.record(replica, [notice])
        demand = plan.verdict.demand
        for create in plan.creates:
            assert demand is not None  # creates are planned only for a demand
            out.failed |= not self._create(obs, demand, create.index, create.slot, create.name, out)
        reads = _Reads()
        for recycle in plan.recycles:
            assert demand is not None  # recycles are planned only for a demand
            out.failed |= not attempt(
                f"recycling TPU slice {recycle.slice.name}",
                partial(self._recycle, obs, demand, recycle, reads, out),
            )
        for found in plan.ready:
            born = self.ledger.first_ready(found.name)
            if born is not None:
                self.metrics.duration.labels(found.slice_type, found.topology).observe(
                    max(0.0, (self.clock() - born).total_seconds())
                )
        return out

    def _create(
        self,
        obs: GateObservation,
        demand: Demand,
        index: int,
        slot: Slot,
        name: str,
        out: GateOutcome,
    ) -> bool:
        """E3: create the slot's Slice; on AlreadyExists, read it live and gate the slot on
        it (a foreign one holds on the conflict at once). False when the create failed."""
        replica, config = obs.replica, obs.config
        series = (demand.accelerator.slice_type, str(demand.topology))
        if not self.slices.reserve_create(replica.key, name):
            return True
        body = gke.body(replica.raw, slot, demand, config, replica.annotations)
        try:
            created = self.client.create(gke.SLICES, body)
        except Exception as e:
            self.slices.create_failed(replica.key, name)
            if not api_error(e):
                raise
            if isinstance(e, ApiException) and e.status == 409:
                return self._already_exists(obs, index, name, demand, series, out)
            reason = (
                status_of(e).get("reason") if isinstance(e, ApiException) else ""
            ) or "Unknown"
            self.metrics.create_failures.labels(*series, reason).inc()
            log.error("creating TPU slice %s failed: %s", name, describe_error(e))
            return False
        self.slices.created(replica.key, name, str(created["metadata"].get("uid", "")))
        self.ledger.born(name, self.clock())
        self.metrics.created.labels(*series).inc()
        log.info("created TPU slice %s", name)
        return True

    def _already_exists(
        self,
        obs: GateObservation,
        index: int,
        name: str,
        demand: Demand,
        series: tuple[str, str],
        out: GateOutcome,
    ) -> bool:
        try:
            live = self._slice(name)
        except Exception as e:
            if not api_error(e):
                raise
            log.error("reading TPU slice %s failed: %s", name, describe_error(e))
            return False
        if live is None:
            return False  # gone again meanwhile: the next pass creates it
        if not live.owned_by(obs.replica.uid):
            self.metrics.create_failures.labels(*series, "OwnershipConflict").inc()
        verdict = readiness.judge_slot(
            index,
            live,
            obs.hosts.get(name, ()),
            obs.replica,
            demand,
            obs.config,
            obs.now,
        )
        if verdict.event is not None:
            self.record(obs.replica, [verdict.event])
        if verdict.hold is not None:
            out.holds[index] = verdict.hold
        elif verdict.ready:
            out.holds.pop(index, None)
            out.confine[index] = name
        return True

    def _recycle(
        self,
        obs: GateObservation,
        demand: Demand,
        recycle: readiness.Recycle,
        reads: _Reads,
        out: GateOutcome,
    ) -> None:
        """E5, E6: confirm on live values (the Slice, its hosts, the pods that pin it, the
        pods on its hosts), then release it or defer; the event goes with either."""
        replica = obs.replica
        name = recycle.slice.name
        live = self._slice(name)
        if live is None or live.uid != recycle.slice.uid:
            return  # gone or replaced: the slot is provisioned afresh
        verdict = readiness.judge_slot(
            recycle.index, live, self._hosts(reads, name), replica, demand, obs.config, self.clock()
        )
        if verdict.hold is not None:
            out.holds[recycle.index] = verdict.hold
        if verdict.recycle is None or verdict.recycle.reason != recycle.reason:
            return  # what the cache showed is no longer so: the next pass decides afresh
        if releases.pinned(name, self._replica_pods(reads, replica)):
            return  # a pod of the component still runs on it: never recycled under it
        step = releases.release_or_defer(live, self._host_pods(reads, name), with_version=True)
        again = verdict.recycle
        self.record(
            replica, [withheld(again.reason, replica, again.index, again.text, gist=again.gist)]
        )
        self._release(replica, step)

    # -- releasing -----------------------------------------------------------------------

    def _release(self, replica: Replica, step: releases.Delete | releases.Defer) -> float | None:
        """Delete a Slice under its UID (and resourceVersion), or record the deferral (G2).
        Returns when to try a deferred release again; raises API errors."""
        found = step.slice
        if isinstance(step, releases.Defer):
            self.metrics.release_deferred.labels(found.slice_type, found.topology).inc()
            self.record(replica, [release_deferred(found.name, step.holders)])
            return self.ledger.retry(found.name)
        if self._delete(replica.key, step):
            log.info("released TPU slice %s", found.name)
        return None

    def _delete(self, key: str, step: releases.Delete) -> bool:
        """G1: delete the Slice under its UID (and resourceVersion), expected under ``key``
        until the cache shows it going; counted as released. False when nothing was sent (our
        delete is already on its way) or the Slice changed since it was read (409: decided
        again on the next pass). Raises other API errors."""
        found = step.slice
        if not self.slices.reserve_delete(key, found.name, found.uid):
            return False
        try:
            self.client.delete(
                gke.SLICES,
                found.name,
                uid=found.uid,
                resource_version=step.resource_version or None,
            )
        except ApiException as e:
            self.slices.delete_failed(key, found.name)
            if e.status == 409:
                return False
            raise
        except Exception:
            self.slices.delete_failed(key, found.name)
            raise
        self.ledger.released(found.name)
        self.metrics.released.labels(found.slice_type, found.topology).inc()
        return True

    # -- the release pass ----------------------------------------------------------------

    def apply_release_plan(self, obs: ReleaseObservation, plan: ReleasePlan) -> ReleaseOutcome:
        """Release the unwanted Slices, then delete the pods of lost ones, each confirmed on
        live values first. Loss detection runs whatever happened to the releases."""
        out = ReleaseOutcome()
        reads = _Reads()
        if plan.releases:
            out.failed |= not attempt(
                f"releasing TPU slices of {obs.replica.key}",
                partial(self._sweep, obs, plan, reads, out),
            )
        for name in plan.suspects:
            out.failed |= not attempt(
                f"checking TPU slice {name} for loss",
                partial(self._loss, obs, name, reads, plan.verdict),
            )
        return out

    def _sweep(
        self, obs: ReleaseObservation, plan: ReleasePlan, reads: _Reads, out: ReleaseOutcome
    ) -> None:
        raw = self.client.live_get_or_none(
            INFERENCE_REPLICAS, obs.replica.name, obs.replica.namespace
        )
        if raw is None:
            return  # the replica is gone: its Slices are garbage for teardown, not for us
        replica = Replica.from_json(raw)
        if replica.uid != obs.replica.uid:
            return
        verdict = validate(replica, obs.config, obs.provision_only)
        pods = self._replica_pods(reads, replica)
        for cached in plan.releases:
            live = self._slice(cached.name)
            # The hosts' pods are read before the decision needs them: a Slice the sweep
            # planned is nearly always still unwanted, and one gone needs none.
            host_pods = self._host_pods(reads, cached.name) if live is not None else []
            step = releases.confirm_sweep(cached, live, replica, verdict, pods, host_pods)
            if step is None:
                continue
            wait = self._release(replica, step)
            if wait is not None:
                out.retry_in(wait)

    def _loss(self, obs: ReleaseObservation, name: str, reads: _Reads, verdict: Verdict) -> None:
        """H2 to H4: confirm with live reads (the replica's pods, the Slice, the bound pods'
        nodes), then delete each affected pod under its UID."""
        replica = obs.replica
        group = losses.candidates(replica, self._replica_pods(reads, replica)).get(name, [])
        if not group:
            return
        found = self._slice(name)
        nodes: dict[str, Host | None] = {}
        for node in sorted({p.node for p in group if p.node}):
            live = self.client.live_get_or_none(NODES, node)
            nodes[node] = (
                Host.from_node(live, self.config.slice_label) if live is not None else None
            )
        lost = losses.judge(name, found, group, nodes, replica.uid)
        if lost is None:
            return
        deleted: list[str] = []
        for pod in lost.pods:
            if not self.pods.reserve_delete(replica.key, pod.name, pod.uid):
                continue
            try:
                answer = self.client.delete(PODS, pod.name, pod.namespace, uid=pod.uid)
            except ApiException as e:
                self.pods.delete_failed(replica.key, pod.name)
                if e.status == 409:
                    continue  # a replacement holds the name: never deleted
                raise
            except Exception:
                self.pods.delete_failed(replica.key, pod.name)
                raise
            if answer is None:
                continue  # H4: NotFound, gone already: not deleted by us, so not reported
            deleted.append(pod.name)
        if not deleted:
            return
        slice_type, topology = (
            (lost.found.slice_type, lost.found.topology) if lost.found is not None else ("", "")
        )
        if (not slice_type or not topology) and verdict.demand is not None:
            slice_type = slice_type or verdict.demand.accelerator.slice_type
            topology = topology or str(verdict.demand.topology)
        self.metrics.lost.labels(slice_type, topology).inc()
        self.record(
            replica, [Event(messages.SLICE_LOST, messages.lost(name, lost.why, sorted(deleted)))]
        )

    # -- orphan collection -----------------------------------------------------------------

    def collect_orphans(self, owner_uid: str, due: Sequence[SliceInfo]) -> ReleaseOutcome:
        """G6: confirm each orphan that is due on live values (the Slice, its owner, the pods
        on its hosts), then release it, defer it (G2) or keep it while pods confined to it
        run; the retry backoff of each that did not go."""
        out = ReleaseOutcome()
        reads = _Reads()
        for cached in due:
            if not attempt(
                f"releasing orphaned TPU slice {cached.name}",
                partial(self._orphan, owner_uid, cached, reads, out),
            ):
                out.retry_in(self.ledger.retry(cached.name))
        return out

    def _owner_found(self, found: SliceInfo) -> bool:
        """G6: whether an InferenceReplica with the Slice's owner UID exists, read live: the
        one its annotation names when the name's hash vouches for it (D2), else every one."""
        if orphans.names_its_owner(found):
            namespace, _, name = found.owner.partition("/")
            live = self.client.live_get_or_none(INFERENCE_REPLICAS, name, namespace)
            found_uids = [] if live is None else [str(live["metadata"].get("uid", ""))]
        else:
            found_uids = [
                str(r["metadata"].get("uid", "")) for r in self.client.live_list(INFERENCE_REPLICAS)
            ]
        return orphans.owner_exists(found, found_uids)

    def _orphan(
        self, owner_uid: str, cached: SliceInfo, reads: _Reads, out: ReleaseOutcome
    ) -> None:
        live = self._slice(cached.name)
        if live is None or live.uid != cached.uid or live.terminating:
            return  # gone, replaced or going: nothing to do
        owner_found = self._owner_found(live)
        host_pods = [] if owner_found else self._host_pods(reads, live.name)
        step = orphans.confirm(cached, live, owner_found, host_pods)
        if step is None:
            return
        if isinstance(step, releases.InUse):
            text = messages.orphan_in_use(live.name, live.owner_uid, step.pods)
            if self.ledger.first_kept(live.name, text):
                log.info("%s", text)
            out.retry_in(self.ledger.retry(live.name))
            return
        if isinstance(step, releases.Defer):
            self.metrics.release_deferred.labels(live.slice_type, live.topology).inc()
            self.recorder.lasting(
                gke.reference(live),
                WARNING,
                messages.SLICE_RELEASE_DEFERRED,
                messages.release_deferred(live.name, step.holders),
                subject=live.name,
            )
            out.retry_in(self.ledger.retry(live.name))
            return
        if not self._delete(owner_uid, step):
            return
        self.metrics.orphans_released.labels(live.slice_type, live.topology).inc()
        log.info("%s", messages.orphan_released(live.name, live.owner_uid, live.owner))

    # -- teardown ------------------------------------------------------------------------

    def teardown(self, replica: Replica, past_deadline: bool) -> Waiting | None:
        """G4, G5: release every Slice of a deleted replica, from live reads; None once a read
        finds none, else what is still in the way (the replica's own pods still on a Slice,
        the holders, the API error, or a delete GKE has not finished), as the
        TeardownDeadlineExceeded text, and when to try again: the release's backoff after a
        deferral or a failure, else None (the pods' or the Slice's going wakes the replica).
        Past the deadline the replica's own pods no longer keep a Slice."""
        reads = _Reads()
        errors: list[str] = []
        retry: float | None = None
        try:
            owned = [
                gke.parse(s)
                for s in self.client.live_list(
                    gke.SLICES, label_selector=f"{OWNER_UID_LABEL}={replica.uid}"
                )
            ]
        except Exception as e:
            if not api_error(e):
                raise
            text = f"listing TPU slices failed: {describe_error(e)}"
            return Waiting(messages.teardown_failed([text], replica.uid), FAILED_TEARDOWN_RETRY)
        try:
            own = [] if past_deadline or not owned else self._replica_pods(reads, replica)
        except Exception as e:
            if not api_error(e):
                raise
            text = f"listing the pods of {replica.key} failed: {describe_error(e)}"
            return Waiting(messages.teardown_failed([text], replica.uid), FAILED_TEARDOWN_RETRY)
        for s in owned:
            if not s.owned_by(replica.uid):
                continue
            wait: float | None = None
            try:
                # Its hosts' pods matter only for a Slice that is to go now.
                kept = s.terminating or (not past_deadline and releases.runs_on(s.name, own))
                host_pods = {} if kept else {s.name: self._host_pods(reads, s.name)}
                (step,) = releases.teardown([s], replica.uid, host_pods, own, past_deadline)
                if isinstance(step, releases.Delete | releases.Defer):
                    wait = self._release(replica, step)
                errors.append(releases.waiting_for(step))
            except Exception as e:
                if not api_error(e):
                    raise
                errors.append(messages.release_failed(s.name, describe_error(e)))
                wait = self.ledger.retry(s.name)
            if wait is not None:
                retry = wait if retry is None else min(retry, wait)
        if not errors:
            return None
        return Waiting(messages.teardown_failed(errors, replica.uid), retry)


def attempt(what: str, step: Callable[[], object]) -> bool:
    """Run one step of a plan. An API error is routine: logged in one line (``<what> failed:
    <error>``) and answered False, so the pass is retried with backoff; anything else is a
    bug and raises, to be logged with its traceback."""
    try:
        step()
    except Exception as e:
        if not api_error(e):
            raise
        log.error("%s failed: %s", what, describe_error(e))
        return False
    return True


def event_target(replica: JSON) -> JSON:
    """I: events go to the InferenceService that owns the replica, or the replica itself."""
    meta = replica.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "InferenceService":
            return {
                "apiVersion": ref.get("apiVersion", "ome.io/v1beta1"),
                "kind": "InferenceService",
                "metadata": {
                    "name": ref.get("name", ""),
                    "namespace": meta.get("namespace", ""),
                    "uid": ref.get("uid", ""),
                },
            }
    return replica

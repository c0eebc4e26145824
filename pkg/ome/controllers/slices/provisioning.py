"""TPU slice provisioning, plugged into the InferenceReplica pass through its hooks:
demand validation, slot provisioning, readiness gating with host vetting and the ready
timeout, confinement of pods to their Slice, and release (sweep, deferral, teardown).

Decisions come from the pure core (``ome.tpuslice``); this module observes (informer
caches, live reads before anything destructive) and acts through ``ome.provider.gke``.
It never modifies a Slice, and never touches one without our owner-UID label.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from cachetools import TTLCache
from kubernetes.client.exceptions import ApiException

from ome.api.v1beta1 import LABEL_INSTANCE_INDEX, LABEL_POD_ORDINAL
from ome.controllers.inferencereplica.controller import Hooks
from ome.controllers.inferencereplica.instances import Hold, multi_pod
from ome.durations import format_go_duration
from ome.provider import gke
from ome.runtime.client import Client
from ome.runtime.events import EventRecorder
from ome.runtime.informer import Informer, index_by_label
from ome.runtime.rest import JSON, NODES, PODS, status_of
from ome.tpuslice import demand as dem
from ome.tpuslice import naming
from ome.tpuslice.types import Config

from .metrics import SliceMetrics

log = logging.getLogger(__name__)

HOLD = "CapacityProvisioning"
DEMAND_HOLD = "SliceDemandInvalid"
#: How long a Slice we created may stay unseen by the cache before we stop trusting our
#: own create (client-go's expectations).
EXPECTATION_TTL = 60.0


def _now() -> datetime:
    return datetime.now(UTC)


class SliceProvisioning:
    def __init__(
        self,
        client: Client,
        config: Config,
        slices: Informer,
        nodes: Informer,
        pods: Informer,
        recorder: EventRecorder,
        metrics: SliceMetrics,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.client = client
        self.config = config
        self.slices = slices
        self.nodes = nodes
        self.pods = pods
        self.recorder = recorder
        self.metrics = metrics
        self.clock = clock
        slices.add_indexer("owner", index_by_label(naming.OWNER_UID_LABEL))
        nodes.add_indexer("slice", index_by_label(config.slice_label))
        nodes.add_indexer("provision-only", self._provision_only_accelerator)
        pods.add_indexer("slice-of-replica", _replica_of_pod)
        #: slice name -> uid of Slices we created that the cache does not show yet
        self._created: TTLCache[str, str] = TTLCache(maxsize=100_000, ttl=EXPECTATION_TTL)
        self._lock = threading.Lock()
        #: slice name -> when we created it (monotonic wall time), for the duration metric
        self._born: TTLCache[str, datetime] = TTLCache(maxsize=100_000, ttl=86_400)

    def _provision_only_accelerator(self, node: JSON) -> list[str]:
        value = dem.provision_only_accelerator(node, self.config)
        return [value] if value else []

    def node_owner_keys(self, node: JSON) -> list[str]:
        """A node routes to the owner of the Slice its slice label names."""
        name = ((node.get("metadata") or {}).get("labels") or {}).get(self.config.slice_label)
        found = self.slices.get(name) if name else None
        return slice_owner_keys(found) if found is not None else []

    def hooks(self) -> Hooks:
        return Hooks(
            gates=[self.gate],
            pod_mutators=[self.confine],
            after_pass=[self.sweep],
            teardown=[self.teardown],
        )

    # -- observing -----------------------------------------------------------------------

    def _provision_only(self) -> set[str]:
        """Accelerator label values that have provision-only nodes (B6.3), from an index."""
        return set(self.nodes.index_values("provision-only"))

    def _demand(self, replica: JSON) -> dem.Demand | None:
        """The replica's demand: None when it wants no Slice. DemandError when invalid."""
        runners = list((replica.get("spec") or {}).get("runners") or [])
        if not dem.opted_in(runners):
            return None
        return dem.demand(dem.instance_pod_specs(runners), self.config, self._provision_only())

    @staticmethod
    def _opted(replica: JSON) -> bool:
        return dem.opted_in(list((replica.get("spec") or {}).get("runners") or []))

    def _slot(self, replica: JSON, index: int, pods: list[JSON]) -> naming.Slot:
        multi = multi_pod(list(replica["spec"].get("runners") or []))
        ordinal = 0
        if pods:
            ordinal = int((pods[0]["metadata"].get("labels") or {}).get(LABEL_POD_ORDINAL, "0"))
        return naming.slot_for(index, ordinal, multi)

    def _name(self, replica: JSON, slot: naming.Slot) -> str:
        meta = replica["metadata"]
        return naming.slice_name(
            meta["name"], slot, naming.owner_hash(meta["namespace"], meta["name"], meta["uid"])
        )

    def _owner_object(self, replica: JSON) -> JSON:
        """Events go to the InferenceService (the replica when it has none): behaviour.md I."""
        meta = replica["metadata"]
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "InferenceService":
                return {
                    "apiVersion": ref.get("apiVersion", "ome.io/v1beta1"),
                    "kind": "InferenceService",
                    "metadata": {
                        "name": ref["name"],
                        "namespace": meta["namespace"],
                        "uid": ref.get("uid", ""),
                    },
                }
        return replica

    def _warn(self, replica: JSON, reason: str, index: int, text: str) -> None:
        component = (replica.get("spec") or {}).get("component", "")
        self.recorder.event(
            self._owner_object(replica),
            "Warning",
            reason,
            f"OMENative component={component} instance={index} withheld: {text}",
        )

    # -- the gate: provision, then hold until ready --------------------------------------

    def gate(self, replica: JSON, asked: dict[int, list[JSON]]) -> dict[int, Hold]:
        try:
            want = self._demand(replica)
        except dem.DemandError as e:
            for index in asked:
                self._warn(replica, "SliceDemandInvalid", index, str(e))
            return {index: Hold(DEMAND_HOLD, str(e)) for index in asked}
        if want is None:
            return {}
        holds: dict[int, Hold] = {}
        for index, pods in sorted(asked.items()):
            reason = self._gate_slot(replica, index, pods, want)
            if reason is not None:
                holds[index] = Hold(HOLD, reason)
        return holds

    def _gate_slot(
        self, replica: JSON, index: int, pods: list[JSON], want: dem.Demand
    ) -> str | None:
        slot = self._slot(replica, index, pods)
        name = self._name(replica, slot)
        uid = replica["metadata"]["uid"]
        found = self.slices.get(name)
        if found is not None:
            self._created.pop(name, None)  # the cache shows it: the expectation is met
        else:
            if name in self._created:
                return f"slice {name} is waiting for partition assignment"
            found = self._create(replica, slot, name, want, pods)
            if found is None:
                return f"slice is owned by another object: {name}"
        wait = naming.slot_wait_reason(found, uid, want, self.config.slice.ready_states)
        if wait is not None:
            kind, reason = wait
            if kind == "conflict":
                self._warn(replica, "SliceOwnershipConflict", index, reason)
            elif kind == "not-ready":
                self._maybe_time_out(replica, index, found, want, reason)
            return reason
        self._observe_ready(name, want)
        return self._vet_hosts(replica, index, found, want, pods)

    def _create(
        self, replica: JSON, slot: naming.Slot, name: str, want: dem.Demand, pods: list[JSON]
    ) -> JSON | None:
        annotations = {}
        template_annotations = (pods[0]["metadata"].get("annotations") or {}) if pods else {}
        for key in self.config.slice.pod_annotations:
            if key in template_annotations:
                annotations[key] = template_annotations[key]
        body = naming.slice_body(replica, slot, want, self.config, annotations)
        try:
            created = gke.create(self.client, body)
        except ApiException as e:
            labels = (want.accelerator.slice_type, str(want.topology))
            if e.status != 409:
                self.metrics.create_failures.labels(
                    *labels, status_of(e).get("reason") or "Unknown"
                ).inc()
                raise
            live = gke.live_get(self.client, name)  # AlreadyExists: read live, check the owner
            if live is not None and naming.owns(live, replica["metadata"]["uid"]):
                return live
            self.metrics.create_failures.labels(*labels, "OwnershipConflict").inc()
            return None
        self._created[name] = created["metadata"]["uid"]
        self._born[name] = self.clock()
        self.metrics.created.labels(want.accelerator.slice_type, str(want.topology)).inc()
        log.info("created TPU slice %s", name)
        return created

    def _observe_ready(self, name: str, want: dem.Demand) -> None:
        born = self._born.pop(name, None)
        if born is not None:
            self.metrics.duration.labels(want.accelerator.slice_type, str(want.topology)).observe(
                (self.clock() - born).total_seconds()
            )

    def _maybe_time_out(
        self, replica: JSON, index: int, found: JSON, want: dem.Demand, reason: str
    ) -> None:
        """E5: a Slice with partitions that stays out of a ready state past the timeout is
        released (once no pod holds it) and provisioned again."""
        timeout = self.config.slice.ready_timeout
        state = naming.slice_state(found)
        if timeout is None or not state.partitions:
            return
        since_text = state.last_transition or found["metadata"].get("creationTimestamp")
        since = (
            datetime.fromisoformat(str(since_text).replace("Z", "+00:00")) if since_text else None
        )
        if since is None:
            return
        waited = self.clock() - since
        if waited <= timeout:
            return
        whole = timedelta(seconds=round(waited.total_seconds()))  # 11m3s, as the guide prints
        if self._release(replica, found, want):
            self._warn(
                replica,
                "SliceReadyTimeout",
                index,
                f"{reason} for {format_go_duration(whole)}, longer than the "
                f"{format_go_duration(timeout)} ready timeout; it is released and provisioned "
                "again once no pod holds it",
            )

    def _vet_hosts(
        self, replica: JSON, index: int, found: JSON, want: dem.Demand, pods: list[JSON]
    ) -> str | None:
        """E6: the hosts of a ready Slice must all be visible and usable by its pods."""
        name = found["metadata"]["name"]
        hosts = self.nodes.by_index("slice", name)
        state = naming.slice_state(found).state
        if len(hosts) < want.hosts:
            return (
                f"slice {name} is {state}, but only {len(hosts)} of its {want.hosts} hosts "
                "are visible yet"
            )
        tolerations = list(((pods[0].get("spec") or {}).get("tolerations") or []) if pods else [])
        problems = sorted(p for node in hosts for p in naming.host_problems(node, tolerations))
        if not problems:
            return None
        reason = (
            f"slice {name} is {state}, but {', '.join(problems)}; it is released and provisioned "
            "again once no pod holds it"
        )
        if self._release(replica, found, want):
            self._warn(replica, "SliceHostUnavailable", index, reason)
        return reason

    # -- confinement ---------------------------------------------------------------------

    def confine(self, replica: JSON, pod: JSON) -> JSON:
        """Each pod of an opted-in Instance selects its Slice by the slice-name label."""
        try:
            want = self._demand(replica)
        except dem.DemandError:
            return pod
        if want is None:
            return pod
        labels = pod["metadata"].get("labels") or {}
        index = int(labels.get(LABEL_INSTANCE_INDEX, "0"))
        slot = self._slot(replica, index, [pod])
        selector = pod["spec"].setdefault("nodeSelector", {})
        selector[self.config.slice_label] = self._name(replica, slot)
        return pod

    # -- release -------------------------------------------------------------------------

    def _holders(self, name: str) -> list[str]:
        """G2: pods of other workloads holding chips on the Slice's hosts, by live reads."""
        holders: list[str] = []
        nodes = self.client.live_list(NODES, label_selector=f"{self.config.slice_label}={name}")
        for node in nodes:
            for pod in self.client.live_list(
                PODS, field_selector=f"spec.nodeName={node['metadata']['name']}"
            ):
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                if ((pod.get("spec") or {}).get("nodeSelector") or {}).get(
                    self.config.slice_label
                ) == name:
                    continue
                if dem.pod_chips(pod.get("spec") or {}, self.config.chip_resource) > 0:
                    holders.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
        return sorted(holders)

    def _release(self, replica: JSON, found: JSON, want: dem.Demand | None) -> bool:
        """Delete our Slice (UID precondition) unless others hold chips on its hosts."""
        name, uid = found["metadata"]["name"], found["metadata"]["uid"]
        if found["metadata"].get("deletionTimestamp"):
            return True
        labels = self._labels(found, want)
        holders = self._holders(name)
        if holders:
            self.metrics.release_deferred.labels(*labels).inc()
            self.recorder.event(
                replica,
                "Warning",
                "SliceReleaseDeferred",
                f"TPU slice {name} is kept: pods of other workloads hold chips on its hosts "
                f"({', '.join(holders)}); it is released once they are gone",
            )
            return False
        if gke.release(self.client, name, uid):
            self.metrics.released.labels(*labels).inc()
            self._created.pop(name, None)
            log.info("released TPU slice %s", name)
            return True
        return False

    @staticmethod
    def _labels(found: JSON, want: dem.Demand | None) -> tuple[str, str]:
        spec = found.get("spec") or {}
        return (str(spec.get("type", "")), str(spec.get("topology", "")))

    def _wanted(self, replica: JSON, rows: list[JSON]) -> set[str]:
        """G3: the Slice names the replica's Instances still want."""
        multi = multi_pod(list(replica["spec"].get("runners") or []))
        wanted: set[str] = set()
        for row in rows:
            if row.get("phase") == "Deleting":
                continue
            index, op = int(row["index"]), row.get("operation")
            slots: list[naming.Slot] = []
            if multi:
                slots.append(naming.slot_for(index, 0, True))
                if op and op.get("surgeIndex") is not None:
                    slots.append(naming.slot_for(int(op["surgeIndex"]), 0, True))
            elif op:
                slots += [naming.slot_for(index, 0, False), naming.slot_for(index, 1, False)]
            else:
                slots.append(naming.slot_for(index, int(row.get("activeOrdinal", 0)), False))
            wanted.update(self._name(replica, s) for s in slots)
        return wanted

    def sweep(self, replica: JSON, rows: list[JSON]) -> None:
        """After a pass: detect lost Slices, then release our Slices no Instance wants,
        unless a pod of the replica still names one (read live) or others hold chips on its
        hosts."""
        uid = replica["metadata"]["uid"]
        self.detect_loss(replica)
        try:
            want = self._demand(replica)
        except dem.DemandError:
            return  # an invalid demand changes nothing about what exists
        wanted = self._wanted(replica, rows) if want is not None else set()
        mine = [s for s in self.slices.by_index("owner", uid) if naming.owns(s, uid)]
        for found in mine:
            name = found["metadata"]["name"]
            if found["metadata"].get("deletionTimestamp"):
                continue
            shape_ok = want is not None and (found.get("spec") or {}).get("topology") == str(
                want.topology
            )
            if name in wanted and shape_ok:
                continue
            pinned = self.client.live_list(
                PODS,
                replica["metadata"]["namespace"],
                label_selector=f"ome.io/inferencereplica={replica['metadata']['name']}",
            )
            if any(
                ((p.get("spec") or {}).get("nodeSelector") or {}).get(self.config.slice_label)
                == name
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                for p in pinned
            ):
                continue
            self._release(replica, found, want)

    # -- loss --------------------------------------------------------------------------

    def detect_loss(self, replica: JSON) -> None:
        """H: pods whose Slice was deleted, re-created, lost its partitions or moved off
        their nodes are deleted (UID preconditions) so that their Instance is rebuilt.
        Suspicion comes from the caches; every fact is confirmed by a live read first."""
        meta = replica["metadata"]
        uid, ns = meta["uid"], meta["namespace"]
        cached = self.pods.by_index("slice-of-replica", f"{ns}/{meta['name']}")
        if not any(self._suspicious(p) for p in cached):
            return  # the cache shows nothing lost: no live reads
        pods = self.client.live_list(
            PODS, ns, label_selector=f"ome.io/inferencereplica={meta['name']}"
        )
        by_slice: dict[str, list[JSON]] = {}
        hash8 = naming.owner_hash(ns, meta["name"], uid)
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get(
                "phase"
            ) in ("Succeeded", "Failed"):
                continue
            name = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(self.config.slice_label)
            if name and name.endswith(hash8):  # H1: a name this replica gives
                by_slice.setdefault(name, []).append(pod)
        for name, group in sorted(by_slice.items()):
            found = gke.live_get(self.client, name)
            if found is not None and not naming.owns(found, uid):
                continue  # not ours: leave it alone
            why, affected = self._loss(found, group)
            if not why:
                continue
            deleted = []
            for pod in affected:
                try:
                    self.client.delete(
                        PODS, pod["metadata"]["name"], ns, uid=pod["metadata"]["uid"]
                    )
                    deleted.append(pod["metadata"]["name"])
                except ApiException as e:
                    if e.status not in (404, 409):
                        raise
            if not deleted:
                continue
            spec = (found or {}).get("spec") or {}
            slice_type, topology = self._series(replica)
            self.metrics.lost.labels(
                str(spec.get("type") or slice_type), str(spec.get("topology") or topology)
            ).inc()
            self.recorder.event(
                self._owner_object(replica),
                "Warning",
                "SliceLost",
                f"TPU slice {name} {why} while pods {', '.join(sorted(deleted))} ran on it; "
                "they are deleted so that their Instance is rebuilt",
            )

    def _suspicious(self, pod: JSON) -> bool:
        """From the caches alone: might this pod's Slice be lost?"""
        name = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(self.config.slice_label)
        if not name or pod["metadata"].get("deletionTimestamp"):
            return False
        found = self.slices.get(name)
        if found is None or found["metadata"].get("deletionTimestamp"):
            return True
        if str(pod["metadata"].get("creationTimestamp", "")) < str(
            found["metadata"].get("creationTimestamp", "")
        ):
            return True
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            return False
        if not naming.slice_state(found).partitions:
            return True
        node = self.nodes.get(node_name)
        return (
            node is None
            or (node["metadata"].get("labels") or {}).get(self.config.slice_label) != name
        )

    def _loss(self, found: JSON | None, pods: list[JSON]) -> tuple[str, list[JSON]]:
        """H3 in order: what happened to the Slice, and which pods it takes."""
        if found is None or found["metadata"].get("deletionTimestamp"):
            return "was deleted", pods
        created = str(found["metadata"].get("creationTimestamp", ""))
        younger = [p for p in pods if str(p["metadata"].get("creationTimestamp", "")) < created]
        if younger:
            return "was deleted", younger
        bound = [p for p in pods if (p.get("spec") or {}).get("nodeName")]
        if not bound:
            return "", []
        if not naming.slice_state(found).partitions:
            return "lost its partitions", bound
        moved = []
        for node_name in sorted({p["spec"]["nodeName"] for p in bound}):
            node = self.client.live_get_or_none(NODES, node_name)
            if (
                node is None
                or (node["metadata"].get("labels") or {}).get(self.config.slice_label)
                != found["metadata"]["name"]
            ):
                moved.append(node_name)
        if moved:
            where = f"node {moved[0]}" if len(moved) == 1 else f"nodes {', '.join(moved)}"
            return f"moved off {where}", bound
        return "", []

    def _series(self, replica: JSON) -> tuple[str, str]:
        """(slice_type, topology) of the replica's demand, for metric labels."""
        try:
            want = self._demand(replica)
        except dem.DemandError:
            return ("", "")
        return (want.accelerator.slice_type, str(want.topology)) if want else ("", "")

    def teardown(self, replica: JSON) -> str | None:
        """G4/G5: a deleted replica's Slices are released; done when a live read finds none."""
        uid = replica["metadata"]["uid"]
        live = self.client.live_list(gke.SLICES, label_selector=f"{naming.OWNER_UID_LABEL}={uid}")
        for found in live:
            if naming.owns(found, uid):
                self._release(replica, found, None)
        remaining = [
            s
            for s in self.client.live_list(
                gke.SLICES, label_selector=f"{naming.OWNER_UID_LABEL}={uid}"
            )
        ]
        if not remaining:
            return None
        return (
            f"releasing owned TPU slices failed: {len(remaining)} remain; delete the slices "
            f"labeled {naming.OWNER_UID_LABEL}={uid} by hand"
        )


def slice_owner_keys(slice_obj: JSON) -> list[str]:
    """The replica key a Slice's ``ome.io/slice-owner`` annotation names (none if absent)."""
    owner = ((slice_obj.get("metadata") or {}).get("annotations") or {}).get(
        naming.OWNER_ANNOTATION
    )
    return [owner] if owner and owner.count("/") == 1 else []


def _replica_of_pod(pod: JSON) -> list[str]:
    meta = pod.get("metadata") or {}
    name = (meta.get("labels") or {}).get("ome.io/inferencereplica")
    return [f"{meta.get('namespace', '')}/{name}"] if name else []

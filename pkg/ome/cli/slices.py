"""``kubectl ome slices``: one row per Instance slot of the opted-in components, joining what an
operator would otherwise join by hand: the slot's Slice (D1, D2, E1), its hosts
(nodes with the slice label, E6), the pods confined to it, and what the slot waits for.

The WAITING text is the controller's own: the hold recorded in the Instance's
``lastFailure`` (E7) when its operation holds on the slot, else what the reconcilers' pure
rules say of the slot now (E3 to E6 for a wanted slot, G2 for one being released), built by
the same functions, so it reads as the event or ``lastFailure`` does.

Pure: plain JSON in, rows out; ``now`` is given.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from ome.api.v1beta1 import LABEL_INFERENCE_SERVICE
from ome.controllers.holds import hold_reason
from ome.controllers.slices import messages, readiness, releases
from ome.controllers.slices.model import Pod, Replica, wanted_slots
from ome.controllers.slices.validation import Verdict, validate
from ome.kube import JSON, rfc3339
from ome.provider import gke
from ome.tpuslice import placement
from ome.tpuslice.hosts import Host
from ome.tpuslice.naming import Slot, slot_for
from ome.tpuslice.slices import SliceInfo
from ome.tpuslice.types import Config

from .render import NONE, age, table


@dataclass(frozen=True)
class SlotRow:
    """One Instance slot: its service, component and slot; its Slice (``slice`` is the name
    the slot gives, whether or not a Slice is there) and that Slice's hosts, ready over
    needed; the pods confined to it; what it waits for (``""``: nothing); in wide output, the
    holders that defer its release (G2) and the owner UID its labels carry."""

    namespace: str
    service: str
    component: str
    instance: int
    ordinal: int
    slice: str
    exists: bool
    slice_type: str
    topology: str
    state: str
    partitions: tuple[str, ...]
    hosts_ready: int
    hosts_needed: int | None
    created: datetime | None
    pods: tuple[tuple[str, str], ...]  # (name, phase)
    waiting: str
    holders: tuple[str, ...]
    owner_uid: str

    def cells(self, now: datetime, wide: bool, namespaces: bool) -> list[str]:
        needed = str(self.hosts_needed) if self.hosts_needed is not None else "?"
        cells = [
            self.service,
            self.component,
            str(self.instance),
            str(self.ordinal),
            self.slice,
            self.slice_type or NONE,
            self.topology or NONE,
            self.state or NONE,
            ",".join(self.partitions) or NONE,
            f"{self.hosts_ready}/{needed}",
            age(self.created, now),
            ",".join(f"{n}({p})" for n, p in self.pods) or NONE,
            self.waiting,
        ]
        if wide:
            cells += [",".join(self.holders) or NONE, self.owner_uid or NONE]
        return ([self.namespace] if namespaces else []) + cells

    def document(self) -> JSON:
        return {
            "namespace": self.namespace,
            "inferenceService": self.service,
            "component": self.component,
            "instance": self.instance,
            "ordinal": self.ordinal,
            "slice": self.slice,
            "exists": self.exists,
            "type": self.slice_type,
            "topology": self.topology,
            "state": self.state,
            "partitions": list(self.partitions),
            "hosts": {"ready": self.hosts_ready, "needed": self.hosts_needed},
            "created": rfc3339(self.created) if self.created else None,
            "pods": [{"name": n, "phase": p} for n, p in self.pods],
            "waiting": self.waiting,
            "holders": list(self.holders),
            "ownerUID": self.owner_uid,
        }


HEADER = (
    "SERVICE",
    "COMPONENT",
    "INSTANCE",
    "ORDINAL",
    "SLICE",
    "TYPE",
    "TOPOLOGY",
    "STATE",
    "PARTITIONS",
    "HOSTS",
    "AGE",
    "PODS",
    "WAITING",
)
WIDE = ("HOLDERS", "OWNER-UID")


def render(rows: Iterable[SlotRow], now: datetime, wide: bool, namespaces: bool) -> str:
    header = (["NAMESPACE"] if namespaces else []) + list(HEADER) + (list(WIDE) if wide else [])
    return table(header, (r.cells(now, wide, namespaces) for r in rows))


def _map(value: object) -> JSON:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class World:
    """What the view joins: every Slice and node, each replica's pods (by ``namespace/name``)
    and the pods bound to each node (every namespace's: holders, G2)."""

    slices: tuple[JSON, ...]
    nodes: tuple[JSON, ...]
    pods: Mapping[str, list[JSON]]
    host_pods: Mapping[str, list[JSON]]


def _held(replica: Replica) -> dict[Slot, str]:
    """E7: the slots the Instances' operations hold on, with the hold's reason, read back from
    each row's ``lastFailure`` (the first missing pod names the slot, D1)."""
    pattern = re.compile(rf"{re.escape(replica.name)}-(\d+)-(?:default|leader|worker)-(\d+)")
    held: dict[Slot, str] = {}
    for row in replica.rows:
        op, failure = _map(row.get("operation")), _map(row.get("lastFailure"))
        token = op.get("waiting")
        if not token or failure.get("reason") != token:
            continue
        reason = hold_reason(failure)
        match = pattern.fullmatch(str(failure.get("podName")))
        if reason is None or match is None:
            continue
        held[slot_for(int(match[1]), int(match[2]), replica.multi_pod)] = reason
    return held


def _shown(replica: Replica, wanted: frozenset[Slot]) -> set[Slot]:
    """The wanted slots that get a row even without a Slice: G3 keeps both ordinals of a
    single-pod Instance with an operation, but only its active one has pods or is about to,
    until the surge pod is held (``_held``) or its Slice exists."""
    if replica.multi_pod:
        return set(wanted)
    active = {
        row["index"]: row["activeOrdinal"]
        for row in replica.rows
        if row.get("operation")
        and type(row.get("index")) is int
        and type(row.get("activeOrdinal")) is int
    }
    return {s for s in wanted if active.get(s.instance, s.ordinal) == s.ordinal}


def _service_of(replica: Replica) -> str:
    meta = _map(replica.raw.get("metadata"))
    name = _map(meta.get("labels")).get(LABEL_INFERENCE_SERVICE)
    if isinstance(name, str) and name:
        return name
    owners = [_map(o) for o in meta.get("ownerReferences") or []]
    return next((str(o["name"]) for o in owners if o.get("kind") == "InferenceService"), "")


def rows(replicas: Iterable[JSON], world: World, config: Config, now: datetime) -> list[SlotRow]:
    """The rows of every opted-in replica that provisions Slices (or owns some), by
    namespace, service, component and slot."""
    provision_only = frozenset(
        a for a in (placement.provision_only_accelerator(n, config) for n in world.nodes) if a
    )
    parsed = [gke.parse(s) for s in world.slices]
    by_name = {s.name: s for s in parsed}
    hosts: dict[str, list[Host]] = {}
    for node in world.nodes:
        host = Host.from_node(node, config.slice_label)
        if host.slice_name:
            hosts.setdefault(host.slice_name, []).append(host)
    out: list[SlotRow] = []
    for raw in replicas:
        replica = Replica.from_json(raw)
        if not replica.opted_in:
            continue
        verdict = validate(replica, config, provision_only)
        owned = {s.slot: s for s in parsed if s.owned_by(replica.uid) and s.slot is not None}
        if verdict.demand is None and not verdict.error and not owned:
            continue  # a static pool, or no topology: no Slice (B6)
        wanted = wanted_slots(replica) if verdict.demand or verdict.error else frozenset()
        pods = [
            Pod.from_json(p, config.slice_label, config.chip_resource)
            for p in world.pods.get(replica.key, [])
        ]
        phases = {
            p.name: _phase(raw_pod)
            for p, raw_pod in zip(pods, world.pods.get(replica.key, []), strict=True)
        }
        held = _held(replica)
        for slot in sorted(_shown(replica, wanted) | set(owned) | set(held)):
            name = replica.slice_name(slot)
            found = owned.get(slot) or by_name.get(name)
            slot_hosts = hosts.get(found.name, []) if found else []
            host_pods = [
                Pod.from_json(p, config.slice_label, config.chip_resource)
                for h in slot_hosts
                for p in world.host_pods.get(h.name, [])
            ]
            confined = [p for p in pods if found and p.slice_name == found.name]
            out.append(
                SlotRow(
                    namespace=replica.namespace,
                    service=_service_of(replica),
                    component=replica.component,
                    instance=slot.instance,
                    ordinal=slot.ordinal,
                    slice=found.name if found else name,
                    exists=found is not None,
                    slice_type=found.slice_type if found else "",
                    topology=found.topology if found else "",
                    state=found.state if found else "",
                    partitions=found.partitions if found else (),
                    hosts_ready=sum(
                        1 for h in slot_hosts if h.ready == "True" and not h.unschedulable
                    ),
                    hosts_needed=verdict.demand.hosts if verdict.demand else None,
                    created=found.created if found else None,
                    pods=tuple(sorted((p.name, phases[p.name]) for p in confined)),
                    waiting=waiting(
                        slot,
                        name,
                        found,
                        replica,
                        verdict,
                        wanted,
                        held,
                        confined,
                        slot_hosts,
                        host_pods,
                        config,
                        now,
                    ),
                    holders=tuple(releases.holders(found.name, host_pods)) if found else (),
                    owner_uid=found.owner_uid if found else "",
                )
            )
    return sorted(out, key=lambda r: (r.namespace, r.service, r.component, r.instance, r.ordinal))


def _phase(pod: JSON) -> str:
    if _map(pod.get("metadata")).get("deletionTimestamp"):
        return "Terminating"
    phase = _map(pod.get("status")).get("phase")
    return phase if isinstance(phase, str) and phase else "Pending"


def waiting(
    slot: Slot,
    name: str,
    found: SliceInfo | None,
    replica: Replica,
    verdict: Verdict,
    wanted: frozenset[Slot],
    held: Mapping[Slot, str],
    confined: list[Pod],
    slot_hosts: list[Host],
    host_pods: list[Pod],
    config: Config,
    now: datetime,
) -> str:
    """What the slot waits for, in the controller's words, checked in order: the hold the
    Instance's operation records for it (E7); no Slice yet (E3: it waits for its partition,
    or the demand's error, B6); a Slice not ours (E3) or terminating (G1); one no Instance
    wants, which waits for the pods of other workloads on its hosts (G2) or goes; pods of
    the component running on it (nothing: the controller never gates them); else the gate's
    verdict now (E3 to E6). ``""`` when nothing is awaited."""
    if slot in held:
        return held[slot]
    if found is None:
        if slot not in wanted:
            return ""
        return verdict.error or messages.waiting_for_partitions(name)
    if not found.owned_by(replica.uid):
        return messages.owned_by_another(found.name)
    if found.terminating:
        return messages.being_released(found.name)
    if not releases.keep(found, replica, verdict.demand, wanted):
        if releases.pinned(found.name, confined):
            return ""
        holders = releases.holders(found.name, host_pods)
        if holders:
            return messages.release_deferred(found.name, holders)
        return messages.being_released(found.name)
    if any(not p.terminal for p in confined) or verdict.demand is None:
        return ""
    verdict_now = readiness.judge_slot(
        slot.instance, found, slot_hosts, replica, verdict.demand, config, now
    )
    return verdict_now.hold.message if verdict_now.hold else ""

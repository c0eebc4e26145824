"""The observed values the slice reconcilers decide from: an InferenceReplica, its pods and the
events they record, read once from JSON into frozen dataclasses, and the slots a replica's
Instances want (G3). Slices are ``SliceInfo`` and hosts ``Host``, from the pure core.

Pure: no I/O, no client, no provider and no clock. Parsing never raises on a malformed
object: a field of the wrong type reads as absent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Literal

from ome.api.v1beta1 import LABEL_INFERENCE_REPLICA, LABEL_INSTANCE_INDEX, LABEL_POD_ORDINAL
from ome.controllers.inferencereplica.instances import multi_pod
from ome.kube import JSON, parse_time, pod_terminal
from ome.tpuslice import naming, placement
from ome.tpuslice.naming import Slot
from ome.tpuslice.shape import ShapeError

from . import messages


def _map(value: object) -> JSON:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _index(value: object) -> int | None:
    """A non-negative JSON integer (``true`` is not one), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass(frozen=True, eq=False)
class Replica:
    """An InferenceReplica as the slice reconcilers read it.

    ``pod_specs`` and ``tolerations`` are per pod of one Instance (B7); ``annotations`` are the
    pod-template annotations of its first ``default`` or ``leader`` runner (copied onto Slices
    by ``slice.podAnnotations``); ``rows`` are ``status.instanceStatuses`` as stored; ``raw`` is
    the object itself, for events and the Slice body. Compared by identity: it holds JSON.
    """

    namespace: str
    name: str
    uid: str
    component: str
    resource_version: str
    generation: int
    replicas: int
    multi_pod: bool
    opted_in: bool
    deleting: bool
    pod_specs: tuple[JSON, ...]
    tolerations: tuple[tuple[JSON, ...], ...]
    annotations: Mapping[str, str]
    rows: tuple[JSON, ...]
    raw: JSON = field(repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def hash8(self) -> str:
        """D2: the owner hash every Slice name of this replica ends with."""
        return naming.owner_hash(self.namespace, self.name, self.uid)

    def slice_name(self, slot: Slot) -> str:
        """D2: the name of this replica's Slice for ``slot``."""
        return naming.slice_name(self.name, slot, self.hash8)

    def slot_of(self, slice_name: str) -> Slot | None:
        """The slot this replica gives ``slice_name`` to, or None when it gives it to none."""
        return naming.slot_of_name(slice_name, self.name, self.hash8)

    @staticmethod
    def from_json(obj: JSON) -> Replica:
        meta, spec, status = (
            _map(obj.get("metadata")),
            _map(obj.get("spec")),
            _map(obj.get("status")),
        )
        runners = [_map(r) for r in _list(spec.get("runners"))]
        specs = tuple(placement.instance_pod_specs(runners))
        first = next((r for r in runners if r.get("name", "default") in ("default", "leader")), {})
        template_meta = _map(_map(first.get("template")).get("metadata"))
        annotations = {
            k: v for k, v in _map(template_meta.get("annotations")).items() if isinstance(v, str)
        }
        return Replica(
            namespace=_str(meta.get("namespace")),
            name=_str(meta.get("name")),
            uid=_str(meta.get("uid")),
            component=_str(spec.get("component")),
            resource_version=_str(meta.get("resourceVersion")),
            generation=_index(meta.get("generation")) or 0,
            replicas=_index(spec.get("replicas")) or 0,
            multi_pod=multi_pod(runners),
            opted_in=placement.opted_in(runners),
            deleting=bool(meta.get("deletionTimestamp")),
            pod_specs=specs,
            # A toleration that is not an object tolerates nothing (read as {}, it would
            # tolerate every taint).
            tolerations=tuple(
                tuple(t for t in _list(s.get("tolerations")) if isinstance(t, dict)) for s in specs
            ),
            annotations=MappingProxyType(annotations),
            rows=tuple(_map(r) for r in _list(status.get("instanceStatuses"))),
            raw=obj,
        )


@dataclass(frozen=True)
class Pod:
    """A pod as release and loss read it: where it is bound, which Slice its node selector
    names (``""`` for none), and whether it holds chips (B3; a quantity that does not parse
    counts as holding, so that a Slice is never released under a pod we cannot read)."""

    namespace: str
    name: str
    uid: str
    node: str = ""
    slice_name: str = ""
    created: datetime | None = None
    terminating: bool = False
    terminal: bool = False
    chips: int = 0
    replica: str = ""
    instance: int | None = None
    ordinal: int | None = None

    @property
    def ref(self) -> str:
        """``namespace/name``, as G2 names holders."""
        return f"{self.namespace}/{self.name}"

    @staticmethod
    def from_json(obj: JSON, slice_label: str, chip_resource: str) -> Pod:
        meta, spec = _map(obj.get("metadata")), _map(obj.get("spec"))
        labels = _map(meta.get("labels"))
        try:
            chips = placement.pod_chips(spec, chip_resource)
        except ShapeError:
            chips = 1
        return Pod(
            namespace=_str(meta.get("namespace")),
            name=_str(meta.get("name")),
            uid=_str(meta.get("uid")),
            node=_str(spec.get("nodeName")),
            slice_name=_str(_map(spec.get("nodeSelector")).get(slice_label)),
            created=parse_time(meta.get("creationTimestamp")),
            terminating=bool(meta.get("deletionTimestamp")),
            terminal=pod_terminal(obj),
            chips=chips,
            replica=_str(labels.get(LABEL_INFERENCE_REPLICA)),
            instance=naming.parse_index(labels.get(LABEL_INSTANCE_INDEX)),
            ordinal=naming.parse_index(labels.get(LABEL_POD_ORDINAL)),
        )


@dataclass(frozen=True)
class Event:
    """A Warning to record (I): on the InferenceService (the replica when it has none), or on
    the replica itself (G2, G5).

    ``lasting`` names the condition that a hold or a deferral reports on every pass while it
    lasts (``component=<c> instance=<i>``, or the Slice's name): its Warning is recorded when
    the condition starts or its ``gist`` (the message, unless given) changes, and then
    refreshed about once a minute, so that it neither floods the object's events nor uses up
    the budget of the Warnings that follow. Empty for an occurrence, recorded each time
    (SliceLost)."""

    reason: str
    message: str
    on: Literal["service", "replica"] = "service"
    lasting: str = ""
    gist: str = ""


def withheld(reason: str, replica: Replica, index: int, text: str, gist: str = "") -> Event:
    """I: the Warning of Instance ``index`` withheld for ``text``, on the InferenceService: a
    condition that lasts as long as the hold (``gist``: what of ``text`` is news if it
    changes; all of it unless given)."""
    return Event(
        reason,
        messages.withheld(replica.component, index, text),
        lasting=messages.instance_key(replica.component, index),
        gist=gist,
    )


def release_deferred(name: str, holders: Iterable[str]) -> Event:
    """G2: the SliceReleaseDeferred Warning on the replica, lasting while the Slice is kept."""
    return Event(
        messages.SLICE_RELEASE_DEFERRED,
        messages.release_deferred(name, holders),
        on="replica",
        lasting=name,
    )


def g3_reads(row: JSON) -> tuple[int | None, bool, bool, int | None, int | None]:
    """All that ``wanted_slots`` reads of an Instance's row (it reads the rows through this
    alone): its index, whether it is Deleting, whether it has an operation and the
    operation's surge index, and its active ordinal. Not the rest of the operation (its step,
    progress time, waiting text, retries), which the InferenceReplica pass moves on at each
    status write, so rows with equal reads want the same slots."""
    op = _map(row.get("operation"))
    return (
        _index(row.get("index")),
        row.get("phase") == "Deleting",
        bool(op),
        _index(op.get("surgeIndex")),
        _index(row.get("activeOrdinal")),
    )


def wanted_slots(replica: Replica) -> frozenset[Slot]:
    """G3: the slots the replica's Instances want a Slice for, from its stored rows. Multi-pod:
    slot (i, 0), plus the surge index's; single-pod with an operation: both ordinals; without,
    the active ordinal. An Instance ``spec.replicas`` wants that has no row yet wants ordinal
    0 at the index the Instance plan gives it: ``spec.replicas`` counts Instances, not
    indexes (a multi-pod surge moves an Instance to its surge index), and the missing ones
    go to the lowest indexes that are neither a row's nor a surge target's. A Deleting row
    wants none, and a deleting replica wants nothing."""
    if replica.deleting:
        return frozenset()
    wanted: set[Slot] = set()
    rowed: set[int] = set()
    surges: set[int] = set()
    for row in replica.rows:
        index, deleting, operation, surge, active = g3_reads(row)
        if index is None:
            continue
        rowed.add(index)
        if deleting:
            continue
        if surge is not None:
            surges.add(surge)
        if replica.multi_pod:
            wanted.add(Slot(index, 0))
            if surge is not None:
                wanted.add(Slot(surge, 0))
        elif operation:
            wanted.update((Slot(index, 0), Slot(index, 1)))
        else:
            wanted.add(Slot(index, active if active in (0, 1) else 0))
    missing, candidate = replica.replicas - len(rowed), 0
    while missing > 0:
        if candidate not in rowed and candidate not in surges:
            wanted.add(Slot(candidate, 0))
            missing -= 1
        candidate += 1
    return frozenset(wanted)


def slots_of(replica: Replica, pending: Mapping[int, Iterable[JSON]]) -> dict[int, Slot]:
    """D1: the slot of each Instance about to get pods, from the ordinal of its first pod."""
    slots: dict[int, Slot] = {}
    for index, pods in pending.items():
        first = next(iter(pods), {})
        ordinal = naming.parse_index(
            _map(_map(first.get("metadata")).get("labels")).get(LABEL_POD_ORDINAL)
        )
        slots[index] = naming.slot_for(index, ordinal or 0, replica.multi_pod)
    return slots

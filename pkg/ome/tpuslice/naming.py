"""Slots, Slice names and the Slice object (behaviour.md D1 to D4), what a Slice's status says
about its slot (E1 to E3), and whether a host can take the pods (F).

Pure: no I/O, no client types; Slices and nodes are plain JSON dicts, read and never changed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ome.tpuslice.demand import Demand
from ome.tpuslice.types import Config

JSON = dict[str, Any]

SLICE_API_VERSION = "accelerator.gke.io/v1beta1"
SLICE_KIND = "Slice"

# The labels and annotation the controller writes; only OWNER_UID_LABEL makes a Slice ours (D4).
# ome.api.v1beta1 has the same managed-by, instance and ordinal names; they are repeated here
# because the pure core imports nothing above it.
OWNER_UID_LABEL = "ome.io/slice-owner-uid"
OWNER_ANNOTATION = "ome.io/slice-owner"
MANAGED_BY_LABEL = "ome.io/managed-by"
MANAGED_BY = "OMENative"
INSTANCE_LABEL = "ome.io/instance-index"
ORDINAL_LABEL = "ome.io/pod-ordinal"
OWNER_KIND = "InferenceReplica"

#: GKE's webhook admits Slice names of at most 49 characters.
MAX_NAME = 49
_LABEL_VALUE_MAX = 63

_HASH = re.compile(r"[0-9a-f]{8}")
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_OBJECT_NAME = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")
_INDEX = re.compile(r"0|[1-9][0-9]*")


def _map(value: object) -> JSON:
    return value if isinstance(value, dict) else {}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _labels(obj: JSON) -> JSON:
    return _map(_map(obj.get("metadata")).get("labels"))


def _name(obj: JSON) -> str:
    return _str(_map(obj.get("metadata")).get("name"))


# -- D1, D2: slots and names -------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Slot:
    """Where a Slice belongs: an Instance index and a pod ordinal (D1)."""

    instance: int
    ordinal: int


def slot_for(instance_index: int, pod_ordinal: int, multi_pod: bool) -> Slot:
    """D1: the pods of a multi-pod Instance share slot (i, 0); a single-pod Instance uses the
    pod's ordinal, so a surge pod (ordinal 1 - active) gets its own Slice."""
    return Slot(instance_index, 0 if multi_pod else pod_ordinal)


def owner_hash(namespace: str, name: str, uid: str) -> str:
    """D2: the first 8 lowercase hex characters of SHA-256 of ``<namespace>/<name>/<uid>``."""
    return hashlib.sha256(f"{namespace}/{name}/{uid}".encode()).hexdigest()[:8]


def slice_name(replica_name: str, slot: Slot, hash8: str) -> str:
    """D2: ``<base>-<instance>-<ordinal>-<hash>``, at most 49 characters, a DNS-1123 label.

    ``base`` is the replica name with ``.`` as ``-``, cut to fit, trailing ``-`` removed. The
    suffix parses back from the right, so distinct slots or hashes never share a name.
    ValueError for what the API server never produces: a replica name that is not an object
    name (DNS-1123 subdomain), a negative slot, a hash that is not 8 lowercase hex characters,
    or indices so long (over 18 digits together) that no character of the name is left.
    """
    if len(replica_name) > 253 or not _OBJECT_NAME.fullmatch(replica_name):
        raise ValueError(f"replica name {replica_name!r} is not a DNS-1123 subdomain")
    if slot.instance < 0 or slot.ordinal < 0:
        raise ValueError(f"slot {slot} has a negative index")
    if not _HASH.fullmatch(hash8):
        raise ValueError(f"hash {hash8!r} is not 8 lowercase hex characters")
    suffix = f"-{slot.instance}-{slot.ordinal}-{hash8}"
    room = MAX_NAME - len(suffix)
    if room < 1:
        raise ValueError(f"slot {slot} leaves no room for a name")
    return replica_name.replace(".", "-")[:room].rstrip("-") + suffix


# -- D3, D4: the Slice object ---------------------------------------------------------------


def slice_body(
    replica: JSON,
    slot: Slot,
    demand: Demand,
    config: Config,
    pod_annotations: Mapping[str, str],
) -> JSON:
    """D3: the Slice to create for ``slot`` of the InferenceReplica ``replica``.

    Annotations: the configured ``slice.annotations``, then each ``slice.podAnnotations`` key
    that ``pod_annotations`` (the pods' template annotations) carries, then
    ``ome.io/slice-owner``; configuration validation (A4) keeps these keys apart. The owner
    name label is the replica name cut to 63 characters, trailing ``-`` and ``.`` removed.
    """
    meta = _map(replica.get("metadata"))
    namespace, name, uid = (
        _str(meta.get("namespace")),
        _str(meta.get("name")),
        _str(meta.get("uid")),
    )
    settings = config.slice
    labels = {
        OWNER_UID_LABEL: uid,
        MANAGED_BY_LABEL: MANAGED_BY,
        INSTANCE_LABEL: str(slot.instance),
        ORDINAL_LABEL: str(slot.ordinal),
        settings.owner_kind_label: OWNER_KIND,
        settings.owner_name_label: name[:_LABEL_VALUE_MAX].rstrip("-."),
    }
    annotations = dict(settings.annotations)
    annotations.update(
        {k: pod_annotations[k] for k in settings.pod_annotations if k in pod_annotations}
    )
    annotations[OWNER_ANNOTATION] = f"{namespace}/{name}"
    return {
        "apiVersion": SLICE_API_VERSION,
        "kind": SLICE_KIND,
        "metadata": {
            "name": slice_name(name, slot, owner_hash(namespace, name, uid)),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "type": demand.accelerator.slice_type,
            "topology": str(demand.topology),
            "partitionIds": [],
        },
    }


def owns(slice_obj: JSON, replica_uid: str) -> bool:
    """D4: only ``ome.io/slice-owner-uid`` equal to the replica's UID makes a Slice ours. An
    empty UID owns nothing, so a Slice with an empty label is never adopted."""
    return bool(replica_uid) and _labels(slice_obj).get(OWNER_UID_LABEL) == replica_uid


def parse_slot(slice_obj: JSON) -> Slot | None:
    """The slot a Slice's ``ome.io/instance-index`` and ``ome.io/pod-ordinal`` labels name, or
    None when either is missing or not a canonical non-negative integer (as D3 writes it)."""
    labels = _labels(slice_obj)
    instance, ordinal = _str(labels.get(INSTANCE_LABEL)), _str(labels.get(ORDINAL_LABEL))
    if not (_INDEX.fullmatch(instance) and _INDEX.fullmatch(ordinal)):
        return None
    return Slot(int(instance), int(ordinal))


# -- E1 to E3: state, readiness and why a slot waits ----------------------------------------


@dataclass(frozen=True)
class SliceState:
    """E1: what a Slice says of itself. ``state`` is the reason of its first ``Ready``
    condition (``""`` when there is none, as for ``status`` and ``message``)."""

    state: str
    status: str
    message: str
    last_transition: str | None
    terminating: bool
    partitions: tuple[str, ...]


def slice_state(slice_obj: JSON) -> SliceState:
    """E1: the first ``Ready`` condition's reason, status, message and lastTransitionTime;
    terminating when ``deletionTimestamp`` is set; partitions from ``spec.partitionIds``."""
    status = _map(slice_obj.get("status"))
    conditions = status.get("conditions")
    ready: JSON = {}
    for condition in conditions if isinstance(conditions, list) else []:
        if _map(condition).get("type") == "Ready":
            ready = _map(condition)
            break
    partitions = _map(slice_obj.get("spec")).get("partitionIds")
    return SliceState(
        state=_str(ready.get("reason")),
        status=_str(ready.get("status")),
        message=_str(ready.get("message")),
        last_transition=_str(ready.get("lastTransitionTime")) or None,
        terminating=bool(_map(slice_obj.get("metadata")).get("deletionTimestamp")),
        partitions=tuple(p for p in partitions if isinstance(p, str))
        if isinstance(partitions, list)
        else (),
    )


def is_ready(s: SliceState, ready_states: tuple[str, ...]) -> bool:
    """E2: not terminating, the state is one of ``ready_states``, and status is not Unknown."""
    return not s.terminating and s.state in ready_states and s.status != "Unknown"


def slot_wait_reason(
    slice_obj: JSON,
    replica_uid: str,
    demand: Demand,
    ready_states: tuple[str, ...],
) -> tuple[str, str] | None:
    """E3: why the slot's pods wait for this Slice, as ``(kind, reason)``, or None when it is
    ready. Kinds: ``conflict``, ``terminating``, ``wrong-shape``, ``not-ready``.

    A status of Unknown reads as unknown readiness whatever the state, ready or not, since
    E2 refuses it either way.
    """
    name = _name(slice_obj)
    if not owns(slice_obj, replica_uid):
        return "conflict", f"slice is owned by another object: {name}"
    s = slice_state(slice_obj)
    if s.terminating:
        return "terminating", f"slice {name} is being released"
    spec = _map(slice_obj.get("spec"))
    have = (_str(spec.get("type")), _str(spec.get("topology")))
    want = (demand.accelerator.slice_type, str(demand.topology))
    if have != want:
        return "wrong-shape", (
            f"slice {name} is {have[0]} {have[1]}, want {want[0]} {want[1]}; it is replaced once "
            "no pod holds it"
        )
    if is_ready(s, ready_states):
        return None
    detail = f": {s.message}" if s.message else ""
    if not s.state and not s.partitions:
        return "not-ready", f"slice {name} is waiting for partition assignment"
    if not s.state:
        return "not-ready", f"slice {name} has partitions assigned and no state yet"
    if s.status == "Unknown":
        return "not-ready", f"slice {name} is {s.state}, but its readiness is unknown{detail}"
    return "not-ready", f"slice {name} is {s.state}{detail}"


# -- F: hosts -------------------------------------------------------------------------------

_UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
_UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
_NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def _tolerates(toleration: JSON, key: str, value: str, effect: str) -> bool:
    """Kubernetes' ``Toleration.ToleratesTaint``: an empty effect or key matches any; operator
    ``Exists`` matches any value, ``Equal`` (or empty) the same value; any other operator,
    such as the numeric ``Lt``/``Gt``, never matches these value-less taints' empty value."""
    t_effect, t_key = _str(toleration.get("effect")), _str(toleration.get("key"))
    if (t_effect and t_effect != effect) or (t_key and t_key != key):
        return False
    operator = _str(toleration.get("operator"))
    if operator in ("", "Equal"):
        return _str(toleration.get("value")) == value
    return operator == "Exists"


def tolerates(tolerations: list[JSON], key: str, value: str, effect: str) -> bool:
    """Whether any of ``tolerations`` tolerates the taint ``key=value:effect``."""
    return any(_tolerates(_map(t), key, value, effect) for t in tolerations)


def host_problems(node: JSON, tolerations: list[JSON]) -> list[str]:
    """F1/F2: why the pods cannot run on ``node``, sorted; empty when they can.

    Cordoned unless ``node.kubernetes.io/unschedulable:NoSchedule`` is tolerated; Ready
    Unknown is unreachable unless ``node.kubernetes.io/unreachable:NoSchedule`` is; Ready
    False or missing is not ready unless ``node.kubernetes.io/not-ready:NoSchedule`` is.
    """

    def tolerated(key: str) -> bool:
        return tolerates(tolerations, key, "", "NoSchedule")

    name = _name(node)
    why: list[str] = []
    if _map(node.get("spec")).get("unschedulable") is True and not tolerated(_UNSCHEDULABLE_TAINT):
        why.append("cordoned")
    conditions = _map(node.get("status")).get("conditions")
    ready = next(
        (
            _str(_map(c).get("status"))
            for c in (conditions if isinstance(conditions, list) else [])
            if _map(c).get("type") == "Ready"
        ),
        "",
    )
    if ready == "Unknown":
        if not tolerated(_UNREACHABLE_TAINT):
            why.append("unreachable")
    elif ready != "True" and not tolerated(_NOT_READY_TAINT):
        why.append("not ready")
    return sorted(f"node {name} is {w}" for w in why)

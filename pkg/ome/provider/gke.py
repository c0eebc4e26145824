"""GKE's Slice object (D3, E1): its group, version and
resource, the body OME creates, and reading a Slice into the plain ``SliceInfo`` the
reconcilers decide from. The one module that knows the Slice's field paths.

Pure: no I/O and no client. The reconcilers' act layer sends what this builds, through the
runtime's client.
"""

from __future__ import annotations

from collections.abc import Mapping

from ome.api.v1beta1 import (
    LABEL_INSTANCE_INDEX,
    LABEL_MANAGED_BY,
    LABEL_POD_ORDINAL,
    MANAGED_BY_OMENATIVE,
)
from ome.kube import JSON, Resource, parse_time
from ome.tpuslice.naming import (
    OWNER_ANNOTATION,
    OWNER_KIND,
    OWNER_UID_LABEL,
    Slot,
    owner_hash,
    owner_label_value,
    parse_index,
    slice_name,
)
from ome.tpuslice.placement import Demand
from ome.tpuslice.slices import SliceInfo
from ome.tpuslice.types import Config

GROUP = "accelerator.gke.io"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Slice"
SLICES = Resource(GROUP, VERSION, "slices", namespaced=False)
CRD_NAME = f"{SLICES.plural}.{GROUP}"


def _map(value: object) -> JSON:
    return value if isinstance(value, dict) else {}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def body(
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
    name label is the replica name cut to a label value.
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
        LABEL_MANAGED_BY: MANAGED_BY_OMENATIVE,
        LABEL_INSTANCE_INDEX: str(slot.instance),
        LABEL_POD_ORDINAL: str(slot.ordinal),
        settings.owner_kind_label: OWNER_KIND,
        settings.owner_name_label: owner_label_value(name),
    }
    annotations = dict(settings.annotations)
    annotations.update(
        {k: pod_annotations[k] for k in settings.pod_annotations if k in pod_annotations}
    )
    annotations[OWNER_ANNOTATION] = f"{namespace}/{name}"
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
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


def parse(obj: JSON) -> SliceInfo:
    """E1: what a Slice says of itself. The state is the reason of its first ``Ready``
    condition, with that condition's status, message and lastTransitionTime; terminating when
    ``deletionTimestamp`` is set; partitions from ``spec.partitionIds``; the slot from the
    index and ordinal labels (D3). Fields of the wrong type read as absent: a Slice someone
    else wrote is read, never trusted to be well formed."""
    meta = _map(obj.get("metadata"))
    labels = _map(meta.get("labels"))
    spec = _map(obj.get("spec"))
    conditions = _map(obj.get("status")).get("conditions")
    ready: JSON = {}
    for condition in conditions if isinstance(conditions, list) else []:
        if _map(condition).get("type") == "Ready":
            ready = _map(condition)
            break
    partitions = spec.get("partitionIds")
    instance, ordinal = (
        parse_index(labels.get(LABEL_INSTANCE_INDEX)),
        parse_index(labels.get(LABEL_POD_ORDINAL)),
    )
    return SliceInfo(
        name=_str(meta.get("name")),
        uid=_str(meta.get("uid")),
        resource_version=_str(meta.get("resourceVersion")),
        created=parse_time(meta.get("creationTimestamp")),
        owner_uid=_str(labels.get(OWNER_UID_LABEL)),
        owner=_str(_map(meta.get("annotations")).get(OWNER_ANNOTATION)),
        slot=Slot(instance, ordinal) if instance is not None and ordinal is not None else None,
        slice_type=_str(spec.get("type")),
        topology=_str(spec.get("topology")),
        state=_str(ready.get("reason")),
        status=_str(ready.get("status")),
        message=_str(ready.get("message")),
        last_transition=parse_time(ready.get("lastTransitionTime")),
        terminating=bool(_str(meta.get("deletionTimestamp"))),
        partitions=tuple(p for p in partitions if isinstance(p, str))
        if isinstance(partitions, list)
        else (),
    )


def reference(found: SliceInfo) -> JSON:
    """The Slice as an event's object: what an event recorded about it names (kind, name,
    UID; cluster-scoped, so the event goes to the ``default`` namespace, as Kubernetes puts a
    node's)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": found.name, "uid": found.uid},
    }

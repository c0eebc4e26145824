"""What the unit tests of the slice reconcilers build again and again, once: the walkthrough's
replica ``qwen3-tpu/qwen3-tpu-engine``, its configuration and demands, its runners' pod
templates, its stored Instance rows, the Slices, pods and hosts it meets, and the event
recorder the manager gives its controller.

A plain module, not a conftest: a test imports what it uses, e.g.
``from test.unit.slicekit import NAME, replica, single, sl``. The defaults are the common case;
where a test file needs another (no tolerations, another creation time...), it passes the
parameter, or binds it once with ``functools.partial``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ome.controllers.setup import NEVER_FILTERED
from ome.controllers.slices.model import Pod, Replica
from ome.runtime.events import EventRecorder, spam_key_by_reason
from ome.tpuslice.config import parse_config
from ome.tpuslice.hosts import Host
from ome.tpuslice.naming import Slot
from ome.tpuslice.placement import Demand
from ome.tpuslice.shape import Topology
from ome.tpuslice.slices import SliceInfo
from ome.tpuslice.types import GUIDE_CONFIG_JSON, Config

JSON = dict[str, Any]

# -- the walkthrough's replica ---------------------------------------------------------------------

#: The clock of every test that reads one.
NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
NAME = "qwen3-tpu-engine"
NAMESPACE = "qwen3-tpu"
UID = "6a1f2b3c-0000-4000-8000-000000000001"
#: D2: sha256("qwen3-tpu/qwen3-tpu-engine/6a1f2b3c-0000-4000-8000-000000000001")[:8].
HASH = "30d2d711"
#: The owner hash the walkthrough's examples print: not ``HASH``, the hash of no replica here.
GUIDE_HASH = "8f3a21c7"
#: The deletion timestamp of a deleting replica (``replica(deleting=True)``).
DELETED_AT = "2025-03-01T11:59:00Z"

# -- label keys, tolerations, texts ------------------------------------------------------------

OPT_IN = "ome.io/tpu-slice-provisioning"
ACC = "cloud.google.com/gke-tpu-accelerator"
TOPO = "cloud.google.com/gke-tpu-topology"
SLICE = "cloud.google.com/gke-tpu-slice"
TPU = "google.com/tpu"
TPU_TOLERATION = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
UNSCHEDULABLE_TOLERATION = {
    "key": "node.kubernetes.io/unschedulable",
    "operator": "Exists",
    "effect": "NoSchedule",
}
#: The token of every hold the gate and provisioning give.
CAP = "CapacityProvisioning"
#: How a recycled Slice's hold ends.
RECYCLED = "it is released and provisioned again once no pod holds it"
#: How every B6 demand error starts.
E = "pods cannot be placed on a provisioned slice"
#: The B6 error of ``single(chips=2)``: one 2-chip pod cannot fill a 2x2x1 slice.
BAD = (
    f"{E}: 1 pod x 2 chips do not fill topology 2x2x1: it is 4 chips on 1 host, which takes 2 pods"
)

# -- the walkthrough's configuration and demands ---------------------------------------------------


def _guide_config() -> Config:
    """The walkthrough's configuration, parsed (it always parses)."""
    config = parse_config(GUIDE_CONFIG_JSON)
    assert config is not None
    return config


#: The walkthrough's configuration: readyTimeout 10m, readyStates ACTIVE, ACTIVE_DEGRADED.
CONFIG = _guide_config()
TPU7X = CONFIG.accelerators["tpu7x"]
READY_STATES = CONFIG.slice.ready_states
#: The pool's accelerators that have provision-only nodes.
PROVISION_ONLY = frozenset({"tpu7x"})
#: The demand of ``single()``: one 4-chip pod on a 2x2x1 slice.
ONE_HOST = Demand(TPU7X, Topology((2, 2, 1)), hosts=1, pods=1, chips_per_pod=4)
#: The demand of ``multi()``: a leader and a worker of 4 chips each on a 2x2x2 slice.
TWO_HOSTS = Demand(TPU7X, Topology((2, 2, 2)), hosts=2, pods=2, chips_per_pod=4)

# -- names ---------------------------------------------------------------------------------------


def n(index: int, ordinal: int = 0) -> str:
    """D2: the name of our Slice at slot (``index``, ``ordinal``)."""
    return f"{NAME}-{index}-{ordinal}-{HASH}"


#: The name of our Slice at slot (0, 0).
N = n(0)
_SLOT0 = Slot(0, 0)

# -- runners -------------------------------------------------------------------------------------


def template(
    topology: str | None = "2x2x1",
    accelerator: str | None = "tpu7x",
    chips: object = 4,
    opt_in: str | None = "true",
    *,
    tolerations: Sequence[JSON] | None = (TPU_TOLERATION,),
    requests: bool = True,
    container: str = "runner",
    image: str | None = None,
    labels: JSON | None = None,
    **selector: str,
) -> JSON:
    """A runner's pod template; None leaves out the selector, chips, toleration or annotation."""
    node_selector = dict(selector)
    if accelerator is not None:
        node_selector[ACC] = accelerator
    if topology is not None:
        node_selector[TOPO] = topology
    resources: JSON = {}
    if chips is not None and requests:
        resources = {"requests": {TPU: chips}, "limits": {TPU: chips}}
    elif chips is not None:
        resources = {"limits": {TPU: chips}}
    runner: JSON = {"name": container}
    if image is not None:
        runner["image"] = image
    runner["resources"] = resources
    metadata: JSON = {"annotations": {OPT_IN: opt_in} if opt_in is not None else {}}
    if labels is not None:
        metadata["labels"] = copy.deepcopy(labels)
    spec: JSON = {"nodeSelector": node_selector, "containers": [runner]}
    if tolerations is not None:
        spec["tolerations"] = copy.deepcopy(list(tolerations))
    return {"metadata": metadata, "spec": spec}


def single(**kw: Any) -> list[JSON]:
    """The runners of a single-pod replica: one ``default`` runner of ``template(**kw)``."""
    return [{"name": "default", "template": template(**kw)}]


def multi(
    size: int = 1, leader: JSON | None = None, worker: JSON | None = None, **kw: Any
) -> list[JSON]:
    """A leader and ``size`` workers, by default ``template("2x2x2", **kw)``: two 4-chip hosts."""
    return [
        {"name": "leader", "template": leader or template("2x2x2", **kw)},
        {"name": "worker", "size": size, "template": worker or template("2x2x2", **kw)},
    ]


# -- stored rows and the replica -----------------------------------------------------------------


def row(index: int, phase: str = "Ready", active: int = 0, operation: JSON | None = None) -> JSON:
    """A stored Instance row: only what G3 reads of it."""
    return {"index": index, "phase": phase, "activeOrdinal": active, "operation": operation}


def _operation(type_: str, surge: int | None) -> JSON:
    """A row's operation of ``type_`` at its CreatePods step, surging to ``surge``."""
    return {"id": "op-1", "type": type_, "step": "CreatePods", "surgeIndex": surge}


def create_op(surge: int | None = None) -> JSON:
    """A Create operation at its CreatePods step."""
    return _operation("Create", surge)


def update_op(surge: int | None = None) -> JSON:
    """An Update operation at its CreatePods step."""
    return _operation("Update", surge)


def replica(
    runners: list[JSON] | None = None,
    rows: list[JSON] | None = None,
    *,
    name: str = NAME,
    uid: str = UID,
    replicas: int = 0,
    deleting: bool = False,
    labels: JSON | None = None,
) -> Replica:
    """The replica as cached, of ``single()`` unless given ``runners``, wanting only ``rows``."""
    # ``spec.replicas`` is 0 unless given: what the stored rows want is then all that is wanted
    # (G3 also wants ordinal 0 of every Instance below ``spec.replicas`` that has no row).
    meta: JSON = {"name": name, "namespace": NAMESPACE, "uid": uid, "resourceVersion": "7"}
    if labels is not None:
        meta["labels"] = copy.deepcopy(labels)
    if deleting:
        meta["deletionTimestamp"] = DELETED_AT
    return Replica.from_json(
        {
            "apiVersion": "ome.io/v1beta1",
            "kind": "InferenceReplica",
            "metadata": meta,
            "spec": {
                "component": "engine",
                "replicas": replicas,
                "runners": copy.deepcopy(runners if runners is not None else single()),
            },
            "status": {"instanceStatuses": copy.deepcopy(rows or [])},
        }
    )


# -- what the reconcilers observe ----------------------------------------------------------------


def sl(
    name: str | None = None,
    *,
    slot: Slot | None = _SLOT0,
    owner: str = UID,
    owner_name: str = f"{NAMESPACE}/{NAME}",
    uid: str | None = None,
    rv: str = "41",
    created: datetime | None = NOW - timedelta(minutes=1),
    type_: str = "tpu7x",
    topology: str = "2x2x1",
    state: str = "ACTIVE",
    status: str = "True",
    message: str = "",
    partitions: tuple[str, ...] = ("p1",),
    terminating: bool = False,
    last_transition: datetime | None = None,
) -> SliceInfo:
    """A Slice as observed: by default ours at slot (0, 0), its name, tpu7x 2x2x1 and ACTIVE."""
    if name is None:
        assert slot is not None
        name = n(slot.instance, slot.ordinal)
    return SliceInfo(
        name=name,
        uid=uid or f"uid-{name}",
        resource_version=rv,
        created=created,
        owner_uid=owner,
        owner=owner_name,
        slot=slot,
        slice_type=type_,
        topology=topology,
        state=state,
        status=status,
        message=message,
        last_transition=last_transition,
        terminating=terminating,
        partitions=partitions,
    )


def pod(
    name: str,
    slice_name: str = "",
    node: str = "node-a",
    *,
    namespace: str = NAMESPACE,
    created: datetime | None = None,
    terminating: bool = False,
    terminal: bool = False,
    chips: int = 4,
    replica: str = "",
    instance: int | None = None,
    ordinal: int | None = None,
) -> Pod:
    """A pod as release and loss read it: by default 4 chips on node-a, of no replica's."""
    return Pod(
        namespace=namespace,
        name=name,
        uid=f"uid-{name}",
        node=node,
        slice_name=slice_name,
        created=created,
        terminating=terminating,
        terminal=terminal,
        chips=chips,
        replica=replica,
        instance=instance,
        ordinal=ordinal,
    )


def host(name: str, *, cordoned: bool = False, ready: str = "True", slice_name: str = N) -> Host:
    """A node of Slice ``slice_name``: by default ready and not cordoned."""
    return Host(name, slice_name=slice_name, unschedulable=cordoned, ready=ready)


def manager_recorder(client: Any, clock: Callable[[], datetime]) -> EventRecorder:
    """The InferenceReplica controller's event recorder as the manager makes it (its spam
    budget per reason, SliceLost and TeardownDeadlineExceeded never filtered), writing
    through ``client`` on ``clock``'s time, started."""
    recorder = EventRecorder(
        client,
        "inferencereplica-controller",
        clock=clock,
        spam_key=spam_key_by_reason(NEVER_FILTERED),
    )
    recorder.start()
    return recorder

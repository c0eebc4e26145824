"""What the simulated GKE provider knows of the world: label and annotation names, the
knobs users turn with ``kubectl annotate``, node pools and the nodes they consist of.

Plain values and builders; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

# -- GKE's names -------------------------------------------------------------------------
SLICE_GROUP, SLICE_VERSION, SLICE_PLURAL = "accelerator.gke.io", "v1beta1", "slices"
SLICE_FINALIZER = "accelerator.gke.io/slice-finalizer"
ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
SLICE_LABEL = "cloud.google.com/gke-tpu-slice"
TOPOLOGY_MODE_LABEL = "cloud.google.com/gke-accelerator-topology-mode"
PROVISION_ONLY = "PROVISION_ONLY"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
CHIP_RESOURCE = "google.com/tpu"
TPU_TAINT = {"key": CHIP_RESOURCE, "value": "present", "effect": "NoSchedule"}

#: Ready-condition reasons (the provisioning state) of a Slice.
ACTIVATING, ACTIVE, ACTIVE_DEGRADED = "ACTIVATING", "ACTIVE", "ACTIVE_DEGRADED"
FAILED, DEACTIVATING, CREATION_FAILED = "FAILED", "DEACTIVATING", "SliceCreationFailed"

#: Chips per host of the TPU types the simulator knows; others default to 4.
CHIPS_PER_HOST = {"tpu7x": 4, "v5p": 4, "v6e": 4, "v5litepod": 4}

# -- the simulator's own names -----------------------------------------------------------
SIM = "sim.ome.io"
#: On nodes: the pool that made it, and the partition a host is.
POOL_LABEL = f"{SIM}/pool"
PARTITION_ANNOTATION = f"{SIM}/partition-id"


@dataclass(frozen=True)
class Knob:
    """An annotation a user sets with ``kubectl annotate`` to make the provider misbehave."""

    annotation: str
    on: str  # "Slice" or "Node"
    effect: str


KNOBS = (
    Knob(
        f"{SIM}/activation-delay",
        "Slice",
        "how long the Slice stays ACTIVATING before it goes ACTIVE, e.g. 30s (default: "
        "the provider's --activation-delay)",
    ),
    Knob(
        f"{SIM}/stick-activating",
        "Slice",
        '"true": the Slice stays ACTIVATING with its partitions; remove it to let it go ACTIVE',
    ),
    Knob(
        f"{SIM}/fail", "Slice", '"true": the Slice goes FAILED (Ready False); remove it to recover'
    ),
    Knob(
        f"{SIM}/degrade",
        "Slice",
        '"true": an active Slice goes ACTIVE_DEGRADED (Ready True); remove it to recover',
    ),
    Knob(
        f"{SIM}/drop-partitions",
        "Slice",
        '"true": the Slice loses its partitions (partitionIds emptied, hosts unlabelled and '
        "freed) and is not given new ones until the annotation is removed",
    ),
    Knob(
        f"{SIM}/move",
        "Slice",
        "any new value: the active Slice moves to other free hosts (new partitionIds and host "
        f"labels); the provider records the value it acted on as {SIM}/moved",
    ),
    Knob(
        f"{SIM}/not-ready",
        "Node",
        '"true": the node reports Ready False (KubeletNotReady) and its pods stop being Ready',
    ),
    Knob(
        f"{SIM}/unreachable",
        "Node",
        '"true": the node stops heartbeating; its Ready condition goes Unknown '
        "(NodeStatusUnknown), as the node lifecycle controller reports it",
    ),
)
KNOB = {k.annotation.split("/", 1)[1]: k.annotation for k in KNOBS}
MOVED_ANNOTATION = f"{SIM}/moved"


# -- pools and nodes ---------------------------------------------------------------------


class PoolError(ValueError):
    """A ``--pool`` value that cannot be used; ``str()`` says why."""


@dataclass(frozen=True)
class Pool:
    """A TPU node pool: ``provision-only`` hosts take on-demand Slices; ``static`` ones hold
    a fixed topology."""

    tpu_type: str
    mode: str  # provision-only | static
    size: int
    name: str
    topology: str = "2x2x1"  # static pools only

    @property
    def chips_per_host(self) -> int:
        return CHIPS_PER_HOST.get(self.tpu_type, 4)

    def node_names(self) -> list[str]:
        return [f"gke-{self.name}-node-{i}" for i in range(self.size)]


MODES = ("provision-only", "static")


def parse_pools(specs: list[str]) -> list[Pool]:
    """``TYPE:MODE:COUNT[:NAME]``, e.g. ``tpu7x:provision-only:8``. The first provision-only
    pool is named ``tpu-pool`` and the first static one ``tpu-static`` unless named."""
    pools: list[Pool] = []
    for spec in specs:
        parts = spec.split(":")
        if len(parts) not in (3, 4):
            raise PoolError(
                f"--pool {spec!r}: want TYPE:MODE:COUNT[:NAME], e.g. tpu7x:provision-only:8"
            )
        tpu_type, mode, count = parts[:3]
        if not tpu_type:
            raise PoolError(f"--pool {spec!r}: the TPU type is empty")
        if mode not in MODES:
            raise PoolError(f"--pool {spec!r}: mode must be provision-only or static, not {mode!r}")
        if not count.isdigit() or int(count) < 1:
            raise PoolError(f"--pool {spec!r}: COUNT must be a positive whole number")
        if len(parts) == 4:
            name = parts[3]
        else:
            default = "tpu-pool" if mode == "provision-only" else "tpu-static"
            taken = {p.name for p in pools}
            name = default if default not in taken else f"{default}-{len(pools)}"
        pools.append(Pool(tpu_type, mode, int(count), name))
    names = [p.name for p in pools]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PoolError(f"--pool: pool names must be unique: {', '.join(dupes)}")
    return pools


DEFAULT_POOLS = ["tpu7x:provision-only:8", "tpu7x:static:2"]


def node_object(pool: Pool, index: int, now: str) -> JSON:
    """A TPU host as GKE registers it, Ready, with its taint, capacity and labels."""
    name = pool.node_names()[index]
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        NODEPOOL_LABEL: pool.name,
        ACCELERATOR_LABEL: pool.tpu_type,
        POOL_LABEL: pool.name,
    }
    if pool.mode == "provision-only":
        labels[TOPOLOGY_MODE_LABEL] = PROVISION_ONLY
    else:
        labels[TOPOLOGY_LABEL] = pool.topology
    capacity = {
        CHIP_RESOURCE: str(pool.chips_per_host),
        "cpu": "96",
        "memory": "393216Mi",
        "ephemeral-storage": "100Gi",
        "pods": "110",
    }
    allocatable = {**capacity, "cpu": "95", "memory": "380000Mi"}
    node = _node(name, labels, capacity, allocatable, f"192.0.2.{index + 1}", now)
    node["metadata"]["annotations"] = {PARTITION_ANNOTATION: f"{pool.name}-p{index}"}
    node["spec"] = {"taints": [dict(TPU_TAINT)], "providerID": f"gce://sim/{pool.name}/{name}"}
    return node


def _node(
    name: str,
    labels: dict[str, str],
    capacity: dict[str, str],
    allocatable: dict[str, str],
    address: str,
    now: str,
) -> JSON:
    """A Ready node's object, as a kubelet registers it; its spec is the caller's."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": ready_conditions(
                "True", "KubeletReady", "kubelet is posting ready status", now
            ),
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": _node_info(name),
        },
    }


#: The general-purpose pool of untainted nodes (``Options.system_nodes``), where pods that
#: tolerate no TPU taint, such as the manager's, are scheduled.
SYSTEM_POOL = "default-pool"


def system_node_names(count: int) -> list[str]:
    return [f"gke-{SYSTEM_POOL}-node-{i}" for i in range(count)]


def system_node_object(index: int, now: str) -> JSON:
    """A general-purpose node of the default pool: no taint, no TPUs, CPU and memory."""
    name = system_node_names(index + 1)[index]
    capacity = {
        "cpu": "8",
        "memory": "32768Mi",
        "ephemeral-storage": "100Gi",
        "pods": "110",
    }
    allocatable = {**capacity, "cpu": "7910m", "memory": "29000Mi"}
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        NODEPOOL_LABEL: SYSTEM_POOL,
        POOL_LABEL: SYSTEM_POOL,
    }
    node = _node(name, labels, capacity, allocatable, f"192.0.2.{200 + index}", now)
    node["spec"] = {"providerID": f"gce://sim/{SYSTEM_POOL}/{name}"}
    return node


def kubelet_endpoint_status(node: JSON, port: int) -> JSON:
    """The status fields that point the API server at the kubelet API on 127.0.0.1:``port``
    (``kubectl logs`` goes there): InternalIP 127.0.0.1 and the kubelet endpoint port."""
    addresses = [
        {"type": "InternalIP", "address": "127.0.0.1"},
        *(
            a
            for a in (node.get("status") or {}).get("addresses") or []
            if a.get("type") != "InternalIP"
        ),
    ]
    return {"addresses": addresses, "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}


def _node_info(name: str) -> JSON:
    return {
        "architecture": "amd64",
        "bootID": f"boot-{name}",
        "containerRuntimeVersion": "containerd://1.7.0",
        "kernelVersion": "6.1.0-sim",
        "kubeProxyVersion": "v1.32.0",
        "kubeletVersion": "v1.32.0",
        "machineID": f"machine-{name}",
        "operatingSystem": "linux",
        "osImage": "Container-Optimized OS (simulated)",
        "systemUUID": f"uuid-{name}",
    }


def ready_conditions(status: str, reason: str, message: str, now: str) -> list[JSON]:
    conditions = [
        {
            "type": t,
            "status": "False",
            "reason": r,
            "message": m,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for t, r, m in (
            (
                "MemoryPressure",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        )
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
    )
    return conditions


def condition(obj: JSON, ctype: str) -> JSON | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return None


def slice_state(obj: JSON) -> str:
    ready = condition(obj, "Ready")
    return str(ready.get("reason") or "") if ready else ""


def truthy(value: Any) -> bool:
    return str(value).lower() == "true"

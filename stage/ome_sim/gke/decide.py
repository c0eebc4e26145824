"""The simulator's decisions, as pure functions over plain objects: which hosts a waiting
Slice gets, where a pending pod fits, and what the kubelet reports for a pod.

No I/O: ``provider.py`` gathers what it observed, calls these, and carries out the result.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from ome.tpuslice.hosts import tolerates
from ome.tpuslice.shape import ShapeError, hosts, parse_topology

from .model import (
    ACCELERATOR_LABEL,
    CHIPS_PER_HOST,
    KNOB,
    PARTITION_ANNOTATION,
    POOL_LABEL,
    PROVISION_ONLY,
    SLICE_LABEL,
    TOPOLOGY_MODE_LABEL,
    condition,
    truthy,
)

JSON = dict[str, Any]


# -- hosts and Slices ----------------------------------------------------------------------


def is_provision_only_host(node: JSON) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return labels.get(TOPOLOGY_MODE_LABEL) == PROVISION_ONLY and POOL_LABEL in labels


def partition_of(node: JSON) -> str:
    return str(
        ((node.get("metadata") or {}).get("annotations") or {}).get(PARTITION_ANNOTATION, "")
    )


def node_ready(node: JSON) -> str:
    """The Ready condition's status: True, False or Unknown (missing counts as False)."""
    ready = condition(node, "Ready")
    return str(ready.get("status", "False")) if ready else "False"


def host_usable(node: JSON) -> bool:
    """GKE assigns only healthy hosts: Ready and not cordoned."""
    return node_ready(node) == "True" and not (node.get("spec") or {}).get("unschedulable")


def slice_hosts_needed(slice_obj: JSON) -> int:
    """How many hosts a Slice's topology takes; ShapeError when it can never be made."""
    spec = slice_obj.get("spec") or {}
    topology = parse_topology(str(spec.get("topology", "")))
    return hosts(topology, CHIPS_PER_HOST.get(str(spec.get("type", "")), 4))


def _age_key(obj: JSON) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("creationTimestamp", "")), str(meta.get("name", "")))


def waiting(slice_obj: JSON) -> bool:
    """A Slice that wants partitions: alive, none assigned, not held back by a knob."""
    meta = slice_obj.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    if truthy((meta.get("annotations") or {}).get(KNOB["drop-partitions"])):
        return False
    return not (slice_obj.get("spec") or {}).get("partitionIds")


def waiting_message(slice_obj: JSON) -> str:
    """The Ready condition's message of a Slice that waits for capacity (GKE reports the
    wait in the condition, with no state: the condition has no reason). Stable while the
    Slice waits, so it is written once."""
    spec = slice_obj.get("spec") or {}
    need = slice_hosts_needed(slice_obj)
    hosts_needed = "1 host" if need == 1 else f"{need} hosts"
    return (
        f"waiting for partition assignment: not enough free {spec.get('type', '')} hosts "
        f"for topology {spec.get('topology', '')} ({hosts_needed} needed)"
    )


@dataclass(frozen=True)
class Assignment:
    slice_name: str
    nodes: tuple[str, ...]  # sorted node names
    partitions: tuple[str, ...]


def free_hosts(nodes: Iterable[JSON], taken: set[str]) -> dict[str, list[JSON]]:
    """Usable provision-only hosts not held by any Slice, by TPU type, in name order."""
    free: dict[str, list[JSON]] = {}
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        if name in taken or SLICE_LABEL in labels:
            continue
        if is_provision_only_host(node) and host_usable(node):
            free.setdefault(str(labels.get(ACCELERATOR_LABEL, "")), []).append(node)
    return free


def plan_assignments(
    slices: Iterable[JSON], nodes: Iterable[JSON], taken: set[str]
) -> list[Assignment]:
    """Give waiting Slices free hosts of their type, oldest Slice first; a Slice that does
    not fit now keeps waiting, and a younger one that fits is served meanwhile."""
    free = free_hosts(nodes, taken)
    plan: list[Assignment] = []
    for slice_obj in sorted((s for s in slices if waiting(s)), key=_age_key):
        try:
            need = slice_hosts_needed(slice_obj)
        except ShapeError:
            continue  # reported as SliceCreationFailed, never assigned
        pool = free.get(str((slice_obj.get("spec") or {}).get("type", "")), [])
        if len(pool) < need:
            continue
        chosen, free_rest = pool[:need], pool[need:]
        free[str(slice_obj["spec"]["type"])] = free_rest
        plan.append(
            Assignment(
                slice_obj["metadata"]["name"],
                tuple(n["metadata"]["name"] for n in chosen),
                tuple(partition_of(n) for n in chosen),
            )
        )
    return plan


# -- pods: the scheduler stand-in ------------------------------------------------------------

SCHEDULED_RESOURCES = ("cpu", "memory", "google.com/tpu")


def quantity(value: Any) -> Decimal:
    """A Kubernetes quantity (``4``, ``500m``, ``1Gi``) as a Decimal, by the official client."""
    return Decimal(parse_quantity(value))  # type: ignore[no-untyped-call]


def pod_requests(pod: JSON) -> dict[str, Decimal]:
    """What the scheduler counts: per resource, the sum over containers of the request (the
    limit when no request), or the largest init container's if that is more."""
    spec = pod.get("spec") or {}

    def of(container: JSON) -> dict[str, Decimal]:
        res = container.get("resources") or {}
        out = {k: quantity(v) for k, v in (res.get("limits") or {}).items()}
        out.update({k: quantity(v) for k, v in (res.get("requests") or {}).items()})
        return out

    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    return total


def pod_active(pod: JSON) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def tolerates_taint(tolerations: Iterable[JSON], taint: JSON) -> bool:
    """Kubernetes' toleration matching, as the product's host vetting does it."""
    return tolerates(
        list(tolerations),
        str(taint.get("key") or ""),
        str(taint.get("value") or ""),
        str(taint.get("effect") or ""),
    )


def _node_taints(node: JSON) -> list[JSON]:
    taints = list((node.get("spec") or {}).get("taints") or [])
    if (node.get("spec") or {}).get("unschedulable"):
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    return taints


def misfit(pod: JSON, node: JSON, used: Mapping[str, Decimal]) -> str | None:
    """Why ``pod`` cannot go on ``node`` (the scheduler's reason text), or None if it fits."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return "node(s) didn't match Pod's node affinity/selector"
    for taint in _node_taints(node):
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates_taint(
            spec.get("tolerations") or [], taint
        ):
            return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    for resource, amount in pod_requests(pod).items():
        if resource not in SCHEDULED_RESOURCES and not resource.startswith("google.com/"):
            continue
        if amount <= 0:
            continue
        have = quantity(allocatable.get(resource, "0"))
        if used.get(resource, Decimal(0)) + amount > have:
            return f"Insufficient {resource}"
    return None


def choose_node(
    pod: JSON, nodes: Iterable[JSON], used_by_node: Mapping[str, Mapping[str, Decimal]]
) -> tuple[str | None, str]:
    """The first node (by name) the pod fits, or None and the scheduler's message."""
    reasons: Counter[str] = Counter()
    ordered = sorted(nodes, key=lambda n: n["metadata"]["name"])
    for node in ordered:
        name = node["metadata"]["name"]
        why = misfit(pod, node, used_by_node.get(name, {}))
        if why is None:
            return name, ""
        reasons[why] += 1
    parts = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items()))
    return None, f"0/{len(ordered)} nodes are available: {parts}." if parts else (
        "0/0 nodes are available: no nodes available to schedule pods."
    )


def usage(pods: Iterable[JSON]) -> dict[str, dict[str, Decimal]]:
    """Requests of the active pods bound to each node."""
    used: dict[str, dict[str, Decimal]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or not pod_active(pod):
            continue
        bucket = used.setdefault(node, {})
        for k, v in pod_requests(pod).items():
            bucket[k] = bucket.get(k, Decimal(0)) + v
    return used


def unschedulable_condition(message: str, now: str) -> JSON:
    return {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }


# -- pods: the kubelet stand-in ----------------------------------------------------------------


def kubelet_status(
    pod: JSON, node: JSON, now: str, runs: Mapping[str, JSON] | None = None, phase: str = "Running"
) -> JSON:
    """The status a kubelet reports for a started pod: Running, Ready while its node is.

    ``runs`` gives, by container name, the containerStatuses entry of containers that run
    as processes (``podrunner``); the pod is then Ready only while all of those are."""
    runs = runs or {}
    node_is_ready = node_ready(node) == "True"
    ready = "True" if node_is_ready and all(r.get("ready") for r in runs.values()) else "False"
    old = pod.get("status") or {}
    started = old.get("startTime") or now

    def cond(ctype: str, status: str) -> JSON:
        prev = next((c for c in old.get("conditions") or [] if c.get("type") == ctype), None)
        since = prev.get("lastTransitionTime") if prev and prev.get("status") == status else now
        return {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": since}

    containers = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name", "") in runs:
            containers.append(
                {
                    **runs[c.get("name", "")],
                    "ready": bool(node_is_ready and runs[c.get("name", "")].get("ready")),
                }
            )
            continue
        containers.append(
            {
                "name": c.get("name", ""),
                "image": c.get("image", ""),
                "imageID": f"sim://{c.get('image', '')}",
                "containerID": f"containerd://{pod['metadata'].get('uid', '')}-{c.get('name', '')}",
                "ready": ready == "True",
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": started}},
            }
        )
    address = next(
        (
            a["address"]
            for a in (node.get("status") or {}).get("addresses") or []
            if a.get("type") == "InternalIP"
        ),
        "192.0.2.250",
    )
    return {
        "phase": phase,
        "conditions": [
            cond("PodReadyToStartContainers", "True"),
            cond("Initialized", "True"),
            cond("Ready", ready),
            cond("ContainersReady", ready),
            cond("PodScheduled", "True"),
        ],
        "hostIP": address,
        "hostIPs": [{"ip": address}],
        "podIP": old.get("podIP") or _pod_ip(pod),
        "podIPs": [{"ip": old.get("podIP") or _pod_ip(pod)}],
        "startTime": started,
        "containerStatuses": containers,
        "qosClass": old.get("qosClass", "BestEffort"),
    }


def _pod_ip(pod: JSON) -> str:
    digest = sum(ord(ch) for ch in str(pod["metadata"].get("uid", ""))) % 250
    return f"198.51.100.{digest + 1}"


def status_differs(old: JSON, new: JSON) -> bool:
    """Whether a kubelet report changes what the pod shows (timestamps aside)."""

    def shape(status: JSON) -> Any:
        return (
            status.get("phase"),
            sorted((c.get("type"), c.get("status")) for c in status.get("conditions") or []),
            [
                (
                    c.get("name"),
                    c.get("ready"),
                    c.get("restartCount", 0),
                    sorted(c.get("state") or {}),
                    ((c.get("state") or {}).get("waiting") or {}).get("reason"),
                )
                for c in status.get("containerStatuses") or []
            ],
        )

    return bool(shape(old) != shape(new))

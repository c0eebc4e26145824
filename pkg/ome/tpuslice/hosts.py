"""Whether a host can take an Instance's pods (F1, F2), and Kubernetes' toleration
matching, which the simulator's scheduler stand-in shares.

Pure: no I/O and no client types. A host is a plain value read from a Node.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ome.kube import JSON

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def _map(value: object) -> JSON:
    return value if isinstance(value, dict) else {}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class Host:
    """What F reads of a node: its name, the value of its slice label (``""`` without one),
    whether it is cordoned, and its Ready condition's status (``""`` without one)."""

    name: str
    slice_name: str = ""
    unschedulable: bool = False
    ready: str = "True"

    @staticmethod
    def from_node(node: JSON, slice_label: str = "") -> Host:
        meta = _map(node.get("metadata"))
        conditions = _map(node.get("status")).get("conditions")
        ready = next(
            (
                _str(_map(c).get("status"))
                for c in (conditions if isinstance(conditions, list) else [])
                if _map(c).get("type") == "Ready"
            ),
            "",
        )
        return Host(
            name=_str(meta.get("name")),
            slice_name=_str(_map(meta.get("labels")).get(slice_label)) if slice_label else "",
            unschedulable=_map(node.get("spec")).get("unschedulable") is True,
            ready=ready,
        )


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


def tolerates(tolerations: Iterable[JSON], key: str, value: str, effect: str) -> bool:
    """Whether any of ``tolerations`` tolerates the taint ``key=value:effect``."""
    return any(_tolerates(_map(t), key, value, effect) for t in tolerations)


def host_problems(host: Host, tolerations: Iterable[JSON]) -> list[str]:
    """F1/F2: why a pod with ``tolerations`` cannot run on ``host``, sorted; empty when it can.

    Cordoned unless ``node.kubernetes.io/unschedulable:NoSchedule`` is tolerated; Ready
    Unknown is unreachable unless ``node.kubernetes.io/unreachable:NoSchedule`` is; Ready
    False or missing is not ready unless ``node.kubernetes.io/not-ready:NoSchedule`` is.
    """
    tolerations = list(tolerations)

    def tolerated(key: str) -> bool:
        return tolerates(tolerations, key, "", "NoSchedule")

    why: list[str] = []
    if host.unschedulable and not tolerated(UNSCHEDULABLE_TAINT):
        why.append("cordoned")
    if host.ready == "Unknown":
        if not tolerated(UNREACHABLE_TAINT):
            why.append("unreachable")
    elif host.ready != "True" and not tolerated(NOT_READY_TAINT):
        why.append("not ready")
    return sorted(f"node {host.name} is {w}" for w in why)


def instance_host_problems(
    hosts: Iterable[Host], pod_tolerations: Iterable[Iterable[JSON]]
) -> list[str]:
    """F for a whole Instance (E6): a host is usable only if every pod that could run on it
    tolerates it, and any pod of the Instance may land on any host of its Slice; so a host's
    problem counts when any one pod does not tolerate it. Sorted, without repeats."""
    pods = [list(t) for t in pod_tolerations] or [[]]
    return sorted(
        {p for host in hosts for tolerations in pods for p in host_problems(host, tolerations)}
    )

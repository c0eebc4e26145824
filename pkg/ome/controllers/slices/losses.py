"""Loss detection (H1 to H4): pods whose Slice was deleted, re-created from
outside, lost its partitions or moved off their nodes while they ran on it are deleted, so
that their Instance is rebuilt on a Slice that holds them.

Owns which pods a lost Slice takes. Suspicion comes from the caches; the act layer confirms
every loss by asking ``judge`` again with live reads before it deletes anything, and deletes
each pod under its UID. It must never do I/O, and never touch a Slice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ome.tpuslice.hosts import Host
from ome.tpuslice.slices import SliceInfo

from . import messages
from .model import Pod, Replica


@dataclass(frozen=True)
class Loss:
    """The Slice ``name`` was lost (``why``, H3's words), taking ``pods``. ``found`` is the
    Slice as read (None when it is gone), for the metric's labels."""

    name: str
    why: str
    pods: tuple[Pod, ...]
    found: SliceInfo | None


def candidates(replica: Replica, pods: Iterable[Pod]) -> dict[str, list[Pod]]:
    """H1: the replica's live, unfinished pods whose slice selector names a Slice this replica
    gives, grouped by that name."""
    groups: dict[str, list[Pod]] = {}
    for pod in pods:
        if pod.terminating or pod.terminal or not pod.slice_name:
            continue
        if replica.slot_of(pod.slice_name) is not None:
            groups.setdefault(pod.slice_name, []).append(pod)
    return {name: sorted(group, key=lambda p: p.name) for name, group in sorted(groups.items())}


def judge(
    name: str,
    found: SliceInfo | None,
    pods: Iterable[Pod],
    nodes: Mapping[str, Host | None],
    replica_uid: str,
) -> Loss | None:
    """H3, in order: the Slice absent or terminating: ``was deleted`` (all its pods); created
    after some pods, which makes it re-created from outside: ``was deleted`` (those pods),
    whoever owns it now; not ours: left alone; no pod bound: nothing; no partitions: ``lost
    its partitions`` (the bound pods); a bound pod's node gone or without the Slice's label:
    ``moved off ...`` (every bound pod, since they started together on the hosts the Slice
    held before; unbound pods follow the label). ``nodes`` maps each bound pod's node to the
    host read (None: gone).

    Age comes before ownership (H3.2): a user reads a Slice
    "re-created from outside, which makes it younger than its pods" as deleted, and a Slice
    deleted and re-created by someone else at our name is exactly that: its pods run on no
    Slice of ours, so they go (the slot then shows SliceOwnershipConflict)."""
    pods = list(pods)
    if not pods:
        return None
    if found is None or found.terminating:
        return Loss(name, messages.WAS_DELETED, tuple(pods), found)
    born = found.created
    younger = [p for p in pods if born is not None and p.created is not None and p.created < born]
    if younger:
        return Loss(name, messages.WAS_DELETED, tuple(younger), found)
    if not found.owned_by(replica_uid):
        return None
    bound = [p for p in pods if p.node]
    if not bound:
        return None
    if not found.partitions:
        return Loss(name, messages.LOST_PARTITIONS, tuple(bound), found)
    moved = sorted(
        {p.node for p in bound if (host := nodes.get(p.node)) is None or host.slice_name != name}
    )
    if moved:
        return Loss(name, messages.moved_off(moved), tuple(bound), found)
    return None


def suspects(
    replica: Replica,
    pods: Iterable[Pod],
    slices: Mapping[str, SliceInfo],
    nodes: Mapping[str, Host | None],
) -> list[str]:
    """H2: the Slice names the caches say may be lost; each is confirmed live before acting."""
    return [
        name
        for name, group in candidates(replica, pods).items()
        if judge(name, slices.get(name), group, nodes, replica.uid) is not None
    ]

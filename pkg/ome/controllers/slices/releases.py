"""Release (C2, G1 to G5): the sweep of Slices no Instance wants any more (after a
scale-down, a shape change, an update's surge, or an opt-out), the deferral while other
workloads hold chips on a Slice's hosts, and teardown when the replica is deleted.

Owns which of our Slices go, and the confirmation of each on live values before its delete.
It must never touch a Slice without our owner UID, release one that a pod of the component
still runs on (its terminating pods included, until a teardown's deadline), or delete one
while another workload's pod holds chips on its hosts; and it never does I/O: the act layer
reads live, then asks the same functions again with what it read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ome.tpuslice.naming import Slot
from ome.tpuslice.placement import Demand
from ome.tpuslice.slices import SliceInfo

from . import messages
from .model import Pod, Replica, wanted_slots
from .validation import Verdict


def keep(
    found: SliceInfo, replica: Replica, demand: Demand | None, wanted: frozenset[Slot]
) -> bool:
    """G3: a Slice is kept when its labels name a wanted slot, its name is that slot's and its
    type and topology are the demand's."""
    return (
        demand is not None
        and found.slot is not None
        and found.slot in wanted
        and found.name == replica.slice_name(found.slot)
        and (found.slice_type, found.topology)
        == (demand.accelerator.slice_type, str(demand.topology))
    )


def pinned(name: str, pods: Iterable[Pod]) -> bool:
    """G3: a pod of the component that has not finished still names the Slice in its node
    selector (a deleting pod still runs there, in its grace period)."""
    return any(p.slice_name == name and not p.terminal for p in pods)


def unwanted(
    replica: Replica, verdict: Verdict, owned: Iterable[SliceInfo], pods: Iterable[Pod]
) -> list[SliceInfo]:
    """G3, G4, C2: our Slices that no Instance wants and no pod of the component names. An
    opted-out replica (no demand) wants none. An invalid demand changes nothing about what
    exists, and a deleting replica is teardown's, so neither releases anything here."""
    if replica.deleting or verdict.error:
        return []
    wanted = wanted_slots(replica) if verdict.demand is not None else frozenset()
    pods = list(pods)
    return [
        s
        for s in sorted(owned, key=lambda s: s.name)
        if s.owned_by(replica.uid)
        and not s.terminating
        and not keep(s, replica, verdict.demand, wanted)
        and not pinned(s.name, pods)
    ]


def holders(name: str, host_pods: Iterable[Pod]) -> list[str]:
    """G2: the pods of other workloads that hold chips on the Slice's hosts: bound there (the
    caller gives the pods bound to its nodes), not Succeeded or Failed, not confined to this
    Slice by the slice-name selector, and requesting chips. Deleting pods still count.
    ``namespace/name``, sorted."""
    return sorted(
        {p.ref for p in host_pods if not p.terminal and p.slice_name != name and p.chips > 0}
    )


@dataclass(frozen=True)
class Delete:
    """Delete ``slice`` under its UID, and under ``resource_version`` when the decision read
    the Slice's state (so a Slice that changed since is decided again, not deleted)."""

    slice: SliceInfo
    resource_version: str = ""


@dataclass(frozen=True)
class Defer:
    """Keep ``slice``: ``holders`` hold chips on its hosts (G2)."""

    slice: SliceInfo
    holders: tuple[str, ...]


@dataclass(frozen=True)
class Releasing:
    """``slice``'s delete was accepted; it is gone once a read misses it (G1)."""

    slice: SliceInfo


def release_or_defer(
    live: SliceInfo, host_pods: Iterable[Pod], with_version: bool
) -> Delete | Defer:
    """G1, G2: delete the Slice unless other workloads hold chips on its hosts."""
    held = holders(live.name, host_pods)
    if held:
        return Defer(live, tuple(held))
    return Delete(live, live.resource_version if with_version else "")


def confirm_sweep(
    cached: SliceInfo,
    live: SliceInfo | None,
    replica: Replica,
    verdict: Verdict,
    pods: Iterable[Pod],
    host_pods: Iterable[Pod],
) -> Delete | Defer | None:
    """The sweep's decision again, on live values: the Slice (None: gone), the replica, its
    pods and the pods on the Slice's hosts. None when there is nothing to do any more: the
    Slice is gone, replaced (another UID), not ours, terminating, or wanted or pinned now."""
    if live is None or live.uid != cached.uid:
        return None
    if not unwanted(replica, verdict, [live], pods):
        return None
    return release_or_defer(live, host_pods, with_version=True)


def runs_on(name: str, own_pods: Iterable[Pod]) -> tuple[str, ...]:
    """The replica's own pods that still run on Slice ``name`` (terminating ones included,
    finished ones not), sorted: what keeps it through a teardown until the deadline."""
    return tuple(sorted({p.name for p in own_pods if p.slice_name == name and not p.terminal}))


@dataclass(frozen=True)
class InUse:
    """Keep ``slice`` for now: the replica's own ``pods`` still run on it (terminating ones
    included, in their grace period); their going wakes the replica."""

    slice: SliceInfo
    pods: tuple[str, ...]


def teardown(
    owned: Iterable[SliceInfo],
    replica_uid: str,
    host_pods: dict[str, list[Pod]],
    own_pods: Iterable[Pod] = (),
    past_deadline: bool = False,
) -> list[Delete | Defer | Releasing | InUse]:
    """G4, G5: every Slice of a deleted replica goes, from live values, in order: a
    terminating one is on its way; one that a pod of the replica itself still runs on
    (``own_pods``, its terminating pods included) waits for it, so that the partition is not
    taken from an engine in its grace period, until the teardown deadline, past which every
    Slice goes; one on whose hosts other workloads hold chips is deferred (G2). No
    resourceVersion: everything goes, whatever its state."""
    own = list(own_pods)
    steps: list[Delete | Defer | Releasing | InUse] = []
    for s in sorted(owned, key=lambda s: s.name):
        if not s.owned_by(replica_uid):
            continue
        users = runs_on(s.name, own)
        if s.terminating:
            steps.append(Releasing(s))
        elif users and not past_deadline:
            steps.append(InUse(s, users))
        else:
            steps.append(release_or_defer(s, host_pods.get(s.name, []), with_version=False))
    return steps


def waiting_for(step: Delete | Defer | Releasing | InUse) -> str:
    """G5's ``<err>`` for a teardown step whose Slice is not gone yet: kept by other
    workloads' pods, still run on by the replica's own pods, or being released (a delete
    just accepted too: GKE holds the Slice behind its finalizer while it lets the partition
    go)."""
    if isinstance(step, Defer):
        return messages.still_held(step.slice.name, step.holders)
    if isinstance(step, InUse):
        return messages.still_in_use(step.slice.name, step.pods)
    return messages.still_releasing(step.slice.name)

"""Orphan collection (G6): our Slices whose InferenceReplica is gone, left behind when a
replica's finalizer was removed by force, or when a teardown ran past its deadline with a
release failing. They are released by the same rules as any release (G1, G2).

Owns which Slices count as orphans and when one is due: seen in the caches twice, far enough
apart, then confirmed on live values. It must never touch a Slice without our owner-UID label,
nor one whose owner exists, nor release one under a pod that runs on it; and it does no I/O:
the act layer reads live, then asks ``confirm`` with what it read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ome.tpuslice.naming import owner_hash
from ome.tpuslice.slices import SliceInfo

from . import releases
from .model import Pod

#: G6: how long a Slice must stay an orphan in the caches, from its first sighting, before it
#: is confirmed live and released. A replica created a moment ago, or a manager that has just
#: started, may show a Slice before its owner; two sightings this far apart, and a live read
#: after them, keep either from being taken for an orphan.
ORPHAN_GRACE = timedelta(seconds=10)


def is_candidate(found: SliceInfo, owner_cached: bool) -> bool:
    """G6: a Slice the caches show as an orphan: it carries an owner UID (ours, D4), it is not
    already going, and no cached InferenceReplica has that UID."""
    return bool(found.owner_uid) and not found.terminating and not owner_cached


@dataclass(frozen=True)
class OrphanPlan:
    """What to do with one owner UID's orphans now: ``due``, the Slices seen first at least
    the grace ago (to confirm live and release); ``sightings``, the first sighting of each
    candidate by Slice UID (to remember until the next pass); ``look_again``, the seconds until
    the next one falls due (None: none waits)."""

    due: tuple[SliceInfo, ...] = ()
    sightings: Mapping[str, datetime] = field(default_factory=dict)
    look_again: float | None = None


def orphan_pass(
    candidates: Iterable[SliceInfo],
    sightings: Mapping[str, datetime],
    now: datetime,
    grace: timedelta,
) -> OrphanPlan:
    """G6: each candidate is due once it was first seen at least ``grace`` before ``now``;
    one seen now for the first time (or whose sighting lies in the future, as after a clock
    step back) is remembered from now. Sightings of Slices no longer candidates are dropped."""
    due: list[SliceInfo] = []
    kept: dict[str, datetime] = {}
    waits: list[float] = []
    for found in sorted(candidates, key=lambda s: s.name):
        first = sightings.get(found.uid)
        if first is None or first > now:
            first = now
        kept[found.uid] = first
        left = (first + grace - now).total_seconds()
        if left <= 0:
            due.append(found)
        else:
            waits.append(left)
    return OrphanPlan(tuple(due), kept, min(waits) if waits else None)


def names_its_owner(found: SliceInfo) -> bool:
    """Whether the Slice's ``ome.io/slice-owner`` annotation is its owner's, as D2 wrote it:
    the name ends with the hash of that namespace, name and the owner-UID label. Then a read
    of that one InferenceReplica tells whether the owner exists; otherwise only a list of
    them all does."""
    namespace, sep, name = found.owner.partition("/")
    if not (sep and namespace and name and found.owner_uid):
        return False
    return found.name.endswith("-" + owner_hash(namespace, name, found.owner_uid))


def owner_exists(found: SliceInfo, replica_uids: Iterable[str]) -> bool:
    """G6: whether an InferenceReplica with the Slice's owner UID exists, among the UIDs of
    the replicas read live."""
    return bool(found.owner_uid) and found.owner_uid in set(replica_uids)


def confirm(
    cached: SliceInfo,
    live: SliceInfo | None,
    owner_found: bool,
    host_pods: Iterable[Pod],
) -> releases.Delete | releases.Defer | releases.InUse | None:
    """G6 on live values: the Slice (None: gone), whether its owner exists, and the pods
    bound to its hosts. None when there is nothing to do: the Slice is gone, replaced, now
    another's (its owner label changed), already going, or its owner exists. A pod confined to
    the Slice that has not finished (its owner's, in its grace period, or one left running
    when the owner went) keeps it: ``InUse``. Other workloads' pods holding chips defer it
    (G2). Else delete it under its UID and the resourceVersion read, since this decision read
    its labels and state."""
    if live is None or live.uid != cached.uid or live.terminating:
        return None
    if live.owner_uid != cached.owner_uid or not live.owner_uid or owner_found:
        return None
    pods = list(host_pods)
    users = tuple(sorted({p.ref for p in pods if p.slice_name == live.name and not p.terminal}))
    if users:
        return releases.InUse(live, users)
    return releases.release_or_defer(live, pods, with_version=True)

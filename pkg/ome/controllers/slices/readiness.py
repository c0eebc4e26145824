"""Readiness gating (E1 to E6, F1, F2): an Instance about to get pods waits until its
slot's Slice is ours, of the right shape and ready, with every host visible and usable; then
its pods are confined to the Slice by the slice-name node selector. A Slice that has its
partition but stays short of ready past ``slice.readyTimeout`` (E5), or is ready with a host
its pods cannot use (E6), is recycled: released once no pod holds it, and provisioned again.

Owns the holds, the recycles and the confinement of pods about to be created. It must never
do I/O or read a clock (``now`` is given), and never decide about a Slice whose pods run:
only Instances about to get pods are gated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from ome.controllers.holds import HELD_LOOK_AGAIN, Hold
from ome.tpuslice.hosts import Host, instance_host_problems
from ome.tpuslice.naming import Slot
from ome.tpuslice.placement import Demand
from ome.tpuslice.slices import SliceInfo
from ome.tpuslice.types import Config

from . import messages
from .model import Event, Replica, withheld

WaitKind = Literal["conflict", "terminating", "wrong-shape", "not-ready"]


def wait_reason(
    found: SliceInfo, replica_uid: str, demand: Demand, ready_states: tuple[str, ...]
) -> tuple[WaitKind, str] | None:
    """E3: why the slot's pods wait for this Slice, or None when it is ready, checked in
    order: not ours, terminating, wrong type or topology, not ready. A status of Unknown
    reads as unknown readiness whatever the state, since E2 refuses it either way."""
    if not found.owned_by(replica_uid):
        return "conflict", messages.owned_by_another(found.name)
    if found.terminating:
        return "terminating", messages.being_released(found.name)
    have = (found.slice_type, found.topology)
    want = (demand.accelerator.slice_type, str(demand.topology))
    if have != want:
        return "wrong-shape", messages.wrong_shape(found.name, have, want)
    if found.ready(ready_states):
        return None
    if not found.state and not found.partitions:
        return "not-ready", messages.waiting_for_partitions(found.name)
    if not found.state:
        return "not-ready", messages.partitions_without_state(found.name)
    return "not-ready", messages.not_ready(found.name, found.state, found.status, found.message)


def waited(found: SliceInfo, now: datetime) -> timedelta | None:
    """E5: how long the Slice has been out of a ready state: since its Ready condition's last
    transition, or its creation while GKE reports no condition. None when neither is known."""
    since = found.last_transition or found.created
    return now - since if since is not None else None


@dataclass(frozen=True)
class Recycle:
    """A Slice to release and provision again (E5, E6), once no pod holds it: ``reason`` is the
    event to record (SliceReadyTimeout or SliceHostUnavailable), ``text`` the full reason, and
    ``gist`` what of it is news when it changes: the Slice and why, not how long it waited."""

    index: int
    slice: SliceInfo
    reason: str
    text: str
    gist: str = ""


@dataclass(frozen=True)
class SlotVerdict:
    """What the gate says of one slot: a hold (None: the pods go), a recycle, a Warning, and
    whether the Slice is ready (its pods are confined to it)."""

    hold: Hold | None = None
    recycle: Recycle | None = None
    event: Event | None = None
    ready: bool = False


def judge_slot(
    index: int,
    found: SliceInfo,
    hosts: Iterable[Host],
    replica: Replica,
    demand: Demand,
    config: Config,
    now: datetime,
    releasing: bool = False,
) -> SlotVerdict:
    """E3 to E6 for one slot whose Slice exists. ``hosts`` are the nodes labelled with its
    name; ``releasing`` says our delete of it is on its way (the cache does not show it yet).

    Ready: a Slice without partitions waits for them like a new one (E4: never timed out);
    host availability (F) comes before the visible-host count, so a partly visible Slice with
    a broken host is recycled, not waited on forever; and a host counts as usable only if every
    pod of the Instance tolerates it, since any pod may land on any host of its Slice.
    """

    def hold(text: str, look_again: float | None = None) -> Hold:
        return Hold(messages.CAPACITY, text, routine=messages.on_its_way, look_again=look_again)

    settings = config.slice
    if releasing and found.owned_by(replica.uid):
        return SlotVerdict(hold(messages.being_released(found.name)))
    why = wait_reason(found, replica.uid, demand, settings.ready_states)
    if why is not None:
        kind, text = why
        if kind == "conflict":
            event = withheld(messages.SLICE_OWNERSHIP_CONFLICT, replica, index, text)
            return SlotVerdict(hold(text), event=event)
        if kind != "not-ready" or settings.ready_timeout is None or not found.partitions:
            return SlotVerdict(hold(text))
        wait = waited(found, now)
        if wait is None:
            return SlotVerdict(hold(text))
        if wait <= settings.ready_timeout:
            # It times out with no event to say so: the replica looks again as often as at
            # any other held Instance, as before routine holds waited on events.
            return SlotVerdict(hold(text, HELD_LOOK_AGAIN))
        gist = f"{found.uid}: {text}"
        text = messages.ready_timeout(text, wait, settings.ready_timeout)
        recycle = Recycle(index, found, messages.SLICE_READY_TIMEOUT, text, gist)
        return SlotVerdict(hold(text), recycle)
    if not found.partitions:
        return SlotVerdict(hold(messages.waiting_for_partitions(found.name)))
    hosts = list(hosts)
    problems = instance_host_problems(hosts, replica.tolerations)
    if problems:
        text = messages.hosts_unavailable(found.name, found.state, problems)
        recycle = Recycle(
            index, found, messages.SLICE_HOST_UNAVAILABLE, text, f"{found.uid}: {text}"
        )
        return SlotVerdict(hold(text), recycle)
    if len(hosts) < demand.hosts:
        return SlotVerdict(
            hold(messages.hosts_not_visible(found.name, found.state, len(hosts), demand.hosts))
        )
    return SlotVerdict(ready=True)


@dataclass(frozen=True)
class SlotVerdicts:
    """The slot verdicts of the Instances about to get pods, gathered: holds by index,
    recycles, Warnings, the Slice each ready Instance's pods are confined to, and the Slices
    seen ready."""

    holds: dict[int, Hold] = field(default_factory=dict)
    recycles: list[Recycle] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    confine: dict[int, str] = field(default_factory=dict)
    ready: list[SliceInfo] = field(default_factory=list)


def judge_slots(
    replica: Replica,
    demand: Demand,
    slots: Mapping[int, Slot],
    slices: Mapping[str, SliceInfo],
    hosts: Mapping[str, tuple[Host, ...]],
    releasing: frozenset[str],
    config: Config,
    now: datetime,
) -> SlotVerdicts:
    """E3 to E6 (``judge_slot``) for every Instance about to get pods whose slot's Slice
    exists (the others are provisioning's)."""
    out = SlotVerdicts()
    for index, slot in sorted(slots.items()):
        name = replica.slice_name(slot)
        found = slices.get(name)
        if found is None:
            continue
        verdict = judge_slot(
            index, found, hosts.get(name, ()), replica, demand, config, now, name in releasing
        )
        if verdict.hold is not None:
            out.holds[index] = verdict.hold
        if verdict.recycle is not None:
            out.recycles.append(verdict.recycle)
        if verdict.event is not None:
            out.events.append(verdict.event)
        if verdict.ready:
            out.confine[index] = name
            out.ready.append(found)
    return out

"""The two passes that compose the five reconcilers into plan values, from observed values:

- the **gate pass**, asked by the InferenceReplica pass for the Instances about to get pods:
  demand validation, then provisioning of slots without a Slice, then readiness gating;
- the **release pass**, run by the slice controller for every replica: release of unwanted
  Slices, then suspicion of lost ones.

Pure: no I/O, no client, no provider and no clock (``now`` is observed). ``act`` carries the
plans out, confirming each destructive step with live reads and the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from ome.controllers.holds import Hold
from ome.tpuslice.hosts import Host
from ome.tpuslice.naming import Slot
from ome.tpuslice.slices import SliceInfo
from ome.tpuslice.types import Config

from . import losses, messages, provisioning, readiness, releases, validation
from .model import Event, Pod, Replica
from .validation import Verdict


@dataclass(frozen=True, eq=False)
class GateObservation:
    """What the gate pass looks at: the replica, the slots of its Instances about to get pods,
    the accelerators with provision-only nodes, the Slices at those slots' names and the hosts
    labelled with each, the creates and deletes of ours the cache does not show yet, and now."""

    replica: Replica
    config: Config
    slots: Mapping[int, Slot]
    provision_only: frozenset[str] | None
    slices: Mapping[str, SliceInfo]
    hosts: Mapping[str, tuple[Host, ...]]
    creating: frozenset[str]
    releasing: frozenset[str]
    now: datetime
    #: ``validation.validate`` of the replica, when the caller has it already
    verdict: Verdict | None = None


@dataclass(frozen=True)
class GatePlan:
    """Holds by Instance index, Slices to create and to recycle, Warnings (``notices``: once
    per replica generation), the Slice each ready Instance's pods are confined to, and the
    Slices seen ready (for the duration metric). ``verdict`` is the demand it was planned
    for."""

    verdict: Verdict
    holds: dict[int, Hold] = field(default_factory=dict)
    creates: list[provisioning.Create] = field(default_factory=list)
    recycles: list[readiness.Recycle] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    confine: dict[int, str] = field(default_factory=dict)
    ready: list[SliceInfo] = field(default_factory=list)
    #: Warnings to record (and log) once per replica generation, not every pass.
    notices: list[Event] = field(default_factory=list)


def gate_pass(obs: GateObservation) -> GatePlan:
    """Demand, then provisioning, then gating. An invalid demand withholds every Instance
    about to get pods; no demand (not opted in, a static pool) holds nothing and confines
    nothing."""
    verdict = _verdict(obs)
    if verdict.error:
        holds, events = validation.withhold(verdict, obs.replica, obs.slots)
        return GatePlan(verdict, holds=holds, events=events)
    if verdict.no_topology and obs.slots:
        notice = Event(
            messages.SLICE_TOPOLOGY_MISSING,
            messages.no_topology(obs.replica.component, obs.config.topology_label),
        )
        return GatePlan(verdict, notices=[notice])
    if verdict.demand is None or not obs.slots:
        return GatePlan(verdict)
    creates, holds = provisioning.provision(obs.replica, obs.slots, obs.slices, obs.creating)
    judged = readiness.judge_slots(
        obs.replica,
        verdict.demand,
        obs.slots,
        obs.slices,
        obs.hosts,
        obs.releasing,
        obs.config,
        obs.now,
    )
    holds.update(judged.holds)
    return GatePlan(
        verdict,
        holds=holds,
        creates=creates,
        recycles=judged.recycles,
        events=judged.events,
        confine=judged.confine,
        ready=judged.ready,
    )


@dataclass(frozen=True, eq=False)
class ReleaseObservation:
    """What the release pass looks at, from the caches: the replica, the accelerators with
    provision-only nodes, our Slices, the Slices its pods name, its pods, the nodes those are
    bound to (None: not in the cache), and our deletes the cache does not show yet."""

    replica: Replica
    config: Config
    provision_only: frozenset[str] | None
    owned: tuple[SliceInfo, ...]
    named: Mapping[str, SliceInfo]
    pods: tuple[Pod, ...]
    nodes: Mapping[str, Host | None]
    releasing: frozenset[str]
    #: ``validation.validate`` of the replica, when the caller has it already
    verdict: Verdict | None = None


@dataclass(frozen=True)
class ReleasePlan:
    """Slices to release, each to be confirmed live first, and the names of Slices whose
    pods may have lost them, each to be confirmed live first."""

    verdict: Verdict
    releases: list[SliceInfo] = field(default_factory=list)
    suspects: list[str] = field(default_factory=list)


def release_pass(obs: ReleaseObservation) -> ReleasePlan:
    """Release, then loss. A Slice whose delete is already on its way is not released again
    (the cache lags behind our delete); a deleting replica is teardown's."""
    verdict = _verdict(obs)
    unwanted = releases.unwanted(obs.replica, verdict, obs.owned, obs.pods)
    suspects = (
        [] if obs.replica.deleting else losses.suspects(obs.replica, obs.pods, obs.named, obs.nodes)
    )
    return ReleasePlan(
        verdict,
        releases=[s for s in unwanted if s.name not in obs.releasing],
        suspects=suspects,
    )


def _verdict(obs: GateObservation | ReleaseObservation) -> Verdict:
    """C1 and B6 of the observed replica: the caller's, made once per version, when given."""
    if obs.verdict is not None:
        return obs.verdict
    return validation.validate(obs.replica, obs.config, obs.provision_only)

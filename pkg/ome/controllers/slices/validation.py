"""Demand validation (B6, C1, I2): whether an opted-in replica's Instances need a
Slice, of which shape, or cannot have one; a replica whose pods cannot fill a provisionable
Slice has every Instance about to get pods withheld, with a SliceDemandInvalid Warning each.

Owns the verdict and its holds and events. It must never do I/O, read a clock or look at a
Slice: what exists changes nothing about what the pods ask for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ome.controllers.holds import Hold
from ome.tpuslice import placement
from ome.tpuslice.placement import Demand
from ome.tpuslice.types import Config

from . import messages
from .model import Event, Replica, withheld


@dataclass(frozen=True)
class Verdict:
    """A replica's demand: the Slice shape every Instance needs (``demand``), none (not opted
    in, or a pool OME does not provision: pods are created unconfined), or ``error``, the
    user's reason its pods cannot have one."""

    demand: Demand | None = None
    error: str = ""
    #: Opted in, but no pod selects a topology (B6.2): no Slice, and the user is told.
    no_topology: bool = False


def validate(replica: Replica, config: Config, provision_only: Iterable[str] | None) -> Verdict:
    """C1 then B6. ``provision_only`` holds the accelerator label values that have
    provision-only nodes; None when they could not be read (B6.3: checked as if they had)."""
    if not replica.opted_in:
        return Verdict()
    known = set(provision_only) if provision_only is not None else None
    try:
        found = placement.demand(list(replica.pod_specs), config, known)
    except placement.DemandError as e:
        return Verdict(error=str(e))
    if found is None and all(placement.pod_shape(s, config) is None for s in replica.pod_specs):
        return Verdict(no_topology=True)  # (pod_shape cannot raise here: demand checked it)
    return Verdict(found)


def withhold(
    verdict: Verdict, replica: Replica, indexes: Iterable[int]
) -> tuple[dict[int, Hold], list[Event]]:
    """I: an invalid demand withholds each Instance about to get pods, with a
    SliceDemandInvalid Warning on the InferenceService for each."""
    if not verdict.error:
        return {}, []
    holds: dict[int, Hold] = {}
    events: list[Event] = []
    for index in sorted(indexes):
        holds[index] = Hold(messages.DEMAND_INVALID, verdict.error)
        events.append(withheld(messages.SLICE_DEMAND_INVALID, replica, index, verdict.error))
    return holds, events

"""Slice provisioning (D1 to D3, E3: a slot without a Slice): an Instance about to get
pods whose slot has no Slice gets one, and waits for partition assignment meanwhile.

Owns which Slices to create. It must never create a Slice for a slot that the replica's
*stored* Instance rows do not want (G3): release decides from stored rows too, so a Slice
created before the row that wants it is stored could be released as unwanted. Such a slot
waits one pass, until the status write that wants it lands. It never modifies or adopts an
existing Slice, and never does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ome.controllers.holds import Hold
from ome.tpuslice.naming import Slot
from ome.tpuslice.slices import SliceInfo

from . import messages
from .model import Replica, wanted_slots


@dataclass(frozen=True)
class Create:
    """A Slice to create for ``slot``, at ``name``, for Instance ``index``."""

    index: int
    slot: Slot
    name: str


def provision(
    replica: Replica,
    slots: Mapping[int, Slot],
    slices: Mapping[str, SliceInfo],
    creating: frozenset[str],
) -> tuple[list[Create], dict[int, Hold]]:
    """For each Instance about to get pods (``slots``) whose Slice the cache does not show:
    a create, unless one is already in flight (``creating``: created and not yet seen) or the
    stored rows do not want the slot yet; and a hold, since a new Slice waits for partition
    assignment. Slots whose Slice exists are the gate's."""
    wanted = wanted_slots(replica)
    creates: list[Create] = []
    holds: dict[int, Hold] = {}
    for index, slot in sorted(slots.items()):
        name = replica.slice_name(slot)
        if name in slices:
            continue
        holds[index] = Hold(
            messages.CAPACITY, messages.waiting_for_partitions(name), routine=messages.on_its_way
        )
        if name not in creating and slot in wanted:
            creates.append(Create(index, slot, name))
    return creates, holds

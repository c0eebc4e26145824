"""What a Slice says of itself, as a plain value (D4, E1, E2): its identity, owner,
slot, shape, Ready condition and partitions. ``ome.provider.gke`` reads the object into it; the
reconcilers decide from it and never see the provider's field paths.

Pure: no I/O, no client and no provider types.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ome.tpuslice.naming import Slot


@dataclass(frozen=True)
class SliceInfo:
    """One Slice, as observed (from a cache or a live read).

    ``state``, ``status`` and ``message`` are those of its first ``Ready`` condition (``""``
    when it has none), ``last_transition`` that condition's time; ``owner_uid`` is its
    ``ome.io/slice-owner-uid`` label, ``owner`` its ``ome.io/slice-owner`` annotation
    (``namespace/name``) and ``slot`` what its index and ordinal labels name (None unless both
    are canonical integers).
    """

    name: str
    uid: str
    resource_version: str = ""
    created: datetime | None = None
    owner_uid: str = ""
    owner: str = ""
    slot: Slot | None = None
    slice_type: str = ""
    topology: str = ""
    state: str = ""
    status: str = ""
    message: str = ""
    last_transition: datetime | None = None
    terminating: bool = False
    partitions: tuple[str, ...] = ()

    def owned_by(self, replica_uid: str) -> bool:
        """D4: only ``ome.io/slice-owner-uid`` equal to the replica's UID makes a Slice ours.
        An empty UID owns nothing, so a Slice with an empty label is never adopted."""
        return bool(replica_uid) and self.owner_uid == replica_uid

    def ready(self, ready_states: tuple[str, ...]) -> bool:
        """E2: not terminating, the state is one of ``ready_states``, status not Unknown."""
        return not self.terminating and self.state in ready_states and self.status != "Unknown"

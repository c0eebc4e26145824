"""What an Instance waits on before it gets its pods (E7, E8), as values shared by the
InferenceReplica controller, which settles its plan with them, and by the gates that give
them (the slices' gate pass, a rebuild backoff). Pure: plain values, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ome.kube import JSON


@dataclass(frozen=True)
class Hold:
    """Why an Instance's pods are withheld: a waiting token (e.g. ``CapacityProvisioning``)
    and the message recorded as its last failure. ``routine`` says of a reason of this
    token whether it only tells that the wait is on its usual way (a new Slice's passage
    through its states): between two such reasons a user reads no difference, so a new
    wording waits ``HOLD_ROUTINE_REWORD_AFTER`` (None: every wording is news). A gate that
    gives ``routine`` promises that its watches wake the replica when such a wait moves on,
    so a routine hold is not polled (``HELD_LOOK_AGAIN``); ``look_again`` is then when its
    answer changes with no event (a deadline), in seconds (None: never)."""

    token: str
    message: str
    routine: Callable[[str], bool] | None = field(default=None, compare=False)
    look_again: float | None = field(default=None, compare=False)


#: A held Instance is looked at again this often, unless its hold is routine (the capacity
#: on its way), whose ending an event always announces.
HELD_LOOK_AGAIN = 5.0


@dataclass(frozen=True)
class Gated:
    """A gate's answer for the Instances about to get pods: ``holds`` by index (the first gate
    that holds an Instance wins), node selector entries to add to each index's pods, and
    ``failed`` when a write the gate made failed (the pass is then retried with backoff)."""

    holds: Mapping[int, Hold] = field(default_factory=dict)
    node_selectors: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    failed: bool = False


#: (replica, {instance index: the pods it is about to get}) -> what may go ahead, and how.
GateFunc = Callable[[JSON, Mapping[int, list[JSON]]], Gated]

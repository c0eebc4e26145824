"""What an Instance waits on before it gets its pods (E7, E8), as values shared by the
InferenceReplica controller, which settles its plan with them, and by the gates that give
them (the slices' gate pass, a rebuild backoff); and the record a hold leaves in the
Instance's row (``hold_failure_message``), read back by whoever explains the wait
(``hold_reason``: the InferenceService's conditions, ``kubectl ome``). Pure: plain values,
no I/O.
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


#: E7: what comes between a held operation's token and its reason in its ``lastFailure``.
_HELD = ": pod {pod} is withheld until its capacity is ready: "


def hold_failure_message(token: str, pod: str, reason: str) -> str:
    """E7: the ``lastFailure.message`` of a held operation: ``<token>: pod <pod> is withheld
    until its capacity is ready: <reason>``."""
    return f"{token}{_HELD.format(pod=pod)}{reason}"


def hold_reason(failure: object) -> str | None:
    """The hold's own reason (what ``hold_failure_message`` was given) from a stored
    ``lastFailure``, or None when the failure is not a hold's record."""
    if not isinstance(failure, dict):
        return None
    token, pod, message = failure.get("reason"), failure.get("podName"), failure.get("message")
    if not (isinstance(token, str) and isinstance(pod, str) and isinstance(message, str)):
        return None
    prefix = f"{token}{_HELD.format(pod=pod)}"
    return message[len(prefix) :] if message.startswith(prefix) else None

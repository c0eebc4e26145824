"""Which events go first on the workqueues: what unblocks work already waiting (a Slice
turning ready or lost, a host changing, a holder or a pod going) goes ahead of new work (a
new replica, a Slice just created) and of the first list after a start."""

from __future__ import annotations

from typing import Any

from ome.controllers.slices.reconciler import holder_event_priority
from ome.kube import JSON
from ome.runtime.controller import Controller, always_high, gone_high
from ome.runtime.informer import EventHandler
from ome.runtime.workqueue import PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL, RateLimitingQueue
from test.unit.test_slices_routing import routing_only


def raw_slice(
    state: str = "",
    status: str = "Unknown",
    partitions: tuple[str, ...] = (),
    terminating: bool = False,
    rv: str = "1",
) -> JSON:
    """A Slice ``s`` at resourceVersion ``rv``: distinct contents get distinct versions, as
    the API server gives them (views are parsed once per version)."""
    meta: JSON = {"name": "s", "uid": "u", "resourceVersion": rv}
    if terminating:
        meta["deletionTimestamp"] = "2026-12-03T05:00:00Z"
    ready: JSON = {"type": "Ready", "status": status, "message": "m"}
    if state:
        ready["reason"] = state
    return {
        "metadata": meta,
        "spec": {"partitionIds": list(partitions)},
        "status": {"conditions": [ready]},
    }


WAITING = raw_slice()
ACTIVATING = raw_slice("ACTIVATING", "False", ("p1", "p2"), rv="2")
ACTIVE = raw_slice("ACTIVE", "True", ("p1", "p2"), rv="3")


def test_a_slice_turning_ready_goes_first_and_its_creation_does_not() -> None:
    rank = routing_only().slice_event_priority
    assert rank(None, WAITING) == PRIORITY_NORMAL  # created: new work
    assert rank(ACTIVATING, ACTIVE) == PRIORITY_HIGH  # ready: its pods can go on it
    assert rank(ACTIVE, raw_slice("ACTIVE", "True", ("p1", "p2"), rv="4")) == PRIORITY_NORMAL


def test_a_slice_lost_failing_or_going_goes_first() -> None:
    rank = routing_only().slice_event_priority
    assert rank(ACTIVE, raw_slice("ACTIVE", "True", ("p1",), rv="4")) == PRIORITY_HIGH
    assert rank(ACTIVE, raw_slice("DEGRADED", "False", ("p1", "p2"), rv="5")) == PRIORITY_HIGH
    assert rank(ACTIVATING, raw_slice("FAILED", "False", ("p1", "p2"), rv="6")) == PRIORITY_HIGH
    assert rank(ACTIVE, raw_slice("ACTIVE", "True", ("p1", "p2"), True, "7")) == PRIORITY_HIGH
    assert rank(ACTIVE, None) == PRIORITY_HIGH  # deleted: a release or a teardown is done


def test_partitions_assigned_go_first_but_a_first_state_does_not() -> None:
    rank = routing_only().slice_event_priority
    assigned = raw_slice(partitions=("p1", "p2"), rv="5")
    assert rank(WAITING, assigned) == PRIORITY_HIGH
    assert rank(assigned, ACTIVATING) == PRIORITY_NORMAL


def test_holders_and_pods_going_go_first() -> None:
    pod: JSON = {"metadata": {"name": "p"}}
    assert holder_event_priority(None, pod) == PRIORITY_NORMAL
    assert holder_event_priority(pod, pod) == PRIORITY_HIGH
    assert holder_event_priority(pod, None) == PRIORITY_HIGH
    assert gone_high(None, pod) == gone_high(pod, pod) == PRIORITY_NORMAL
    assert gone_high(pod, None) == PRIORITY_HIGH
    assert always_high(None, pod) == PRIORITY_HIGH


class _Informer:
    """What ``Controller.watch`` asks of an informer: its handler, and whether it synced."""

    def __init__(self) -> None:
        self.synced = False
        self.handler: EventHandler | None = None

    def has_synced(self) -> bool:
        return self.synced

    def add_handler(self, handler: EventHandler) -> None:
        self.handler = handler


def obj(name: str) -> JSON:
    return {"metadata": {"name": name, "namespace": "ns"}}


def drain(queue: RateLimitingQueue) -> list[Any]:
    out = []
    while len(queue):
        key = queue.get(timeout=0)
        out.append(key)
        queue.done(key)
    return out


def watching() -> tuple[Controller, _Informer, Any]:
    """A controller watching a fake informer with ``gone_high``, and the handler it set."""
    controller = Controller("c", lambda _key: None, queue=RateLimitingQueue())
    informer = _Informer()
    controller.watch(informer, priority=gone_high)  # type: ignore[arg-type]
    handler = informer.handler
    assert handler is not None and handler.on_add and handler.on_delete and handler.on_update
    return controller, informer, handler


def test_the_first_list_waits_behind_what_unblocks_and_new_objects_after_it() -> None:
    controller, informer, handler = watching()
    handler.on_add(obj("listed-1"))
    handler.on_add(obj("listed-2"))
    informer.synced = True
    handler.on_add(obj("new"))
    handler.on_update(obj("changed"), obj("changed"))
    handler.on_delete(obj("gone"))
    want = ["ns/gone", "ns/new", "ns/changed", "ns/listed-1", "ns/listed-2"]
    assert drain(controller.queue) == want


def test_an_event_raises_a_key_already_queued_low() -> None:
    controller, informer, handler = watching()
    for name in ("a", "b", "c"):
        handler.on_add(obj(name))
    informer.synced = True
    handler.on_delete(obj("c"))
    controller.enqueue("ns/b", PRIORITY_HIGH)
    assert drain(controller.queue) == ["ns/b", "ns/c", "ns/a"]
    assert PRIORITY_LOW < PRIORITY_NORMAL < PRIORITY_HIGH

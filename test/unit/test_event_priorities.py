"""Which events go first on the workqueues: what unblocks work already waiting (a Slice
turning ready or lost, a host of a ready Slice or a host lost, a holder or a pod going) goes ahead of new work (a
new replica, a Slice just created) and of the first list after a start."""

from __future__ import annotations

from typing import Any

from ome.controllers.slices.reconciler import holder_event_priority
from ome.kube import JSON
from ome.runtime.controller import Controller, gone_high
from ome.runtime.informer import EventHandler
from ome.runtime.workqueue import PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL, RateLimitingQueue
from test.unit.slicekit import CONFIG
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


def test_a_slice_on_its_way_is_new_work_and_waits_behind_what_unblocks() -> None:
    """Partitions assigned, and a state on the usual way to ready, unblock no pod: they wait
    behind the Slices that turn ready (at 2,000 services they queued among them, and a
    ready Slice's pods waited behind hundreds of Slices still activating)."""
    rank = routing_only().slice_event_priority
    assigned = raw_slice(partitions=("p1", "p2"), rv="5")
    assert rank(WAITING, assigned) == PRIORITY_NORMAL
    assert rank(assigned, ACTIVATING) == PRIORITY_NORMAL
    not_created = raw_slice("SliceNotCreated", "False", rv="6")
    assert rank(not_created, raw_slice("ACTIVATING", "False", rv="7")) == PRIORITY_NORMAL
    assert rank(ACTIVATING, raw_slice("FAILED", "False", ("p1", "p2"), rv="8")) == PRIORITY_HIGH


class _Slices:
    """The Slice cache ``host_event_priority`` reads: ``peek`` by name."""

    def __init__(self, *objs: JSON) -> None:
        self.objs = {o["metadata"]["name"]: o for o in objs}

    def peek(self, name: str) -> JSON | None:
        return self.objs.get(name)


def node(
    slice_name: str = "", unschedulable: bool = False, ready: str = "True", rv: str = "1"
) -> JSON:
    labels = {CONFIG.slice_label: slice_name} if slice_name else {}
    return {
        "metadata": {"name": "host-0", "resourceVersion": rv, "labels": labels},
        "spec": {"unschedulable": unschedulable},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def test_a_host_goes_first_when_it_unblocks_or_ends_work_not_when_its_slice_is_on_its_way() -> None:
    reconcilers = routing_only()
    rank = reconcilers.host_event_priority
    reconcilers.slices = _Slices(ACTIVATING)  # type: ignore[assignment]
    assert rank(node(), node("s", rv="2")) == PRIORITY_NORMAL  # joins a Slice on its way
    assert rank(None, node("s")) == PRIORITY_NORMAL
    reconcilers.slices = _Slices(ACTIVE)  # type: ignore[assignment]
    assert rank(node(), node("s", rv="2")) == PRIORITY_HIGH  # the last host of a ready Slice
    assert rank(None, node("s")) == PRIORITY_HIGH
    reconcilers.slices = _Slices()  # type: ignore[assignment]
    assert rank(node("s"), node(rv="2")) == PRIORITY_HIGH  # leaves its Slice: a loss
    assert rank(node("s"), node("s", unschedulable=True, rv="2")) == PRIORITY_HIGH
    assert rank(node("s"), node("s", ready="Unknown", rv="2")) == PRIORITY_HIGH
    assert rank(node("s"), None) == PRIORITY_HIGH
    assert rank(node(), node(rv="2")) == PRIORITY_NORMAL


def test_holders_and_pods_going_go_first() -> None:
    pod: JSON = {"metadata": {"name": "p"}}
    assert holder_event_priority(None, pod) == PRIORITY_NORMAL
    assert holder_event_priority(pod, pod) == PRIORITY_HIGH
    assert holder_event_priority(pod, None) == PRIORITY_HIGH
    assert gone_high(None, pod) == gone_high(pod, pod) == PRIORITY_NORMAL
    assert gone_high(pod, None) == PRIORITY_HIGH


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


def watched_alike(**watch: Any) -> tuple[Controller, Controller, EventHandler, list[str]]:
    """A controller ``main`` watching a synced informer ``also`` for ``gated``, with
    ``watch``'s predicates; its handler, and the names its keys were worked out for (each
    object's key is ``ns/owner-of-<name>``)."""
    routed: list[str] = []

    def keys(o: JSON) -> list[str]:
        routed.append(o["metadata"]["name"])
        return [f"ns/owner-of-{o['metadata']['name']}"]

    gated = Controller("gated", lambda _key: None, queue=RateLimitingQueue())
    main = Controller("main", lambda _key: None, queue=RateLimitingQueue())
    informer = _Informer()
    informer.synced = True
    main.watch(informer, keys=keys, also=[gated], **watch)  # type: ignore[arg-type]
    handler = informer.handler
    assert handler is not None and handler.on_add and handler.on_delete and handler.on_update
    return main, gated, handler, routed


def test_controllers_that_watch_alike_get_every_event_routed_once_at_the_same_priority() -> None:
    """The slice controller and the InferenceReplica controller are woken by the same Slice
    and host events: one handler works out each event's keys, predicate and priority, and
    queues the keys for both."""
    main, gated, handler, routed = watched_alike(
        changed=lambda old, new: old != new, priority=gone_high
    )
    assert handler.on_add and handler.on_update and handler.on_delete
    handler.on_add(obj("new"))
    handler.on_update(obj("same"), obj("same"))  # no news: neither queue gets it
    handler.on_delete(obj("gone"))
    assert routed == ["new", "gone"], "each event routed once, not once per controller"
    for controller in (main, gated):
        assert drain(controller.queue) == ["ns/owner-of-gone", "ns/owner-of-new"]


def test_a_controller_that_reads_less_is_queued_only_what_it_reads() -> None:
    """``changed_here``: an update that the shared predicate passes but this controller's
    narrower one does not goes to the ``also`` controllers alone, routed once."""
    main, gated, handler, routed = watched_alike(
        changed=lambda old, new: old != new,
        changed_here=lambda old, new: old.get("spec") != new.get("spec"),
    )
    assert handler.on_update
    handler.on_update(obj("same"), obj("same"))  # news to neither
    assert drain(main.queue) == drain(gated.queue) == []
    handler.on_update(obj("status"), {**obj("status"), "status": {"phase": "Running"}})
    assert drain(main.queue) == []
    assert drain(gated.queue) == ["ns/owner-of-status"]
    handler.on_update(obj("spec"), {**obj("spec"), "spec": {"x": 1}})
    assert drain(main.queue) == drain(gated.queue) == ["ns/owner-of-spec"]
    assert routed == ["status", "status", "spec", "spec"], "old and new keys, once per event"


class _Cache(_Informer):
    """A synced fake informer that caches nothing: what the slice controller's watches and
    their routing read of the informers they are not fed through."""

    def __init__(self) -> None:
        super().__init__()
        self.synced = True

    def peek_by_index(self, _index: str, _value: str) -> list[JSON]:
        return []

    def peek(self, _name: str) -> None:
        return None


def test_a_slice_update_that_changes_nothing_either_controller_reads_wakes_neither() -> None:
    """The passes the slice controller gates read a Slice as ``gke.parse`` does: an update
    with a new resourceVersion and a finalizer or a provider's status field added queues no
    pass; a change of its state queues them. Release and loss read less of it (not its
    state): only a change of what they read (its partitions, its deletion) queues the slice
    controller too, routed once for both."""
    reconcilers = routing_only()
    for name in ("replicas", "pods", "slices", "nodes", "holders"):
        setattr(reconcilers, name, _Cache())
    gated = Controller("gated", lambda _key: None, queue=RateLimitingQueue())
    main = reconcilers.controller(gated=[gated])
    handler = reconcilers.slices.handler
    assert handler is not None and handler.on_update

    def owned(source: JSON, rv: str) -> JSON:
        out = {**source, "metadata": {**source["metadata"], "resourceVersion": rv}}
        out["metadata"]["annotations"] = {"ome.io/slice-owner": "ns/engine"}
        return out

    before = owned(ACTIVATING, "2")
    unread = owned(ACTIVATING, "7")
    unread["metadata"]["finalizers"] = ["provider.example/cleanup"]
    unread["status"] = {**unread["status"], "observedGeneration": 3}
    handler.on_update(before, unread)
    assert drain(main.queue) == drain(gated.queue) == []
    handler.on_update(unread, owned(ACTIVE, "8"))
    assert drain(main.queue) == []
    assert drain(gated.queue) == ["ns/engine"]
    handler.on_update(owned(ACTIVE, "8"), owned(raw_slice("ACTIVE", "True", ("p1",), rv="9"), "9"))
    assert drain(main.queue) == drain(gated.queue) == ["ns/engine"]
    going = owned(raw_slice("ACTIVE", "True", ("p1",), True, "10"), "10")
    handler.on_update(owned(raw_slice("ACTIVE", "True", ("p1",), rv="9"), "9"), going)
    assert drain(main.queue) == drain(gated.queue) == ["ns/engine"]


class _SliceCache(_Cache):
    """The Slices' cache with one Slice, ``s``, of the replica ``ns/engine``."""

    def peek(self, name: str) -> JSON | None:  # type: ignore[override]
        if name != "s":
            return None
        owned = raw_slice("ACTIVE", "True", ("p1",), rv="3")
        owned["metadata"]["annotations"] = {"ome.io/slice-owner": "ns/engine"}
        return owned


def test_a_host_joining_its_slice_wakes_only_the_gated_passes_and_leaving_it_wakes_both() -> None:
    """The node watch, wired: a host gaining the slice label (joining ``s``) or cordoned is
    news to the passes the slice controller gates, not to release and loss; the label
    removed (the host leaving ``s``) is news to both."""
    reconcilers = routing_only()
    for name in ("replicas", "pods", "nodes", "holders"):
        setattr(reconcilers, name, _Cache())
    reconcilers.slices = _SliceCache()
    gated = Controller("gated", lambda _key: None, queue=RateLimitingQueue())
    main = reconcilers.controller(gated=[gated])
    handler = reconcilers.nodes.handler
    assert handler is not None and handler.on_update
    label = CONFIG.slice_label

    def host(rv: str, labels: JSON, unschedulable: bool = False) -> JSON:
        return {
            "metadata": {"name": "node-a", "resourceVersion": rv, "labels": labels},
            "spec": {"unschedulable": unschedulable},
        }

    handler.on_update(host("1", {}), host("2", {label: "s"}))
    assert drain(main.queue) == []
    assert drain(gated.queue) == ["ns/engine"]
    handler.on_update(host("2", {label: "s"}), host("3", {label: "s"}, unschedulable=True))
    assert drain(main.queue) == []
    assert drain(gated.queue) == ["ns/engine"]
    handler.on_update(host("3", {label: "s"}, unschedulable=True), host("4", {}))
    assert drain(main.queue) == drain(gated.queue) == ["ns/engine"]

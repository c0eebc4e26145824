"""G6, wired: which events route a Slice to the orphan controller (only once the replica cache
has synced, only a Slice the caches show as an orphan), what its scan queues, and its pass:
two sightings the grace apart before anything is read live. Real informers over a fake list,
a clock that moves only when told; no server."""

from __future__ import annotations

import copy
from typing import Any

from prometheus_client import CollectorRegistry

from ome.api.v1beta1 import INFERENCE_REPLICAS
from ome.controllers.slices import orphans
from ome.controllers.slices.metrics import SliceMetrics
from ome.controllers.slices.reconciler import (
    ORPHAN_SCAN,
    ORPHAN_SCAN_PERIOD,
    SliceReconcilers,
)
from ome.provider import gke
from ome.runtime.expectations import Expectations
from ome.runtime.informer import Informer
from ome.runtime.rest import NODES, PODS
from ome.tpuslice.naming import Slot
from test.unit import slicekit
from test.unit.slicekit import CONFIG, JSON, NAME, NAMESPACE, NOW, UID
from test.unit.test_event_priorities import drain


class _Rest:
    """Lists one page of objects, as ``Rest.list_all`` does."""

    def __init__(self, items: list[JSON]) -> None:
        self.items = items

    def list_all(self, *_args: Any, transform: Any = None, **_kw: Any) -> tuple[list[JSON], str]:
        return [transform(o) if transform else copy.deepcopy(o) for o in self.items], "10"


class _Client:
    """The live reads and deletes of the act layer: the Slices as listed, no replica, no
    host; every request recorded."""

    def __init__(self, slices: list[JSON]) -> None:
        self.slices = {s["metadata"]["name"]: s for s in slices}
        self.sent: list[str] = []

    def live_get_or_none(self, res: Any, name: str, namespace: str | None = None) -> JSON | None:
        self.sent.append(f"get {res.plural} {name}")
        return copy.deepcopy(self.slices.get(name)) if res == gke.SLICES else None

    def live_list(self, res: Any, *_args: Any, **_kw: Any) -> list[JSON]:
        self.sent.append(f"list {res.plural}")
        return []

    def delete(self, res: Any, name: str, *_args: Any, **kw: Any) -> JSON:
        self.sent.append(f"delete {res.plural} {name} uid={kw.get('uid')}")
        return {}


class _Recorder:
    def event(self, *_args: Any) -> None:
        pass

    def lasting(self, *_args: Any, **_kw: Any) -> None:
        pass


def ours(instance: int = 0, **meta: Any) -> JSON:
    replica = slicekit.replica(rows=[slicekit.row(0)])
    body = gke.body(replica.raw, Slot(instance, 0), slicekit.ONE_HOST, CONFIG, replica.annotations)
    body["metadata"].update({"uid": f"slice-uid-{instance}", "resourceVersion": "42", **meta})
    return body


def replica_obj(uid: str = UID) -> JSON:
    return {"metadata": {"name": NAME, "namespace": NAMESPACE, "uid": uid, "resourceVersion": "7"}}


class World:
    """The slice reconcilers over informers filled from lists, with the orphan controller."""

    def __init__(self, slices: list[JSON], replicas: list[JSON], synced: bool = True) -> None:
        self.now = NOW
        self.client = _Client(slices)
        inf = {
            name: Informer(_Rest(items), res)  # type: ignore[arg-type]
            for name, res, items in (
                ("slices", gke.SLICES, slices),
                ("nodes", NODES, []),
                ("pods", PODS, []),
                ("replicas", INFERENCE_REPLICAS, replicas),
            )
        }
        self.informers = inf
        self.reconcilers = SliceReconcilers(
            self.client,  # type: ignore[arg-type]
            CONFIG,
            inf["slices"],
            inf["nodes"],
            inf["pods"],
            inf["pods"],
            inf["replicas"],
            _Recorder(),  # type: ignore[arg-type]
            SliceMetrics(CONFIG, CollectorRegistry()),
            Expectations(),
            clock=lambda: self.now,
        )
        self.controller = self.reconcilers.orphan_controller()
        for name, informer in inf.items():
            if name != "replicas" or synced:
                informer._relist()

    def queued(self) -> list[Any]:
        return drain(self.controller.queue)


def test_the_controller_starts_with_its_scan_and_the_scan_queues_each_orphans_owner() -> None:
    """The Slices were listed before the replicas (as at a start): none routed then, since
    each would have looked like an orphan; the scan queued first finds the one that is."""
    gone_owner = ours(0)
    owned = ours(1, labels={**ours(1)["metadata"]["labels"], "ome.io/slice-owner-uid": "live"})
    foreign = {"metadata": {"name": "team-b", "uid": "f", "resourceVersion": "1"}}
    world = World([gone_owner, owned, foreign], [replica_obj("live")])
    assert world.queued() == [ORPHAN_SCAN]
    result = world.reconcilers.collect_orphans(ORPHAN_SCAN)
    assert result is not None and result.requeue_after == ORPHAN_SCAN_PERIOD
    assert world.queued() == [UID]


def test_once_synced_a_slice_event_routes_only_an_orphan() -> None:
    world = World([], [replica_obj("live")])
    world.queued()
    slices = world.informers["slices"]
    live_owner = ours(1, labels={**ours(1)["metadata"]["labels"], "ome.io/slice-owner-uid": "live"})
    for obj in (
        live_owner,
        {"metadata": {"name": "team-b", "uid": "f", "resourceVersion": "1"}},
        ours(2, deletionTimestamp="2025-03-01T11:00:00Z"),
    ):
        slices._apply({"type": "ADDED", "object": obj})
    assert world.queued() == []
    slices._apply({"type": "ADDED", "object": ours(0)})
    assert world.queued() == [UID]


def test_before_the_replica_cache_syncs_no_slice_routes_to_the_orphan_controller() -> None:
    world = World([ours(0)], [replica_obj()], synced=False)
    assert world.queued() == [ORPHAN_SCAN]
    world.informers["replicas"]._relist()
    assert world.queued() == [], "its owner is cached: no orphan"


def test_a_replica_going_queues_its_uid_when_it_owns_slices() -> None:
    world = World([ours(0)], [replica_obj(), replica_obj("no-slices")])
    world.queued()
    replicas = world.informers["replicas"]
    replicas._apply({"type": "DELETED", "object": replica_obj()})
    assert world.queued() == [UID]


def test_an_orphan_is_read_live_only_at_its_second_sighting_after_the_grace() -> None:
    found = ours(0)
    name = found["metadata"]["name"]
    world = World([found], [])
    first = world.reconcilers.collect_orphans(UID)
    assert first is not None and first.requeue_after == orphans.ORPHAN_GRACE.total_seconds()
    assert world.client.sent == [], "nothing read live at the first sighting"
    world.now = NOW + orphans.ORPHAN_GRACE / 2
    early = world.reconcilers.collect_orphans(UID)
    assert early is not None and early.requeue_after == (orphans.ORPHAN_GRACE / 2).total_seconds()
    assert world.client.sent == []
    world.now = NOW + orphans.ORPHAN_GRACE
    assert world.reconcilers.collect_orphans(UID) is None
    assert world.client.sent[0] == f"get slices {name}"
    assert world.client.sent[-1] == f"delete slices {name} uid=slice-uid-0"
    # Its delete is expected: the cache still showing the Slice does not send another.
    world.now = NOW + orphans.ORPHAN_GRACE * 3
    sent = len(world.client.sent)
    world.reconcilers.collect_orphans(UID)
    assert len(world.client.sent) == sent


def test_an_owner_seen_again_forgets_the_sighting() -> None:
    found = ours(0)
    world = World([found], [])
    world.reconcilers.collect_orphans(UID)
    world.informers["replicas"]._apply({"type": "ADDED", "object": replica_obj()})
    world.now = NOW + orphans.ORPHAN_GRACE * 2
    assert world.reconcilers.collect_orphans(UID) is None
    assert world.client.sent == []
    assert world.reconcilers.actor.ledger.sightings(UID) == {}
    # Gone again: its sighting starts over.
    world.informers["replicas"]._apply({"type": "DELETED", "object": replica_obj()})
    again = world.reconcilers.collect_orphans(UID)
    assert again is not None and again.requeue_after == orphans.ORPHAN_GRACE.total_seconds()
    assert world.reconcilers.actor.ledger.sightings(UID) == {"slice-uid-0": world.now}

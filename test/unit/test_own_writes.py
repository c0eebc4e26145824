"""A controller's own writes coming back on its watch wake no pass: the pass that wrote an
object's status (or its finalizer) planned from all it then knew, so the version it stored
is no news to it. Anyone else's write is, as before. In a burst these echoes were three
passes a service of the InferenceReplica and InferenceService controllers that did nothing.
And a pass that adds the teardown finalizer goes on in the same pass, rather than waiting
for the update to come back. In-memory fakes of the API and of the informers; no server."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from ome.api.v1beta1 import FINALIZER_IR_TEARDOWN, INFERENCE_REPLICAS
from ome.controllers.inferencereplica.controller import InferenceReplicaReconciler
from ome.controllers.inferenceservice.controller import InferenceServiceReconciler
from ome.kube import Resource
from ome.runtime.controller import Controller
from ome.runtime.informer import EventHandler
from test.unit import test_replica_cache_lag as lag
from test.unit import test_stale_cache as stale
from test.unit.test_event_priorities import drain

JSON = dict[str, Any]


class Api(lag.Api):
    """The fake server of the cache-lag tests, taking merge patches of the metadata too, and
    keeping every version of each object it stored, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.stored: dict[str, list[JSON]] = {}

    def _stored(self, plural: str, key: str, obj: JSON) -> JSON:
        out = super()._stored(plural, key, obj)
        self.stored.setdefault(key, []).append(copy.deepcopy(out))
        return out

    def patch(  # type: ignore[override]
        self, res: Resource, name: str, body: JSON, namespace: str | None = None, **_kw: Any
    ) -> JSON:
        key = f"{namespace}/{name}"
        current = copy.deepcopy(self.of(res.plural)[key])
        assert body["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
        current["metadata"]["finalizers"] = body["metadata"]["finalizers"]
        return self._stored(res.plural, key, current)


class Watched(lag.Cache):
    """A cache whose watch the test drives: the handlers a controller adds, always synced."""

    def __init__(self, api: lag.Api, plural: str) -> None:
        super().__init__(api, plural)
        self.handlers: list[EventHandler] = []

    def add_handler(self, handler: EventHandler) -> None:
        self.handlers.append(handler)

    def has_synced(self) -> bool:
        return True

    def updated(self, old: JSON, new: JSON) -> None:
        for handler in self.handlers:
            assert handler.on_update is not None
            handler.on_update(old, new)


def queued(controller: Controller) -> list[str]:
    return [str(k) for k in drain(controller.queue)]


def test_a_replica_is_not_woken_by_its_own_writes_and_is_by_anyone_elses() -> None:
    api = Api()
    fresh = lag.replica("img:1")
    fresh["metadata"]["finalizers"] = []
    first = api.create(INFERENCE_REPLICAS, fresh, lag.NS)
    replicas, pods = Watched(api, INFERENCE_REPLICAS.plural), Watched(api, "pods")
    reconciler = InferenceReplicaReconciler(
        api,  # type: ignore[arg-type]
        replicas,  # type: ignore[arg-type]
        pods,  # type: ignore[arg-type]
        lag.Recorder(),  # type: ignore[arg-type]
        clock=lambda: datetime(2026, 12, 7, 12, 0, tzinfo=UTC),
    )
    controller = reconciler.controller()

    reconciler.reconcile(lag.KEY)
    # One pass: the finalizer, the pod and the status, each written once.
    versions = api.stored[lag.KEY]
    assert len(versions) == 3, [v["metadata"]["resourceVersion"] for v in versions]
    assert versions[1]["metadata"]["finalizers"] == [FINALIZER_IR_TEARDOWN]
    assert set(api.of("pods")) == {f"{lag.NS}/{lag.NAME}-0-default-0"}
    assert lag.row(api)["phase"] != "Ready"
    # The watch brings each of those versions back: no pass.
    old = first
    for new in versions[1:]:
        replicas.updated(old, new)
        old = new
    assert queued(controller) == []
    # The InferenceService controller changes the template: a pass.
    theirs = copy.deepcopy(old)
    theirs["spec"]["runners"][0]["template"]["spec"]["containers"][0]["image"] = "img:2"
    theirs["metadata"]["resourceVersion"] = str(next(api.versions))
    replicas.updated(old, theirs)
    assert queued(controller) == [lag.KEY]


class VersionedClient(stale.Client):
    """The stale-cache tests' client, storing each status write at a new resourceVersion."""

    def __init__(self) -> None:
        super().__init__()
        self.version = 100

    def replace(self, res: Any, body: JSON, namespace: str | None = None, **kw: Any) -> JSON:
        super().replace(res, body, namespace, **kw)
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        return stored


class WatchedCache(stale.Cache):
    def __init__(self, *objects: JSON) -> None:
        super().__init__(*objects)
        self.handlers: list[EventHandler] = []

    def add_handler(self, handler: EventHandler) -> None:
        self.handlers.append(handler)

    def has_synced(self) -> bool:
        return True

    def peek_list(self) -> list[JSON]:
        return list(self.objects.values())

    def updated(self, old: JSON, new: JSON) -> None:
        for handler in self.handlers:
            assert handler.on_update is not None
            handler.on_update(old, new)


def test_a_service_is_not_woken_by_its_own_status_coming_back_and_is_by_anyone_elses() -> None:
    isvc = stale.service("uid-now")
    isvc["metadata"]["resourceVersion"] = "50"
    services = WatchedCache(isvc)
    client = VersionedClient()
    replicas = WatchedCache(stale.ready_replica("uid-now"))
    runtime = {
        "metadata": {"name": "rt"},
        "spec": {"engineConfig": {"runner": {"name": "c", "image": "img:1"}}},
    }
    reconciler = InferenceServiceReconciler(
        client,  # type: ignore[arg-type]
        services,  # type: ignore[arg-type]
        replicas,  # type: ignore[arg-type]
        WatchedCache(),  # type: ignore[arg-type]
        WatchedCache(runtime),  # type: ignore[arg-type]
        WatchedCache(),  # type: ignore[arg-type]
        WatchedCache({"metadata": {"name": "m"}}),  # type: ignore[arg-type]
        stale.Recorder(),  # type: ignore[arg-type]
    )
    controller = reconciler.controller()
    key = f"{stale.NS}/qwen3-tpu"
    reconciler.reconcile(key)
    statuses = [b for verb, plural, b in client.writes if plural == "inferenceservices"]
    assert len(statuses) == 1
    ours = copy.deepcopy(statuses[0])
    ours["metadata"]["resourceVersion"] = str(client.version)
    services.updated(isvc, ours)
    assert queued(controller) == []
    theirs = copy.deepcopy(ours)
    theirs["metadata"]["labels"] = {"team": "serving"}
    theirs["metadata"]["resourceVersion"] = "200"
    services.updated(ours, theirs)
    assert queued(controller) == [key]

"""A deleted replica's teardown driven on a fake clock, through the InferenceReplica controller,
its slice teardown hook and the manager's event recorder, against in-memory fakes of the
caches and the API: what a ten-minute deferral writes, and that the Warning the walkthrough tells a
user to read at its deadline is written. No server, no sleep: the clock moves as the passes'
requeues say, as the workqueue would."""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from ome.api.v1beta1 import INFERENCE_REPLICAS
from ome.controllers.inferencereplica.controller import Hooks, InferenceReplicaReconciler
from ome.controllers.slices.metrics import SliceMetrics
from ome.controllers.slices.reconciler import SliceReconcilers, holder_view
from ome.kube import Resource
from ome.provider import gke
from ome.runtime.expectations import Expectations
from ome.runtime.informer import IndexFunc, object_key
from ome.runtime.rest import EVENTS, NODES, PODS
from ome.tpuslice.naming import Slot
from test.unit import slicekit
from test.unit.slicekit import CONFIG, NAME, NAMESPACE, SLICE, UID

JSON = dict[str, Any]
START = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Store:
    """The server's objects by resource plural and key, and every request by verb and
    resource; ``refuse`` maps a resource plural to the error its deletes answer."""

    objects: dict[str, dict[str, JSON]] = field(default_factory=dict)
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    refuse: dict[str, ApiException] = field(default_factory=dict)

    def of(self, plural: str) -> dict[str, JSON]:
        return self.objects.setdefault(plural, {})


class Cache:
    """An informer's cache as the controllers read it, with no lag: the store itself."""

    def __init__(
        self, store: Store, res: Resource, transform: Callable[[JSON], JSON] | None = None
    ):
        self.store, self.res, self.transform = store, res, transform
        self.indexers: dict[str, IndexFunc] = {}

    def _objects(self) -> list[JSON]:
        found = self.store.of(self.res.plural).values()
        return [copy.deepcopy(self.transform(o) if self.transform else o) for o in found]

    def add_indexer(self, name: str, func: IndexFunc) -> None:
        self.indexers[name] = func

    def get(self, key: str) -> JSON | None:
        return next((o for o in self._objects() if object_key(o) == key), None)

    def by_index(self, name: str, value: str) -> list[JSON]:
        return [o for o in self._objects() if value in self.indexers[name](o)]

    peek, peek_by_index = get, by_index  # copies of the store here, peeked or not

    def index_values(self, name: str) -> list[str]:
        return sorted({v for o in self._objects() for v in self.indexers[name](o)})


def _selected(obj: JSON, label_selector: str | None, field_selector: str | None) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for term in (label_selector or "").split(","):
        if term and labels.get(term.split("=")[0]) != term.split("=")[1]:
            return False
    if field_selector:
        key, value = field_selector.split("=")
        assert key == "spec.nodeName", field_selector
        return bool((obj.get("spec") or {}).get("nodeName") == value)
    return True


class Client:
    """The API client the controllers and the recorder write through."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def live_list(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        **_: Any,
    ) -> list[JSON]:
        self.store.requests["list", res.plural] += 1
        return [
            copy.deepcopy(o)
            for o in self.store.of(res.plural).values()
            if (namespace is None or o["metadata"].get("namespace") == namespace)
            and _selected(o, label_selector, field_selector)
        ]

    def live_get_or_none(self, res: Resource, name: str, namespace: str | None = None) -> Any:
        self.store.requests["get", res.plural] += 1
        key = f"{namespace}/{name}" if namespace else name
        found = self.store.of(res.plural).get(key)
        return copy.deepcopy(found)

    def create(self, res: Resource, body: JSON, namespace: str | None = None) -> JSON:
        self.store.requests["create", res.plural] += 1
        key = f"{namespace}/{body['metadata']['name']}" if namespace else body["metadata"]["name"]
        self.store.of(res.plural)[key] = copy.deepcopy(body)
        return copy.deepcopy(body)

    def patch(self, res: Resource, name: str, patch: JSON, namespace: str | None = None, **_: Any):
        self.store.requests["patch", res.plural] += 1
        key = f"{namespace}/{name}" if namespace else name
        obj = self.store.of(res.plural)[key]
        for k, v in patch.items():
            if isinstance(v, dict) and isinstance(obj.get(k), dict):
                obj[k].update(v)
            else:
                obj[k] = v
        return copy.deepcopy(obj)

    def delete(self, res: Resource, name: str, namespace: str | None = None, **_: Any) -> Any:
        self.store.requests["delete", res.plural] += 1
        if res.plural in self.store.refuse:
            raise self.store.refuse[res.plural]
        key = f"{namespace}/{name}" if namespace else name
        return self.store.of(res.plural).pop(key, None)


def internal_error() -> ApiException:
    error = ApiException(status=500, reason="Internal Server Error")
    error.body = json.dumps({"kind": "Status", "reason": "InternalError", "message": "boom"})
    return error


def deleting_replica() -> JSON:
    raw = copy.deepcopy(slicekit.replica(replicas=1).raw)
    raw["metadata"].update(
        deletionTimestamp="2025-03-01T12:00:00Z", finalizers=["ome.io/ir-teardown"]
    )
    return raw


def test_a_ten_minute_deferral_leaves_the_deadline_its_warning_and_costs_little() -> None:
    """Another workload holds chips on the Slice of a deleted replica for nine minutes; then
    the Slice's deletes fail until the ten-minute deadline. The deferral's Warning is written
    when it starts and then about once a minute; after the first minute the teardown sends a
    few requests a minute; at the deadline TeardownDeadlineExceeded is written with the API
    error and the cleanup selector, and the replica's finalizer goes."""
    clock, store = Clock(), Store()
    client = Client(store)
    replica = deleting_replica()
    store.of(INFERENCE_REPLICAS.plural)[f"{NAMESPACE}/{NAME}"] = replica
    body = gke.body(slicekit.replica(replicas=1).raw, Slot(0, 0), slicekit.ONE_HOST, CONFIG, {})
    body["metadata"].update(uid="slice-uid", resourceVersion="5")
    name = body["metadata"]["name"]
    store.of("slices")[name] = body
    store.of("nodes")["node-a"] = {"metadata": {"name": "node-a", "labels": {SLICE: name}}}
    store.of("pods")["tpu-batch/indexer-0"] = {
        "metadata": {"name": "indexer-0", "namespace": "tpu-batch", "uid": "u"},
        "spec": {
            "nodeName": "node-a",
            "containers": [{"name": "c", "resources": {"limits": {"google.com/tpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }
    recorder = slicekit.manager_recorder(client, clock)
    pods = Cache(store, PODS)
    slices = SliceReconcilers(
        client,  # type: ignore[arg-type]
        CONFIG,
        Cache(store, gke.SLICES),  # type: ignore[arg-type]
        Cache(store, NODES),  # type: ignore[arg-type]
        pods,  # type: ignore[arg-type]
        Cache(store, PODS, holder_view(CONFIG)),  # type: ignore[arg-type]
        Cache(store, INFERENCE_REPLICAS),  # type: ignore[arg-type]
        recorder,
        SliceMetrics(CONFIG, CollectorRegistry()),
        Expectations(),
        clock,
    )
    teardown = InferenceReplicaReconciler(
        client,  # type: ignore[arg-type]
        Cache(store, INFERENCE_REPLICAS),  # type: ignore[arg-type]
        pods,  # type: ignore[arg-type]
        recorder,
        Hooks(teardown=[slices.teardown]),
        clock=clock,
    )
    per_minute: Counter[int] = Counter()
    while replica["metadata"]["finalizers"]:
        assert clock.now < START + timedelta(minutes=11), "the deadline did not finish it"
        minute = int((clock.now - START).total_seconds() // 60)
        before = sum(store.requests.values())
        result = teardown.reconcile(f"{NAMESPACE}/{NAME}")
        assert recorder.flush()
        per_minute[minute] += sum(store.requests.values()) - before
        if clock.now >= START + timedelta(minutes=9) and store.of("pods"):
            store.of("pods").clear()  # the holder goes; the deletes now fail
            store.refuse["slices"] = internal_error()
        if replica["metadata"]["finalizers"]:
            assert result is not None and result.requeue_after is not None
            clock.now += timedelta(seconds=result.requeue_after)
    assert recorder.flush()
    recorder.stop()
    events = store.of(EVENTS.plural).values()
    deferred = [e for e in events if e["reason"] == "SliceReleaseDeferred"]
    assert len(deferred) == 1 and deferred[0]["count"] <= 12, "about once a minute"
    [warning] = [e for e in events if e["reason"] == "TeardownDeadlineExceeded"]
    assert warning["message"] == (
        f"teardown deadline exceeded; releasing owned TPU slices failed: deleting TPU slice "
        f"{name} failed: 500 InternalError: boom; delete the slices labeled "
        f"ome.io/slice-owner-uid={UID} by hand"
    )
    assert warning["involvedObject"]["kind"] == "InferenceReplica"
    # After the first minute, the deferral's tries and its Warning's refreshes cost a few
    # requests a minute (the events' writes included).
    assert max(n for m, n in per_minute.items() if 1 <= m < 9) <= 10, per_minute

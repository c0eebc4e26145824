"""The InferenceReplica controller against a replica cache that lags several of its own status
writes, as the soak met it (three writes in 10 ms while the informer thread waited its turn):
a single-pod update must still end with the new pod serving, never with it deleted on a
healthy node. In-memory fakes of the API (resourceVersions, conflicts) and of the caches;
no server, no clock but the one passed in."""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException

from ome.api.v1beta1 import FINALIZER_IR_TEARDOWN, INFERENCE_REPLICAS
from ome.controllers.inferencereplica.controller import InferenceReplicaReconciler
from ome.kube import Resource
from ome.runtime.informer import IndexFunc
from test.unit import slicekit

JSON = dict[str, Any]
NS, NAME = "serving", "qwen3-engine"
KEY = f"{NS}/{NAME}"


class Api:
    """The server: objects by plural and key, a resourceVersion per write, 409 on a stale one,
    and every pod delete it was sent."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, JSON]] = {}
        self.versions = itertools.count(10)
        self.pod_deletes: list[str] = []

    def of(self, plural: str) -> dict[str, JSON]:
        return self.objects.setdefault(plural, {})

    def _stored(self, plural: str, key: str, obj: JSON) -> JSON:
        obj["metadata"]["resourceVersion"] = str(next(self.versions))
        self.of(plural)[key] = obj
        return copy.deepcopy(obj)

    def create(self, res: Resource, body: JSON, namespace: str | None = None) -> JSON:
        key = f"{namespace}/{body['metadata']['name']}"
        if key in self.of(res.plural):
            raise ApiException(status=409, reason="AlreadyExists")
        obj = copy.deepcopy(body)
        obj["metadata"]["uid"] = f"uid-{body['metadata']['name']}-{next(self.versions)}"
        return self._stored(res.plural, key, obj)

    def replace(
        self, res: Resource, body: JSON, namespace: str | None = None, subresource: str = ""
    ) -> JSON:
        key = f"{namespace}/{body['metadata']['name']}"
        current = self.of(res.plural)[key]
        if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        obj = copy.deepcopy(current)
        obj["status"] = copy.deepcopy(body["status"])
        return self._stored(res.plural, key, obj)

    def patch(self, *_args: Any, **_kw: Any) -> JSON:
        raise AssertionError("the replica carries its finalizer: nothing to patch")

    def delete(self, res: Resource, name: str, namespace: str | None = None, **_kw: Any) -> None:
        assert res.plural == "pods", res.plural
        self.pod_deletes.append(name)
        self.of("pods").pop(f"{namespace}/{name}")

    def live_list(
        self, res: Resource, namespace: str | None = None, label_selector: str = "", **_kw: Any
    ) -> list[JSON]:
        label, _, value = label_selector.partition("=")
        return [
            copy.deepcopy(o)
            for key, o in self.of(res.plural).items()
            if key.startswith(f"{namespace}/")
            and (not label or (o["metadata"].get("labels") or {}).get(label) == value)
        ]

    def live_get_or_none(self, res: Resource, name: str, namespace: str | None = None) -> Any:
        return copy.deepcopy(self.of(res.plural).get(f"{namespace}/{name}"))


class Cache:
    """An informer's cache as the controller reads it: the server's objects, or, once
    ``freeze`` is called, a copy of them as they were then (a watch that lags)."""

    def __init__(self, api: Api, plural: str) -> None:
        self.api, self.plural = api, plural
        self.frozen: dict[str, JSON] | None = None
        self.indexers: dict[str, IndexFunc] = {}

    def freeze(self) -> None:
        self.frozen = copy.deepcopy(self.api.of(self.plural))

    def _objects(self) -> dict[str, JSON]:
        live = self.api.of(self.plural) if self.frozen is None else self.frozen
        return copy.deepcopy(live)

    def add_indexer(self, name: str, func: IndexFunc) -> None:
        self.indexers[name] = func

    def peek(self, key: str) -> JSON | None:
        return self._objects().get(key)

    def by_index(self, name: str, value: str) -> list[JSON]:
        return [o for o in self._objects().values() if value in self.indexers[name](o)]

    peek_by_index = by_index


class Recorder:
    def event(self, *_args: Any) -> None:
        raise AssertionError("nothing here is worth an event")


def replica(image: str) -> JSON:
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceReplica",
        "metadata": {
            "name": NAME,
            "namespace": NS,
            "uid": "replica-uid",
            "generation": 1,
            "finalizers": [FINALIZER_IR_TEARDOWN],
        },
        "spec": {
            "component": "engine",
            "replicas": 1,
            "runners": [{"name": "default", "template": slicekit.template(image=image)}],
        },
    }


def kubelet(api: Api) -> None:
    """A new pod runs, and a running pod turns Ready, one step a pass."""
    for pod in api.of("pods").values():
        if "status" not in pod:
            pod["status"] = {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "False"}],
            }
        else:
            pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]


def row(api: Api) -> JSON:
    [only] = api.of(INFERENCE_REPLICAS.plural)[KEY]["status"]["instanceStatuses"]
    assert isinstance(only, dict)
    return only


def test_an_update_completes_on_a_replica_cache_that_lags_our_writes() -> None:
    api = Api()
    clock = [datetime(2026, 12, 4, 12, 0, tzinfo=UTC)]
    api.create(INFERENCE_REPLICAS, replica("img:1"), NS)
    replicas, pods = Cache(api, INFERENCE_REPLICAS.plural), Cache(api, "pods")
    reconciler = InferenceReplicaReconciler(
        api,  # type: ignore[arg-type]
        replicas,  # type: ignore[arg-type]
        pods,  # type: ignore[arg-type]
        Recorder(),  # type: ignore[arg-type]
        clock=lambda: clock[0],
    )

    def passes(n: int) -> None:
        for _ in range(n):
            reconciler.reconcile(KEY)
            kubelet(api)
            clock[0] += timedelta(seconds=1)

    passes(5)
    assert row(api)["phase"] == "Ready" and set(api.of("pods")) == {f"{NS}/{NAME}-0-default-0"}
    # The template changes (the InferenceService controller's write), and the cache shows it.
    stored = api.of(INFERENCE_REPLICAS.plural)[KEY]
    stored["spec"]["runners"][0]["template"] = slicekit.template(image="img:2")
    stored["metadata"]["resourceVersion"] = str(next(api.versions))
    passes(1)  # the update starts: its operation recorded, the surge pod created
    assert row(api)["operation"]["type"] == "Update"
    replicas.freeze()  # from here the replica's watch shows none of our writes
    passes(5)
    assert row(api)["phase"] == "Ready" and row(api)["activeOrdinal"] == 1
    assert set(api.of("pods")) == {f"{NS}/{NAME}-0-default-1"}, "the new pod serves"
    assert api.pod_deletes == [f"{NAME}-0-default-0"], "only the old pod went"
    assert row(api).get("incarnation", 0) == 0, "no rebuild"

"""Controllers that a stale cache cannot fool: an InferenceService is never Ready on a cached
replica that belongs to a deleted service of the same name, and an Instance that keeps being
rebuilt backs off instead of spinning. No server: informers and client are in-memory fakes."""

from __future__ import annotations

import copy
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from ome.controllers.inferencereplica.controller import RebuildBackoff
from ome.controllers.inferencereplica.decide import REBUILD_BACKOFF
from ome.controllers.inferenceservice.controller import InferenceServiceReconciler

JSON = dict[str, Any]
NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
NS = "qwen3-tpu"


class Cache:
    """What the controllers read of an informer: ``get`` and ``list`` of plain dicts."""

    def __init__(self, *objects: JSON) -> None:
        self.objects = {self._key(o): o for o in objects}

    @staticmethod
    def _key(obj: JSON) -> str:
        meta = obj["metadata"]
        return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]

    def get(self, key: str) -> JSON | None:
        found = self.objects.get(key)
        return copy.deepcopy(found) if found is not None else None

    def peek(self, key: str) -> JSON | None:
        return self.objects.get(key)

    def list(self) -> list[JSON]:
        return [copy.deepcopy(o) for o in self.objects.values()]


class Client:
    def __init__(self) -> None:
        self.writes: list[tuple[str, str, JSON]] = []

    def create(self, res: Any, body: JSON, namespace: str | None = None) -> JSON:
        self.writes.append(("create", res.plural, body))
        return body

    def replace(self, res: Any, body: JSON, namespace: str | None = None, **kw: Any) -> JSON:
        self.writes.append(("replace", res.plural, body))
        return body

    def delete(self, *args: Any, **kwargs: Any) -> None:
        self.writes.append(("delete", str(args[0].plural), {}))


class Recorder:
    def event(self, *args: Any) -> None:
        pass


def service(uid: str) -> JSON:
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "qwen3-tpu", "namespace": NS, "uid": uid, "generation": 1},
        "spec": {
            "model": {"name": "m"},
            "runtime": {"name": "rt"},
            "engine": {"minReplicas": 1, "maxReplicas": 1, "runner": {"name": "c"}},
        },
    }


def ready_replica(owner_uid: str) -> JSON:
    """The engine's replica as a cache holds it: Ready, owned by the service of that UID."""
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceReplica",
        "metadata": {
            "name": "qwen3-tpu-engine",
            "namespace": NS,
            "uid": f"replica-of-{owner_uid}",
            "ownerReferences": [
                {
                    "apiVersion": "ome.io/v1beta1",
                    "kind": "InferenceService",
                    "name": "qwen3-tpu",
                    "uid": owner_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {"replicas": 1},
        "status": {"readyReplicas": 1, "updateRevision": "r1", "currentRevision": "r1"},
    }


def reconcile(isvc: JSON, cached_replica: JSON) -> tuple[JSON, Client]:
    client = Client()
    runtime = {
        "metadata": {"name": "rt"},
        "spec": {"engineConfig": {"runner": {"name": "c", "image": "img:1"}}},
    }
    reconciler = InferenceServiceReconciler(
        client,  # type: ignore[arg-type]
        Cache(isvc),  # type: ignore[arg-type]
        Cache(cached_replica),  # type: ignore[arg-type]
        Cache(),  # type: ignore[arg-type]
        Cache(runtime),  # type: ignore[arg-type]
        Cache(),  # type: ignore[arg-type]
        Cache({"metadata": {"name": "m"}}),  # type: ignore[arg-type]
        Recorder(),  # type: ignore[arg-type]
    )
    reconciler.reconcile(f"{NS}/qwen3-tpu")
    statuses = [b for verb, plural, b in client.writes if plural == "inferenceservices"]
    assert statuses, "a status was written"
    return statuses[-1]["status"], client


def ready(status: JSON) -> str:
    return next(c["status"] for c in status["conditions"] if c["type"] == "Ready")


def test_a_service_is_ready_on_its_own_ready_replica() -> None:
    status, _ = reconcile(service("uid-now"), ready_replica("uid-now"))
    assert ready(status) == "True"


def test_a_cached_replica_of_a_deleted_service_of_the_same_name_never_makes_it_ready() -> None:
    """The cache still shows the replica of the service deleted a moment ago (same name,
    another UID): the new service is not Ready on it, and creates its own replica."""
    status, client = reconcile(service("uid-now"), ready_replica("uid-before"))
    assert ready(status) == "False"
    creates = [b for verb, plural, b in client.writes if verb == "create"]
    assert [b["metadata"]["ownerReferences"][0]["uid"] for b in creates] == ["uid-now"]
    assert not [w for w in client.writes if w[0] == "replace" and w[1] == "inferencereplicas"]


class FailingCreates(Client):
    """A client whose replica creates the API server refuses with ``status``."""

    def __init__(self, status: int) -> None:
        super().__init__()
        self.status = status

    def create(self, res: Any, body: JSON, namespace: str | None = None) -> JSON:
        self.writes.append(("create", res.plural, body))
        raise ApiException(status=self.status, reason="refused")


def reconciler_over(replicas: Cache, client: Client) -> InferenceServiceReconciler:
    runtime = {
        "metadata": {"name": "rt"},
        "spec": {"engineConfig": {"runner": {"name": "c", "image": "img:1"}}},
    }
    return InferenceServiceReconciler(
        client,  # type: ignore[arg-type]
        Cache(service("uid-now")),  # type: ignore[arg-type]
        replicas,  # type: ignore[arg-type]
        Cache(),  # type: ignore[arg-type]
        Cache(runtime),  # type: ignore[arg-type]
        Cache(),  # type: ignore[arg-type]
        Cache({"metadata": {"name": "m"}}),  # type: ignore[arg-type]
        Recorder(),  # type: ignore[arg-type]
    )


def replica_creates(client: Client) -> int:
    return sum(
        1 for verb, plural, _ in client.writes if (verb, plural) == ("create", "inferencereplicas")
    )


def test_a_replica_cache_that_lags_behind_our_create_never_causes_a_second_create() -> None:
    """The service is reconciled again (its status write, a model event) before the replica
    informer shows the replica just created: the second pass does not create it again (the
    API server would refuse it, after a wasted request). Once the cache shows it, the
    expectation is met and the cache decides again."""
    replicas, client = Cache(), Client()
    reconciler = reconciler_over(replicas, client)
    reconciler.reconcile(f"{NS}/qwen3-tpu")
    reconciler.reconcile(f"{NS}/qwen3-tpu")
    assert replica_creates(client) == 1
    replicas.objects[f"{NS}/qwen3-tpu-engine"] = ready_replica("uid-now")
    reconciler.reconcile(f"{NS}/qwen3-tpu")
    assert replica_creates(client) == 1
    # Gone from the cache later (deleted by hand): the next pass creates it again.
    del replicas.objects[f"{NS}/qwen3-tpu-engine"]
    reconciler.reconcile(f"{NS}/qwen3-tpu")
    assert replica_creates(client) == 2


@pytest.mark.parametrize("status", [409, 422, 500])
def test_a_refused_replica_create_is_tried_again_on_the_next_pass(status: int) -> None:
    client = FailingCreates(status)
    reconciler = reconciler_over(Cache(), client)
    for _ in range(2):
        if status >= 500:  # goes back to the workqueue, which retries it
            with pytest.raises(ApiException):
                reconciler.reconcile(f"{NS}/qwen3-tpu")
        else:
            reconciler.reconcile(f"{NS}/qwen3-tpu")
    assert replica_creates(client) == 2


# -- rebuild backoff -----------------------------------------------------------------------------


def test_a_few_rebuilds_a_minute_go_unhindered() -> None:
    backoff = RebuildBackoff()
    for seconds in (0, 10, 20):
        backoff.rebuilt("ns/r", 0, NOW + timedelta(seconds=seconds))
    assert backoff.hold("ns/r", 0, NOW + timedelta(seconds=21)) is None


def test_an_instance_rebuilt_too_often_waits_longer_each_time_and_says_why_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backoff = RebuildBackoff()
    t = NOW
    for _ in range(4):
        backoff.rebuilt("ns/r", 0, t)
        t += timedelta(seconds=1)
    with caplog.at_level(logging.WARNING, logger="ome.controllers.inferencereplica.controller"):
        held = backoff.hold("ns/r", 0, t)
        again = backoff.hold("ns/r", 0, t + timedelta(seconds=1))
    assert held is not None and again is not None
    hold, left = held
    assert hold.token == REBUILD_BACKOFF
    assert (
        hold.message
        == "instance 0 was rebuilt 4 times in the last 1m0s; its next rebuild waits 10s"
    )
    assert 0 < left <= 10
    assert [r.getMessage() for r in caplog.records] == [f"ns/r: {hold.message}"], "once"
    # Waited out: it goes; rebuilt once more, it waits twice as long.
    last = t - timedelta(seconds=1)
    assert backoff.hold("ns/r", 0, last + timedelta(seconds=10)) is None
    backoff.rebuilt("ns/r", 0, last + timedelta(seconds=10))
    held = backoff.hold("ns/r", 0, last + timedelta(seconds=11))
    assert held is not None and held[0].message.endswith("waits 20s")
    # Other Instances, and other replicas, are not held.
    assert backoff.hold("ns/r", 1, t) is None and backoff.hold("ns/other", 0, t) is None


def test_the_backoff_is_capped_and_forgotten_with_its_replica() -> None:
    backoff = RebuildBackoff()
    for i in range(40):
        backoff.rebuilt("ns/r", 0, NOW + timedelta(milliseconds=i))
    held = backoff.hold("ns/r", 0, NOW + timedelta(seconds=1))
    assert held is not None and held[0].message.endswith("waits 5m0s")
    backoff.forget("ns/r")
    assert backoff.hold("ns/r", 0, NOW + timedelta(seconds=1)) is None


def test_forgetting_a_replica_keeps_the_backoff_of_the_others() -> None:
    backoff = RebuildBackoff()
    for key in ("ns/r", "ns/r2", "other/r"):
        for i in range(40):
            backoff.rebuilt(key, 1, NOW + timedelta(milliseconds=i))
    backoff.forget("ns/r")
    for key in ("ns/r2", "other/r"):
        held = backoff.hold(key, 1, NOW + timedelta(seconds=1))
        assert held is not None and held[0].message.endswith("waits 5m0s")
    assert backoff.hold("ns/r", 1, NOW + timedelta(seconds=1)) is None


def test_rebuilds_older_than_the_window_hold_nothing_and_count_afresh() -> None:
    backoff = RebuildBackoff(allowed=2, window=timedelta(minutes=10))
    for i in range(3):
        backoff.rebuilt("ns/r", 0, NOW + timedelta(seconds=i))
    assert backoff.hold("ns/r", 0, NOW + timedelta(seconds=3)) is not None
    later = NOW + timedelta(minutes=11)
    assert backoff.hold("ns/r", 0, later) is None
    backoff.rebuilt("ns/r", 0, later)
    backoff.rebuilt("ns/r", 0, later)
    assert backoff.hold("ns/r", 0, later) is None  # two in the window: allowed
    backoff.rebuilt("ns/r", 0, later)
    assert backoff.hold("ns/r", 0, later) is not None


def test_a_backoff_after_the_window_emptied_is_logged_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Two backoffs of three rebuilds each, an hour apart: an operator reading the log sees
    # both, not only the first (the second has the same count, and was once taken as told).
    backoff = RebuildBackoff(allowed=2, window=timedelta(minutes=10))
    later = NOW + timedelta(hours=1)
    with caplog.at_level(logging.WARNING, logger="ome.controllers.inferencereplica.controller"):
        for start in (NOW, later):
            for i in range(3):
                backoff.rebuilt("ns/r", 0, start + timedelta(seconds=i))
            assert backoff.hold("ns/r", 0, start + timedelta(seconds=3)) is not None
    assert len(caplog.records) == 2


# -- what wakes a service ------------------------------------------------------------------------


def test_a_service_is_woken_by_what_it_reads_of_its_replica_not_by_its_rows() -> None:
    from ome.controllers.inferenceservice.controller import replica_news

    before = ready_replica("uid-now")
    rows = copy.deepcopy(before)
    rows["status"]["instanceStatuses"] = [{"index": 0, "phase": "Creating"}]
    assert not replica_news(before, rows), "a row's change is the replica's own business"
    for change in (
        lambda r: r["status"].update(readyReplicas=0),
        lambda r: r["status"].update(updateRevision="r2"),
        lambda r: r["spec"].update(replicas=2),
        lambda r: r["metadata"].update(deletionTimestamp="2025-03-01T12:00:00Z"),
        lambda r: r["metadata"].update(labels={"a": "b"}),
    ):
        changed = copy.deepcopy(before)
        change(changed)
        assert replica_news(before, changed)


class StaleReplaces(Client):
    """A client whose replica updates the API server refuses as stale (409)."""

    def replace(self, res: Any, body: JSON, namespace: str | None = None, **kw: Any) -> JSON:
        if res.plural == "inferencereplicas":
            self.writes.append(("replace", res.plural, body))
            raise ApiException(status=409, reason="Conflict")
        return super().replace(res, body, namespace, **kw)


def test_a_replica_update_refused_as_stale_is_tried_again_soon() -> None:
    """The cache's replica is older than the server's (its rows moved on, which does not
    wake the service): the refused update is retried, not left until some other event."""
    cached = ready_replica("uid-now")
    cached["spec"] = {"replicas": 1, "runners": []}  # not what the service projects now
    client = StaleReplaces()
    reconciler = reconciler_over(Cache(cached), client)
    result = reconciler.reconcile(f"{NS}/qwen3-tpu")
    assert [w[0] for w in client.writes if w[1] == "inferencereplicas"] == ["replace"]
    assert result is not None and result.requeue

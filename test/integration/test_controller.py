"""Controllers: informer events become reconciles; errors retry, requeue_after schedules,
a crashing reconcile never kills its worker; metrics and one span per reconcile."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from kubernetes.client.exceptions import ApiException
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from ome.runtime.client import Client
from ome.runtime.controller import Controller, ControllerMetrics, Result
from ome.runtime.informer import Informer
from ome.runtime.rest import CONFIGMAPS, Rest
from ome.runtime.workqueue import ItemExponentialFailureRateLimiter, RateLimitingQueue
from test.cluster import Cluster
from test.helpers import eventually
from test.manifests import configmap


class Harness:
    def __init__(self, cluster: Cluster) -> None:
        self.rest = Rest(cluster.api)
        self.client = Client(self.rest)
        self.informer = Informer(self.rest, CONFIGMAPS, namespace="default")
        self.registry = CollectorRegistry()
        self.metrics = ControllerMetrics(self.registry)
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()

    def controller(self, reconcile, workers: int = 2) -> Controller:  # type: ignore[no-untyped-def]
        queue = RateLimitingQueue(ItemExponentialFailureRateLimiter(0.01, 0.05), name="test")
        c = Controller("test", reconcile, workers=workers, queue=queue, metrics=self.metrics)
        c.watch(self.informer)
        return c

    def count(self, result: str) -> float:
        return (
            self.registry.get_sample_value(
                "controller_runtime_reconcile_total", {"controller": "test", "result": result}
            )
            or 0.0
        )


@pytest.fixture
def harness(cluster: Cluster) -> Iterator[Harness]:
    h = Harness(cluster)
    yield h
    h.informer.stop()


def test_each_change_is_reconciled_and_errors_are_retried(harness: Harness) -> None:
    failures = {"default/flaky": 2}

    def reconcile(key: str) -> Result | None:
        with harness.lock:
            harness.calls[key] += 1
            if failures.get(key, 0) > 0:
                failures[key] -= 1
                raise RuntimeError("transient trouble")
        return None

    c = harness.controller(reconcile)
    harness.informer.start()
    c.start()
    try:
        harness.rest.create(CONFIGMAPS, configmap("steady"), "default")
        harness.rest.create(CONFIGMAPS, configmap("flaky"), "default")
        eventually(lambda: harness.calls["default/flaky"] == 3)
        eventually(lambda: harness.count("success") >= 2)
        assert harness.count("error") == 2
        assert (
            harness.registry.get_sample_value(
                "controller_runtime_reconcile_errors_total", {"controller": "test"}
            )
            == 2
        )
    finally:
        c.stop()


def test_requeue_after_schedules_a_later_visit(harness: Harness) -> None:
    seen: list[float] = []

    def reconcile(key: str) -> Result:
        seen.append(time.monotonic())
        return Result(requeue_after=0.3) if len(seen) < 3 else Result()

    c = harness.controller(reconcile, workers=1)
    harness.informer.start()
    c.start()
    try:
        harness.rest.create(CONFIGMAPS, configmap("a"), "default")
        eventually(lambda: len(seen) >= 3)
        assert seen[1] - seen[0] >= 0.3 and seen[2] - seen[1] >= 0.3
        assert harness.count("requeue_after") == 2
    finally:
        c.stop()


def test_a_key_is_never_reconciled_by_two_workers_at_once(harness: Harness) -> None:
    active: set[str] = set()
    overlaps: list[str] = []

    def reconcile(key: str) -> None:
        with harness.lock:
            if key in active:
                overlaps.append(key)
            active.add(key)
        time.sleep(0.01)  # a reconcile that takes a moment, so that overlaps could happen
        with harness.lock:
            active.discard(key)
            harness.calls[key] += 1

    c = harness.controller(reconcile, workers=4)
    harness.informer.start()
    c.start()
    try:
        harness.rest.create(CONFIGMAPS, configmap("hot"), "default")
        for i in range(30):
            harness.rest.patch(CONFIGMAPS, "hot", {"data": {"k": str(i)}}, "default")
        eventually(lambda: harness.informer.get("default/hot")["data"]["k"] == "29")
        eventually(lambda: len(c.queue) == 0)
        assert overlaps == []
    finally:
        c.stop()


def test_one_span_per_reconcile_with_api_calls_as_children(
    harness: Harness, spans: InMemorySpanExporter
) -> None:
    def reconcile(key: str) -> None:
        ns, name = key.split("/")
        harness.client.live_get(CONFIGMAPS, name, ns)

    c = harness.controller(reconcile, workers=1)
    harness.informer.start()
    c.start()
    try:
        harness.rest.create(CONFIGMAPS, configmap("traced"), "default")
        eventually(lambda: any(s.name == "reconcile test" for s in spans.get_finished_spans()))
    finally:
        c.stop()
    finished = spans.get_finished_spans()
    reconciles = [s for s in finished if s.name == "reconcile test"]
    assert len(reconciles) == 1
    assert reconciles[0].attributes["key"] == "default/traced"
    assert reconciles[0].attributes["result"] == "success"
    children = [
        s
        for s in finished
        if s.parent is not None and s.parent.span_id == reconciles[0].context.span_id
    ]
    assert [s.name for s in children] == ["k8s get configmaps"]


def test_every_reconcile_total_series_starts_at_zero(harness: Harness) -> None:
    """As controller-runtime does: each result of a new controller is a series at 0."""
    harness.controller(lambda key: None)
    for result in ("success", "error", "requeue", "requeue_after"):
        assert harness.count(result) == 0.0, result
    errors = harness.registry.get_sample_value(
        "controller_runtime_reconcile_errors_total", {"controller": "test"}
    )
    assert errors == 0.0


def test_an_api_error_is_one_log_line_and_a_bug_has_its_traceback(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """A traceback in a log means a bug; a routine API error gets one line naming it."""
    failing = {"default/api": ApiException(status=503, reason="Service Unavailable")}
    failing["default/bug"] = KeyError("no such thing")  # type: ignore[assignment]

    def reconcile(key: str) -> Result | None:
        error = failing.pop(key, None)
        if error is not None:
            raise error
        return None

    c = harness.controller(reconcile)
    harness.informer.start()
    c.start()
    try:
        with caplog.at_level(logging.ERROR, logger="ome.runtime.controller"):
            for name in ("api", "bug"):
                harness.client.create(CONFIGMAPS, configmap(name), "default")
            eventually(lambda: harness.count("error") == 2, timeout=10)
    finally:
        c.stop()
    by_key = {r.getMessage().split(" failed")[0]: r for r in caplog.records}
    api = by_key["test: reconcile default/api"]
    assert api.exc_info is None
    assert api.getMessage() == "test: reconcile default/api failed: 503 Service Unavailable"
    assert by_key["test: reconcile default/bug"].exc_info is not None

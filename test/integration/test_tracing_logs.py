"""Logs and traces of a reconcile, together: a JSON log line logged in a reconcile names its
object and carries the trace ID of the reconcile's span; and the manager, told
``OTEL_EXPORTER_OTLP_PROTOCOL=grpc``, sends its reconcile spans to a gRPC collector (a test
receiver here), with the IDs its log lines name."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from ome.api.v1beta1 import INFERENCE_SERVICES
from ome.runtime.controller import Controller, ControllerMetrics, Result
from ome.runtime.informer import Informer
from ome.runtime.logs import configure_logging
from ome.runtime.rest import CONFIGMAPS, Rest
from ome_sim.apiserver.faults import Fault
from test.cluster import Cluster, Kubectl
from test.helpers import eventually
from test.manifests import configmap

WAIT = 30.0


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """The process's log as JSON lines into a buffer; pytest's handlers back after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    yield out
    root.handlers[:] = handlers
    root.setLevel(level)


def test_a_json_line_logged_in_a_reconcile_names_the_object_and_the_reconciles_trace(
    cluster: Cluster, spans: InMemorySpanExporter, json_log: io.StringIO
) -> None:
    rest = Rest(cluster.api)
    informer = Informer(rest, CONFIGMAPS, namespace="default")
    log = logging.getLogger("ome.test.reconciler")

    def reconcile(key: str) -> Result | None:
        log.info("looked at %s", key)
        return None

    c = Controller("configmaps", reconcile, metrics=ControllerMetrics(CollectorRegistry()))
    c.watch(informer)
    informer.start()
    c.start()
    try:
        rest.create(CONFIGMAPS, configmap("traced"), "default")

        def line() -> dict[str, Any] | None:
            for text in json_log.getvalue().splitlines():
                entry = json.loads(text)
                if entry.get("logger") == log.name and entry.get("name") == "traced":
                    return dict(entry)
            return None

        entry = eventually(line)
        span = eventually(
            lambda: next(
                (
                    s
                    for s in spans.get_finished_spans()
                    if s.name == "reconcile configmaps"
                    and (s.attributes or {}).get("key") == "default/traced"
                ),
                None,
            )
        )
    finally:
        c.stop(timeout=5)
        informer.stop()
    assert entry["severity"] == "INFO" and entry["message"] == "looked at default/traced"
    assert entry["controller"] == "configmaps" and entry["namespace"] == "default"
    assert len(str(entry["reconcileID"])) == 36
    ctx = span.get_span_context()
    assert ctx is not None
    assert entry["trace_id"] == trace.format_trace_id(ctx.trace_id)
    assert entry["span_id"] == trace.format_span_id(ctx.span_id)


# -- the manager, exporting over gRPC --------------------------------------------------------


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, str]


def _attributes(kvs: Any) -> dict[str, str]:
    return {kv.key: kv.value.string_value for kv in kvs}


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace collector on a port of 127.0.0.1 chosen at run time: it keeps
    what it is sent, and wakes whoever waits for a span."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.spans: list[ReceivedSpan] = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def Export(  # noqa: N802 - the generated service's name
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        with self._cond:
            for rs in request.resource_spans:
                service = _attributes(rs.resource.attributes).get("service.name", "")
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.append(
                            ReceivedSpan(
                                service,
                                s.name,
                                s.trace_id.hex(),
                                s.span_id.hex(),
                                s.parent_span_id.hex(),
                                _attributes(s.attributes),
                            )
                        )
            self._cond.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()

    def wait_for(self, wanted: Callable[[ReceivedSpan], bool], timeout: float) -> ReceivedSpan:
        def found() -> ReceivedSpan | None:
            return next((s for s in self.spans if wanted(s)), None)

        with self._cond:
            span = self._cond.wait_for(found, timeout)
            assert span is not None, f"no such span in {timeout}s; received: {self.spans}"
            return span


class LogLines:
    """The JSON lines a process writes to stderr, read on a thread, for waiting on."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._cond = threading.Condition()
        self.lines: list[str] = []
        self._proc = proc
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self.lines.append("")  # end of output
            self._cond.notify_all()

    def wait_for(self, wanted: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            for line in self.lines:
                if not line:
                    raise AssertionError(f"the manager exited: {''.join(self.lines)}")
                entry = json.loads(line)  # every line is one JSON object
                if wanted(entry):
                    return dict(entry)
            return None

        with self._cond:
            entry = self._cond.wait_for(found, timeout)
            assert entry is not None, f"no such log line in {timeout}s: {''.join(self.lines)}"
            return entry


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.server.start()
    yield r
    r.server.stop(grace=None)


def ome_manager() -> list[str]:
    script = Path(sys.executable).parent / "ome-manager"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ome.entrypoints.manager"]


def test_the_manager_sends_reconcile_spans_over_grpc_with_the_ids_its_log_lines_carry(
    cluster: Cluster, kubectl: Kubectl, receiver: Receiver
) -> None:
    if cluster.server is None:
        pytest.skip(
            "needs the embedded API server's fault injection (a failed status write), which "
            "kube-apiserver has not; the unit tests cover the log fields on any server"
        )
    kubectl("apply", "-f", "config/crd/")
    # The service's status write fails once: the reconcile logs that failure, in its span.
    cluster.server.faults.add(
        Fault(resource="inferenceservices/status", name="traced", code=500, times=1)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # ms: batches leave at once, not after 5 s
    }
    proc = subprocess.Popen(
        [
            *ome_manager(),
            *("--kubeconfig", str(cluster.kubeconfig), "--namespace", "default"),
            *("--metrics-bind-address", "0", "--health-probe-bind-address", "0"),
            *("--webhook-bind-address", "0", "--log-format", "json"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        logs = LogLines(proc)
        logs.wait_for(lambda e: e["message"] == "starting ome-manager", WAIT)
        Rest(cluster.api).create(
            INFERENCE_SERVICES,
            {
                "apiVersion": "ome.io/v1beta1",
                "kind": "InferenceService",
                "metadata": {"name": "traced", "namespace": "default"},
                "spec": {
                    "deploymentMode": "OMENative",
                    "model": {"name": "m"},
                    "runtime": {"name": "missing"},
                    "engine": {"minReplicas": 1, "maxReplicas": 1},
                },
            },
            "default",
        )
        # The client's line on the failed write, logged while the reconcile retries it.
        failed = logs.wait_for(lambda e: e.get("name") == "traced", WAIT)
        span = receiver.wait_for(
            lambda s: s.trace_id == failed.get("trace_id") and s.name.startswith("reconcile "),
            WAIT,
        )
        # The span current at the line: the client's write, a child of the reconcile's.
        current = receiver.wait_for(lambda s: s.span_id == failed.get("span_id"), WAIT)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert failed["severity"] == "WARNING" and "500" in str(failed["message"])
    assert failed["namespace"] == "default" and failed["reconcileID"]
    assert current.name.startswith("k8s ") and current.attributes["k8s.name"] == "traced"
    assert current.trace_id == span.trace_id and current.parent_id == span.span_id
    assert span.name == f"reconcile {failed['controller']}"
    assert span.attributes["key"] == "default/traced"
    assert span.service == "ome-manager"

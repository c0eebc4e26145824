"""Log formats and the tracing switch: JSON lines off a terminal as Cloud Logging reads them
(severity, message, time), with the reconcile's object and the current span's IDs; text on a
terminal; tracing only when asked for, with the exporter the OTEL_* variables name."""

from __future__ import annotations

import io
import json
import logging
import re
import uuid
from collections.abc import Iterator
from datetime import datetime

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GRPCSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HTTPSpanExporter,
)
from opentelemetry.sdk.trace import TracerProvider

from ome.entrypoints import manager
from ome.runtime import tracing
from ome.runtime.logs import configure_logging, reconcile_context
from ome.runtime.tracing import (
    TracingConfigError,
    configure_tracing,
    exporter_names,
    otlp_exporter,
    otlp_protocol,
    tracing_wanted,
)

log = logging.getLogger("ome.test")


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    """configure_logging replaces the root logger's handlers: put pytest's back after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def no_otel_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    import os

    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    return monkeypatch


def json_lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


# -- JSON ------------------------------------------------------------------------------------


def test_logs_are_json_lines_off_a_terminal_with_cloud_loggings_field_names() -> None:
    out = io.StringIO()
    configure_logging("auto", "info", stream=out)
    log.info("reconciled %s", "a/b", extra={"key": "a/b"})
    (entry,) = json_lines(out)
    assert entry["message"] == "reconciled a/b" and entry["severity"] == "INFO"
    assert entry["logger"] == "ome.test" and entry["key"] == "a/b"
    assert "msg" not in entry and "level" not in entry
    time = str(entry["time"])
    assert time.endswith("Z") and datetime.fromisoformat(time).tzinfo is not None


@pytest.mark.parametrize(
    ("level", "severity"),
    [
        (logging.DEBUG, "DEBUG"),
        (logging.INFO, "INFO"),
        (logging.WARNING, "WARNING"),
        (logging.ERROR, "ERROR"),
        (logging.CRITICAL, "CRITICAL"),
        (25, "INFO"),  # a custom level between two of Cloud Logging's rounds down
        (5, "DEBUG"),
    ],
)
def test_each_level_has_cloud_loggings_severity(level: int, severity: str) -> None:
    out = io.StringIO()
    configure_logging("json", "debug", stream=out)
    logging.getLogger().setLevel(1)
    log.log(level, "x")
    assert json_lines(out)[-1]["severity"] == severity


def test_an_exception_is_one_json_field_not_lines_of_traceback() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("reconcile failed")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["severity"] == "ERROR" and entry["message"] == "reconcile failed"
    assert "Traceback" in str(entry["exception"]) and "ValueError: boom" in str(entry["exception"])


def test_an_extra_never_replaces_the_fields_cloud_logging_reads() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    log.warning("careful", extra={"severity": "DEBUG", "time": "never"})
    (entry,) = json_lines(out)
    assert entry["severity"] == "WARNING" and entry["time"] != "never"


def test_a_line_logged_in_a_reconcile_names_its_controller_object_and_reconcile() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    with reconcile_context("inferenceservice", "team-a/llama"):
        log.info("first")
    with reconcile_context("inferenceservice", "team-a/llama"):
        log.info("second")
    with reconcile_context("nodes", "gke-node-1"):  # a cluster-scoped object has no namespace
        log.info("third")
    log.info("outside")
    first, second, third, outside = json_lines(out)
    assert first["controller"] == "inferenceservice"
    assert (first["namespace"], first["name"]) == ("team-a", "llama")
    uuid.UUID(str(first["reconcileID"]))
    assert first["reconcileID"] != second["reconcileID"]  # a fresh ID for each reconcile
    assert third["name"] == "gke-node-1" and "namespace" not in third
    assert not {"controller", "namespace", "name", "reconcileID"} & set(outside)


def test_a_line_logged_in_a_span_carries_its_trace_and_span_ids() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    tracer = TracerProvider().get_tracer("test")  # not installed globally: only current
    with tracer.start_as_current_span("reconcile test") as span:
        log.info("inside")
    log.info("after")
    inside, after = json_lines(out)
    ctx = span.get_span_context()
    assert inside["trace_id"] == trace.format_trace_id(ctx.trace_id)
    assert inside["span_id"] == trace.format_span_id(ctx.span_id)
    assert re.fullmatch(r"[0-9a-f]{32}", str(inside["trace_id"]))
    assert re.fullmatch(r"[0-9a-f]{16}", str(inside["span_id"]))
    assert "trace_id" not in after and "span_id" not in after


# -- text ------------------------------------------------------------------------------------


def test_logs_are_text_on_a_terminal() -> None:
    out = Tty()
    configure_logging("auto", "info", stream=out)
    log.warning("careful")
    with reconcile_context("slices", "ns/svc"):
        log.info("created")
    plain, in_reconcile = out.getvalue().splitlines()
    assert "WARNING" in plain and plain.endswith("ome.test: careful")
    assert in_reconcile.endswith("ome.test: created  controller=slices object=ns/svc")
    with pytest.raises(ValueError, match="log format must be"):
        configure_logging("xml")


# -- tracing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),  # asked for: the default endpoint
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
            False,
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                "OTEL_TRACES_EXPORTER": "none",
            },
            False,
        ),
    ],
)
def test_tracing_is_on_only_when_asked_for(env: dict[str, str], wanted: bool) -> None:
    assert tracing_wanted(env) is wanted


@pytest.mark.parametrize(
    ("env", "protocol"),
    [
        ({}, "http/protobuf"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "grpc"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "HTTP/Protobuf"}, "http/protobuf"),
        (
            {
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
            },
            "grpc",
        ),
    ],
)
def test_the_otlp_protocol_comes_from_the_traces_variable_then_the_general_one(
    env: dict[str, str], protocol: str
) -> None:
    assert otlp_protocol(env) == protocol


def test_each_protocol_has_its_exporter(no_otel_env: pytest.MonkeyPatch) -> None:
    assert isinstance(otlp_exporter("grpc"), GRPCSpanExporter)
    assert isinstance(otlp_exporter("http/protobuf"), HTTPSpanExporter)


def test_an_unsupported_protocol_or_exporter_is_one_clear_error() -> None:
    with pytest.raises(TracingConfigError) as e:
        otlp_protocol({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"})
    assert str(e.value) == (
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json' is not supported; "
        "use http/protobuf or grpc"
    )
    with pytest.raises(TracingConfigError, match="OTEL_TRACES_EXPORTER: 'zipkin'"):
        exporter_names({"OTEL_TRACES_EXPORTER": "otlp,zipkin"})


def test_a_setting_the_exporter_refuses_is_one_clear_error(
    no_otel_env: pytest.MonkeyPatch,
) -> None:
    no_otel_env.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "deflate")  # gRPC has gzip only
    with pytest.raises(TracingConfigError) as e:
        otlp_exporter("grpc")
    assert str(e.value).startswith(
        "the OTLP (grpc) exporter refuses its OTEL_EXPORTER_OTLP_* settings: "
    )
    assert "deflate" in str(e.value) and "\n" not in str(e.value)


def test_no_endpoint_installs_nothing(no_otel_env: pytest.MonkeyPatch) -> None:
    assert configure_tracing("ome-manager") is None


@pytest.mark.parametrize(
    ("env", "service"),
    [
        ({}, "ome-manager"),
        ({"OTEL_SERVICE_NAME": "ome-prod"}, "ome-prod"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=ome-eu,team=ml"}, "ome-eu"),
    ],
)
def test_the_service_name_defaults_to_the_programs_unless_the_environment_names_one(
    no_otel_env: pytest.MonkeyPatch, env: dict[str, str], service: str
) -> None:
    installed: list[trace.TracerProvider] = []
    # The process's provider can be set once only: the test keeps it, and the suite's own.
    no_otel_env.setattr(tracing.trace, "set_tracer_provider", installed.append)
    no_otel_env.setenv("OTEL_TRACES_EXPORTER", "console")
    for name, value in env.items():
        no_otel_env.setenv(name, value)
    provider = configure_tracing("ome-manager")
    assert provider is not None and installed == [provider]
    try:
        assert provider.resource.attributes["service.name"] == service
    finally:
        provider.shutdown()


def test_the_manager_refuses_an_unsupported_protocol_in_one_line(
    no_otel_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    no_otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    no_otel_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    code = manager.main(["--log-format", "json", "--kubeconfig", "/nonexistent"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    (line,) = err.splitlines()
    entry = json.loads(line)
    assert entry["severity"] == "ERROR"
    assert entry["message"] == (
        "cannot start: OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' is not supported; "
        "use http/protobuf or grpc"
    )

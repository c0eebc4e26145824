"""Log formats and the tracing switch: JSON lines off a terminal, text on one, and tracing
only when an OTLP endpoint is configured."""

from __future__ import annotations

import io
import json
import logging

import pytest

from ome.runtime.logs import configure_logging
from ome.runtime.tracing import configure_tracing, tracing_wanted


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_logs_are_json_lines_off_a_terminal() -> None:
    out = io.StringIO()
    configure_logging("auto", "info", stream=out)
    logging.getLogger("ome.test").info("reconciled %s", "a/b", extra={"key": "a/b"})
    entry = json.loads(out.getvalue().splitlines()[-1])
    assert entry["msg"] == "reconciled a/b" and entry["key"] == "a/b" and entry["level"] == "info"
    assert entry["logger"] == "ome.test" and entry["ts"].endswith("Z")


def test_logs_are_text_on_a_terminal() -> None:
    out = Tty()
    configure_logging("auto", "info", stream=out)
    logging.getLogger("ome.test").warning("careful")
    line = out.getvalue().splitlines()[-1]
    assert "WARNING" in line and "ome.test: careful" in line
    with pytest.raises(ValueError, match="log format must be"):
        configure_logging("xml")


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
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
def test_tracing_is_on_only_with_an_endpoint(env: dict[str, str], wanted: bool) -> None:
    assert tracing_wanted(env) is wanted


def test_no_endpoint_installs_nothing() -> None:
    assert configure_tracing("ome-manager", env={}) is None

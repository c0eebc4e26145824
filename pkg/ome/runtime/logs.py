"""Structured logs: JSON lines in a container (no terminal), readable text in a terminal.

The JSON format is what Cloud Logging reads from a GKE container's output: ``severity`` (its
names: DEBUG, INFO, WARNING, ERROR, CRITICAL), ``message`` and ``time`` (RFC 3339), then
``logger``, and, for a line logged while a controller reconciles, the fields
controller-runtime logs: ``controller``, ``namespace``, ``name`` and ``reconcileID``. With
tracing on, a line logged inside a span carries its ``trace_id`` and ``span_id`` (hex), so a
log line leads to its reconcile's trace. A traceback is one JSON string (``exception``, which
Error Reporting reads too), never lines of its own.

Only formatting, levels and that context live here; what to log is each module's business.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import random
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

from opentelemetry import trace

#: LogRecord attributes that are not user-supplied extras (and the context's own attribute).
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
_CONTEXT_ATTR = "ome_reconcile"


@dataclass(frozen=True)
class ReconcileContext:
    """What a reconcile's log lines say about it: the controller, the object's key split as
    controller-runtime logs it, and an id that tells this reconcile from the key's others."""

    controller: str
    namespace: str | None
    name: str

    @classmethod
    def of(cls, controller: str, key: str) -> ReconcileContext:
        namespace, _, name = key.rpartition("/")
        return cls(controller, namespace or None, name)

    @functools.cached_property
    def reconcile_id(self) -> str:
        """A random version-4 UUID, as controller-runtime's, made on the first log line that
        needs it: most reconciles log nothing. From ``random``, not ``uuid4``: its
        ``os.urandom`` let go of the GIL on every reconcile, and a log line's ID needs no
        secrecy."""
        return str(uuid.UUID(int=random.getrandbits(128), version=4))

    def fields(self) -> dict[str, str]:
        out = {"controller": self.controller}
        if self.namespace is not None:
            out["namespace"] = self.namespace
        out |= {"name": self.name, "reconcileID": self.reconcile_id}
        return out

    def text(self) -> str:
        obj = f"{self.namespace}/{self.name}" if self.namespace is not None else self.name
        return f"controller={self.controller} object={obj}"


_current: contextvars.ContextVar[ReconcileContext | None] = contextvars.ContextVar(
    "ome_reconcile", default=None
)


@contextmanager
def reconcile_context(controller: str, key: str) -> Iterator[ReconcileContext]:
    """While it lasts, this thread's log lines name ``controller`` and the object of
    ``key`` (``namespace/name``, or ``name`` for a cluster-scoped object), under a fresh
    reconcile ID."""
    ctx = ReconcileContext.of(controller, key)
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


class ContextFilter(logging.Filter):
    """Puts the current reconcile and span on each record it passes (it drops none).

    Hand-written rather than opentelemetry-instrumentation-logging: that package replaces the
    process's LogRecord factory and names the fields ``otelTraceID``/``otelSpanID``; this is a
    few lines on our handler only, with the field names the JSON format documents."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, _CONTEXT_ATTR):
            setattr(record, _CONTEXT_ATTR, _current.get())
        span = trace.get_current_span().get_span_context()
        if span.is_valid and not hasattr(record, "trace_id"):
            record.trace_id = trace.format_trace_id(span.trace_id)
            record.span_id = trace.format_span_id(span.span_id)
            record.trace_sampled = span.trace_flags.sampled
        return True


def severity(levelno: int) -> str:
    """Cloud Logging's severity for a Python level (a custom level rounds down)."""
    for floor, name in (
        (logging.CRITICAL, "CRITICAL"),
        (logging.ERROR, "ERROR"),
        (logging.WARNING, "WARNING"),
        (logging.INFO, "INFO"),
    ):
        if levelno >= floor:
            return name
    return "DEBUG"


def _scalar(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool | None) else str(value)


class JSONFormatter(logging.Formatter):
    """One JSON object a line: time, severity, logger, message, the reconcile's fields, the
    trace, the record's extras, and any exception (and ``stack``, for ``stack_info``). An
    extra never replaces those fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "severity": severity(record.levelno),
            "logger": record.name,
            "message": record.getMessage(),
        }
        ctx = getattr(record, _CONTEXT_ATTR, None)
        if isinstance(ctx, ReconcileContext):
            entry |= ctx.fields()
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_") and key != _CONTEXT_ATTR:
                entry.setdefault(key, _scalar(value))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry)


TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class TextFormatter(logging.Formatter):
    """:data:`TEXT_FORMAT`, and ``controller=NAME object=NAMESPACE/NAME`` after the message of
    a line logged during a reconcile (before any traceback)."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        line = super().formatMessage(record)
        ctx = getattr(record, _CONTEXT_ATTR, None)
        return f"{line}  {ctx.text()}" if isinstance(ctx, ReconcileContext) else line


def configure_logging(fmt: str = "auto", level: str = "info", stream: TextIO | None = None) -> None:
    """``fmt``: ``json``, ``text``, or ``auto`` (text on a terminal, JSON otherwise)."""
    out = stream or sys.stderr
    if fmt not in ("auto", "json", "text"):
        raise ValueError(f"log format must be auto, json or text, not {fmt!r}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"log level must be debug, info, warning or error, not {level!r}")
    use_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    handler = logging.StreamHandler(out)
    handler.setFormatter(JSONFormatter() if use_json else TextFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    for noisy in ("urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.WARNING))

"""OpenTelemetry set-up from the standard ``OTEL_*`` variables.

Tracing is on when an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``..._TRACES_ENDPOINT``) or ``OTEL_TRACES_EXPORTER`` names an exporter; otherwise the API's
no-op tracer stays in place, so tracing costs nothing. ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none`` turn it off.

Only two choices are made here: which exporters (``OTEL_TRACES_EXPORTER``: ``otlp``,
``console``) and, for OTLP, which protocol (``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` or
``OTEL_EXPORTER_OTLP_PROTOCOL``: ``http/protobuf``, the default, or ``grpc``). Everything
else (endpoint, headers, timeout, TLS, compression, sampler, resource, batching) the SDK and
its exporters read from the environment themselves.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)

log = logging.getLogger(__name__)

EXPORTERS = ("otlp", "console", "none")
PROTOCOLS = ("http/protobuf", "grpc")
DEFAULT_PROTOCOL = "http/protobuf"


class TracingConfigError(ValueError):
    """An ``OTEL_*`` variable asks for something this program cannot do; one line."""


def unknown_exporter(name: str) -> str:
    return f"OTEL_TRACES_EXPORTER: {name!r} is not supported; use {', '.join(EXPORTERS)}"


def unknown_protocol(variable: str, value: str) -> str:
    return f"{variable}: {value!r} is not supported; use {' or '.join(PROTOCOLS)}"


def exporter_names(env: Mapping[str, str]) -> list[str]:
    """``OTEL_TRACES_EXPORTER``'s comma-separated names (default ``otlp``), checked."""
    names = [
        n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()
    ]
    for name in names:
        if name not in EXPORTERS:
            raise TracingConfigError(unknown_exporter(name))
    return names or ["otlp"]


def otlp_protocol(env: Mapping[str, str]) -> str:
    """The OTLP protocol for traces: the signal's variable first, then the general one."""
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = env.get(variable, "").strip()
        if value:
            if value.lower() not in PROTOCOLS:
                raise TracingConfigError(unknown_protocol(variable, value))
            return value.lower()
    return DEFAULT_PROTOCOL


def tracing_wanted(env: Mapping[str, str]) -> bool:
    """Whether ``env`` asks for traces: an OTLP endpoint or a named exporter, and neither
    ``OTEL_SDK_DISABLED=true`` nor ``OTEL_TRACES_EXPORTER=none``."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if "none" in exporter_names(env):
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip():
        return True  # an exporter named on purpose: OTLP then goes to its default endpoint
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def bad_exporter_setting(protocol: str, error: Exception) -> str:
    return f"the OTLP ({protocol}) exporter refuses its OTEL_EXPORTER_OTLP_* settings: {error}"


def otlp_exporter(protocol: str) -> SpanExporter:
    """The OTLP span exporter for ``protocol``; it reads its settings from ``OTEL_*``, and
    what it refuses (a gRPC compression of ``deflate``, a timeout of ``abc``) is one
    :class:`TracingConfigError`, since the exporters raise assorted exceptions for it.

    Each is imported only when chosen: no tracing, no exporter (nor gRPC) loaded."""
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter as GRPCSpanExporter,
            )

            return GRPCSpanExporter()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter as HTTPSpanExporter,
        )

        return HTTPSpanExporter()
    except Exception as e:  # whatever the exporter raises: its message, in one line
        raise TracingConfigError(bad_exporter_setting(protocol, e)) from e


def configure_tracing(service_name: str) -> TracerProvider | None:
    """Install a tracer provider with the exporters the environment asks for, or nothing.

    ``service_name`` names the service unless ``OTEL_SERVICE_NAME`` or a ``service.name`` in
    ``OTEL_RESOURCE_ATTRIBUTES`` does. Raises :class:`TracingConfigError` (one line) for an
    exporter or protocol it does not support."""
    env = os.environ
    if not tracing_wanted(env):
        return None
    names = exporter_names(env)
    protocol = otlp_protocol(env) if "otlp" in names else None
    otlp = otlp_exporter(protocol) if protocol is not None else None  # may refuse: first
    resource = Resource.create()  # OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    provider = TracerProvider(resource=resource)  # the sampler from OTEL_TRACES_SAMPLER(_ARG)
    if otlp is not None:
        provider.add_span_processor(BatchSpanProcessor(otlp))
    if "console" in names:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)
    where = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or "the default endpoint"
    )
    log.info(
        "tracing to %s",
        ", ".join(f"OTLP ({protocol}) at {where}" if n == "otlp" else "the console" for n in names),
    )
    return provider

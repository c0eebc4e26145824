"""The manager's HTTP endpoints: ``/healthz`` and ``/readyz`` on the probe address, and
Prometheus ``/metrics`` on the metrics address.

Metrics are served by prometheus_client's own server. The probes use the standard library's
threading HTTP server: two fixed paths need no framework. Nothing here decides health: checks
are functions the manager registers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

log = logging.getLogger(__name__)

Check = Callable[[], str | None]  # None: healthy; a string: why not


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """``:8080`` → ("0.0.0.0", 8080), ``127.0.0.1:0`` → a free port, ``0`` → disabled."""
    if address in ("0", ""):
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"bind address {address!r}: want HOST:PORT, :PORT, or 0 to disable")
    return (host.strip("[]") or "0.0.0.0", int(port))


class ProbeServer:
    """``/healthz`` and ``/readyz``; each answers 200 ``ok`` or 500 with the failed checks."""

    def __init__(self, host: str, port: int) -> None:
        self.health: dict[str, Check] = {"ping": lambda: None}
        self.ready: dict[str, Check] = {"ping": lambda: None}
        checks = {"/healthz": self.health, "/livez": self.health, "/readyz": self.ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0].rstrip("/")
                table = checks.get(path)
                if table is None:
                    self._reply(404, "not found\n")
                    return
                failed = [
                    f"{name}: {why}" for name, check in list(table.items()) if (why := _run(check))
                ]
                if failed:
                    self._reply(
                        500, "".join(f"[-] {f}\n" for f in failed) + f"{path[1:]} check failed\n"
                    )
                else:
                    self._reply(200, "ok")

            def _reply(self, code: int, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return  # probes are frequent; do not log each

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="probes", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _run(check: Check) -> str | None:
    try:
        return check()
    except Exception as e:
        return f"{type(e).__name__}: {e}"


class MetricsServer:
    """Prometheus ``/metrics`` for a registry."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry | None = None) -> None:
        self._server, self._thread = start_http_server(port, host, registry or REGISTRY)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

"""The kubelet API's log endpoint, for ``kubectl logs`` of pods the provider runs as
processes (``podrunner``), and the log files behind it.

``kube-apiserver`` serves ``pods/log`` by asking the pod's node's kubelet: it takes the
node's InternalIP and ``status.daemonEndpoints.kubeletEndpoint.Port`` and GETs
``https://<ip>:<port>/containerLogs/<namespace>/<pod>/<container>``. The provider's nodes
say 127.0.0.1 and the port of the ``KubeletServer`` here when it runs, so ``kubectl logs``,
``--tail``, ``--previous`` and ``-f`` reach these files. The server's certificate is
self-signed: kube-apiserver does not check it without ``--kubelet-certificate-authority``.

``LogStore`` keeps, per pod UID and container, the log of the current run and of the one
before it, as the kubelet keeps a restarted container's previous log.
"""

from __future__ import annotations

import logging
import shutil
import ssl
import tempfile
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ome.runtime.certs import generate_ca, issue_serving_cert

log = logging.getLogger(__name__)

#: How often a follower looks for new output.
FOLLOW_POLL = 0.2


@dataclass
class _Run:
    path: Path
    number: int
    ended: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Logs:
    """One container's runs: the current one (the latest started) and the previous."""

    current: _Run | None = None
    previous: _Run | None = None


class LogStore:
    """Log files under ``root``: ``<uid>/<container>/<n>.log`` for run ``n``; only the
    current run and the previous one are kept. Pods are found by namespace and name (the
    kubelet API's terms) through ``register``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._uids: dict[tuple[str, str], str] = {}
        self._logs: dict[tuple[str, str], _Logs] = {}

    def register(self, namespace: str, name: str, uid: str) -> None:
        """The pod ``namespace/name`` is (now) the one with ``uid``."""
        with self._lock:
            self._uids[(namespace, name)] = uid

    def uid_of(self, namespace: str, name: str) -> str | None:
        with self._lock:
            return self._uids.get((namespace, name))

    def new_run(self, uid: str, container: str) -> Path:
        """Start a run's log: the current one becomes the previous (the one before that is
        removed). Returns the new, empty file; the caller writes it."""
        with self._lock:
            logs = self._logs.setdefault((uid, container), _Logs())
            number = logs.current.number + 1 if logs.current else 0
            if logs.current is not None:
                logs.current.ended.set()
            if logs.previous is not None:
                logs.previous.path.unlink(missing_ok=True)
            directory = self.root / uid / container
            directory.mkdir(parents=True, exist_ok=True)
            run = _Run(directory / f"{number}.log", number)
            run.path.write_bytes(b"")
            logs.previous, logs.current = logs.current, run
            return run.path

    def end_run(self, uid: str, container: str) -> None:
        """The current run is over: followers stop once they have read all of it."""
        with self._lock:
            logs = self._logs.get((uid, container))
            if logs is not None and logs.current is not None:
                logs.current.ended.set()

    def run(self, uid: str, container: str, previous: bool = False) -> _Run | None:
        with self._lock:
            logs = self._logs.get((uid, container))
            if logs is None:
                return None
            return logs.previous if previous else logs.current

    def forget(self, uid: str) -> None:
        """The pod is gone: its logs too."""
        with self._lock:
            for key in [k for k in self._logs if k[0] == uid]:
                logs = self._logs.pop(key)
                for run in (logs.current, logs.previous):
                    if run is not None:
                        run.ended.set()
            for key in [k for k, v in self._uids.items() if v == uid]:
                del self._uids[key]
        shutil.rmtree(self.root / uid, ignore_errors=True)

    def close(self) -> None:
        """End every run, so that followers return."""
        with self._lock:
            for logs in self._logs.values():
                for run in (logs.current, logs.previous):
                    if run is not None:
                        run.ended.set()


def tail(data: bytes, lines: int | None) -> bytes:
    """The last ``lines`` lines of ``data`` (all of it for None or a negative number)."""
    if lines is None or lines < 0:
        return data
    if lines == 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


class LogRequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class LogQuery:
    namespace: str
    pod: str
    container: str
    follow: bool = False
    previous: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None


def _flag(values: dict[str, list[str]], name: str) -> bool:
    return (values.get(name) or ["false"])[-1].lower() in ("true", "1")


def _number(values: dict[str, list[str]], name: str) -> int | None:
    raw = (values.get(name) or [""])[-1]
    if raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise LogRequestError(400, f"invalid {name}: {raw!r}") from None


def parse_log_request(path: str) -> LogQuery | None:
    """``/containerLogs/{namespace}/{pod}/{container}?...`` as a query; None for another
    path. Raises ``LogRequestError`` for bad parameters."""
    url = urllib.parse.urlsplit(path)
    parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
    if len(parts) != 4 or parts[0] != "containerLogs":
        return None
    values = urllib.parse.parse_qs(url.query)
    return LogQuery(
        namespace=parts[1],
        pod=parts[2],
        container=parts[3],
        follow=_flag(values, "follow"),
        previous=_flag(values, "previous"),
        tail_lines=_number(values, "tailLines"),
        limit_bytes=_number(values, "limitBytes"),
    )


class KubeletServer:
    """``GET /containerLogs/...`` (and ``/healthz``) over HTTPS on 127.0.0.1, from a
    ``LogStore``. ``start()`` binds it; ``port`` is then its port."""

    def __init__(self, logs: LogStore, host: str = "127.0.0.1", port: int = 0) -> None:
        self.logs = logs
        self.host = host
        self.port = port
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._cert_dir: Path | None = None

    def start(self) -> None:
        ca = generate_ca("ome-sim-kubelet-ca")
        pair = issue_serving_cert(ca, ["localhost"], [self.host])
        self._cert_dir = Path(tempfile.mkdtemp(prefix="ome-sim-kubelet-"))
        cert, key = self._cert_dir / "tls.crt", self._cert_dir / "tls.key"
        cert.write_bytes(pair.cert_pem + ca.cert_pem)
        key.write_bytes(pair.key_pem)
        key.chmod(0o600)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        server = ThreadingHTTPServer((self.host, self.port), _handler(self))
        server.daemon_threads = True
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        self.port = int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever, name="gke-kubelet-api", daemon=True
        )
        self._thread.start()
        log.info("kubelet API on https://%s:%d", self.host, self.port)

    def stop(self) -> None:
        self._stopping.set()
        self.logs.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        if self._cert_dir is not None:
            shutil.rmtree(self._cert_dir, ignore_errors=True)

    # -- serving ---------------------------------------------------------------------------

    def serve_logs(self, query: LogQuery, write: Any) -> None:
        """Write the asked-for log through ``write(bytes)``; raises ``LogRequestError``."""
        uid = self.logs.uid_of(query.namespace, query.pod)
        run = self.logs.run(uid, query.container, query.previous) if uid else None
        if query.previous and run is None:
            raise LogRequestError(
                400,
                f'previous terminated container "{query.container}" in pod "{query.pod}" not found',
            )
        if run is None:
            return  # no logs (yet): empty, as for a container that wrote nothing
        left = query.limit_bytes if query.limit_bytes is not None else -1

        def send(data: bytes) -> bool:
            nonlocal left
            if left >= 0:
                data = data[:left]
                left -= len(data)
            if data:
                write(data)
            return left != 0

        try:
            handle = run.path.open("rb")
        except FileNotFoundError:
            return
        with handle:
            if not send(tail(handle.read(), query.tail_lines)) or not query.follow:
                return
            while not self._stopping.is_set():
                ended = run.ended.is_set()
                data = handle.read()
                if data and not send(data):
                    return
                if ended and not data:
                    return
                if not data:
                    run.ended.wait(FOLLOW_POLL)


def _handler(server: KubeletServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # streamed answers end when the connection closes

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("kubelet API: " + format, *args)

        def _plain(self, status: int, text: str) -> None:
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] in ("/healthz", "/readyz", "/livez"):
                self._plain(200, "ok")
                return
            try:
                query = parse_log_request(self.path)
            except LogRequestError as e:
                self._plain(e.status, str(e))
                return
            if query is None:
                self._plain(404, "404 page not found\n")
                return
            started = False

            def write(data: bytes) -> None:
                nonlocal started
                if not started:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.end_headers()
                    started = True
                self.wfile.write(data)
                self.wfile.flush()

            try:
                server.serve_logs(query, write)
            except LogRequestError as e:
                self._plain(e.status, str(e))
                return
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                return  # the client went
            if not started:
                write(b"")

    return Handler


__all__ = ["KubeletServer", "LogQuery", "LogRequestError", "LogStore", "parse_log_request", "tail"]

"""``round_trip`` against urllib3's own way through the same pool (``urlopen``, then ``read``):
the same answer for each kind of response, the same exception (type and text) for each
fault, the connection kept alive or dropped as urllib3 would, and no pool slot lost.

The server is a socket script: each request's path names what it does to the connection."""

from __future__ import annotations

import datetime
import gzip
import re
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import urllib3
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.util.retry import Retry

from ome.runtime.exchange import round_trip
from ome.runtime.rest import Rest

BODY = b'{"kind":"ConfigMap","metadata":{"name":"m"}}'
NO_RETRY = Retry(total=0, redirect=0, raise_on_status=False, respect_retry_after_header=False)


def _head(status: str, *fields: str) -> bytes:
    return ("\r\n".join((f"HTTP/1.1 {status}", *fields)) + "\r\n\r\n").encode()


def _ok(*extra: str, body: bytes = BODY) -> bytes:
    return (
        _head("200 OK", "Content-Type: application/json", f"Content-Length: {len(body)}", *extra)
        + body
    )


#: what the server sends for a path; None: close without a word; "silent": say nothing
ANSWERS: dict[str, bytes | str | None] = {
    "/ok": _ok(),
    "/close": _ok("Connection: close"),
    "/chunked": _head("200 OK", "Transfer-Encoding: chunked")
    + b"%x\r\n%s\r\n" % (len(BODY[:10]), BODY[:10])
    + b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY[10:]), BODY[10:]),
    "/gzip": _ok("Content-Encoding: gzip", body=gzip.compress(BODY)),
    "/empty": _head("200 OK", "Content-Length: 0"),
    "/conflict": _head(
        "409 Conflict",
        "Content-Type: application/json",
        "Retry-After: 3",
        'Warning: 299 - "one"',
        'Warning: 299 - "two"',
        f"Content-Length: {len(BODY)}",
    )
    + BODY,
    "/short": _head("200 OK", "Content-Length: 100") + BODY[:20],
    "/garbage": b"SMTP ready\r\n\r\n",
    "/reset": None,
    "/silent": "silent",
}


@dataclass
class Script:
    """A TCP server answering each request as ``ANSWERS`` says for its path."""

    tls: ssl.SSLContext | None = None
    connections: int = 0
    requests: list[tuple[int, str, str, bytes]] = field(
        default_factory=list
    )  # conn, method, path, body
    _sock: socket.socket = field(default_factory=socket.socket)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> int:
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.1)
        threading.Thread(target=self._accept, daemon=True).start()
        return int(self._sock.getsockname()[1])

    def stop(self) -> None:
        self._stop.set()
        self._sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn, self.connections), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            stream = conn.makefile("rb")
            while True:
                line = stream.readline()
                if not line:
                    return
                method, path, _ = line.decode().split(" ", 2)
                length = 0
                head = []
                while (header := stream.readline()) not in (b"\r\n", b""):
                    head.append(header)
                    name, _, value = header.decode().partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                body = stream.read(length) if length else b""
                self.requests.append((number, method, path, b"".join(head) + b"\r\n" + body))
                answer = ANSWERS[path]
                if answer is None:
                    return
                if answer == "silent":
                    self._stop.wait(5)
                    return
                assert isinstance(answer, bytes)
                conn.sendall(answer)
                if b"Connection: close" in answer or path in ("/short", "/garbage"):
                    return
        except (OSError, ValueError):
            return
        finally:
            conn.close()


@pytest.fixture
def script() -> Iterator[Script]:
    server = Script()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _pool(port: int, scheme: str = "http", **kw: Any) -> urllib3.HTTPConnectionPool:
    manager = urllib3.PoolManager(maxsize=4, retries=NO_RETRY, **kw)
    return manager.connection_from_url(f"{scheme}://127.0.0.1:{port}")


def _by_urlopen(
    pool: urllib3.HTTPConnectionPool, method: str, path: str, body: bytes | None, timeout: float
) -> tuple[Any, ...]:
    raw = pool.urlopen(
        method,
        path,
        body=body,
        headers={"Accept": "application/json", "User-Agent": "t/1"},
        timeout=urllib3.Timeout(total=timeout),
        preload_content=False,
        redirect=False,
        assert_same_host=False,
        retries=NO_RETRY,
    )
    data = raw.read()
    raw.release_conn()
    return raw.status, raw.reason, dict(raw.headers), raw.headers.getlist("Warning"), data


def _by_exchange(
    pool: urllib3.HTTPConnectionPool, method: str, path: str, body: bytes | None, timeout: float
) -> tuple[Any, ...]:
    reply = round_trip(
        pool,
        method,
        path,
        {"Accept": "application/json", "User-Agent": "t/1"},
        body,
        urllib3.Timeout(total=timeout),
        NO_RETRY,
    )
    headers = reply.headers()
    return reply.status, reply.reason, dict(headers), headers.getlist("Warning"), reply.data


def _outcome(call: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
    try:
        return ("answer", *call())
    except Exception as e:  # the fault, as a caller would classify and log it
        reason = getattr(e, "reason", None)
        # what is left of a total timeout when the read starts differs by microseconds
        text = re.sub(r"read timeout=[0-9.]+", "read timeout=...", str(e))
        return ("raised", type(e).__name__, text, type(reason).__name__)


CASES = [
    ("GET", "/ok", None),
    ("POST", "/ok", BODY),
    ("PUT", "/close", BODY),
    ("GET", "/chunked", None),
    ("GET", "/gzip", None),
    ("POST", "/empty", None),
    ("DELETE", "/conflict", BODY),
    ("GET", "/short", None),
    ("POST", "/short", BODY),
    ("GET", "/garbage", None),
    ("GET", "/reset", None),
    ("POST", "/reset", BODY),
    ("PATCH", "/reset", BODY),
    ("GET", "/silent", None),
    ("POST", "/silent", BODY),
]


@pytest.mark.parametrize(("method", "path", "body"), CASES, ids=[f"{m} {p}" for m, p, _ in CASES])
def test_each_answer_and_fault_comes_out_as_urlopen_gives_it(
    script: Script, method: str, path: str, body: bytes | None
) -> None:
    pool = _pool(int(script._sock.getsockname()[1]))
    theirs = _outcome(lambda: _by_urlopen(pool, method, path, body, 0.5))
    sent_by_urlopen = [r[1:] for r in script.requests]
    script.requests.clear()
    ours = _outcome(lambda: _by_exchange(pool, method, path, body, 0.5))
    assert ours == theirs
    assert [r[1:] for r in script.requests] == sent_by_urlopen
    assert pool.pool is not None and pool.pool.qsize() == 4, "every slot is back in the pool"


def test_a_refused_connection_comes_out_as_urlopen_gives_it() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # closed once the block ends: nothing listens there
    pool = _pool(port)
    theirs = _outcome(lambda: _by_urlopen(pool, "GET", "/ok", None, 0.5))
    ours = _outcome(lambda: _by_exchange(pool, "GET", "/ok", None, 0.5))
    assert ours == theirs
    assert ours[1] == "MaxRetryError" and ours[3] == "NewConnectionError"


def test_one_kept_alive_connection_and_a_new_one_after_each_fault(script: Script) -> None:
    """A connection left by a fault (the server gone, a timeout, a short body) is never
    used again: the next request on the pool goes on a new one."""
    pool = _pool(int(script._sock.getsockname()[1]))
    paths = ["/ok", "/ok", "/close", "/ok", "/reset", "/ok", "/silent", "/ok", "/short", "/ok"]
    outcomes = [
        _outcome(lambda path=path: _by_exchange(pool, "GET", path, None, 0.3)) for path in paths
    ]
    assert [o[0] for o in outcomes] == ["answer"] * 4 + ["raised", "answer"] * 3
    assert [(c, p) for c, _, p, _ in script.requests] == [
        (1, "/ok"),
        (1, "/ok"),
        (1, "/close"),
        (2, "/ok"),
        (2, "/reset"),
        (3, "/ok"),
        (3, "/silent"),
        (4, "/ok"),
        (4, "/short"),
        (5, "/ok"),
    ]


def _certificate(tmp_path: Path) -> tuple[ssl.SSLContext, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-server")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("test-server")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file = tmp_path / "tls.crt"
    key_file = tmp_path / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context, cert_file


def test_tls_is_as_the_pool_sets_it_up(tmp_path: Path) -> None:
    """Verified against the configured CA and the name it is told to expect; a server the
    CA did not sign fails the same way both ways."""
    context, ca = _certificate(tmp_path)
    server = Script(tls=context)
    port = server.start()
    try:
        trusted = _pool(
            port,
            "https",
            cert_reqs="CERT_REQUIRED",
            ca_certs=str(ca),
            server_hostname="test-server",
        )
        assert _by_exchange(trusted, "GET", "/ok", None, 2)[-1] == BODY
        assert _by_exchange(trusted, "GET", "/ok", None, 2)[-1] == BODY
        assert [c for c, *_ in server.requests] == [1, 1], "one TLS connection, kept alive"
        (tmp_path / "other").mkdir()
        _, other_ca = _certificate(tmp_path / "other")
        untrusted = _pool(
            port,
            "https",
            cert_reqs="CERT_REQUIRED",
            ca_certs=str(other_ca),
            server_hostname="test-server",
        )
        theirs = _outcome(lambda: _by_urlopen(untrusted, "GET", "/ok", None, 2))
        ours = _outcome(lambda: _by_exchange(untrusted, "GET", "/ok", None, 2))
        assert ours == theirs
        assert ours[1] == "MaxRetryError" and ours[3] == "SSLError"
        wrong_name = _pool(
            port, "https", cert_reqs="CERT_REQUIRED", ca_certs=str(ca), server_hostname="elsewhere"
        )
        theirs = _outcome(lambda: _by_urlopen(wrong_name, "GET", "/ok", None, 2))
        ours = _outcome(lambda: _by_exchange(wrong_name, "GET", "/ok", None, 2))
        assert ours == theirs
        assert "elsewhere" in ours[2]
    finally:
        server.stop()


def test_rest_reports_an_api_error_with_its_headers_and_body(script: Script) -> None:
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{script._sock.getsockname()[1]}"
    rest = Rest(client.ApiClient(cfg), user_agent="ome-test/1.0")
    with pytest.raises(ApiException) as raised:
        rest.request("DELETE", "/conflict")
    error = raised.value
    assert (error.status, error.reason, error.body) == (409, "Conflict", BODY.decode())
    assert error.headers["Retry-After"] == "3"
    assert error.headers.getlist("Warning") == ['299 - "one"', '299 - "two"']
    assert rest.request("GET", "/gzip") == {"kind": "ConfigMap", "metadata": {"name": "m"}}

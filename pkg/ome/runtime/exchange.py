"""One whole request and response on a urllib3 connection pool's connection, without
urllib3's request and response objects. It knows nothing of TPUs.

Written by hand because urllib3 has no lighter way through a pool than ``urlopen``, and
that way was 45% of a request's client CPU (143 µs against 78 µs for the same GET on the
same kept-alive connection with http.client, on the embedded API server): it wraps every
response in its own ``HTTPResponse`` with a second header dictionary, checks the headers
again, builds a Retry and a Timeout per call, and reads the body through a context manager.
The manager sends about 20 such requests per service.

What stays urllib3's: the pool (connections are taken with ``_get_conn``, dropped ones
detected and replaced, and put back with ``_put_conn``), its connection classes (so TLS,
``assert_hostname``, ``server_hostname``, client certificates and the send guard are as the
pool sets them up), its ``Timeout`` arithmetic and its ``Retry.increment``. What is
mirrored here, line for line from urllib3 2.x's ``HTTPConnectionPool.urlopen``,
``_make_request``, ``HTTPConnection.request`` and ``HTTPResponse._error_catcher``: the bytes
sent (request line, ``Accept-Encoding: identity``, ``Content-Length`` then the caller's
headers, the body as a second send), and which exception a fault becomes, so callers that
classify ``ProtocolError``, ``ReadTimeoutError``, ``MaxRetryError`` and ``SSLError`` see the
same ones. ``test/integration/test_exchange.py`` runs each fault through both ways and
compares them.

Only for whole responses; a watch streams through ``urlopen``.
"""

from __future__ import annotations

import errno
import http.client
import ssl
import sys
import zlib
from dataclasses import dataclass
from typing import Any

import urllib3.exceptions
from urllib3 import HTTPHeaderDict
from urllib3.connection import _get_default_user_agent, _normalize_header_values
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import (
    DecodeError,
    NewConnectionError,
    ProtocolError,
    ProxyError,
    ReadTimeoutError,
    SSLError,
)
from urllib3.util.retry import Retry
from urllib3.util.timeout import Timeout

#: urllib3's ``_METHODS_NOT_EXPECTING_BODY``: the others send ``Content-Length: 0`` bodiless
_NO_BODY_EXPECTED = frozenset({"GET", "HEAD", "DELETE", "TRACE", "OPTIONS", "CONNECT"})


@dataclass(frozen=True, slots=True)
class Reply:
    """A whole response, its body decoded."""

    status: int
    reason: str
    message: http.client.HTTPMessage
    data: bytes

    def headers(self) -> HTTPHeaderDict:
        """The headers as urllib3 gives them (case-insensitive, values normalized): made on
        demand, since only errors read them."""
        return HTTPHeaderDict(_normalize_header_values(self.message))


def round_trip(
    pool: HTTPConnectionPool,
    method: str,
    url: str,
    headers: dict[str, str],
    body: bytes | None,
    timeout: Timeout,
    retries: Retry,
) -> Reply:
    """Send ``method url`` (a path on the pool's host) and read the whole response, as
    ``pool.urlopen(..., redirect=False, assert_same_host=False, preload_content=True)``
    followed by ``read()`` would. ``retries`` must allow no retry (the callers retry): a
    fault raises as ``Retry.increment`` decides, as in urlopen."""
    conn: Any = None
    response: http.client.HTTPResponse | None = None
    clean = False
    try:
        conn = pool._get_conn()
        timeout_obj = pool._get_timeout(timeout)
        timeout_obj.start_connect()
        conn.timeout = Timeout.resolve_default_timeout(timeout_obj.connect_timeout)
        try:
            try:
                pool._validate_conn(conn)  # HTTPS: connects (TLS) now; HTTP: on the first send
            except (TimeoutError, ssl.SSLError) as e:
                pool._raise_timeout(err=e, url=url, timeout_value=conn.timeout)
                raise
        except (
            OSError,
            NewConnectionError,
            urllib3.exceptions.TimeoutError,
            ssl.SSLError,
            ssl.CertificateError,
            SSLError,
        ) as e:
            if isinstance(e, ssl.SSLError | ssl.CertificateError):
                raise SSLError(e) from e
            raise
        try:
            _send(conn, method, url, headers, body)
        except BrokenPipeError:
            pass  # the server may have answered already (say, 413): read what it sent
        except OSError as e:
            if e.errno not in (errno.EPROTOTYPE, errno.ECONNRESET):
                raise
        read_timeout = timeout_obj.read_timeout
        if conn.sock is not None:
            if read_timeout == 0:
                raise ReadTimeoutError(pool, url, f"Read timed out. (read timeout={read_timeout})")
            conn.timeout = read_timeout
        try:
            conn.sock.settimeout(conn.timeout)
            response = http.client.HTTPConnection.getresponse(conn)
        except (ssl.SSLError, OSError) as e:
            pool._raise_timeout(err=e, url=url, timeout_value=read_timeout)
            raise
    except (
        urllib3.exceptions.TimeoutError,
        http.client.HTTPException,
        OSError,
        ProtocolError,
        ssl.SSLError,
        SSLError,
        ssl.CertificateError,
        ProxyError,
    ) as e:
        failure: Exception = e
        if isinstance(e, ssl.SSLError | ssl.CertificateError):
            failure = SSLError(e)
        elif isinstance(failure, OSError | http.client.HTTPException):
            failure = ProtocolError("Connection aborted.", failure)
        retries.increment(method, url, error=failure, _pool=pool, _stacktrace=sys.exc_info()[2])
        raise failure from e  # a Retry that allows none raises above; this is for the rest
    else:
        try:
            data = _read(pool, response)
            clean = True
        finally:
            if not clean:
                response.close()
        return Reply(response.status, response.reason, response.msg, _decoded(response, data))
    finally:
        if conn is not None:
            if not clean:
                conn.close()
            pool._put_conn(conn)


def _send(conn: Any, method: str, url: str, headers: dict[str, str], body: bytes | None) -> None:
    """urllib3's ``HTTPConnection.request`` for a body of bytes (or none), through
    http.client's own methods on the urllib3 connection (whose ``send`` is guarded)."""
    keys = frozenset(k.lower() for k in headers)
    conn.putrequest(
        method, url, skip_accept_encoding="accept-encoding" in keys, skip_host="host" in keys
    )
    if "content-length" not in keys and "transfer-encoding" not in keys:
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        elif method.upper() not in _NO_BODY_EXPECTED:
            conn.putheader("Content-Length", "0")  # as urllib3's body_to_chunks says
    if "user-agent" not in keys:
        conn.putheader("User-Agent", _get_default_user_agent())
    for name, value in headers.items():
        conn.putheader(name, value)
    conn.endheaders()
    if body:
        conn.send(body)


def _read(pool: HTTPConnectionPool, response: http.client.HTTPResponse) -> bytes:
    """The whole body; a fault as urllib3's ``HTTPResponse._error_catcher`` turns it."""
    try:
        return response.read()
    except TimeoutError as e:
        raise ReadTimeoutError(pool, None, "Read timed out.") from e
    except ssl.SSLError as e:
        raise SSLError(e) from e
    except (http.client.HTTPException, OSError) as e:
        raise ProtocolError(f"Connection broken: {e!r}", e) from e


def _decoded(response: http.client.HTTPResponse, data: bytes) -> bytes:
    """The body without its content coding. Requests ask for ``identity`` (http.client
    sends ``Accept-Encoding: identity``), so a coding is a server's choice: gzip and
    deflate are undone as urllib3 undoes them, any other is a ``DecodeError``."""
    coding = (response.getheader("Content-Encoding") or "").strip().lower()
    if not coding or coding == "identity" or not data:
        return data
    try:
        if coding in ("gzip", "x-gzip"):
            return zlib.decompress(data, 16 + zlib.MAX_WBITS)
        if coding == "deflate":
            try:
                return zlib.decompress(data)
            except zlib.error:
                return zlib.decompress(data, -zlib.MAX_WBITS)  # raw deflate, as urllib3 allows
    except zlib.error as e:
        raise DecodeError(
            f"Received response with content-encoding: {coding}, but failed to decode it.", e
        ) from e
    raise DecodeError(f"Received response with content-encoding: {coding}, not decoded here")

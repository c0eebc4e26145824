"""Server-side TLS for the manager's HTTPS endpoints (admission webhooks, metrics): a
context per certificate pair, rebuilt when a ``CertSource`` hands out a new pair, and the
handshake of one accepted connection.

Written on the standard library's ``ssl``: the servers are ``ThreadingHTTPServer``s (see
``webhook`` and ``serving``) that wrap each accepted socket in its own thread, so a client
that never completes its handshake holds only that thread, for ``HANDSHAKE_TIMEOUT``.
"""

from __future__ import annotations

import logging
import os
import socket
import socketserver
import ssl
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .certs import KeyPair, not_after
from .webhookcerts import CertSource

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 10.0
"""Seconds a new connection may take to complete its TLS handshake."""


class ServingContexts:
    """The TLS context for ``certs.current()``, cached until the pair changes: a rotated
    certificate is served to the next connection without a restart.

    Shared by the connection threads of one server: ``_cached`` (the last pair and what was
    built from it) is read and replaced under ``_lock`` only."""

    def __init__(self, certs: CertSource, what: str) -> None:
        self._certs = certs
        self._what = what  # "webhook", "metrics": for the log lines
        self._lock = threading.Lock()
        self._cached: tuple[KeyPair, ssl.SSLContext | str] | None = None

    def get(self) -> tuple[ssl.SSLContext | None, str]:
        """The TLS context for the current certificate, or None and why there is none."""
        try:
            pair = self._certs.current()
        except Exception as e:
            return None, f"the certificate source failed: {type(e).__name__}: {e}"
        if pair is None:
            try:
                why = self._certs.ready() or "none loaded yet"
            except Exception as e:
                why = f"{type(e).__name__}: {e}"
            return None, f"no serving certificate: {why}"
        with self._lock:
            if self._cached is None or self._cached[0] != pair:
                built = tls_context(pair)
                if isinstance(built, str):
                    log.error("cannot serve the %s certificate: %s", self._what, built)
                else:
                    log.info("serving the %s certificate expiring %s", self._what, _expiry(pair))
                self._cached = (pair, built)
            context = self._cached[1]
        if isinstance(context, str):
            return None, f"the serving certificate is unusable: {context}"
        return context, ""

    def handshake(self, sock: socket.socket, address: Any) -> ssl.SSLSocket | None:
        """``sock`` wrapped in TLS, or None (logged at debug) when there is no certificate or
        the handshake fails; the caller closes ``sock`` then."""
        context, why = self.get()
        if context is None:
            log.debug("closing a connection from %s: %s", address, why)
            return None
        sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            return context.wrap_socket(sock, server_side=True)
        except (OSError, ValueError) as e:  # ssl.SSLError and timeouts are OSErrors
            log.debug("TLS handshake with %s failed: %s", address, e)
            return None


class TLSServer(ThreadingHTTPServer):
    """A threading HTTP server whose connections are wrapped in TLS on their own thread
    (``contexts.handshake``), then served by ``handler``; a failed handshake closes the
    connection. The address family follows the host (IPv6 for ``::``), and binding never
    looks up the host's FQDN, which may stall on DNS."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        contexts: ServingContexts,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.contexts = contexts
        super().__init__(address, handler)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def finish_request(self, request: Any, client_address: Any) -> None:
        if not isinstance(request, socket.socket):
            return
        tls = self.contexts.handshake(request, client_address)
        if tls is None:
            return  # the server closes the socket
        try:
            super().finish_request(tls, client_address)
        finally:
            tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


def tls_context(pair: KeyPair) -> ssl.SSLContext | str:
    """A server context for ``pair`` (TLS 1.2 at least, HTTP/1.1), or why it cannot be made."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    try:
        _load_chain(context, pair)
    except (ssl.SSLError, OSError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    return context


def _load_chain(context: ssl.SSLContext, pair: KeyPair) -> None:
    """``ssl`` loads a certificate and key only from files. On Linux they are anonymous
    in-memory files (works on a read-only root filesystem, never touches a disk); elsewhere,
    files in a private temporary directory, removed at once."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fds: list[int] = []
        try:
            for data in (pair.cert_pem, pair.key_pem):
                fds.append(os.memfd_create("serving-tls", os.MFD_CLOEXEC))
                view = memoryview(data)
                while view:
                    view = view[os.write(fds[-1], view) :]
            context.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="serving-tls-") as directory:
        cert_file = os.path.join(directory, "tls.crt")
        key_file = os.path.join(directory, "tls.key")
        for path, data in ((cert_file, pair.cert_pem), (key_file, pair.key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        context.load_cert_chain(cert_file, key_file)


def _expiry(pair: KeyPair) -> str:
    try:
        return not_after(pair.cert_pem).isoformat()
    except ValueError:
        return "(unknown)"

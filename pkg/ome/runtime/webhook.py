"""An HTTPS server for validating admission webhooks: it reads ``admission.k8s.io/v1``
AdmissionReviews, hands each to the handler registered for its path, and writes the answer.

Built on the standard library's ``ThreadingHTTPServer`` and ``ssl``, like the probe server:
one POST route per webhook needs no framework, and an asyncio one (aiohttp) would have to
run its own event loop beside the manager's threads, while the handlers are plain blocking
functions. What the standard server lacks is added here: TLS whose certificate may change
while it runs, and answers that are always JSON, never a 500 or a dead server.

- TLS is set up per connection, in that connection's thread and under a timeout, with a
  context built from ``certs.current()`` (cached until the pair changes): a rotated
  certificate is served to the next connection without a restart, and a client that never
  completes its handshake holds only its own thread, for a while. TLS 1.2 is the minimum.
- Until the certificate source holds a pair, connections are closed and ``ready()`` says why.
- Input that is not an AdmissionReview with a ``request.uid`` is answered 400 with a short
  ``{"error": ...}``: without a uid no review can be answered. A handler that raises admits
  the request with a warning saying it went unchecked, and its traceback is logged.

It knows nothing of what the handlers check.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from ome.kube import JSON

from .tlsserve import ServingContexts, TLSServer
from .webhookcerts import CertSource

log = logging.getLogger(__name__)

REVIEW_API_VERSION = "admission.k8s.io/v1"
REVIEW_KIND = "AdmissionReview"
MAX_BODY = 3 * 1024 * 1024
"""The largest request body read (kube-apiserver's objects are capped near this size)."""
IDLE_TIMEOUT = 60.0
"""Seconds a connection may sit idle (kept alive between reviews, or mid-request)."""


@dataclass(frozen=True)
class AdmissionRequest:
    """The ``request`` of an AdmissionReview, its common fields picked out."""

    uid: str
    kind: JSON  # {"group", "version", "kind"} as sent
    resource: JSON
    operation: str  # CREATE | UPDATE | DELETE | CONNECT
    namespace: str
    name: str
    object: JSON | None
    old_object: JSON | None
    dry_run: bool
    raw: JSON  # the whole `request` object


@dataclass(frozen=True)
class AdmissionResponse:
    """A handler's verdict. ``code`` 0 means 403 when denied and 200 when allowed."""

    allowed: bool
    message: str = ""  # status.message (set when denied; may be set when allowed)
    code: int = 0  # status.code
    reason: str = ""  # status.reason
    warnings: tuple[str, ...] = ()


Handler = Callable[[AdmissionRequest], AdmissionResponse]


class BadReviewError(ValueError):
    """The body is no AdmissionReview that can be answered; the text says what is wrong."""


def parse_review(review: Any) -> AdmissionRequest:
    """The request of a decoded AdmissionReview; raises ``BadReviewError`` naming what is wrong."""
    if not isinstance(review, dict):
        raise BadReviewError(f"an AdmissionReview is a JSON object, not {_json_type(review)}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReviewError(
            "request is missing" if request is None else "request must be an object"
        )
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReviewError(
            "request.uid is missing" if not uid else "request.uid must be a string"
        )
    api_version, kind = review.get("apiVersion"), review.get("kind")
    if api_version != REVIEW_API_VERSION:
        raise BadReviewError(f"apiVersion must be {REVIEW_API_VERSION}, not {_shown(api_version)}")
    if kind != REVIEW_KIND:
        raise BadReviewError(f"kind must be {REVIEW_KIND}, not {_shown(kind)}")
    dry_run = request.get("dryRun")
    if dry_run is not None and not isinstance(dry_run, bool):
        raise BadReviewError("request.dryRun must be a boolean")
    return AdmissionRequest(
        uid=uid,
        kind=_field(request, "kind", dict, {}),
        resource=_field(request, "resource", dict, {}),
        operation=_field(request, "operation", str, ""),
        namespace=_field(request, "namespace", str, ""),
        name=_field(request, "name", str, ""),
        object=_field(request, "object", dict, None),
        old_object=_field(request, "oldObject", dict, None),
        dry_run=bool(dry_run),
        raw=request,
    )


def _field(request: JSON, key: str, kind: type, default: Any) -> Any:
    value = request.get(key)
    if value is None:
        return default
    if not isinstance(value, kind):
        want = "an object" if kind is dict else "a string"
        raise BadReviewError(f"request.{key} must be {want}, not {_json_type(value)}")
    return value


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null"


def review_response(uid: str, answer: AdmissionResponse) -> JSON:
    """The AdmissionReview answering request ``uid`` with ``answer``."""
    response: JSON = {"uid": uid, "allowed": bool(answer.allowed)}
    if not answer.allowed or answer.message:
        response["status"] = {
            "code": int(answer.code) or (200 if answer.allowed else 403),
            "message": str(answer.message),
            "reason": str(answer.reason),
        }
    if answer.warnings:
        response["warnings"] = [str(w) for w in answer.warnings]
    return {"apiVersion": REVIEW_API_VERSION, "kind": REVIEW_KIND, "response": response}


def unchecked(error: BaseException) -> AdmissionResponse:
    """What a handler that raised answers: admitted, with a warning naming the failure."""
    text = " ".join(str(error).split())
    return AdmissionResponse(
        allowed=True,
        warnings=(f"admitted unchecked: the webhook failed: {type(error).__name__}: {text}",),
    )


class WebhookServer:
    """Serves registered handlers over HTTPS at ``host:port`` (port 0: a free one, chosen at
    ``start``). Handlers run on the connection's thread, so several may run at once."""

    def __init__(self, host: str, port: int, certs: CertSource) -> None:
        self._address = (host, port)
        self._certs = certs
        self._handlers: dict[str, Handler] = {}
        self._lock = threading.Lock()
        self._contexts = ServingContexts(certs, "webhook")
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    def register(self, path: str, handler: Handler) -> None:
        """Serve ``handler`` at ``path`` (as in the webhook's ``clientConfig``, no query)."""
        if not path.startswith("/") or "?" in path:
            raise ValueError(f"a webhook path starts with / and has no query, not {path!r}")
        with self._lock:
            if path in self._handlers:
                raise ValueError(f"a webhook is already registered at {path}")
            self._handlers[path] = handler

    def handler(self, path: str) -> Handler | None:
        with self._lock:
            return self._handlers.get(path)

    @property
    def port(self) -> int:
        """The bound port once started; before, the port asked for."""
        if self._server is not None:
            return int(self._server.server_address[1])
        return self._address[1]

    def start(self) -> None:
        """Bind, and serve in a daemon thread."""
        if self._server is not None:
            raise RuntimeError("the webhook server is already started")
        self._server = _Server(self._address, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.1,), name="webhooks", daemon=True
        )
        self._thread.start()
        log.info("webhook server listening on %s:%d", self._address[0], self.port)

    def stop(self) -> None:
        """Stop accepting connections and close the socket; requests in flight may finish."""
        server, self._stopped = self._server, True
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def ready(self) -> str | None:
        """None once serving with a certificate; otherwise why not."""
        if self._stopped:
            return "the webhook server is stopped"
        if self._server is None:
            return "the webhook server is not started"
        context, why = self._contexts.get()
        return None if context is not None else why


class _Server(TLSServer):
    def __init__(self, address: tuple[str, int], owner: WebhookServer) -> None:
        self.owner = owner
        super().__init__(address, _RequestHandler, owner._contexts)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as kube-apiserver's client expects
    timeout = IDLE_TIMEOUT
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server_version = "ome-webhook"
    sys_version = ""

    def do_POST(self) -> None:
        self._body_read = False
        path = self.path.split("?", 1)[0]
        handler = self._server().owner.handler(path)
        if handler is None:
            self._drain()
            self._error(404, f"no webhook is served at {path}")
            return
        body = self._read_body()
        if body is None:
            return
        content_type = self.headers.get("Content-Type")
        media_type = (content_type or "").split(";", 1)[0].strip().lower()
        if media_type != "application/json":
            self._error(
                400,
                "Content-Type must be application/json, not "
                + (json.dumps(content_type) if content_type is not None else "missing"),
            )
            return
        try:
            request = parse_review(json.loads(body))
        except BadReviewError as e:
            self._error(400, str(e))
            return
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            self._error(400, f"the body is not JSON: {e}")
            return
        self._reply(200, self._review(path, handler, request))

    def _review(self, path: str, handler: Handler, request: AdmissionRequest) -> bytes:
        try:
            answer: object = handler(request)
            if not isinstance(answer, AdmissionResponse):
                raise TypeError(f"the handler returned {type(answer).__name__}")
            data = json.dumps(review_response(request.uid, answer)).encode()
        except Exception as e:
            log.exception(
                "webhook %s failed on %s %s %s/%s (uid %s): admitting it unchecked",
                path,
                request.operation,
                request.kind.get("kind", ""),
                request.namespace,
                request.name,
                request.uid,
            )
            answer = unchecked(e)
            data = json.dumps(review_response(request.uid, answer)).encode()
        log.debug(
            "webhook %s: %s %s %s/%s (uid %s) allowed=%s",
            path,
            request.operation,
            request.kind.get("kind", ""),
            request.namespace,
            request.name,
            request.uid,
            answer.allowed,
        )
        return data

    def _length(self) -> int | tuple[int, str]:
        """The body's length, or the error to answer; a body without either header is
        empty (RFC 9112), but a review must say its length."""
        if self.headers.get("Transfer-Encoding", "identity").lower() != "identity":
            return 411, "send the body with a Content-Length, not chunked"
        raw = self.headers.get("Content-Length")
        if raw is None:
            return 0
        try:
            length = int(raw)
        except ValueError:
            length = -1
        if length < 0:
            return 400, f"Content-Length {raw!r} is not a length"
        if length > MAX_BODY:
            return 413, f"the body of {length} bytes is over the limit of {MAX_BODY}"
        return length

    def _read_body(self) -> bytes | None:
        """The request body, or None once an error has been answered."""
        length = self._length()
        if isinstance(length, tuple):
            self._error(*length)
            return None
        if self.headers.get("Content-Length") is None:
            self._body_read = True  # there is none
            self._error(411, "Content-Length is required")
            return None
        body = self.rfile.read(length)
        if len(body) < length:  # the client hung up mid-body: no one to answer
            self.close_connection = True
            return None
        self._body_read = True
        return body

    def _drain(self) -> None:
        """Read and drop the body of a request refused unread, so the connection may be
        kept, and the answer is not lost to a reset when it closes with data unread."""
        length = self._length()
        if isinstance(length, int):
            self._body_read = len(self.rfile.read(length)) == length

    def _not_allowed(self) -> None:
        self._body_read = False
        self._drain()
        path = self.path.split("?", 1)[0]
        if self._server().owner.handler(path) is None:
            self._error(404, f"no webhook is served at {path}")
        else:
            self._error(405, f"method {self.command} is not allowed: webhooks take POST")

    def __getattr__(self, name: str) -> Any:
        # BaseHTTPRequestHandler looks up do_<METHOD>; every method but POST is refused.
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # The base class's own errors (a bad request line, headers too long): JSON, too.
        self._body_read = False
        self._error(code, message or self.responses.get(code, ("error", ""))[0])

    def _error(self, code: int, message: str) -> None:
        # The base class may refuse a request before its method and path are known.
        method, path = getattr(self, "command", None), getattr(self, "path", None)
        log.debug("webhook request %s %s answered %d: %s", method, path, code, message)
        # A body left unread would be taken for the next request: close instead.
        close = not getattr(self, "_body_read", False)
        if close:
            self.close_connection = True
        self._reply(code, json.dumps({"error": message}).encode(), close=close)

    def _reply(self, code: int, data: bytes, close: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if code == 405:
            self.send_header("Allow", "POST")
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        if getattr(self, "command", None) != "HEAD":
            self.wfile.write(data)

    def _server(self) -> _Server:
        assert isinstance(self.server, _Server)
        return self.server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("webhook server: " + format, *args)

"""Plain-JSON access to any Kubernetes resource through the official client's ``ApiClient``.

The generated API classes deserialize into pydantic models, which cost memory and reject
objects that lack fields the models require; caches here hold plain dicts. So this module
keeps the official client's configuration, authentication and connection pool, and asks it
for raw responses. It knows nothing of TPUs and holds no state beyond the client.
"""

from __future__ import annotations

import builtins
import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.util.retry import Retry
from urllib3.util.url import parse_url

from ome.kube import JSON, Resource, json_dumps, json_loads

from .exchange import round_trip
from .httpheaders import Response

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


PODS = Resource("", "v1", "pods")
BINDINGS = Resource("", "v1", "bindings")
NODES = Resource("", "v1", "nodes", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
EVENTS = Resource("", "v1", "events")
CONFIGMAPS = Resource("", "v1", "configmaps")
SECRETS = Resource("", "v1", "secrets")
LEASES = Resource("coordination.k8s.io", "v1", "leases")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False)
VALIDATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", namespaced=False
)


#: Asked on the socket before each write of a request's bytes (its head, then its body); it
#: raises to stop the request. Set for a call with ``send_guard``. A context variable, so
#: each worker thread has its own and a guard never reaches another thread's requests.
_SEND_GUARD: ContextVar[Callable[[], None] | None] = ContextVar("ome_send_guard", default=None)


@contextlib.contextmanager
def send_guard(check: Callable[[], None]) -> Iterator[None]:
    """Within the block, every request of this thread asks ``check`` on the socket, just
    before its bytes go out: after the body was serialized and a connection taken from the
    pool, either of which may take long enough for a lease to run out."""
    token = _SEND_GUARD.set(check)
    try:
        yield
    finally:
        _SEND_GUARD.reset(token)


class _GuardedSend:
    """urllib3 connections that ask this thread's send guard before each ``send``.

    Written by hand because neither the kubernetes client nor urllib3 has a hook between
    "the request is built" and "its bytes are written": a check made any earlier (in
    ``Rest.request``) leaves the body's serialization and urllib3's pool work after it, and
    a paused leader stopped there sent its write on resuming. What is left after this check
    is ``sendall`` itself. A guard that refuses the body after the head went out closes the
    connection; the server never gets a whole request."""

    def send(self, data: Any) -> None:
        guard = _SEND_GUARD.get()
        if guard is not None:
            guard()
        super().send(data)  # type: ignore[misc]


class _GuardedHTTPConnection(_GuardedSend, HTTPConnection):
    response_class = Response  # headers parsed without the email package


class _GuardedHTTPSConnection(_GuardedSend, HTTPSConnection):
    response_class = Response


class _GuardedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = _GuardedHTTPConnection


class _GuardedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPSConnection


# Named as urllib3's own, since their names are in the errors users read
# (``HTTPConnectionPool(host='10.0.0.1', port=443): Max retries exceeded ...``).
for _cls, _base in (
    (_GuardedHTTPConnection, HTTPConnection),
    (_GuardedHTTPSConnection, HTTPSConnection),
    (_GuardedHTTPConnectionPool, HTTPConnectionPool),
    (_GuardedHTTPSConnectionPool, HTTPSConnectionPool),
):
    _cls.__name__ = _cls.__qualname__ = _base.__name__


def _timeout(timeout: float | tuple[float, float]) -> urllib3.Timeout:
    """A request's timeout as the client's REST layer reads it: a total, or (connect,
    read)."""
    if isinstance(timeout, tuple):
        return urllib3.Timeout(connect=timeout[0], read=timeout[1])
    return urllib3.Timeout(total=timeout)


class Rest:
    """Requests that send and return JSON dicts. Non-2xx answers raise ``ApiException``
    with the server's ``Status`` body, as the generated client does."""

    def __init__(
        self, api_client: ApiClient, request_timeout: float = 30.0, user_agent: str | None = None
    ) -> None:
        """``user_agent`` names the sender on every request (``ome-manager/0.1.0``), as
        client-go binaries do; None keeps the client's own."""
        self.api_client = api_client
        self.request_timeout = request_timeout
        if user_agent is not None:
            api_client.user_agent = user_agent
        # urllib3 would silently retry idempotent requests on 429/503 with Retry-After and
        # on connection errors; retries belong to the callers (Client, informers), once.
        pool = api_client.rest_client.pool_manager
        # Informers, workers and recorders share one client: room for all their connections.
        pool.connection_pool_kw["maxsize"] = max(pool.connection_pool_kw.get("maxsize") or 0, 64)
        pool.connection_pool_kw["retries"] = Retry(
            total=0, redirect=0, raise_on_status=False, respect_retry_after_header=False
        )
        pool.pool_classes_by_scheme = {
            "http": _GuardedHTTPConnectionPool,
            "https": _GuardedHTTPSConnectionPool,
        }
        pool.clear()
        #: ``(host, its connection pool, its URL's path)`` for ``_urlopen``. Workers share
        #: it unlocked: it is replaced as one tuple, and a thread that reads an old one only
        #: looks the pool up again (the pool manager locks its own table).
        self._pool: tuple[str, HTTPConnectionPool | None, str] = ("", None, "")
        self._retries = pool.connection_pool_kw["retries"]
        self._default_timeout = _timeout(request_timeout)

    def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
        stream: bool = False,
    ) -> Any:
        params = [(k, _query_value(v)) for k, v in (query or {}).items() if v is not None]
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        # The client's configuration makes the URL, the User-Agent and the credentials (a
        # token refreshed by its hook); the body is encoded here, since the client's REST
        # layer would encode it again with ``json`` (ten times slower than orjson).
        method_, url, header_params, _, _ = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=params,
            header_params=headers,
            auth_settings=["BearerToken"],
        )
        data_out = json_dumps(body) if body is not None else None
        timeout_ = self._default_timeout if timeout is None else _timeout(timeout)
        direct = None if stream else self._direct(url)
        try:
            if direct is not None:
                pool, target = direct
                reply = round_trip(
                    pool, method_, target, header_params, data_out, timeout_, self._retries
                )
                if not 200 <= reply.status <= 299:
                    error = ApiException(status=reply.status, reason=reply.reason)
                    error.body = reply.data.decode(errors="replace")
                    error.headers = reply.headers()  # Retry-After, Warning
                    raise error
                return json_loads(reply.data) if reply.data else None
            raw = self._urlopen(method_, url, header_params, data_out, timeout_)
        except urllib3.exceptions.SSLError as e:  # as the client's REST layer reports it
            raise ApiException(status=0, reason=f"{type(e).__name__}\n{e}") from e
        if not 200 <= raw.status <= 299:
            data = raw.read()
            raw.release_conn()
            error = ApiException(status=raw.status, reason=raw.reason)
            error.body = data.decode(errors="replace")
            error.headers = raw.headers  # Retry-After, Warning
            raise error
        if stream:
            return raw
        data = raw.read()
        raw.release_conn()
        return json_loads(data) if data else None

    def _direct(self, url: str) -> tuple[HTTPConnectionPool, str] | None:
        """The configured host's connection pool and the request target on it, when a
        request may go straight there: with no proxy, to the configured host. The pool
        manager's work (parsing the URL, normalizing a pool key, looking the pool up, for
        the same host every time) was a sixth of a request's CPU."""
        manager = self.api_client.rest_client.pool_manager
        host = self.api_client.configuration.host
        if type(manager) is not urllib3.PoolManager or not url.startswith(host):
            return None
        pooled_host, pool, prefix = self._pool
        if pool is None or pool.pool is None or pooled_host != host:
            # none yet, closed by the manager's clear(), or another host configured
            pool = manager.connection_from_url(host)
            prefix = parse_url(host).path or ""  # a host URL's own path
            self._pool = (host, pool, prefix)
        return pool, prefix + url[len(host) :]

    def _urlopen(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes | None,
        timeout: urllib3.Timeout,
    ) -> Any:
        """Send one request through the client's connection pool, unread: a watch, or a
        request through a proxy or to another host (which the pool manager sends, as the
        client's REST layer does)."""
        direct = self._direct(url)
        if direct is None:
            return self.api_client.rest_client.pool_manager.request(
                method, url, body=body, headers=headers, timeout=timeout, preload_content=False
            )
        pool, target = direct
        return pool.urlopen(
            method,
            target,
            body=body,
            headers=headers,
            timeout=timeout,
            preload_content=False,
            redirect=False,
            assert_same_host=False,
            retries=self._retries,
        )

    # -- verbs -----------------------------------------------------------------------------

    def get(
        self, res: Resource, name: str, namespace: str | None = None, subresource: str = ""
    ) -> JSON:
        return self._obj(self.request("GET", res.path(namespace, name, subresource)))

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> JSON:
        return self._obj(
            self.request(
                "GET",
                res.path(namespace),
                {
                    "labelSelector": label_selector or None,
                    "fieldSelector": field_selector or None,
                    "resourceVersion": resource_version,
                    "limit": limit,
                    "continue": continue_token,
                },
            )
        )

    def list_all(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        transform: Callable[[JSON], JSON] | None = None,
    ) -> tuple[builtins.list[JSON], str]:
        """Every object, paging with ``limit``/``continue``; returns items and the list's
        resourceVersion. ``transform`` is applied to each page's objects as the page comes,
        so a reduced list never holds every whole object at once."""
        items: builtins.list[JSON] = []
        token: str | None = None
        while True:
            page = self.list(
                res,
                namespace,
                label_selector,
                field_selector,
                limit=page_size,
                continue_token=token,
            )
            found = page.get("items") or []
            items.extend(found if transform is None else map(transform, found))
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if not token:
                return items, str(meta.get("resourceVersion", ""))

    def create(self, res: Resource, body: JSON, namespace: str | None = None) -> JSON:
        return self._obj(self.request("POST", res.path(namespace), body=body))

    def replace(
        self, res: Resource, body: JSON, namespace: str | None = None, subresource: str = ""
    ) -> JSON:
        name = body["metadata"]["name"]
        return self._obj(self.request("PUT", res.path(namespace, name, subresource), body=body))

    def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        subresource: str = "",
        patch_type: str = MERGE_PATCH,
    ) -> JSON:
        return self._obj(
            self.request(
                "PATCH", res.path(namespace, name, subresource), body=patch, content_type=patch_type
            )
        )

    def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
    ) -> JSON:
        """Delete, preconditioned on ``uid`` (and ``resource_version``) when given."""
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
        preconditions = {
            k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v
        }
        if preconditions:
            options["preconditions"] = preconditions
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        return self._obj(self.request("DELETE", res.path(namespace, name), body=options))

    def watch(
        self,
        res: Resource,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        read_timeout: float = 60.0,
        bookmarks: bool = True,
    ) -> WatchStream:
        """Open a watch. The server ends it after ``timeout_seconds``; a connection silent
        for ``read_timeout`` raises instead of hanging; ``close()`` ends it from any thread."""
        raw = self.request(
            "GET",
            res.path(namespace),
            {
                "watch": "true",
                "resourceVersion": resource_version,
                "labelSelector": label_selector or None,
                "fieldSelector": field_selector or None,
                "timeoutSeconds": timeout_seconds,
                "allowWatchBookmarks": "true" if bookmarks else None,
            },
            timeout=(10.0, read_timeout),
            stream=True,
        )
        return WatchStream(raw)

    @staticmethod
    def _obj(value: Any) -> JSON:
        if not isinstance(value, dict):
            raise ValueError(
                f"expected a JSON object from the API server, got {type(value).__name__}"
            )
        return value


class WatchStream:
    """One watch response, read as a stream of event dicts (one JSON object per line)."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._closed = False

    def __iter__(self) -> Iterator[JSON]:
        buffer = b""
        try:
            for chunk in self._raw.stream(64 * 1024, decode_content=True):
                # A chunk holds many events in a burst: split once, not once per line
                # (which copied the rest of the chunk for each).
                lines = (buffer + chunk).split(b"\n")
                buffer = lines.pop()
                for line in lines:
                    if line.strip():
                        yield json_loads(line)
            if buffer.strip():
                yield json_loads(buffer)
        except Exception:
            if self._closed:
                return  # closed from another thread: the end of the stream, not an error
            raise
        finally:
            self._raw.release_conn()

    def close(self) -> None:
        """Unblock a reader waiting on the socket; safe from any thread, and a no-op when
        the connection is already gone (its socket closed under us)."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._raw.shutdown()


def _query_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def status_of(error: ApiException) -> JSON:
    """The ``Status`` body of an API error (empty when the body is not one)."""
    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}

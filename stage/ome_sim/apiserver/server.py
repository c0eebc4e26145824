"""The HTTP face of the embedded API server, on aiohttp: routing, content negotiation,
watch streams, Table output, request accounting, fault injection and the kubeconfig.

It decodes requests and encodes answers; what a request means is ``api.APIServer``'s
business. Control endpoints for tests live under ``/_sim/``, which no Kubernetes path uses.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

import yaml
from aiohttp import web

from ome.kube import json_copy, json_dumps

from . import errors, protobuf
from .admission import WebhookDispatcher
from .api import NAMESPACES, APIServer, ListOptions, Selection, WriteOptions
from .controllers import Controllers
from .errors import APIError
from .faults import Accounting, Fault, Faults
from .patch import apply_json_patch, apply_merge_patch
from .registry import KUBE_VERSION, Registry
from .resources import ResourceType
from .store import Change, Store, Watcher
from .tables import render_table

JSON = dict[str, Any]
T = TypeVar("T")
log = logging.getLogger(__name__)

PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
)
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(frozen=True)
class WriteSeen:
    """A write request as ``on_write`` sees it: ``resource`` is ``plural[/subresource]``."""

    verb: str
    group: str
    resource: str
    namespace: str
    name: str
    user_agent: str
    body: Any


@dataclass
class Target:
    """A resource request, as its path and method name it."""

    rt: ResourceType
    version: str
    namespace: str | None
    name: str | None
    subresource: str
    verb: str

    @property
    def resource(self) -> str:
        return f"{self.rt.plural}/{self.subresource}" if self.subresource else self.rt.plural


@dataclass(frozen=True)
class Output:
    """How the client asked to see objects: plain JSON, a Table or metadata only."""

    mode: str  # json | table | partial
    version: str = "v1"


def negotiate(accept: str) -> Output:
    """Pick the first acceptable media range, as kube-apiserver's negotiation does."""
    if not accept.strip():
        return Output("json")
    for part in accept.split(","):
        media, *raw_params = [p.strip() for p in part.split(";")]
        params = dict(p.split("=", 1) for p in raw_params if "=" in p)
        if media not in ("application/json", "application/*", "*/*"):
            continue
        as_kind = params.get("as", "")
        if not as_kind:
            return Output("json")
        if params.get("g") != "meta.k8s.io" or params.get("v") not in ("v1", "v1beta1"):
            continue
        if as_kind == "Table":
            return Output("table", params["v"])
        if as_kind in ("PartialObjectMetadata", "PartialObjectMetadataList"):
            return Output("partial", params["v"])
    raise errors.not_acceptable(accept)


class EmbeddedAPIServer:
    """A single-process, in-memory Kubernetes API server on loopback.

    ``start()``/``stop()`` run it on the current event loop; ``ServerThread`` runs it on a
    thread of its own for synchronous callers (tests, the CLI).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        history_size: int = 10_000,
        bookmark_interval: float = 10.0,
        default_watch_timeout: tuple[int, int] = (1800, 3600),
    ) -> None:
        self.host = host
        self.requested_port = port
        self.port = 0
        self.bookmark_interval = bookmark_interval
        self.default_watch_timeout = default_watch_timeout
        self.store = Store(history_size)
        self.registry = Registry()
        self.dispatcher = WebhookDispatcher()
        self.api = APIServer(self.store, self.registry, self.dispatcher)
        self.controllers = Controllers(self.api)
        self.accounting = Accounting()
        self.faults = Faults()
        self._runner: web.AppRunner | None = None
        self._watches: dict[Watcher, web.Request] = {}
        #: In-process tests only: called on the loop (and awaited if it returns an awaitable)
        #: as a watch's periodic bookmark (``"bookmark"``) or its ``timeoutSeconds``
        #: (``"deadline"``) comes due, before anything is written for it. A test lands writes
        #: there to stage a bookmark that fires while events are still queued for the watcher.
        self.on_watch_due: Callable[[str, Watcher], Awaitable[None] | None] | None = None
        #: In-process observers only (the soak's invariant checker): called on the loop for
        #: every create, update, patch and delete once its body (for a delete, its
        #: DeleteOptions) is decoded, before it is carried out, so that the store shows the
        #: state the request meets. What it raises is logged, never answered.
        self.on_write: Callable[[WriteSeen], None] | None = None
        self._seed()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _seed(self) -> None:
        now = self.api._now()
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.store.put(
                ("", "namespaces"),
                ("", name),
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": name,
                        "uid": str(uuid.uuid4()),
                        "creationTimestamp": now,
                        "labels": {"kubernetes.io/metadata.name": name},
                    },
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                },
            )

    async def start(self) -> None:
        """Bind and serve. A taken port raises OSError naming the address."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=1.0
        )
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((self.host, self.requested_port))
        except OSError as e:
            sock.close()
            await self._runner.cleanup()
            raise OSError(
                e.errno, f"cannot listen on {self.host}:{self.requested_port}: {e.strerror}"
            ) from None
        self.port = sock.getsockname()[1]
        site = web.SockSite(self._runner, sock)
        await site.start()
        self.controllers.start()

    async def stop(self) -> None:
        for watcher in list(self._watches):
            watcher.close()
        await self.controllers.stop()
        await self.dispatcher.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def kubeconfig(self, namespace: str = "default") -> JSON:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "ome-sim", "cluster": {"server": self.url}}],
            "users": [{"name": "ome-sim", "user": {}}],
            "contexts": [
                {
                    "name": "ome-sim",
                    "context": {"cluster": "ome-sim", "user": "ome-sim", "namespace": namespace},
                }
            ],
            "current-context": "ome-sim",
        }

    def write_kubeconfig(self, path: str | Path) -> Path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_text(yaml.safe_dump(self.kubeconfig(), sort_keys=False))
        tmp.replace(target)
        return target

    # -- faults on demand ----------------------------------------------------------------

    def load(self, items: object) -> int:
        """Put ``items`` into the store as they are, uid and status included, as if each had
        been created long ago: no admission, defaulting or generated fields beyond a
        resourceVersion (and a uid or creationTimestamp when missing). For benches that need
        a large converged cluster faster than its controllers could build it. All or
        nothing: every item is checked (a served kind, a name, an existing namespace, not
        there yet) before any is stored. Returns how many were stored."""
        if not isinstance(items, list):
            raise ValueError("items must be a list of objects")
        kinds = {(rt.group, rt.kind): rt for rt in self.registry.all()}
        checked: list[tuple[tuple[str, str], tuple[str, str], JSON]] = []
        seen: set[tuple[tuple[str, str], tuple[str, str]]] = set()
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("metadata"), dict):
                raise ValueError(f"item {i}: not an object with metadata")
            api_version, kind = str(item.get("apiVersion", "")), str(item.get("kind", ""))
            group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
            rt = kinds.get((group, kind))
            if rt is None:
                raise ValueError(f"item {i}: {api_version} {kind} is not served")
            meta = item["metadata"]
            name, namespace = meta.get("name"), meta.get("namespace") or ""
            if not isinstance(name, str) or not name:
                raise ValueError(f"item {i}: metadata.name is missing")
            if rt.namespaced != bool(namespace):
                scope = "namespaced" if rt.namespaced else "cluster-scoped"
                raise ValueError(f"item {i}: {kind} {name} is {scope}")
            if namespace and self.store.peek(NAMESPACES, ("", namespace)) is None:
                raise ValueError(f"item {i}: namespace {namespace} does not exist")
            key = (rt.key, (namespace, name))
            if key in seen or self.store.peek(*key) is not None:
                raise ValueError(f"item {i}: {kind} {namespace}/{name} already exists")
            seen.add(key)
            checked.append((rt.key, (namespace, name), item))
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for tkey, okey, item in checked:
            meta = item["metadata"]
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now)
            self.store.put(tkey, okey, item)
        return len(checked)

    def drop_watches(self, resource: str = "", mode: str = "close") -> int:
        """End watch streams (of one plural, or all): ``close`` ends the response cleanly,
        ``reset`` aborts the connection. Returns how many were dropped."""
        if mode not in ("close", "reset"):
            raise ValueError("mode is close or reset")
        dropped = 0
        for watcher, request in list(self._watches.items()):
            if resource and watcher.tkey[1] != resource:
                continue
            dropped += 1
            if mode == "reset" and request.transport is not None:
                request.transport.abort()
            watcher.close()
        return dropped

    # -- dispatch --------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        agent = request.headers.get("User-Agent", "")
        try:
            path = "/" + request.match_info["tail"]
            if path.startswith("/_sim/"):
                return await self._control(request, path)
            non_resource = self._non_resource(request, path)
            if non_resource is not None:
                self.accounting.record("get", path, agent)
                return non_resource
            target = self._route(request, path)
            resource = target.resource
            self.accounting.record(target.verb, resource, agent)
            fault = self.faults.take(
                target.verb, resource, target.namespace or "", target.name or "", agent
            )
            if fault is not None:
                if fault.latency:
                    await asyncio.sleep(fault.latency)
                while fault.hold is not None and not fault.hold.is_set():
                    await asyncio.sleep(0.01)  # a threading.Event; polled so shutdown cancels it
                if fault.drop:
                    raise await self._drop(request, fault)
                if fault.code and not (fault.code == 410 and target.verb == "watch"):
                    raise self._fault_error(fault)
            try:
                return await self._serve(request, target, fault)
            finally:
                if fault is not None and fault.answered is not None:
                    fault.answered.set()
        except APIError as e:
            return _error_response(e)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:  # never a dropped connection: answer 500 like kube does
            log.exception("embedded API server failed on %s %s", request.method, request.path)
            return _error_response(errors.internal(f"{type(e).__name__}: {e}"))

    async def _drop(self, request: web.Request, fault: Fault) -> asyncio.CancelledError:
        """Read the request, close its connection, and return what to raise so that aiohttp
        writes nothing. Closing the transport first means no byte can go out whatever follows;
        CancelledError is how a handler ends a request unanswered (aio-libs/aiohttp#3495):
        aiohttp takes it for a vanished client, so it neither logs nor tries a 500 (which any
        other exception would get) and ends the connection. The request never reaches
        ``_serve``, so it has no effect."""
        await request.read()
        if request.transport is not None:
            request.transport.close()  # nothing is buffered to write: the client gets a bare EOF
        if fault.answered is not None:
            fault.answered.set()
        return asyncio.CancelledError("connection dropped by an injected fault")

    def _fault_error(self, fault: Fault) -> APIError:
        if fault.code == 429:
            return errors.too_many_requests(fault.retry_after)
        if fault.code == 503:
            err = errors.service_unavailable()
            err.headers["Retry-After"] = str(fault.retry_after)
            return err
        if fault.code == 504:
            return errors.timeout("the server was unable to return a response in the time allotted")
        if fault.code == 410:
            return errors.expired("too old resource version (injected)")
        return errors.internal("injected fault")

    def _non_resource(self, request: web.Request, path: str) -> web.StreamResponse | None:
        path = path.rstrip("/") or "/"
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        if request.method != "GET" and path in ("/version", "/api", "/apis", "/openapi/v3"):
            raise errors.method_not_allowed(f"{request.method} is not supported on {path}")
        if path == "/version":
            return _json({**KUBE_VERSION, "platform": "linux/amd64", "goVersion": "python"})
        if path == "/api":
            return _json(self.registry.api_versions())
        if path == "/apis":
            return _json(self.registry.api_group_list())
        if path == "/api/v1" and request.method == "GET":
            return _json(self.registry.resource_list("", "v1"))
        if path == "/openapi/v3":
            return _json(self.registry.openapi_index())
        if path.startswith("/openapi/v3/"):
            key = path[len("/openapi/v3/") :].split("/")
            doc = None
            if len(key) == 2 and key[0] == "api":
                doc = self.registry.openapi_document("", key[1])
            elif len(key) == 3 and key[0] == "apis":
                doc = self.registry.openapi_document(key[1], key[2])
            if doc is None:
                raise errors.unknown_path()
            return _json(doc)
        if path == "/openapi/v2":
            raise errors.unknown_path()
        parts = path.strip("/").split("/")
        if parts[0] == "apis" and request.method == "GET":
            if len(parts) == 2:
                group = self.registry.api_group(parts[1])
                if group is None:
                    raise errors.not_served(parts[1])
                return _json(group)
            if len(parts) == 3:
                listing = self.registry.resource_list(parts[1], parts[2])
                if listing is None:
                    raise errors.not_served(parts[1])
                return _json(listing)
        if parts[0] not in ("api", "apis"):
            raise errors.page_not_found()
        return None

    def _route(self, request: web.Request, path: str) -> Target:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[0] == "api" and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.unknown_path()
        watch_path = False
        if rest[0] == "watch":
            watch_path, rest = True, rest[1:]
        namespace: str | None = None
        if (
            len(rest) >= 3
            and rest[0] == "namespaces"
            and not (len(rest) == 3 and group == "" and rest[2] in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3 or any(not p for p in rest):
            raise errors.unknown_path()
        rt = self.registry.lookup(group, version, rest[0])
        if rt is None:
            raise errors.not_served(group)
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        if (namespace is not None and not rt.namespaced) or (
            rt.namespaced and namespace is None and name is not None
        ):
            raise errors.unknown_path()
        allowed_subs = set(rt.subresources)
        if rt.key == ("", "namespaces"):
            allowed_subs.add("finalize")
        if sub and sub not in allowed_subs:
            raise errors.unknown_path()
        method = request.method
        if rt.verbs == ("create",) and not (method == "POST" and name is None):
            raise errors.method_not_allowed(
                "the server does not allow this method on the requested resource"
            )
        watch = watch_path or request.query.get("watch") in ("true", "1")
        if method == "GET":
            verb = "watch" if watch else ("get" if name else "list")
        elif (method == "POST" and name is None) or (method == "POST" and sub == "binding"):
            verb = "create"
        elif method == "PUT" and name is not None:
            verb = "update"
        elif method == "PATCH" and name is not None:
            verb = "patch"
        elif method == "DELETE":
            verb = "delete" if name else "deletecollection"
        else:
            raise errors.method_not_allowed(
                "the server does not allow this method on the requested resource"
            )
        if verb == "create" and rt.namespaced and namespace is None:
            raise errors.method_not_allowed(
                "the server does not allow this method on the requested resource"
            )
        if sub == "binding" and verb != "create":
            raise errors.method_not_allowed(
                "the server does not allow this method on the requested resource"
            )
        if sub and verb in ("list", "watch", "delete"):
            raise errors.method_not_allowed(
                "the server does not allow this method on the requested resource"
            )
        return Target(rt, version, namespace, name, sub, verb)

    def _seen(self, t: Target, agent: str, body: Any) -> None:
        if self.on_write is None:
            return
        name = t.name or str(((body or {}).get("metadata") or {}).get("name") or "")
        seen = WriteSeen(t.verb, t.rt.group, t.resource, t.namespace or "", name, agent, body)
        try:
            self.on_write(seen)
        except Exception:  # an observer's bug must not fail the request
            log.exception("the on_write observer failed on %s %s", t.verb, t.resource)

    async def _serve(
        self, request: web.Request, t: Target, fault: Fault | None
    ) -> web.StreamResponse:
        q = request.query
        api = self.api
        ns = t.namespace or ""
        if t.verb == "watch":
            return await self._watch(request, t, fault)
        output = negotiate(request.headers.get("Accept", ""))
        if t.verb == "get":
            assert t.name is not None
            if t.subresource == "scale":
                return _json(api.get_scale(t.rt, ns, t.name))
            api.check_resource_version(q.get("resourceVersion", ""))
            obj = api.get(t.rt, t.version, ns, t.name)
            return self._objects_response(t, [obj], output, q, single=True)
        if t.verb == "list":
            listing = api.list_objects(t.rt, t.version, t.namespace, _list_options(q))
            return self._objects_response(t, listing["items"], output, q, listing=listing)
        opts = WriteOptions(
            dry_run=_dry_run(q),
            field_validation=_field_validation(q),
            user_agent=request.headers.get("User-Agent", ""),
        )
        if t.verb == "create":
            body = await _read_body(request, required=True)
            self._seen(t, opts.user_agent, body)
            if t.subresource == "binding" or t.rt.key == ("", "bindings"):
                pods = self.registry.by_key("", "pods")
                assert pods is not None
                name = t.name or str(((body or {}).get("metadata") or {}).get("name") or "")
                return _json(await api.bind(pods, ns, name, body), status=201)
            opts.options = {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
            obj = await api.create(t.rt, t.version, ns, body, opts)
            return _json(obj, status=201, warnings=opts.warnings)
        if t.verb == "update":
            assert t.name is not None
            body = await _read_body(request, required=True)
            self._seen(t, opts.user_agent, body)
            opts.options = {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
            if t.subresource == "scale":
                given = str(((body or {}).get("metadata") or {}).get("resourceVersion") or "")
                scale = await api.update_scale(
                    t.rt, t.version, ns, t.name, lambda _cur: body, given, opts
                )
                return _json(scale)
            if t.subresource == "finalize":
                spec = (body or {}).get("spec") or {}
                return _json(api.finalize_namespace(t.name, list(spec.get("finalizers") or [])))
            obj = await api.update(t.rt, t.version, ns, t.name, body, t.subresource, opts)
            return _json(obj, warnings=opts.warnings)
        if t.verb == "patch":
            assert t.name is not None
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
            if content_type not in PATCH_TYPES:
                raise errors.unsupported_media_type(content_type)
            body = await _read_body(request, required=True)
            self._seen(t, opts.user_agent, body)
            opts.options = {"kind": "PatchOptions", "apiVersion": "meta.k8s.io/v1"}
            if t.subresource == "scale":

                def patched(current: JSON) -> Any:
                    if content_type == "application/json-patch+json":
                        return apply_json_patch(current, body)
                    return apply_merge_patch(current, body)

                return _json(await api.update_scale(t.rt, t.version, ns, t.name, patched, "", opts))
            obj = await api.patch(
                t.rt, t.version, ns, t.name, content_type, body, t.subresource, opts
            )
            return _json(obj, warnings=opts.warnings)
        # delete and deletecollection
        body = await _read_body(request, required=False) or {}
        if not isinstance(body, dict):
            raise errors.bad_request("DeleteOptions must be a JSON object")
        options = dict(body)
        for key in ("gracePeriodSeconds", "propagationPolicy", "orphanDependents"):
            if key in q and key not in options:
                value: Any = q[key]
                if key == "gracePeriodSeconds":
                    value = _int_param(q, key)
                elif key == "orphanDependents":
                    value = value == "true"
                options[key] = value
        if q.get("dryRun") == "All":
            options["dryRun"] = ["All"]
        opts.dry_run = opts.dry_run or options.get("dryRun") == ["All"]
        opts.options = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", **options}
        self._seen(t, opts.user_agent, options)
        if t.verb == "deletecollection":
            listing = await api.delete_collection(
                t.rt, t.version, t.namespace, _list_options(q), options, opts
            )
            return _json(listing)
        assert t.name is not None
        self.accounting.record_delete(
            t.resource,
            request.headers.get("User-Agent", ""),
            bool((options.get("preconditions") or {}).get("uid")),
        )
        result, deleted = await api.delete(t.rt, t.version, ns, t.name, options, opts)
        status = 200
        if not deleted and options.get("orphanDependents") is False:
            status = 202
        return _json(result, status=status, warnings=opts.warnings)

    def _objects_response(
        self,
        t: Target,
        objs: list[JSON],
        output: Output,
        q: Any,
        single: bool = False,
        listing: JSON | None = None,
    ) -> web.Response:
        list_meta = (listing or {}).get("metadata") or {}
        if output.mode == "table":
            table = render_table(
                t.rt,
                t.version,
                objs,
                datetime.now(UTC),
                include_object=q.get("includeObject", "Metadata"),
                list_metadata=dict(list_meta),
            )
            table["apiVersion"] = f"meta.k8s.io/{output.version}"
            return _json(table)
        if output.mode == "partial":
            items = [_partial(o, output.version) for o in objs]
            if single:
                return _json(items[0])
            return _json(
                {
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": f"meta.k8s.io/{output.version}",
                    "metadata": list_meta,
                    "items": items,
                }
            )
        if single:
            return _json(objs[0])
        assert listing is not None
        return _json(listing)

    # -- watch -----------------------------------------------------------------------------

    async def _watch(
        self, request: web.Request, t: Target, fault: Fault | None
    ) -> web.StreamResponse:
        q = request.query
        output = negotiate(request.headers.get("Accept", ""))
        opts = _list_options(q)
        if t.name:
            name_sel = f"metadata.name={t.name}"
            opts.field_selector = (
                f"{opts.field_selector},{name_sel}" if opts.field_selector else name_sel
            )
        sel = self.api.selection(t.rt, t.namespace, opts)
        rv_text = q.get("resourceVersion", "")
        send_initial = q.get("sendInitialEvents") == "true"
        bookmarks = q.get("allowWatchBookmarks") == "true"
        if send_initial and not bookmarks:
            raise errors.invalid(
                "ListOptions",
                "meta.k8s.io",
                "",
                [
                    errors.FieldError.forbidden(
                        "allowWatchBookmarks",
                        "sendInitialEvents requires setting allowWatchBookmarks to true",
                    )
                ],
            )
        rv = self.api.check_resource_version(rv_text)
        timeout = _int_param(q, "timeoutSeconds")
        if timeout is None or timeout <= 0:
            timeout = random.randint(*self.default_watch_timeout)
        forced_gone = fault is not None and fault.code == 410
        # Everything from here to subscribe() runs without yielding the loop: no event can
        # fall between the initial state and the live stream.
        initial: list[tuple[str, JSON]] = []
        gone = forced_gone or (
            rv_text not in ("", "0") and not send_initial and self.store.too_old(rv)
        )
        if not gone:
            if rv_text in ("", "0") or send_initial:
                initial = [
                    ("ADDED", self.api.present(t.rt, t.version, _copy(obj)))
                    for obj in self.store.items(t.rt.key, sel.namespace)
                    if sel.matches(t.rt, obj)
                ]
            else:
                for past in self.store.replay(t.rt.key, rv):
                    initial += self._translate(t, sel, past)
        snapshot_rv = self.store.rv
        watcher = self.store.subscribe(t.rt.key)
        self._watches[watcher] = request
        response = web.StreamResponse(status=200)
        response.content_type = "application/json"
        response.headers["Cache-Control"] = "no-cache, private"
        columns_sent = False
        try:
            await response.prepare(request)
            if gone:
                await _write_event(response, "ERROR", _gone_status(rv, self.store.rv))
                return response
            for etype, obj in initial:
                columns_sent = await self._send(response, t, output, q, etype, obj, columns_sent)
            if send_initial:
                await _write_event(
                    response, "BOOKMARK", self._bookmark(t, snapshot_rv, initial_end=True)
                )
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            # The resourceVersion of the last change taken off the queue: every change of the
            # type up to it has been sent (or matched nothing here). Changes come off the
            # queue in resourceVersion order, as the store committed them.
            done = snapshot_rv

            async def send(change: Change) -> None:
                nonlocal columns_sent, done
                if output.mode == "json":
                    for etype in self._event_types(t, sel, change):
                        await response.write(self._encoded(t, change, etype))
                    done = change.rv
                    return
                for etype, obj in self._translate(t, sel, change):
                    columns_sent = await self._send(
                        response, t, output, q, etype, obj, columns_sent
                    )
                done = change.rv

            async def catch_up() -> int | None:
                """Send what is queued up to the current resourceVersion and return the one a
                bookmark may carry, as kube's watch cache does: never ahead of an event still
                to send. That is the current resourceVersion when nothing is left queued (so a
                filtered watch moves on past objects it does not match), else the last change
                sent: what landed while sending stays queued and follows the bookmark. None
                when the stream was closed meanwhile."""
                upto = self.store.rv
                while done < upto and not watcher.queue.empty():
                    change = watcher.queue.get_nowait()
                    if change is None:
                        return None
                    await send(change)
                return self.store.rv if watcher.queue.empty() else done

            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    await self._watch_due("deadline", watcher)
                    if bookmarks:
                        rv_now = await catch_up()
                        if rv_now is not None:
                            await _write_event(response, "BOOKMARK", self._bookmark(t, rv_now))
                    break
                try:
                    change: Change | None = await asyncio.wait_for(
                        _next(watcher), min(remaining, self.bookmark_interval)
                    )
                except TimeoutError:
                    # A change can still be queued here: one that landed as the wait timed
                    # out stays in the queue (Queue.get keeps it when cancelled).
                    if bookmarks and loop.time() < deadline:
                        await self._watch_due("bookmark", watcher)
                        rv_now = await catch_up()
                        if rv_now is None:
                            break
                        await _write_event(response, "BOOKMARK", self._bookmark(t, rv_now))
                    continue
                if change is None:
                    break
                await send(change)
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            self.store.unsubscribe(watcher)
            self._watches.pop(watcher, None)
        return response

    async def _watch_due(self, kind: str, watcher: Watcher) -> None:
        hook = self.on_watch_due
        if hook is not None:
            result = hook(kind, watcher)
            if result is not None:
                await result

    def _translate(self, t: Target, sel: Selection, change: Change) -> list[tuple[str, JSON]]:
        """The events of ``change`` for this watcher, each with the object as it sees it."""
        types = self._event_types(t, sel, change)
        if not types:
            return []
        obj = self.api.present(t.rt, t.version, json_copy(change.obj))
        return [(etype, obj) for etype in types]

    @staticmethod
    def _event_types(t: Target, sel: Selection, change: Change) -> list[str]:
        """An object entering the selection is ADDED to this watcher, one leaving it is
        DELETED, as kube's watch cache filters."""
        new_match = sel.matches(t.rt, change.obj)
        old_match = change.old is not None and sel.matches(t.rt, change.old)
        if change.type == "ADDED":
            return ["ADDED"] if new_match else []
        if change.type == "DELETED":
            return ["DELETED"] if (old_match or new_match) else []
        if new_match and old_match:
            return ["MODIFIED"]
        if new_match:
            return ["ADDED"]
        if old_match:
            return ["DELETED"]
        return []

    def _encoded(self, t: Target, change: Change, etype: str) -> bytes:
        """The JSON watch event line of ``change``, encoded once per version and type for
        every watcher of its resource (kube's watch cache serializes once too)."""
        key = (t.version, etype)
        line = change.encoded.get(key)
        if line is None:
            obj = self.api.present(t.rt, t.version, json_copy(change.obj))
            line = json_dumps({"type": etype, "object": obj}) + b"\n"
            change.encoded[key] = line
        return line

    def _bookmark(self, t: Target, rv: int, initial_end: bool = False) -> JSON:
        meta: JSON = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        return {"kind": t.rt.kind, "apiVersion": t.rt.api_version(t.version), "metadata": meta}

    async def _send(
        self,
        response: web.StreamResponse,
        t: Target,
        output: Output,
        q: Any,
        etype: str,
        obj: JSON,
        columns_sent: bool,
    ) -> bool:
        if output.mode == "table":
            table = render_table(
                t.rt,
                t.version,
                [obj],
                datetime.now(UTC),
                include_object=q.get("includeObject", "Metadata"),
                with_columns=not columns_sent,
            )
            table["apiVersion"] = f"meta.k8s.io/{output.version}"
            await _write_event(response, etype, table)
            return True
        if output.mode == "partial":
            await _write_event(response, etype, _partial(obj, output.version))
            return columns_sent
        await _write_event(response, etype, obj)
        return columns_sent

    # -- control endpoints -----------------------------------------------------------------

    async def _control(self, request: web.Request, path: str) -> web.StreamResponse:
        """``/_sim/requests`` (GET, DELETE), ``/_sim/faults`` (GET, POST, DELETE),
        ``/_sim/watches/drop`` (POST ``{"resource": "pods", "mode": "close"}``),
        ``/_sim/compact`` (POST), ``/_sim/load`` (POST ``{"items": [...]}``, see ``load``)."""
        method = request.method
        if path == "/_sim/requests":
            if method == "GET":
                return _json(
                    {
                        "requests": self.accounting.snapshot(),
                        "deletesWithoutUid": self.accounting.snapshot(unconditioned_deletes=True),
                    }
                )
            if method == "DELETE":
                self.accounting.reset()
                return _json({})
        elif path == "/_sim/faults":
            if method == "GET":
                return _json({"faults": self.faults.rules()})
            if method == "POST":
                try:
                    self.faults.add(Fault.from_json(await _read_body(request, required=True)))
                except (ValueError, TypeError) as e:
                    raise errors.bad_request(str(e)) from None
                return _json({"faults": self.faults.rules()}, status=201)
            if method == "DELETE":
                self.faults.clear()
                return _json({})
        elif path == "/_sim/watches/drop" and method == "POST":
            body = await _read_body(request, required=False) or {}
            try:
                n = self.drop_watches(str(body.get("resource", "")), str(body.get("mode", "close")))
            except ValueError as e:
                raise errors.bad_request(str(e)) from None
            return _json({"dropped": n})
        elif path == "/_sim/load" and method == "POST":
            body = await _read_body(request, required=True)
            try:
                loaded = self.load(body.get("items") if isinstance(body, dict) else None)
            except ValueError as e:
                raise errors.bad_request(str(e)) from None
            return _json({"loaded": loaded})
        elif path == "/_sim/compact" and method == "POST":
            self.store.compact()
            return _json({"compactedResourceVersion": str(self.store.compacted_rv)})
        raise errors.unknown_path()


# -- helpers ---------------------------------------------------------------------------------


def _copy(obj: JSON) -> JSON:
    return json_copy(obj)


async def _next(watcher: Watcher) -> Change | None:
    return await watcher.queue.get()


def _partial(obj: JSON, version: str) -> JSON:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": obj.get("metadata") or {},
    }


def _gone_status(rv: int, current: int) -> JSON:
    return errors.expired(f"too old resource version: {rv} ({current})").status()


async def _write_event(response: web.StreamResponse, etype: str, obj: JSON) -> None:
    await response.write(json_dumps({"type": etype, "object": obj}) + b"\n")


def _json(body: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    response = web.Response(body=json_dumps(body), status=status, content_type="application/json")
    for warning in warnings or []:
        response.headers.add("Warning", f'299 - "{warning}"')
    return response


def _error_response(e: APIError) -> web.Response:
    if e.plain is not None:
        response = web.Response(
            text=e.plain, status=e.code, content_type="text/plain", charset="utf-8"
        )
        response.headers["X-Content-Type-Options"] = "nosniff"
    else:
        response = _json(e.status(), status=e.code)
    for k, v in e.headers.items():
        response.headers[k] = v
    return response


async def _read_body(request: web.Request, required: bool) -> Any:
    raw = await request.read()
    if not raw.strip():
        if required:
            raise errors.bad_request("the body of the request was empty")
        return None
    content_type = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
    if content_type == protobuf.CONTENT_TYPE:
        return protobuf.decode(raw)
    if content_type not in (
        "application/json",
        "application/yaml",
        "application/x-yaml",
        "",
        *PATCH_TYPES,
    ):
        raise APIError(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json, application/yaml",
            {},
        )
    try:
        if content_type in ("application/yaml", "application/x-yaml"):
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as e:
        raise errors.bad_request(f"error decoding the request body: {e}") from None


def _int_param(q: Any, key: str) -> int | None:
    raw = q.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(f'invalid value for {key}: "{raw}"') from None


def _list_options(q: Any) -> ListOptions:
    return ListOptions(
        label_selector=q.get("labelSelector", ""),
        field_selector=q.get("fieldSelector", ""),
        limit=_int_param(q, "limit") or 0,
        continue_token=q.get("continue", ""),
        resource_version=q.get("resourceVersion", ""),
        resource_version_match=q.get("resourceVersionMatch", ""),
    )


def _dry_run(q: Any) -> bool:
    values = q.getall("dryRun", [])
    for v in values:
        if v != "All":
            raise errors.bad_request(f'unsupported dry run value "{v}": supported values: "All"')
    return bool(values)


def _field_validation(q: Any) -> str:
    value = q.get("fieldValidation", "Warn") or "Warn"
    if value not in ("Strict", "Warn", "Ignore"):
        raise errors.bad_request(
            f"fieldValidation parameter unsupported: {value}: "
            "supported values: Ignore, Warn, Strict"
        )
    return str(value)


class ServerThread:
    """Runs an ``EmbeddedAPIServer`` on a loop in a thread of its own, for sync callers."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.server: EmbeddedAPIServer | None = None

    def start(self) -> EmbeddedAPIServer:
        ready: Future[EmbeddedAPIServer] = Future()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                server = EmbeddedAPIServer(**self._kwargs)
                loop.run_until_complete(server.start())
            except BaseException as e:
                ready.set_exception(e)
                loop.close()
                return
            ready.set_result(server)
            loop.run_forever()
            loop.run_until_complete(server.stop())
            loop.close()

        self._thread = threading.Thread(target=run, name="embedded-apiserver", daemon=True)
        self._thread.start()
        self.server = ready.result(timeout=30)
        return self.server

    def call(self, fn: Callable[[], Awaitable[T]] | Callable[[], T]) -> T:
        """Run ``fn`` on the server's loop (coroutine functions are awaited) and return."""
        assert self._loop is not None

        async def runner() -> T:
            result = fn()
            if asyncio.iscoroutine(result):
                return await result  # type: ignore[no-any-return]
            return result  # type: ignore[return-value]

        return asyncio.run_coroutine_threadsafe(runner(), self._loop).result(timeout=30)

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop = None
        self._thread = None

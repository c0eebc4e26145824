"""A real HTTPS webhook server for admission tests, called as kube-apiserver would call it.

It runs on its own event loop in a background thread (port 0, certificates from
``ome.runtime.certs``). The embedded API server's admission tests (``stage/tests/sim``) and the
product's webhook tests (``test/integration``) share it; ``ca``, ``server_module`` and
``server`` are fixtures for a conftest to import.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from ome.runtime.certs import KeyPair, generate_ca, issue_serving_cert

JSON = dict[str, Any]
Responder = Callable[[JSON], Awaitable[web.StreamResponse]]


# --- the webhook server ------------------------------------------------------------------------


class WebhookServer:
    """An HTTPS server on 127.0.0.1 that records each AdmissionReview and answers per path."""

    def __init__(self, serving: KeyPair, tmp: Path) -> None:
        (tmp / "tls.crt").write_bytes(serving.cert_pem)
        (tmp / "tls.key").write_bytes(serving.key_pem)
        self._ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ssl.load_cert_chain(tmp / "tls.crt", tmp / "tls.key")
        self.responders: dict[str, Responder] = {}
        self.calls: list[tuple[str, JSON, Mapping[str, str]]] = []
        self.received = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._release = asyncio.Event()
        self._stop = asyncio.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.port = 0

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(10), "webhook server did not start"

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._release.set)
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def reset(self) -> None:
        self.responders.clear()
        self.calls.clear()
        self.received.clear()

    def paths(self) -> list[str]:
        return [path for path, _, _ in self.calls]

    async def hang(self) -> web.StreamResponse:
        """Never answer (until the server stops)."""
        await self._release.wait()
        return web.Response(status=503)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self._ssl)
        await site.start()
        self.port = runner.addresses[0][1]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        review: JSON = await request.json()
        self.calls.append((request.path, review, dict(request.headers)))
        self.received.set()
        responder = self.responders.get(request.path, allow())
        return await responder(review)


def respond(response: JSON, status: int = 200, *, echo_uid: bool = True) -> Responder:
    async def answer(review: JSON) -> web.StreamResponse:
        body = dict(response)
        if echo_uid:
            body.setdefault("uid", review["request"]["uid"])
        reply = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": body}
        return web.json_response(reply, status=status)

    return answer


def allow(warnings: list[str] | None = None) -> Responder:
    response: JSON = {"allowed": True}
    if warnings:
        response["warnings"] = warnings
    return respond(response)


def deny(status: JSON | None = None, warnings: list[str] | None = None) -> Responder:
    response: JSON = {"allowed": False}
    if status is not None:
        response["status"] = status
    if warnings:
        response["warnings"] = warnings
    return respond(response)


@pytest.fixture(scope="module")
def ca() -> KeyPair:
    return generate_ca("webhook-ca")


@pytest.fixture(scope="module")
def server_module(ca: KeyPair, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookServer]:
    serving = issue_serving_cert(ca, ["hook.webhooks.svc", "localhost"], ["127.0.0.1"])
    server = WebhookServer(serving, tmp_path_factory.mktemp("webhook"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def server(server_module: WebhookServer) -> WebhookServer:
    server_module.reset()
    return server_module


# --- helpers -----------------------------------------------------------------------------------


def bundle(ca: KeyPair) -> str:
    return base64.b64encode(ca.cert_pem).decode()


def webhook(name: str, url: str, ca: KeyPair, **fields: Any) -> JSON:
    hook: JSON = {
        "name": name,
        "clientConfig": {"url": url, "caBundle": bundle(ca)},
        "rules": [
            {
                "operations": ["CREATE", "UPDATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    hook.update(fields)
    return hook


def config(name: str, *hooks: JSON) -> JSON:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": list(hooks),
    }

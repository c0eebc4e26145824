"""What goes on the wire: the requests ``Rest`` sends straight to the configured host's
connection pool carry the client configuration's credentials (a token its refresh hook
renews), User-Agent and host path, encode their query as the client does, and reuse one
connection; through a proxy they go as the client's pool manager sends them."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from ome.runtime.rest import CONFIGMAPS, Rest


class _Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body,
                "peer": self.client_address,
            }
        )
        out = json.dumps({"kind": "ConfigMap", "metadata": {"name": "m"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    handler = type("Handler", (_Recorder,), {"seen": seen})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def rest_for(host: str, **settings: Any) -> tuple[Rest, client.Configuration]:
    cfg = client.Configuration()
    cfg.host = host
    cfg.api_key = {"BearerToken": "tok-1"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    for name, value in settings.items():
        setattr(cfg, name, value)
    return Rest(client.ApiClient(cfg), user_agent="ome-test/1.0"), cfg


def test_requests_carry_the_configurations_credentials_agent_and_host_path(
    server: tuple[str, list[dict[str, Any]]],
) -> None:
    url, seen = server
    rest, cfg = rest_for(url + "/k8s/clusters/c-1")
    tokens = iter(["tok-2", "tok-3"])

    def refresh(config: client.Configuration) -> None:
        config.api_key["BearerToken"] = next(tokens)

    rest.list(CONFIGMAPS, "ns", label_selector="a=b,c in (d, e)", limit=5)
    cfg.refresh_api_key_hook = refresh
    rest.create(CONFIGMAPS, {"metadata": {"name": "m"}}, "ns")
    rest.get(CONFIGMAPS, "m", "ns")
    assert [s["path"] for s in seen] == [
        "/k8s/clusters/c-1/api/v1/namespaces/ns/configmaps"
        "?labelSelector=a%3Db%2Cc%20in%20%28d%2C%20e%29&limit=5",
        "/k8s/clusters/c-1/api/v1/namespaces/ns/configmaps",
        "/k8s/clusters/c-1/api/v1/namespaces/ns/configmaps/m",
    ]
    assert [s["headers"]["authorization"] for s in seen] == [
        "Bearer tok-1",
        "Bearer tok-2",
        "Bearer tok-3",
    ]
    assert {s["headers"]["user-agent"] for s in seen} == {"ome-test/1.0"}
    assert json.loads(seen[1]["body"]) == {"metadata": {"name": "m"}}
    assert seen[1]["headers"]["content-type"] == "application/json"
    assert len({s["peer"] for s in seen}) == 1, "one kept-alive connection"


def test_a_pool_cleared_under_the_client_is_taken_again(
    server: tuple[str, list[dict[str, Any]]],
) -> None:
    url, seen = server
    rest, _ = rest_for(url)
    rest.get(CONFIGMAPS, "m", "ns")
    rest.api_client.rest_client.pool_manager.clear()  # closes every pool it made
    rest.get(CONFIGMAPS, "m", "ns")
    assert [s["path"] for s in seen] == ["/api/v1/namespaces/ns/configmaps/m"] * 2


def test_through_a_proxy_the_request_goes_as_the_pool_manager_sends_it(
    server: tuple[str, list[dict[str, Any]]],
) -> None:
    """An HTTP proxy gets the absolute URL of the configured host (here the recorder acts
    as the proxy, for a host that does not exist)."""
    url, seen = server
    rest, _ = rest_for("http://cluster.invalid:6443", proxy=url)
    rest.get(CONFIGMAPS, "m", "ns")
    (request,) = seen
    assert request["path"] == "http://cluster.invalid:6443/api/v1/namespaces/ns/configmaps/m"
    assert request["headers"]["authorization"] == "Bearer tok-1"

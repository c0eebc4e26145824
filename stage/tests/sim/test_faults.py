"""Request accounting and fault injection, driven both in-process and over ``/_sim/``."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException
from test.cluster import Cluster, Kubectl
from test.manifests import configmap

from ome_sim.apiserver.faults import Fault


def test_requests_are_counted_by_verb_resource_and_user_agent(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    core = cluster.core()
    cluster.server.accounting.reset()
    core.create_namespaced_config_map("default", configmap("a"))
    core.read_namespaced_config_map("a", "default")
    core.list_namespaced_config_map("default")
    kubectl("get", "configmaps")
    acc = cluster.server.accounting
    assert acc.total("create", "configmaps", "OpenAPI-Generator") == 1
    assert acc.total("get", "configmaps", "OpenAPI-Generator") == 1
    assert acc.total("list", "configmaps", "kubectl") == 1
    _, body, _ = cluster.request("GET", "/_sim/requests")
    rows = {
        (r["verb"], r["resource"]): r
        for r in body["requests"]
        if r["userAgent"].startswith("kubectl")
    }
    assert rows[("list", "configmaps")]["count"] == 1


def test_accounting_counts_deletes_sent_without_a_uid_precondition(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    core = cluster.core()
    cluster.server.accounting.reset()
    a = core.create_namespaced_config_map("default", configmap("a"))
    core.create_namespaced_config_map("default", configmap("b"))
    core.delete_namespaced_config_map(
        "a", "default", body={"preconditions": {"uid": a.metadata.uid}}
    )
    kubectl("delete", "configmap", "b")  # kubectl sends no uid precondition
    acc = cluster.server.accounting
    assert acc.deletes_without_uid("configmaps", "kubectl") == 1
    assert acc.deletes_without_uid("configmaps", "OpenAPI-Generator") == 0
    _, body, _ = cluster.request("GET", "/_sim/requests")
    assert [(r["resource"], r["count"]) for r in body["deletesWithoutUid"]] == [("configmaps", 1)]


def test_an_injected_429_carries_retry_after(cluster: Cluster) -> None:
    status, _, _ = cluster.request(
        "POST",
        "/_sim/faults",
        {"verb": "list", "resource": "configmaps", "code": 429, "retry_after": 3, "times": 1},
    )
    assert status == 201
    status, body, headers = cluster.request("GET", "/api/v1/namespaces/default/configmaps")
    assert status == 429 and headers["Retry-After"] == "3"
    assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 3
    status, _, _ = cluster.request("GET", "/api/v1/namespaces/default/configmaps")
    assert status == 200, "a fault with times=1 fires once"


@pytest.mark.parametrize(("code", "reason"), [(500, "InternalError"), (503, "ServiceUnavailable")])
def test_injected_server_errors(cluster: Cluster, code: int, reason: str) -> None:
    cluster.server.faults.add(Fault(verb="create", resource="configmaps", code=code, times=2))
    for _ in range(2):
        with pytest.raises(ApiException) as e:
            cluster.core().create_namespaced_config_map("default", configmap("a"))
        assert e.value.status == code and json.loads(e.value.body)["reason"] == reason
    cluster.core().create_namespaced_config_map("default", configmap("a"))


def test_injected_latency_delays_only_matching_requests(cluster: Cluster) -> None:
    cluster.server.faults.add(Fault(verb="get", resource="configmaps", latency=0.5, times=None))
    cluster.core().create_namespaced_config_map("default", configmap("a"))
    start = time.monotonic()
    cluster.core().list_namespaced_config_map("default")
    fast = time.monotonic() - start
    start = time.monotonic()
    cluster.core().read_namespaced_config_map("a", "default")
    slow = time.monotonic() - start
    assert slow >= 0.5 > fast


def test_a_forced_410_ends_a_watch_with_an_expired_error(cluster: Cluster) -> None:
    cluster.server.faults.add(Fault(verb="watch", resource="configmaps", code=410))
    with urllib.request.urlopen(
        cluster.url + "/api/v1/namespaces/default/configmaps?watch=1"
    ) as resp:
        events = [json.loads(line) for line in resp if line.strip()]
    assert [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 410


@pytest.mark.parametrize("mode", ["close", "reset"])
def test_dropped_watches_end_their_streams(cluster: Cluster, mode: str) -> None:
    opened = threading.Event()
    ended = threading.Event()

    def watch() -> None:
        try:
            with urllib.request.urlopen(
                cluster.url + "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=60",
                timeout=60,
            ) as resp:
                opened.set()
                for _ in resp:
                    pass
        except OSError:
            pass
        finally:
            ended.set()

    t = threading.Thread(target=watch)
    t.start()
    assert opened.wait(10)

    def drop() -> int:
        return int(
            cluster.request("POST", "/_sim/watches/drop", {"resource": "configmaps", "mode": mode})[
                1
            ]["dropped"]
        )

    deadline = time.monotonic() + 10
    while drop() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # the watch registers right after the response headers
    assert ended.wait(10), "the watch stream ended when dropped"
    t.join(10)


def test_bad_fault_rules_are_400(cluster: Cluster) -> None:
    status, body, _ = cluster.request("POST", "/_sim/faults", {"code": 418})
    assert status == 400 and "code must be one of" in body["message"]
    status, body, _ = cluster.request("POST", "/_sim/faults", {"colour": "red"})
    assert status == 400 and "unknown fault fields: colour" in body["message"]


def _raw_exchange(cluster: Cluster, method: str, path: str, body: bytes = b"") -> bytes:
    """Send one HTTP/1.1 request on a fresh socket and return every byte that comes back
    before the server closes it; ``Connection: keep-alive`` so only a drop closes it early."""
    host, port = cluster.server.host, cluster.server.port
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(
            f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: keep-alive\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
            if b"\r\n\r\n" in received:
                return received  # an answer came: no need to wait for the keep-alive to end
        return received


def test_a_dropped_request_gets_no_answer_and_no_effect(cluster: Cluster) -> None:
    cluster.server.accounting.reset()
    cluster.server.faults.add(Fault(verb="create", resource="configmaps", drop=True))
    received = _raw_exchange(
        cluster,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        json.dumps(configmap("a")).encode(),
    )
    assert received == b"", "the connection closed without a status line or headers"
    status, _, _ = cluster.request("GET", "/api/v1/namespaces/default/configmaps/a")
    assert status == 404, "a dropped create was never handled"
    assert cluster.server.accounting.total("create", "configmaps") == 1, "and still counted"
    assert cluster.server.faults.rules() == [], "a drop with times=1 is used up"


def test_the_kubernetes_client_sees_a_drop_as_a_transport_error_not_a_status(
    cluster: Cluster,
) -> None:
    cluster.server.faults.add(Fault(verb="create", resource="configmaps", drop=True))
    with pytest.raises(urllib3.exceptions.HTTPError) as e:
        cluster.core().create_namespaced_config_map("default", configmap("a"))
    assert not isinstance(e.value, ApiException)
    assert isinstance(e.value, urllib3.exceptions.ProtocolError), repr(e.value)
    with pytest.raises(ApiException) as missing:
        cluster.core().read_namespaced_config_map("a", "default")
    assert missing.value.status == 404


def test_a_drop_fires_only_on_matching_requests_and_only_times_times(cluster: Cluster) -> None:
    core = cluster.core()
    cluster.server.faults.add(
        Fault(
            verb="create",
            resource="configmaps",
            namespace="default",
            user_agent="OpenAPI-Generator",
            drop=True,
            times=1,
        )
    )
    core.create_namespaced_config_map("kube-system", configmap("a", "kube-system"))  # unmatched
    with pytest.raises(urllib3.exceptions.ProtocolError):
        core.create_namespaced_config_map("default", configmap("a"))
    assert core.create_namespaced_config_map("default", configmap("a")).metadata.name == "a"
    assert cluster.server.accounting.total("create", "configmaps") == 3


def test_a_dropped_get_is_retried_by_the_client_and_each_try_is_counted(
    cluster: Cluster,
) -> None:
    # urllib3 (like client-go) resends an idempotent request whose connection was dropped, so
    # a times=1 drop on a GET goes unseen by the caller; only the count shows it happened.
    core = cluster.core()
    core.create_namespaced_config_map("default", configmap("a"))
    cluster.server.accounting.reset()
    cluster.server.faults.add(Fault(verb="get", resource="configmaps", drop=True, times=1))
    assert core.read_namespaced_config_map("a", "default").metadata.name == "a"
    assert cluster.server.accounting.total("get", "configmaps") == 2


def test_a_held_drop_sets_answered_once_the_connection_is_dropped(cluster: Cluster) -> None:
    held, answered = threading.Event(), threading.Event()
    cluster.server.faults.add(
        Fault(verb="create", resource="configmaps", drop=True, hold=held, answered=answered)
    )
    outcome: list[BaseException] = []

    def create() -> None:
        try:
            cluster.core().create_namespaced_config_map("default", configmap("a"))
        except Exception as e:  # the outcome is asserted on the test thread
            outcome.append(e)

    t = threading.Thread(target=create)
    t.start()
    deadline = time.monotonic() + 10
    while cluster.server.accounting.total("create", "configmaps") == 0:
        assert time.monotonic() < deadline, "the create reached the server"
        time.sleep(0.01)
    assert not answered.is_set(), "a held request is still in flight"
    held.set()
    assert answered.wait(10)
    t.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], urllib3.exceptions.ProtocolError)
    status, _, _ = cluster.request("GET", "/api/v1/namespaces/default/configmaps/a")
    assert status == 404


def test_drop_rules_are_installed_over_http_and_take_no_code(cluster: Cluster) -> None:
    status, body, _ = cluster.request(
        "POST", "/_sim/faults", {"verb": "create", "resource": "configmaps", "drop": True}
    )
    assert status == 201 and [f["drop"] for f in body["faults"]] == [True]
    received = _raw_exchange(
        cluster,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        json.dumps(configmap("a")).encode(),
    )
    assert received == b""
    status, body, _ = cluster.request("POST", "/_sim/faults", {"drop": True, "code": 500})
    assert status == 400 and "drop" in body["message"] and "code" in body["message"]
    status, body, _ = cluster.request("POST", "/_sim/faults", {"drop": "yes"})
    assert status == 400 and "drop must be true or false" in body["message"]
    assert cluster.request("GET", "/_sim/faults")[1]["faults"] == []


def test_kubectl_reports_a_dropped_create_as_a_connection_error(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    cluster.server.faults.add(
        Fault(verb="create", resource="configmaps", user_agent="kubectl", drop=True)
    )
    result = kubectl("create", "configmap", "a", "--from-literal=k=v", check=False)
    assert result.returncode != 0
    assert any(s in result.stderr for s in ("EOF", "connection reset")), result.stderr
    assert "Error from server" not in result.stderr, "no HTTP status came back"
    missing = kubectl("get", "configmap", "a", check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr, "nothing was created"


def test_load_stores_objects_as_given_and_all_or_nothing(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    """``/_sim/load`` (the bench's converged cluster): what is loaded reads back with its
    uid and status, and watchers see it; one bad item loads nothing and says which."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "loaded", "namespace": "default", "uid": "u-1", "labels": {"a": "b"}},
        "spec": {"containers": [{"name": "c", "image": "i"}], "nodeName": "n1"},
        "status": {"phase": "Running"},
    }
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    status, body, _ = cluster.request("POST", "/_sim/load", {"items": [pod, node]})
    assert (status, body) == (200, {"loaded": 2})
    got = json.loads(kubectl("get", "pod", "loaded", "-o", "json").stdout)
    assert got["metadata"]["uid"] == "u-1"
    assert got["status"]["phase"] == "Running"
    assert kubectl("get", "pods", "-l", "a=b", "-o", "name").stdout.split() == ["pod/loaded"]
    assert kubectl("get", "node", "n1", "-o", "name").stdout.strip() == "node/n1"

    for items, says in [
        ([{**node, "metadata": {"name": "n2"}}, pod], "item 1: Pod default/loaded already exists"),
        ([{**node, "metadata": {"name": "n3"}}, {**pod, "kind": "Nope"}], "v1 Nope is not served"),
        (
            [{**pod, "metadata": {"name": "p", "namespace": "absent"}}],
            "namespace absent does not exist",
        ),
        ([{**node, "metadata": {}}], "item 0: metadata.name is missing"),
        (
            [{**node, "metadata": {"name": "n4", "namespace": "default"}}],
            "Node n4 is cluster-scoped",
        ),
        ("nope", "items must be a list"),
    ]:
        status, body, _ = cluster.request("POST", "/_sim/load", {"items": items})
        assert status == 400, items
        assert says in body["message"]
    assert kubectl("get", "nodes", "-o", "name").stdout.split() == ["node/n1"]  # n2, n3: not loaded

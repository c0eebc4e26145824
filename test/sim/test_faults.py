"""Request accounting and fault injection, driven both in-process and over ``/_sim/``."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
from kubernetes.client.exceptions import ApiException

from ome.sim.apiserver.faults import Fault
from test.conftest import Cluster, Kubectl
from test.sim.manifests import configmap


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

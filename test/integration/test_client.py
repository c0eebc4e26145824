"""The API client: retries of transient failures (429 after Retry-After, 5xx), no blind
retry of 4xx, preconditioned deletes, and a span per call."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import MaxRetryError, ProtocolError

from ome.runtime.client import Client, NotLeadingError, RetryPolicy, describe_error
from ome.runtime.rest import CONFIGMAPS, Rest
from ome_sim.apiserver.faults import Fault
from test.cluster import Cluster
from test.manifests import configmap


@pytest.fixture
def client(cluster: Cluster) -> Client:
    return Client(Rest(cluster.api), RetryPolicy(initial=0.05, cap=0.2))


def test_a_429_is_retried_no_sooner_than_its_retry_after(client: Client, cluster: Cluster) -> None:
    cluster.server.faults.add(Fault(verb="create", resource="configmaps", code=429, retry_after=2))
    start = time.monotonic()
    made = client.create(CONFIGMAPS, configmap("a"), "default")
    assert time.monotonic() - start >= 2.0
    assert made["metadata"]["name"] == "a"
    assert cluster.server.accounting.total("create", "configmaps") == 2


@pytest.mark.parametrize("code", [500, 503, 504])
def test_server_errors_are_retried(client: Client, cluster: Cluster, code: int) -> None:
    cluster.server.faults.add(Fault(verb="get", resource="configmaps", code=code, times=2))
    client.create(CONFIGMAPS, configmap("a"), "default")
    assert client.live_get(CONFIGMAPS, "a", "default")["metadata"]["name"] == "a"
    assert cluster.server.accounting.total("get", "configmaps") == 3


def test_a_conflict_is_returned_not_retried(client: Client, cluster: Cluster) -> None:
    made = client.create(CONFIGMAPS, configmap("a"), "default")
    client.patch(CONFIGMAPS, "a", {"data": {"k": "2"}}, "default")
    stale = dict(made, data={"k": "stale"})
    with pytest.raises(ApiException) as e:
        client.replace(CONFIGMAPS, stale, "default")
    assert e.value.status == 409
    assert cluster.server.accounting.total("update", "configmaps") == 1


def test_a_persistent_failure_gives_up_with_the_error(cluster: Cluster) -> None:
    client = Client(Rest(cluster.api), RetryPolicy(attempts=3, initial=0.01, cap=0.02))
    cluster.server.faults.add(Fault(verb="list", resource="configmaps", code=503, times=None))
    with pytest.raises(ApiException) as e:
        client.live_list(CONFIGMAPS, "default")
    assert e.value.status == 503
    assert cluster.server.accounting.total("list", "configmaps") == 3


def test_delete_preconditions(client: Client) -> None:
    made = client.create(CONFIGMAPS, configmap("a"), "default")
    with pytest.raises(ApiException) as e:
        client.delete(CONFIGMAPS, "a", "default", uid="someone-else")
    assert e.value.status == 409
    assert client.live_get_or_none(CONFIGMAPS, "a", "default") is not None
    client.delete(CONFIGMAPS, "a", "default", uid=made["metadata"]["uid"])
    assert client.live_get_or_none(CONFIGMAPS, "a", "default") is None
    assert client.delete(CONFIGMAPS, "a", "default") is None, "NotFound counts as done"


def test_every_call_is_a_span(client: Client, spans: InMemorySpanExporter) -> None:
    client.create(CONFIGMAPS, configmap("a"), "default")
    with pytest.raises(ApiException):
        client.live_get(CONFIGMAPS, "missing", "default")
    names = [(s.name, s.attributes.get("http.status_code")) for s in spans.get_finished_spans()]
    assert names == [("k8s create configmaps", 200), ("k8s get configmaps", 404)]


def test_a_transport_failure_is_described_by_its_cause_in_one_short_line() -> None:
    """urllib3 wraps a dropped connection in MaxRetryError, whose text repeats the pool and
    the whole URL; the one line an API error gets names the cause."""
    dropped = ProtocolError("Connection aborted.", ConnectionResetError("reset by peer"))
    wrapped = MaxRetryError(None, "/api/v1/pods?watch=true&resourceVersion=61", dropped)
    assert describe_error(wrapped) == describe_error(dropped)
    assert describe_error(wrapped).startswith("ProtocolError: ('Connection aborted.'")


@pytest.mark.parametrize("when", ["serializing", "in-urllib3"])
@pytest.mark.parametrize("verb", ["create", "replace", "patch", "delete"])
def test_a_lease_lost_while_a_write_is_prepared_sends_nothing(
    cluster: Cluster, verb: str, when: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fence is asked last on the socket, just before the request's bytes go out: a leader
    paused (or starved) while preparing a request, past its lease, must not send it when it
    resumes. Here the lease goes while the client serializes the body, or later, while
    urllib3 takes a connection from its pool (after every check the client itself makes)."""
    rest = Rest(cluster.api)
    rest.create(CONFIGMAPS, configmap("a"), "default")
    leading = {"now": True}
    client = Client(rest, RetryPolicy(initial=0.05, cap=0.2), may_write=lambda: leading["now"])
    before = cluster.server.accounting.total({"replace": "update"}.get(verb, verb), "configmaps")
    current = rest.get(CONFIGMAPS, "a", "default")
    if when == "serializing":
        serialize = rest.api_client.param_serialize

        def lose_the_lease_while_serializing(*args: object, **kwargs: object) -> object:
            built = serialize(*args, **kwargs)
            leading["now"] = False
            return built

        monkeypatch.setattr(rest.api_client, "param_serialize", lose_the_lease_while_serializing)
    else:
        get_conn = HTTPConnectionPool._get_conn

        def lose_the_lease_while_connecting(pool: HTTPConnectionPool, *a: Any, **k: Any) -> Any:
            leading["now"] = False
            return get_conn(pool, *a, **k)

        monkeypatch.setattr(HTTPConnectionPool, "_get_conn", lose_the_lease_while_connecting)
    with pytest.raises(NotLeadingError):
        if verb == "create":
            client.create(CONFIGMAPS, configmap("b"), "default")
        elif verb == "replace":
            client.replace(CONFIGMAPS, current, "default")
        elif verb == "patch":
            client.patch(CONFIGMAPS, "a", {"data": {"k": "v"}}, "default")
        else:
            client.delete(CONFIGMAPS, "a", "default")
    monkeypatch.undo()
    after = cluster.server.accounting.total({"replace": "update"}.get(verb, verb), "configmaps")
    assert after == before, f"the {verb} reached the server after the lease was lost"
    assert (
        rest.get(CONFIGMAPS, "a", "default")["metadata"]["resourceVersion"]
        == (current["metadata"]["resourceVersion"])
    )
    names = [c["metadata"]["name"] for c in rest.list(CONFIGMAPS, "default")["items"]]
    assert names == ["a"], "no configmap was created"

"""Secure metrics: who may scrape (``ome.runtime.metricsauth``), and the HTTPS server that
asks it (``ome.runtime.serving.MetricsServer``), with the API server's reviews faked."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from datetime import timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter

from ome.kube import JSON, Resource
from ome.runtime.metricsauth import (
    SUBJECT_ACCESS_REVIEWS,
    TOKEN_REVIEWS,
    DelegatingAuth,
    bearer_token,
)
from ome.runtime.serving import MetricsServer
from ome.runtime.webhookcerts import StaticCerts
from test.helpers import scrape_https

READER = "system:serviceaccount:monitoring:prometheus"
STRANGER = "system:serviceaccount:default:nobody"
TOKENS = {"reader-token": READER, "stranger-token": STRANGER}


class FakeAPI:
    """TokenReviews of TOKENS; SubjectAccessReviews allow READER ``get /metrics`` only."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, JSON]] = []
        self.failing = False
        self.lock = threading.Lock()

    def review(self, res: Resource, body: JSON) -> JSON:
        with self.lock:
            self.calls.append((res.plural, body))
        if self.failing:
            raise ApiException(status=503, reason="Service Unavailable")
        if res == TOKEN_REVIEWS:
            user = TOKENS.get(body["spec"]["token"])
            status: JSON = {"authenticated": user is not None}
            if user:
                status["user"] = {"username": user, "uid": "u-1", "groups": ["g"]}
            return {**body, "status": status}
        assert res == SUBJECT_ACCESS_REVIEWS
        spec = body["spec"]
        allowed = spec["user"] == READER and spec["nonResourceAttributes"] == {
            "path": "/metrics",
            "verb": "get",
        }
        return {**body, "status": {"allowed": allowed}}

    def count(self, plural: str) -> int:
        return sum(1 for p, _ in self.calls if p == plural)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("", None),
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer ", None),
    ],
)
def test_the_bearer_token_is_read_from_the_header(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_each_kind_of_caller_gets_its_answer() -> None:
    api = FakeAPI()
    auth = DelegatingAuth(api.review)
    assert auth.check(None, "get", "/metrics").status == 401
    assert auth.check("Bearer unknown", "get", "/metrics").status == 401
    denied = auth.check("Bearer stranger-token", "get", "/metrics")
    assert (denied.status, denied.text) == (
        403,
        f"Authorization denied for user {STRANGER} (get /metrics)",
    )
    assert auth.check("Bearer reader-token", "get", "/metrics").allowed
    assert auth.check("Bearer reader-token", "get", "/other").status == 403


def test_the_review_carries_the_users_identity_and_the_path() -> None:
    api = FakeAPI()
    DelegatingAuth(api.review).check("Bearer reader-token", "get", "/metrics")
    (_, token_review), (_, access_review) = api.calls
    assert token_review["kind"] == "TokenReview"
    assert token_review["spec"] == {"token": "reader-token"}
    assert access_review["kind"] == "SubjectAccessReview"
    assert access_review["spec"] == {
        "user": READER,
        "uid": "u-1",
        "groups": ["g"],
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


def test_answers_are_cached_for_their_time_and_then_asked_again() -> None:
    api, clock = FakeAPI(), Clock()
    auth = DelegatingAuth(
        api.review, authenticated_ttl=60, refused_ttl=10, allowed_ttl=300, denied_ttl=30,
        timer=clock,
    )  # fmt: skip
    for _ in range(5):
        assert auth.check("Bearer reader-token", "get", "/metrics").allowed
        assert auth.check("Bearer stranger-token", "get", "/metrics").status == 403
        assert auth.check("Bearer unknown", "get", "/metrics").status == 401
    assert api.count("tokenreviews") == 3
    assert api.count("subjectaccessreviews") == 2
    clock.now = 31  # the refusal and the denial expired; the rest is still cached
    auth.check("Bearer unknown", "get", "/metrics")
    auth.check("Bearer stranger-token", "get", "/metrics")
    auth.check("Bearer reader-token", "get", "/metrics")
    assert api.count("tokenreviews") == 4
    assert api.count("subjectaccessreviews") == 3
    clock.now = 61  # the authenticated tokens expired too
    auth.check("Bearer reader-token", "get", "/metrics")
    assert api.count("tokenreviews") == 5
    assert api.count("subjectaccessreviews") == 3  # still allowed from cache


def test_a_failing_api_server_is_a_500_and_is_not_cached(caplog: Any) -> None:
    api = FakeAPI()
    auth = DelegatingAuth(api.review)
    api.failing = True
    answer = auth.check("Bearer reader-token", "get", "/metrics")
    assert answer.status == 500 and "could not review the token" in answer.text
    assert "TokenReview failed: 503" in caplog.text
    assert not any(r.exc_info for r in caplog.records)  # one line, no traceback
    api.failing = False
    assert auth.check("Bearer reader-token", "get", "/metrics").allowed


# -- the HTTPS server --------------------------------------------------------------------


@pytest.fixture
def server() -> Any:
    registry = CollectorRegistry()
    Counter("ome_example_total", "An example", registry=registry).inc(3)
    api = FakeAPI()
    certs = StaticCerts.self_signed(["localhost"], timedelta(days=1))
    metrics = MetricsServer(
        "127.0.0.1", 0, registry=registry, certs=certs, auth=DelegatingAuth(api.review)
    )
    try:
        yield metrics, api
    finally:
        metrics.stop()


def get(port: int, path: str = "/metrics", token: str | None = None) -> tuple[int, str]:
    return scrape_https(f"https://127.0.0.1:{port}{path}", token)


def test_the_server_serves_the_metrics_over_https_to_an_authorized_reader(server: Any) -> None:
    metrics, _ = server
    assert metrics.scheme == "https"
    status, body = get(metrics.port, token="reader-token")
    assert status == 200
    assert "ome_example_total 3.0" in body


def test_the_server_refuses_everyone_else(server: Any) -> None:
    metrics, api = server
    assert get(metrics.port) == (401, "Unauthorized\n")
    assert get(metrics.port, token="unknown") == (401, "Unauthorized\n")
    status, body = get(metrics.port, token="stranger-token")
    assert status == 403 and STRANGER in body
    assert "ome_example_total" not in body
    api.failing = True
    assert get(metrics.port, token="fresh")[0] == 500


def test_plain_http_is_refused_by_the_secure_server(server: Any) -> None:
    metrics, _ = server
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://127.0.0.1:{metrics.port}/metrics", timeout=5).read()


def test_an_unknown_path_is_not_found_for_a_reader_and_forbidden_to_others(server: Any) -> None:
    metrics, _ = server
    assert get(metrics.port, "/nothing", token="reader-token")[0] == 403  # /nothing not granted
    assert get(metrics.port, "/nothing")[0] == 401


def test_the_plain_server_needs_no_token() -> None:
    registry = CollectorRegistry()
    Counter("ome_plain_total", "An example", registry=registry).inc()
    metrics = MetricsServer("127.0.0.1", 0, registry=registry)
    try:
        assert metrics.scheme == "http"
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics.port}/metrics", timeout=5) as r:
            assert "ome_plain_total 1.0" in r.read().decode()
    finally:
        metrics.stop()

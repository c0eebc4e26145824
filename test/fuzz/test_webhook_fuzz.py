"""Fuzzing the admission webhook over real HTTPS: the manager's ``WebhookServer`` serving the
InferenceReplica handler (``ReplicaAdmission``) with the walkthrough's configuration, fed bodies and
requests of every kind: bytes that are no JSON, JSON that is no object, reviews without a
request or uid, of another apiVersion or kind, nested deeper than a decoder goes, over the size
limit, with headers that lie.

Every request gets an answer: ``400``/``404``/``405``/``411``/``413`` with ``{"error": <a
message>}``, or ``200`` with an AdmissionReview answering its uid, denials with a status and a
message. The server logs no traceback, and serves the next review afterwards.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ome.controllers.slices.admission import PATH, ReplicaAdmission
from ome.runtime.certs import generate_ca, issue_serving_cert
from ome.runtime.client import Client
from ome.runtime.webhook import MAX_BODY, BadReviewError, WebhookServer, parse_review
from ome.tpuslice.config import parse_config
from ome.tpuslice.types import GUIDE_CONFIG_JSON
from test.helpers import StaticCerts

from .replicas import ACC, PROVISION_ONLY, any_replicas, replicas
from .strategies import DEPTHS, FUZZ, JSON, TEXT, json_values, mutants, nested_text

DENIAL = "pods cannot be placed on a provisioned slice: "
ANSWERS = {200, 400, 404, 405, 411, 413, 414, 431}
#: How ``runtime.webhook.unchecked`` words a handler that raised.
CRASHED = "admitted unchecked: the webhook failed: "
CONFIG = parse_config(GUIDE_CONFIG_JSON)


class _Nodes:
    """A cluster with one provision-only tpu7x node, as the walkthrough's pool has."""

    def live_list(self, resource: Any, label_selector: str = "", limit: int = 0) -> list[JSON]:
        return [
            {"metadata": {"name": "n1", "labels": {ACC: "tpu7x", PROVISION_ONLY: "PROVISION_ONLY"}}}
        ]


class _Problems(logging.Handler):
    """Every record at ERROR or above, and every one carrying a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(record)

    def take(self) -> list[str]:
        out = [f"{r.levelname} {r.name}: {r.getMessage()}" for r in self.records]
        self.records.clear()
        return out


@dataclass
class Webhook:
    server: WebhookServer
    context: ssl.SSLContext
    problems: _Problems
    sent: list[bytes] = field(default_factory=list)

    def connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.server.port, context=self.context, timeout=10
        )

    def post(
        self, body: bytes, content_type: str | None = "application/json", path: str = PATH
    ) -> tuple[int, Any]:
        conn = self.connect()
        try:
            headers = {"Content-Type": content_type} if content_type is not None else {}
            conn.request("POST", path, body=body, headers=headers)
            return self._answer(conn.getresponse())
        finally:
            conn.close()

    def raw(self, request: bytes, method: str = "POST") -> tuple[int, Any]:
        """Send ``request`` as written on a fresh TLS connection; the first answer."""
        with (
            socket.create_connection(("127.0.0.1", self.server.port), timeout=10) as sock,
            self.context.wrap_socket(sock, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(request)
            response = http.client.HTTPResponse(tls, method=method)
            response.begin()
            return self._answer(response, head=method == "HEAD")

    @staticmethod
    def _answer(response: http.client.HTTPResponse, head: bool = False) -> tuple[int, Any]:
        data = response.read()
        assert response.status in ANSWERS, (response.status, data[:200])
        assert response.getheader("Content-Type") == "application/json"
        if head:
            return response.status, {"error": "(a HEAD answer has no body)"}
        return response.status, json.loads(data)


@pytest.fixture(scope="module")
def webhook() -> Iterator[Webhook]:
    ca = generate_ca("fuzz-ca")
    pair = issue_serving_cert(ca, ["webhook.fuzz.svc"], ["127.0.0.1"])
    server = WebhookServer("127.0.0.1", 0, StaticCerts(pair))
    server.register(PATH, ReplicaAdmission(cast(Client, _Nodes()), CONFIG))
    problems = _Problems()
    logger = logging.getLogger("ome")
    logger.addHandler(problems)
    server.start()
    try:
        yield Webhook(server, ssl.create_default_context(cadata=ca.cert_pem.decode()), problems)
    finally:
        server.stop()
        logger.removeHandler(problems)


GOOD: JSON = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "still-serving",
        "kind": {"group": "ome.io", "version": "v1beta1", "kind": "InferenceReplica"},
        "operation": "CREATE",
        "namespace": "qwen3-tpu",
        "name": "qwen3-tpu-engine",
        "object": {
            "metadata": {"name": "qwen3-tpu-engine"},
            "spec": {"runners": [{"name": "default"}]},
        },
    },
}


def assert_answered(status: int, body: Any, sent: bytes) -> None:
    """The answer is a clear error, or an AdmissionReview answering the review sent."""
    if status != 200:
        assert isinstance(body, dict) and set(body) == {"error"}, body
        assert isinstance(body["error"], str) and body["error"].strip()
        return
    review = json.loads(sent)
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    response = body["response"]
    assert response["uid"] == review["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert response["status"]["code"] == 403
        assert DENIAL in response["status"]["message"]
    for warning in response.get("warnings", []):
        assert warning.startswith("admitted unchecked: "), warning
        assert not warning.startswith(CRASHED), f"the handler crashed: {warning}"


def expected_status(sent: bytes) -> int:
    """200 for an answerable review, else 400: what ``parse_review`` says of the body."""
    try:
        parse_review(json.loads(sent))
    except (BadReviewError, ValueError, RecursionError):
        return 400
    return 200


def still_serving(webhook: Webhook) -> None:
    status, body = webhook.post(json.dumps(GOOD).encode())
    assert status == 200 and body["response"]["uid"] == "still-serving"
    assert webhook.problems.take() == [], "the webhook logged a failure"


def reviews() -> st.SearchStrategy[JSON]:
    """AdmissionReviews of InferenceReplicas, well formed or mangled in any field."""
    good = st.builds(
        lambda obj, old, op: {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "ome.io", "version": "v1beta1", "kind": "InferenceReplica"},
                "resource": {
                    "group": "ome.io",
                    "version": "v1beta1",
                    "resource": "inferencereplicas",
                },
                "operation": op,
                "namespace": "qwen3-tpu",
                "name": "qwen3-tpu-engine",
                "object": obj,
                "oldObject": old,
                "dryRun": False,
            },
        },
        replicas(),
        st.one_of(st.none(), replicas()),
        st.sampled_from(["CREATE", "UPDATE", "DELETE"]),
    )

    def with_object(review: JSON, obj: JSON | None) -> JSON:
        return {**review, "request": {**review["request"], "object": obj}}

    return st.one_of(
        good,
        good.flatmap(lambda r: mutants(r)),
        good.map(lambda r: with_object(r, None)),
        st.builds(with_object, good, any_replicas()),
    )


@settings(FUZZ, max_examples=60)
@given(
    body=st.one_of(
        st.binary(max_size=200),
        json_values().map(lambda v: json.dumps(v).encode()),
        reviews().map(lambda r: json.dumps(r).encode()),
        st.sampled_from(
            [
                b"",
                b"null",
                b"[]",
                b'"x"',
                b"{}",
                b'{"request": {}}',
                b'{"request": {"uid": 5}}',
                b"NaN",
                b'{"a": NaN}',
                b"1" * 5000,
                b"\xef\xbb\xbf{}",
                b'{"a": "\\ud800"}',
                b"{" * 3,
            ]
        ),
    )
)
def test_any_body_gets_an_answer(webhook: Webhook, body: bytes) -> None:
    status, answer = webhook.post(body)
    assert_answered(status, answer, body)
    assert status == expected_status(body), answer
    still_serving(webhook)


@settings(FUZZ, max_examples=40)
@given(
    depth=DEPTHS,
    kind=st.sampled_from(["list", "dict"]),
    where=st.sampled_from(["body", "object", "both"]),
)
def test_deep_nesting_gets_an_answer(webhook: Webhook, depth: int, kind: str, where: str) -> None:
    """Nesting at the top, or deep inside the replica's pod template, of the object alone or
    of the object and the old object of an update."""
    deep = nested_text(depth, kind)
    if where == "body":
        body = deep.encode()
    else:
        replica = (
            '{"metadata": {"name": "r", "namespace": "n"}, "spec": {"runners": [{"name": "default",'
            ' "template": {"metadata": {"annotations": {"ome.io/tpu-slice-provisioning": "true"}},'
            ' "spec": {"x": ' + deep + "}}}]}}"
        )
        request = GOOD["request"]
        body = (
            '{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
            '{"uid": "deep", "kind": ' + json.dumps(request["kind"]) + ', "operation": "UPDATE",'
            ' "namespace": "n", "name": "r", "object": '
            + replica
            + (', "oldObject": ' + replica if where == "both" else "")
            + "}}"
        ).encode()
    status, answer = webhook.post(body)
    if status == 200:
        assert answer["response"]["uid"] == "deep"
        for warning in answer["response"].get("warnings", []):
            assert not warning.startswith(CRASHED), f"the handler crashed: {warning}"
    else:
        assert status == 400 and answer["error"].strip(), answer
        if where != "body":  # an object nested too deep to decode
            assert answer["error"].startswith("the body is not JSON"), answer
    still_serving(webhook)


@settings(FUZZ, max_examples=40)
@given(
    content_type=st.one_of(
        st.none(),
        st.sampled_from(
            [
                "text/plain",
                "application/json; charset=utf-8",
                "APPLICATION/JSON",
                "application/yaml",
                "",
            ]
        ),
        TEXT.filter(lambda t: t.isascii() and t.isprintable()),
    ),
    path=st.sampled_from(
        [PATH, PATH + "?timeout=10s", "/", "/validate", PATH + "/x", "/" + "a" * 2000]
    ),
)
def test_any_content_type_and_path_get_an_answer(
    webhook: Webhook, content_type: str | None, path: str
) -> None:
    body = json.dumps(GOOD).encode()
    status, answer = webhook.post(body, content_type=content_type, path=path)
    assert_answered(status, answer, body)
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if path.split("?", 1)[0] != PATH:
        assert status == 404
    elif media != "application/json":
        assert status == 400 and "Content-Type" in answer["error"]
    still_serving(webhook)


@st.composite
def raw_requests(draw: st.DrawFn) -> tuple[str, bytes]:
    """An HTTP/1.1 request as written on the wire, with methods, lengths and encodings that lie
    (never a length longer than the body sent: the server would rightly wait for the rest)."""
    method = draw(
        st.sampled_from(["POST", "GET", "PUT", "DELETE", "HEAD", "OPTIONS", "BREW", "post"])
    )
    path = draw(st.sampled_from([PATH, "/", "*", PATH + "?x=%ff", "/%00"]))
    body = draw(st.one_of(st.just(json.dumps(GOOD).encode()), st.binary(max_size=40)))
    lengths = draw(
        st.lists(
            st.one_of(
                st.integers(0, len(body)).map(str),
                st.integers(0, len(body)).map(lambda n: f" {n} "),
                # Lengths that are none, or over the limit: refused before any body is read.
                st.sampled_from(["-1", "abc", "", "5, 5", "0x10", str(MAX_BODY + 1), "9" * 30]),
            ),
            max_size=2,
        )
    )
    headers = ["Host: 127.0.0.1", "Content-Type: application/json"]
    headers += [f"Content-Length: {length}" for length in lengths]
    if draw(st.integers(0, 4)) == 0:
        headers.append(
            draw(
                st.sampled_from(
                    [
                        "Transfer-Encoding: chunked",
                        "Transfer-Encoding: gzip",
                        "Expect: 100-continue",
                    ]
                )
            )
        )
    if draw(st.integers(0, 4)) == 0:
        headers.append(
            draw(st.sampled_from(["X" * 70000 + ": y", "bad header line", ": empty-name"]))
        )
    headers.append("Connection: close")
    return method, (
        f"{method} {path} HTTP/1.1\r\n".encode()
        + "\r\n".join(headers).encode()
        + b"\r\n\r\n"
        + body
    )


@settings(FUZZ, max_examples=50)
@given(request=raw_requests())
def test_requests_that_lie_get_an_answer(webhook: Webhook, request: tuple[str, bytes]) -> None:
    method, data = request
    try:
        status, answer = webhook.raw(data, method)
    except (ConnectionError, ssl.SSLError, http.client.HTTPException) as e:
        pytest.fail(f"no answer ({type(e).__name__}: {e}) to {data[:120]!r}")
    if status != 200:
        assert isinstance(answer, dict) and answer.get("error", "").strip(), answer
    still_serving(webhook)


def test_nesting_at_the_size_limit_is_400(webhook: Webhook) -> None:
    """3 MiB of ``[``, the most a body may hold: refused as no JSON, quickly."""
    status, answer = webhook.post(b"[" * MAX_BODY)
    assert status == 400 and answer["error"].startswith("the body is not JSON")
    still_serving(webhook)


def _deep_update(depth: int) -> bytes:
    """An UPDATE whose object and old object both hold ``depth`` nested arrays in the pod
    template of an opted-in runner: the decision compares them, and reads their pods."""
    deep = nested_text(depth)
    replica = (
        '{"metadata": {"name": "r", "namespace": "n"}, "spec": {"runners": [{"name": "default",'
        ' "template": {"metadata": {"annotations": {"ome.io/tpu-slice-provisioning": "true"}},'
        ' "spec": {"nodeSelector": {"cloud.google.com/gke-tpu-topology": "2x2x1",'
        ' "cloud.google.com/gke-tpu-accelerator": "tpu7x"}, "x": ' + deep + "}}}]}}"
    )
    return (
        '{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
        '{"uid": "deep", "kind": {"group": "ome.io", "version": "v1beta1", "kind": '
        '"InferenceReplica"}, "operation": "UPDATE", "namespace": "n", "name": "r", '
        '"object": ' + replica + ', "oldObject": ' + replica + "}}"
    ).encode()


def _decoders_limit() -> int:
    """The deepest ``_deep_update`` this Python's JSON decoder takes, in a thread of its own as
    the server decodes: about 1,000 on 3.11, 1,500 on 3.12, 10,000 on 3.13 (whose C decoder
    counts its own recursion)."""
    found: list[int] = []

    def search() -> None:
        lo, hi = 1, 200_000
        while lo < hi:
            mid = (lo + hi + 1) // 2
            try:
                json.loads(_deep_update(mid))
                lo = mid
            except RecursionError:
                hi = mid - 1
        found.append(lo)

    thread = threading.Thread(target=search)
    thread.start()
    thread.join()
    return found[0]


def test_every_depth_around_the_decoders_limit_gets_an_answer(webhook: Webhook) -> None:
    """Every depth where the server's JSON decoder starts refusing: just below it, the object
    decodes and then goes through the decision, which must not be where the stack runs out."""
    answers = set()
    limit = _decoders_limit()
    for depth in range(limit - 60, limit + 60):
        status, answer = webhook.post(_deep_update(depth))
        if status == 200:
            assert answer["response"]["uid"] == "deep"
            for warning in answer["response"].get("warnings", []):
                assert not warning.startswith(CRASHED), f"depth {depth}: {warning}"
        else:
            assert status == 400 and answer["error"].startswith("the body is not JSON"), answer
        answers.add(status)
        assert webhook.problems.take() == [], f"depth {depth}: the webhook logged a failure"
    assert answers == {200, 400}, "the sweep crosses the decoder's limit"
    still_serving(webhook)

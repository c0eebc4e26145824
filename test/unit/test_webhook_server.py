"""The webhook server over real HTTPS on loopback: AdmissionReview answers, the 4xx answers to
malformed input (after which it still serves), a certificate rotated without a restart, and
readiness before and after a certificate exists."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from ome.runtime.certs import KeyPair, generate_ca, issue_serving_cert
from ome.runtime.webhook import (
    MAX_BODY,
    AdmissionRequest,
    AdmissionResponse,
    BadReviewError,
    WebhookServer,
    parse_review,
)
from test.helpers import StaticCerts

NAMES = ["hooks.webhooks.svc"]


@pytest.fixture(scope="module")
def ca() -> KeyPair:
    return generate_ca("webhook-test-ca")


@pytest.fixture(scope="module")
def pair(ca: KeyPair) -> KeyPair:
    return issue_serving_cert(ca, NAMES, ["127.0.0.1"])


def review(uid: str = "u-1", **request: Any) -> dict[str, Any]:
    body = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "operation": "CREATE",
        "namespace": "default",
        "name": "cm",
        "object": {"metadata": {"name": "cm", "labels": {"deny": "yes"}}},
        "oldObject": None,
        "dryRun": False,
    }
    body.update(request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}


def deny_labelled(request: AdmissionRequest) -> AdmissionResponse:
    labels = ((request.object or {}).get("metadata") or {}).get("labels") or {}
    if labels.get("deny") == "yes":
        return AdmissionResponse(False, message="labelled deny", reason="Forbidden")
    return AdmissionResponse(True)


def boom(request: AdmissionRequest) -> AdmissionResponse:
    raise KeyError("spec")


class Client:
    """An HTTPS client that trusts only the test CA and checks the server's name."""

    def __init__(self, port: int, ca: KeyPair, host: str = "127.0.0.1") -> None:
        self.port = port
        self.host = host
        self.context = ssl.create_default_context(cadata=ca.cert_pem.decode())

    def connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=10)

    def call(
        self,
        path: str,
        body: bytes | Any,
        method: str = "POST",
        content_type: str | None = "application/json",
        conn: http.client.HTTPSConnection | None = None,
    ) -> tuple[int, Any]:
        own = conn is None
        conn = conn or self.connect()
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if content_type else {}
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
            assert response.getheader("Content-Type") == "application/json"
            return response.status, json.loads(raw) if raw else None
        finally:
            if own:
                conn.close()

    def peer_cert(self) -> x509.Certificate:
        with (
            socket.create_connection(("127.0.0.1", self.port), timeout=10) as raw,
            self.context.wrap_socket(raw, server_hostname=self.host) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der)


@pytest.fixture
def certs(pair: KeyPair) -> StaticCerts:
    return StaticCerts(pair)


@pytest.fixture
def server(certs: StaticCerts) -> Iterator[WebhookServer]:
    server = WebhookServer("127.0.0.1", 0, certs)
    server.register("/validate", deny_labelled)
    server.register("/boom", boom)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(server: WebhookServer, ca: KeyPair) -> Client:
    return Client(server.port, ca)


def test_a_denial_is_an_admission_review_with_a_status(client: Client) -> None:
    status, body = client.call("/validate", review("abc"))
    assert status == 200
    assert body == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": "abc",
            "allowed": False,
            "status": {"code": 403, "message": "labelled deny", "reason": "Forbidden"},
        },
    }


def test_an_allowed_request_has_no_status_nor_warnings(client: Client) -> None:
    # kube-apiserver appends ?timeout=10s to the path it dials.
    status, body = client.call("/validate?timeout=10s", review("a", object={"metadata": {}}))
    assert status == 200
    assert body["response"] == {"uid": "a", "allowed": True}


def test_the_answer_carries_code_message_and_warnings(
    server: WebhookServer, client: Client
) -> None:
    seen: list[AdmissionRequest] = []

    def judge(request: AdmissionRequest) -> AdmissionResponse:
        seen.append(request)
        if request.operation == "DELETE":
            return AdmissionResponse(False, message="keep it", code=422, reason="Invalid")
        return AdmissionResponse(True, message="fine", warnings=("old field", "deprecated"))

    server.register("/judge", judge)
    status, body = client.call("/judge", review("w", dryRun=True))
    assert status == 200
    assert body["response"] == {
        "uid": "w",
        "allowed": True,
        "status": {"code": 200, "message": "fine", "reason": ""},
        "warnings": ["old field", "deprecated"],
    }
    request = seen[0]
    assert (request.uid, request.operation, request.namespace, request.name) == (
        "w",
        "CREATE",
        "default",
        "cm",
    )
    assert request.kind == {"group": "", "version": "v1", "kind": "ConfigMap"}
    assert request.resource["resource"] == "configmaps"
    assert request.dry_run is True and request.old_object is None
    assert request.raw["uid"] == "w"

    old = {"metadata": {"name": "cm"}}
    status, body = client.call(
        "/judge", review("d", operation="DELETE", object=None, oldObject=old)
    )
    assert body["response"]["status"] == {"code": 422, "message": "keep it", "reason": "Invalid"}
    assert seen[1].object is None and seen[1].old_object == old


def test_a_handler_that_raises_admits_unchecked_with_a_warning(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="ome.runtime.webhook"):
        status, body = client.call("/boom", review("x"))
    assert status == 200
    assert body["response"] == {
        "uid": "x",
        "allowed": True,
        "warnings": ["admitted unchecked: the webhook failed: KeyError: 'spec'"],
    }
    [record] = [r for r in caplog.records if r.name == "ome.runtime.webhook"]
    assert record.exc_info is not None and "/boom" in record.getMessage()


def test_a_handler_returning_something_else_admits_unchecked(
    server: WebhookServer, client: Client
) -> None:
    server.register("/odd", lambda request: True)  # type: ignore[arg-type, return-value]
    status, body = client.call("/odd", review("o"))
    assert status == 200
    assert body["response"]["allowed"] is True
    assert body["response"]["warnings"] == [
        "admitted unchecked: the webhook failed: TypeError: the handler returned bool"
    ]


@pytest.mark.parametrize(
    ("body", "content_type", "code", "error"),
    [
        (b"\xff\x00garbage", "application/json", 400, "the body is not JSON"),
        (b"[]", "application/json", 400, "an AdmissionReview is a JSON object, not an array"),
        (b"{}", "application/json", 400, "request is missing"),
        ({"request": []}, "application/json", 400, "request must be an object"),
        (review(uid=""), "application/json", 400, "request.uid is missing"),
        ({**review(), "request": {"kind": {}}}, "application/json", 400, "request.uid is missing"),
        (review(uid=7), "application/json", 400, "request.uid must be a string"),
        (
            {**review(), "apiVersion": "admission.k8s.io/v1beta1"},
            "application/json",
            400,
            'apiVersion must be admission.k8s.io/v1, not "admission.k8s.io/v1beta1"',
        ),
        ({**review(), "kind": "Pod"}, "application/json", 400, "kind must be AdmissionReview"),
        (review(object="text"), "application/json", 400, "request.object must be an object"),
        (review(dryRun="yes"), "application/json", 400, "request.dryRun must be a boolean"),
        (review(), "text/plain", 400, 'Content-Type must be application/json, not "text/plain"'),
        (review(), None, 400, "Content-Type must be application/json, not missing"),
    ],
)
def test_malformed_input_is_a_400_naming_what_is_wrong(
    client: Client, body: Any, content_type: str | None, code: int, error: str
) -> None:
    status, answer = client.call("/validate", body, content_type=content_type)
    assert status == code
    assert error in answer["error"], answer
    # And the server still answers.
    assert client.call("/validate", review())[0] == 200


def test_json_with_a_charset_is_json(client: Client) -> None:
    status, _ = client.call("/validate", review(), content_type="application/json; charset=utf-8")
    assert status == 200


def test_other_methods_are_405_and_unknown_paths_404(client: Client) -> None:
    for method in ("GET", "PUT", "DELETE", "PATCH", "BREW"):
        status, answer = client.call("/validate", b"", method=method)
        assert status == 405, method
        assert answer == {"error": f"method {method} is not allowed: webhooks take POST"}
    status, answer = client.call("/nowhere", review())
    assert (status, answer) == (404, {"error": "no webhook is served at /nowhere"})
    assert client.call("/nowhere", b"", method="GET")[0] == 404
    assert client.call("/validate", review())[0] == 200


def test_an_oversized_body_is_413_without_being_read(client: Client) -> None:
    conn = client.connect()
    try:
        conn.putrequest("POST", "/validate")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(MAX_BODY + 1))
        conn.endheaders()
        response = conn.getresponse()
        assert response.status == 413
        assert "over the limit" in json.loads(response.read())["error"]
        assert response.getheader("Connection") == "close"
    finally:
        conn.close()
    assert client.call("/validate", review())[0] == 200


def test_a_body_at_the_limit_is_read(client: Client) -> None:
    body = json.dumps(review("big")).encode()
    body += b" " * (MAX_BODY - len(body))
    assert len(body) == MAX_BODY
    status, answer = client.call("/validate", body)
    assert (status, answer["response"]["uid"]) == (200, "big")


def test_reviews_share_a_kept_alive_connection(client: Client) -> None:
    conn = client.connect()
    try:
        for uid in ("k1", "k2", "k3"):
            status, body = client.call("/validate", review(uid), conn=conn)
            assert (status, body["response"]["uid"]) == (200, uid)
        # A 400 after a body was read keeps the connection too.
        assert client.call("/validate", b"[]", conn=conn)[0] == 400
        assert client.call("/validate", review("k4"), conn=conn)[0] == 200
    finally:
        conn.close()


def test_clients_that_stall_or_speak_plain_http_hold_up_no_one(client: Client) -> None:
    with socket.create_connection(("127.0.0.1", client.port), timeout=10) as silent:
        # No TLS handshake from this one: others are served meanwhile.
        assert client.call("/validate", review("a"))[0] == 200
        with socket.create_connection(("127.0.0.1", client.port), timeout=10) as plain:
            plain.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            with contextlib.suppress(ConnectionError):
                plain.recv(1024)  # a TLS alert, or a reset: then the server closes
        assert client.call("/validate", review("b"))[0] == 200
        silent.sendall(b"\x16\x03\x01garbage")
        assert client.call("/validate", review("c"))[0] == 200


def test_a_request_the_http_layer_refuses_is_answered_in_json_too(client: Client) -> None:
    with (
        socket.create_connection(("127.0.0.1", client.port), timeout=10) as raw,
        client.context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"POST /validate HTTP/1.1\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n")
        response = http.client.HTTPResponse(tls)  # type: ignore[arg-type]
        response.begin()
        assert response.status == 431
        assert json.loads(response.read()) == {"error": "Line too long"}
    assert client.call("/validate", review())[0] == 200


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
def test_only_tls_1_2_and_up(client: Client, ca: KeyPair) -> None:
    old = ssl.create_default_context(cadata=ca.cert_pem.decode())
    old.minimum_version = ssl.TLSVersion.TLSv1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    with contextlib.suppress(ssl.SSLError):
        old.set_ciphers("ALL:@SECLEVEL=0")
    with (
        socket.create_connection(("127.0.0.1", client.port), timeout=10) as raw,
        pytest.raises((ssl.SSLError, ConnectionError)),
    ):
        old.wrap_socket(raw, server_hostname="127.0.0.1")
    strict = ssl.create_default_context(cadata=ca.cert_pem.decode())
    strict.minimum_version = strict.maximum_version = ssl.TLSVersion.TLSv1_2
    with (
        socket.create_connection(("127.0.0.1", client.port), timeout=10) as raw,
        strict.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() == "TLSv1.2"


def test_the_service_name_is_verified(server: WebhookServer, ca: KeyPair) -> None:
    context = Client(server.port, ca).context
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=NAMES[0]) as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        pytest.raises(ssl.SSLCertVerificationError),
    ):
        context.wrap_socket(raw, server_hostname="other.webhooks.svc")


def test_a_rotated_certificate_is_served_to_new_connections(
    server: WebhookServer, certs: StaticCerts, client: Client, ca: KeyPair, pair: KeyPair
) -> None:
    first = x509.load_pem_x509_certificate(pair.cert_pem)
    assert client.peer_cert() == first
    kept = client.connect()
    try:
        assert client.call("/validate", review("before"), conn=kept)[0] == 200
        rotated = issue_serving_cert(ca, NAMES, ["127.0.0.1"])
        certs.pair = rotated
        second = x509.load_pem_x509_certificate(rotated.cert_pem)
        assert second != first
        assert client.peer_cert() == second
        assert client.call("/validate", review("after"))[0] == 200
        # A connection made before the rotation carries on with the old certificate.
        assert client.call("/validate", review("kept"), conn=kept)[0] == 200
        assert kept.sock is not None
        peer = kept.sock.getpeercert(binary_form=True)
        assert peer == first.public_bytes(serialization.Encoding.DER)
    finally:
        kept.close()
    assert server.ready() is None


def test_without_memfd_the_pair_goes_through_a_private_temporary_directory(
    monkeypatch: pytest.MonkeyPatch, certs: StaticCerts, ca: KeyPair
) -> None:
    monkeypatch.delattr(os, "memfd_create")
    server = WebhookServer("127.0.0.1", 0, certs)
    server.register("/validate", deny_labelled)
    server.start()
    try:
        assert server.ready() is None
        assert Client(server.port, ca).call("/validate", review())[0] == 200
    finally:
        server.stop()


def test_readiness_before_and_after_a_certificate(ca: KeyPair, pair: KeyPair) -> None:
    certs = StaticCerts(None)
    server = WebhookServer("127.0.0.1", 0, certs)
    server.register("/validate", deny_labelled)
    assert server.ready() == "the webhook server is not started"
    server.start()
    try:
        assert server.port != 0
        assert server.ready() == "no serving certificate: the test has set no pair"
        client = Client(server.port, ca)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            client.call("/validate", review())
        certs.pair = pair
        assert server.ready() is None
        assert client.call("/validate", review())[0] == 200
        # A pair whose key is not the certificate's: unusable, so not ready, and said why.
        certs.pair = KeyPair(pair.cert_pem, generate_ca("other").key_pem)
        why = server.ready()
        assert why is not None and why.startswith("the serving certificate is unusable: ")
        with pytest.raises((ssl.SSLError, ConnectionError)):
            client.call("/validate", review())
        certs.pair = pair
        assert server.ready() is None
    finally:
        server.stop()
    assert server.ready() == "the webhook server is stopped"


def test_registering_a_path_twice_or_without_a_slash_is_refused(certs: StaticCerts) -> None:
    server = WebhookServer("127.0.0.1", 0, certs)
    server.register("/a", deny_labelled)
    with pytest.raises(ValueError, match="already registered"):
        server.register("/a", deny_labelled)
    with pytest.raises(ValueError, match="starts with /"):
        server.register("a", deny_labelled)


def test_parse_review_names_fields_of_the_wrong_type() -> None:
    with pytest.raises(BadReviewError, match=r"request\.kind must be an object, not a string"):
        parse_review(review(kind="ConfigMap"))
    with pytest.raises(BadReviewError, match=r"request\.namespace must be a string, not a number"):
        parse_review(review(namespace=3))
    request = parse_review(review(namespace=None, name=None, oldObject=None, dryRun=None))
    assert (request.namespace, request.name, request.old_object, request.dry_run) == (
        "",
        "",
        None,
        False,
    )

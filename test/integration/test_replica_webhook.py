"""The InferenceReplica admission webhook served by the manager, called by the embedded API
server over TLS through config/webhook's configuration (J1, J2): the walkthrough's
troubleshooting story, the table of cases, malformed reviews, and certificates shared across
restarts and replicas."""

from __future__ import annotations

import base64
import contextlib
import copy
import http.client
import json
import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry

from ome.controllers.slices.admission import PATH
from ome.runtime.certs import generate_ca, issue_serving_cert
from ome.runtime.manager import Manager, ManagerOptions
from ome.runtime.rest import NAMESPACES, SECRETS, Rest
from ome.runtime.webhook import AdmissionResponse, WebhookServer
from ome.tpuslice.admission import UNCHECKED_LOG
from ome_sim.apiserver.faults import Fault
from test.admission_cases import CASES, IDLE_CHIPS_REASON, NAME, Case
from test.cluster import Cluster, Kubectl
from test.helpers import eventually
from test.integration.test_slices import (
    MANAGER_AGENT,
    NS,
    Env,
    make_env,
    opted,
)

WEBHOOK = "inferencereplica.ome.io"
POOLS = {"provision-only": ["tpu7x:provision-only:2"], "static": ["tpu7x:static:2"]}


def webhook_env(cluster: Cluster, kubectl: Kubectl, case: Case | None = None) -> Iterator[Env]:
    pools = POOLS["static" if case is not None and case.nodes == "static" else "provision-only"]
    configured = case is None or case.configured
    kwargs: dict[str, Any] = {} if configured else {"config": None}
    yield from make_env(cluster, kubectl, pools, webhook=True, **kwargs)


@pytest.fixture
def env(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    yield from webhook_env(cluster, kubectl)


# -- the troubleshooting case of ComponentReconcileError -------------------------------------------


def test_idle_chips_are_refused_at_the_replica_write_and_fixing_them_heals(env: Env) -> None:
    svc = opted()
    limits = {"google.com/tpu": 2}
    svc["spec"]["engine"]["runner"]["resources"] = {"requests": limits, "limits": limits}
    env.apply(svc)
    jsonpath = r"jsonpath={range .items[*]}{.message}{'\n'}{end}"

    def messages() -> list[str]:
        out = env.kubectl(
            "get",
            "events",
            "-n",
            NS,
            "--field-selector",
            "reason=ComponentReconcileError",
            "-o",
            jsonpath,
        ).stdout
        return [line for line in out.splitlines() if line]

    message = eventually(messages, timeout=30)[0]
    assert message.endswith(
        "pods cannot be placed on a provisioned slice: 1 pod x 2 chips do not fill topology "
        "2x2x1: it is 4 chips on 1 host, which takes 2 pods"
    ), message
    assert f'admission webhook "{WEBHOOK}" denied the request' in message
    assert env.rows() == [] and env.pods() == [] and env.slices() == []
    svc["spec"]["engine"]["runner"]["resources"] = {
        "requests": {"google.com/tpu": 4},
        "limits": {"google.com/tpu": 4},
    }
    env.apply(svc)
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    assert len(env.slices()) == 1


# -- the table of cases, through the API server -----------------------------------------------


def apply(env: Env, obj: dict[str, Any]) -> Any:
    return env.kubectl("apply", "-f", "-", input=json.dumps(obj), check=False)


def node_reads(env: Env) -> int:
    return env.cluster.server.accounting.total("list", "nodes", MANAGER_AGENT)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_admission_table_through_the_api_server(
    cluster: Cluster, kubectl: Kubectl, case: Case, caplog: pytest.LogCaptureFixture
) -> None:
    for env in webhook_env(cluster, kubectl, case):
        faults = env.cluster.server.faults
        node_read_fails = Fault(verb="list", resource="nodes", user_agent=MANAGER_AGENT, code=500)
        node_read_fails.times = None
        if case.old is not None:
            # The old object is stored first; an invalid one gets in while the webhook
            # cannot read the nodes (it admits unchecked).
            faults.add(node_read_fails)
            assert apply(env, case.old).returncode == 0
            faults.clear()
        if case.nodes == "fail":
            faults.add(node_read_fails)
        before, logged = node_reads(env), len(caplog.records)
        with caplog.at_level(logging.WARNING, logger="ome.controllers.slices.admission"):
            result = apply(env, case.new)
        faults.clear()
        if case.allowed:
            assert result.returncode == 0, result.stderr
        else:
            assert result.returncode != 0
            assert (
                f'admission webhook "{WEBHOOK}" denied the request: {case.message}' in result.stderr
            ), result.stderr
        if case.nodes != "fail":
            assert node_reads(env) - before == (1 if case.reads_nodes else 0)
        unchecked = [r for r in caplog.records[logged:] if r.getMessage() == UNCHECKED_LOG]
        assert bool(unchecked) is (case.nodes == "fail")


def test_a_denied_update_leaves_the_stored_replica_as_it_was(env: Env) -> None:
    valid = next(c for c in CASES if c.id == "create-valid").new
    assert apply(env, valid).returncode == 0
    broken = copy.deepcopy(valid)
    broken["spec"]["runners"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"google.com/tpu": 2}
    }
    result = apply(env, broken)
    assert result.returncode != 0 and IDLE_CHIPS_REASON in result.stderr
    stored = env.kubectl("get", "inferencereplica", NAME, "-n", NS, "-o", "json").stdout
    resources = json.loads(stored)["spec"]["runners"][0]["template"]["spec"]["containers"][0]
    assert resources["resources"]["limits"]["google.com/tpu"] in (4, "4")


# -- malformed reviews, sent straight to the manager's webhook -------------------------------


def ca_of(env: Env) -> str:
    secret = env.rest.get(SECRETS, "ome-webhook-server-cert", "ome")
    return base64.b64decode(secret["data"]["ca.crt"]).decode()


def post(env: Env, body: bytes) -> tuple[int, Any]:
    assert env.manager.webhook is not None
    context = ssl.create_default_context(cadata=ca_of(env))
    conn = http.client.HTTPSConnection(
        "127.0.0.1", env.manager.webhook.port, context=context, timeout=10
    )
    context.check_hostname = False  # the certificate names the Service, not 127.0.0.1
    try:
        conn.request("POST", PATH, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def review(**request: Any) -> bytes:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(body).encode()


def test_malformed_reviews_get_a_400_or_an_unchecked_admit_never_a_500(env: Env) -> None:
    status, _ = post(env, b"\x00\xffnot json")
    assert status == 400
    status, body = post(env, json.dumps({"apiVersion": "admission.k8s.io/v1"}).encode())
    assert status == 400 and "request" in body["error"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}}
    status, body = post(
        env,
        review(
            uid="u-1",
            kind={"group": "", "version": "v1", "kind": "Pod"},
            resource={"group": "", "version": "v1", "resource": "pods"},
            operation="CREATE",
            namespace=NS,
            name="p",
            object=pod,
        ),
    )
    assert status == 200
    assert body["response"]["allowed"] is True and body["response"]["uid"] == "u-1"
    assert "admitted unchecked" in body["response"]["warnings"][0]
    # Still serving, and still right, afterwards.
    replica = next(c for c in CASES if c.id == "create-idle-chips").new
    status, body = post(
        env,
        review(
            uid="u-2",
            kind={"group": "ome.io", "version": "v1beta1", "kind": "InferenceReplica"},
            resource={"group": "ome.io", "version": "v1beta1", "resource": "inferencereplicas"},
            operation="CREATE",
            namespace=NS,
            name=NAME,
            object=replica,
        ),
    )
    assert status == 200 and body["response"]["allowed"] is False
    assert body["response"]["status"]["message"].endswith(IDLE_CHIPS_REASON)


# -- certificates ------------------------------------------------------------------------------


def served_certificate(port: int, ca: str) -> x509.Certificate:
    context = ssl.create_default_context(cadata=ca)
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    with context.wrap_socket(raw, server_hostname="ome-webhook-service.ome.svc") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


@contextlib.contextmanager
def webhook_manager(cluster: Cluster, **options: Any) -> Iterator[Manager]:
    """Another manager replica with a webhook server (its controllers are beside the point
    here), running until the block ends."""
    settings: dict[str, Any] = {
        "namespace": "ome",
        "metrics_bind_address": "0",
        "health_probe_bind_address": "0",
        "webhook_bind_address": "127.0.0.1:0",
        "webhook_cert_check_interval": 0.2,
        **options,
    }
    manager = Manager(Rest(cluster.api), ManagerOptions(**settings), registry=CollectorRegistry())
    manager.add_webhook(PATH, lambda request: AdmissionResponse(True))
    stop = threading.Event()
    thread = threading.Thread(target=manager.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield manager
    finally:
        stop.set()
        thread.join(30)


def serving(manager: Manager) -> WebhookServer:
    return eventually(
        lambda: manager.webhook if manager.webhook and manager.webhook.ready() is None else None,
        timeout=30,
    )


def test_replicas_and_restarts_serve_the_same_ca_and_certificate(env: Env) -> None:
    assert env.manager.webhook is not None
    ca = ca_of(env)
    first = served_certificate(env.manager.webhook.port, ca)
    with webhook_manager(env.cluster) as other:
        assert served_certificate(serving(other).port, ca) == first, "two replicas, one cert"
    with webhook_manager(env.cluster) as restarted:  # a restart: a new process, same Secret
        assert served_certificate(serving(restarted).port, ca) == first
        assert ca_of(env) == ca
        # And the API server, trusting the caBundle, still reaches the webhook.
        result = apply(env, next(c for c in CASES if c.id == "create-idle-chips").new)
        assert result.returncode != 0 and IDLE_CHIPS_REASON in result.stderr


def test_readiness_waits_for_the_certificate(cluster: Cluster) -> None:
    """While the Secret cannot be read or written, the webhook has no certificate and the
    manager is not ready; once it can, it is."""
    Rest(cluster.api).create(NAMESPACES, {"metadata": {"name": "ome"}})
    faults = cluster.server.faults
    for verb in ("get", "create"):
        faults.add(Fault(verb=verb, resource="secrets", code=500, times=None))
    try:
        with webhook_manager(cluster, health_probe_bind_address="127.0.0.1:0") as manager:
            probes = eventually(lambda: manager.probes, timeout=10)
            status, text = probe(probes.port)
            assert status == 500 and "webhook" in text
            faults.clear()
            eventually(lambda: probe(probes.port)[0] == 200, timeout=30)
    finally:
        faults.clear()


def probe(port: int) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/readyz")
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_a_mounted_certificate_is_served_and_nothing_is_served_once_stopped(
    cluster: Cluster, tmp_path: Any
) -> None:
    """--webhook-cert-dir, as with cert-manager: the files' certificate is served, no Secret
    is written; after the manager stops, the port is closed."""
    ca = generate_ca("test-ca")
    pair = issue_serving_cert(ca, ["ome-webhook-service.ome.svc"])
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.key_pem)
    with webhook_manager(cluster, webhook_cert_dir=str(tmp_path)) as manager:
        webhook = serving(manager)
        served = served_certificate(webhook.port, ca.cert_pem.decode())
        assert served == x509.load_pem_x509_certificate(pair.cert_pem)
        assert cluster.server.accounting.total("create", "secrets") == 0
    with pytest.raises(OSError):
        served_certificate(webhook.port, ca.cert_pem.decode())

"""The webhook server called by the embedded API server through a ``service`` clientConfig,
its certificate and the configuration's caBundle both managed by SecretCerts: a denial
reaches kubectl in kube's words, other writes pass, and a rotated certificate keeps working."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from ome.runtime.client import Client, RetryPolicy
from ome.runtime.rest import SECRETS, VALIDATING_WEBHOOK_CONFIGURATIONS, Rest
from ome.runtime.webhook import AdmissionRequest, AdmissionResponse, WebhookServer
from ome.runtime.webhookcerts import SecretCerts
from test.cluster import Cluster, Kubectl

NS = "default"
SERVICE = "ome-webhooks"
VWC = "ome-configmap-policy"
PATH = "/validate-configmaps"


def refuse_locked(request: AdmissionRequest) -> AdmissionResponse:
    labels = ((request.object or {}).get("metadata") or {}).get("labels") or {}
    if labels.get("policy.example.com/locked") == "true":
        return AdmissionResponse(False, message=f"configmap {request.name} is locked")
    return AdmissionResponse(True)


def webhook_config(port: int) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": VWC},
        "webhooks": [
            {
                "name": "configmaps.policy.example.com",
                # No caBundle: SecretCerts puts it there.
                "clientConfig": {
                    "service": {"name": SERVICE, "namespace": NS, "port": port, "path": PATH}
                },
                "rules": [
                    {
                        "operations": ["CREATE", "UPDATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["configmaps"],
                    }
                ],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }
        ],
    }


@pytest.fixture
def setup(cluster: Cluster, kubectl: Kubectl) -> Iterator[tuple[WebhookServer, SecretCerts]]:
    client = Client(Rest(cluster.api), RetryPolicy(attempts=2, initial=0.01, cap=0.02))
    certs = SecretCerts(
        client,
        NS,
        "ome-webhook-certs",
        [f"{SERVICE}.{NS}.svc"],
        webhook_config_name=VWC,
        validity=timedelta(minutes=10),
        rotate_before=timedelta(minutes=10),  # every pass after the first rotates
    )
    server = WebhookServer("127.0.0.1", 0, certs)
    server.register(PATH, refuse_locked)
    server.start()
    try:
        assert server.ready() is not None  # no certificate yet
        kubectl("apply", "-f", "-", input=json.dumps(webhook_config(server.port)))
        certs.ensure()
        assert server.ready() is None
        yield server, certs
    finally:
        server.stop()
        certs.stop()


def locked(name: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"policy.example.com/locked": "true"}},
            "data": {"k": "v"},
        }
    )


def test_a_denial_reaches_kubectl_and_other_configmaps_pass(
    setup: tuple[WebhookServer, SecretCerts], kubectl: Kubectl, cluster: Cluster
) -> None:
    config = Client(Rest(cluster.api)).live_get(VALIDATING_WEBHOOK_CONFIGURATIONS, VWC)
    assert config["webhooks"][0]["clientConfig"]["caBundle"]
    out = kubectl("create", "-f", "-", input=locked("frozen"), check=False)
    assert out.returncode != 0
    assert (
        'admission webhook "configmaps.policy.example.com" denied the request: '
        "configmap frozen is locked"
    ) in out.stderr
    assert "NotFound" in kubectl("get", "configmap", "frozen", check=False).stderr
    made = kubectl("create", "configmap", "plain", "--from-literal=k=v")
    assert "configmap/plain created" in made.stdout


def test_a_rotated_certificate_and_ca_keep_being_trusted(
    setup: tuple[WebhookServer, SecretCerts], kubectl: Kubectl, cluster: Cluster
) -> None:
    _, certs = setup
    first = certs.current()
    second = certs.ensure()  # due for rotation at once: a new serving certificate
    assert second != first
    assert "configmap/after-rotation created" in (
        kubectl("create", "configmap", "after-rotation", "--from-literal=k=v").stdout
    )
    # A new CA too (the Secret emptied): the caBundle follows before the new pair is served.
    client = Client(Rest(cluster.api))
    secret = client.live_get(SECRETS, "ome-webhook-certs", NS)
    client.replace(SECRETS, {**secret, "data": {}}, NS)
    certs.ensure()
    out = kubectl("create", "-f", "-", input=locked("still-frozen"), check=False)
    assert "configmap still-frozen is locked" in out.stderr
    assert "configmap/after-new-ca created" in (
        kubectl("create", "configmap", "after-new-ca", "--from-literal=k=v").stdout
    )

"""Validating webhooks called by the embedded API server itself, over HTTPS with a
self-signed CA, as seen by the official client and by kubectl."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from kubernetes.client.exceptions import ApiException
from test.cluster import Cluster, Kubectl
from test.helpers import eventually
from test.manifests import WIDGET_CRD, install, widget
from test.webhooks import WebhookServer, allow, config, deny, webhook

from ome.runtime.certs import KeyPair


def _widget_hook(url: str, ca: KeyPair, **fields: object) -> dict:
    return webhook(
        "deny.widgets.example.com",
        url,
        ca,
        rules=[
            {
                "operations": ["CREATE"],
                "apiGroups": ["example.com"],
                "apiVersions": ["v1"],
                "resources": ["widgets"],
            }
        ],
        **fields,
    )


def _in_effect(cluster: Cluster, answered: Callable[[int, dict[str, str]], bool]) -> None:
    """Wait until a widget's dry-run create (nothing stored; a webhook without side effects
    is still called) is ``answered`` as the webhook configuration just written says.
    kube-apiserver reads webhook configurations through an informer, so a change takes
    effect a moment after it is stored; the embedded server applies it at once."""

    def probe() -> bool:
        status, _, headers = cluster.request(
            "POST", "/apis/example.com/v1/namespaces/default/widgets?dryRun=All", widget("probe")
        )
        return answered(status, headers)

    eventually(probe, timeout=30)


@pytest.mark.conformance
def test_a_webhook_denial_reaches_the_client_in_kube_wording(
    cluster: Cluster, kubectl: Kubectl, server: WebhookServer, ca: KeyPair
) -> None:
    install(cluster, WIDGET_CRD)
    server.responders["/deny"] = deny(
        {"message": "widgets of size large are not allowed", "code": 403}
    )
    url = f"https://127.0.0.1:{server.port}/deny"
    kubectl("apply", "-f", "-", input=json.dumps(config("widgets", _widget_hook(url, ca))))
    _in_effect(cluster, lambda status, _: status == 403)
    with pytest.raises(ApiException) as e:
        cluster.custom().create_namespaced_custom_object(
            "example.com", "v1", "default", "widgets", widget("w", size="large")
        )
    assert e.value.status == 403
    assert json.loads(e.value.body)["message"] == (
        'admission webhook "deny.widgets.example.com" denied the request: '
        "widgets of size large are not allowed"
    )
    review = server.calls[-1][1]
    assert review["kind"] == "AdmissionReview" and review["request"]["operation"] == "CREATE"
    assert review["request"]["object"]["spec"]["size"] == "large"
    out = kubectl("apply", "-f", "-", input=json.dumps(widget("w2", size="large")), check=False)
    assert out.returncode != 0
    assert (
        'admission webhook "deny.widgets.example.com" denied the request: widgets of size large are not allowed'
        in out.stderr
    )
    # Nothing was stored.
    assert (
        cluster.custom().list_namespaced_custom_object("example.com", "v1", "default", "widgets")[
            "items"
        ]
        == []
    )


@pytest.mark.conformance
def test_an_allowing_webhook_lets_the_write_through_with_its_warnings(
    cluster: Cluster, kubectl: Kubectl, server: WebhookServer, ca: KeyPair
) -> None:
    install(cluster, WIDGET_CRD)
    server.responders["/allow"] = allow(["widgets are experimental"])
    url = f"https://127.0.0.1:{server.port}/allow"
    cluster.request(
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        config("widgets", _widget_hook(url, ca)),
    )
    _in_effect(cluster, lambda _, headers: "widgets are experimental" in headers.get("Warning", ""))
    out = kubectl("apply", "-f", "-", input=json.dumps(widget("w")))
    assert "widget.example.com/w created" in out.stdout
    assert "widgets are experimental" in out.stderr


@pytest.mark.conformance
def test_an_unreachable_webhook_fails_closed_or_open_by_failure_policy(
    cluster: Cluster, server: WebhookServer, ca: KeyPair
) -> None:
    install(cluster, WIDGET_CRD)
    dead = "https://127.0.0.1:1/never"
    status, _, _ = cluster.request(
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        config("closed", _widget_hook(dead, ca)),
    )
    assert status == 201
    _in_effect(cluster, lambda status, _: status == 500)
    with pytest.raises(ApiException) as e:
        cluster.custom().create_namespaced_custom_object(
            "example.com", "v1", "default", "widgets", widget("w")
        )
    assert e.value.status == 500
    assert (
        'failed calling webhook "deny.widgets.example.com"' in json.loads(e.value.body)["message"]
    )
    cluster.request(
        "PATCH",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/closed",
        [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}],
        headers={"Content-Type": "application/json-patch+json"},
    )
    _in_effect(cluster, lambda status, _: status == 201)
    made = cluster.custom().create_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", widget("w")
    )
    assert made["metadata"]["name"] == "w"


@pytest.mark.conformance
def test_a_webhook_config_without_side_effects_is_invalid(cluster: Cluster, ca: KeyPair) -> None:
    hook = _widget_hook("https://127.0.0.1:1/x", ca)
    del hook["sideEffects"]
    status, body, _ = cluster.request(
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        config("bad", hook),
    )
    assert status == 422 and "webhooks[0].sideEffects: Required value" in body["message"]

"""CustomResourceDefinitions: served at once, schema-validated and pruned, with printer
columns, status and scale subresources, and taken away when deleted."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException
from test.cluster import Cluster, Kubectl
from test.helpers import eventually, gone
from test.manifests import GADGET_CRD, WIDGET_CRD, install, served, widget


@pytest.mark.conformance
def test_namespaced_and_cluster_scoped_crds_are_served_once_established(
    cluster: Cluster,
) -> None:
    install(cluster, WIDGET_CRD)
    install(cluster, GADGET_CRD)
    custom = cluster.custom()
    made = custom.create_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", widget("w")
    )
    assert made["metadata"]["namespace"] == "default"
    gadget = {
        "apiVersion": "example.com/v1beta1",
        "kind": "Gadget",
        "metadata": {"name": "g"},
        "spec": {"topology": "2x2x1"},
    }
    made = custom.create_cluster_custom_object("example.com", "v1beta1", "gadgets", gadget)
    assert "namespace" not in made["metadata"]
    crd = cluster.ext().read_custom_resource_definition("gadgets.example.com")
    assert {c.type: c.status for c in crd.status.conditions}["Established"] == "True"
    status, body, _ = cluster.request("GET", "/apis/example.com/v1")
    assert status == 200 and [r["name"] for r in body["resources"]] == [
        "widgets",
        "widgets/status",
        "widgets/scale",
    ]


@pytest.mark.conformance
def test_unknown_fields_are_pruned(cluster: Cluster) -> None:
    install(cluster, WIDGET_CRD)
    body = widget("w")
    body["spec"]["colour"] = "red"
    body["unexpected"] = True
    made = cluster.custom().create_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", body
    )
    assert "colour" not in made["spec"] and "unexpected" not in made
    assert made["spec"]["replicas"] == 1, "schema defaults are applied"


@pytest.mark.conformance
def test_strict_field_validation_rejects_unknown_fields(cluster: Cluster) -> None:
    install(cluster, WIDGET_CRD)
    body = widget("w")
    body["spec"]["colour"] = "red"
    status, reply, _ = cluster.request(
        "POST", "/apis/example.com/v1/namespaces/default/widgets?fieldValidation=Strict", body
    )
    assert status == 400 and reply["reason"] == "BadRequest"
    assert 'unknown field "spec.colour"' in reply["message"]


@pytest.mark.conformance
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"size": "small", "replicas": "three"},
            'spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer',
        ),
        ({}, "spec.size: Required value"),
        (
            {"size": "huge"},
            'spec.size: Unsupported value: "huge": supported values: "small", "large"',
        ),
        ({"size": "small", "replicas": -1}, "spec.replicas: Invalid value: -1"),
    ],
)
def test_schema_violations_are_422_invalid(cluster: Cluster, spec: dict, message: str) -> None:
    install(cluster, WIDGET_CRD)
    body = widget("w")
    body["spec"] = spec
    with pytest.raises(ApiException) as e:
        cluster.custom().create_namespaced_custom_object(
            "example.com", "v1", "default", "widgets", body
        )
    assert e.value.status == 422
    status = json.loads(e.value.body)
    assert status["reason"] == "Invalid"
    assert status["message"].startswith('Widget.example.com "w" is invalid: ')
    assert message in status["message"]
    assert status["details"]["causes"]


@pytest.mark.conformance
def test_deleting_a_crd_deletes_its_objects_and_stops_serving_it(cluster: Cluster) -> None:
    ext, custom = cluster.ext(), cluster.custom()
    install(cluster, WIDGET_CRD)
    custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", widget("w"))
    ext.delete_custom_resource_definition("widgets.example.com")
    eventually(lambda: gone(lambda: ext.read_custom_resource_definition("widgets.example.com")))
    status, _, _ = cluster.request("GET", "/apis/example.com/v1/namespaces/default/widgets")
    assert status == 404
    # Recreated, it starts empty.
    install(cluster, WIDGET_CRD)
    assert (
        custom.list_namespaced_custom_object("example.com", "v1", "default", "widgets")["items"]
        == []
    )


@pytest.mark.conformance
def test_scale_subresource(cluster: Cluster, kubectl: Kubectl) -> None:
    install(cluster, WIDGET_CRD)
    custom = cluster.custom()
    custom.create_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", widget("w", replicas=2)
    )
    scale = custom.get_namespaced_custom_object_scale(
        "example.com", "v1", "default", "widgets", "w"
    )
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 2
    kubectl("scale", "widget", "w", "--replicas=5")
    obj = custom.get_namespaced_custom_object("example.com", "v1", "default", "widgets", "w")
    assert obj["spec"]["replicas"] == 5 and obj["metadata"]["generation"] == 2


@pytest.mark.conformance
def test_kubectl_get_shows_printer_columns(cluster: Cluster, kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(WIDGET_CRD))
    served(cluster, WIDGET_CRD)
    kubectl("apply", "-f", "-", input=json.dumps(widget("w", replicas=3)))
    cluster.custom().patch_namespaced_custom_object_status(
        "example.com",
        "v1",
        "default",
        "widgets",
        "w",
        {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "ACTIVE"}]}},
    )
    out = kubectl("get", "widgets").stdout.splitlines()
    assert out[0].split() == ["NAME", "SIZE", "REPLICAS", "STATE", "AGE"]
    assert out[1].split()[:4] == ["w", "small", "3", "ACTIVE"]
    assert kubectl("get", "wd", "w", "-o", "name").stdout.strip() == "widget.example.com/w"


@pytest.mark.conformance
def test_kubectl_explain_reads_the_crd_schema(cluster: Cluster, kubectl: Kubectl) -> None:
    """kube-apiserver publishes a new CRD to discovery and OpenAPI a moment after it is
    Established (found flaky on the real control plane: `couldn't find resource`), so
    kubectl is asked until it knows the resource."""
    install(cluster, WIDGET_CRD)
    out = eventually(
        lambda: (r := kubectl("explain", "widgets.spec", check=False)).returncode == 0 and r.stdout,
        timeout=30,
        interval=0.5,
    )
    assert "size" in out and "replicas" in out

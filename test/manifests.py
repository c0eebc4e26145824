"""Test objects: a namespaced and a cluster-scoped CRD, and small built-in objects."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]

WIDGET_CRD: JSON = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {
            "plural": "widgets",
            "singular": "widget",
            "kind": "Widget",
            "shortNames": ["wd"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                    },
                },
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "string", "jsonPath": ".spec.size"},
                    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                    {
                        "name": "State",
                        "type": "string",
                        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
                    },
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "string", "enum": ["small", "large"]},
                                    "replicas": {"type": "integer", "default": 1, "minimum": 0},
                                    "labels": {
                                        "type": "object",
                                        "additionalProperties": {"type": "string"},
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "replicas": {"type": "integer"},
                                    "conditions": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "properties": {
                                                "type": {"type": "string"},
                                                "status": {"type": "string"},
                                                "reason": {"type": "string"},
                                                "message": {"type": "string"},
                                                "lastTransitionTime": {
                                                    "type": "string",
                                                    "format": "date-time",
                                                },
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}

GADGET_CRD: JSON = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Cluster",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
        "versions": [
            {
                "name": "v1beta1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"topology": {"type": "string"}},
                            },
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    }
                },
            }
        ],
    },
}


def widget(name: str, namespace: str = "default", **spec: Any) -> JSON:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"size": "small", **spec},
    }


def pod(
    name: str, namespace: str = "default", labels: dict[str, str] | None = None, **spec: Any
) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}], **spec},
    }


def configmap(name: str, namespace: str = "default", **meta: Any) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "data": {"k": "v"},
    }


def served(cluster: Any, crd: JSON, timeout: float = 30.0) -> None:
    """Wait until ``crd`` is Established and its resource answers a list. The embedded
    server serves a CRD as it is created; kube-apiserver's establishing controller and CRD
    handler take a few hundred milliseconds, and until then the resource is a 404."""
    import time

    spec = crd["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("served"))
    path = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
    deadline = time.monotonic() + timeout
    while True:
        status, body, _ = cluster.request(
            "GET",
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}",
        )
        conditions = (body.get("status") or {}).get("conditions") or [] if status == 200 else []
        established = any(
            c.get("type") == "Established" and c.get("status") == "True" for c in conditions
        )
        if established and cluster.request("GET", path)[0] == 200:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{crd['metadata']['name']} not served in {timeout}s")
        time.sleep(0.05)


def install(cluster: Any, crd: JSON) -> None:
    """Create ``crd`` through the official client and wait until it is served."""
    cluster.ext().create_custom_resource_definition(crd)
    served(cluster, crd)

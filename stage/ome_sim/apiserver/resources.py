"""The resource types the embedded API server serves: the built-in ones and those CRDs add.

A ``ResourceType`` is the server's whole knowledge of a type: its names for discovery, its
scope, subresources, table columns, and (for custom resources) its structural schemas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class ScaleSpec:
    """A CRD's ``subresources.scale``: where replicas and the selector live."""

    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str | None = None


@dataclass
class ResourceType:
    """One served resource. ``versions`` are the served versions (storage first)."""

    group: str
    versions: list[str]
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    status: bool = False
    scale: ScaleSpec | None = None
    extra_subresources: list[str] = field(default_factory=list)
    has_generation: bool = False
    #: Custom resources only: per version, the openAPIV3Schema and the printer columns.
    schemas: dict[str, JSON] = field(default_factory=dict)
    printer_columns: dict[str, list[JSON]] = field(default_factory=dict)
    #: Custom resources need a resourceVersion on update; most built-ins allow it unset.
    allow_unconditional_update: bool = True
    custom: bool = False
    #: The CRD that defines this type (custom resources only).
    crd_name: str | None = None
    #: The verbs discovery lists; ``bindings`` is create-only.
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )

    @property
    def storage_version(self) -> str:
        return self.versions[0]

    @property
    def key(self) -> tuple[str, str]:
        """(group, plural): objects are stored once per key, whatever the version."""
        return (self.group, self.plural)

    def api_version(self, version: str | None = None) -> str:
        v = version or self.storage_version
        return f"{self.group}/{v}" if self.group else v

    @property
    def subresources(self) -> list[str]:
        subs = list(self.extra_subresources)
        if self.status:
            subs.append("status")
        if self.scale is not None:
            subs.append("scale")
        return subs


def _core(
    kind: str,
    plural: str,
    namespaced: bool = True,
    short: list[str] | None = None,
    status: bool = False,
    extra: list[str] | None = None,
    categories: list[str] | None = None,
) -> ResourceType:
    return ResourceType(
        group="",
        versions=["v1"],
        kind=kind,
        plural=plural,
        singular=kind.lower(),
        namespaced=namespaced,
        short_names=short or [],
        categories=categories or [],
        status=status,
        extra_subresources=extra or [],
    )


def builtin_types() -> list[ResourceType]:
    """The built-in types of the spec, with kube-apiserver's names and subresources."""
    return [
        _core("Namespace", "namespaces", namespaced=False, short=["ns"], status=True),
        _core("Pod", "pods", short=["po"], status=True, extra=["binding"], categories=["all"]),
        ResourceType(
            group="",
            versions=["v1"],
            kind="Binding",
            plural="bindings",
            singular="binding",
            namespaced=True,
            verbs=("create",),
        ),
        _core("Node", "nodes", namespaced=False, short=["no"], status=True),
        _core("ConfigMap", "configmaps", short=["cm"]),
        _core("Secret", "secrets"),
        _core("Service", "services", short=["svc"], status=True, categories=["all"]),
        _core("Event", "events", short=["ev"]),
        ResourceType(
            group="coordination.k8s.io",
            versions=["v1"],
            kind="Lease",
            plural="leases",
            singular="lease",
            namespaced=True,
        ),
        ResourceType(
            group="apps",
            versions=["v1"],
            kind="ControllerRevision",
            plural="controllerrevisions",
            singular="controllerrevision",
            namespaced=True,
        ),
        ResourceType(
            group="apiextensions.k8s.io",
            versions=["v1"],
            kind="CustomResourceDefinition",
            plural="customresourcedefinitions",
            singular="customresourcedefinition",
            namespaced=False,
            short_names=["crd", "crds"],
            categories=["api-extensions"],
            status=True,
            has_generation=True,
        ),
        ResourceType(
            group="admissionregistration.k8s.io",
            versions=["v1"],
            kind="ValidatingWebhookConfiguration",
            plural="validatingwebhookconfigurations",
            singular="validatingwebhookconfiguration",
            namespaced=False,
            categories=["api-extensions"],
            has_generation=True,
        ),
    ]

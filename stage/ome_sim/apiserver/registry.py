"""Which resources are served: the built-in types plus one entry per established CRD version.

Owns discovery (``/api``, ``/apis``, ``/api/v1``, ``/apis/<g>/<v>``) and the OpenAPI v3
documents kubectl reads for ``apply`` and ``explain``. It never touches stored objects.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

from .resources import ResourceType, ScaleSpec, builtin_types

JSON = dict[str, Any]

KUBE_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-ome_sim"}

_VERSION_RE = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Kubernetes' version ordering: GA before beta before alpha, higher numbers first."""
    m = _VERSION_RE.match(version)
    if not m:
        return (3, 0, 0, version)
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor, version)


def crd_resource_type(crd: JSON) -> ResourceType:
    """The ResourceType a (validated) CRD defines."""
    spec = crd["spec"]
    names = spec["names"]
    served = [v for v in spec["versions"] if v.get("served", True)]
    storage = next(v["name"] for v in spec["versions"] if v.get("storage"))
    ordered = sorted((v["name"] for v in served), key=lambda n: (n != storage,))
    by_name = {v["name"]: v for v in spec["versions"]}
    status = False
    scale: ScaleSpec | None = None
    for v in served:
        subs = v.get("subresources") or {}
        status = status or "status" in subs
        if "scale" in subs and scale is None:
            s = subs["scale"] or {}
            scale = ScaleSpec(
                s.get("specReplicasPath", ".spec.replicas"),
                s.get("statusReplicasPath", ".status.replicas"),
                s.get("labelSelectorPath"),
            )
    return ResourceType(
        group=spec["group"],
        versions=ordered,
        kind=names["kind"],
        plural=names["plural"],
        singular=names.get("singular") or names["kind"].lower(),
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        short_names=list(names.get("shortNames") or []),
        categories=list(names.get("categories") or []),
        status=status,
        scale=scale,
        has_generation=True,
        schemas={
            n: copy.deepcopy((by_name[n].get("schema") or {}).get("openAPIV3Schema") or {})
            for n in ordered
        },
        printer_columns={
            n: copy.deepcopy(by_name[n].get("additionalPrinterColumns") or []) for n in ordered
        },
        allow_unconditional_update=False,
        custom=True,
        crd_name=crd["metadata"]["name"],
    )


class Registry:
    """The served types, looked up by (group, version, plural) or by (group, plural)."""

    def __init__(self) -> None:
        self._builtin = {rt.key: rt for rt in builtin_types()}
        self._custom: dict[tuple[str, str], ResourceType] = {}

    # -- lookups ---------------------------------------------------------------------------

    def all(self) -> list[ResourceType]:
        return list(self._builtin.values()) + list(self._custom.values())

    def by_key(self, group: str, plural: str) -> ResourceType | None:
        return self._builtin.get((group, plural)) or self._custom.get((group, plural))

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        rt = self.by_key(group, plural)
        if rt is None or version not in rt.versions:
            return None
        return rt

    def group_versions(self) -> dict[str, list[str]]:
        """Served versions per group, most preferred first (the core group is "")."""
        out: dict[str, set[str]] = {}
        for rt in self.all():
            out.setdefault(rt.group, set()).update(rt.versions)
        return {g: sorted(vs, key=version_priority) for g, vs in out.items()}

    def serves(self, group: str, version: str) -> bool:
        return version in self.group_versions().get(group, [])

    # -- CRDs ------------------------------------------------------------------------------

    def install(self, rt: ResourceType) -> None:
        self._custom[rt.key] = rt

    def uninstall(self, key: tuple[str, str]) -> None:
        self._custom.pop(key, None)

    # -- discovery -------------------------------------------------------------------------

    def api_versions(self) -> JSON:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
        }

    def api_group_list(self) -> JSON:
        groups = []
        for group, versions in sorted(self.group_versions().items()):
            if not group:
                continue
            gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
            groups.append({"name": group, "versions": gvs, "preferredVersion": gvs[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def api_group(self, group: str) -> JSON | None:
        versions = self.group_versions().get(group)
        if not versions or not group:
            return None
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": gvs,
            "preferredVersion": gvs[0],
        }

    def resource_list(self, group: str, version: str) -> JSON | None:
        if not self.serves(group, version):
            return None
        resources: list[JSON] = []
        for rt in sorted(self.all(), key=lambda r: r.plural):
            if rt.group != group or version not in rt.versions:
                continue
            verbs = list(rt.verbs)
            entry: JSON = {
                "name": rt.plural,
                "singularName": rt.singular,
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": verbs,
            }
            if rt.short_names:
                entry["shortNames"] = rt.short_names
            if rt.categories:
                entry["categories"] = rt.categories
            resources.append(entry)
            for sub in rt.subresources:
                sub_entry: JSON = {
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": ["get", "patch", "update"],
                }
                if sub == "scale":
                    sub_entry.update(group="autoscaling", version="v1", kind="Scale")
                elif sub == "binding":
                    sub_entry.update(kind="Binding", verbs=["create"])
                resources.append(sub_entry)
        gv = f"{group}/{version}" if group else version
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv,
            "resources": resources,
        }

    # -- OpenAPI v3 ------------------------------------------------------------------------

    def openapi_document(self, group: str, version: str) -> JSON | None:
        """The ``/openapi/v3/<gv>`` document: paths with ``fieldValidation`` on patch, so
        ``kubectl apply`` relies on server-side validation, and component schemas with
        ``x-kubernetes-group-version-kind``, so ``kubectl explain`` can describe types."""
        if not self.serves(group, version):
            return None
        prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
        paths: JSON = {}
        schemas: JSON = {"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": _OBJECT_META}
        for rt in self.all():
            if rt.group != group or version not in rt.versions:
                continue
            gvk = {"group": group, "version": version, "kind": rt.kind}
            ref = _schema_name(group, version, rt.kind)
            schemas[ref] = _type_schema(rt, version, gvk)
            base = (
                f"{prefix}/namespaces/{{namespace}}/{rt.plural}"
                if rt.namespaced
                else (f"{prefix}/{rt.plural}")
            )
            params = [
                {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
            ]
            if rt.namespaced:
                params.append(
                    {
                        "name": "namespace",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                    }
                )
            body_ref = {"$ref": f"#/components/schemas/{ref}"}
            item_ops: JSON = {"parameters": params}
            for method, action in (
                ("get", "get"),
                ("put", "put"),
                ("patch", "patch"),
                ("delete", "delete"),
            ):
                op: JSON = {
                    "operationId": f"{action}{rt.kind}",
                    "x-kubernetes-action": action,
                    "x-kubernetes-group-version-kind": gvk,
                    "responses": {
                        "200": {
                            "description": "OK",
                            "content": {"application/json": {"schema": body_ref}},
                        }
                    },
                }
                if method in ("put", "patch"):
                    op["parameters"] = [_FIELD_VALIDATION, _FIELD_MANAGER, _DRY_RUN]
                    # kubectl apply sends a strategic merge patch only where the patch
                    # operation lists that type; custom resources do not support it.
                    content_types = ["application/json"]
                    if method == "patch":
                        content_types = [
                            "application/json-patch+json",
                            "application/merge-patch+json",
                        ]
                        if not rt.custom:
                            content_types.append("application/strategic-merge-patch+json")
                    op["requestBody"] = {
                        "content": {ct: {"schema": body_ref} for ct in content_types}
                    }
                item_ops[method] = op
            paths[f"{base}/{{name}}"] = item_ops
            paths[base] = {
                "post": {
                    "operationId": f"create{rt.kind}",
                    "x-kubernetes-action": "post",
                    "x-kubernetes-group-version-kind": gvk,
                    "parameters": [_FIELD_VALIDATION, _FIELD_MANAGER, _DRY_RUN],
                    "requestBody": {"content": {"application/json": {"schema": body_ref}}},
                    "responses": {
                        "201": {
                            "description": "Created",
                            "content": {"application/json": {"schema": body_ref}},
                        }
                    },
                },
                "get": {
                    "operationId": f"list{rt.kind}",
                    "x-kubernetes-action": "list",
                    "x-kubernetes-group-version-kind": gvk,
                    "responses": {"200": {"description": "OK"}},
                },
            }
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": KUBE_VERSION["gitVersion"]},
            "paths": paths,
            "components": {"schemas": schemas},
        }

    def openapi_index(self) -> JSON:
        """``/openapi/v3``: each document's URL carries a hash of its content, as kubectl's
        cache expects (a changed CRD gives a new URL, so no stale schema is used)."""
        paths: JSON = {}
        for group, versions in self.group_versions().items():
            for version in versions:
                doc = self.openapi_document(group, version)
                digest = (
                    hashlib.sha512(json.dumps(doc, sort_keys=True).encode())
                    .hexdigest()[:32]
                    .upper()
                )
                key = f"apis/{group}/{version}" if group else f"api/{version}"
                paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
        return {"paths": paths}


def _schema_name(group: str, version: str, kind: str) -> str:
    if not group:
        return f"io.k8s.api.core.{version}.{kind}"
    reversed_group = ".".join(reversed(group.split(".")))
    return f"{reversed_group}.{version}.{kind}"


def _type_schema(rt: ResourceType, version: str, gvk: JSON) -> JSON:
    if rt.custom:
        schema = copy.deepcopy(rt.schemas.get(version) or {"type": "object"})
        schema.setdefault("type", "object")
        props = schema.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string", "description": _API_VERSION_DOC})
        props.setdefault("kind", {"type": "string", "description": _KIND_DOC})
        props["metadata"] = {
            "allOf": [{"$ref": _OBJECT_META_REF}],
            "description": "Standard object's metadata.",
        }
    else:
        # Built-in types are not schema-checked by this server; their schemas say only that.
        schema = {
            "type": "object",
            "description": f"{rt.kind} (the embedded API server does not publish its schema)",
            "properties": {
                "apiVersion": {"type": "string", "description": _API_VERSION_DOC},
                "kind": {"type": "string", "description": _KIND_DOC},
                "metadata": {"allOf": [{"$ref": _OBJECT_META_REF}]},
            },
            "x-kubernetes-preserve-unknown-fields": True,
        }
    schema["x-kubernetes-group-version-kind"] = [gvk]
    return schema


_OBJECT_META_REF = "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_API_VERSION_DOC = "APIVersion defines the versioned schema of this representation of an object."
_KIND_DOC = "Kind is a string value representing the REST resource this object represents."

_FIELD_VALIDATION = {
    "name": "fieldValidation",
    "in": "query",
    "description": "Ignore, Warn or Strict: how unknown and duplicate fields are treated.",
    "schema": {"type": "string", "uniqueItems": True},
}
_FIELD_MANAGER = {"name": "fieldManager", "in": "query", "schema": {"type": "string"}}
_DRY_RUN = {"name": "dryRun", "in": "query", "schema": {"type": "string"}}

_OBJECT_META: JSON = {
    "type": "object",
    "description": "ObjectMeta is metadata that all persisted resources must have.",
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "uid": {"type": "string"},
        "resourceVersion": {"type": "string"},
        "generation": {"type": "integer", "format": "int64"},
        "creationTimestamp": {"type": "string", "format": "date-time"},
        "deletionTimestamp": {"type": "string", "format": "date-time"},
        "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {
            "type": "array",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
        "managedFields": {
            "type": "array",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    },
}

"""Per-type rules kube-apiserver applies on create and update: defaults, status resets,
metadata and name validation, pod immutability, secrets' stringData, CRD validation.

Pure functions over JSON dicts: no store, no HTTP. Message texts follow kube-apiserver's.
"""

from __future__ import annotations

import base64
import copy
import re
from typing import Any

from ome.tpuslice.kubenames import (
    dns1123_subdomain_problems,
    label_value_problems,
    qualified_name_problems,
)

from .errors import FieldError
from .resources import ResourceType
from .schema import validate_crd_schema

JSON = dict[str, Any]

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    f"used for validation is '{_DNS1123_LABEL}')"
)

#: Types whose names must be DNS-1123 labels rather than subdomains.
LABEL_NAMED = {("", "namespaces"), ("", "services")}

GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _full(pattern: str, text: str) -> bool:
    return re.fullmatch(pattern, text) is not None


def validate_name(rt: ResourceType, name: str) -> list[FieldError]:
    if not name:
        return [FieldError.required("metadata.name", "name or generateName is required")]
    if rt.key in LABEL_NAMED:
        if len(name) > 63:
            return [FieldError.invalid("metadata.name", name, "must be no more than 63 characters")]
        if not _full(_DNS1123_LABEL, name):
            return [FieldError.invalid("metadata.name", name, LABEL_MSG)]
        return []
    if rt.key in {("", "events"), ("", "nodes")}:
        # Events and nodes accept any subdomain-ish name; kube checks only path-safety.
        if "/" in name or name in (".", ".."):
            return [FieldError.invalid("metadata.name", name, "may not contain '/'")]
        return []
    return [FieldError.invalid("metadata.name", name, p) for p in dns1123_subdomain_problems(name)]


def _validate_qualified_key(path: str, key: str) -> list[FieldError]:
    return [FieldError.invalid(path, key, p) for p in qualified_name_problems(key)]


def validate_metadata(rt: ResourceType, meta: JSON) -> list[FieldError]:
    errs: list[FieldError] = []
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        return [FieldError.type_invalid("metadata.labels", labels, "must be a map")]
    for key, value in labels.items():
        errs += _validate_qualified_key("metadata.labels", key)
        if not isinstance(value, str):
            errs.append(
                FieldError.type_invalid(f"metadata.labels[{key}]", value, "must be a string")
            )
        else:
            errs += [
                FieldError.invalid("metadata.labels", value, p) for p in label_value_problems(value)
            ]
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        return [
            *errs,
            FieldError.type_invalid("metadata.annotations", annotations, "must be a map"),
        ]
    total = 0
    for key, value in annotations.items():
        errs += _validate_qualified_key("metadata.annotations", key.lower())
        if not isinstance(value, str):
            errs.append(
                FieldError.type_invalid(f"metadata.annotations[{key}]", value, "must be a string")
            )
        else:
            total += len(key) + len(value)
    if total > 256 * 1024:
        errs.append(
            FieldError(
                "FieldValueTooLong", "metadata.annotations", "may not be more than 262144 bytes"
            )
        )
    finalizers = meta.get("finalizers") or []
    seen: set[str] = set()
    for i, fin in enumerate(finalizers):
        if not isinstance(fin, str) or not fin:
            errs.append(FieldError.invalid(f"metadata.finalizers[{i}]", fin, "must be a string"))
        elif fin in seen:
            errs.append(FieldError("FieldValueDuplicate", f"metadata.finalizers[{i}]", "", fin))
        else:
            seen.add(fin)
            # kube only warns about unqualified names; a name that is not a qualified
            # name at all is an error.
            errs += _validate_qualified_key(f"metadata.finalizers[{i}]", fin)
    for i, ref in enumerate(meta.get("ownerReferences") or []):
        path = f"metadata.ownerReferences[{i}]"
        if not isinstance(ref, dict):
            errs.append(FieldError.type_invalid(path, ref, "must be an object"))
            continue
        for part in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(part):
                errs.append(
                    FieldError.invalid(
                        f"{path}.{part}", ref.get(part, ""), f"{part} must not be empty"
                    )
                )
    controllers = [
        r for r in meta.get("ownerReferences") or [] if isinstance(r, dict) and r.get("controller")
    ]
    if len(controllers) > 1:
        errs.append(
            FieldError.invalid(
                "metadata.ownerReferences",
                controllers,
                "Only one reference can have Controller set to true",
            )
        )
    return errs


# -- create ------------------------------------------------------------------------------


def prepare_for_create(rt: ResourceType, obj: JSON) -> None:
    """Reset what a client may not set on create, and apply the type's defaults."""
    if rt.status and rt.key not in {("", "nodes")}:
        # kube drops status on create for types with a status subresource (nodes excepted:
        # the kubelet registers a node with its status).
        obj.pop("status", None)
    if rt.key == ("", "pods"):
        _default_pod(obj)
    elif rt.key == ("", "namespaces"):
        obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
        obj["status"] = {"phase": "Active"}
    elif rt.key == ("", "secrets"):
        obj.setdefault("type", "Opaque")
        fold_string_data(obj)
    elif rt.key == ("", "services"):
        _default_service(obj)
    elif rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        _default_crd(obj)


def _default_pod(pod: JSON) -> None:
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    keys = {t.get("key") for t in tolerations if isinstance(t, dict)}
    for taint in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if taint not in keys:
            tolerations.append(
                {
                    "key": taint,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            )
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind) or []:
            if not isinstance(c, dict):
                continue
            image = str(c.get("image", ""))
            latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
            c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("resources", {})
            for port in c.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
    pod["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}


def _qos_class(spec: JSON) -> str:
    """kube's QoS class, which looks at cpu and memory only (requests default to limits)."""
    any_set = False
    guaranteed = True
    for c in spec.get("containers") or []:
        res = (c.get("resources") or {}) if isinstance(c, dict) else {}
        lim = {k: v for k, v in (res.get("limits") or {}).items() if k in ("cpu", "memory")}
        req = {k: v for k, v in (res.get("requests") or {}).items() if k in ("cpu", "memory")}
        any_set = any_set or bool(lim) or bool(req)
        if set(lim) != {"cpu", "memory"} or any(req.get(k, lim[k]) != lim[k] for k in lim):
            guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def fold_string_data(secret: JSON) -> None:
    string_data = secret.pop("stringData", None) or {}
    if string_data:
        data = secret.setdefault("data", {})
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()


def _default_service(svc: JSON) -> None:
    spec = svc.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
    svc.setdefault("status", {"loadBalancer": {}})


def _default_crd(crd: JSON) -> None:
    spec = crd.setdefault("spec", {})
    names = spec.setdefault("names", {})
    if names.get("kind"):
        names.setdefault("singular", str(names["kind"]).lower())
        names.setdefault("listKind", f"{names['kind']}List")
    spec.setdefault("scope", "Namespaced")
    conversion = spec.setdefault("conversion", {})
    conversion.setdefault("strategy", "None")
    fins = crd["metadata"].setdefault("finalizers", [])
    if CRD_CLEANUP not in fins:
        fins.append(CRD_CLEANUP)


CRD_CLEANUP = "customresourcecleanup.apiextensions.k8s.io"

# apiextensions/v1 fields tagged ``omitempty`` that are not pointers: kube-apiserver decodes a
# CRD into Go structs, so a zero value there (``x-kubernetes-embedded-resource: false``,
# ``description: ""``, ``required: []``) is not stored, and a re-apply of the file then
# finds the stored object different ("configured").
_SCHEMA_OMIT_FALSE = (
    "exclusiveMaximum",
    "exclusiveMinimum",
    "uniqueItems",
    "nullable",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
)
_SCHEMA_OMIT_EMPTY = (
    "id",
    "$schema",
    "$ref",
    "description",
    "type",
    "format",
    "title",
    "pattern",
    "required",
    "enum",
    "allOf",
    "oneOf",
    "anyOf",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
    "properties",
    "patternProperties",
    "definitions",
    "dependencies",
)


def _omit_empty_schema(schema: Any) -> None:
    if not isinstance(schema, dict):
        return
    for key in _SCHEMA_OMIT_FALSE:
        if schema.get(key) is False:
            del schema[key]
    for key in _SCHEMA_OMIT_EMPTY:
        if key in schema and schema[key] in ("", [], {}):
            del schema[key]
    for key in ("properties", "patternProperties", "definitions", "dependencies"):
        for sub in (schema.get(key) or {}).values() if isinstance(schema.get(key), dict) else ():
            _omit_empty_schema(sub)
    for key in ("additionalProperties", "not", "items"):
        sub = schema.get(key)
        for s in sub if isinstance(sub, list) else [sub]:
            _omit_empty_schema(s)
    for key in ("allOf", "oneOf", "anyOf"):
        for sub in schema.get(key) or []:
            _omit_empty_schema(sub)


def omit_empty_crd_fields(crd: JSON) -> None:
    """Drop what kube-apiserver's Go types would not keep from a CRD (see above)."""
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return
    names = spec.get("names")
    if isinstance(names, dict):
        for key in ("shortNames", "categories", "singular", "listKind"):
            if key in names and names[key] in ("", []):
                del names[key]
    for version in spec.get("versions") or []:
        if not isinstance(version, dict):
            continue
        if version.get("deprecated") is False:
            del version["deprecated"]
        for column in version.get("additionalPrinterColumns") or []:
            if isinstance(column, dict):
                for key in ("description", "format"):
                    if column.get(key) == "":
                        del column[key]
                if column.get("priority") == 0:
                    del column["priority"]
        schema = version.get("schema")
        if isinstance(schema, dict):
            _omit_empty_schema(schema.get("openAPIV3Schema"))


def crd_status(crd: JSON, now: str) -> JSON:
    names = copy.deepcopy(crd["spec"]["names"])
    storage = [v["name"] for v in crd["spec"]["versions"] if v.get("storage")]
    old = crd.get("status") or {}
    stored = list(dict.fromkeys([*(old.get("storedVersions") or []), *storage]))
    conditions = [
        {
            "type": "NamesAccepted",
            "status": "True",
            "reason": "NoConflicts",
            "message": "no conflicts found",
            "lastTransitionTime": now,
        },
        {
            "type": "Established",
            "status": "True",
            "reason": "InitialNamesAccepted",
            "message": "the initial names have been accepted",
            "lastTransitionTime": now,
        },
    ]
    if crd["metadata"].get("deletionTimestamp"):
        conditions.append(
            {
                "type": "Terminating",
                "status": "True",
                "reason": "InstanceDeletionInProgress",
                "message": "CustomResource deletion is in progress",
                "lastTransitionTime": now,
            }
        )
    return {"conditions": conditions, "acceptedNames": names, "storedVersions": stored}


# -- validation --------------------------------------------------------------------------


def validate_object(rt: ResourceType, obj: JSON, old: JSON | None) -> list[FieldError]:
    """Type-specific validation of a whole object (metadata validated separately)."""
    if rt.key == ("", "pods"):
        return _validate_pod(obj, old)
    if rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        return validate_crd(obj, old)
    if rt.key == ("admissionregistration.k8s.io", "validatingwebhookconfigurations"):
        return _validate_webhooks(obj)
    if rt.key == ("", "events"):
        errs = []
        if not (obj.get("involvedObject") or {}).get("name") and not obj.get("regarding"):
            errs.append(FieldError.required("involvedObject.name"))
        return errs
    return []


def _validate_pod(pod: JSON, old: JSON | None) -> list[FieldError]:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [FieldError.required("spec")]
    errs: list[FieldError] = []
    containers = spec.get("containers")
    if not containers:
        errs.append(FieldError.required("spec.containers"))
    names: set[str] = set()
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(kind) or []):
            path = f"spec.{kind}[{i}]"
            if not isinstance(c, dict):
                errs.append(FieldError.type_invalid(path, c, "must be an object"))
                continue
            name = c.get("name")
            if not name:
                errs.append(FieldError.required(f"{path}.name"))
            elif not isinstance(name, str) or not _full(_DNS1123_LABEL, name):
                errs.append(FieldError.invalid(f"{path}.name", name, LABEL_MSG))
            elif name in names:
                errs.append(FieldError("FieldValueDuplicate", f"{path}.name", "", name))
            else:
                names.add(name)
            if not c.get("image") and old is None:
                errs.append(FieldError.required(f"{path}.image"))
    if old is not None:
        errs += _pod_update_forbidden(pod, old)
    return errs


_POD_MUTABLE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)"
)


def _pod_update_forbidden(pod: JSON, old: JSON) -> list[FieldError]:
    """kube-apiserver lets an update change only images, activeDeadlineSeconds, added
    tolerations and removed scheduling gates; nodeName only through the binding."""
    new_spec, old_spec = copy.deepcopy(pod.get("spec") or {}), copy.deepcopy(old.get("spec") or {})
    for spec in (new_spec, old_spec):
        spec.pop("activeDeadlineSeconds", None)
        spec.pop("schedulingGates", None)
        for kind in ("initContainers", "containers"):
            for c in spec.get(kind) or []:
                if isinstance(c, dict):
                    c.pop("image", None)
    old_tol = old_spec.pop("tolerations", None) or []
    new_tol = new_spec.pop("tolerations", None) or []
    if any(t not in new_tol for t in old_tol):
        return [
            FieldError.forbidden(
                "spec.tolerations",
                "existing toleration can not be modified except its tolerationSeconds",
            )
        ]
    gates_old = (old.get("spec") or {}).get("schedulingGates") or []
    gates_new = (pod.get("spec") or {}).get("schedulingGates") or []
    if any(g not in gates_old for g in gates_new):
        return [
            FieldError.forbidden(
                "spec.schedulingGates", "only deletion is allowed, but found new scheduling gate"
            )
        ]
    if new_spec != old_spec:
        return [FieldError.forbidden("spec", _POD_MUTABLE)]
    return []


def _validate_webhooks(cfg: JSON) -> list[FieldError]:
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, hook in enumerate(cfg.get("webhooks") or []):
        path = f"webhooks[{i}]"
        name = hook.get("name", "")
        if not name:
            errs.append(FieldError.required(f"{path}.name"))
        elif name in seen:
            errs.append(FieldError("FieldValueDuplicate", f"{path}.name", "", name))
        seen.add(name)
        client = hook.get("clientConfig") or {}
        if bool(client.get("url")) == bool(client.get("service")):
            errs.append(
                FieldError.required(
                    f"{path}.clientConfig", "exactly one of url or service is required"
                )
            )
        if not hook.get("sideEffects"):
            errs.append(
                FieldError.required(f"{path}.sideEffects", "must specify one of None, NoneOnDryRun")
            )
        elif hook["sideEffects"] not in ("None", "NoneOnDryRun"):
            errs.append(
                FieldError.not_supported(
                    f"{path}.sideEffects", hook["sideEffects"], ["None", "NoneOnDryRun"]
                )
            )
        if not hook.get("admissionReviewVersions"):
            errs.append(
                FieldError.required(
                    f"{path}.admissionReviewVersions", "must specify one of v1, v1beta1"
                )
            )
        policy = hook.get("failurePolicy", "Fail")
        if policy not in ("Fail", "Ignore"):
            errs.append(
                FieldError.not_supported(f"{path}.failurePolicy", policy, ["Fail", "Ignore"])
            )
        timeout = hook.get("timeoutSeconds", 10)
        if not isinstance(timeout, int) or not 1 <= timeout <= 30:
            errs.append(
                FieldError.invalid(
                    f"{path}.timeoutSeconds",
                    timeout,
                    "the timeout value must be between 1 and 30 seconds",
                )
            )
    return errs


def default_webhooks(cfg: JSON) -> None:
    for hook in cfg.get("webhooks") or []:
        hook.setdefault("failurePolicy", "Fail")
        hook.setdefault("matchPolicy", "Equivalent")
        hook.setdefault("timeoutSeconds", 10)
        hook.setdefault("namespaceSelector", {})
        hook.setdefault("objectSelector", {})
        for rule in hook.get("rules") or []:
            rule.setdefault("scope", "*")


def validate_crd(crd: JSON, old: JSON | None) -> list[FieldError]:
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [FieldError.required("spec")]
    errs: list[FieldError] = []
    group = spec.get("group") or ""
    names = spec.get("names") or {}
    plural = names.get("plural") or ""
    if not group:
        errs.append(FieldError.required("spec.group"))
    elif "." not in group:
        errs.append(
            FieldError.invalid("spec.group", group, "should be a domain with at least one dot")
        )
    if not plural:
        errs.append(FieldError.required("spec.names.plural"))
    if not names.get("kind"):
        errs.append(FieldError.required("spec.names.kind"))
    name = crd["metadata"].get("name", "")
    if plural and group and name != f"{plural}.{group}":
        errs.append(
            FieldError.invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group')
        )
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        errs.append(FieldError.not_supported("spec.scope", scope, ["Cluster", "Namespaced"]))
    versions = spec.get("versions") or []
    if not versions:
        errs.append(
            FieldError.required(
                "spec.versions", "must have exactly one version marked as storage version"
            )
        )
    storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
    if versions and len(storage) != 1:
        errs.append(
            FieldError.invalid(
                "spec.versions",
                versions and [v.get("name") for v in versions],
                "must have exactly one version marked as storage version",
            )
        )
    for i, v in enumerate(versions):
        path = f"spec.versions[{i}]"
        if not isinstance(v, dict) or not v.get("name"):
            errs.append(FieldError.required(f"{path}.name"))
            continue
        if "served" not in v:
            errs.append(FieldError.required(f"{path}.served"))
        if "storage" not in v:
            errs.append(FieldError.required(f"{path}.storage"))
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            errs.append(
                FieldError.required(f"{path}.schema.openAPIV3Schema", "schemas are required")
            )
        else:
            errs += validate_crd_schema(schema, prefix=f"{path}.schema.openAPIV3Schema")
        for j, col in enumerate(v.get("additionalPrinterColumns") or []):
            cpath = f"{path}.additionalPrinterColumns[{j}]"
            if not col.get("name"):
                errs.append(FieldError.required(f"{cpath}.name"))
            if not col.get("jsonPath"):
                errs.append(FieldError.required(f"{cpath}.jsonPath"))
            if col.get("type") not in ("integer", "number", "string", "boolean", "date"):
                errs.append(
                    FieldError.not_supported(
                        f"{cpath}.type",
                        col.get("type"),
                        ["boolean", "date", "integer", "number", "string"],
                    )
                )
    if old is not None:
        old_spec = old.get("spec") or {}
        if old_spec.get("group") != group:
            errs.append(FieldError.invalid("spec.group", group, "field is immutable"))
        if (old_spec.get("names") or {}).get("plural") != plural:
            errs.append(FieldError.invalid("spec.names.plural", plural, "field is immutable"))
        if old_spec.get("scope") != scope:
            errs.append(FieldError.invalid("spec.scope", scope, "field is immutable"))
    return errs


def has_spec_change(old: JSON, new: JSON) -> bool:
    """Generation moves on any change outside metadata and status."""
    strip = ("metadata", "status")
    return {k: v for k, v in old.items() if k not in strip} != {
        k: v for k, v in new.items() if k not in strip
    }

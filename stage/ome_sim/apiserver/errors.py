"""API errors as kube-apiserver words them: ``Status`` bodies with reason, code and details.

Every message text a client can read is built here, so the wording matches
``k8s.io/apimachinery/pkg/api/errors`` and ``pkg/util/validation/field`` in one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class FieldError:
    """One ``field.Error``: ``type`` is the cause type, e.g. ``FieldValueRequired``."""

    type: str
    field: str
    detail: str = ""
    value: Any = None
    supported: tuple[str, ...] = ()

    def body(self) -> str:
        """``field.Error.ErrorBody()``: the text after ``<field>: ``."""
        if self.type == "FieldValueRequired":
            text = "Required value"
        elif self.type == "FieldValueForbidden":
            text = "Forbidden"
        elif self.type == "FieldValueDuplicate":
            text = f"Duplicate value: {_render_value(self.value)}"
        elif self.type == "FieldValueNotSupported":
            text = f"Unsupported value: {_render_value(self.value)}"
            if self.supported:
                quoted = ", ".join(json.dumps(s) for s in self.supported)
                text += f": supported values: {quoted}"
            return text
        elif self.type == "FieldValueTooLong":
            text = "Too long"
        elif self.type == "FieldValueTooMany":
            text = "Too many"
        else:  # FieldValueInvalid, FieldValueTypeInvalid
            text = f"Invalid value: {_render_value(self.value)}"
        if self.detail:
            text += f": {self.detail}"
        return text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    @staticmethod
    def required(path: str, detail: str = "") -> FieldError:
        return FieldError("FieldValueRequired", path, detail)

    @staticmethod
    def invalid(path: str, value: Any, detail: str) -> FieldError:
        return FieldError("FieldValueInvalid", path, detail, value)

    @staticmethod
    def forbidden(path: str, detail: str) -> FieldError:
        return FieldError("FieldValueForbidden", path, detail)

    @staticmethod
    def type_invalid(path: str, value: Any, detail: str) -> FieldError:
        return FieldError("FieldValueTypeInvalid", path, detail, value)

    @staticmethod
    def not_supported(path: str, value: Any, supported: list[str]) -> FieldError:
        return FieldError("FieldValueNotSupported", path, "", value, tuple(supported))


def _render_value(value: Any) -> str:
    """Go's ``%#v``-like rendering used by field errors: strings quoted, numbers bare."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@dataclass
class APIError(Exception):
    """An error response. ``status()`` is the wire body; ``headers`` go on the response."""

    code: int
    reason: str
    message: str
    details: JSON | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Sent as a text/plain body instead of a Status (kube's ``404 page not found``).
    plain: str | None = None

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def status(self) -> JSON:
        body: JSON = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def qualified(resource: str, group: str) -> str:
    """``pods`` or ``inferencereplicas.ome.io``: how errors name a resource."""
    return f"{resource}.{group}" if group else resource


def _details(name: str, group: str, kind: str) -> JSON:
    details: JSON = {"name": name, "kind": kind}
    if group:
        details["group"] = group
    return details


def not_found(resource: str, group: str, name: str) -> APIError:
    return APIError(
        404,
        "NotFound",
        f'{qualified(resource, group)} "{name}" not found',
        _details(name, group, resource),
    )


def unknown_path() -> APIError:
    return APIError(404, "NotFound", "the server could not find the requested resource", {})


#: API groups kube-apiserver itself serves (v1.37): a path under one of them that names
#: nothing gets a ``Status``; any other group's paths fall through kube-apiserver's handler
#: chain to the plain-text ``404 page not found``.
BUILTIN_GROUPS = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "apps",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "internal.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
        "storagemigration.k8s.io",
    }
)


def page_not_found() -> APIError:
    """What kube-apiserver answers for a path no API handles: text, not a Status."""
    return APIError(404, "NotFound", "404 page not found", None, plain="404 page not found\n")


def not_served(group: str) -> APIError:
    """A path under ``group`` that names no served group, version or resource."""
    return unknown_path() if group in BUILTIN_GROUPS else page_not_found()


def already_exists(resource: str, group: str, name: str) -> APIError:
    return APIError(
        409,
        "AlreadyExists",
        f'{qualified(resource, group)} "{name}" already exists',
        _details(name, group, resource),
    )


def conflict(resource: str, group: str, name: str, why: str) -> APIError:
    return APIError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}',
        _details(name, group, resource),
    )


def precondition_failed(kind: str, name: str, why: str) -> APIError:
    """A delete whose preconditions do not hold: kube-apiserver's storage layer names the
    object by its kind (``on ConfigMap "x"``), not by resource."""
    return APIError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {kind} "{name}": {why}',
        {"name": name, "kind": kind},
    )


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> APIError:
    listed = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
    qualified_kind = f"{kind}.{group}" if group else kind
    details = _details(name, group, kind)
    details["causes"] = [{"reason": e.type, "message": e.body(), "field": e.field} for e in errors]
    return APIError(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {listed}', details)


def bad_request(message: str) -> APIError:
    return APIError(400, "BadRequest", message)


def forbidden(resource: str, group: str, name: str, why: str) -> APIError:
    return APIError(
        403,
        "Forbidden",
        f'{qualified(resource, group)} "{name}" is forbidden: {why}',
        _details(name, group, resource),
    )


def namespace_terminating(resource: str, group: str, name: str, namespace: str) -> APIError:
    """A create in a namespace being deleted, as kube-apiserver refuses it: 403 with the
    ``NamespaceTerminating`` cause that clients (client-go's ``HasStatusCause``) test."""
    error = forbidden(
        resource,
        group,
        name,
        f"unable to create new content in namespace {namespace} because it is being terminated",
    )
    error.details = {
        **(error.details or {}),
        "causes": [
            {
                "reason": "NamespaceTerminating",
                "message": f"namespace {namespace} is being terminated",
                "field": "metadata.namespace",
            }
        ],
    }
    return error


def method_not_allowed(message: str) -> APIError:
    return APIError(405, "MethodNotAllowed", message, {})


def unsupported_media_type(content_type: str) -> APIError:
    return APIError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, "
        f"application/strategic-merge-patch+json ({content_type!r} given)",
        {},
    )


def not_acceptable(accept: str) -> APIError:
    return APIError(
        406,
        "NotAcceptable",
        f"only the following media types are accepted: application/json ({accept!r} given)",
        {},
    )


def expired(message: str) -> APIError:
    return APIError(410, "Expired", message)


def gone(message: str) -> APIError:
    return APIError(410, "Gone", message)


def too_many_requests(retry_after: int) -> APIError:
    return APIError(
        429,
        "TooManyRequests",
        "the server has received too many requests and has asked us to try again later",
        {"retryAfterSeconds": retry_after},
        {"Retry-After": str(retry_after)},
    )


def internal(message: str) -> APIError:
    return APIError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        {"causes": [{"message": message}]},
    )


def service_unavailable(
    message: str = "the server is currently unable to handle the request",
) -> APIError:
    return APIError(503, "ServiceUnavailable", message, {})


def timeout(message: str, retry_after: int = 1) -> APIError:
    return APIError(
        504,
        "Timeout",
        message,
        {"retryAfterSeconds": retry_after},
        {"Retry-After": str(retry_after)},
    )

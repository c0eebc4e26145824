"""Validating admission webhooks as kube-apiserver calls them: matching, the AdmissionReview call,
and the wording of denials and call failures. Never mutates objects nor touches the store.
Gaps: ``matchConditions`` (CEL) are not evaluated (such webhooks count as matching);
``matchPolicy: Equivalent`` matches only the request's own version (no conversion).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import errno
import json
import ssl
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from .errors import JSON, APIError, bad_request, internal, not_found
from .selectors import label_selector_from_dict

USER_INFO: JSON = {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]}
DEFAULT_TIMEOUT_SECONDS = 10
USER_AGENT = "kube-apiserver-admission"
_DRY_RUN_SAFE = ("None", "NoneOnDryRun")


@dataclass(frozen=True)
class AdmissionAttributes:
    """What one write is, as admission sees it (``admission.Attributes``)."""

    operation: str  # CREATE | UPDATE | DELETE | CONNECT
    group: str  # of the object; "" for core
    version: str
    kind: str
    resource: str  # plural, e.g. "pods"
    subresource: str  # "" or e.g. "status"
    name: str
    namespace: str  # "" for cluster-scoped
    namespaced: bool
    object: JSON | None  # the new object (None for DELETE)
    old_object: JSON | None  # the stored object for UPDATE/DELETE
    dry_run: bool
    options: JSON | None  # CreateOptions/UpdateOptions/DeleteOptions as sent
    user_agent: str = ""

    @property
    def is_namespace(self) -> bool:
        """Whether the object is a Namespace itself (cluster-scoped, yet selected by labels)."""
        return self.group == "" and self.resource == "namespaces"


class CallingWebhookError(Exception):
    """``ErrCallingWebhook``: the webhook could not be asked; the failure policy decides."""

    def __init__(self, webhook: str, reason: str) -> None:
        super().__init__(f"failed calling webhook {json.dumps(webhook)}: {reason}")


def warning_header(texts: list[str]) -> str:
    """One ``Warning`` header value carrying ``texts`` as ``299 - "<text>"`` entries."""
    quoted = ('"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"' for t in texts)
    return ", ".join(f"299 - {q}" for q in quoted)


# --- matching ----------------------------------------------------------------------------------


def _split_resource(entry: str) -> tuple[str, str]:
    res, _, sub = entry.partition("/")
    return res, sub


def rule_matches(rule: JSON, attrs: AdmissionAttributes) -> bool:
    """One ``RuleWithOperations`` against the request (``rules.Matcher.Matches``)."""
    operations = rule.get("operations") or []
    if "*" not in operations and attrs.operation not in operations:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and attrs.group not in groups:
        return False
    versions = rule.get("apiVersions") or []
    if "*" not in versions and attrs.version not in versions:
        return False
    scope = rule.get("scope") or "*"
    if scope == "Namespaced" and (attrs.is_namespace or not attrs.namespaced):
        return False
    if scope == "Cluster" and attrs.namespaced and not attrs.is_namespace:
        return False
    for entry in rule.get("resources") or []:
        res, sub = _split_resource(entry)
        if res in ("*", attrs.resource) and sub in ("*", attrs.subresource):
            return True
    return False


def _selector_is_empty(selector: JSON | None) -> bool:
    return not selector or not (selector.get("matchLabels") or selector.get("matchExpressions"))


def _labels(obj: JSON | None) -> dict[str, str]:
    if not obj:
        return {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return dict(labels)


def _selector_matches(selector: JSON, labels: Mapping[str, str]) -> bool:
    try:
        parsed = label_selector_from_dict(selector)
    except APIError as exc:  # a stored selector kube would not have admitted
        raise internal(exc.message) from exc
    return parsed.matches(labels)


def namespace_selector_matches(
    webhook: JSON, attrs: AdmissionAttributes, namespace_labels: Mapping[str, str] | None
) -> bool:
    """``namespaceSelector``: never exempts cluster-scoped objects other than Namespaces."""
    if not attrs.namespaced and not attrs.is_namespace:
        return True
    selector = webhook.get("namespaceSelector")
    if _selector_is_empty(selector):
        return True
    assert selector is not None
    if (
        attrs.is_namespace
        and not attrs.subresource
        and attrs.operation in ("CREATE", "UPDATE")
        and attrs.object is not None
    ):
        # The stored namespace is not yet what this request makes it: select on the new labels.
        return _selector_matches(selector, _labels(attrs.object))
    if namespace_labels is None:
        raise not_found("namespaces", "", attrs.namespace or attrs.name)
    return _selector_matches(selector, namespace_labels)


def object_selector_matches(webhook: JSON, attrs: AdmissionAttributes) -> bool:
    """``objectSelector``: matches when the new or the old object's labels match."""
    selector = webhook.get("objectSelector")
    if _selector_is_empty(selector):
        return True
    assert selector is not None
    return any(
        obj is not None and _selector_matches(selector, _labels(obj))
        for obj in (attrs.object, attrs.old_object)
    )


def webhook_matches(
    webhook: JSON, attrs: AdmissionAttributes, namespace_labels: Mapping[str, str] | None
) -> bool:
    """Whether kube-apiserver would call ``webhook`` for this request.

    ``matchConditions`` are CEL and cannot be evaluated here: they count as matching.
    """
    if not any(rule_matches(rule, attrs) for rule in webhook.get("rules") or []):
        return False
    return namespace_selector_matches(webhook, attrs, namespace_labels) and (
        object_selector_matches(webhook, attrs)
    )


def matching_webhooks(
    configurations: list[JSON],
    attrs: AdmissionAttributes,
    namespace_labels: Mapping[str, str] | None,
) -> list[JSON]:
    """The webhooks to call, by configuration name and then by their order in it."""
    ordered = sorted(configurations, key=lambda c: str((c.get("metadata") or {}).get("name", "")))
    return [
        webhook
        for configuration in ordered
        for webhook in configuration.get("webhooks") or []
        if webhook_matches(webhook, attrs, namespace_labels)
    ]


# --- the review --------------------------------------------------------------------------------


def admission_review(
    attrs: AdmissionAttributes, uid: str, api_version: str = "admission.k8s.io/v1"
) -> JSON:
    """The ``AdmissionReview`` request body for ``attrs``."""
    kind = {"group": attrs.group, "version": attrs.version, "kind": attrs.kind}
    resource = {"group": attrs.group, "version": attrs.version, "resource": attrs.resource}
    namespace = attrs.namespace
    if attrs.is_namespace and not namespace and attrs.operation != "CREATE":
        # kube-apiserver takes the namespace from the request path: /namespaces/<name>.
        namespace = attrs.name
    request: JSON = {"uid": uid, "kind": kind, "resource": resource}
    if attrs.subresource:
        request["subResource"] = attrs.subresource
    request["requestKind"] = dict(kind)
    request["requestResource"] = dict(resource)
    if attrs.subresource:
        request["requestSubResource"] = attrs.subresource
    if attrs.name:
        request["name"] = attrs.name
    if namespace:
        request["namespace"] = namespace
    request.update(
        {
            "operation": attrs.operation,
            "userInfo": json.loads(json.dumps(USER_INFO)),
            "object": attrs.object,
            "oldObject": attrs.old_object,
            "dryRun": attrs.dry_run,
            "options": attrs.options,
        }
    )
    return {"kind": "AdmissionReview", "apiVersion": api_version, "request": request}


def denial(webhook_name: str, result: JSON | None) -> APIError:
    """``webhookerrors.ToStatusErr``: the error a denying response becomes."""
    result = result or {}
    code = result.get("code")
    if not isinstance(code, int) or isinstance(code, bool) or code < 400:
        code = 403
    message = str(result.get("message") or "")
    reason = str(result.get("reason") or "")
    denied_by = f"admission webhook {json.dumps(webhook_name)} denied the request"
    if message:
        text = f"{denied_by}: {message}"
    elif reason:
        text = f"{denied_by}: {reason}"
    else:
        text = f"{denied_by} without explanation"
    details = result.get("details")
    return APIError(code, reason, text, details if isinstance(details, dict) else None)


@dataclass(frozen=True)
class _Endpoint:
    url: str  # what is dialled
    shown: str  # what errors name, as kube-apiserver would
    server_hostname: str | None
    host_header: str | None


def _endpoint(client_config: JSON, timeout: int) -> _Endpoint:
    query = f"?timeout={timeout}s"
    service = client_config.get("service")
    if service:
        host = f"{service.get('name', '')}.{service.get('namespace', '')}.svc"
        port = int(service.get("port") or 443)
        path = str(service.get("path") or "/")
        return _Endpoint(
            url=f"https://127.0.0.1:{port}{path}{query}",
            shown=f"https://{host}:{port}{path}{query}",
            server_hostname=host,
            host_header=f"{host}:{port}",
        )
    url = str(client_config.get("url") or "")
    return _Endpoint(url=url + query, shown=url + query, server_hostname=None, host_header=None)


def _describe_transport_error(exc: BaseException, endpoint: _Endpoint) -> str:
    """Go's wording (``net``/``crypto/tls``) for a failed POST."""
    if isinstance(exc, TimeoutError):
        return "context deadline exceeded"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        cert_error = exc.certificate_error
        code = getattr(cert_error, "verify_code", None)
        if code in (18, 19, 20, 21):
            why = "x509: certificate signed by unknown authority"
        elif code == 62:
            host = endpoint.server_hostname or exc.host
            why = f"x509: certificate is not valid for {host}"
        elif code in (9, 10):
            why = "x509: certificate has expired or is not yet valid"
        else:
            why = str(getattr(cert_error, "verify_message", "") or cert_error)
        return f"tls: failed to verify certificate: {why}"
    if isinstance(exc, aiohttp.ClientConnectorSSLError):
        return f"remote error: tls: {getattr(exc.os_error, 'reason', None) or exc.os_error}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        if exc.os_error.errno == errno.ECONNREFUSED:
            return f"dial tcp {exc.host}:{exc.port}: connect: connection refused"
        return f"dial tcp {exc.host}:{exc.port}: {exc.os_error.strerror or exc.os_error}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "EOF"
    return str(exc) or type(exc).__name__


_GENERIC_MESSAGES = {
    400: "the server rejected our request for an unknown reason",
    401: "the server has asked for the client to provide credentials",
    403: "the server does not allow access to the requested resource",
    404: "the server could not find the requested resource",
    405: "the server does not allow this method on the requested resource",
    422: "the server rejected our request due to an error in our request",
    429: "the server has received too many requests and has asked us to try again later",
    503: "the server is currently unable to handle the request",
    504: (
        "the server was unable to return a response in the time allotted, "
        "but may still be processing the request"
    ),
}


def _describe_status(status: int, body: bytes, content_type: str) -> str:
    """client-go's error for a non-2xx answer: a ``Status`` body's message, else a stock text."""
    try:
        decoded = json.loads(body)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and decoded.get("kind") == "Status" and decoded.get("message"):
        return str(decoded["message"])
    if status in _GENERIC_MESSAGES:
        return _GENERIC_MESSAGES[status]
    if status >= 500:
        text = body.decode(errors="replace").strip() if content_type == "text/plain" else ""
        return (
            f"an error on the server ({json.dumps(text)}) has prevented the request from succeeding"
        )
    return f"the server responded with the status code {status} but did not return more information"


def _verify_response(body: bytes, uid: str, api_version: str) -> JSON:
    """``VerifyAdmissionResponse``; returns ``response``. Raises ``ValueError`` with Go's words."""
    try:
        review = json.loads(body)
    except ValueError as exc:
        raise _DecodeError(f"couldn't get version/kind; json parse error: {exc}") from exc
    if not isinstance(review, dict):
        raise _DecodeError("couldn't get version/kind; json parse error: not an object")
    if not review.get("kind"):
        raise _DecodeError(f"Object 'Kind' is missing in '{body.decode(errors='replace')}'")
    response = review.get("response")
    if not isinstance(response, dict):
        raise ValueError("webhook response was absent")
    if api_version == "admission.k8s.io/v1":
        got_uid = str(response.get("uid") or "")
        if got_uid != uid:
            raise ValueError(f"expected response.uid={json.dumps(uid)}, got {json.dumps(got_uid)}")
        got = (str(review.get("apiVersion") or ""), str(review.get("kind") or ""))
        if got != ("admission.k8s.io/v1", "AdmissionReview"):
            raise ValueError(
                "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, "
                f"got {got[0]}, Kind={got[1]}"
            )
        if response.get("patch"):
            raise ValueError("validating webhook may not return response.patch")
        if response.get("patchType") is not None:
            raise ValueError("validating webhook may not return response.patchType")
    return response


class _DecodeError(ValueError):
    """The body is no Kubernetes object at all: client-go fails before verification."""


class WebhookDispatcher:
    """Calls validating webhooks for writes. Owns one lazily created ``aiohttp.ClientSession``."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._ssl_contexts: dict[str, ssl.SSLContext] = {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers={"User-Agent": USER_AGENT},
                connector=aiohttp.TCPConnector(limit=0),
            )
        return self._session

    def _ssl_context(self, ca_bundle: str | None) -> ssl.SSLContext:
        key = ca_bundle or ""
        context = self._ssl_contexts.get(key)
        if context is None:
            if ca_bundle:
                try:
                    pem = base64.b64decode(ca_bundle, validate=True).decode("ascii")
                    context = ssl.create_default_context(cadata=pem)
                except (binascii.Error, UnicodeDecodeError, ssl.SSLError, ValueError) as exc:
                    raise ValueError(
                        "unable to load root certificates: unable to parse bytes as PEM block"
                    ) from exc
            else:
                context = ssl.create_default_context()
            self._ssl_contexts[key] = context
        return context

    async def validate(
        self,
        configurations: list[JSON],
        attrs: AdmissionAttributes,
        namespace_labels: Mapping[str, str] | None,
    ) -> list[str]:
        """Call every matching webhook; return their warnings or raise the first rejection.

        All matching webhooks are called concurrently, as kube-apiserver does; the error raised
        is the first in webhook order, and it carries the warnings gathered in its headers.
        """
        webhooks = matching_webhooks(configurations, attrs, namespace_labels)
        if not webhooks:
            return []
        outcomes = await asyncio.gather(*(self._call(w, attrs) for w in webhooks))
        warnings = [text for texts, _ in outcomes for text in texts]
        for _, error in outcomes:
            if error is not None:
                if warnings:
                    error.headers["Warning"] = warning_header(warnings)
                raise error
        return warnings

    async def _call(
        self, webhook: JSON, attrs: AdmissionAttributes
    ) -> tuple[list[str], APIError | None]:
        """One webhook: its warnings, and the error it turns the request into (if any)."""
        name = str(webhook.get("name", ""))
        ignore_failures = webhook.get("failurePolicy") == "Ignore"
        try:
            return await self._review(webhook, name, attrs)
        except CallingWebhookError as failure:
            if ignore_failures:
                return [], None
            return [], internal(str(failure))
        except APIError as error:
            return [], error

    async def _review(
        self, webhook: JSON, name: str, attrs: AdmissionAttributes
    ) -> tuple[list[str], APIError | None]:
        if attrs.dry_run:
            side_effects = webhook.get("sideEffects")
            if side_effects is None:
                raise CallingWebhookError(name, "Webhook SideEffects is nil")
            if side_effects not in _DRY_RUN_SAFE:
                raise bad_request(f"admission webhook {json.dumps(name)} does not support dry run")
        versions = webhook.get("admissionReviewVersions") or ["v1"]
        if "v1" in versions:
            api_version = "admission.k8s.io/v1"
        elif "v1beta1" in versions:
            api_version = "admission.k8s.io/v1beta1"
        else:
            raise CallingWebhookError(
                name,
                "could not create admission objects: webhook does not accept known "
                "AdmissionReview versions (v1, v1beta1)",
            )
        client_config = webhook.get("clientConfig") or {}
        try:
            context = self._ssl_context(client_config.get("caBundle"))
        except ValueError as exc:
            raise CallingWebhookError(name, f"could not get REST client: {exc}") from exc
        timeout = int(webhook.get("timeoutSeconds") or DEFAULT_TIMEOUT_SECONDS)
        endpoint = _endpoint(client_config, timeout)
        uid = str(uuid.uuid4())
        body = admission_review(attrs, uid, api_version)
        status, payload, content_type = await self._post(name, endpoint, context, body, timeout)
        if not 200 <= status <= 206:
            raise CallingWebhookError(
                name, f"failed to call webhook: {_describe_status(status, payload, content_type)}"
            )
        try:
            response = _verify_response(payload, uid, api_version)
        except _DecodeError as exc:
            raise CallingWebhookError(name, f"failed to call webhook: {exc}") from exc
        except ValueError as exc:
            raise CallingWebhookError(name, f"received invalid webhook response: {exc}") from exc
        texts = response.get("warnings")
        warnings = [str(w) for w in texts] if isinstance(texts, list) else []
        if response.get("allowed") is True:
            return warnings, None
        result = response.get("status")
        return warnings, denial(name, result if isinstance(result, dict) else None)

    async def _post(
        self,
        name: str,
        endpoint: _Endpoint,
        context: ssl.SSLContext,
        body: JSON,
        timeout: int,
    ) -> tuple[int, bytes, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, */*"}
        if endpoint.host_header:
            headers["Host"] = endpoint.host_header
        kwargs: dict[str, Any] = {"headers": headers, "data": json.dumps(body).encode()}
        if endpoint.url.startswith("https:"):
            kwargs["ssl"] = context
            if endpoint.server_hostname:
                kwargs["server_hostname"] = endpoint.server_hostname
        try:
            async with asyncio.timeout(timeout):
                async with self._client().post(endpoint.url, **kwargs) as resp:
                    return resp.status, await resp.read(), resp.content_type
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
            cause = _describe_transport_error(exc, endpoint)
            raise CallingWebhookError(
                name, f"failed to call webhook: Post {json.dumps(endpoint.shown)}: {cause}"
            ) from exc

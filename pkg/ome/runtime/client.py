"""The API client controllers write through: every call a child span, transient failures
retried with tenacity, deletes preconditioned, live reads named as such.

Retried: 429 (after its ``Retry-After``), 500, 502, 503, 504 and connection errors. Never
retried: any other 4xx, 409 Conflict included: the caller re-reads and decides. It knows
nothing of TPUs and keeps no cache: caches are the informers'.
"""

from __future__ import annotations

import builtins
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes.client.exceptions import ApiException
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
)
from urllib3.exceptions import HTTPError

from ome.kube import JSON, Resource

from .rest import MERGE_PATCH, Rest, status_of

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
tracer = trace.get_tracer("ome.runtime.client")


def retryable(error: BaseException) -> bool:
    """Transient: worth the same request again. 4xx answers other than 429 are not."""
    if isinstance(error, ApiException):
        return error.status in RETRYABLE_STATUS
    return isinstance(error, HTTPError | ConnectionError | TimeoutError)


def api_error(error: BaseException) -> bool:
    """Whether ``error`` came from talking to the API server: an answer other than 2xx, or
    the transport failing. Routine: reported in one line, never with a traceback."""
    return isinstance(error, ApiException | HTTPError | OSError)


def describe_error(error: BaseException) -> str:
    """One line naming an API error as the server gave it (``500 InternalError: <message>``),
    or the transport failure (``ProtocolError: Connection aborted``)."""
    if isinstance(error, ApiException):
        status = status_of(error)
        reason = status.get("reason") or error.reason or ""
        message = status.get("message") or ""
        text = f"{error.status} {reason}".strip()
        return f"{text}: {message}" if message else text
    return f"{type(error).__name__}: {error}"


def retry_after(error: BaseException) -> float | None:
    """The server's ``Retry-After`` in seconds, from the header or the Status details."""
    if not isinstance(error, ApiException):
        return None
    headers = error.headers or {}
    raw = headers.get("Retry-After") if hasattr(headers, "get") else None
    if raw is not None:
        try:
            return max(0.0, float(raw))
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep trying a transient failure: exponential backoff with jitter from
    ``initial`` to ``cap`` seconds, at most ``attempts`` tries within ``deadline`` seconds;
    a 429 waits at least its Retry-After."""

    attempts: int = 5
    deadline: float = 60.0
    initial: float = 0.2
    cap: float = 5.0

    def wait(self, state: RetryCallState) -> float:
        backoff: float = min(self.cap, self.initial * 2.0 ** (state.attempt_number - 1))
        delay = backoff * (1 + random.random() * 0.5)
        outcome = state.outcome
        error = outcome.exception() if outcome is not None else None
        hinted = retry_after(error) if error is not None else None
        return max(delay, hinted) if hinted is not None else delay


class Client:
    """JSON access to the API with retries and spans. ``live_*`` reads go to the API
    server, never a cache: use them to confirm before anything destructive."""

    def __init__(self, rest: Rest, policy: RetryPolicy | None = None) -> None:
        self.rest = rest
        self.policy = policy or RetryPolicy()

    def _call(
        self, verb: str, res: Resource, namespace: str | None, name: str | None, fn: Callable[[], T]
    ) -> T:
        attributes = {"k8s.verb": verb, "k8s.resource": res.plural, "k8s.group": res.group}
        if namespace:
            attributes["k8s.namespace"] = namespace
        if name:
            attributes["k8s.name"] = name
        with tracer.start_as_current_span(
            f"k8s {verb} {res.plural}", attributes=attributes
        ) as span:
            retrying = Retrying(
                retry=retry_if_exception(retryable),
                stop=stop_after_attempt(self.policy.attempts)
                | stop_after_delay(self.policy.deadline),
                wait=self.policy.wait,
                before_sleep=lambda s: log.info(
                    "retrying %s %s after %s",
                    verb,
                    res.plural,
                    s.outcome.exception() if s.outcome else "",
                ),
                reraise=True,
            )
            try:
                result = retrying(fn)
            except ApiException as e:
                span.set_attribute("http.status_code", int(e.status or 0))
                span.set_status(Status(StatusCode.ERROR, f"{e.status} {e.reason}"))
                raise
            except Exception as e:
                span.record_exception(e)
                span.set_status(Status(StatusCode.ERROR, type(e).__name__))
                raise
            span.set_attribute("http.status_code", 200)
            return result

    # -- reads ---------------------------------------------------------------------------

    def live_get(
        self, res: Resource, name: str, namespace: str | None = None, subresource: str = ""
    ) -> JSON:
        return self._call(
            "get", res, namespace, name, lambda: self.rest.get(res, name, namespace, subresource)
        )

    def live_get_or_none(
        self, res: Resource, name: str, namespace: str | None = None
    ) -> JSON | None:
        """The object, or None when the server says it does not exist."""
        try:
            return self.live_get(res, name, namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def serves(self, res: Resource) -> bool:
        """Whether the API server serves ``res`` (a list of one answers; 404: it does not)."""
        try:
            self._call("list", res, None, None, lambda: self.rest.list(res, limit=1))
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    def live_list(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[JSON]:
        return self._call(
            "list",
            res,
            namespace,
            None,
            lambda: self.rest.list_all(res, namespace, label_selector, field_selector)[0],
        )

    # -- writes --------------------------------------------------------------------------

    def create(self, res: Resource, body: JSON, namespace: str | None = None) -> JSON:
        return self._call(
            "create",
            res,
            namespace,
            body.get("metadata", {}).get("name"),
            lambda: self.rest.create(res, body, namespace),
        )

    def replace(
        self, res: Resource, body: JSON, namespace: str | None = None, subresource: str = ""
    ) -> JSON:
        return self._call(
            "update",
            res,
            namespace,
            body["metadata"]["name"],
            lambda: self.rest.replace(res, body, namespace, subresource),
        )

    def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        subresource: str = "",
        patch_type: str = MERGE_PATCH,
    ) -> JSON:
        return self._call(
            "patch",
            res,
            namespace,
            name,
            lambda: self.rest.patch(res, name, patch, namespace, subresource, patch_type),
        )

    def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
    ) -> JSON | None:
        """Delete, preconditioned on ``uid`` and ``resource_version`` when given. NotFound
        is returned as None (already gone); a failed precondition raises 409."""
        try:
            return self._call(
                "delete",
                res,
                namespace,
                name,
                lambda: self.rest.delete(
                    res,
                    name,
                    namespace,
                    uid=uid,
                    resource_version=resource_version,
                    grace_period_seconds=grace_period_seconds,
                    propagation_policy=propagation_policy,
                ),
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise

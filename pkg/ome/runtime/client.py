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
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

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
from urllib3.exceptions import HTTPError, MaxRetryError

from ome.backoff import capped_exponential
from ome.kube import JSON, Resource

from .rest import MERGE_PATCH, Rest, send_guard, status_of

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
tracer = trace.get_tracer("ome.runtime.client")


def tracing_on() -> bool:
    """Whether spans go anywhere: a tracer provider was set (``tracing.setup``, or a test's).
    Until then the API hands out no-op spans through its proxy."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _call_with_context(fn: Callable[[], T], *_context: object) -> T:
    """``fn()``; the context (verb, resource, name) is for the retry's log line."""
    return fn()


def retryable(error: BaseException) -> bool:
    """Transient: worth the same request again. 4xx answers other than 429 are not."""
    if isinstance(error, ApiException):
        return error.status in RETRYABLE_STATUS
    return isinstance(error, HTTPError | ConnectionError | TimeoutError)


class NotLeadingError(Exception):
    """A write refused before it was sent: this process no longer holds the leader lease
    (or never did), so it must not write. Routine, like an API error."""


def api_error(error: BaseException) -> bool:
    """Whether ``error`` came from talking to the API server: an answer other than 2xx, the
    transport failing, or a write this process may no longer send (``NotLeadingError``).
    Routine: reported in one line, never with a traceback."""
    return isinstance(error, ApiException | HTTPError | OSError | NotLeadingError)


def namespace_terminating(error: BaseException) -> bool:
    """Whether a create was refused because its namespace is being deleted (403 with the
    ``NamespaceTerminating`` cause, client-go's ``HasStatusCause``). Nothing new can live
    there any more, so the caller lets it be, quietly, as Kubernetes' own controllers do."""
    if not isinstance(error, ApiException) or error.status != 403:
        return False
    causes = (status_of(error).get("details") or {}).get("causes") or []
    return any(isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes)


def describe_error(error: BaseException) -> str:
    """One line naming an API error as the server gave it (``500 InternalError: <message>``),
    or the transport failure (``ProtocolError: Connection aborted``)."""
    if isinstance(error, NotLeadingError):
        return str(error)
    if isinstance(error, MaxRetryError) and error.reason is not None:
        return describe_error(error.reason)  # the cause, not the pool and URL around it
    if isinstance(error, ApiException):
        status = status_of(error)
        reason = status.get("reason") or error.reason or ""
        message = status.get("message") or ""
        text = f"{error.status} {reason}".strip()
        return f"{text}: {message}" if message else text
    return f"{type(error).__name__}: {error}"


def retry_after(error: BaseException) -> float | None:
    """The server's ``Retry-After`` header in seconds, when ``error`` is an API error that
    carries one with a number of seconds; None otherwise. Only the header is read: a 429's
    Status ``details.retryAfterSeconds`` is what the API server puts in that header too."""
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
        delay = capped_exponential(
            state.attempt_number, self.initial, self.cap, jitter=0.5, draw=random.random()
        )
        outcome = state.outcome
        error = outcome.exception() if outcome is not None else None
        hinted = retry_after(error) if error is not None else None
        return max(delay, hinted) if hinted is not None else delay


class Client:
    """JSON access to the API with retries and spans. ``live_*`` reads go to the API
    server, never a cache: use them to confirm before anything destructive.

    ``may_write``, when given, is asked before every attempt of every write (create, update,
    patch, delete), retries included, and again on the socket just before the request's
    bytes are written: False refuses it with ``NotLeadingError`` before anything is sent. A
    leader's client is fenced so: a process that lost its lease (paused past it, or unable
    to renew it) writes nothing more, whatever its workers were doing. What is left is the
    ``sendall`` itself: a process stopped between that last check and the system call sends
    once it resumes, which no client can rule out (Kubernetes has no fencing tokens)."""

    def __init__(
        self,
        rest: Rest,
        policy: RetryPolicy | None = None,
        may_write: Callable[[], bool] | None = None,
    ) -> None:
        self.rest = rest
        self.policy = policy or RetryPolicy()
        self.may_write = may_write
        # Made once, without a stop: a failure's retries (``_retried``) use a copy that stops
        # at the policy's attempts and what is left of its deadline. The call's verb,
        # resource and name travel as its arguments, for the log line.
        self._retrier = Retrying(
            retry=retry_if_exception(retryable),
            wait=self.policy.wait,
            before_sleep=self._before_sleep,
            reraise=True,
        )

    def _fenced(self, fn: Callable[[], T]) -> Callable[[], T]:
        """``fn``, refused with ``NotLeadingError`` when this process may not write."""
        may_write = self.may_write
        if may_write is None:
            return fn

        def check() -> None:
            if not may_write():
                raise NotLeadingError("not written: this process does not hold the leader lease")

        def write() -> T:
            check()
            with send_guard(check):
                return fn()

        return write

    def _call(
        self, verb: str, res: Resource, namespace: str | None, name: str | None, fn: Callable[[], T]
    ) -> T:
        retrier = self._retried
        if not tracing_on():
            # No span to record: the API's no-op spans still cost a context manager and an
            # attributes dict per request, a few percent of the manager's CPU in a burst.
            return retrier(fn, verb, res, name)
        attributes = {"k8s.verb": verb, "k8s.resource": res.plural, "k8s.group": res.group}
        if namespace:
            attributes["k8s.namespace"] = namespace
        if name:
            attributes["k8s.name"] = name
        with tracer.start_as_current_span(
            f"k8s {verb} {res.plural}", attributes=attributes
        ) as span:
            try:
                result = retrier(fn, verb, res, name)
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

    def _retried(self, fn: Callable[[], T], verb: str, res: Resource, name: str | None) -> T:
        """``fn()``, retried by tenacity under the policy. The first attempt is made here:
        nearly every request succeeds at once, and tenacity's bookkeeping cost a sixth of
        a request's CPU. A transient failure goes to tenacity as its own first attempt
        (replayed, not sent again), so the waits, the retry's log line and the attempts are
        the policy's, and the deadline counts from the first attempt."""
        started = time.monotonic()
        try:
            return fn()
        except Exception as e:
            if not retryable(e):
                raise
            first: list[BaseException] = [e]

        def again() -> T:
            if first:
                raise first.pop()
            return fn()

        left = max(0.0, self.policy.deadline - (time.monotonic() - started))
        retrier = self._retrier.copy(
            stop=stop_after_attempt(self.policy.attempts) | stop_after_delay(left)
        )
        return cast(T, retrier(_call_with_context, again, verb, res, name))

    def _before_sleep(self, state: RetryCallState) -> None:
        _fn, verb, res, name = state.args
        self._retrying(verb, res, name, state)

    def _retrying(self, verb: str, res: Resource, name: str | None, state: RetryCallState) -> None:
        """One warning line per retry: the call, what failed (never the response headers),
        and when and how often it is tried again."""
        error = state.outcome.exception() if state.outcome is not None else None
        sleep = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning(
            "%s %s%s failed: %s; retrying in %.1fs (attempt %d of %d)",
            verb,
            res.plural,
            f" {name}" if name else "",
            describe_error(error) if error is not None else "unknown error",
            sleep,
            state.attempt_number + 1,
            self.policy.attempts,
        )

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
        limit: int | None = None,
    ) -> builtins.list[JSON]:
        """Every matching object, read live (paged); with ``limit``, at most that many, in
        one request (for a reader that needs to know only whether there is one)."""

        def read() -> builtins.list[JSON]:
            if limit is not None:
                page = self.rest.list(res, namespace, label_selector, field_selector, limit=limit)
                return list(page.get("items") or [])
            return self.rest.list_all(res, namespace, label_selector, field_selector)[0]

        return self._call("list", res, namespace, None, read)

    # -- writes --------------------------------------------------------------------------

    def create(self, res: Resource, body: JSON, namespace: str | None = None) -> JSON:
        return self._call(
            "create",
            res,
            namespace,
            body.get("metadata", {}).get("name"),
            self._fenced(lambda: self.rest.create(res, body, namespace)),
        )

    def replace(
        self, res: Resource, body: JSON, namespace: str | None = None, subresource: str = ""
    ) -> JSON:
        return self._call(
            "update",
            res,
            namespace,
            body["metadata"]["name"],
            self._fenced(lambda: self.rest.replace(res, body, namespace, subresource)),
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
            self._fenced(
                lambda: self.rest.patch(res, name, patch, namespace, subresource, patch_type)
            ),
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
                self._fenced(
                    lambda: self.rest.delete(
                        res,
                        name,
                        namespace,
                        uid=uid,
                        resource_version=resource_version,
                        grace_period_seconds=grace_period_seconds,
                        propagation_policy=propagation_policy,
                    )
                ),
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise

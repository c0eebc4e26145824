"""The client's retries when its first attempt is made outside tenacity: a transient failure
is retried under the policy as before (the attempts, the waits, the deadline from the first
attempt), anything else is raised at once, and a success costs one call."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException

from ome.kube import Resource
from ome.runtime.client import Client, RetryPolicy
from ome.runtime.rest import Rest

THINGS = Resource("", "v1", "things")


def client(**policy: Any) -> Client:
    return Client(Rest(ApiClient(Configuration())), RetryPolicy(**policy))


class Calls:
    """A request that answers each call from ``answers``: an exception to raise, or a value."""

    def __init__(self, *answers: object, slow: float = 0.0) -> None:
        self.answers = list(answers)
        self.made = 0
        self.slow = slow

    def __call__(self) -> object:
        self.made += 1
        if self.slow:
            time.sleep(self.slow)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def test_a_success_is_one_call() -> None:
    calls = Calls("ok")
    assert client()._retried(calls, "get", THINGS, "a") == "ok"
    assert calls.made == 1


def test_transient_failures_are_retried_as_the_policy_says(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = Calls(ApiException(status=503), ApiException(status=500), "ok")
    assert client(initial=0.01, cap=0.02)._retried(calls, "get", THINGS, "a") == "ok"
    assert calls.made == 3
    retries = [r for r in caplog.records if "retrying" in r.getMessage().lower()]
    assert len(retries) == 2, [r.getMessage() for r in caplog.records]
    assert retries[0].getMessage().startswith("get things a failed: 503")
    assert "(attempt 2 of 5)" in retries[0].getMessage()
    assert "(attempt 3 of 5)" in retries[1].getMessage()


def test_the_attempts_count_the_first() -> None:
    calls = Calls(*[ApiException(status=503)] * 5, "never")
    with pytest.raises(ApiException) as raised:
        client(attempts=3, initial=0.01, cap=0.02)._retried(calls, "get", THINGS, "a")
    assert raised.value.status == 503
    assert calls.made == 3


def test_anything_but_a_transient_failure_is_raised_at_once() -> None:
    calls = Calls(ApiException(status=404), "never")
    with pytest.raises(ApiException) as raised:
        client(initial=0.01)._retried(calls, "get", THINGS, "a")
    assert raised.value.status == 404
    assert calls.made == 1


def test_the_deadline_counts_from_the_first_attempt() -> None:
    calls = Calls(ApiException(status=503), "late", slow=0.3)
    with pytest.raises(ApiException):
        client(deadline=0.25, initial=0.01, cap=0.02)._retried(calls, "get", THINGS, "a")
    assert calls.made == 1

"""Small waiting helpers for tests of things that settle asynchronously."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException


def eventually(check: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``check`` until it returns something truthy, and return that; fail after
    ``timeout`` with the check's name. For states a controller reaches on its own."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(
                f"condition not reached in {timeout}s: {getattr(check, '__name__', check)}"
            )
        time.sleep(interval)


def gone(read: Callable[[], Any]) -> bool:
    """True when ``read()`` answers 404."""
    try:
        read()
    except ApiException as e:
        return bool(e.status == 404)
    return False

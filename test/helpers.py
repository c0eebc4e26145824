"""Small waiting helpers for tests of things that settle asynchronously."""

from __future__ import annotations

import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException

from ome.kube import parse_time
from ome.runtime.certs import KeyPair
from ome.tpuslice.slices import SliceInfo


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


def clock_past(moment: datetime) -> None:
    """Wait until the wall clock (the API server's and the manager's) is past ``moment``: for
    a scenario that is a span of time, the least of it the scenario needs."""
    eventually(lambda: datetime.now(UTC) > moment, timeout=10, interval=0.01)


def a_second_after(stamp: str) -> None:
    """Wait until an object made now is stamped later than ``stamp``, an RFC 3339 time of
    the API server, which has one-second resolution: at most a second, half of one on
    average."""
    start = parse_time(stamp)
    assert start is not None, stamp
    clock_past(start + timedelta(seconds=1))


def gone(read: Callable[[], Any]) -> bool:
    """True when ``read()`` answers 404."""
    try:
        read()
    except ApiException as e:
        return bool(e.status == 404)
    return False


class StaticCerts:
    """A webhook certificate source whose pair the test sets."""

    def __init__(self, pair: KeyPair | None) -> None:
        self.pair = pair

    def current(self) -> KeyPair | None:
        return self.pair

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def ready(self) -> str | None:
        return None if self.pair else "the test has set no pair"


def assert_strings_and_partitions(info: SliceInfo) -> None:
    """What E1 promises of a Slice read from anyone: every text field a string, the
    partitions a tuple of strings, whatever the object held."""
    for text in (
        info.name,
        info.uid,
        info.resource_version,
        info.owner_uid,
        info.owner,
        info.slice_type,
        info.topology,
        info.state,
        info.status,
        info.message,
    ):
        assert isinstance(text, str)
    assert all(isinstance(p, str) for p in info.partitions)


def scrape_https(url: str, token: str | None) -> tuple[int, str]:
    """GET ``url`` over HTTPS with ``Authorization: Bearer <token>`` (none without a token),
    as a Prometheus scrapes the manager's secure metrics: its certificate is self-signed, so
    it is not verified. The status and the body, an error's included."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()

"""Fixtures of the unit tests that start controllers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ome.runtime.controller import Controller


@pytest.fixture
def stopped() -> Iterator[list[Controller]]:
    """The controllers a test puts here (once started), each stopped after the test."""
    started: list[Controller] = []
    yield started
    for c in started:
        c.stop(timeout=5)

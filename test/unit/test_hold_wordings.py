"""Which E3/E6 hold reasons are routine (``messages.on_its_way``): those that only say a new
Slice is on its usual way to ready. Between two of them the Instance's record is not worded
anew at once (E7); any other reason is news."""

from __future__ import annotations

import pytest

from ome.controllers.slices import messages

ROUTINE = [
    messages.waiting_for_partitions("s-1"),
    messages.partitions_without_state("s-1"),
    messages.not_ready("s-1", "ACTIVATING", "False", ""),
    messages.not_ready("s-1", "ACTIVATING", "False", "allocating: 2 of 8\\nhosts"),
    messages.not_ready("s-1", "SliceNotCreated", "False", "queued"),
    messages.hosts_not_visible("s-1", "ACTIVE", 1, 2),
]
NEWS = [
    messages.not_ready("s-1", "ACTIVATING", "Unknown", "lost contact"),
    messages.not_ready("s-1", "FAILED", "False", "no capacity"),
    messages.not_ready("s-1", "ACTIVE_DEGRADED", "False", ""),
    messages.not_ready("s-1", "DEACTIVATING", "False", ""),
    messages.being_released("s-1"),
    messages.wrong_shape("s-1", ("tpu7x", "2x2x1"), ("tpu7x", "2x2x2")),
    "slice is owned by another object: s-1",
    "pods cannot be placed",
]


@pytest.mark.parametrize("reason", ROUTINE)
def test_a_slice_on_its_usual_way_is_routine(reason: str) -> None:
    assert messages.on_its_way(reason)


@pytest.mark.parametrize("reason", NEWS)
def test_anything_else_is_news(reason: str) -> None:
    assert not messages.on_its_way(reason)

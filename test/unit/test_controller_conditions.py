"""The one condition helper both controllers set their conditions with: a condition's time of
transition stands while its status does, other conditions stay unless the controller owns
them all, and the list is sorted by type. Plain values only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ome.controllers.conditions import WantedCondition, set_conditions

JSON = dict[str, Any]
EARLIER = "2026-01-01T00:00:00Z"
NOW = datetime(2026, 3, 1, 12, 0, 30, 999_000, tzinfo=UTC)
NOW_TEXT = "2026-03-01T12:00:30Z"


def stored(ctype: str, status: str, since: str | None = EARLIER, **extra: Any) -> JSON:
    c: JSON = {"type": ctype, "status": status, "reason": "Was", "message": "was so"}
    if since is not None:
        c["lastTransitionTime"] = since
    c.update(extra)
    return c


@pytest.mark.parametrize(
    ("previous", "ok", "since"),
    [
        ([], True, NOW_TEXT),  # a new condition: now
        ([stored("Ready", "True")], True, EARLIER),  # same status: its time stands
        ([stored("Ready", "False")], True, NOW_TEXT),  # a transition: now
        ([stored("Ready", "True")], False, NOW_TEXT),
        ([stored("Ready", "True", since=None)], True, NOW_TEXT),  # no time on record: now
        ([stored("Other", "True")], True, NOW_TEXT),  # another type's time is not its
    ],
)
def test_a_conditions_time_of_transition_stands_while_its_status_does(
    previous: list[JSON], ok: bool, since: str
) -> None:
    [ready] = [
        c
        for c in set_conditions(previous, [WantedCondition("Ready", ok, "R", "m")], 4, NOW)
        if c["type"] == "Ready"
    ]
    assert ready == {
        "type": "Ready",
        "status": "True" if ok else "False",
        "reason": "R",
        "message": "m",
        "lastTransitionTime": since,
        "observedGeneration": 4,
    }


def test_a_new_reason_or_message_with_the_same_status_is_no_transition() -> None:
    [ready] = set_conditions(
        [stored("Ready", "False")], [WantedCondition("Ready", False, "Other", "other text")], 2, NOW
    )
    assert (ready["reason"], ready["message"], ready["lastTransitionTime"]) == (
        "Other",
        "other text",
        EARLIER,
    )


def test_other_conditions_stay_as_they_were_unless_the_controller_owns_them_all() -> None:
    previous = [stored("Zeta", "True", observedGeneration=1), stored("Ready", "True")]
    wanted = [WantedCondition("Ready", True, "R", "m")]
    kept = set_conditions(previous, wanted, 2, NOW)
    assert [c["type"] for c in kept] == ["Ready", "Zeta"]
    assert kept[1] == previous[0] and kept[1] is not previous[0]
    assert [c["type"] for c in set_conditions(previous, wanted, 2, NOW, replace_all=True)] == [
        "Ready"
    ]


def test_the_previous_conditions_are_not_changed() -> None:
    previous = [stored("Ready", "False"), stored("EngineReady", "False")]
    before = [dict(c) for c in previous]
    set_conditions(previous, [WantedCondition("Ready", True, "R", "m")], 3, NOW)
    assert previous == before


types = st.sampled_from(["Ready", "EngineReady", "DecoderReady", "RouterReady", "Other"])
statuses = st.sampled_from(["True", "False", "Unknown"])
previous_lists = st.lists(
    st.builds(stored, types, statuses, st.sampled_from([EARLIER, "2025-06-01T00:00:00Z"])),
    max_size=6,
)
wanted_lists = st.lists(
    st.builds(WantedCondition, types, st.booleans(), st.text(max_size=5), st.text(max_size=5)),
    max_size=5,
    unique_by=lambda c: c.type,
)


@given(previous_lists, wanted_lists, st.booleans())
def test_setting_the_same_conditions_again_changes_nothing(
    previous: list[JSON], wanted: list[WantedCondition], replace_all: bool
) -> None:
    once = set_conditions(previous, wanted, 5, NOW, replace_all=replace_all)
    later = NOW + timedelta(hours=1)
    assert set_conditions(once, wanted, 5, later, replace_all=replace_all) == once


@given(previous_lists, wanted_lists, st.booleans())
def test_each_wanted_condition_is_set_once_and_the_list_is_sorted_by_type(
    previous: list[JSON], wanted: list[WantedCondition], replace_all: bool
) -> None:
    out = set_conditions(previous, wanted, 5, NOW, replace_all=replace_all)
    assert [c["type"] for c in out] == sorted(c["type"] for c in out)
    for w in wanted:
        [c] = [c for c in out if c["type"] == w.type]
        assert (c["status"], c["reason"], c["message"], c["observedGeneration"]) == (
            "True" if w.ok else "False",
            w.reason,
            w.message,
            5,
        )
        was = [p for p in previous if p["type"] == w.type][:1]
        same = bool(was) and was[0]["status"] == c["status"]
        assert c["lastTransitionTime"] == (was[0]["lastTransitionTime"] if same else NOW_TEXT)
    others = {c["type"] for c in out} - {w.type for w in wanted}
    kept = {p["type"] for p in previous} - {w.type for w in wanted}
    assert others == (set() if replace_all else kept)

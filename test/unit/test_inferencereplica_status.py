"""What an InferenceReplica pass decides around its Instances' plan: the replica's status and
Ready condition from the planned rows, which Instances it rebuilt, whether an Instance rebuilt
too often waits (and the text that says so), the ControllerRevision its runners need, and the
node selectors its gates confine pods with. Plain values only: no server, no clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ome.controllers.holds import Hold
from ome.controllers.inferencereplica.decide import (
    REBUILD_BACKOFF,
    REBUILD_CAP,
    REBUILD_WINDOW,
    REBUILDS_ALLOWED,
    confine,
    current_revision,
    rebuild_hold,
    rebuilt,
    recent,
    replica_status,
    revision_body,
    revision_recorded,
)

JSON = dict[str, Any]
NS, NAME, REV, OLD = "serving", "qwen3-engine", "rev-new", "rev-old"
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
NOW_TEXT = "2026-03-01T12:00:00Z"


def replica(replicas: int = 2, status: JSON | None = None) -> JSON:
    obj: JSON = {
        "metadata": {
            "name": NAME,
            "namespace": NS,
            "uid": "uid-r",
            "generation": 3,
            "resourceVersion": "9",
        },
        "spec": {"replicas": replicas, "runners": [{"name": "default", "size": 1}]},
    }
    if status is not None:
        obj["status"] = status
    return obj


def row(index: int, phase: str, running: str = REV, incarnation: int = 0) -> JSON:
    return {"index": index, "phase": phase, "runningRevision": running, "incarnation": incarnation}


# -- the status --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "counts", "current", "ready"),
    [
        # (replicas, ready, available, updated), currentRevision, the Ready condition
        (
            [row(0, "Ready"), row(1, "Ready")],
            (2, 2, 2, 2),
            REV,
            ("True", "InstancesReady", "2 of 2 instances ready"),
        ),
        (
            [row(0, "Ready"), row(1, "Creating", running="")],
            (2, 1, 1, 1),
            REV,
            ("False", "InstancesNotReady", "1 of 2 instances ready"),
        ),
        (  # one Ready Instance still runs the old revision: not Ready, and not rolled
            [row(0, "Ready"), row(1, "Ready", running=OLD)],
            (2, 2, 2, 1),
            REV,  # the first time, the revision asked for
            ("False", "InstancesNotReady", "2 of 2 instances ready"),
        ),
        (  # a Deleting Instance (scaled down) serves no more
            [row(0, "Ready"), row(1, "Ready"), row(2, "Deleting")],
            (2, 2, 2, 2),
            REV,
            ("True", "InstancesReady", "2 of 2 instances ready"),
        ),
        ([], (0, 0, 0, 0), REV, ("False", "InstancesNotReady", "0 of 2 instances ready")),
    ],
)
def test_the_status_counts_the_planned_instances_and_says_when_they_are_ready(
    rows: list[JSON],
    counts: tuple[int, int, int, int],
    current: str,
    ready: tuple[str, str, str],
) -> None:
    status = replica_status(replica(), rows, REV, NOW)
    assert status is not None
    assert (
        status["replicas"],
        status["readyReplicas"],
        status["availableReplicas"],
        status["updatedReplicas"],
    ) == counts
    assert (status["currentRevision"], status["updateRevision"]) == (current, REV)
    assert status["selector"] == f"ome.io/inferencereplica={NAME}"
    assert status["observedGeneration"] == 3
    assert status["instanceStatuses"] is rows
    [condition] = status["conditions"]
    assert (condition["status"], condition["reason"], condition["message"]) == ready
    assert (condition["lastTransitionTime"], condition["observedGeneration"]) == (NOW_TEXT, 3)


def test_a_status_already_written_is_not_written_again() -> None:
    rows = [row(0, "Ready"), row(1, "Ready")]
    status = replica_status(replica(), rows, REV, NOW)
    assert status is not None
    later = NOW + timedelta(minutes=3)
    assert replica_status(replica(status=status), rows, REV, later) is None


def test_the_status_keeps_what_it_does_not_compute_and_conditions_of_others() -> None:
    other = {"type": "Scaled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    old = {"conditions": [other], "labelSelector": "x=y"}
    before = replica(status=old)
    status = replica_status(before, [row(0, "Ready")], REV, NOW)
    assert status is not None
    assert status["labelSelector"] == "x=y"
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Scaled"]
    assert before["status"] == {"conditions": [other], "labelSelector": "x=y"}, "not changed"


@pytest.mark.parametrize(
    ("ready", "old", "current"),
    [
        ([row(0, "Ready")], {}, REV),
        ([row(0, "Ready"), row(1, "Ready", running=OLD)], {"currentRevision": OLD}, OLD),
        ([row(0, "Ready", running=OLD)], {}, OLD),  # what its first Ready Instance runs
        ([], {"currentRevision": OLD}, OLD),
        ([], {}, REV),
    ],
)
def test_the_current_revision_moves_once_every_ready_instance_runs_the_new_one(
    ready: list[JSON], old: JSON, current: str
) -> None:
    assert current_revision(ready, REV, old) == current


phases = st.sampled_from(["Creating", "Ready", "Updating", "Failed", "Deleting"])
rows_lists = st.lists(
    st.builds(row, st.integers(0, 9), phases, st.sampled_from([REV, OLD, ""])), max_size=8
)


@given(rows_lists, st.integers(0, 6))
def test_the_counts_agree_with_the_rows_and_ready_needs_every_ready_instance_rolled(
    rows: list[JSON], desired: int
) -> None:
    status = replica_status(replica(desired), rows, REV, NOW)
    assert status is not None
    serving = [r for r in rows if r["phase"] != "Deleting"]
    ready = [r for r in serving if r["phase"] == "Ready"]
    assert status["replicas"] == len(serving)
    assert status["readyReplicas"] == status["availableReplicas"] == len(ready)
    assert 0 <= status["updatedReplicas"] <= status["readyReplicas"] <= status["replicas"]
    [condition] = status["conditions"]
    rolled = status["updatedReplicas"] == len(ready)
    assert (condition["status"] == "True") == (len(ready) >= desired and rolled)
    assert replica_status(replica(desired, status), rows, REV, NOW + timedelta(hours=1)) is None


# -- rebuilds ----------------------------------------------------------------------------------


def test_an_instance_rebuilt_is_one_whose_incarnation_moved_on() -> None:
    previous = [row(0, "Ready"), row(1, "Ready", incarnation=2), row(2, "Ready")]
    planned = [
        row(0, "Ready"),
        row(1, "Creating", incarnation=3),
        row(2, "Creating", incarnation=1),
        row(3, "Creating"),  # a new Instance is no rebuild
    ]
    assert rebuilt(previous, planned) == [1, 2]
    assert rebuilt(planned, planned) == []


def test_rebuilds_older_than_the_window_are_forgotten() -> None:
    times = [NOW - REBUILD_WINDOW, NOW - REBUILD_WINDOW + timedelta(seconds=1), NOW]
    assert recent(times, NOW, REBUILD_WINDOW) == times[1:]


def ago(*seconds: float) -> list[datetime]:
    return [NOW - timedelta(seconds=s) for s in seconds]


@pytest.mark.parametrize(
    ("times", "left", "text"),
    [
        (ago(30, 20, 10), None, None),  # three a minute go unhindered
        (ago(30, 20, 10, 0), 10.0, "rebuilt 4 times in the last 1m0s; its next rebuild waits 10s"),
        (ago(30, 20, 10, 4), 6.0, "rebuilt 4 times in the last 1m0s; its next rebuild waits 10s"),
        (ago(30, 20, 10, 10), None, None),  # its wait is over
        (ago(5, 4, 3, 2, 1), 19.0, "rebuilt 5 times in the last 1m0s; its next rebuild waits 20s"),
        (
            ago(*range(20, 0, -1)),
            REBUILD_CAP - 1,
            "rebuilt 20 times in the last 1m0s; its next rebuild waits 5m0s",
        ),
    ],
)
def test_an_instance_rebuilt_too_often_waits_10_s_doubling_up_to_5_minutes_and_says_so(
    times: list[datetime], left: float | None, text: str | None
) -> None:
    held = rebuild_hold(2, times, NOW)
    if left is None:
        assert held is None
        return
    assert held == (Hold(REBUILD_BACKOFF, f"instance 2 was {text}"), left)


instants = st.lists(st.integers(0, 59_999), max_size=30).map(
    lambda ms: [NOW - timedelta(milliseconds=m) for m in sorted(ms, reverse=True)]
)


@given(instants, st.integers(0, 6))
def test_a_rebuild_waits_only_past_its_allowance_and_never_past_the_cap(
    times: list[datetime], allowed: int
) -> None:
    held = rebuild_hold(0, times, NOW, allowed=allowed)
    if len(times) <= allowed:
        assert held is None
        return
    wait = min(REBUILD_CAP, 10.0 * 2 ** (len(times) - allowed - 1))
    since_last = (NOW - times[-1]).total_seconds()
    if since_last >= wait:
        assert held is None
        return
    assert held is not None
    hold, left = held
    assert hold.token == REBUILD_BACKOFF
    assert 0 < left <= REBUILD_CAP
    assert left == pytest.approx(wait - since_last)


def test_the_defaults_allow_three_rebuilds_a_minute() -> None:
    assert (3, timedelta(minutes=1)) == (REBUILDS_ALLOWED, REBUILD_WINDOW)


# -- what the pass writes -----------------------------------------------------------------------


def test_the_runners_revision_is_made_once_and_numbered_after_the_others() -> None:
    r = replica()
    assert not revision_recorded(r, REV)
    assert revision_recorded(replica(status={"updateRevision": REV}), REV)
    body = revision_body(r, REV, [{"metadata": {"name": f"{NAME}-{OLD}"}, "revision": 4}])
    assert body is not None
    assert body["metadata"]["name"] == f"{NAME}-{REV}"
    assert body["metadata"]["labels"] == {
        "ome.io/inferencereplica": NAME,
        "ome.io/revision-hash": REV,
    }
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-r"
    assert (body["revision"], body["data"]) == (5, {"runners": r["spec"]["runners"]})
    assert revision_body(r, REV, []) is not None
    assert revision_body(r, REV, [body]) is None, "already made"


def test_pods_are_confined_where_their_gates_said_and_others_are_left_alone() -> None:
    def pod(index: str | None) -> JSON:
        labels = {} if index is None else {"ome.io/instance-index": index}
        return {"metadata": {"labels": labels}, "spec": {"nodeSelector": {"pool": "p"}}}

    pods = [pod("0"), pod("1"), pod(None)]
    confine(pods, {0: {"cloud.google.com/gke-tpu-slice": "s-0"}})
    assert [p["spec"]["nodeSelector"] for p in pods] == [
        {"pool": "p", "cloud.google.com/gke-tpu-slice": "s-0"},
        {"pool": "p"},
        {"pool": "p"},
    ]

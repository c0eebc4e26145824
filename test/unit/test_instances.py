"""The Instance lifecycle of an InferenceReplica as pure decisions: ``instances.plan`` and its
helpers (M1 to M4, E7 and E8). Every test feeds plain
values, as the controller does, and checks what a user sees: the status rows and the pods
created and deleted."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ome.controllers.holds import Hold
from ome.controllers.inferencereplica import instances
from ome.controllers.inferencereplica.instances import (
    HOLD_REWORD_AFTER,
    HOLD_ROUTINE_REWORD_AFTER,
    LABEL_INFERENCE_REPLICA,
    Observed,
    Plan,
    PodSlot,
    build_pod,
    pod_name,
    pod_slots,
    revision_hash,
    settle,
    suspects,
)
from ome.controllers.slices import messages

JSON = dict[str, Any]
#: A test's stand-in for a gate: (replica, index, the pods about to be created) -> a hold.
HoldFn = Callable[[JSON, int, list[JSON]], Hold | None]


def plan(obs: Observed, holds: tuple[HoldFn, ...] = ()) -> Plan:
    """Plan, then settle with the holds these functions give (the first that answers wins),
    as the reconciler does with its gates' answers."""
    out = instances.plan(obs)
    answers: dict[int, Hold] = {}
    for index, pods in out.about_to_create().items():
        for hold in holds:
            answer = hold(obs.replica, index, pods)
            if answer is not None:
                answers[index] = answer
                break
    return settle(out, answers)


NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
NAME = "qwen3-tpu-engine"
NAMESPACE = "qwen3-tpu"
UID = "6a1f2b3c-0000-4000-8000-000000000001"
TIMEOUT = timedelta(minutes=10)
OPT_IN = "ome.io/tpu-slice-provisioning"


def rfc(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def template(image: str = "engine:1") -> JSON:
    return {
        "metadata": {
            "labels": {"app": "qwen3"},
            "annotations": {OPT_IN: "true"},
        },
        "spec": {"containers": [{"name": "runner", "image": image}]},
    }


def single(image: str = "engine:1") -> list[JSON]:
    return [{"name": "default", "template": template(image)}]


def multi(image: str = "engine:1", size: int = 2) -> list[JSON]:
    return [
        {"name": "leader", "template": template(image)},
        {"name": "worker", "size": size, "template": template(image)},
    ]


def replica(
    runners: list[JSON],
    replicas: int = 1,
    rows: list[JSON] | None = None,
    timeout: str | None = "10m",
) -> JSON:
    """An InferenceReplica as the controller reads it from the cache."""
    spec: JSON = {"component": "engine", "replicas": replicas, "runners": runners}
    if timeout is not None:
        spec["lifecycle"] = {"instanceReadyTimeout": timeout}
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceReplica",
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "uid": UID,
            "resourceVersion": "7",
            "labels": {"ome.io/inferenceservice": "qwen3-tpu"},
        },
        "spec": spec,
        "status": {"instanceStatuses": copy.deepcopy(rows or [])},
    }


def with_rows(rep: JSON, rows: list[JSON]) -> JSON:
    """The replica after the controller wrote ``rows`` as its status."""
    out = copy.deepcopy(rep)
    out["status"]["instanceStatuses"] = copy.deepcopy(rows)
    return out


def running(
    pod: JSON,
    *,
    ready: bool = True,
    failed: bool = False,
    terminating: bool = False,
    terminated: JSON | None = None,
) -> JSON:
    """``pod`` as the API server would show it once created: a UID, a creation time and a
    status (Ready condition, or phase Failed)."""
    out = copy.deepcopy(pod)
    meta = out["metadata"]
    meta["uid"] = f"uid-{meta['name']}-{meta['labels']['ome.io/revision-hash']}"
    meta["creationTimestamp"] = "2025-03-01T11:00:00Z"
    if terminating:
        meta["deletionTimestamp"] = "2025-03-01T11:59:00Z"
    status: JSON = {
        "phase": "Failed" if failed else "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready and not failed else "False"}],
    }
    if terminated is not None:
        status["containerStatuses"] = [{"name": "runner", "state": {"terminated": terminated}}]
    out["status"] = status
    return out


def instance_pods(
    rep: JSON, index: int, ordinal: int = 0, incarnation: int = 0, **state: Any
) -> list[JSON]:
    """The pods of Instance ``index`` made from ``rep``'s runners (its revision)."""
    runners = rep["spec"]["runners"]
    return [
        running(build_pod(rep, index, slot, revision_hash(runners), incarnation), **state)
        for slot in pod_slots(runners, ordinal)
    ]


def ready_row(rep: JSON, index: int, ordinal: int = 0, incarnation: int = 0) -> JSON:
    """The row of an Instance that became Ready at ``rep``'s revision an hour ago."""
    rev = revision_hash(rep["spec"]["runners"])
    n = len(pod_slots(rep["spec"]["runners"]))
    return {
        "index": index,
        "incarnation": incarnation,
        "phase": "Ready",
        "runningRevision": rev,
        "targetRevision": rev,
        "podCount": n,
        "servingPodCount": n,
        "availablePodCount": n,
        "readySince": "2025-03-01T11:00:00Z",
        "activeOrdinal": ordinal,
        "operation": None,
        "lastFailure": None,
    }


def names(pods: list[JSON]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def deletes_of(pods: list[JSON]) -> list[tuple[str, str]]:
    return [(p["metadata"]["name"], p["metadata"]["uid"]) for p in pods]


def hold_all(token: str, message: str, routine: Any = None) -> Any:
    return lambda _replica, _index, _pods: Hold(token, message, routine=routine)


# -- helpers: slots, names, pods, revisions ----------------------------------------------------


@pytest.mark.parametrize(
    ("runners", "active", "slots"),
    [
        (single(), 0, [("default", 0)]),
        (single(), 1, [("default", 1)]),
        (multi(size=1), 0, [("leader", 0), ("worker", 0)]),
        (multi(size=3), 1, [("leader", 0), ("worker", 0), ("worker", 1), ("worker", 2)]),
        ([{"name": "leader", "template": template()}], 0, [("leader", 0)]),
        ([{"name": "worker", "size": 0, "template": template()}], 0, []),
        ([], 0, []),
    ],
)
def test_pod_slots_follow_the_runners(
    runners: list[JSON], active: int, slots: list[tuple[str, int]]
) -> None:
    got = pod_slots(runners, active)
    assert [(s.runner, s.ordinal) for s in got] == slots
    assert all(s.template == template() for s in got)


def test_a_runner_without_a_name_is_the_default_one() -> None:
    assert pod_slots([{"template": template()}], 1) == [PodSlot("default", 1, template())]


@pytest.mark.parametrize(
    ("index", "runner", "ordinal", "name"),
    [
        (0, "default", 0, "qwen3-tpu-engine-0-default-0"),
        (0, "default", 1, "qwen3-tpu-engine-0-default-1"),
        (3, "leader", 0, "qwen3-tpu-engine-3-leader-0"),
        (12, "worker", 7, "qwen3-tpu-engine-12-worker-7"),
    ],
)
def test_a_pod_is_named_replica_index_runner_ordinal(
    index: int, runner: str, ordinal: int, name: str
) -> None:
    assert pod_name(NAME, index, runner, ordinal) == name


def test_a_pod_carries_the_m2_labels_its_template_and_its_owner() -> None:
    rep = replica(multi())
    pod = build_pod(rep, 2, PodSlot("worker", 1, template()), "abc123", 4)
    assert pod == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "qwen3-tpu-engine-2-worker-1",
            "namespace": NAMESPACE,
            "labels": {
                "app": "qwen3",
                "ome.io/inferenceservice": "qwen3-tpu",
                "component": "engine",
                "ome.io/managed-by": "OMENative",
                LABEL_INFERENCE_REPLICA: NAME,
                "ome.io/instance-index": "2",
                "ome.io/runner": "worker",
                "ome.io/revision-hash": "abc123",
                "ome.io/pod-ordinal": "1",
                "ome.io/incarnation": "4",
            },
            "annotations": {OPT_IN: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "ome.io/v1beta1",
                    "kind": "InferenceReplica",
                    "name": NAME,
                    "uid": UID,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "runner", "image": "engine:1"}]},
    }


def test_building_a_pod_leaves_the_template_alone() -> None:
    slot = PodSlot("default", 0, template())
    pod = build_pod(replica(single()), 0, slot, "abc123", 0)
    pod["spec"]["containers"][0]["image"] = "changed"
    pod["metadata"]["annotations"]["x"] = "y"
    assert slot.template == template()


def test_a_replica_without_an_inferenceservice_label_gives_pods_without_one() -> None:
    rep = replica(single())
    del rep["metadata"]["labels"]
    pod = build_pod(rep, 0, PodSlot("default", 0, {}), "abc123", 0)
    assert "ome.io/inferenceservice" not in pod["metadata"]["labels"]
    assert pod["metadata"]["annotations"] == {}
    assert pod["spec"] == {}


def test_the_revision_hash_is_ten_hex_characters_and_ignores_key_order() -> None:
    rev = revision_hash(single())
    assert len(rev) == 10 and all(c in "0123456789abcdef" for c in rev)
    reordered = [{"template": template(), "name": "default"}]
    assert revision_hash(reordered) == rev


@pytest.mark.parametrize(
    "changed",
    [
        single("engine:2"),
        [{"name": "default", "template": {**template(), "metadata": {}}}],  # opt-in removed
        multi(size=2),
    ],
)
def test_any_template_change_gives_a_new_revision(changed: list[JSON]) -> None:
    assert revision_hash(changed) != revision_hash(single())


def test_the_worker_size_is_part_of_the_revision() -> None:
    assert revision_hash(multi(size=2)) != revision_hash(multi(size=3))


# -- Create, holds, readiness ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("runners", "created"),
    [
        (single(), [("default", "0")]),
        (multi(size=2), [("leader", "0"), ("worker", "0"), ("worker", "1")]),
    ],
    ids=["single-pod", "leader-and-workers"],
)
def test_a_new_replica_creates_instance_0(
    runners: list[JSON], created: list[tuple[str, str]]
) -> None:
    rep = replica(runners)
    out = plan(Observed(rep, [], NOW))

    rev = revision_hash(runners)
    (row,) = out.rows
    assert row["index"] == 0 and row["incarnation"] == 0
    assert row["phase"] == "Creating"
    assert row["targetRevision"] == rev and row["runningRevision"] == ""
    assert row["readySince"] is None and row["lastFailure"] is None
    op = row["operation"]
    assert op["type"] == "Create" and op["step"] == "WaitReady"
    assert op["startedAt"] == rfc(NOW) and op["deadline"] == rfc(NOW + TIMEOUT)
    assert op["waiting"] is None and op["surgeIndex"] is None
    assert out.delete == []
    assert names(out.create) == [f"{NAME}-0-{r}-{o}" for r, o in created]
    for pod, (runner, ordinal) in zip(out.create, created, strict=True):
        labels = pod["metadata"]["labels"]
        assert labels["ome.io/instance-index"] == "0"
        assert labels["ome.io/runner"] == runner
        assert labels["ome.io/pod-ordinal"] == ordinal
        assert labels["ome.io/revision-hash"] == rev
        assert labels["ome.io/managed-by"] == "OMENative"
        assert labels["component"] == "engine"
        assert labels["ome.io/inferenceservice"] == "qwen3-tpu"
        assert labels[LABEL_INFERENCE_REPLICA] == NAME
        assert pod["metadata"]["namespace"] == NAMESPACE
        assert pod["metadata"]["annotations"][OPT_IN] == "true"
    assert out.requeue_after == TIMEOUT.total_seconds()


def test_a_replica_without_a_ready_timeout_creates_with_no_deadline() -> None:
    out = plan(Observed(replica(single(), timeout=None), [], NOW))
    assert out.rows[0]["operation"]["deadline"] is None
    assert len(out.create) == 1 and out.requeue_after is None


def test_an_unreadable_ready_timeout_is_no_deadline_rather_than_a_stall() -> None:
    out = plan(Observed(replica(single(), timeout="ten minutes"), [], NOW))
    assert out.rows[0]["operation"]["deadline"] is None
    assert len(out.create) == 1


@pytest.mark.parametrize("runners", [single(), multi()], ids=["single-pod", "multi-pod"])
def test_a_hold_parks_the_create_and_its_release_starts_the_deadline(runners: list[JSON]) -> None:
    rep = replica(runners)
    asked: list[tuple[int, list[str]]] = []

    def capacity(_replica: JSON, index: int, pods: list[JSON]) -> Hold:
        asked.append((index, names(pods)))
        return Hold("CapacityProvisioning", "slice s-0 is waiting for partition assignment")

    held = plan(Observed(rep, [], NOW), holds=(capacity,))

    first = f"{NAME}-0-{pod_slots(runners)[0].runner}-0"
    assert asked == [(0, [f"{NAME}-0-{s.runner}-{s.ordinal}" for s in pod_slots(runners)])]
    assert held.create == [] and held.delete == []
    (row,) = held.rows
    assert row["phase"] == "Creating"
    op = row["operation"]
    assert op["type"] == "Create" and op["waiting"] == "CapacityProvisioning"
    assert op["deadline"] is None
    assert row["lastFailure"] == {
        "podName": first,
        "containerName": "",
        "reason": "CapacityProvisioning",
        "exitCode": None,
        "message": (
            f"CapacityProvisioning: pod {first} is withheld until its capacity is ready: "
            "slice s-0 is waiting for partition assignment"
        ),
        "time": rfc(NOW),
    }
    assert held.requeue_after == 5.0

    # Still held a minute later with the same message: the failure keeps its time (E7).
    later = NOW + timedelta(minutes=1)
    still = plan(Observed(with_rows(rep, held.rows), [], later), holds=(capacity,))
    assert still.rows[0]["lastFailure"] == row["lastFailure"]
    assert still.rows[0]["operation"]["deadline"] is None and still.create == []

    # A new reason is a new failure, at the new time.
    other = hold_all("Unschedulable", "no node fits")
    moved = plan(Observed(with_rows(rep, still.rows), [], later), holds=(other,))
    assert moved.rows[0]["operation"]["waiting"] == "Unschedulable"
    assert moved.rows[0]["lastFailure"]["time"] == rfc(later)
    assert moved.rows[0]["lastFailure"]["message"] == (
        f"Unschedulable: pod {first} is withheld until its capacity is ready: no node fits"
    )

    # Released: the pods are created and the deadline runs from the release (E8).
    released_at = NOW + timedelta(minutes=30)
    released = plan(Observed(with_rows(rep, moved.rows), [], released_at))
    op = released.rows[0]["operation"]
    assert names(released.create) == [
        f"{NAME}-0-{s.runner}-{s.ordinal}" for s in pod_slots(runners)
    ]
    assert op["waiting"] is None
    assert op["deadline"] == rfc(released_at + TIMEOUT)
    assert op["lastProgressAt"] == rfc(released_at)
    assert op["step"] == "WaitReady"
    assert released.rows[0]["phase"] == "Creating"


def test_a_new_wording_of_the_same_hold_waits_until_the_record_has_stood_5s() -> None:
    """E7 with fewer status writes: a Slice's quick passage through its states (no
    partitions, ACTIVATING, ...) is not recorded state by state; the record changes at most
    every ``HOLD_REWORD_AFTER``, and the plan wakes when the new wording is due."""
    rep = replica(single())
    first = plan(Observed(rep, [], NOW), holds=(hold_all("CapacityProvisioning", "no partition"),))
    record = first.rows[0]["lastFailure"]
    activating = hold_all("CapacityProvisioning", "slice s is ACTIVATING")
    soon = NOW + timedelta(seconds=2)
    kept = plan(Observed(with_rows(rep, first.rows), [], soon), holds=(activating,))
    assert kept.rows[0]["lastFailure"] == record, "the record stands: no write for the rewording"
    assert kept.requeue_after == pytest.approx(3.0)
    due = NOW + HOLD_REWORD_AFTER
    reworded = plan(Observed(with_rows(rep, kept.rows), [], due), holds=(activating,))
    assert reworded.rows[0]["lastFailure"]["message"].endswith(": slice s is ACTIVATING")
    assert reworded.rows[0]["lastFailure"]["time"] == rfc(due)
    assert reworded.requeue_after == 5.0
    # Another token is another hold: recorded at once.
    other = plan(
        Observed(with_rows(rep, first.rows), [], soon),
        holds=(hold_all("SliceDemandInvalid", "pods cannot be placed"),),
    )
    assert other.rows[0]["lastFailure"]["reason"] == "SliceDemandInvalid"
    assert other.rows[0]["lastFailure"]["time"] == rfc(soon)


@pytest.mark.parametrize("runners", [single(), multi(size=2)], ids=["single", "multi"])
def test_the_row_counts_the_pods_it_creates_until_the_cache_shows_them(runners: list[JSON]) -> None:
    """One status write for a create: the pass that creates the pods counts them, and so does
    a pass before the cache shows them (they are expected), so podCount never goes back."""
    rep = replica(runners)
    first = plan(Observed(rep, [], NOW))
    count = len(first.create)
    assert first.rows[0]["podCount"] == count
    expected = frozenset(names(first.create))
    lagging = plan(Observed(with_rows(rep, first.rows), [], NOW, expected_new=expected))
    assert lagging.rows[0]["podCount"] == count and lagging.create == []
    shown = [running(p, ready=False) for p in first.create]
    caught_up = plan(Observed(with_rows(rep, lagging.rows), shown, NOW))
    assert caught_up.rows[0]["podCount"] == count
    assert caught_up.rows[0] == lagging.rows[0], "nothing changed: no status write"


def test_the_first_hold_that_answers_wins_and_none_lets_pods_through() -> None:
    rep = replica(single())
    none = plan(Observed(rep, [], NOW), holds=(lambda _r, _i, _p: None,))
    assert len(none.create) == 1 and none.rows[0]["operation"]["waiting"] is None

    both = (hold_all("Unschedulable", "a"), hold_all("CapacityProvisioning", "b"))
    held = plan(Observed(rep, [], NOW), holds=both)
    assert held.rows[0]["operation"]["waiting"] == "Unschedulable"


def test_a_hold_on_one_instance_does_not_hold_the_others() -> None:
    rep = replica(single(), replicas=2)

    def only_1(_r: JSON, index: int, _p: list[JSON]) -> Hold | None:
        return Hold("CapacityProvisioning", "slice pending") if index == 1 else None

    out = plan(Observed(rep, [], NOW), holds=(only_1,))
    assert names(out.create) == [f"{NAME}-0-default-0"]
    assert out.rows[0]["operation"]["waiting"] is None
    assert out.rows[1]["operation"]["waiting"] == "CapacityProvisioning"


@pytest.mark.parametrize("runners", [single(), multi()], ids=["single-pod", "multi-pod"])
def test_all_pods_ready_makes_the_instance_ready(runners: list[JSON]) -> None:
    rep = replica(runners)
    created = plan(Observed(rep, [], NOW))
    later = NOW + timedelta(seconds=42)

    some = instance_pods(rep, 0, ready=False)
    some[1:] = [running(p, ready=True) for p in some[1:]]  # all but the first
    waiting = plan(Observed(with_rows(rep, created.rows), some, later))
    assert waiting.rows[0]["phase"] == "Creating"
    assert waiting.rows[0]["readySince"] is None
    assert waiting.rows[0]["podCount"] == len(some)
    assert waiting.rows[0]["servingPodCount"] == len(some) - 1
    assert waiting.create == [] and waiting.delete == []

    pods = instance_pods(rep, 0)
    ready = plan(Observed(with_rows(rep, waiting.rows), pods, later))
    (row,) = ready.rows
    assert row["phase"] == "Ready"
    assert row["readySince"] == rfc(later)
    assert row["operation"] is None
    assert row["runningRevision"] == revision_hash(runners)
    assert row["podCount"] == row["servingPodCount"] == row["availablePodCount"] == len(pods)
    assert ready.create == [] and ready.delete == [] and ready.requeue_after is None


def test_pods_seen_before_a_create_counts_them_are_not_created_again() -> None:
    rep = replica(single())
    pods = instance_pods(rep, 0)
    out = plan(Observed(rep, pods, NOW))
    assert out.create == [] and out.rows[0]["phase"] == "Ready"


def test_a_ready_instance_whose_pod_turns_unready_waits_and_is_ready_again_since_then() -> None:
    rep = replica(single(), rows=[ready_row(replica(single()), 0)])

    t1 = NOW + timedelta(minutes=1)
    unready = plan(Observed(rep, instance_pods(rep, 0, ready=False), t1))
    (row,) = unready.rows
    assert row["phase"] == "Creating"
    assert row["readySince"] is None
    assert row["operation"] is None
    assert row["servingPodCount"] == 0 and row["podCount"] == 1
    assert unready.create == [] and unready.delete == []

    t2 = NOW + timedelta(minutes=3)
    again = plan(Observed(with_rows(rep, unready.rows), instance_pods(rep, 0), t2))
    (row,) = again.rows
    assert row["phase"] == "Ready"
    assert row["readySince"] == rfc(t2)
    assert row["operation"] is None and row["incarnation"] == 0
    assert again.create == [] and again.delete == []

    # And while it stays Ready, readySince does not move.
    t3 = NOW + timedelta(minutes=5)
    steady = plan(Observed(with_rows(rep, again.rows), instance_pods(rep, 0), t3))
    assert steady.rows[0]["readySince"] == rfc(t2)


def test_pods_just_created_are_not_asked_about_by_holds_again() -> None:
    rep = replica(multi(size=2))
    first = plan(Observed(rep, [], NOW))
    expected = frozenset(names(first.create))
    asked: list[int] = []

    def capacity(_replica: JSON, index: int, _pods: list[JSON]) -> Hold:
        asked.append(index)
        return Hold("CapacityProvisioning", "slice s-0 is waiting for partition assignment")

    # The cache shows the leader but not the workers yet: nothing is left to withhold.
    seen = instance_pods(rep, 0, ready=False)[:1]
    later = NOW + timedelta(seconds=2)
    obs = Observed(with_rows(rep, first.rows), seen, later, expected_new=expected)
    again = plan(obs, holds=(capacity,))
    assert asked == []
    (row,) = again.rows
    assert row["operation"]["waiting"] is None and row["lastFailure"] is None
    assert row["operation"]["deadline"] == first.rows[0]["operation"]["deadline"]
    assert again.create == [] and again.delete == []

    # The same for the pods of an update surge.
    old = replica(single("engine:1"))
    upd = replica(single("engine:2"), rows=[ready_row(old, 0)])
    start = plan(Observed(upd, instance_pods(old, 0), NOW))
    surge = plan(
        Observed(
            with_rows(upd, start.rows),
            instance_pods(old, 0),
            later,
            expected_new=frozenset(names(start.create)),
        ),
        holds=(capacity,),
    )
    assert asked == []
    assert surge.rows[0]["operation"]["waiting"] is None
    assert surge.rows[0]["lastFailure"] is None and surge.create == []


# -- failures ----------------------------------------------------------------------------------


@pytest.mark.parametrize("runners", [single(), multi()], ids=["single-pod", "multi-pod"])
def test_a_failed_pod_rebuilds_its_instance(runners: list[JSON]) -> None:
    base = replica(runners)
    rep = replica(runners, rows=[ready_row(base, 0, incarnation=2)])
    pods = instance_pods(rep, 0, incarnation=2)
    pods[-1] = running(
        pods[-1],
        failed=True,
        terminated={"reason": "OOMKilled", "exitCode": 137, "message": ""},
    )
    out = plan(Observed(rep, pods, NOW))

    (row,) = out.rows
    assert row["incarnation"] == 3
    assert row["phase"] == "Restarting"
    assert row["readySince"] is None
    assert row["operation"]["type"] == "Restart"
    assert row["operation"]["deadline"] == rfc(NOW + TIMEOUT)
    assert row["lastFailure"] == {
        "podName": pods[-1]["metadata"]["name"],
        "containerName": "runner",
        "reason": "OOMKilled",
        "exitCode": 137,
        "message": f"pod {pods[-1]['metadata']['name']} failed",
        "time": rfc(NOW),
    }
    assert sorted(out.delete) == sorted(deletes_of(pods))
    assert out.create == []
    assert out.requeue_after == 0.5

    # Once the old pods are gone, the Instance's pods come back with the new incarnation.
    rebuilt = plan(Observed(with_rows(rep, out.rows), [], NOW + timedelta(seconds=5)))
    assert names(rebuilt.create) == names(pods)
    assert {p["metadata"]["labels"]["ome.io/incarnation"] for p in rebuilt.create} == {"3"}
    assert rebuilt.rows[0]["phase"] == "Restarting"


def test_a_failed_pod_without_container_states_uses_the_pod_reason() -> None:
    rep = replica(single(), rows=[ready_row(replica(single()), 0)])
    (pod,) = instance_pods(rep, 0, failed=True)
    pod["status"]["reason"] = "Evicted"
    pod["status"]["message"] = "The node was low on resource: memory."
    out = plan(Observed(rep, [pod], NOW))
    failure = out.rows[0]["lastFailure"]
    assert failure["reason"] == "Evicted"
    assert failure["message"] == "The node was low on resource: memory."
    assert failure["containerName"] == "" and failure["exitCode"] is None


def test_a_pod_confirmed_gone_rebuilds_a_ready_instance() -> None:
    base = replica(multi())
    rep = replica(multi(), rows=[ready_row(base, 0)])
    pods = instance_pods(rep, 0)
    gone = pods.pop(1)["metadata"]["name"]
    obs = Observed(rep, pods, NOW, confirmed_gone=frozenset({gone}))
    out = plan(obs)

    (row,) = out.rows
    assert row["incarnation"] == 1 and row["phase"] == "Restarting"
    assert row["lastFailure"] == {
        "podName": gone,
        "containerName": "",
        "reason": "PodDeleted",
        "exitCode": None,
        "message": f"pod {gone} of instance 0 was deleted",
        "time": rfc(NOW),
    }
    assert sorted(out.delete) == sorted(deletes_of(pods))


def test_a_pod_only_missing_from_the_cache_is_a_suspect_not_a_rebuild() -> None:
    base = replica(multi())
    rep = replica(multi(), rows=[ready_row(base, 0)])
    pods = instance_pods(rep, 0)
    missing = pods.pop(2)["metadata"]["name"]
    obs = Observed(rep, pods, NOW)

    assert suspects(obs) == [missing]
    out = plan(obs)
    (row,) = out.rows
    # Not rebuilt, and still Ready with the same readySince: a lagging cache is no change.
    assert row["incarnation"] == 0 and row["phase"] == "Ready"
    assert row["readySince"] == ready_row(base, 0)["readySince"]
    assert row["operation"] is None and row["lastFailure"] is None
    assert out.create == [] and out.delete == []


def test_suspects_skip_pods_just_created_and_instances_not_yet_started() -> None:
    base = replica(single(), replicas=3)
    held = {
        **ready_row(base, 1),
        "phase": "Creating",
        "operation": {"type": "Create", "step": "CreatePods", "waiting": "Unschedulable"},
    }
    waiting = {**ready_row(base, 2), "phase": "Creating", "operation": {"step": "WaitReady"}}
    rep = replica(single(), replicas=3, rows=[ready_row(base, 0), held, waiting])
    obs = Observed(rep, [], NOW, expected_new=frozenset({f"{NAME}-0-default-0"}))
    assert suspects(obs) == [f"{NAME}-2-default-0"]


def test_a_terminating_pod_is_a_suspect_of_a_ready_instance() -> None:
    rep = replica(single(), rows=[ready_row(replica(single()), 0, ordinal=1)])
    pods = instance_pods(rep, 0, ordinal=1, terminating=True)
    assert suspects(Observed(rep, pods, NOW)) == [f"{NAME}-0-default-1"]


def test_an_instance_not_ready_by_its_deadline_fails() -> None:
    rep = replica(single())
    created = plan(Observed(rep, [], NOW))
    deadline = created.rows[0]["operation"]["deadline"]
    pods = instance_pods(rep, 0, ready=False)

    before = NOW + TIMEOUT - timedelta(seconds=30)
    waiting = plan(Observed(with_rows(rep, created.rows), pods, before))
    assert waiting.rows[0]["phase"] == "Creating"
    assert waiting.requeue_after == 30.0

    after = NOW + TIMEOUT + timedelta(seconds=1)
    late = plan(Observed(with_rows(rep, waiting.rows), pods, after))
    (row,) = late.rows
    assert row["phase"] == "Failed"
    assert row["operation"]["reason"] == "InstanceReadyTimeout"
    assert row["lastFailure"] == {
        "podName": "",
        "containerName": "",
        "reason": "InstanceReadyTimeout",
        "exitCode": None,
        "message": f"instance 0 was not ready by its deadline {deadline}",
        "time": rfc(after),
    }
    assert late.create == [] and late.delete == []

    # Failed stays Failed (same failure) until the pods are Ready, then it is Ready.
    again = plan(Observed(with_rows(rep, late.rows), pods, after + timedelta(minutes=1)))
    assert again.rows[0]["phase"] == "Failed"
    assert again.rows[0]["lastFailure"] == row["lastFailure"]
    ready_at = after + timedelta(minutes=2)
    healed = plan(Observed(with_rows(rep, again.rows), instance_pods(rep, 0), ready_at))
    assert healed.rows[0]["phase"] == "Ready"
    assert healed.rows[0]["readySince"] == rfc(ready_at)
    assert healed.rows[0]["operation"] is None


@pytest.mark.parametrize("runners", [single(), multi()], ids=["single-pod", "multi-pod"])
def test_a_pod_deleted_while_its_instance_is_unready_rebuilds_it(runners: list[JSON]) -> None:
    base = replica(runners)
    rep = replica(runners, rows=[ready_row(base, 0)])
    t1 = NOW + timedelta(minutes=1)
    unready = plan(Observed(rep, instance_pods(rep, 0, ready=False), t1))
    assert unready.rows[0]["phase"] == "Creating" and unready.rows[0]["operation"] is None

    # A pod of it is deleted: a suspect, and not Ready while it is only unseen.
    pods = instance_pods(rep, 0, ready=False)
    gone = pods.pop(0)["metadata"]["name"]
    t2 = NOW + timedelta(minutes=2)
    obs = Observed(with_rows(rep, unready.rows), pods, t2)
    assert suspects(obs) == [gone]
    unseen = plan(obs)
    assert unseen.rows[0]["phase"] == "Creating"
    assert unseen.rows[0]["podCount"] == len(pods)
    assert unseen.create == [] and unseen.delete == []

    # Confirmed gone: the Instance is rebuilt, as a Ready one would be.
    out = plan(Observed(with_rows(rep, unready.rows), pods, t2, confirmed_gone=frozenset({gone})))
    (row,) = out.rows
    assert row["incarnation"] == 1 and row["phase"] == "Restarting"
    assert row["operation"]["type"] == "Restart"
    assert row["lastFailure"]["reason"] == "PodDeleted"
    assert row["lastFailure"]["podName"] == gone
    assert sorted(out.delete) == sorted(deletes_of(pods))

    rebuilt = plan(Observed(with_rows(rep, out.rows), [], t2 + timedelta(seconds=5)))
    assert names(rebuilt.create) == [f"{NAME}-0-{s.runner}-{s.ordinal}" for s in pod_slots(runners)]
    assert {p["metadata"]["labels"]["ome.io/incarnation"] for p in rebuilt.create} == {"1"}


def test_a_stale_failed_pod_of_an_earlier_incarnation_does_not_restart_again() -> None:
    base = replica(single())
    rep = replica(single(), rows=[ready_row(base, 0, incarnation=2)])
    (failed,) = instance_pods(rep, 0, incarnation=2, failed=True)
    out = plan(Observed(rep, [failed], NOW))
    assert out.rows[0]["incarnation"] == 3 and out.delete == deletes_of([failed])

    # The cache still shows the failed pod as it was: the restart goes on as it is.
    later = NOW + timedelta(seconds=1)
    stale = plan(Observed(with_rows(rep, out.rows), [failed], later))
    (row,) = stale.rows
    assert row["incarnation"] == 3 and row["phase"] == "Restarting"
    assert row["operation"]["id"] == out.rows[0]["operation"]["id"]
    assert row["lastFailure"] == out.rows[0]["lastFailure"]
    assert stale.create == []

    # A failed pod of the current incarnation still restarts it.
    (again,) = instance_pods(rep, 0, incarnation=3, failed=True)
    fresh = plan(Observed(with_rows(rep, stale.rows), [again], later))
    assert fresh.rows[0]["incarnation"] == 4


# -- scale -------------------------------------------------------------------------------------


@pytest.mark.parametrize("runners", [single(), multi()], ids=["single-pod", "multi-pod"])
def test_scale_down_deletes_the_highest_instances_pods_first_then_their_rows(
    runners: list[JSON],
) -> None:
    base = replica(runners)
    rep = replica(runners, replicas=1, rows=[ready_row(base, i) for i in range(3)])
    pods = [p for i in range(3) for p in instance_pods(base, i)]
    out = plan(Observed(rep, pods, NOW))

    doomed = [p for p in pods if p["metadata"]["labels"]["ome.io/instance-index"] in ("1", "2")]
    assert sorted(out.delete) == sorted(deletes_of(doomed))
    assert out.create == []
    assert [(r["index"], r["phase"]) for r in out.rows] == [
        (0, "Ready"),
        (1, "Deleting"),
        (2, "Deleting"),
    ]
    for row in out.rows[1:]:
        assert row["operation"]["type"] == "Delete"
    assert out.rows[0]["operation"] is None

    # Index 2's pods are gone, index 1's are still terminating.
    kept = instance_pods(base, 0) + instance_pods(base, 1, terminating=True)
    mid = plan(Observed(with_rows(rep, out.rows), kept, NOW + timedelta(seconds=5)))
    assert [(r["index"], r["phase"]) for r in mid.rows] == [(0, "Ready"), (1, "Deleting")]
    assert mid.create == []

    done = plan(
        Observed(with_rows(rep, mid.rows), instance_pods(base, 0), NOW + timedelta(seconds=9))
    )
    assert [(r["index"], r["phase"]) for r in done.rows] == [(0, "Ready")]
    assert done.create == [] and done.delete == []


def test_scale_to_zero_removes_every_instance() -> None:
    base = replica(single())
    rep = replica(single(), replicas=0, rows=[ready_row(base, 0), ready_row(base, 1)])
    pods = instance_pods(base, 0) + instance_pods(base, 1)
    out = plan(Observed(rep, pods, NOW))
    assert sorted(out.delete) == sorted(deletes_of(pods))
    assert {r["phase"] for r in out.rows} == {"Deleting"}
    gone = plan(Observed(with_rows(rep, out.rows), [], NOW))
    assert gone.rows == [] and gone.delete == [] and gone.create == []


def test_a_row_without_pods_goes_at_once_on_scale_down() -> None:
    base = replica(single())
    rep = replica(single(), replicas=1, rows=[ready_row(base, 0), ready_row(base, 1)])
    out = plan(Observed(rep, instance_pods(base, 0), NOW))
    assert [r["index"] for r in out.rows] == [0] and out.delete == []


@pytest.mark.parametrize(
    ("existing", "replicas", "added"),
    [
        ([0], 3, [1, 2]),
        ([1], 2, [0]),
        ([0, 2], 4, [1, 3]),
        ([], 2, [0, 1]),
    ],
)
def test_scale_up_fills_the_lowest_free_indexes(
    existing: list[int], replicas: int, added: list[int]
) -> None:
    base = replica(single())
    rep = replica(single(), replicas=replicas, rows=[ready_row(base, i) for i in existing])
    pods = [p for i in existing for p in instance_pods(base, i)]
    out = plan(Observed(rep, pods, NOW))

    assert [r["index"] for r in out.rows] == sorted(existing + added)
    assert names(out.create) == [f"{NAME}-{i}-default-0" for i in added]
    for row in out.rows:
        if row["index"] in added:
            assert row["phase"] == "Creating" and row["operation"]["type"] == "Create"
        else:
            assert row["phase"] == "Ready"
    assert out.delete == []


def test_scale_up_skips_an_index_a_multi_pod_surge_uses() -> None:
    rep = replica(multi("engine:2"))
    row = {
        **ready_row(replica(multi()), 0),
        "phase": "Updating",
        "operation": {
            "id": "update-1",
            "type": "Update",
            "step": "WaitReady",
            "deadline": rfc(NOW + TIMEOUT),
            "reason": "",
            "waiting": None,
            "surgeIndex": 1,
        },
    }
    scaled = replica(multi("engine:2"), replicas=2, rows=[row])
    pods = instance_pods(replica(multi()), 0) + instance_pods(rep, 1, ready=False)
    out = plan(Observed(scaled, pods, NOW))
    assert [r["index"] for r in out.rows] == [0, 2]
    assert out.rows[1]["operation"]["type"] == "Create"
    assert out.delete == []  # the surge pods at index 1 are not strays


def test_a_scaled_down_instance_scaled_up_again_starts_afresh() -> None:
    base = replica(single())
    rep = replica(single(), replicas=1, rows=[ready_row(base, 0), ready_row(base, 1)])
    pods = instance_pods(base, 0) + instance_pods(base, 1)
    down = plan(Observed(rep, pods, NOW))
    assert down.rows[1]["phase"] == "Deleting"

    later = NOW + timedelta(seconds=3)
    up = replica(single(), replicas=2, rows=down.rows)
    out = plan(
        Observed(up, instance_pods(base, 0) + instance_pods(base, 1, terminating=True), later)
    )
    row = out.rows[1]
    assert row["phase"] == "Creating" and row["incarnation"] == 0
    assert row["operation"]["type"] == "Create" and row["operation"]["startedAt"] == rfc(later)
    # Its pod of the same name is still going away: no create yet, and a quick look back.
    assert out.create == [] and out.requeue_after == 1.0


def test_pods_at_an_index_no_row_owns_are_deleted() -> None:
    base = replica(single())
    rep = replica(single(), replicas=1, rows=[ready_row(base, 0)])
    strays = instance_pods(base, 4) + instance_pods(base, 7, ordinal=1, ready=False)
    odd = running(build_pod(base, 0, PodSlot("default", 0, template()), "r", 0))
    odd["metadata"]["name"] = "hand-made"
    odd["metadata"]["labels"].pop("ome.io/instance-index")
    out = plan(Observed(rep, instance_pods(base, 0) + strays + [odd], NOW))
    assert sorted(out.delete) == sorted(deletes_of(strays))
    assert [r["index"] for r in out.rows] == [0] and out.create == []


def test_a_pod_of_the_instance_at_a_stale_ordinal_is_deleted() -> None:
    base = replica(single())
    rep = replica(single(), rows=[ready_row(base, 0, ordinal=1)])
    stale = instance_pods(base, 0, ordinal=0)
    out = plan(Observed(rep, instance_pods(base, 0, ordinal=1) + stale, NOW))
    assert out.delete == deletes_of(stale)
    assert out.rows[0]["phase"] == "Ready" and out.create == []


def test_pods_expected_new_are_not_created_again() -> None:
    rep = replica(multi(size=2))
    first = plan(Observed(rep, [], NOW))
    expected = frozenset(names(first.create))
    later = NOW + timedelta(seconds=2)
    # The cache shows the leader but not the workers yet.
    seen = instance_pods(rep, 0, ready=False)[:1]
    again = plan(Observed(with_rows(rep, first.rows), seen, later, expected_new=expected))
    assert again.create == [] and again.delete == []
    assert again.rows[0]["phase"] == "Creating"
    assert again.rows[0]["operation"]["step"] == "WaitReady"
    # Without the expectation, the missing workers would be created.
    lost = plan(Observed(with_rows(rep, first.rows), seen, later))
    assert names(lost.create) == [f"{NAME}-0-worker-0", f"{NAME}-0-worker-1"]


def test_a_deleting_instance_keeps_its_delete_and_spares_terminating_pods() -> None:
    base = replica(single())
    rep = replica(single(), replicas=1, rows=[ready_row(base, 0), ready_row(base, 1)])
    pods = instance_pods(base, 0) + instance_pods(base, 1)
    down = plan(Observed(rep, pods, NOW))
    assert down.rows[1]["operation"]["id"] == "delete-1"

    # The cache still shows the pod: the same status (nothing to write), the same operation.
    again = plan(Observed(with_rows(rep, down.rows), pods, NOW + timedelta(seconds=2)))
    assert again.rows == down.rows

    # The pod is terminating: it is not deleted again, and still nothing changes.
    going = instance_pods(base, 0) + instance_pods(base, 1, terminating=True)
    later = plan(Observed(with_rows(rep, again.rows), going, NOW + timedelta(seconds=4)))
    assert later.rows == down.rows
    assert later.delete == [] and later.create == []


# -- update (surge) ----------------------------------------------------------------------------


def test_a_single_pod_update_surges_to_the_other_ordinal_then_retires_the_old_pod() -> None:
    old = replica(single("engine:1"))
    new_runners = single("engine:2")
    rev = revision_hash(new_runners)
    rep = replica(new_runners, rows=[ready_row(old, 0)])
    old_pods = instance_pods(old, 0)

    start = plan(Observed(rep, old_pods, NOW))
    (row,) = start.rows
    assert row["phase"] == "Updating"
    op = row["operation"]
    assert op["type"] == "Update" and op["targetRevision"] == rev
    assert op["surgeIndex"] is None and op["step"] == "SurgePods"
    assert op["deadline"] == rfc(NOW + TIMEOUT)
    assert row["targetRevision"] == rev and row["runningRevision"] == revision_hash(single())
    assert names(start.create) == [f"{NAME}-0-default-1"]
    labels = start.create[0]["metadata"]["labels"]
    assert labels["ome.io/pod-ordinal"] == "1" and labels["ome.io/revision-hash"] == rev
    assert start.delete == []

    surge = [running(start.create[0], ready=False)]
    t1 = NOW + timedelta(seconds=20)
    waiting = plan(Observed(with_rows(rep, start.rows), old_pods + surge, t1))
    assert waiting.rows[0]["phase"] == "Updating"
    assert waiting.rows[0]["operation"]["step"] == "WaitReady"
    assert waiting.delete == [] and waiting.create == []

    surge = [running(start.create[0], ready=True)]
    t2 = NOW + timedelta(seconds=60)
    done = plan(Observed(with_rows(rep, waiting.rows), old_pods + surge, t2))
    (row,) = done.rows
    assert done.delete == deletes_of(old_pods)
    assert done.create == []
    assert row["phase"] == "Ready" and row["operation"] is None
    assert row["activeOrdinal"] == 1 and row["index"] == 0
    assert row["runningRevision"] == rev and row["readySince"] == rfc(t2)

    # The next change surges back to ordinal 0.
    newer = replica(single("engine:3"), rows=done.rows)
    back = plan(Observed(newer, surge, t2 + timedelta(minutes=1)))
    assert names(back.create) == [f"{NAME}-0-default-0"]


def test_a_multi_pod_update_surges_to_a_new_index_then_retires_the_old_pods() -> None:
    old = replica(multi("engine:1"))
    new_runners = multi("engine:2")
    rev = revision_hash(new_runners)
    rep = replica(new_runners, replicas=2, rows=[ready_row(old, 0), ready_row(old, 1)])
    old_pods = instance_pods(old, 0) + instance_pods(old, 1)

    start = plan(Observed(rep, old_pods, NOW))
    surges = [r["operation"]["surgeIndex"] for r in start.rows]
    assert surges == [2, 3]
    assert [r["phase"] for r in start.rows] == ["Updating", "Updating"]
    assert names(start.create) == [
        f"{NAME}-{i}-{r}-{o}"
        for i in (2, 3)
        for r, o in (("leader", 0), ("worker", 0), ("worker", 1))
    ]
    assert {p["metadata"]["labels"]["ome.io/revision-hash"] for p in start.create} == {rev}
    assert start.delete == []

    new_pods = [running(p, ready=False) for p in start.create]
    t1 = NOW + timedelta(seconds=30)
    waiting = plan(Observed(with_rows(rep, start.rows), old_pods + new_pods, t1))
    assert waiting.delete == [] and waiting.create == []  # surge pods are not strays
    assert [r["operation"]["step"] for r in waiting.rows] == ["WaitReady", "WaitReady"]

    # Instance 0's new pods are Ready: its old pods go, and it moves to index 2.
    new_pods = [running(p, ready=p["metadata"]["name"].startswith(f"{NAME}-2-")) for p in new_pods]
    t2 = NOW + timedelta(seconds=90)
    moved = plan(Observed(with_rows(rep, waiting.rows), old_pods + new_pods, t2))
    assert sorted(moved.delete) == sorted(deletes_of(instance_pods(old, 0)))
    assert [(r["index"], r["phase"]) for r in moved.rows] == [(1, "Updating"), (2, "Ready")]
    row = moved.rows[1]
    assert row["runningRevision"] == rev and row["operation"] is None
    assert row["readySince"] == rfc(t2)
    assert moved.create == []

    # Its old pods gone, index 0 is free for scale up again.
    left = instance_pods(old, 1) + new_pods
    after = plan(Observed(with_rows(rep, moved.rows), left, t2 + timedelta(seconds=5)))
    assert after.delete == []
    assert [(r["index"], r["phase"]) for r in after.rows] == [(1, "Updating"), (2, "Ready")]


def test_an_update_waits_for_an_unready_instance_to_be_ready_again() -> None:
    old = replica(single("engine:1"))
    unready = instance_pods(old, 0, ready=False)
    first = plan(Observed(replica(single("engine:1"), rows=[ready_row(old, 0)]), unready, NOW))
    assert first.rows[0]["phase"] == "Creating"

    rep = replica(single("engine:2"), rows=first.rows)
    t1 = NOW + timedelta(seconds=10)
    out = plan(Observed(rep, unready, t1))
    assert out.rows[0]["phase"] == "Creating" and out.rows[0]["operation"] is None
    assert out.create == [] and out.delete == []

    t2 = NOW + timedelta(seconds=20)
    ready = plan(Observed(with_rows(rep, out.rows), instance_pods(old, 0), t2))
    assert ready.rows[0]["phase"] == "Ready"
    assert ready.rows[0]["runningRevision"] == revision_hash(single("engine:1"))
    rolls = plan(Observed(with_rows(rep, ready.rows), instance_pods(old, 0), t2))
    assert rolls.rows[0]["phase"] == "Updating"
    assert names(rolls.create) == [f"{NAME}-0-default-1"]


def test_an_update_surge_can_be_held() -> None:
    old = replica(single("engine:1"))
    rep = replica(single("engine:2"), rows=[ready_row(old, 0)])
    hold = hold_all("CapacityProvisioning", "slice s-0-1 is waiting for partition assignment")
    out = plan(Observed(rep, instance_pods(old, 0), NOW), holds=(hold,))
    (row,) = out.rows
    assert row["phase"] == "Updating"
    assert row["operation"]["waiting"] == "CapacityProvisioning"
    assert row["operation"]["deadline"] is None
    assert row["lastFailure"]["podName"] == f"{NAME}-0-default-1"
    assert out.create == [] and out.delete == []


def test_expected_new_surge_pods_are_not_created_again() -> None:
    old = replica(single("engine:1"))
    rep = replica(single("engine:2"), rows=[ready_row(old, 0)])
    start = plan(Observed(rep, instance_pods(old, 0), NOW))
    again = plan(
        Observed(
            with_rows(rep, start.rows),
            instance_pods(old, 0),
            NOW + timedelta(seconds=1),
            expected_new=frozenset(names(start.create)),
        )
    )
    assert again.create == [] and again.delete == []
    assert again.rows[0]["phase"] == "Updating"


def test_a_multi_pod_surge_never_takes_an_index_with_a_row_or_pods() -> None:
    old = replica(multi("engine:1"))
    # Scale down and a template change in one spec: index 1 is Deleting, its pods still there.
    rep = replica(multi("engine:2"), replicas=1, rows=[ready_row(old, 0), ready_row(old, 1)])
    pods = instance_pods(old, 0) + instance_pods(old, 1)
    out = plan(Observed(rep, pods, NOW))
    assert [(r["index"], r["phase"]) for r in out.rows] == [(0, "Updating"), (1, "Deleting")]
    assert out.rows[0]["operation"]["surgeIndex"] == 2
    assert sorted(out.delete) == sorted(deletes_of(instance_pods(old, 1)))
    assert names(out.create) == [
        f"{NAME}-2-{r}-{o}" for r, o in (("leader", 0), ("worker", 0), ("worker", 1))
    ]

    # Strays, terminating or not, hold their indexes too.
    rep = replica(multi("engine:2"), replicas=1, rows=[ready_row(old, 0)])
    terminating = instance_pods(old, 1, terminating=True)
    strays = instance_pods(old, 2)
    out = plan(Observed(rep, instance_pods(old, 0) + terminating + strays, NOW))
    assert out.rows[0]["operation"]["surgeIndex"] == 3
    assert out.rows[0]["phase"] == "Updating"
    assert sorted(out.delete) == sorted(deletes_of(strays))
    assert {p["metadata"]["labels"]["ome.io/instance-index"] for p in out.create} == {"3"}


@pytest.mark.parametrize(
    ("old_runners", "new_runners", "surged"),
    [
        (single("engine:1"), single("engine:2"), [f"{NAME}-0-default-1"]),
        (
            multi("engine:1"),
            multi("engine:2"),
            [f"{NAME}-1-leader-0", f"{NAME}-1-worker-0", f"{NAME}-1-worker-1"],
        ),
    ],
    ids=["single-pod", "multi-pod"],
)
def test_a_template_change_during_a_create_rolls_out_once_the_old_pods_are_ready(
    old_runners: list[JSON], new_runners: list[JSON], surged: list[str]
) -> None:
    old = replica(old_runners)
    created = plan(Observed(old, [], NOW))
    rep = replica(new_runners, rows=created.rows)  # the template changes
    t1 = NOW + timedelta(seconds=20)
    waiting = plan(Observed(rep, instance_pods(old, 0, ready=False), t1))
    assert waiting.rows[0]["phase"] == "Creating" and waiting.create == []

    t2 = NOW + timedelta(seconds=40)
    ready = plan(Observed(with_rows(rep, waiting.rows), instance_pods(old, 0), t2))
    (row,) = ready.rows
    assert row["phase"] == "Ready"
    assert row["runningRevision"] == revision_hash(old_runners)
    assert row["targetRevision"] == revision_hash(new_runners)

    rolls = plan(Observed(with_rows(rep, ready.rows), instance_pods(old, 0), t2))
    assert rolls.rows[0]["phase"] == "Updating"
    assert names(rolls.create) == surged
    assert {p["metadata"]["labels"]["ome.io/revision-hash"] for p in rolls.create} == {
        revision_hash(new_runners)
    }


def test_a_template_change_during_a_surge_rolls_again_once_it_is_done() -> None:
    v1, v2, v3 = replica(single("engine:1")), replica(single("engine:2")), single("engine:3")
    rep = replica(single("engine:2"), rows=[ready_row(v1, 0)])
    start = plan(Observed(rep, instance_pods(v1, 0), NOW))
    newer = replica(v3, rows=start.rows)
    surge = instance_pods(v2, 0, ordinal=1)  # made at engine:2, Ready
    t1 = NOW + timedelta(seconds=30)
    done = plan(Observed(newer, instance_pods(v1, 0) + surge, t1))
    (row,) = done.rows
    assert row["phase"] == "Ready" and row["activeOrdinal"] == 1
    assert row["runningRevision"] == revision_hash(single("engine:2"))

    rolls = plan(Observed(with_rows(newer, done.rows), surge, t1 + timedelta(seconds=5)))
    assert rolls.rows[0]["phase"] == "Updating"
    assert names(rolls.create) == [f"{NAME}-0-default-0"]


def test_an_update_does_not_create_a_pod_whose_name_a_terminating_pod_holds() -> None:
    old = replica(single("engine:1"))
    rep = replica(single("engine:2"), rows=[ready_row(old, 0, ordinal=1)])
    serving = instance_pods(old, 0, ordinal=1)
    going = instance_pods(old, 0, ordinal=0, terminating=True)
    out = plan(Observed(rep, serving + going, NOW))
    (row,) = out.rows
    assert row["phase"] == "Updating" and row["operation"]["type"] == "Update"
    assert out.create == [] and out.delete == []
    assert out.requeue_after == 1.0

    gone = plan(Observed(with_rows(rep, out.rows), serving, NOW + timedelta(seconds=3)))
    assert names(gone.create) == [f"{NAME}-0-default-0"]
    assert gone.rows[0]["operation"]["id"] == row["operation"]["id"]


def test_a_failed_single_pod_surge_pod_is_retried_and_the_serving_pod_stays() -> None:
    old = replica(single("engine:1"))
    rep = replica(single("engine:2"), rows=[ready_row(old, 0)])
    serving = instance_pods(old, 0)
    start = plan(Observed(rep, serving, NOW))
    crashed = {"reason": "Error", "exitCode": 1, "message": "bad flag"}
    surge = running(start.create[0], failed=True, terminated=crashed)

    t1 = NOW + timedelta(seconds=30)
    failed = plan(Observed(with_rows(rep, start.rows), [*serving, surge], t1))
    (row,) = failed.rows
    assert row["phase"] == "Updating" and row["incarnation"] == 0
    assert row["activeOrdinal"] == 0 and row["runningRevision"] == revision_hash(single())
    op = row["operation"]
    assert op["type"] == "Update" and op["id"] == start.rows[0]["operation"]["id"]
    assert op["retryCount"] == 1
    assert row["lastFailure"] == {
        "podName": f"{NAME}-0-default-1",
        "containerName": "runner",
        "reason": "Error",
        "exitCode": 1,
        "message": "bad flag",
        "time": rfc(t1),
    }
    assert failed.delete == deletes_of([surge])
    assert failed.create == []

    # The cache still shows the failed pod: it is not counted again.
    t2 = t1 + timedelta(seconds=1)
    stale = plan(Observed(with_rows(rep, failed.rows), [*serving, surge], t2))
    assert stale.rows[0]["operation"]["retryCount"] == 1
    assert stale.rows[0]["lastFailure"] == row["lastFailure"]
    assert set(stale.delete) <= set(deletes_of([surge])) and stale.create == []

    # Gone: the surge pod is made again.
    t3 = t2 + timedelta(seconds=1)
    retry = plan(Observed(with_rows(rep, stale.rows), serving, t3))
    assert names(retry.create) == [f"{NAME}-0-default-1"]
    assert retry.delete == []
    assert retry.rows[0]["phase"] == "Updating"
    assert retry.rows[0]["operation"]["retryCount"] == 1


def test_a_failed_multi_pod_surge_pod_is_retried_and_the_serving_pods_stay() -> None:
    old = replica(multi("engine:1"))
    rep = replica(multi("engine:2"), rows=[ready_row(old, 0)])
    serving = instance_pods(old, 0)
    start = plan(Observed(rep, serving, NOW))
    assert start.rows[0]["operation"]["surgeIndex"] == 1
    oom = {"reason": "OOMKilled", "exitCode": 137, "message": ""}
    surge = [running(p, ready=False) for p in start.create]
    surge[2] = running(start.create[2], failed=True, terminated=oom)

    t1 = NOW + timedelta(seconds=30)
    failed = plan(Observed(with_rows(rep, start.rows), serving + surge, t1))
    (row,) = failed.rows
    assert row["index"] == 0 and row["phase"] == "Updating" and row["incarnation"] == 0
    assert row["operation"]["retryCount"] == 1 and row["operation"]["surgeIndex"] == 1
    assert row["lastFailure"]["podName"] == f"{NAME}-1-worker-1"
    assert row["lastFailure"]["reason"] == "OOMKilled"
    assert sorted(failed.delete) == sorted(deletes_of(surge))  # the surge pods, together
    assert failed.create == []

    # Going: nothing is made while their names are held.
    going = [running(p, ready=False, terminating=True) for p in start.create]
    t2 = t1 + timedelta(seconds=2)
    waiting = plan(Observed(with_rows(rep, failed.rows), serving + going, t2))
    assert waiting.create == [] and waiting.delete == []
    assert waiting.rows[0]["operation"]["retryCount"] == 1

    # Gone: the surge is made again, beside the serving pods.
    t3 = t2 + timedelta(seconds=2)
    retry = plan(Observed(with_rows(rep, waiting.rows), serving, t3))
    assert names(retry.create) == names(start.create)
    assert retry.delete == []
    assert retry.rows[0]["index"] == 0 and retry.rows[0]["phase"] == "Updating"


# -- properties --------------------------------------------------------------------------------

POD_STATES = ("absent", "ready", "unready", "failed", "terminating")
ROW_KINDS = ("Ready", "Unready", "Create", "Held", "Restart", "Failed", "Update", "Deleting")


@dataclass(frozen=True)
class HoldIndexes:
    """A hold on some Instance indexes (a plain value, so examples print well)."""

    indexes: frozenset[int]
    token: str = "CapacityProvisioning"

    def __call__(self, _replica: JSON, index: int, _pods: list[JSON]) -> Hold | None:
        return Hold(self.token, "slice pending") if index in self.indexes else None


def _op(kind: str, draw: Any, rev: str, surge: int | None = None) -> JSON:
    deadline = draw(st.sampled_from([None, NOW - timedelta(minutes=1), NOW + TIMEOUT]))
    return {
        "id": f"{kind.lower()}-{draw(st.integers(0, 3))}",
        "type": kind,
        "step": draw(st.sampled_from(["CreatePods", "WaitReady", "SurgePods", "RetrySurge"])),
        "startedAt": rfc(NOW - timedelta(minutes=5)),
        "lastProgressAt": rfc(NOW - timedelta(minutes=5)),
        "deadline": rfc(deadline) if deadline else None,
        "retryCount": 0,
        "targetRevision": rev,
        "reason": "",
        "waiting": None,
        "capacityRefusedAt": None,
        "surgeIndex": surge,
    }


@st.composite
def observations(draw: Any) -> Case:
    """A replica mid-life: rows in any phase, their pods in any state, strays, suspects
    confirmed gone, pods just created and holds."""
    is_multi = draw(st.booleans())
    size = draw(st.integers(1, 2))
    new = multi("engine:2", size) if is_multi else single("engine:2")
    old = multi("engine:1", size) if is_multi else single("engine:1")
    new_rep, old_rep = replica(new), replica(old)
    replicas = draw(st.integers(0, 5))
    indexes = sorted(draw(st.sets(st.integers(0, 6), max_size=6)))
    used = set(indexes)
    rows: list[JSON] = []
    pods: list[JSON] = []
    wanted_names: set[str] = set()

    def add_pods(rep: JSON, index: int, ordinal: int, incarnation: int) -> None:
        for slot in pod_slots(rep["spec"]["runners"], ordinal):
            name = pod_name(NAME, index, slot.runner, slot.ordinal)
            wanted_names.add(name)
            state = draw(st.sampled_from(POD_STATES))
            if state == "absent":
                continue
            pod = build_pod(rep, index, slot, revision_hash(rep["spec"]["runners"]), incarnation)
            pods.append(
                running(
                    pod,
                    ready=state == "ready",
                    failed=state == "failed",
                    terminating=state == "terminating",
                )
            )

    for index in indexes:
        kind = draw(st.sampled_from(ROW_KINDS))
        source = draw(st.sampled_from([old_rep, new_rep]))
        ordinal = 0 if is_multi else draw(st.integers(0, 1))
        incarnation = draw(st.integers(0, 2))
        row = ready_row(source, index, ordinal, incarnation)
        rev = revision_hash(new)
        if kind == "Unready":
            row.update(phase="Creating", readySince=None)
        elif kind in ("Create", "Held", "Restart"):
            row.update(
                phase="Restarting" if kind == "Restart" else "Creating",
                readySince=None,
                targetRevision=rev,
                runningRevision="" if kind == "Create" else row["runningRevision"],
                operation=_op("Restart" if kind == "Restart" else "Create", draw, rev),
            )
            if kind == "Held":
                row["operation"].update(waiting="CapacityProvisioning", deadline=None)
        elif kind == "Failed":
            row.update(phase="Failed", readySince=None, operation=_op("Create", draw, rev))
            row["operation"].update(step="WaitReady", reason="InstanceReadyTimeout")
        elif kind == "Update":
            source = old_rep
            row = ready_row(old_rep, index, ordinal, incarnation)
            surge = None
            if is_multi:
                surge = min(i for i in range(7, 20) if i not in used)
                used.add(surge)
                add_pods(new_rep, surge, 0, incarnation)
            else:
                add_pods(new_rep, index, 1 - ordinal, incarnation)
            row.update(
                phase="Updating", targetRevision=rev, operation=_op("Update", draw, rev, surge)
            )
        elif kind == "Deleting":
            row.update(phase="Deleting", operation=_op("Delete", draw, rev))
        rows.append(row)
        add_pods(source, index, ordinal, incarnation)

    for index in draw(st.sets(st.integers(0, 9), max_size=2)):
        if index not in used:  # strays from an older state
            add_pods(draw(st.sampled_from([old_rep, new_rep])), index, 0, 0)

    candidates = sorted(wanted_names)
    subsets = st.sets(st.sampled_from(candidates), max_size=3) if candidates else st.just(set())
    gone = frozenset(draw(subsets))
    expected = frozenset(draw(subsets))
    held = frozenset(draw(st.sets(st.integers(0, 12), max_size=3)))
    holds = (HoldIndexes(held),) if held else ()
    now = NOW + timedelta(seconds=draw(st.integers(0, 3600)))
    rep = replica(new, replicas=replicas, rows=rows)
    going = (
        frozenset(draw(st.sets(st.sampled_from([_n(p) for p in pods]), max_size=2)))
        if pods
        else frozenset()
    )
    obs = Observed(rep, pods, now, expected_new=expected, confirmed_gone=gone, going=going)
    return Case(obs, holds)


def _n(pod: JSON) -> str:
    return str(pod["metadata"]["name"])


@dataclass(frozen=True)
class Case:
    """An observation and the holds its gates would answer."""

    obs: Observed
    holds: tuple[HoldIndexes, ...] = ()

    @property
    def held(self) -> frozenset[int]:
        return self.holds[0].indexes if self.holds else frozenset()


PROPERTY = settings(max_examples=120, deadline=None)


@PROPERTY
@given(observations())
def test_plan_never_raises_is_deterministic_and_leaves_its_input_alone(case: Case) -> None:
    obs = case.obs
    replica_before = copy.deepcopy(obs.replica)
    pods_before = copy.deepcopy(obs.pods)
    first = plan(obs, case.holds)
    second = plan(obs, case.holds)
    assert isinstance(first, Plan)
    assert first == second
    assert obs.replica == replica_before
    assert obs.pods == pods_before
    assert suspects(obs) == suspects(obs)
    assert obs.replica == replica_before


@PROPERTY
@given(observations())
def test_plan_deletes_only_observed_pods_by_their_uid(case: Case) -> None:
    obs = case.obs
    out = plan(obs, case.holds)
    observed = {(p["metadata"]["name"], p["metadata"]["uid"]) for p in obs.pods}
    assert set(out.delete) <= observed


@PROPERTY
@given(observations())
def test_a_pod_whose_delete_is_on_its_way_is_never_deleted_again(case: Case) -> None:
    out = plan(case.obs, case.holds)
    assert not {name for name, _uid in out.delete} & case.obs.going


@PROPERTY
@given(observations())
def test_plan_keeps_exactly_replicas_instances_that_are_not_deleting(case: Case) -> None:
    obs = case.obs
    out = plan(obs, case.holds)
    serving = [r["index"] for r in out.rows if r["phase"] != "Deleting"]
    assert len(serving) == len(set(serving)) == obs.replica["spec"]["replicas"]
    assert [r["index"] for r in out.rows] == sorted(r["index"] for r in out.rows)


@PROPERTY
@given(observations())
def test_plan_creates_only_pods_that_are_wanted_unseen_and_unexpected(case: Case) -> None:
    obs = case.obs
    out = plan(obs, case.holds)
    created = names(out.create)
    live = {p["metadata"]["name"] for p in obs.pods if not p["metadata"].get("deletionTimestamp")}
    assert len(created) == len(set(created))
    assert not set(created) & live
    assert not set(created) & obs.expected_new
    for pod in out.create:
        assert pod["metadata"]["labels"]["ome.io/revision-hash"] == revision_hash(
            obs.replica["spec"]["runners"]
        )
        assert pod["metadata"]["labels"][LABEL_INFERENCE_REPLICA] == NAME


@PROPERTY
@given(observations())
def test_held_instances_get_no_pods_and_a_parked_deadline(case: Case) -> None:
    obs = case.obs
    out = plan(obs, case.holds)
    held = case.held
    for pod in out.create:
        assert int(pod["metadata"]["labels"]["ome.io/instance-index"]) not in held
    for row in out.rows:
        op = row.get("operation") or {}
        if op.get("waiting"):
            assert op["deadline"] is None
            assert row["lastFailure"]["reason"] == op["waiting"]


@PROPERTY
@given(observations())
def test_plan_never_creates_and_deletes_the_same_pod_name(case: Case) -> None:
    obs = case.obs
    out = plan(obs, case.holds)
    assert not set(names(out.create)) & {name for name, _uid in out.delete}


def test_runners_that_turn_multi_pod_mid_update_move_the_surge_to_a_new_index() -> None:
    old = replica(single("engine:1"))
    rep = replica(single("engine:2"), rows=[ready_row(old, 0)])
    old_pods = instance_pods(old, 0)
    start = plan(Observed(rep, old_pods, NOW))
    assert start.rows[0]["operation"]["surgeIndex"] is None
    # Before the single-pod surge is done, the runners become a leader and workers.
    now_multi = replica(multi("engine:3"), rows=start.rows)
    moved = plan(Observed(now_multi, old_pods, NOW + timedelta(seconds=5)))
    op = moved.rows[0]["operation"]
    assert op["type"] == "Update" and op["surgeIndex"] == 1
    assert all(p["metadata"]["labels"]["ome.io/instance-index"] == "1" for p in moved.create)
    assert moved.delete == [], "the serving pod stays until the surge is Ready"
    # And back to single-pod: the surge returns beside the serving pod.
    back = plan(Observed(replica(single("engine:4"), rows=moved.rows), old_pods, NOW))
    assert back.rows[0]["operation"]["surgeIndex"] is None
    assert names(back.create) == [f"{NAME}-0-default-1"]


def test_a_routine_rewording_of_a_hold_waits_until_the_record_has_stood_30s() -> None:
    """E7 with fewer status writes at scale: between two wordings that only say the capacity
    is on its way (``Hold.routine``), the record stands ``HOLD_ROUTINE_REWORD_AFTER``; a
    wording that is news (here a failure) still replaces it after ``HOLD_REWORD_AFTER``."""
    routine = messages.on_its_way
    rep = replica(single())
    waiting = hold_all(
        "CapacityProvisioning", "slice s is waiting for partition assignment", routine
    )
    first = plan(Observed(rep, [], NOW), holds=(waiting,))
    record = first.rows[0]["lastFailure"]
    activating = hold_all("CapacityProvisioning", "slice s is ACTIVATING: booting", routine)
    later = NOW + HOLD_REWORD_AFTER + timedelta(seconds=1)
    kept = plan(Observed(with_rows(rep, first.rows), [], later), holds=(activating,))
    assert kept.rows[0]["lastFailure"] == record, "a routine rewording waits"
    assert kept.requeue_after == pytest.approx(24.0)
    due = NOW + HOLD_ROUTINE_REWORD_AFTER
    reworded = plan(Observed(with_rows(rep, kept.rows), [], due), holds=(activating,))
    assert reworded.rows[0]["lastFailure"]["message"].endswith(": slice s is ACTIVATING: booting")
    failed = hold_all("CapacityProvisioning", "slice s is FAILED: no capacity", routine)
    news = plan(Observed(with_rows(rep, first.rows), [], later), holds=(failed,))
    assert news.rows[0]["lastFailure"]["message"].endswith(": slice s is FAILED: no capacity")


def test_a_hold_on_a_slice_on_its_way_waits_on_the_slices_events_not_a_poll() -> None:
    """A held Instance whose record is up to date is looked at again in 5 s, unless its hold
    only says the Slice is on its way (``Hold.routine``): that Slice's every event (ready,
    failed, gone, a new state) wakes the replica, so a poll would only repeat the pass."""
    routine = messages.on_its_way
    rep = replica(single())
    on_its_way = hold_all("CapacityProvisioning", "slice s is ACTIVATING: booting", routine)
    held = plan(Observed(rep, [], NOW), holds=(on_its_way,))
    assert held.rows[0]["lastFailure"]["message"].endswith(": slice s is ACTIVATING: booting")
    assert held.requeue_after is None
    failed = hold_all("CapacityProvisioning", "slice s is FAILED: no capacity", routine)
    assert plan(Observed(rep, [], NOW), holds=(failed,)).requeue_after == 5.0


def test_a_routine_hold_with_a_deadline_is_looked_at_again_then() -> None:
    routine = messages.on_its_way
    rep = replica(single())
    held = Hold(
        "CapacityProvisioning", "slice s is ACTIVATING: booting", routine=routine, look_again=42.0
    )
    assert plan(Observed(rep, [], NOW), holds=(lambda *_: held,)).requeue_after == 42.0

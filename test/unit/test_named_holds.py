"""M7: a component's condition names its Instances held long enough, in the words of their
holds (E7), and says nothing of a hold that ends sooner. The words, which rows are named,
when the service is looked at again; that the text changes only when what it says does;
and what wakes the service's pass and what does not (a short hold costs none)."""

from __future__ import annotations

import copy
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ome.controllers.holds import Hold, hold_failure_message
from ome.controllers.inferencereplica.instances import Observed
from ome.controllers.inferenceservice import decide
from ome.controllers.inferenceservice.controller import InferenceServiceReconciler
from ome.controllers.inferenceservice.decide import (
    NamedHolds,
    component_message,
    named_holds,
    naming_due,
    plan_component,
    plan_service,
    service_conditions,
)
from ome.kube import rfc3339
from test.helpers import eventually
from test.unit import test_instances as e7
from test.unit.test_inferenceservice_decide import ENGINE_CONFIG, observe, service
from test.unit.test_stale_cache import Cache, Client, Recorder
from test.unit.test_stale_cache import service as stale_service

JSON = dict[str, Any]
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
#: The threshold as shipped (tests of the controller set it smaller).
AFTER = decide.NAME_HELD_AFTER
CAPACITY = "CapacityProvisioning"
EXAMPLE = "slice qwen3-tpu-engine-8-0-1a2b3c4d is waiting for partition assignment"


def waiting(index: int) -> str:
    return f"slice qwen3-tpu-engine-{index}-0-1a2b3c4d is waiting for partition assignment"


def held(
    index: int,
    started: datetime,
    reason: str | None = None,
    token: str = CAPACITY,
    recorded: datetime | None = None,
) -> JSON:
    """Instance ``index``'s row as E7 writes it: its Create operation, started at
    ``started``, held on ``token``, and the hold's record (``recorded``: its time)."""
    pod = f"qwen3-tpu-engine-{index}-default-0"
    return {
        "index": index,
        "phase": "Creating",
        "operation": {
            "id": "create-0",
            "type": "Create",
            "step": "CreatePods",
            "startedAt": rfc3339(started),
            "deadline": None,
            "waiting": token,
        },
        "lastFailure": {
            "podName": pod,
            "containerName": "",
            "reason": token,
            "exitCode": None,
            "message": hold_failure_message(token, pod, reason or waiting(index)),
            "time": rfc3339(recorded or started),
        },
    }


def ready_row(index: int) -> JSON:
    return {"index": index, "phase": "Ready", "operation": None, "lastFailure": None}


def with_rows(rows: list[JSON], ready: int | None = None) -> JSON:
    """The engine's replica as the service's pass reads it: its rows and its ready count."""
    count = sum(1 for r in rows if r["phase"] == "Ready") if ready is None else ready
    return {
        "metadata": {"name": "qwen3-tpu-engine", "namespace": "qwen3-tpu"},
        "status": {"readyReplicas": count, "instanceStatuses": copy.deepcopy(rows)},
    }


# -- the words -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ready", "desired", "named", "message"),
    [
        (8, 9, [], "8 of 9 instances ready"),
        (
            8,
            9,
            [(8, EXAMPLE)],
            "8 of 9 instances ready; instance 8 is withheld until its capacity is ready: "
            "slice qwen3-tpu-engine-8-0-1a2b3c4d is waiting for partition assignment",
        ),
        (
            7,
            9,
            [(8, "b"), (7, "a")],
            "7 of 9 instances ready; instance 7 is withheld until its capacity is ready: a; "
            "1 more instance is withheld",
        ),
        (
            6,
            9,
            [(6, "c"), (7, "a"), (8, "b")],
            "6 of 9 instances ready; instance 6 is withheld until its capacity is ready: c; "
            "2 more instances are withheld",
        ),
    ],
)
def test_the_condition_names_the_first_instance_withheld_and_counts_the_others(
    ready: int, desired: int, named: list[tuple[int, str]], message: str
) -> None:
    assert component_message(ready, desired, named) == message


def test_a_component_with_more_instances_than_hosts_names_the_one_that_waits() -> None:
    """The example of M7: nine Instances on an 8-host pool, the ninth held two minutes."""
    isvc = service(engine={"minReplicas": 9, "maxReplicas": 9})
    spec = plan_component(isvc, "engine", ENGINE_CONFIG, None).create
    assert spec is not None
    rows = [ready_row(i) for i in range(8)] + [held(8, NOW - timedelta(minutes=2))]
    replica = with_rows(rows)
    replica["spec"] = spec["spec"]
    obs = observe(isvc, {"engine": replica})
    [engine, _] = service_conditions(obs, plan_service(obs), [decide.Applied()], NOW)
    assert (engine.type, engine.ok, engine.reason) == ("EngineReady", False, "ComponentNotReady")
    assert engine.message == (
        "8 of 9 instances ready; instance 8 is withheld until its capacity is ready: "
        "slice qwen3-tpu-engine-8-0-1a2b3c4d is waiting for partition assignment"
    )


# -- which Instances are named -----------------------------------------------------------------


def _other_record(row: JSON, **changes: Any) -> JSON:
    out = copy.deepcopy(row)
    out["lastFailure"].update(changes)
    return out


def _not_waiting(row: JSON) -> JSON:
    out = copy.deepcopy(row)
    out["operation"]["waiting"] = None
    return out


def _unreadable_start(row: JSON) -> JSON:
    out = copy.deepcopy(row)
    out["operation"]["startedAt"] = "soon"
    return out


LONG = held(3, NOW - AFTER)


@pytest.mark.parametrize(
    ("rows", "found"),
    [
        ([], NamedHolds()),
        ([ready_row(0)], NamedHolds()),
        ([LONG], NamedHolds(((3, waiting(3)),))),
        ([held(3, NOW - AFTER + timedelta(seconds=1))], NamedHolds(due=1.0)),
        ([held(3, NOW + timedelta(seconds=5))], NamedHolds(due=AFTER.total_seconds() + 5)),
        (  # the rebuild backoff's hold is named alike, in its own words
            [held(2, NOW - timedelta(minutes=5), "its next rebuild waits 20s", "RebuildBackoff")],
            NamedHolds(((2, "its next rebuild waits 20s"),)),
        ),
        # The record is the hold's own: not a pod's failure, nor a record the hold left
        # behind once it ended (the operation waits no more).
        ([_other_record(LONG, reason="OOMKilled", message="OOMKilled")], NamedHolds()),
        ([_other_record(LONG, message="CapacityProvisioning: pod x failed")], NamedHolds()),
        ([_other_record(LONG, reason="Unschedulable")], NamedHolds()),
        ([_not_waiting(LONG)], NamedHolds()),
        ([_unreadable_start(held(3, NOW))], NamedHolds(((3, waiting(3)),))),
        (
            [held(5, NOW - timedelta(seconds=10)), LONG, held(4, NOW - timedelta(seconds=20))],
            NamedHolds(((3, waiting(3)),), due=(AFTER - timedelta(seconds=20)).total_seconds()),
        ),
    ],
)
def test_an_instance_is_named_once_its_operation_has_been_held_long_enough(
    rows: list[JSON], found: NamedHolds
) -> None:
    replica = with_rows(rows)
    before = copy.deepcopy(replica)
    assert named_holds(replica, NOW) == found
    assert replica == before, "the cache's replica is only read"


def test_a_replica_not_there_names_nothing() -> None:
    assert named_holds(None, NOW) == NamedHolds()
    assert naming_due([], NOW) is None


def test_the_hold_of_e7_is_named_from_its_operations_start_whatever_its_rewordings() -> None:
    """The rows E7 itself writes: a hold reworded after 20 s restarts its record's time, not
    the clock M7 reads; named at the threshold in its latest words."""
    rep = e7.replica(e7.single(), replicas=1)

    def hold(reason: str) -> Any:
        return lambda _replica, _index, _pods: Hold(CAPACITY, reason)

    first = e7.plan(Observed(rep, [], NOW), holds=(hold("slice s is waiting for partitions"),))
    later = NOW + timedelta(seconds=20)
    reworded = e7.plan(
        Observed(e7.with_rows(rep, first.rows), [], later), holds=(hold("slice s is activating"),)
    )
    row = reworded.rows[0]
    assert row["lastFailure"]["time"] == rfc3339(later), "E7 restarts the record's time"
    assert named_holds(with_rows([row]), later) == NamedHolds(
        due=(AFTER - (later - NOW)).total_seconds()
    )
    assert named_holds(with_rows([row]), NOW + AFTER) == NamedHolds(((0, "slice s is activating"),))


# -- the text changes only when what it says changes ----------------------------------------------

rows_strategy = st.lists(
    st.tuples(
        st.integers(0, 11),  # index
        st.booleans(),  # held
        st.integers(0, 3 * int(AFTER.total_seconds())),  # seconds held by NOW
        st.sampled_from(["slice s is waiting for partition assignment", "slice s is activating"]),
        st.integers(0, 600),  # seconds since the record's time
    ),
    max_size=8,
    unique_by=lambda t: t[0],
)


def _rows(spec: list[tuple[int, bool, int, str, int]]) -> list[JSON]:
    return [
        held(i, NOW - timedelta(seconds=s), reason, recorded=NOW - timedelta(seconds=r))
        if is_held
        else ready_row(i)
        for i, is_held, s, reason, r in spec
    ]


def _message(rows: list[JSON], now: datetime) -> str:
    replica = with_rows(rows)
    return component_message(
        replica["status"]["readyReplicas"], 12, named_holds(replica, now).named
    )


@given(rows_strategy, st.integers(0, 10**6), st.integers(0, 10**6))
def test_the_same_rows_read_the_same_once_every_hold_is_named(
    spec: list[tuple[int, bool, int, str, int]], later: int, record: int
) -> None:
    """Past the threshold of every hold, the text is the same at any later time, and the same
    whatever the times of the holds' records (each rewording restarts them): no timestamp
    and no duration of its own."""
    rows = _rows(spec)
    settled = NOW + AFTER
    text = _message(rows, settled)
    assert _message(rows, settled + timedelta(seconds=later)) == text
    rerecorded = copy.deepcopy(rows)
    for row in rerecorded:
        if row["lastFailure"]:
            row["lastFailure"]["time"] = rfc3339(NOW + timedelta(seconds=record))
    assert _message(rerecorded, settled) == text
    assert naming_due([with_rows(rows)], settled) is None, "nothing more to name by time"


@given(rows_strategy, st.data())
def test_a_hold_shorter_than_the_threshold_never_reaches_the_condition(
    spec: list[tuple[int, bool, int, str, int]], data: st.DataObject
) -> None:
    """Holds that have not lasted ``NAME_HELD_AFTER`` leave the text as it was without them,
    and the service is to be looked at again when the first of them would be named."""
    limit = int(AFTER.total_seconds()) - 1
    short = [(i, h, min(s, limit), reason, r) for i, h, s, reason, r in spec]
    rows = _rows(short)
    ready = sum(1 for r in rows if r["phase"] == "Ready")
    assert _message(rows, NOW) == f"{ready} of 12 instances ready"
    held_for = [s for _, is_held, s, _, _ in short if is_held]
    due = naming_due([with_rows(rows)], NOW)
    assert due == (AFTER.total_seconds() - max(held_for) if held_for else None)
    assert naming_due([with_rows(rows)], NOW, named=True) == due
    # The look that comes then finds the longest one named: the service's pass is due.
    if held_for:
        assert naming_due([with_rows(rows)], NOW + timedelta(seconds=due or 0), named=True) == 0


# -- what wakes the service -------------------------------------------------------------------

KEY = "qwen3-tpu/qwen3-tpu"


class Informer(Cache):
    """A cache the controller can watch: its events are the test's own calls."""

    def add_handler(self, handler: Any) -> None:
        pass

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return True  # filled by the test from the start

    def peek_list(self) -> list[JSON]:
        return list(self.objects.values())


def owned(rows: list[JSON]) -> JSON:
    """The engine's replica in the cache, owned by the service of ``test_stale_cache``, no
    Instance of it ready yet."""
    replica = with_rows(rows, ready=0)
    replica["metadata"]["ownerReferences"] = [
        {"kind": "InferenceService", "name": "qwen3-tpu", "uid": "uid-now", "controller": True}
    ]
    replica["spec"] = {"replicas": 1}
    return replica


class Harness:
    """The InferenceService reconciler over caches, its clock set by the test, and its
    controller with each pass counted (not started unless a test starts it)."""

    def __init__(self, replica: JSON, now: datetime = NOW) -> None:
        self.now = now
        self.client = Client()
        self.replicas = Informer(replica)
        runtime = {
            "metadata": {"name": "rt"},
            "spec": {"engineConfig": {"runner": {"name": "c", "image": "img:1"}}},
        }
        self.reconciler = InferenceServiceReconciler(
            self.client,  # type: ignore[arg-type]
            Informer(stale_service("uid-now")),  # type: ignore[arg-type]
            self.replicas,  # type: ignore[arg-type]
            Informer(),  # type: ignore[arg-type]
            Informer(runtime),  # type: ignore[arg-type]
            Informer(),  # type: ignore[arg-type]
            Informer({"metadata": {"name": "m"}}),  # type: ignore[arg-type]
            Recorder(),  # type: ignore[arg-type]
            clock=lambda: self.now,
        )
        self.controller = self.reconciler.controller(workers=1)
        self.passes = 0
        self.looked = threading.Event()
        reconcile, look = self.controller.reconcile, self.controller.look
        assert look is not None

        def counted(key: str) -> Any:
            self.passes += 1
            return reconcile(key)

        def watched(key: str) -> float | None:
            try:
                return look(key)
            finally:
                self.looked.set()

        self.controller.reconcile, self.controller.look = counted, watched

    def change(self, old: JSON, new: JSON) -> bool:
        """The replica's update from ``old`` to ``new``: the cache has it, then the watch's
        predicate is asked, as the informer does."""
        self.replicas.objects["qwen3-tpu/qwen3-tpu-engine"] = new
        return self.reconciler.replica_changed(old, new)

    def engine_message(self) -> str:
        statuses = [b for _, plural, b in self.client.writes if plural == "inferenceservices"]
        conditions = statuses[-1]["status"]["conditions"]
        return str(next(c["message"] for c in conditions if c["type"] == "EngineReady"))


def test_a_named_hold_reworded_or_ended_wakes_the_service_and_a_short_one_does_not() -> None:
    named = held(0, NOW - AFTER, "slice s is waiting for partition assignment")
    short = held(0, NOW - timedelta(seconds=5), "slice s is waiting for partition assignment")
    h = Harness(owned([named]))

    def reworded(row: JSON) -> JSON:
        return _other_record(
            row,
            message=hold_failure_message(CAPACITY, "qwen3-tpu-engine-0-default-0", "other words"),
        )

    ended = _not_waiting(named)  # its pods created: E8 clears the record too
    ended["lastFailure"] = None
    for old, new, news in [
        (named, reworded(named), True),
        (named, ended, True),
        (named, _other_record(named, time=rfc3339(NOW)), False),  # same words: no news
        (short, reworded(short), False),
        (short, ended, False),
        (ready_row(0), short, False),  # a hold that starts is looked at later, not now
    ]:
        assert h.change(owned([old]), owned([new])) is news, (old, new)
    # What the service reads of its replica (ready count, spec...) is news as before.
    more_ready = owned([named])
    more_ready["status"]["readyReplicas"] = 1
    assert h.change(owned([named]), more_ready)
    more_ready = owned([short])
    more_ready["status"]["readyReplicas"] = 1
    assert h.change(owned([short]), more_ready)


def test_a_look_finds_a_pass_due_only_when_an_instance_is_to_be_named() -> None:
    h = Harness(owned([held(0, NOW - timedelta(seconds=5))]))
    assert h.reconciler.look(KEY) == (AFTER - timedelta(seconds=5)).total_seconds()
    h.now = NOW + AFTER
    assert h.reconciler.look(KEY) == 0
    h.replicas.objects["qwen3-tpu/qwen3-tpu-engine"] = owned([ready_row(0)])
    assert h.reconciler.look(KEY) is None
    assert h.reconciler.look("qwen3-tpu/gone") is None


@pytest.fixture
def prompt(monkeypatch: pytest.MonkeyPatch) -> timedelta:
    """A threshold of a fifth of a second: the controller's looks come while a test waits."""
    after = timedelta(seconds=0.2)
    monkeypatch.setattr(decide, "NAME_HELD_AFTER", after)
    return after


def test_a_hold_that_lasts_is_named_by_a_pass_its_look_queues(prompt: timedelta) -> None:
    """The hold's rewording before the threshold is no news; its look, once due, queues the
    one pass that names it."""
    start = datetime.now(UTC).replace(microsecond=0)  # as rows store it
    h = Harness(owned([held(0, start, "slice s is waiting for partitions")]))
    h.now = start
    assert not h.change(owned([held(0, start)]), owned([held(0, start, "slice s is activating")]))
    h.now = start + prompt  # the look's time has come (the wall clock is the test's)
    h.controller.start()
    try:
        eventually(lambda: h.passes == 1, timeout=5)
        assert h.engine_message() == (
            "0 of 1 instances ready; instance 0 is withheld until its capacity is ready: "
            "slice s is activating"
        )
    finally:
        h.controller.stop(timeout=5)


def test_a_hold_that_ends_before_the_threshold_costs_no_pass(prompt: timedelta) -> None:
    start = datetime.now(UTC).replace(microsecond=0)  # as rows store it
    h = Harness(owned([held(0, start)]))
    h.now = start
    assert not h.change(owned([ready_row(0)]), owned([held(0, start)]))
    ended = _not_waiting(held(0, start))
    ended["lastFailure"] = None
    assert not h.change(owned([held(0, start)]), owned([ended]))
    h.now = start + prompt
    h.controller.start()
    try:
        assert h.looked.wait(5), "the look came"
        assert h.passes == 0 and len(h.controller.queue) == 0
    finally:
        h.controller.stop(timeout=5)

"""The act layer of the slice reconcilers against an in-memory API: what it writes, counts and
records for a plan, and that expectations keep concurrent passes from losing or repeating a
create. No server: the fake answers as the API server would (409 on a taken name)."""

from __future__ import annotations

import copy
import itertools
import random
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry
from urllib3.exceptions import ProtocolError

from ome.api.v1beta1 import INFERENCE_REPLICAS
from ome.controllers.slices import releases
from ome.controllers.slices.act import ReleaseOutcome, SliceActor
from ome.controllers.slices.metrics import SliceMetrics
from ome.controllers.slices.model import Pod, Replica
from ome.controllers.slices.plan import (
    GateObservation,
    ReleaseObservation,
    ReleasePlan,
    gate_pass,
    release_pass,
)
from ome.provider import gke
from ome.runtime.expectations import Expectations
from ome.runtime.rest import PODS
from ome.tpuslice.hosts import Host
from ome.tpuslice.naming import Slot
from test.unit import slicekit
from test.unit.slicekit import CONFIG, JSON, NAME, NOW, PROVISION_ONLY

SERIES = {"slice_type": "tpu7x", "topology": "2x2x1"}


def engine(name: str = NAME, uid: str = "uid-1", replicas: int = 1) -> Replica:
    """An opted-in single-pod replica without rows; its runner limits chips and tolerates none."""
    runners = slicekit.single(tolerations=None, container="c", requests=False)
    return slicekit.replica(runners, [], name=name, uid=uid, replicas=replicas)


@dataclass
class FakeAPI:
    """Slices by name, as the server holds them; ``creates`` counts the create requests that
    reached it. ``fail`` is raised by the next create, if set."""

    slices: dict[str, JSON] = field(default_factory=dict)
    creates: dict[str, int] = field(default_factory=dict)
    fail: Exception | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    uids: itertools.count[int] = field(default_factory=itertools.count)

    def create(self, res: Any, body: JSON, namespace: str | None = None) -> JSON:
        assert res == gke.SLICES
        name = body["metadata"]["name"]
        with self.lock:
            self.creates[name] = self.creates.get(name, 0) + 1
            if self.fail is not None:
                error, self.fail = self.fail, None
                raise error
            if name in self.slices:
                raise ApiException(status=409, reason="Conflict")
            stored = copy.deepcopy(body)
            stored["metadata"]["uid"] = f"slice-uid-{next(self.uids)}"
            stored["metadata"]["resourceVersion"] = "1"
            self.slices[name] = stored
            return copy.deepcopy(stored)

    def live_get_or_none(self, res: Any, name: str, namespace: str | None = None) -> JSON | None:
        with self.lock:
            found = self.slices.get(name)
            return copy.deepcopy(found) if found is not None else None

    def live_list(self, *args: Any, **kwargs: Any) -> list[JSON]:
        return []


@dataclass
class Recorder:
    events: list[tuple[str, str, str]] = field(default_factory=list)

    def event(self, obj: JSON, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    def lasting(self, obj: JSON, type_: str, reason: str, message: str, **_: Any) -> None:
        self.events.append((type_, reason, message))


def actor(api: FakeAPI, recorder: Recorder, registry: CollectorRegistry) -> SliceActor:
    return SliceActor(
        api,  # type: ignore[arg-type]
        CONFIG,
        recorder,  # type: ignore[arg-type]
        SliceMetrics(CONFIG, registry),
        Expectations(),
        Expectations(),
        lambda: NOW,
    )


def observe(
    replica: Replica, cache: dict[str, JSON], expectations: Expectations, slots: dict[int, Slot]
) -> GateObservation:
    """What the reconciler observes: the Slices the (possibly lagging) cache shows at the
    slots' names, and the expectations the cache does not meet yet."""
    at = {
        n: gke.parse(cache[n])
        for n in (replica.slice_name(s) for s in slots.values())
        if n in cache
    }
    creating, releasing = expectations.observe(
        replica.key, {n: (s.uid, s.terminating) for n, s in at.items()}
    )
    return GateObservation(
        replica=replica,
        config=CONFIG,
        slots=slots,
        provision_only=PROVISION_ONLY,
        slices=at,
        hosts={},
        creating=creating,
        releasing=releasing,
        now=NOW,
    )


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, {**SERIES, **labels}) or 0.0


def test_a_create_that_meets_a_foreign_slice_holds_on_the_conflict_in_the_same_pass() -> None:
    """E3: on AlreadyExists the Slice is read live; a foreign one holds the slot on the
    conflict, with its SliceOwnershipConflict Warning and the metric, in that same pass."""
    replica = engine()
    name = replica.slice_name(Slot(0, 0))
    api = FakeAPI()
    api.slices[name] = {
        "metadata": {"name": name, "uid": "foreign", "labels": {"team": "other"}},
        "spec": {"type": "tpu7x", "topology": "2x2x1", "partitionIds": []},
    }
    recorder, registry = Recorder(), CollectorRegistry()
    act = actor(api, recorder, registry)
    obs = observe(replica, {}, act.slices, {0: Slot(0, 0)})  # the cache has not seen it
    plan = gate_pass(obs)
    assert [c.name for c in plan.creates] == [name]
    out = act.apply_gate_plan(obs, plan)
    assert out.holds[0].message == f"slice is owned by another object: {name}"
    assert out.confine == {} and not out.failed
    assert recorder.events == [
        (
            "Warning",
            "SliceOwnershipConflict",
            "OMENative component=engine instance=0 withheld: slice is owned by another object: "
            f"{name}",
        )
    ]
    assert sample(registry, "ome_tpu_slice_create_failures_total", reason="OwnershipConflict") == 1
    assert api.slices[name]["metadata"]["uid"] == "foreign", "never touched"


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        pytest.param(ProtocolError("Connection aborted"), "Unknown", id="no answer"),
        pytest.param(ConnectionResetError("reset"), "Unknown", id="connection reset"),
        pytest.param(TimeoutError("timed out"), "Unknown", id="timeout"),
        pytest.param(
            ApiException(status=500, reason="Internal Server Error"),
            "Unknown",
            id="500 without a Status body",
        ),
    ],
)
def test_a_create_that_fails_without_an_api_status_counts_unknown(
    error: Exception, reason: str
) -> None:
    """K: a create that fails without an API status reason counts ``reason="Unknown"``; the
    pass reports a failure (retried with backoff) and the next one may create again."""
    replica = engine()
    api, recorder, registry = FakeAPI(fail=error), Recorder(), CollectorRegistry()
    act = actor(api, recorder, registry)
    obs = observe(replica, {}, act.slices, {0: Slot(0, 0)})
    out = act.apply_gate_plan(obs, gate_pass(obs))
    assert out.failed
    assert sample(registry, "ome_tpu_slice_create_failures_total", reason=reason) == 1
    assert sample(registry, "ome_tpu_slice_created_total") == 0
    again = act.apply_gate_plan(obs, gate_pass(obs))  # the failed create left no expectation behind
    assert not again.failed and sample(registry, "ome_tpu_slice_created_total") == 1


def test_a_create_failure_counts_the_api_status_reason() -> None:
    error = ApiException(status=500, reason="Internal Server Error")
    error.body = '{"kind": "Status", "reason": "InternalError", "message": "boom"}'
    replica = engine()
    api, recorder, registry = FakeAPI(fail=error), Recorder(), CollectorRegistry()
    act = actor(api, recorder, registry)
    obs = observe(replica, {}, act.slices, {0: Slot(0, 0)})
    assert act.apply_gate_plan(obs, gate_pass(obs)).failed
    assert sample(registry, "ome_tpu_slice_create_failures_total", reason="InternalError") == 1


def test_concurrent_passes_with_a_lagging_cache_create_each_slice_exactly_once() -> None:
    """Workers plan and act for many replicas at once, as the controllers' workers do (one
    pass per replica at a time, as the workqueue guarantees), against a cache that shows each
    create only some passes later. Every slot gets its Slice, each create request reaches the
    API exactly once, and once the cache has caught up no expectation is left."""
    replicas = [engine(f"r{i}", f"uid-{i}", replicas=3) for i in range(6)]
    slots = {i: Slot(i, 0) for i in range(3)}
    api, recorder, registry = FakeAPI(), Recorder(), CollectorRegistry()
    act = actor(api, recorder, registry)
    cache: dict[str, JSON] = {}
    cache_lock = threading.Lock()
    key_locks = {r.key: threading.Lock() for r in replicas}
    rng = random.Random(7)

    def lag() -> None:
        """The informer: copies some of the server's Slices into the cache, late."""
        with api.lock:
            server = {n: copy.deepcopy(s) for n, s in api.slices.items()}
        with cache_lock:
            for name, obj in server.items():
                if name not in cache and rng.random() < 0.2:
                    cache[name] = obj

    def work(seed: int, barrier: threading.Barrier) -> None:
        own = random.Random(seed)
        barrier.wait()
        for _ in range(150):
            replica = own.choice(replicas)
            with key_locks[replica.key]:
                with cache_lock:
                    view = dict(cache)
                obs = observe(replica, view, act.slices, slots)
                out = act.apply_gate_plan(obs, gate_pass(obs))
                assert not out.failed
            lag()

    barrier = threading.Barrier(4)
    threads = [threading.Thread(target=work, args=(s, barrier)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    wanted = {r.slice_name(s) for r in replicas for s in slots.values()}
    assert set(api.slices) == wanted, "no create lost"
    assert api.creates == dict.fromkeys(wanted, 1), "no create repeated, none met a 409"
    assert sample(registry, "ome_tpu_slice_created_total") == len(wanted)
    cache.update(api.slices)  # the informer catches up
    for replica in replicas:
        observe(replica, cache, act.slices, slots)
        assert act.slices.pending(replica.key) == (frozenset(), frozenset())


def test_the_ledger_backs_off_a_release_that_did_not_go_and_forgets_it_once_released() -> None:
    act = actor(FakeAPI(), Recorder(), CollectorRegistry())
    waits = [act.ledger.retry("s") for _ in range(9)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    act.ledger.released("s")
    assert act.ledger.retry("s") == 1.0


def test_a_slice_we_created_is_timed_from_its_create_to_its_first_ready_state_once() -> None:
    """K: ``ome_tpu_slice_provision_duration_seconds`` observes create to first ready, once."""
    replica = engine()
    api, registry = FakeAPI(), CollectorRegistry()
    act = actor(api, Recorder(), registry)
    obs = observe(replica, {}, act.slices, {0: Slot(0, 0)})
    act.apply_gate_plan(obs, gate_pass(obs))
    name = replica.slice_name(Slot(0, 0))
    ready = copy.deepcopy(api.slices[name])
    ready["spec"]["partitionIds"] = ["p0"]
    ready["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "ACTIVE"}]}
    act.clock = lambda: NOW + timedelta(seconds=3)
    for _ in range(2):
        seen = observe(replica, {name: ready}, act.slices, {0: Slot(0, 0)})
        seen = replace(seen, hosts={name: (Host("node-0", slice_name=name),)})
        out = act.apply_gate_plan(seen, gate_pass(seen))
        assert out.confine == {0: name} and out.holds == {}
    count = "ome_tpu_slice_provision_duration_seconds_count"
    assert sample(registry, count) == 1
    assert sample(registry, "ome_tpu_slice_provision_duration_seconds_sum") == 3.0


@dataclass
class LossAPI(FakeAPI):
    """The API of a loss: every Slice gone, the replica's ``pods`` as a live list shows them,
    and of those the ``gone`` ones deleted meanwhile by someone else, so that a delete of one
    answers 404, which the client returns as None."""

    pods: list[JSON] = field(default_factory=list)
    gone: set[str] = field(default_factory=set)
    deleted: list[str] = field(default_factory=list)

    def live_list(self, res: Any, *args: Any, **kwargs: Any) -> list[JSON]:
        return copy.deepcopy(self.pods) if res == PODS else []

    def delete(self, res: Any, name: str, namespace: str | None = None, **kw: Any) -> JSON | None:
        assert res == PODS and kw.get("uid") == f"uid-{name}", "a UID precondition"
        if name in self.gone:
            return None
        self.deleted.append(name)
        return {"kind": "Status", "status": "Success"}


def running_pod(name: str, slice_name: str) -> JSON:
    return {
        "metadata": {
            "name": name,
            "namespace": slicekit.NAMESPACE,
            "uid": f"uid-{name}",
            "creationTimestamp": "2025-03-01T11:00:00Z",
        },
        "spec": {"nodeName": "node-a", "nodeSelector": {slicekit.SLICE: slice_name}},
        "status": {"phase": "Running"},
    }


def lost_observation(replica: Replica, running: JSON) -> ReleaseObservation:
    """What the release pass observes when the one Slice ``running`` names is gone from the
    cache while the pod runs on node-a, which the cache does not show either."""
    return ReleaseObservation(
        replica=replica,
        config=CONFIG,
        provision_only=PROVISION_ONLY,
        owned=(),
        named={},
        pods=(Pod.from_json(running, CONFIG.slice_label, CONFIG.chip_resource),),
        nodes={"node-a": None},
        releasing=frozenset(),
    )


@pytest.mark.parametrize("already_gone", [False, True])
def test_a_lost_slices_pod_that_was_already_gone_is_neither_named_nor_counted(
    already_gone: bool,
) -> None:
    """H4: a pod whose delete finds it gone (NotFound) was not deleted by OME, so SliceLost
    does not name it, and with no pod deleted there is no SliceLost and no count."""
    replica = engine()
    name = replica.slice_name(Slot(0, 0))
    pod_name = f"{replica.name}-0-default-0"
    running = running_pod(pod_name, name)
    api = LossAPI(pods=[running], gone={pod_name} if already_gone else set())
    recorder, registry = Recorder(), CollectorRegistry()
    act = actor(api, recorder, registry)
    obs = lost_observation(replica, running)
    plan = release_pass(obs)
    assert plan.suspects == [name]
    assert not act.apply_release_plan(obs, plan).failed
    if already_gone:
        assert api.deleted == [] and recorder.events == []
        assert sample(registry, "ome_tpu_slice_lost_total") == 0
    else:
        assert api.deleted == [pod_name]
        assert recorder.events == [
            (
                "Warning",
                "SliceLost",
                f"TPU slice {name} was deleted while pods {pod_name} ran on it; they are "
                "deleted so that their Instance is rebuilt",
            )
        ]
        assert sample(registry, "ome_tpu_slice_lost_total") == 1


@dataclass
class SweepAPI(FakeAPI):
    """The API of a sweep: the replica as the server holds it, its Slices, no pods and no
    hosts; ``deleted`` records each Slice delete with its preconditions."""

    replica: JSON = field(default_factory=dict)
    deleted: list[tuple[str, str | None, str | None]] = field(default_factory=list)

    def live_get_or_none(self, res: Any, name: str, namespace: str | None = None) -> JSON | None:
        if res == INFERENCE_REPLICAS:
            return copy.deepcopy(self.replica)
        return super().live_get_or_none(res, name, namespace)

    def delete(self, res: Any, name: str, namespace: str | None = None, **kw: Any) -> JSON:
        assert res == gke.SLICES
        self.deleted.append((name, kw.get("uid"), kw.get("resource_version")))
        return {"kind": "Status", "status": "Success"}


def scaled_down() -> tuple[Replica, JSON]:
    """A replica scaled down to Instance 0, and the Slice its Instance 1 no longer wants."""
    replica = slicekit.replica(rows=[slicekit.row(0)], replicas=1)
    slot = Slot(1, 0)
    body = gke.body(replica.raw, slot, slicekit.ONE_HOST, CONFIG, replica.annotations)
    body["metadata"].update(uid="slice-uid-1", resourceVersion="42")
    return replica, body


def sweep(
    api: SweepAPI, replica: Replica, act: SliceActor, cached: JSON
) -> tuple[ReleasePlan, ReleaseOutcome]:
    obs = ReleaseObservation(
        replica=replica,
        config=CONFIG,
        provision_only=PROVISION_ONLY,
        owned=(gke.parse(cached),),
        named={},
        pods=(),
        nodes={},
        releasing=frozenset(),
    )
    plan = release_pass(obs)
    return plan, act.apply_release_plan(obs, plan)


def test_the_sweep_releases_only_what_confirm_sweep_confirms_on_live_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """G3: the sweep's live confirmation is ``releases.confirm_sweep`` itself, the function the
    unit tests pin down, not a copy of it: what it declines is never deleted, and what it
    confirms is deleted under the live UID and resourceVersion."""
    replica, cached = scaled_down()
    name = cached["metadata"]["name"]
    asked: list[str] = []
    confirm = releases.confirm_sweep

    def declining(*args: Any, **kwargs: Any) -> Any:
        asked.append(name)
        return None

    for spy, want in ((declining, []), (confirm, [(name, "slice-uid-1", "42")])):
        api = SweepAPI(slices={name: cached}, replica=replica.raw)
        act = actor(api, Recorder(), CollectorRegistry())
        monkeypatch.setattr(releases, "confirm_sweep", spy)
        plan, out = sweep(api, replica, act, cached)
        assert [s.name for s in plan.releases] == [name] and not out.failed
        assert api.deleted == want
    assert asked == [name], "the sweep asked confirm_sweep"


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class EventAPI:
    """The API as the event recorder writes to it: Events by name, and every write."""

    stored: dict[str, JSON] = field(default_factory=dict)
    writes: list[tuple[str, str]] = field(default_factory=list)

    def create(self, res: Any, body: JSON, namespace: str | None = None) -> JSON:
        self.stored[body["metadata"]["name"]] = copy.deepcopy(body)
        self.writes.append(("create", body["reason"]))
        return copy.deepcopy(body)

    def patch(self, res: Any, name: str, patch: JSON, namespace: str | None = None) -> JSON:
        self.stored[name].update(copy.deepcopy(patch))
        self.writes.append(("patch", self.stored[name]["reason"]))
        return copy.deepcopy(self.stored[name])

    def by_reason(self, reason: str) -> list[JSON]:
        return [e for e in self.stored.values() if e["reason"] == reason]


def test_an_instance_held_for_ten_minutes_leaves_a_later_slice_lost_its_warning() -> None:
    """Instance 0 held on SliceOwnershipConflict for ten minutes, a pass every 5 s, as the
    manager's recorder records it: the hold's Warnings written number at most 15 (when it
    starts, then about once a minute), and a SliceLost on the same InferenceService after it
    is still written."""
    clock = FakeClock(NOW)
    events = EventAPI()
    recorder = slicekit.manager_recorder(events, clock)
    service = {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "name": "qwen3-tpu"}
    raw = copy.deepcopy(engine(replicas=2).raw)
    raw["metadata"]["ownerReferences"] = [{**service, "uid": "isvc-uid", "controller": True}]
    replica = Replica.from_json(raw)
    held = replica.slice_name(Slot(0, 0))
    foreign = {
        "metadata": {"name": held, "uid": "foreign", "labels": {"team": "other"}},
        "spec": {"type": "tpu7x", "topology": "2x2x1", "partitionIds": []},
    }
    lost = replica.slice_name(Slot(1, 0))
    pod_name = f"{replica.name}-1-default-0"
    running = running_pod(pod_name, lost)
    api = LossAPI(slices={held: foreign}, pods=[running])
    act = SliceActor(
        api,  # type: ignore[arg-type]
        CONFIG,
        recorder,
        SliceMetrics(CONFIG, CollectorRegistry()),
        Expectations(),
        Expectations(),
        clock,
    )
    for _ in range(120):
        obs = replace(observe(replica, {held: foreign}, act.slices, {0: Slot(0, 0)}), now=clock())
        out = act.apply_gate_plan(obs, gate_pass(obs))
        assert out.holds[0].message == f"slice is owned by another object: {held}"
        clock.advance(5)
    obs_loss = lost_observation(replica, running)
    act.apply_release_plan(obs_loss, release_pass(obs_loss))
    assert recorder.flush()
    recorder.stop()
    conflict_writes = [w for w in events.writes if w[1] == "SliceOwnershipConflict"]
    assert 1 <= len(conflict_writes) <= 15
    [conflict] = events.by_reason("SliceOwnershipConflict")
    assert conflict["count"] == len(conflict_writes)
    assert conflict["involvedObject"]["kind"] == "InferenceService"
    [slice_lost] = events.by_reason("SliceLost")
    assert slice_lost["involvedObject"] == conflict["involvedObject"]
    assert slice_lost["message"] == (
        f"TPU slice {lost} was deleted while pods {pod_name} ran on it; they are deleted so "
        "that their Instance is rebuilt"
    )

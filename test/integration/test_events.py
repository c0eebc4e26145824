"""The runtime's event recorder against the embedded API server: Events land where kubectl
finds them, repeats are counted, similar events aggregated, bursts spam-filtered, failures
retried, a slow server never blocks the caller, and a deleted Event comes back."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from ome.kube import JSON
from ome.runtime.client import Client, RetryPolicy
from ome.runtime.events import EventRecorder, spam_key_by_reason
from ome.runtime.rest import CONFIGMAPS, EVENTS, NAMESPACES, Rest
from ome_sim.apiserver.faults import Fault
from test.cluster import Cluster, Kubectl
from test.helpers import eventually, gone
from test.manifests import configmap

START = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, now: datetime = START) -> None:
        self._now = now
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)


@pytest.fixture
def rest(cluster: Cluster) -> Rest:
    return Rest(cluster.api)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_recorder(rest: Rest, clock: FakeClock) -> Iterator[Callable[..., EventRecorder]]:
    started: list[EventRecorder] = []

    def make(attempts: int = 5, **kwargs: object) -> EventRecorder:
        options: dict[str, object] = {"host": "node-a", "clock": clock, **kwargs}
        client = Client(rest, RetryPolicy(attempts=attempts, initial=0.01, cap=0.05))
        recorder = EventRecorder(client, "ome-test", **options)  # type: ignore[arg-type]
        recorder.start()
        started.append(recorder)
        return recorder

    yield make
    for recorder in started:
        recorder.stop(timeout=2)


@pytest.fixture
def recorder(make_recorder: Callable[..., EventRecorder]) -> EventRecorder:
    return make_recorder()


@pytest.fixture
def cm(rest: Rest) -> JSON:
    return rest.create(CONFIGMAPS, configmap("subject"), "default")


def events(rest: Rest, namespace: str = "default", **fields: str) -> list[JSON]:
    selector = ",".join(f"{k}={v}" for k, v in fields.items())
    items, _ = rest.list_all(EVENTS, namespace, field_selector=selector)
    return items


def test_an_event_is_visible_to_the_client_and_to_kubectl(
    recorder: EventRecorder, rest: Rest, cluster: Cluster, cm: JSON, kubectl: Kubectl
) -> None:
    recorder.event(cm, "Normal", "Provisioned", "slice is ready")
    assert recorder.flush()

    listed = cluster.core().list_namespaced_event("default", field_selector="reason=Provisioned")
    assert len(listed.items) == 1
    typed = listed.items[0]
    assert typed.message == "slice is ready"
    assert typed.type == "Normal"
    assert typed.count == 1
    assert typed.source is not None
    assert typed.source.component == "ome-test"
    assert typed.source.host == "node-a"
    assert typed.reporting_component == "ome-test"
    assert typed.reporting_instance == "node-a"
    assert typed.involved_object.kind == "ConfigMap"
    assert typed.involved_object.api_version == "v1"
    assert typed.involved_object.name == "subject"
    assert typed.involved_object.namespace == "default"
    assert typed.involved_object.uid == cm["metadata"]["uid"]
    assert typed.involved_object.resource_version == cm["metadata"]["resourceVersion"]
    assert typed.first_timestamp == START
    assert typed.last_timestamp == START
    # client-go's name: the object's name, a dot, and the time in ns as hex.
    assert typed.metadata.name is not None
    name, stamp = typed.metadata.name.split(".")
    assert name == "subject"
    assert int(stamp, 16) == int(START.timestamp()) * 10**9

    out = kubectl("get", "events", "-n", "default", "--field-selector", "reason=Provisioned")
    assert "slice is ready" in out.stdout
    got = json.loads(
        kubectl(
            "get", "events", "-n", "default", "--field-selector", "reason=Provisioned", "-o", "json"
        ).stdout
    )
    assert [e["metadata"]["name"] for e in got["items"]] == [typed.metadata.name]
    none = kubectl("get", "events", "-A", "--field-selector", "reason=Nothing", "-o", "json")
    assert json.loads(none.stdout)["items"] == []


def test_the_same_event_five_times_is_one_event_with_count_five(
    recorder: EventRecorder, rest: Rest, cm: JSON, clock: FakeClock
) -> None:
    for _ in range(5):
        recorder.event(cm, "Warning", "Preempted", "slice lost a host")
        clock.advance(7)
    assert recorder.flush()

    [ev] = events(rest, reason="Preempted")
    assert ev["count"] == 5
    assert ev["message"] == "slice lost a host"
    assert ev["firstTimestamp"] == "2025-01-01T12:00:00Z"
    assert ev["lastTimestamp"] == "2025-01-01T12:00:28Z"  # the fifth, 4 x 7s later
    # one create, then merge patches
    assert rest.get(EVENTS, ev["metadata"]["name"], "default")["count"] == 5


def test_different_messages_are_different_events(
    recorder: EventRecorder, rest: Rest, cm: JSON
) -> None:
    for message in ("one", "two", "three", "two"):
        recorder.event(cm, "Normal", "Scaled", message)
    assert recorder.flush()

    got = {e["message"]: e["count"] for e in events(rest, reason="Scaled")}
    assert got == {"one": 1, "two": 2, "three": 1}
    names = {e["metadata"]["name"] for e in events(rest, reason="Scaled")}
    assert len(names) == 3


def test_the_same_event_from_another_object_or_type_is_separate(
    recorder: EventRecorder, rest: Rest, cm: JSON
) -> None:
    other = rest.create(CONFIGMAPS, configmap("other"), "default")
    recorder.event(cm, "Normal", "Ready", "ok")
    recorder.event(other, "Normal", "Ready", "ok")
    recorder.event(cm, "Warning", "Ready", "ok")
    # a new object under the old name (another uid) is another involved object
    replaced = {**cm, "metadata": {**cm["metadata"], "uid": "another-uid"}}
    recorder.event(replaced, "Normal", "Ready", "ok")
    assert recorder.flush()

    got = sorted(
        (e["involvedObject"]["name"], e["involvedObject"]["uid"], e["type"], e["count"])
        for e in events(rest, reason="Ready")
    )
    assert got == sorted(
        [
            ("subject", cm["metadata"]["uid"], "Normal", 1),
            ("other", other["metadata"]["uid"], "Normal", 1),
            ("subject", cm["metadata"]["uid"], "Warning", 1),
            ("subject", "another-uid", "Normal", 1),
        ]
    )


def test_similar_events_are_aggregated_as_client_go_does(
    recorder: EventRecorder, rest: Rest, cm: JSON, clock: FakeClock
) -> None:
    # Ten distinct messages for one reason within ten minutes: the tenth and later are
    # written as one combined Event, counted.
    for i in range(12):
        recorder.event(cm, "Warning", "FailedCreate", f"attempt {i} failed")
        clock.advance(1)
    assert recorder.flush()

    got = events(rest, reason="FailedCreate")
    single = sorted(e["message"] for e in got if e["count"] == 1)
    combined = [e for e in got if e["message"].startswith("(combined from similar events): ")]
    assert single == sorted(f"attempt {i} failed" for i in range(9))
    assert len(combined) == 1
    assert combined[0]["count"] == 3
    assert combined[0]["message"] == "(combined from similar events): attempt 11 failed"
    assert combined[0]["involvedObject"]["uid"] == cm["metadata"]["uid"]

    # After ten quiet minutes the aggregation starts over: a new message stands alone.
    clock.advance(601)
    recorder.event(cm, "Warning", "FailedCreate", "attempt 12 failed")
    assert recorder.flush()
    assert [e["count"] for e in events(rest, reason="FailedCreate") if "12" in e["message"]] == [1]
    assert len(events(rest, reason="FailedCreate")) == 11


def test_the_spam_filter_caps_a_burst_per_object_and_refills_with_time(
    recorder: EventRecorder, rest: Rest, cm: JSON, clock: FakeClock
) -> None:
    other = rest.create(CONFIGMAPS, configmap("other"), "default")
    for i in range(30):  # distinct reasons: no aggregation, one spam budget
        recorder.event(cm, "Normal", f"Step{i:02d}", "progress")
    recorder.event(other, "Normal", "Step00", "progress")
    assert recorder.flush()

    reasons = sorted(e["reason"] for e in events(rest, **{"involvedObject.name": "subject"}))
    assert reasons == [f"Step{i:02d}" for i in range(25)]
    assert len(events(rest, **{"involvedObject.name": "other"})) == 1  # its own budget

    clock.advance(150)  # half a token
    recorder.event(cm, "Normal", "Late0", "progress")
    clock.advance(150)  # one whole token
    recorder.event(cm, "Normal", "Late1", "progress")
    recorder.event(cm, "Normal", "Late2", "progress")
    assert recorder.flush()
    late = sorted(
        e["reason"]
        for e in events(rest, **{"involvedObject.name": "subject"})
        if e["reason"].startswith("Late")
    )
    assert late == ["Late1"]


def test_the_spam_budget_is_configurable(
    make_recorder: Callable[..., EventRecorder], rest: Rest, cm: JSON, clock: FakeClock
) -> None:
    recorder = make_recorder(burst=2, refill_seconds=10.0)
    for i in range(4):
        recorder.event(cm, "Normal", f"R{i}", "m")
    clock.advance(10)
    recorder.event(cm, "Normal", "R4", "m")
    assert recorder.flush()
    assert sorted(e["reason"] for e in events(rest)) == ["R0", "R1", "R4"]


def test_a_spam_key_by_reason_gives_each_reason_its_own_budget_and_exempts_some(
    make_recorder: Callable[..., EventRecorder], rest: Rest, cm: JSON, clock: FakeClock
) -> None:
    """client-go's SpamKeyFunc, chosen: a reason repeated past its budget drops its own
    repeats only, and an exempt reason is never dropped."""
    recorder = make_recorder(burst=3, spam_key=spam_key_by_reason(["Lost"]))
    for i in range(6):
        recorder.event(cm, "Warning", "Held", f"held {i}")  # six messages: no aggregation
        clock.advance(1)
    recorder.event(cm, "Warning", "Deferred", "kept")
    for i in range(6):
        recorder.event(cm, "Warning", "Lost", f"lost {i}")
    assert recorder.flush()
    written = {
        reason: sorted(e["message"] for e in events(rest, reason=reason))
        for reason in ("Held", "Deferred", "Lost")
    }
    assert written == {
        "Held": ["held 0", "held 1", "held 2"],
        "Deferred": ["kept"],
        "Lost": [f"lost {i}" for i in range(6)],
    }


def test_a_lasting_condition_is_recorded_when_it_starts_or_changes_and_then_once_a_minute(
    recorder: EventRecorder, rest: Rest, cm: JSON, clock: FakeClock
) -> None:
    """A condition seen on every pass (every 5 s here) for ten minutes: recorded when it
    starts, refreshed once a minute (its count grows), recorded at once when its gist changes,
    and a second subject of the same reason has its own record."""
    for _ in range(24):  # two minutes
        recorder.lasting(cm, "Warning", "Held", "instance 0 waits", subject="0")
        recorder.lasting(cm, "Warning", "Held", "instance 1 waits", subject="1")
        clock.advance(5)
    recorder.lasting(cm, "Warning", "Held", "instance 0 waits longer", subject="0")
    for wait in range(96):  # eight more minutes; the wait is not news
        text = f"instance 0 waited {wait}s"
        recorder.lasting(cm, "Warning", "TimedOut", text, subject="0", gist="waited")
        clock.advance(5)
    assert recorder.flush()
    got = {e["message"]: e["count"] for e in events(rest, reason="Held")}
    assert got["instance 1 waits"] == 2  # at 0 s and 60 s
    assert got["instance 0 waits"] == 2
    assert got["instance 0 waits longer"] == 1  # its change recorded at once
    # The gist "waited" is first seen at 120 s, then refreshed at 180, 240 ... 540 s, each
    # time with the text of the moment (an Event of its own, as a new message is).
    waited = sorted((e["count"], e["message"]) for e in events(rest, reason="TimedOut"))
    assert waited == sorted((1, f"instance 0 waited {w}s") for w in range(0, 85, 12))


def test_namespaced_and_cluster_scoped_objects(
    recorder: EventRecorder, rest: Rest, cluster: Cluster, kubectl: Kubectl
) -> None:
    rest.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    )
    cm = rest.create(CONFIGMAPS, configmap("subject", namespace="team-a"), "team-a")
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-1", "uid": "5c1f0000-0000-0000-0000-000000000001"},
    }
    recorder.event(cm, "Normal", "Namespaced", "in team-a")
    recorder.event(node, "Warning", "ClusterScoped", "a node")
    assert recorder.flush()

    [namespaced] = events(rest, "team-a", reason="Namespaced")
    assert namespaced["metadata"]["namespace"] == "team-a"
    assert namespaced["involvedObject"]["namespace"] == "team-a"
    assert events(rest, "default", reason="Namespaced") == []

    [clustered] = events(rest, "default", reason="ClusterScoped")
    assert clustered["metadata"]["namespace"] == "default"
    assert "namespace" not in clustered["involvedObject"]
    assert clustered["involvedObject"]["kind"] == "Node"
    assert clustered["metadata"]["name"].startswith("node-1.")

    out = kubectl(
        "get", "events", "-A", "--field-selector", "involvedObject.kind=Node", "-o", "json"
    )
    assert [e["reason"] for e in json.loads(out.stdout)["items"]] == ["ClusterScoped"]


def test_a_failed_write_is_retried_and_the_event_lands(
    recorder: EventRecorder, rest: Rest, cluster: Cluster, cm: JSON
) -> None:
    cluster.server.faults.add(Fault(verb="create", resource="events", code=500, times=2))
    recorder.event(cm, "Normal", "Retried", "eventually written")
    assert recorder.flush()

    [ev] = events(rest, reason="Retried")
    assert ev["count"] == 1
    assert cluster.server.faults.rules() == []  # both faults were used up
    assert cluster.server.accounting.total(verb="create", resource="events") == 3


def test_a_failed_patch_is_retried(
    recorder: EventRecorder, rest: Rest, cluster: Cluster, cm: JSON
) -> None:
    recorder.event(cm, "Normal", "Repeated", "again")
    assert recorder.flush()
    cluster.server.faults.add(Fault(verb="patch", resource="events", code=429, times=1))
    cluster.server.faults.add(Fault(verb="patch", resource="events", code=503, times=1))
    recorder.event(cm, "Normal", "Repeated", "again")
    assert recorder.flush()
    [ev] = events(rest, reason="Repeated")
    assert ev["count"] == 2
    assert cluster.server.accounting.total(verb="patch", resource="events") == 3


def test_a_write_that_keeps_failing_is_dropped_without_raising(
    make_recorder: Callable[..., EventRecorder],
    rest: Rest,
    cluster: Cluster,
    cm: JSON,
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = make_recorder(attempts=3)
    cluster.server.faults.add(Fault(verb="create", resource="events", code=503, times=None))
    with caplog.at_level(logging.ERROR, logger="ome.runtime.events"):
        recorder.event(cm, "Warning", "Lost", "never written")
        assert recorder.flush()
    assert events(rest, reason="Lost") == []
    assert cluster.server.accounting.total(verb="create", resource="events") == 3
    assert any("not written: 503" in r.getMessage() for r in caplog.records)

    cluster.server.faults.clear()  # the writer survived and goes on
    recorder.event(cm, "Normal", "Back", "written")
    assert recorder.flush()
    assert len(events(rest, reason="Back")) == 1


def test_a_rejected_event_is_not_retried(
    recorder: EventRecorder, rest: Rest, cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    # An Event name may not hold "/": the server answers 422, which no retry can fix.
    bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a/b"}}
    with caplog.at_level(logging.ERROR, logger="ome.runtime.events"):
        recorder.event(bad, "Normal", "Invalid", "m")
        assert recorder.flush()
    assert cluster.server.accounting.total(verb="create", resource="events") == 1
    assert any("not written: 422" in r.getMessage() for r in caplog.records)
    assert events(rest) == []


def test_event_does_not_block_when_the_server_is_slow(
    recorder: EventRecorder, rest: Rest, cluster: Cluster, cm: JSON
) -> None:
    cluster.server.faults.add(Fault(verb="create", resource="events", latency=2.0, times=1))
    recorder.event(cm, "Normal", "Slow0", "first")
    eventually(lambda: cluster.server.accounting.total(verb="create", resource="events") >= 1)
    # The writer is now stuck in a 2s request; recording must not wait for it.
    began = time.monotonic()
    for i in range(1, 20):
        recorder.event(cm, "Normal", f"Slow{i}", "queued behind a slow write")
    assert time.monotonic() - began < 1.0
    assert recorder.flush(timeout=10)
    assert len(events(rest, **{"involvedObject.name": "subject"})) == 20


def test_a_deleted_event_is_recreated_on_the_next_repeat(
    recorder: EventRecorder, rest: Rest, cm: JSON, clock: FakeClock
) -> None:
    recorder.event(cm, "Warning", "Flapping", "again")
    assert recorder.flush()
    [ev] = events(rest, reason="Flapping")
    name = ev["metadata"]["name"]
    rest.delete(EVENTS, name, "default")
    assert gone(lambda: rest.get(EVENTS, name, "default"))

    clock.advance(30)
    recorder.event(cm, "Warning", "Flapping", "again")
    assert recorder.flush()
    [again] = events(rest, reason="Flapping")
    # As client-go: created under the remembered name, counting every occurrence.
    assert again["metadata"]["name"] == name
    assert again["count"] == 2
    assert again["firstTimestamp"] == "2025-01-01T12:00:00Z"
    assert again["lastTimestamp"] == "2025-01-01T12:00:30Z"
    assert again["metadata"]["uid"] != ev["metadata"]["uid"]

    recorder.event(cm, "Warning", "Flapping", "again")  # and it is patched from then on
    assert recorder.flush()
    assert [e["count"] for e in events(rest, reason="Flapping")] == [3]


def test_bad_input_is_refused_with_a_log_and_never_raises(
    recorder: EventRecorder, rest: Rest, cm: JSON, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="ome.runtime.events"):
        recorder.event(cm, "Info", "BadType", "m")
        recorder.event({}, "Normal", "NoName", "m")
        recorder.event(None, "Normal", "NotADict", "m")  # type: ignore[arg-type]
        assert recorder.flush()
    assert events(rest) == []
    messages = [r.getMessage() for r in caplog.records]
    assert any("unsupported event type 'Info'" in m for m in messages)
    assert any("without metadata.name" in m for m in messages)


def test_stop_writes_what_is_queued_and_later_events_are_dropped(
    rest: Rest, cm: JSON, clock: FakeClock
) -> None:
    recorder = EventRecorder(Client(rest), "ome-test", clock=clock)
    for i in range(5):
        recorder.event(cm, "Normal", f"Queued{i}", "before start")
    recorder.start()
    recorder.stop()
    assert len(events(rest)) == 5
    recorder.event(cm, "Normal", "AfterStop", "dropped")
    assert recorder.flush(timeout=0.1)  # nothing was queued
    assert events(rest, reason="AfterStop") == []
    with pytest.raises(RuntimeError):
        recorder.start()


def test_an_event_in_a_namespace_being_deleted_is_dropped_quietly(
    recorder: EventRecorder, rest: Rest, cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    # kube-apiserver refuses new content in a terminating namespace with 403 and the
    # NamespaceTerminating cause; the event's object goes with the namespace, so losing the
    # event is no error worth a log line (client-go's recorder does the same).
    rest.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "going"}}
    )
    held = configmap("held", namespace="going")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    obj = rest.create(CONFIGMAPS, held, "going")
    rest.delete(NAMESPACES, "going")
    eventually(
        lambda: rest.get(NAMESPACES, "going").get("status", {}).get("phase") == "Terminating"
    )
    with caplog.at_level(logging.DEBUG, logger="ome.runtime.events"):
        recorder.event(obj, "Warning", "TooLate", "the namespace is going")
        assert recorder.flush()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any("its namespace is being deleted" in r.getMessage() for r in caplog.records)
    assert cluster.server.accounting.total(verb="create", resource="events") == 1  # no retry
    rest.patch(CONFIGMAPS, "held", {"metadata": {"finalizers": None}}, "going")

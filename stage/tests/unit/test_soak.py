"""The soak's plan (a seed replays the same faults) and its invariant checker's rules, judged
on plain objects in a real store: each rule passes what the product may do and fails what it
must not."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ome.controllers.inferencereplica import instances
from ome.tpuslice.naming import OWNER_UID_LABEL
from ome_sim.apiserver.server import WriteSeen
from ome_sim.apiserver.store import Store
from ome_sim.soak.checker import LEASES, NODES, PODS, REPLICAS, SLICES, Checker, identity_of
from ome_sim.soak.plan import FAULTS, make_plan

SLICE_LABEL = "cloud.google.com/gke-tpu-slice"
AGENT = "ome-manager/0.1.0 (host_abc)"
NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def test_a_seed_gives_the_same_plan_and_another_seed_another() -> None:
    a, b = make_plan(42, 300), make_plan(42, 300)
    assert [s.json() for s in a] == [s.json() for s in b]
    assert [s.json() for s in make_plan(43, 300)] != [s.json() for s in a]
    faults = [s for s in a if s.is_fault]
    assert len(faults) > 100
    assert {s.kind for s in faults} == set(FAULTS)
    assert [s.at for s in a] == sorted(s.at for s in a)
    assert all(s.at < 300 for s in a)


def test_a_short_plan_still_has_every_kind_once() -> None:
    plan = make_plan(7, 50)
    assert {s.kind for s in plan if s.is_fault} == set(FAULTS)
    assert [s.kind for s in plan[:4]] == ["create"] * 4


def test_unknown_fault_kinds_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault kinds: nope"):
        make_plan(1, 60, ("api-5xx", "nope"))


def test_the_printed_plan_replays_byte_for_byte() -> None:
    def printed() -> str:
        cmd = [sys.executable, "-m", "ome_sim.cli", "soak", "--seed", "99", "--plan"]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout

    first = printed()
    assert first == printed()
    assert len(first.splitlines()) > 100


# -- the checker ------------------------------------------------------------------------------


def meta(name: str, ns: str = "", **extra: Any) -> dict[str, Any]:
    return {"name": name, **({"namespace": ns} if ns else {}), "uid": f"uid-{name}", **extra}


def slice_obj(name: str, owner: str, state: str = "ACTIVE", partitions: bool = True) -> Any:
    return {
        "metadata": meta(
            name, labels={OWNER_UID_LABEL: owner}, creationTimestamp="2026-12-01T11:00:00Z"
        ),
        "spec": {"partitionIds": ["p1"] if partitions else []},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": state}]},
    }


RUNNERS = [{"name": "default", "template": {"spec": {"containers": [{"name": "c"}]}}}]


def replica(replicas: int = 1, rows: list[Any] | None = None) -> Any:
    return {
        "metadata": meta("svc-engine", "soak"),
        "spec": {"replicas": replicas, "runners": RUNNERS},
        "status": {"instanceStatuses": rows or [{"index": 0, "phase": "Ready", "podCount": 1}]},
    }


def pod(name: str = "svc-engine-0-default-0", index: int = 0, slice_name: str = "s-0") -> Any:
    return {
        "metadata": meta(
            name,
            "soak",
            labels={
                "ome.io/managed-by": "OMENative",
                "ome.io/instance-index": str(index),
                "ome.io/revision-hash": instances.revision_hash(RUNNERS),
            },
            annotations={"ome.io/tpu-slice-provisioning": "true"},
            ownerReferences=[
                {"kind": "InferenceReplica", "name": "svc-engine", "uid": "uid-svc-engine"}
            ],
            creationTimestamp="2026-12-01T11:30:00Z",
        ),
        "spec": {"nodeName": "node-1", "nodeSelector": {SLICE_LABEL: slice_name}},
        "status": {"phase": "Running"},
    }


def node(name: str = "node-1", slice_name: str | None = "s-0") -> Any:
    return {"metadata": meta(name, labels={SLICE_LABEL: slice_name} if slice_name else {})}


def lease(holder: str, renewed: datetime) -> Any:
    return {
        "metadata": meta("ome-controller-manager", "ome"),
        "spec": {
            "holderIdentity": holder,
            "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "leaseDurationSeconds": 6,
        },
    }


@pytest.fixture
def world() -> tuple[Store, Checker]:
    store = Store()
    checker = Checker(store, ("ACTIVE", "ACTIVE_DEGRADED"), SLICE_LABEL, clock=NOW.timestamp)
    store.listeners.append(checker.on_change)
    put(store, LEASES, lease("host_abc", NOW - timedelta(seconds=1)))
    put(store, REPLICAS, replica())
    put(store, SLICES, slice_obj("s-0", "uid-svc-engine"))
    put(store, NODES, node())
    put(store, PODS, pod())
    return store, checker


def the_pod(store: Store) -> Any:
    found = store.peek(PODS, ("soak", "svc-engine-0-default-0"))
    assert found is not None
    return found


def put(store: Store, tkey: tuple[str, str], obj: Any) -> None:
    m = obj["metadata"]
    store.put(tkey, (m.get("namespace", ""), m["name"]), obj)


def write(checker: Checker, verb: str, resource: str, name: str, body: Any = None) -> None:
    group = {"slices": "accelerator.gke.io", "inferencereplicas": "ome.io"}.get(
        resource.split("/", maxsplit=1)[0], ""
    )
    ns = "" if resource in ("slices", "nodes") else "soak"
    checker.on_write(WriteSeen(verb, group, resource, ns, name, AGENT, body))


def failed(checker: Checker) -> list[str]:
    return [v.invariant for v in checker.snapshot()[1]]


def test_identity_is_read_from_the_user_agent() -> None:
    assert identity_of(AGENT) == "host_abc"
    assert identity_of("ome-sim/0.1.0") is None
    assert identity_of("ome-manager/0.1.0") is None


def test_a_delete_without_a_uid_precondition_fails(world: tuple[Store, Checker]) -> None:
    store, checker = world
    put(store, PODS, {**pod("gone-pod"), "status": {"phase": "Failed"}})
    write(checker, "delete", "pods", "gone-pod", {"preconditions": {"uid": "uid-gone-pod"}})
    assert failed(checker) == []
    write(checker, "delete", "pods", "gone-pod", {})
    assert failed(checker) == ["uid-precondition"]


def test_a_write_from_a_manager_without_a_valid_lease_fails(
    world: tuple[Store, Checker],
) -> None:
    store, checker = world
    write(checker, "update", "inferencereplicas/status", "svc-engine", {})
    assert failed(checker) == []
    put(store, LEASES, lease("host_abc", NOW - timedelta(seconds=7)))  # expired
    write(checker, "update", "inferencereplicas/status", "svc-engine", {})
    put(store, LEASES, lease("host_other", NOW))  # someone else's
    write(checker, "update", "inferencereplicas/status", "svc-engine", {})
    write(checker, "update", "leases", "ome-controller-manager", {})  # the election is free
    assert failed(checker) == ["lease", "lease"]
    messages = [v.message for v in checker.snapshot()[1]]
    assert "its lease expired 1.0s ago" in messages[0]
    assert "the lease is held by host_other" in messages[1]


def test_a_pod_is_created_only_on_its_own_slice_once_ready(
    world: tuple[Store, Checker],
) -> None:
    store, checker = world
    write(checker, "create", "pods", "p", pod("p"))
    assert failed(checker) == []
    activating = slice_obj("s-1", "uid-svc-engine", state="ACTIVATING")
    put(store, SLICES, activating)
    write(checker, "create", "pods", "p1", pod("p1", slice_name="s-1"))
    put(store, SLICES, slice_obj("s-2", "uid-someone-else"))
    write(checker, "create", "pods", "p2", pod("p2", slice_name="s-2"))
    no_selector = pod("p3")
    no_selector["spec"]["nodeSelector"] = {}
    write(checker, "create", "pods", "p3", no_selector)
    assert failed(checker) == ["slice-gate"] * 3
    # Once the store has recorded s-1 ready, a pod may follow (even if it degrades later).
    put(store, SLICES, slice_obj("s-1", "uid-svc-engine"))
    put(store, SLICES, slice_obj("s-1", "uid-svc-engine", state="ACTIVATING"))
    write(checker, "create", "pods", "p4", pod("p4", slice_name="s-1"))
    assert failed(checker) == ["slice-gate"] * 3


def test_slice_writes_need_the_owner_label_and_never_touch_a_foreign_slice(
    world: tuple[Store, Checker],
) -> None:
    store, checker = world
    write(checker, "delete", "slices", "s-0", {"preconditions": {"uid": "uid-s-0"}})
    assert failed(checker) == []
    assert checker.slice_deletes["host_abc"] == 1
    put(store, SLICES, {"metadata": meta("bare"), "spec": {}})
    write(checker, "delete", "slices", "bare", {"preconditions": {"uid": "uid-bare"}})
    write(checker, "create", "slices", "new", {"metadata": {"name": "new", "labels": {}}})
    put(store, SLICES, slice_obj("theirs", "uid-svc-engine"))
    checker.register_foreign("theirs", "uid-theirs")
    write(checker, "delete", "slices", "theirs", {"preconditions": {"uid": "uid-theirs"}})
    assert failed(checker) == ["slice-owner-label"] * 3


@pytest.mark.parametrize(
    ("change", "cause"),
    [
        (lambda s: s.remove(SLICES, ("", "s-0")), "its Slice s-0 is absent"),
        (
            lambda s: put(s, SLICES, slice_obj("s-0", "uid-svc-engine", partitions=False)),
            "its Slice s-0 lost its partitions",
        ),
        (lambda s: put(s, NODES, node(slice_name=None)), "its Slice s-0 moved off node node-1"),
        (lambda s: put(s, REPLICAS, replica(replicas=0)), "its Instance is scaled away"),
        (lambda s: s.remove(REPLICAS, ("soak", "svc-engine")), "its replica is gone"),
        (
            lambda s: put(
                s,
                REPLICAS,
                replica(rows=[{"index": 0, "phase": "Restarting", "podCount": 1}]),
            ),
            "its Instance is Restarting",
        ),
        (
            lambda s: put(
                s,
                REPLICAS,
                {**replica(), "spec": {"replicas": 1, "runners": [{"name": "default", "x": 1}]}},
            ),
            "an older revision",
        ),
    ],
)
def test_a_pod_delete_needs_a_cause_the_server_shows(
    world: tuple[Store, Checker], change: Any, cause: str
) -> None:
    store, checker = world
    assert checker.pod_delete_cause(the_pod(store)) is None
    write(checker, "delete", "pods", "svc-engine-0-default-0", {"preconditions": {"uid": "u"}})
    assert failed(checker) == ["pod-delete-cause"]
    violation = checker.snapshot()[1][0]
    assert "deleted without a cause: its Slice s-0 is ACTIVE" in violation.message
    assert set(violation.history) == {
        "pods/soak/svc-engine-0-default-0",
        "slices/s-0",
        "nodes/node-1",
    }
    change(store)
    assert checker.pod_delete_cause(the_pod(store)) == cause

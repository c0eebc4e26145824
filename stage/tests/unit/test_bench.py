"""What ``ome-sim bench`` reports from its measurements: each goal as a ratio against its
limit, and a write storm as a failure."""

from __future__ import annotations

from typing import Any

import pytest

from ome.tpuslice import naming
from ome_sim import bench


def burst(n: int, create_s: float, delete_s: float, writes: float, p99: float) -> dict[str, Any]:
    return {
        "services": n,
        "create_s": create_s,
        "delete_s": delete_s,
        "create_per_service_s": create_s / n,
        "delete_per_service_s": delete_s / n,
        "reaction_p50_s": p99 / 2,
        "reaction_p99_s": p99,
        "writes_per_service": writes,
        "writes": {},
        "reads": {},
        "reads_per_service": 0.0,
        "cpu_s": {"apiserver": 1.0, "provider": 1.0, "manager": 1.0},
        "stage_cost": {
            "apiserver_cpu_ms_per_request": 0.5,
            "provider_cpu_ms_per_slice": 2.0,
            "provider_cpu_ms_per_request": 0.25,
            "manager_cpu_ms_per_service": 10.0,
        },
    }


def result(writes: float) -> dict[str, Any]:
    return {
        "baseline_create_s": 0.002,
        "bursts": {
            "20": burst(20, 2.0, 1.0, writes, 0.004),
            "100": burst(100, 20.0, 5.0, writes, 0.010),
        },
        "again": burst(100, 20.0, 5.0, writes, 0.010),
        "steady": {"services": 100, "writes_per_minute": 0.0, "reads_per_minute": 2.0},
        "cold": {
            "services": 500,
            "pods": 2000,
            "nodes": 1000,
            "synced_s": 1.0,
            "first_pass_s": 2.0,
            "peak_rss_bytes": 2**27,
            "writes": {"patch inferencereplicas": 3},
            "reads": {},
        },
    }


def test_each_goal_is_its_ratio_against_its_limit() -> None:
    r = result(writes=bench.ideal_total())
    goals = {g["goal"]: g for g in bench.goals(r, bench.QUICK)}
    reaction = goals["reaction p99 at 100 services <= 3x a bare create"]
    assert reaction["measured"] == 5.0 and not reaction["met"]
    create = goals["create cost per service at 100 <= 1.5x at 20"]
    assert create["measured"] == 2.0 and not create["met"]
    delete = goals["delete cost per service at 100 <= 1.5x at 20"]
    assert delete["measured"] == 1.0 and delete["met"]
    assert goals["writes per lifecycle at 100 services <= 1.2x ideal"]["measured"] == 1.0
    assert not goals["steady non-watch reads per minute (100 Ready) <= 1"]["met"]
    assert goals["cold start peak RSS <= 512 MiB"]["measured"] == 128.0
    cold_writes = goals["cold start (500 services) writes = 0"]
    assert cold_writes["measured"] == 3.0 and not cold_writes["met"]
    r["goals"] = bench.goals(r, bench.QUICK)
    text = bench.summary(r)
    assert "MISSED reaction p99 at 100 services <= 3x a bare create: 5.00 (limit 3)" in text
    assert "met    delete cost per service at 100 <= 1.5x at 20: 1.00 (limit 1.5)" in text
    assert "cold start, 500 services, 2000 pods, 1000 nodes: 3 writes" in text


def test_more_than_three_times_the_ideal_writes_is_a_storm() -> None:
    assert bench.storms(result(writes=3 * bench.ideal_total())) == []
    stormy = result(writes=3 * bench.ideal_total() + 1)
    assert [s.split(":")[0] for s in bench.storms(stormy)] == [
        "write storm in burst 20",
        "write storm in burst 100",
        "write storm in burst again",
    ]


def test_a_converged_copy_is_what_the_manager_would_have_built_in_the_new_namespace() -> None:
    """The cold start's copies: new uids, the Slice renamed for its replica's new uid (D2), its
    node renamed, and every reference (owner, owner-UID label, selector, node name) to the
    new ones; names of the services and pods kept."""
    ns, rep_uid = "bench-steady", "11111111-1111-4111-8111-111111111111"
    h = naming.owner_hash(ns, "svc-0", rep_uid)
    slice_name = naming.slice_name("svc-0", naming.Slot(0, 0), h)
    source = [
        {"kind": "InferenceService", "metadata": {"name": "svc", "namespace": ns, "uid": "s1"}},
        {
            "kind": "InferenceReplica",
            "metadata": {
                "name": "svc-0",
                "namespace": ns,
                "uid": rep_uid,
                "resourceVersion": "7",
                "ownerReferences": [{"kind": "InferenceService", "uid": "s1"}],
            },
        },
        {
            "kind": "Slice",
            "metadata": {"name": slice_name, "labels": {naming.OWNER_UID_LABEL: rep_uid}},
        },
        {
            "kind": "Node",
            "metadata": {"name": "host-1", "uid": "n1", "labels": {bench.SLICE_LABEL: slice_name}},
        },
        {
            "kind": "Pod",
            "metadata": {
                "name": "svc-0-0",
                "namespace": ns,
                "uid": "p1",
                "ownerReferences": [{"kind": "InferenceReplica", "uid": rep_uid}],
            },
            "spec": {"nodeName": "host-1", "nodeSelector": {bench.SLICE_LABEL: slice_name}},
            "status": {"message": f"on {slice_name}, node host-1"},
        },
    ]
    isvc, rep, slc, node, pod = bench.converged_copy(source, "bench-cold-1", 1)
    assert {o["metadata"].get("namespace") for o in (isvc, rep, pod)} == {"bench-cold-1"}
    assert "resourceVersion" not in rep["metadata"]
    new_uid = rep["metadata"]["uid"]
    assert (
        new_uid != rep_uid
        and rep["metadata"]["ownerReferences"][0]["uid"] == isvc["metadata"]["uid"] != "s1"
    )
    want = naming.slice_name(
        "svc-0", naming.Slot(0, 0), naming.owner_hash("bench-cold-1", "svc-0", new_uid)
    )
    assert slc["metadata"] == {"name": want, "labels": {naming.OWNER_UID_LABEL: new_uid}}
    assert node["metadata"]["name"] == "host-1-c1"
    assert node["metadata"]["labels"] == {bench.SLICE_LABEL: want}
    assert pod["metadata"]["name"] == "svc-0-0"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == new_uid
    assert pod["spec"] == {"nodeName": "host-1-c1", "nodeSelector": {bench.SLICE_LABEL: want}}
    assert pod["status"]["message"] == f"on {want}, node host-1-c1"
    assert source[1]["metadata"]["uid"] == rep_uid  # the source is left as it was


def test_a_kubeconfig_left_by_an_earlier_run_is_not_taken_for_the_new_servers(
    tmp_path: Any, monkeypatch: Any
) -> None:
    """make bench reuses .ome/bench/stage: the last run's kubeconfig names a server that is
    gone, and waiting for the file must wait for the new server's."""
    (tmp_path / "kubeconfig").write_text("the last run's")
    seen: dict[str, bool] = {}

    def spawn(name: str, command: list[str], log: Any) -> Any:
        seen[name] = (tmp_path / "kubeconfig").exists()
        raise RuntimeError("stop here")

    monkeypatch.setattr(bench, "_spawn", spawn)
    with pytest.raises(RuntimeError, match="stop here"):
        bench.Stage(tmp_path, hosts=1, activation_delay=1.0).start()
    assert seen == {"apiserver": False}

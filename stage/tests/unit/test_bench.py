"""What ``ome-sim bench`` reports from its measurements: each goal as a ratio against its
limit, a write storm as a failure, the workqueue's depth by priority, and a run against an
earlier one."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from ome.tpuslice import naming
from ome_sim import bench, cli


def burst(
    n: int,
    create_s: float,
    delete_s: float,
    writes: float,
    p99: float,
    manager_ms: float = 10.0,
) -> dict[str, Any]:
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
            "manager_cpu_ms_per_service": manager_ms,
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


def test_a_figure_at_its_limit_meets_it_whatever_the_float_arithmetic() -> None:
    """The CPU figures come from /proc's clock ticks: 1.5 s of CPU over 100 services is
    15 ms exactly, but the difference of two readings can be 1.5000000000000002 s. A figure at
    its limit meets it (as CI's quick bench showed, it was reported MISSED at 15.00)."""
    r = result(writes=bench.ideal_total())
    cpu_s = (1.03 + 1.5) - 1.03  # two readings of a process's CPU, 1.5 s apart
    assert 1000 * cpu_s / 100 > 15.0
    r["bursts"]["100"] = burst(100, 20.0, 5.0, bench.ideal_total(), 0.010, 1000 * cpu_s / 100)
    goals = {g["goal"]: g for g in bench.goals(r, bench.QUICK)}
    assert goals["manager CPU per service at 100 services <= 15 ms"]["met"]
    r["bursts"]["100"] = burst(100, 20.0, 5.0, bench.ideal_total(), 0.010, 15.01)
    goals = {g["goal"]: g for g in bench.goals(r, bench.QUICK)}
    assert not goals["manager CPU per service at 100 services <= 15 ms"]["met"]


def test_each_goal_is_its_ratio_against_its_limit() -> None:
    r = result(writes=bench.ideal_total())
    r["bursts"]["100"] = burst(100, 20.0, 5.0, bench.ideal_total(), 0.4, manager_ms=16.0)
    r["cold"]["first_pass_s"] = 9.0
    goals = {g["goal"]: g for g in bench.goals(r, bench.QUICK)}
    assert list(goals) == [
        "reaction p99 at 100 services <= 150x a bare create",
        "manager CPU per service at 100 services <= 15 ms",
        "create cost per service at 100 <= 1.5x at 20",
        "delete cost per service at 100 <= 1.5x at 20",
        "writes per lifecycle at 20 services <= 1.2x ideal",
        "writes per lifecycle at 100 services <= 1.2x ideal",
        "writes per lifecycle, same names again (100) <= 1.2x ideal",
        "steady writes per minute (100 Ready) = 0",
        "steady non-watch reads per minute (100 Ready) <= 1",
        "cold start (500 services) first pass <= 8 s",
        "cold start (500 services) writes = 0",
        "cold start peak RSS <= 300 MiB",
    ]
    reaction = goals["reaction p99 at 100 services <= 150x a bare create"]
    assert reaction["measured"] == pytest.approx(200.0) and reaction["limit"] == 150.0
    assert not reaction["met"]
    cpu = goals["manager CPU per service at 100 services <= 15 ms"]
    assert (cpu["measured"], cpu["limit"], cpu["met"]) == (16.0, 15.0, False)
    create = goals["create cost per service at 100 <= 1.5x at 20"]
    assert create["measured"] == 2.0 and not create["met"]
    delete = goals["delete cost per service at 100 <= 1.5x at 20"]
    assert delete["measured"] == 1.0 and delete["met"]
    assert goals["writes per lifecycle at 100 services <= 1.2x ideal"]["measured"] == 1.0
    assert not goals["steady non-watch reads per minute (100 Ready) <= 1"]["met"]
    first = goals["cold start (500 services) first pass <= 8 s"]
    assert (first["measured"], first["limit"], first["met"]) == (9.0, 8.0, False)
    rss = goals["cold start peak RSS <= 300 MiB"]
    assert (rss["measured"], rss["limit"], rss["met"]) == (128.0, 300.0, True)
    cold_writes = goals["cold start (500 services) writes = 0"]
    assert cold_writes["measured"] == 3.0 and not cold_writes["met"]
    r["goals"] = bench.goals(r, bench.QUICK)
    text = bench.summary(r)
    assert "MISSED reaction p99 at 100 services <= 150x a bare create: 200.00 (limit 150)" in text
    assert "MISSED manager CPU per service at 100 services <= 15 ms: 16.00 (limit 15)" in text
    assert "met    delete cost per service at 100 <= 1.5x at 20: 1.00 (limit 1.5)" in text
    assert "met    cold start peak RSS <= 300 MiB: 128.00 (limit 300)" in text
    assert "cold start, 500 services, 2000 pods, 1000 nodes: 3 writes" in text
    assert "first pass done in 9.0s, peak RSS" in text  # no list floor measured: none said
    assert "bare pod create round trip: 2.0 ms; ideal writes" in text  # one sampling: no more
    r["baseline"] = {"samples": 120, "rounds": 4, "p25_s": 0.0015, "p75_s": 0.0031}
    assert (
        "bare pod create round trip: 2.0 ms (the median of 120 creates in 4 samplings, one "
        "before each burst; quartiles 1.5 and 3.1 ms); ideal writes" in bench.summary(r)
    )
    r["cold"]["list_floor"] = {"seconds": 2.25, "lists": {"pods": {"objects": 20, "seconds": 2.25}}}
    assert (
        "first pass done in 9.0s (the same lists alone, to bare clients: 2.2s), peak RSS"
        in bench.summary(r)
    )


def full_result() -> dict[str, Any]:
    r = result(writes=bench.ideal_total())
    r["bursts"] = {
        "1": burst(1, 1.0, 1.0, 11.0, 0.004),
        "50": burst(50, 5.0, 2.0, 11.0, 0.010),
        "500": burst(500, 50.0, 20.0, 11.0, 0.2, manager_ms=14.0),  # 100x
        "2000": burst(2000, 200.0, 80.0, 11.0, 0.5, manager_ms=15.5),  # 250x
    }
    return r


def test_the_full_plan_has_a_reaction_and_cpu_goal_at_500_and_at_2000() -> None:
    goals = {g["goal"]: g for g in bench.goals(full_result(), bench.FULL)}
    at_500 = goals["reaction p99 at 500 services <= 150x a bare create"]
    assert (at_500["measured"], at_500["limit"], at_500["met"]) == (pytest.approx(100.0), 150, True)
    at_2000 = goals["reaction p99 at 2000 services <= 300x a bare create"]
    assert (at_2000["measured"], at_2000["limit"], at_2000["met"]) == (
        pytest.approx(250.0),
        300,
        True,
    )
    assert goals["manager CPU per service at 500 services <= 15 ms"]["met"]
    cpu = goals["manager CPU per service at 2000 services <= 15 ms"]
    assert (cpu["measured"], cpu["met"]) == (15.5, False)
    assert not [g for g in goals if "reaction p99 at 2000 services <= 150x" in g]


def test_a_burst_of_2000_compared_has_its_own_reaction_limit_only() -> None:
    """``--bursts 500,2000``: 2,000 is the compared burst, and its limit is 300x, not 150x."""
    r = full_result()
    plan = bench.dataclasses.replace(bench.FULL, bursts=(500, 2000), compare=(500, 2000))
    reaction = [g["goal"] for g in bench.goals(r, plan) if g["goal"].startswith("reaction")]
    assert reaction == ["reaction p99 at 2000 services <= 300x a bare create"]
    cpu = [g["goal"] for g in bench.goals(r, plan) if g["goal"].startswith("manager CPU")]
    assert cpu == ["manager CPU per service at 2000 services <= 15 ms"]


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


# -- the workqueue's depth by priority --------------------------------------------------------

WITHOUT_PRIORITY = """\
# HELP workqueue_depth Current depth of workqueue
# TYPE workqueue_depth gauge
workqueue_depth{name="inferencereplica"} 3.0
workqueue_depth{name="inferenceservice"} 1.0
# HELP workqueue_adds_total Total number of adds handled by workqueue
# TYPE workqueue_adds_total counter
workqueue_adds_total{name="inferencereplica"} 40.0
"""

WITH_PRIORITY = """\
# HELP workqueue_depth Current depth of workqueue
# TYPE workqueue_depth gauge
workqueue_depth{name="inferencereplica",priority="100"} 3.0
workqueue_depth{name="inferencereplica",priority="0"} 7.0
workqueue_depth{name="inferencereplica",priority="-100"} 2.0
workqueue_depth{name="inferenceservice",priority="0"} 1.0
# HELP workqueue_longest_running_processor_seconds How many seconds has the longest running processor for workqueue been running.
# TYPE workqueue_longest_running_processor_seconds gauge
workqueue_longest_running_processor_seconds{name="inferencereplica"} 0.5
"""


def test_the_depth_without_a_priority_label_is_normal() -> None:
    depth = bench.queue_depths(WITHOUT_PRIORITY)
    assert depth == {"inferencereplica": {"0": 3.0}, "inferenceservice": {"0": 1.0}}
    assert bench.total_depth(depth) == 4.0


def test_the_depth_is_by_queue_and_priority() -> None:
    depth = bench.queue_depths(WITH_PRIORITY)
    assert depth == {
        "inferencereplica": {"100": 3.0, "0": 7.0, "-100": 2.0},
        "inferenceservice": {"0": 1.0},
    }
    assert bench.total_depth(depth) == 13.0
    assert bench.queue_depths("") == {}


def test_the_depth_from_prometheus_clients_own_exposition() -> None:
    """What the manager serves: prometheus_client's text for a gauge labelled by name and
    priority."""
    reg = CollectorRegistry()
    gauge = Gauge(
        "workqueue_depth", "Current depth of workqueue", ("name", "priority"), registry=reg
    )
    gauge.labels("inferencereplica", "-100").set(5)
    gauge.labels("inferencereplica", "100").set(1)
    text = generate_latest(reg).decode()
    assert bench.queue_depths(text) == {"inferencereplica": {"-100": 5.0, "100": 1.0}}


def test_a_text_that_is_no_exposition_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        bench.queue_depths("<html>not found</html>")


def test_the_sampler_keeps_what_parses_and_counts_the_failed_scrapes() -> None:
    script: list[str | Exception] = [
        WITHOUT_PRIORITY,
        OSError("connection refused"),
        "<html>not found</html>",
        WITH_PRIORITY,
    ]
    exhausted = threading.Event()

    def scrape() -> str:
        if not script:
            exhausted.set()
            raise OSError("no more")
        step = script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    sampler = bench.DepthSampler(scrape, since=bench.time.monotonic(), every=0.001).start()
    assert exhausted.wait(5)
    sampler.stop()
    assert [s["depth"] for s in sampler.samples] == [
        {"inferencereplica": {"0": 3.0}, "inferenceservice": {"0": 1.0}},
        {
            "inferencereplica": {"100": 3.0, "0": 7.0, "-100": 2.0},
            "inferenceservice": {"0": 1.0},
        },
    ]
    assert 0 <= sampler.samples[0]["t"] <= sampler.samples[1]["t"] < 5
    assert sampler.failed >= 3  # the refused one, the page, and at least one after the script


def test_the_peak_per_priority_is_summed_over_the_queues_and_first_reached() -> None:
    samples = [
        {"t": 0.0, "depth": {"a": {"100": 1.0, "0": 2.0}, "b": {"0": 1.0}}},
        {"t": 0.5, "depth": {"a": {"100": 4.0, "0": 0.0}, "b": {"0": 2.0, "-100": 5.0}}},
        {"t": 1.0, "depth": {"a": {"100": 4.0}, "b": {"0": 3.0, "-100": 1.0, "7": 2.0}}},
    ]
    peaks = bench.depth_peaks(samples)
    assert peaks == {
        "100": {"depth": 4.0, "at_s": 0.5},
        "7": {"depth": 2.0, "at_s": 1.0},
        "0": {"depth": 3.0, "at_s": 0.0},
        "-100": {"depth": 5.0, "at_s": 0.5},
    }
    assert list(peaks) == ["100", "7", "0", "-100"]  # highest priority first
    assert bench.depth_peaks([]) == {}


def test_the_summary_shows_the_peak_depth_per_priority_per_burst() -> None:
    r = result(writes=bench.ideal_total())
    r["bursts"]["20"]["queue_depth"] = [{"t": 0.0, "depth": {}}] * 4
    r["bursts"]["20"]["queue_depth_peak"] = {"0": {"depth": 12.0, "at_s": 1.5}}
    r["bursts"]["20"]["queue_depth_failed_scrapes"] = 1
    r["bursts"]["100"]["queue_depth_peak"] = {
        "100": {"depth": 3.0, "at_s": 2.0},
        "-100": {"depth": 40.0, "at_s": 7.5},
        "5": {"depth": 1.0, "at_s": 0.5},
    }
    r["goals"] = bench.goals(r, bench.QUICK)
    lines = bench.summary(r).splitlines()
    at = lines.index("workqueue depth by priority (peak, at s):")
    assert lines[at + 1].split() == ["services", "high", "5", "normal", "low", "samples", "failed"]
    assert lines[at + 2].split() == ["20", "-", "-", "12", "at", "1.5", "-", "4", "1"]
    assert lines[at + 3].split() == [
        *["100", "3", "at", "2.0", "1", "at", "0.5", "-", "40", "at", "7.5", "0", "0"]
    ]
    assert lines[at + 4].split() == ["100", "again", "-", "-", "-", "-", "0", "0"]


# -- against an earlier run -------------------------------------------------------------------


def test_a_run_against_an_earlier_one_is_each_figure_with_this_over_that() -> None:
    this = result(writes=12.0)
    that = result(writes=10.0)
    that["baseline_create_s"] = 0.004
    that["bursts"] = {
        "100": burst(100, 10.0, 5.0, 10.0, 0.010, manager_ms=20.0),
        "500": burst(500, 50.0, 5.0, 10.0, 0.010),
    }
    that["cold"]["first_pass_s"] = 4.0
    that["cold"]["peak_rss_bytes"] = 2**28
    this["cold"]["list_floor"] = {"seconds": 1.5, "lists": {}}
    that["cold"]["list_floor"] = {"seconds": 1.0, "lists": {}}
    rows = bench.compare(this, that)
    table = {(r["burst"], r["figure"]): (r["this"], r["that"], r["ratio"]) for r in rows}
    assert sorted({r["burst"] for r in rows if r["burst"] is not None}) == [100]
    assert table[(100, "reaction_p50_x")] == (2.5, 1.25, 2.0)
    assert table[(100, "reaction_p99_x")] == (5.0, 2.5, 2.0)
    assert table[(100, "all_ready_s")] == (20.0, 10.0, 2.0)
    assert table[(100, "manager_cpu_ms_per_service")] == (10.0, 20.0, 0.5)
    assert table[(100, "writes_per_service")] == (12.0, 10.0, 1.2)
    assert table[(None, "cold_first_pass_s")] == (2.0, 4.0, 0.5)
    assert table[(None, "cold_peak_rss_mib")] == (128.0, 256.0, 0.5)
    # the API server alone serving the same lists, and what each first pass took above it
    assert table[(None, "cold_list_floor_s")] == (1.5, 1.0, 1.5)
    assert table[(None, "cold_above_floor_s")] == (0.5, 3.0, pytest.approx(1 / 6))
    assert len(rows) == 9

    text = bench.compare_table({"path": "old.json", "started": "then", "rows": rows})
    lines = text.splitlines()
    assert lines[0] == "compared with old.json (started then):"
    assert lines[1].split() == ["services", "figure", "this", "that", "this/that"]
    assert "100  reaction p99 (x bare create)        5.00      2.50      2.00" in text
    assert "cold  cold start peak RSS (MiB)         128.00    256.00      0.50" in text
    assert "cold  cold start lists alone (s)          1.50      1.00      1.50" in text
    assert "cold  first pass above lists (s)          0.50      3.00      0.17" in text


def test_a_figure_missing_or_zero_in_the_earlier_run_has_no_ratio() -> None:
    this = result(writes=12.0)
    that = result(writes=0.0)
    del that["cold"]
    rows = {(r["burst"], r["figure"]): r for r in bench.compare(this, that)}
    assert rows[(100, "writes_per_service")]["ratio"] is None
    assert rows[(None, "cold_first_pass_s")]["that"] is None
    assert rows[(None, "cold_first_pass_s")]["ratio"] is None
    # a run from before the list floor was measured: no floor, nothing above it
    assert rows[(None, "cold_list_floor_s")]["this"] is None
    assert rows[(None, "cold_above_floor_s")]["this"] is None
    text = bench.compare_table({"path": "x", "rows": list(rows.values())})
    assert "cold  cold start first pass (s)           2.00         -         -" in text


def no_stage(monkeypatch: Any) -> list[str]:
    started: list[str] = []

    def start(self: Any) -> None:
        started.append("stage")
        raise bench.StageError("no stage in unit tests")

    monkeypatch.setattr(bench.Stage, "start", start)
    return started


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "No such file or directory"),
        ("{not json", "not JSON"),
        ('{"bursts": {}}', "not a bench result"),
        ("[1, 2]", "not a bench result"),
    ],
)
def test_a_run_to_compare_with_that_cannot_be_read_is_a_one_line_error(
    tmp_path: Path, monkeypatch: Any, capsys: Any, content: str | None, reason: str
) -> None:
    started = no_stage(monkeypatch)
    path = tmp_path / "earlier.json"
    if content is not None:
        path.write_text(content)
    assert bench.run(True, tmp_path / "out", compare_path=path) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bench: cannot compare with {path}: ")
    assert reason in err and err.count("\n") == 1
    assert started == []  # nothing ran
    assert not (tmp_path / "out").exists()

    assert cli.main(["bench", "--quick", "--compare", str(path), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert started == []


def test_the_comparison_is_written_into_the_result(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """Even a run that failed early writes what it can compare: the cold start's figures,
    none of its own."""
    started = no_stage(monkeypatch)
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({**result(writes=11.0), "started": "earlier"}))
    out = tmp_path / "out"
    assert bench.run(True, out, compare_path=earlier) == 1
    assert started == ["stage"]
    (written,) = out.glob("*.json")
    compared = json.loads(written.read_text())["compared_with"]
    assert compared["path"] == str(earlier) and compared["started"] == "earlier"
    assert [(r["figure"], r["this"], r["that"]) for r in compared["rows"]] == [
        ("cold_first_pass_s", None, 2.0),
        ("cold_list_floor_s", None, None),  # the earlier run measured no list floor
        ("cold_above_floor_s", None, None),
        ("cold_peak_rss_mib", None, 128.0),
    ]
    assert f"compared with {earlier} (started earlier):" in capsys.readouterr().out


# -- another checkout's manager ----------------------------------------------------------------


def _checkout(root: Path, *, package_init: bool = True) -> Path:
    """A tree holding a manager module at ``root/pkg/ome/entrypoints/manager.py``."""
    package = root / "pkg" / "ome"
    (package / "entrypoints").mkdir(parents=True)
    if package_init:
        (package / "__init__.py").write_text("")
    (package / "entrypoints" / "__init__.py").write_text("")
    (package / "entrypoints" / "manager.py").write_text("")
    return root


def test_another_checkouts_manager_runs_from_its_pkg_first_on_the_path(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    tree = _checkout(tmp_path / "main")
    root = bench.manager_from(tree)
    assert root == (tree / "pkg").resolve()
    assert bench.manager_env(root) == {"PYTHONPATH": f"{root}:/elsewhere"}
    assert bench.manager_env(None) == {}
    # a directory holding the package itself will do as well
    assert bench.manager_from(tree / "pkg") == root


def test_a_manager_this_environment_would_not_import_is_refused(tmp_path: Path) -> None:
    """Without its ``__init__.py``, ``ome`` there is only a namespace portion: Python imports
    the installed package instead, which is not the manager asked for."""
    tree = _checkout(tmp_path / "main", package_init=False)
    with pytest.raises(bench.ManagerFromError) as e:
        bench.manager_from(tree)
    assert str(e.value).startswith(f"--manager-from {tree}: this environment would not run ")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("option", "argument"), [("--manager-from", "manager_tree"), ("--against", "against_tree")]
)
def test_a_directory_with_no_manager_is_a_one_line_error_before_anything_runs(
    tmp_path: Path, monkeypatch: Any, capsys: Any, option: str, argument: str
) -> None:
    started = no_stage(monkeypatch)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert bench.run(True, tmp_path / "out", **{argument: empty}) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bench: {option} {empty}: no manager there (looked for ")
    assert err.count("\n") == 1
    assert started == []
    assert not (tmp_path / "out").exists()

    argv = ["bench", "--quick", option, str(empty), "--out", str(tmp_path / "out")]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert started == []


def test_the_stage_starts_that_manager_and_the_result_names_it(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    tree = _checkout(tmp_path / "main")
    root = (tree / "pkg").resolve()
    envs: list[dict[str, str] | None] = []

    def start_manager(*_args: Any, env: dict[str, str] | None = None, **_kw: Any) -> Any:
        envs.append(env)
        raise bench.StageError("no manager in unit tests")

    def start(self: Any) -> None:
        self.kubeconfig = tmp_path / "kubeconfig"
        self.start_manager()

    monkeypatch.setattr(bench.Stage, "start", start)
    monkeypatch.setattr(bench.system, "start_manager", start_manager)
    out = tmp_path / "out"
    assert bench.run(True, out, manager_tree=tree) == 1
    assert envs and envs[0] is not None
    assert envs[0]["PYTHONPATH"].split(":")[0] == str(root)
    (written,) = out.glob("*.json")
    assert json.loads(written.read_text())["manager_from"] == str(root)
    assert f"bench: the manager runs from {root}" in capsys.readouterr().err


def test_the_summary_and_the_comparison_say_whose_manager_ran() -> None:
    r = result(writes=bench.ideal_total())
    r["goals"] = bench.goals(r, bench.QUICK)
    assert bench.summary(r).splitlines()[0] == "the manager: this tree's"
    r["manager_from"] = "/tmp/main/pkg"
    assert bench.summary(r).splitlines()[0] == "the manager: from /tmp/main/pkg"
    rows = bench.compare(r, r)
    text = bench.compare_table(
        {"path": "old.json", "started": "then", "manager_from": "/tmp/main/pkg", "rows": rows}
    )
    assert text.splitlines()[0] == (
        "compared with old.json (started then; its manager from /tmp/main/pkg):"
    )


# -- another checkout's manager in the same run (--against) -------------------------------------


def against_result(other_ms: float, other_ready_s: float, other_first_pass_s: float) -> Any:
    r = full_result()
    r["against"] = {
        "manager_from": "/tmp/main/pkg",
        "bursts": {
            n: {
                **b,
                "create_s": other_ready_s * int(n) / 500,
                "stage_cost": {**b["stage_cost"], "manager_cpu_ms_per_service": other_ms},
            }
            for n, b in r["bursts"].items()
        },
        "cold": {**r["cold"], "first_pass_s": other_first_pass_s},
    }
    return r


def test_against_another_manager_a_goal_is_met_by_its_limit_or_by_its_ratio() -> None:
    """16 ms against the other manager's 60 (0.27x) meets the CPU goal its limit missed; the
    cold start's 9 s against 20 (0.45x) likewise; all Ready is a ratio only."""
    r = against_result(other_ms=60.0, other_ready_s=50.0, other_first_pass_s=20.0)
    r["bursts"]["500"]["stage_cost"]["manager_cpu_ms_per_service"] = 16.0
    r["cold"]["first_pass_s"] = 9.0
    goals = {g["goal"]: g for g in bench.goals(r, bench.FULL)}
    cpu = goals["manager CPU per service at 500 services <= 15 ms or <= 0.33x the other manager's"]
    assert (cpu["measured"], cpu["limit"], cpu["ratio_limit"]) == (16.0, 15.0, 1 / 3)
    assert cpu["ratio"] == pytest.approx(16 / 60) and cpu["met"]
    cpu_2000 = goals[
        "manager CPU per service at 2000 services <= 15 ms or <= 0.33x the other manager's"
    ]
    assert cpu_2000["ratio"] == pytest.approx(15.5 / 60) and cpu_2000["met"]
    ready = goals["all Ready at 500 services <= 1.05x the other manager's"]
    assert (ready["measured"], ready["limit"], ready["met"]) == (1.0, 1.05, True)
    ready_2000 = goals["all Ready at 2000 services <= 1.05x the other manager's"]
    assert ready_2000["measured"] == pytest.approx(200 / 200)
    cold = goals["cold start (500 services) first pass <= 8 s or <= 0.5x the other manager's"]
    assert cold["ratio"] == pytest.approx(0.45) and cold["met"]

    r["goals"] = list(goals.values())
    text = bench.summary(r)
    assert (
        "  met    manager CPU per service at 500 services <= 15 ms or <= 0.33x the other "
        "manager's: 16.00 (limit 15); 0.27x the other manager's (limit 0.33)"
    ) in text
    assert "against the manager from /tmp/main/pkg (that), in this run" in text
    rows = [" ".join(line.split()) for line in text.splitlines()]
    assert "500 manager CPU per service (ms) 16.00 60.00 0.27" in rows
    assert "cold cold start first pass (s) 9.00 20.00 0.45" in rows
    assert bench.against_table(result(writes=11.0)) == []  # without --against


def test_against_another_manager_a_goal_missed_both_ways_is_missed() -> None:
    r = against_result(other_ms=30.0, other_ready_s=40.0, other_first_pass_s=10.0)
    r["bursts"]["500"]["stage_cost"]["manager_cpu_ms_per_service"] = 16.0
    r["cold"]["first_pass_s"] = 9.0
    goals = {g["goal"]: g for g in bench.goals(r, bench.FULL)}
    cpu = goals["manager CPU per service at 500 services <= 15 ms or <= 0.33x the other manager's"]
    assert cpu["ratio"] == pytest.approx(16 / 30) and not cpu["met"]
    ready = goals["all Ready at 500 services <= 1.05x the other manager's"]
    assert ready["measured"] == pytest.approx(50 / 40) and not ready["met"]
    cold = goals["cold start (500 services) first pass <= 8 s or <= 0.5x the other manager's"]
    assert cold["ratio"] == pytest.approx(0.9) and not cold["met"]


def test_without_the_other_managers_figure_a_goal_is_its_limit_alone() -> None:
    r = against_result(other_ms=0.0, other_ready_s=50.0, other_first_pass_s=20.0)
    del r["against"]["bursts"]["2000"], r["against"]["cold"]
    names = [g["goal"] for g in bench.goals(r, bench.FULL)]
    assert "manager CPU per service at 500 services <= 15 ms" in names  # 0 ms: no ratio
    assert "manager CPU per service at 2000 services <= 15 ms" in names
    assert "all Ready at 500 services <= 1.05x the other manager's" in names
    assert not [n for n in names if n.startswith("all Ready at 2000")]
    assert "cold start (500 services) first pass <= 8 s" in names


class _FakeWatcher:
    def __init__(self, _rest: Any) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def _fake_run(
    monkeypatch: Any,
    ran: list[tuple[str, Any]],
    samples: list[list[float]],
    server_ms: dict[str, list[float]] | None = None,
    ready_s: dict[str, list[float]] | None = None,
) -> None:
    """``run`` on a stage that runs nothing: each step it took is appended to ``ran``, each
    bare-create sampling returns the next of ``samples``, and each burst in a namespace of
    ``server_ms`` the next API server CPU per request it lists (1 ms otherwise), and of
    ``ready_s`` the next time to all Ready (1 s otherwise)."""
    speeds = {ns: iter(ms) for ns, ms in (server_ms or {}).items()}
    readies = {ns: iter(s) for ns, s in (ready_s or {}).items()}
    sampled = iter(samples)

    def start(self: Any) -> None:
        self.rest = None
        self.start_manager()

    def start_manager(self: Any) -> float:
        ran.append(("start", self.manager_root))
        self.manager = object()
        return 0.5

    def stop_manager(self: Any) -> None:
        ran.append(("stop", self.manager_root))
        self.manager = None

    def fake_burst(stage: Any, _w: Any, n: int, namespace: str, _t: float) -> Any:
        ran.append((namespace, stage.manager_root))
        ms = next(speeds[namespace]) if namespace in speeds else 1.0
        ready = next(readies[namespace]) if namespace in readies else 1.0
        return bench.Burst(
            services=n, create_s=ready, delete_s=1.0, reaction_p50_s=0.001,
            reaction_p99_s=0.002, writes={}, writes_per_service=12.0, reads_per_service=0.0,
            reads={}, cpu_s={"manager": 1.0, "apiserver": ms}, requests_total=1000,
            provider_requests=1, queue_depth=[], queue_depth_failed=0,
        )  # fmt: skip

    def fake_cold(stage: Any, cluster: Any) -> Any:
        ran.append(("cold", stage.manager_root))
        return {**result(11.0)["cold"], **cluster}

    def fake_samples(stage: Any, round_: int) -> list[float]:
        ran.append((f"bare {round_}", stage.manager_root))
        return next(sampled)

    monkeypatch.setattr(bench.Stage, "start", start)
    monkeypatch.setattr(bench.Stage, "start_manager", start_manager)
    monkeypatch.setattr(bench.Stage, "stop_manager", stop_manager)
    monkeypatch.setattr(bench.Stage, "stop", lambda self: None)
    monkeypatch.setattr(bench, "Watcher", _FakeWatcher)
    monkeypatch.setattr(bench, "baseline_samples", fake_samples)
    monkeypatch.setattr(bench, "burst", fake_burst)
    monkeypatch.setattr(bench, "cold_start", fake_cold)
    monkeypatch.setattr(bench, "populate_cold", lambda *_a: {"services": 5, "pods": 1, "nodes": 1})
    monkeypatch.setattr(
        bench, "steady", lambda *_a: {"services": 1, "writes_per_minute": 0, "reads_per_minute": 0}
    )


def test_the_other_manager_runs_each_burst_and_the_cold_start_first(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """Which manager each scenario ran with, in order: the other one, then this tree's."""
    other_tree, this_tree = _checkout(tmp_path / "main"), _checkout(tmp_path / "this")
    other, this = (other_tree / "pkg").resolve(), (this_tree / "pkg").resolve()
    ran: list[tuple[str, Any]] = []
    samples = [
        [0.004, 0.004], [0.001], [0.002], [0.001], [0.003], [0.002], [0.003], [0.001], [0.004],
        [0.003, 0.005],
    ]  # fmt: skip
    _fake_run(monkeypatch, ran, samples)
    plan = (1, 20)
    out = tmp_path / "out"
    code = bench.run(True, out, plan, manager_tree=this_tree, against_tree=other_tree)
    assert ran == [
        ("start", this), ("bare 0", this),
        ("stop", this), ("start", other), ("bare 1", other), ("bench-1-against", other),
        ("stop", other), ("start", this), ("bare 2", this), ("bench-1", this),
        # the judged pair: three runs, which manager first alternating, each burst on a
        # manager started for it (this one's second burst too, though it went last before)
        ("stop", this), ("start", other), ("bare 3", other), ("bench-20-against", other),
        ("stop", other), ("start", this), ("bare 4", this), ("bench-20", this),
        ("stop", this), ("start", this), ("bare 5", this), ("bench-20", this),
        ("stop", this), ("start", other), ("bare 6", other), ("bench-20-against", other),
        ("stop", other), ("start", other), ("bare 7", other), ("bench-20-against", other),
        ("stop", other), ("start", this), ("bare 8", this), ("bench-20", this),
        ("bare 9", this), ("bench-20", this),  # the same names again, on the same manager
        ("cold", other), ("cold", this),
    ]  # fmt: skip
    assert code == 0
    (written,) = out.glob("*.json")
    report = json.loads(written.read_text())
    # the unit of every reaction: the median of all the bare creates, sampled before each burst
    assert report["baseline_create_s"] == 0.003
    assert report["baseline"] == {"samples": 12, "rounds": 10, "p25_s": 0.002, "p75_s": 0.004}
    against = report["against"]
    assert against["manager_from"] == str(other) and sorted(against["bursts"]) == ["1", "20"]
    assert against["cold"]["services"] == 5
    runs = against["pairs"]["20"]["runs"]
    assert [r["first"] for r in runs] == ["that", "this", "that"]
    assert runs[0] == {
        "server_cpu_ms_per_request": [1.0, 1.0],
        "all_ready_s": [1.0, 1.0],
        "manager_cpu_ms_per_service": [50.0, 50.0],
        "first": "that",
    }
    assert "1" not in against["pairs"]  # no goal compares it: one run
    assert f"each burst and the cold start run first with the manager from {other}" in (
        capsys.readouterr().err
    )


def test_a_judged_pair_runs_three_times_and_its_figures_are_the_median_run(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """One pair's ratio of all Ready moves by a fifth from one pair to the next on one stage:
    a pair a goal takes a ratio from runs ``PAIR_RUNS`` times, which manager first
    alternating, and the goals take the run whose all Ready ratio is the median, its two
    bursts whole (not a mix of runs). A burst no goal compares (here 1) runs once."""
    other_tree, this_tree = _checkout(tmp_path / "main"), _checkout(tmp_path / "this")
    ready = {
        "bench-20-against": [10.0, 10.0, 10.0],
        "bench-20": [12.0, 8.0, 9.0, 7.0],  # 1.2x, 0.8x, 0.9x; then the same names again
    }
    server = {"bench-20": [1.0, 1.0, 1.1, 1.0], "bench-20-against": [1.0, 1.0, 1.0]}
    _fake_run(monkeypatch, [], [[0.001]] * 12, server, ready)
    out = tmp_path / "out"
    assert bench.run(True, out, (1, 20), manager_tree=this_tree, against_tree=other_tree) == 0
    report = json.loads(next(out.glob("*.json")).read_text())
    pair = report["against"]["pairs"]["20"]
    assert [bench.ready_ratio(r) for r in pair["runs"]] == [1.2, 0.8, 0.9]
    assert pair["kept"] == 2  # 0.9x, between 0.8x and 1.2x
    assert report["bursts"]["20"]["create_s"] == 9.0
    assert report["bursts"]["20"]["stage_cost"]["apiserver_cpu_ms_per_request"] == 1.1
    assert report["against"]["bursts"]["20"]["create_s"] == 10.0
    assert report["again"]["create_s"] == 7.0
    assert "1" not in report["against"]["pairs"]
    (goal,) = [g for g in report["goals"] if g["goal"].startswith("all Ready at 20")]
    assert goal["measured"] == 0.9 and goal["met"]
    assert (
        "the pair of 20 services ran 3 times, which manager first alternating; the figures "
        "above are its run 3, the median of all Ready (1.20x, 0.80x, 0.90x)"
        in bench.summary(report)
    )


def test_the_median_run_is_the_median_of_all_runs_and_of_two_the_higher() -> None:
    def run_(ratio: float, this_ms: float = 1.0) -> dict[str, Any]:
        return {"all_ready_s": [10.0, 10.0 * ratio], "server_cpu_ms_per_request": [1.0, this_ms]}

    assert bench.median_run([run_(1.0)]) == 0
    assert bench.median_run([run_(1.1), run_(0.9)]) == 0  # of two, the higher: never flattering
    assert bench.median_run([run_(0.5, 1.5), run_(1.1), run_(0.9)]) == 2
    assert bench.median_run([run_(1.1, 1.5), run_(0.5), run_(0.9, 0.7)]) == 2


def test_every_run_of_a_pair_counts_whatever_the_server_spent_per_request(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The API server's CPU per request is no measure of the stage's speed alone: in one
    minute main's requests cost it about 1.15 times this tree's, so a rule that left out a run
    whose two bursts differed kept mostly the runs where this tree met the slower minute.
    Bursts whose server cost 1.5 times as much per request still make up the pair's
    ``PAIR_RUNS`` runs, none run again, and the goals take their median. (The order of the
    runs and the summary's line are the other tests'.)"""
    other_tree, this_tree = _checkout(tmp_path / "main"), _checkout(tmp_path / "this")
    speeds = {"bench-20-against": [1.0, 1.5, 1.0], "bench-20": [1.5, 1.0, 1.1, 1.0]}
    ready = {"bench-20-against": [10.0, 10.0, 10.0], "bench-20": [9.0, 12.0, 8.0, 7.0]}
    _fake_run(monkeypatch, [], [[0.001]] * 10, speeds, ready)
    out = tmp_path / "out"
    assert bench.run(True, out, (1, 20), manager_tree=this_tree, against_tree=other_tree) == 0
    report = json.loads(next(out.glob("*.json")).read_text())
    pair = report["against"]["pairs"]["20"]
    assert [r["server_cpu_ms_per_request"] for r in pair["runs"]] == [
        [1.0, 1.5], [1.5, 1.0], [1.0, 1.1]
    ]  # fmt: skip
    assert pair["kept"] == 0  # 0.9x, between 0.8x and 1.2x
    assert report["bursts"]["20"]["create_s"] == 9.0

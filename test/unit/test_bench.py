"""What ``ome-sim bench`` reports from its measurements: each goal as a ratio against its
limit, and a write storm as a failure."""

from __future__ import annotations

from typing import Any

from ome.sim import bench


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
        "cold": {"services": 100, "synced_s": 1.0, "first_pass_s": 2.0, "peak_rss_bytes": 2**27},
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
    r["goals"] = bench.goals(r, bench.QUICK)
    text = bench.summary(r)
    assert "MISSED reaction p99 at 100 services <= 3x a bare create: 5.00 (limit 3)" in text
    assert "met    delete cost per service at 100 <= 1.5x at 20: 1.00 (limit 1.5)" in text


def test_more_than_three_times_the_ideal_writes_is_a_storm() -> None:
    assert bench.storms(result(writes=3 * bench.ideal_total())) == []
    stormy = result(writes=3 * bench.ideal_total() + 1)
    assert [s.split(":")[0] for s in bench.storms(stormy)] == [
        "write storm in burst 20",
        "write storm in burst 100",
        "write storm in burst again",
    ]

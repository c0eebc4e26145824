"""Each of the soak's checkers can fail: the manager is run with one protection turned off
(``ome-sim soak --sabotage``, which patches the running manager from outside; the product has
no such switch), and the soak must catch it with a violation of the matching invariant and
exit 1. Short soaks with the faults that bring each protection into play; about three
minutes together on two cores (make soak-check, which CI runs after the short soak), and the
leak check with orphan collection off, which waits out the convergence budget (2 minutes
more)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]


def soak(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "soak"
    proc = subprocess.run(
        [sys.executable, "-m", "ome_sim.cli", "soak", "--seed", "11", "--out", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=420,
    )
    reports = sorted(out.glob("*.json"))
    assert reports, proc.stderr[-3000:]
    return proc.returncode, json.loads(reports[-1].read_text()), proc.stdout


@pytest.mark.timeout(480)
@pytest.mark.parametrize(
    ("protection", "invariant", "args"),
    [
        # Pods are created at once: the first ones show it.
        ("slice-gate", "slice-gate", ["--minutes", "0.4", "--faults", "api-429"]),
        # Deleted services and lost Slices make the manager delete pods.
        (
            "uid-precondition",
            "uid-precondition",
            ["--minutes", "0.6", "--faults", "slice-deleted,partitions-dropped"],
        ),
        # A leader paused past its lease, while a second manager takes over, writes on.
        (
            "lease-check",
            "lease",
            ["--minutes", "1", "--faults", "leader-paused,second-manager"],
        ),
    ],
)
def test_the_soak_catches_a_manager_without(
    tmp_path: Path, protection: str, invariant: str, args: list[str]
) -> None:
    code, report, stdout = soak(tmp_path, "--sabotage", protection, *args)
    assert code == 1
    caught = {v["invariant"] for v in report["violations"]}
    assert invariant in caught, stdout[-3000:]
    assert report["checks"][invariant] >= len(
        [v for v in report["violations"] if v["invariant"] == invariant]
    )
    first = next(v for v in report["violations"] if v["invariant"] == invariant)
    assert f"VIOLATION [{invariant}]" in stdout
    assert first["history"], "a violation prints the history of the objects involved"


@pytest.mark.timeout(480)
def test_the_soaks_leak_check_catches_a_manager_without_orphan_collection(
    tmp_path: Path,
) -> None:
    """Replicas deleted with their finalizers removed by force leave their Slices: a manager
    that does not collect orphans leaks them, and the leak check names them (the soak does not
    converge, and exits 1). With collection on, the same seed converges: ``make soak``."""
    code, report, stdout = soak(
        tmp_path,
        "--sabotage",
        "orphan-collection",
        "--minutes",
        "0.4",
        "--faults",
        "replica-finalizer-removed",
    )
    assert code == 1
    assert report["violations"] == [], "no invariant is at stake, only a leak"
    assert report["converged_s"] is None
    assert any("is wanted by no slot" in p for p in report["end_problems"]), stdout[-3000:]

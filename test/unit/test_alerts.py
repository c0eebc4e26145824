"""The chart's alerts (templates/prometheus_rule.yaml), as Prometheus reads them.

Always: every series an alert reads is one the manager serves, with the labels the alert
groups by, so a renamed metric cannot leave an alert that never fires. With promtool (built
by hack/promtool.sh; ``make alerts`` builds it and runs this file): ``promtool check rules``
on the rendered rules, and ``promtool test rules`` with test/alerts/alerts_test.yaml, which
fires and clears each alert.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from ome.controllers.slices.metrics import SliceGauge, SliceMetrics
from ome.runtime.manager import LeaderStatus
from ome.tpuslice.config import parse_config
from ome.tpuslice.slices import SliceInfo
from ome.tpuslice.types import GUIDE_CONFIG_JSON
from test.unit.test_chart import ROOT, one, render

NOW = datetime.now(UTC)
TESTS = ROOT / "test" / "alerts" / "alerts_test.yaml"
ALERTS = {
    "OMETPUSliceLost",
    "OMETPUSliceCreateFailing",
    "OMETPUSliceCapacityWait",
    "OMETPUSliceReleaseDeferred",
    "OMETPUSliceOrphaned",
    "OMEManagerNotLeading",
}


def rules(*args: str) -> dict:
    docs = render("--set", "metrics.prometheusRule.enabled=true", *args)
    rule = one(docs, "PrometheusRule", "ome-tpu-slice-alerts")
    return dict(rule["spec"])


def served() -> dict[str, set[str]]:
    """Each series name the manager serves (with provisioning on and leader election), and
    its label names, read from the collectors themselves, each made to hold a sample: a
    failed create, and one Slice waiting for a partition."""
    registry = CollectorRegistry()
    metrics = SliceMetrics(parse_config(GUIDE_CONFIG_JSON), registry)
    metrics.create_failures.labels("tpu7x", "2x2x1", "Forbidden").inc()
    waiting = SliceInfo(
        name="s", uid="u", owner_uid="r", slice_type="tpu7x", topology="2x2x1", created=NOW
    )
    registry.register(SliceGauge(lambda: [waiting], lambda: True, lambda: {"r"}, ("ACTIVE",)))
    registry.register(LeaderStatus("ome-controller-manager", lambda: True))
    names: dict[str, set[str]] = {}
    for family in registry.collect():
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def test_the_chart_renders_no_rule_unless_asked() -> None:
    assert not [d for d in render() if d["kind"] == "PrometheusRule"]


def test_every_alert_reads_a_series_the_manager_serves_by_its_labels() -> None:
    groups = rules()["groups"]
    alerts = {r["alert"]: r for g in groups for r in g["rules"]}
    assert set(alerts) == ALERTS
    known = served()
    for name, rule in alerts.items():
        expr = rule["expr"]
        read = set(re.findall(r"\b(ome_[a-z_]+|leader_election_master_status)\b", expr))
        assert read, f"{name} reads no series of the manager: {expr}"
        for series in read:
            assert series in known, f"{name} reads {series}, which the manager does not serve"
        for group in re.findall(r"by \(([^)]*)\)", expr):
            labels = {label.strip() for label in group.split(",")}
            assert any(labels <= known[s] for s in read), f"{name} groups by {labels}: {expr}"
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_the_thresholds_are_values() -> None:
    alerts = {
        r["alert"]: r
        for g in rules(
            "--set",
            "metrics.prometheusRule.capacityWaitSeconds=600",
            "--set",
            "metrics.prometheusRule.releaseDeferredFor=2h",
        )["groups"]
        for r in g["rules"]
    }
    assert alerts["OMETPUSliceCapacityWait"]["expr"].endswith("> 600")
    assert alerts["OMETPUSliceReleaseDeferred"]["for"] == "2h"


def promtool() -> str:
    """promtool from hack/promtool.sh's cache; ``make alerts`` builds it first."""
    proc = subprocess.run(
        [str(ROOT / "hack" / "promtool.sh"), "--dir"], capture_output=True, text=True, check=True
    )
    path = Path(proc.stdout.strip()) / "promtool"
    if not path.is_file():
        # make alerts builds it first and sets OME_REQUIRE_PROMTOOL: there, a missing one fails.
        assert not os.environ.get("OME_REQUIRE_PROMTOOL"), f"no promtool at {path}"
        pytest.skip("promtool is not built here: make alerts builds it and runs this")
    return str(path)


def run(tool: str, *args: str, cwd: Path) -> str:
    proc = subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"promtool {' '.join(args)}:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def test_promtool_checks_the_rules_and_each_alert_fires_and_clears(tmp_path: Path) -> None:
    tool = promtool()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules(), sort_keys=False))
    shutil.copy(TESTS, tmp_path / "alerts_test.yaml")
    checked = run(tool, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert f"SUCCESS: {len(ALERTS)} rules found" in checked, checked
    tested = run(tool, "test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert "SUCCESS" in tested, tested
    # Each alert is shown firing, and quiet, by the test file.
    cases = yaml.safe_load(TESTS.read_text())["tests"]
    fired = {t["alertname"] for c in cases for t in c["alert_rule_test"] if t.get("exp_alerts")}
    quiet = {t["alertname"] for c in cases for t in c["alert_rule_test"] if not t.get("exp_alerts")}
    assert fired == ALERTS and quiet == ALERTS


def test_without_go_promtool_sh_says_so_in_one_line(tmp_path: Path) -> None:
    """Nothing built and no Go on the PATH: exit 3 and one line, never a half-made build."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "mktemp", "rm"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)}
    proc = subprocess.run(
        [str(bin_dir / "bash"), str(ROOT / "hack" / "promtool.sh")],
        env=env, capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip().splitlines() == ["promtool: needs go on the PATH"]
    assert not (tmp_path / "ome-tpu-slices").exists()

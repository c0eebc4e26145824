"""The chart's Grafana dashboard (files/dashboard.json, templates/grafana_dashboard.yaml): it
renders only when asked, carries the file as it is, and every panel reads series the manager
serves, grouped by labels they have: a renamed metric cannot leave an empty panel."""

from __future__ import annotations

import json
import re

from prometheus_client import CollectorRegistry

from ome.controllers.slices.chiptime import ChipTime, Held, Phase
from ome.runtime.controller import ControllerMetrics
from ome.runtime.workqueue import WorkQueueMetrics
from test.unit.test_alerts import served
from test.unit.test_chart import CHART, one, render

DASHBOARD = CHART / "files" / "dashboard.json"
#: What the issue asks the dashboard to show, each by the series that shows it.
WANTED = {
    "ome_tpu_slice_provision_duration_seconds_bucket",  # the provisioning latency histogram
    "ome_tpu_slices",  # Slices by state
    "ome_tpu_slice_lost_total",
    "ome_tpu_slice_release_deferred_total",
    "ome_tpu_slice_chip_seconds_total",  # chip time by phase
    "ome_tpu_slice_idle_chips",
    "workqueue_depth",
    "controller_runtime_reconcile_errors_total",
}


def served_with_runtime() -> dict[str, set[str]]:
    """``served()``, and the controllers', workqueues' and chip time's families, each with a
    sample."""
    names = served()
    registry = CollectorRegistry()
    controllers = ControllerMetrics(registry)
    controllers.total.labels("inferenceservice", "success").inc()
    controllers.errors.labels("inferenceservice").inc()
    queues = WorkQueueMetrics(registry)
    queues.depth.labels("inferenceservice", "0").set(1)
    queues.queue_duration.labels("inferenceservice").observe(0.1)
    idle = {"s": Held("tpu7x", "2x2x1", 4, Phase.IDLE, idle=True)}
    registry.register(ChipTime(idle.get, lambda: idle, lambda: True))
    for family in registry.collect():
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def test_the_dashboard_renders_only_when_asked_and_is_the_file() -> None:
    assert not [d for d in render() if d["metadata"]["name"] == "ome-tpu-slice-dashboard"]
    docs = render("--set", "metrics.dashboard.enabled=true")
    configmap = one(docs, "ConfigMap", "ome-tpu-slice-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    docs = render(
        "--set",
        "metrics.dashboard.enabled=true",
        "--set",
        "metrics.dashboard.label=dashboards",
        "--set",
        "metrics.dashboard.labelValue=ome",
    )
    labels = one(docs, "ConfigMap", "ome-tpu-slice-dashboard")["metadata"]["labels"]
    assert labels["dashboards"] == "ome" and "grafana_dashboard" not in labels
    assert json.loads(configmap["data"]["ome-tpu-slices.json"]) == json.loads(DASHBOARD.read_text())


def test_every_panel_reads_series_the_manager_serves_by_their_labels() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    known = served_with_runtime()
    read_anywhere: set[str] = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            read = set(
                re.findall(r"\b([a-z_]+(?:_total|_seconds_bucket|_seconds|_status))\b", expr)
            )
            read |= set(
                re.findall(r"\b(ome_tpu_slices|ome_tpu_slice_idle_chips|workqueue_depth)\b", expr)
            )
            assert read, f"{panel['title']} reads nothing: {expr}"
            for series in read:
                assert series in known, f"{panel['title']} reads {series}, which is not served"
            for group in re.findall(r"by \(([^)]*)\)", expr):
                labels = {label.strip() for label in group.split(",")} - {"le"}
                assert any(labels <= known[s] for s in read), f"{panel['title']}: by {labels}"
            read_anywhere |= read
    assert read_anywhere >= WANTED, sorted(WANTED - read_anywhere)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))

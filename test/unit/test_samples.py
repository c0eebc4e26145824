"""The samples in config/samples say what the walkthrough says."""

from __future__ import annotations

from pathlib import Path

import yaml

from ome.tpuslice.config import parse_config
from ome.tpuslice.types import GUIDE_CONFIG_JSON


def test_the_sample_configmap_holds_the_guides_step_1_block() -> None:
    doc = yaml.safe_load(Path("config/samples/inferenceservice-config.yaml").read_text())
    assert (doc["kind"], doc["metadata"]["name"]) == ("ConfigMap", "inferenceservice-config")
    assert doc["metadata"]["namespace"] == "ome"  # ome-manager's default --namespace
    assert parse_config(doc["data"]["tpuSliceProvisioning"]) == parse_config(GUIDE_CONFIG_JSON)

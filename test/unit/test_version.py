"""One version: what each command prints, the chart's appVersion and the image tags agree with
the product's pyproject.toml (hack/version.sh writes them; this reads them back)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

import ome
from test.unit.test_chart import CHART, deployment, render

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def truth() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def printed(*cmd: str) -> str:
    """The version a command prints, as ``<program> <version>[ (commit <c>)]``."""
    proc = subprocess.run(
        [str(BIN / cmd[0]), *cmd[1:]], capture_output=True, text=True, timeout=60, check=True
    )
    m = re.fullmatch(r"(\S+) (\S+)(?: \(commit ([0-9a-f]{7,40}(?:-dirty)?)\))?\n", proc.stdout)
    assert m, f"{' '.join(cmd)} printed {proc.stdout!r}"
    assert m.group(1) == cmd[0], proc.stdout
    return m.group(2)


def test_every_command_and_the_chart_and_images_name_the_one_version() -> None:
    version = truth()
    docs = yaml.safe_load_all((ROOT / "config" / "manager" / "manager.yaml").read_text())
    (manifest,) = [d for d in docs if d and d["kind"] == "Deployment"]
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    (rendered,) = deployment(render())["spec"]["template"]["spec"]["containers"]
    seen = {
        "ome-manager --version": printed("ome-manager", "--version"),
        "ome-sim --version": printed("ome-sim", "--version"),
        "kubectl ome version": printed("kubectl-ome", "version"),
        "the chart's appVersion": yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"],
        "config/'s image tag": container["image"].rpartition(":")[2],
        "the chart's image tag": rendered["image"].rpartition(":")[2],
    }
    assert seen == dict.fromkeys(seen, version)
    assert ome.__version__ == version


def test_the_commit_is_named_when_run_from_a_checkout() -> None:
    line = subprocess.run(
        [str(BIN / "ome-manager"), "--version"], capture_output=True, text=True, check=True
    ).stdout
    if not (ROOT / ".git").exists():  # a source tarball: nothing to name
        assert "commit" not in line
        return
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert f"(commit {head}" in line


def test_an_image_built_with_a_commit_names_it() -> None:
    env = {"OME_GIT_COMMIT": "0123456789ab", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [str(BIN / "kubectl-ome"), "--version"], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert out == f"kubectl-ome {truth()} (commit 0123456789ab)\n"


def test_version_sh_check_names_a_place_that_disagrees(tmp_path: Path) -> None:
    for rel in ["hack/version.sh", "pyproject.toml", "stage/pyproject.toml", "Dockerfile",
                "README.md", "docs/deploy.md", "charts/ome-resources/Chart.yaml",
                "charts/ome-resources/README.md", "charts/ome-resources/values.yaml",
                "config/manager/manager.yaml", "config/samples/values.yaml"]:  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes((ROOT / rel).read_bytes())
    (tmp_path / "hack" / "version.sh").chmod(0o755)
    check = [str(tmp_path / "hack" / "version.sh"), "--check"]
    assert subprocess.run(check, capture_output=True, text=True).returncode == 0
    chart = tmp_path / "charts/ome-resources/Chart.yaml"
    chart.write_text(chart.read_text().replace(f'appVersion: "{truth()}"', 'appVersion: "9.9.9"'))
    proc = subprocess.run(check, capture_output=True, text=True)
    assert proc.returncode == 1
    assert f"charts/ome-resources/Chart.yaml: says 9.9.9, not {truth()}" in proc.stderr
    # Setting a version writes every place, and then they agree again.
    bump = subprocess.run([check[0], "7.8.9"], capture_output=True, text=True)
    assert bump.returncode == 0, bump.stderr
    assert subprocess.run(check, capture_output=True, text=True).returncode == 0
    assert 'version = "7.8.9"' in (tmp_path / "pyproject.toml").read_text()
    assert '"ome-tpu-slices==7.8.9"' in (tmp_path / "stage/pyproject.toml").read_text()
    assert "ome-manager:7.8.9" in (tmp_path / "config/manager/manager.yaml").read_text()
    refused = subprocess.run([check[0], "1.4.0-rc1"], capture_output=True, text=True)
    assert refused.returncode == 1
    assert "not a release version X.Y.Z" in refused.stderr

"""hack/kube-binaries.sh and ome_sim.controlplane name the same versions, and the script
fails clearly (one line, exit 3) on a machine without Go."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from ome_sim import controlplane

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "hack" / "kube-binaries.sh"


def _pinned(name: str) -> str:
    match = re.search(rf"^{name}=(\S+)$", SCRIPT.read_text(), re.MULTILINE)
    assert match, f"{name} is not pinned in {SCRIPT}"
    return match.group(1)


def test_the_script_and_the_control_plane_pin_the_same_versions() -> None:
    assert _pinned("KUBE_VERSION") == controlplane.KUBE_VERSION
    assert _pinned("ETCD_VERSION") == controlplane.ETCD_VERSION
    assert _pinned("STAGING_VERSION") == "v0." + controlplane.KUBE_VERSION.removeprefix("v1.")


def test_both_agree_on_where_the_binaries_go(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    out = subprocess.run(
        ["bash", str(SCRIPT), "--dir"], env=env, capture_output=True, text=True, check=True
    )
    expected = tmp_path / "ome-tpu-slices" / "kube" / controlplane.KUBE_VERSION
    assert out.stdout.strip() == str(expected)
    assert controlplane.missing_binaries(expected) == list(controlplane.COMPONENTS)


def test_without_go_it_says_what_it_needs_in_one_line(tmp_path: Path) -> None:
    bash = subprocess.run(["bash", "-c", "command -v bash"], capture_output=True, text=True)
    env = {
        "PATH": "/usr/bin/nonexistent",
        "HOME": str(tmp_path),
        "XDG_CACHE_HOME": str(tmp_path),
    }
    proc = subprocess.run(
        [bash.stdout.strip(), str(SCRIPT)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "needs Go >= " in lines[0]
    assert "the embedded cluster (the default) is what runs" in lines[0]


def test_make_e2e_kube_without_go_says_why_and_succeeds(tmp_path: Path) -> None:
    """The acceptance point "on a machine without Go, make e2e-kube says why it cannot run
    and exits 0": hack/e2e-kube.sh with no go on the PATH and nothing cached."""
    env = {
        "PATH": "/usr/bin:/bin",  # the machine's Go lives elsewhere (/usr/local/go/bin)
        "HOME": str(tmp_path),
        "XDG_CACHE_HOME": str(tmp_path),
    }
    assert subprocess.run(["bash", "-c", "command -v go"], env=env).returncode != 0
    proc = subprocess.run(
        ["bash", str(ROOT / "hack" / "e2e-kube.sh")], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "e2e-kube: skipped: no suitable Go to build the control plane" in proc.stdout
    assert "needs Go >= " in proc.stderr

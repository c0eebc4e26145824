"""The real node's pieces that need no root: hack/node-binaries.sh and ome_sim.node agree,
the container tool scripts fail in one line where nothing can run containers, ``ome-sim run``
refuses ``--node real`` without a pod to run, and the metrics relay finds a real pod."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ome_sim import controlplane, helmrun, node

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "hack" / "node-binaries.sh"


def _pinned(name: str) -> str:
    match = re.search(rf"^{name}=(\S+)$", SCRIPT.read_text(), re.MULTILINE)
    assert match, f"{name} is not pinned in {SCRIPT}"
    return match.group(1)


def test_the_node_and_the_control_plane_are_the_same_kubernetes() -> None:
    assert _pinned("KUBE_VERSION") == controlplane.KUBE_VERSION
    assert f"registry.k8s.io/pause:{_pinned('PAUSE_VERSION')}" == node.PAUSE_IMAGE


def test_the_script_and_the_module_agree_on_where_the_binaries_go(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    out = subprocess.run(
        ["bash", str(SCRIPT), "--dir"], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().startswith(str(tmp_path / "ome-tpu-slices" / "node") + "/")
    check = subprocess.run(["bash", str(SCRIPT), "--check"], env=env, check=False)
    assert check.returncode == 1  # nothing built there


def only(tmp_path: Path, *tools: str) -> str:
    """A PATH holding just these tools (links to the machine's)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        found = subprocess.run(
            ["bash", "-c", f"command -v {tool}"], capture_output=True, text=True, check=True
        ).stdout.strip()
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_without_docker_or_podman_the_tools_say_so_in_one_line(tmp_path: Path) -> None:
    path = only(tmp_path, "bash", "sed", "head", "dirname", "cat", "git", "printf")
    env = {"PATH": path, "HOME": str(tmp_path)}
    for script in ("container-tools.sh", "image.sh"):
        proc = subprocess.run(
            [str(Path(path) / "bash"), str(ROOT / "hack" / script)],
            env=env, capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        assert proc.returncode == 3, (script, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, (script, proc.stderr)
        assert lines[0].startswith("container-tools: no container tool: no working Docker")


@pytest.mark.parametrize(
    "argv, error",
    [
        (["run", "--node", "real"], "--node real needs --manager pod"),
        (
            ["run", "--control-plane", "kube", "--manager", "process", "--node", "real"],
            "--node real needs --manager pod",
        ),
        (["run", "--node", "metal"], "invalid choice: 'metal'"),
    ],
)
def test_run_refuses_a_real_node_without_a_pod_for_it(argv: list[str], error: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ome_sim.cli", *argv], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert error in proc.stderr
    assert "Traceback" not in proc.stderr


def pod(annotations: dict[str, str] | None = None, ip: str | None = None) -> dict[str, object]:
    return {
        "metadata": {"name": "m", "annotations": annotations or {}},
        "status": {"podIP": ip} if ip else {},
    }


@pytest.mark.parametrize(
    "given, address",
    [
        (pod({helmrun.PORTS_ANNOTATION: '{"8443": 41234}'}, "127.0.0.1"), ("127.0.0.1", 41234)),
        (pod({helmrun.PORTS_ANNOTATION: "{}"}, "127.0.0.1"), None),  # the stand-in's, not yet
        (pod(ip="10.244.0.7"), ("10.244.0.7", 8443)),  # a real node's pod
        (pod(), None),  # no address yet
    ],
)
def test_the_metrics_relay_reaches_a_stand_in_pod_or_a_real_one(
    given: dict[str, object], address: tuple[str, int] | None
) -> None:
    assert helmrun.metrics_address(given) == address  # type: ignore[arg-type]


def test_the_nodes_processes_have_their_own_process_group(tmp_path: Path) -> None:
    """A terminal's Ctrl-C goes to its foreground process group. Were containerd in ours, it
    would exit with ome-sim's first signal, before the teardown removes the pods' sandboxes
    through it, and leave their shims and pause processes running (seen: one of each
    after ``timeout ome-sim run --node real`` took a SIGINT)."""
    real = node.RealNode(plane=None, log_dir=tmp_path)  # type: ignore[arg-type]
    process = real._spawn("sleeper", ["sleep", "30"])
    try:
        pid = process.proc.pid
        assert os.getpgid(pid) == pid != os.getpgid(0)
    finally:
        process.proc.kill()
        process.proc.wait()

"""``ome-sim apiserver``: writes a kubeconfig, serves until Ctrl-C, reports a taken port."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path


def _ome_sim() -> list[str]:
    script = Path(sys.executable).parent / "ome-sim"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ome.sim.cli"]


def test_apiserver_serves_kubectl_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc" / "config"
    proc = subprocess.Popen(
        [*_ome_sim(), "apiserver", "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("try:"):
                break
        assert any(f"export KUBECONFIG={kubeconfig.resolve()}" in line for line in lines), lines
        env = {**os.environ, "HOME": str(tmp_path)}
        out = subprocess.run(
            [
                shutil.which("kubectl") or "kubectl",
                "--kubeconfig",
                str(kubeconfig),
                "get",
                "namespaces",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "kube-system" in out.stdout and "default" in out.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
    assert code == 0
    assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")


def test_apiserver_on_a_taken_port_says_so(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run(
            [*_ome_sim(), "apiserver", "--kubeconfig", str(tmp_path / "kc"), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr
    assert "Traceback" not in out.stderr


def test_help_and_bad_arguments(tmp_path: Path) -> None:
    out = subprocess.run(
        [*_ome_sim(), "apiserver", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "--kubeconfig" in out.stdout
    out = subprocess.run([*_ome_sim(), "apiserver"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--kubeconfig" in out.stderr
    out = subprocess.run(
        [*_ome_sim(), "apiserver", "--kubeconfig", str(tmp_path / "k"), "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "--port must be between 0 and 65535" in out.stderr

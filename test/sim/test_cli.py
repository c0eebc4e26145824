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


def test_up_rejects_a_bad_pool_clearly(tmp_path: Path) -> None:
    out = subprocess.run(
        [*_ome_sim(), "up", "--kubeconfig", str(tmp_path / "k"), "--pool", "tpu7x:sometimes:3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "mode must be provision-only or static, not 'sometimes'" in out.stderr
    assert "Traceback" not in out.stderr


def test_provider_runs_alone_against_an_existing_cluster(tmp_path: Path) -> None:
    from ome.sim.apiserver import ServerThread

    thread = ServerThread()
    server = thread.start()
    try:
        kubeconfig = server.write_kubeconfig(tmp_path / "kc")
        proc = subprocess.Popen(
            [
                *_ome_sim(),
                "provider",
                "--kubeconfig",
                str(kubeconfig),
                "--pool",
                "tpu7x:provision-only:3",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("press Ctrl-C"):
                break
        assert any("Slice CRD installed" in line for line in lines), lines
        assert any(
            "creating node pool tpu-pool: 3 tpu7x provision-only hosts" in line for line in lines
        )
        nodes = server.store.count(("", "nodes"))
        assert nodes == 3
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        thread.stop()


def test_provider_reports_an_unreachable_cluster(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    out = subprocess.run(
        [*_ome_sim(), "provider", "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert out.stderr.startswith("ome-sim: provider: cannot reach the API server of"), out.stderr
    assert "Connection refused" in out.stderr
    assert "Traceback" not in out.stderr

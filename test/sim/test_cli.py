"""``ome-sim apiserver``: writes a kubeconfig, serves until Ctrl-C, reports a taken port."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import ome
from test.helpers import eventually


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
        # Every request names the simulator and its version, as client-go binaries do.
        agent = f"ome-sim/{ome.__version__}"
        assert server.accounting.total("create", "nodes", agent) == 3
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


def test_run_starts_everything_prints_the_next_steps_and_ctrl_c_leaves_nothing(
    tmp_path: Path,
) -> None:
    """``ome-sim run`` (``make run``): the printed lines, a second start while the first runs,
    and Ctrl-C stopping the manager child and freeing every port."""
    root = Path(__file__).resolve().parents[2]

    def start(name: str) -> tuple[subprocess.Popen[str], list[str]]:
        proc = subprocess.Popen(
            [
                *_ome_sim(),
                "run",
                "--kubeconfig",
                str(tmp_path / name / "kubeconfig"),
                "--config-dir",
                str(root / "config"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        lines: list[str] = []
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("press Ctrl-C"):
                break
        return proc, lines

    proc, lines = start("first")
    again, again_lines = start("second")  # running it again, even beside the first, works
    try:
        assert f"export KUBECONFIG={(tmp_path / 'first' / 'kubeconfig').resolve()}" in lines
        metrics = next(line for line in lines if line.startswith("manager metrics: "))
        url = metrics.split(": ", 1)[1]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        assert "the guide's Step 2 InferenceService: config/samples/qwen3-tpu-isvc.yaml" in lines
        assert "next: kubectl apply -f config/samples/qwen3-tpu-isvc.yaml" in lines
        assert any("waiting for the manager to be ready" in line for line in lines), lines
        assert any(line.startswith("press Ctrl-C") for line in again_lines), again_lines
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        children = subprocess.run(
            ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True
        ).stdout.split()
        assert children, "the manager runs as its own process"
    finally:
        for p in (proc, again):
            p.send_signal(signal.SIGINT)
        codes = [p.wait(timeout=60) for p in (proc, again)]
    assert codes == [0, 0]
    assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")
    for pid in children:
        assert not Path(f"/proc/{pid}").exists(), f"manager process {pid} outlived Ctrl-C"
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # the metrics port is free again


def test_a_killed_run_takes_its_manager_with_it(tmp_path: Path) -> None:
    """Even ``kill -9`` of ``ome-sim run`` leaves no manager process behind (Linux)."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [
            *_ome_sim(),
            "run",
            "--kubeconfig",
            str(tmp_path / "kubeconfig"),
            "--config-dir",
            str(root / "config"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("press Ctrl-C"):
            break
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
    pids = children.stdout.split()
    assert pids, "the manager runs as its own process"
    proc.kill()
    proc.wait(10)
    for pid in pids:
        eventually(lambda pid=pid: not Path(f"/proc/{pid}").exists() or _zombie(pid), timeout=30)


def _zombie(pid: str) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True

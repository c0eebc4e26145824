"""``ome-sim apiserver``: writes a kubeconfig, serves until Ctrl-C, reports a taken port."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from test.helpers import eventually

import ome
from ome_sim.system import CrashLoopBackoff, describe_exit

ROOT = Path(__file__).resolve().parents[3]


def _ome_sim() -> list[str]:
    script = Path(sys.executable).parent / "ome-sim"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ome_sim.cli"]


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
    from ome_sim.apiserver import ServerThread

    thread = ServerThread()
    server = thread.start()
    proc: subprocess.Popen[str] | None = None
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
        if proc is not None and proc.poll() is None:  # a failed assertion leaves nothing behind
            proc.kill()
            proc.wait(10)
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
    root = Path(__file__).resolve().parents[3]

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
        assert (
            "the walkthrough's Step 2 InferenceService: config/samples/qwen3-tpu-isvc.yaml" in lines
        )
        assert "next: kubectl apply -f config/samples/qwen3-tpu-isvc.yaml" in lines
        assert "  waiting for the manager to bind its ports" in lines, lines
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
    _assert_nothing_left([int(pid) for pid in children], [port], tmp_path)


def test_a_killed_run_takes_its_manager_with_it(tmp_path: Path) -> None:
    """Even ``kill -9`` of ``ome-sim run`` leaves no manager process behind (Linux)."""
    root = Path(__file__).resolve().parents[3]
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

        def manager_gone(pid: str = pid) -> bool:
            return not Path(f"/proc/{pid}").exists() or _zombie(pid)

        eventually(manager_gone, timeout=30)


def _zombie(pid: str) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def _assert_nothing_left(pids: list[int], ports: list[int], directory: Path) -> None:
    """After ``ome-sim run`` exited: none of its managers is still a process, and no process
    of the run still listens on a port a manager served. A port taken again is judged by
    who holds it: tests run in parallel (make test), so another test's server may have been
    given the freed port by the kernel; only a holder whose command line names the run's
    ``directory`` (its kubeconfig's) is the run's own. SO_REUSEADDR, as the servers use, so that only a
    listener counts and not a connection of ours left in TIME_WAIT; a port whose bind fails
    with no listener on it is a connection's own end (the kernel hands freed ports to
    clients too), which listens for nothing."""
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists(), f"manager process {pid} outlived Ctrl-C"
    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                if not _listening(port):
                    continue  # only a connection's own end: another test's client, say
                holder = _listener_of(port)
                assert holder is not None, f"port {port} is listened on, and by whom not found"
                assert holder[0] not in pids, f"manager {holder[0]} still listens on {port}"
                assert str(directory) not in holder[1], (
                    f"process {holder[0]} of the run still listens on {port}: {holder[1]}"
                )


def _listening_sockets(port: int) -> set[str]:
    """The sockets listening at ``port`` on any address, from /proc/net/tcp{,6}, as their
    file descriptors' links name them."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{inode}]")
    return inodes


def _listening(port: int) -> bool:
    return bool(_listening_sockets(port))


def _listener_of(port: int) -> tuple[int, str] | None:
    """The pid and command line of the process listening on 127.0.0.1 (or any address) at
    ``port``, from /proc/net/tcp{,6} and each process's open sockets; None if not found."""
    inodes = _listening_sockets(port)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            held = {os.readlink(fd) for fd in (proc / "fd").iterdir()}
            if held & inodes:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                return int(proc.name), cmdline
        except OSError:
            continue
    return None


class _Run:
    """``ome-sim run`` as a process, its console read by threads as it comes."""

    def __init__(self, directory: Path, *flags: str) -> None:
        self.directory = directory
        self.kubeconfig = directory / "kubeconfig"
        self.proc = subprocess.Popen(
            [
                *_ome_sim(),
                "run",
                "--kubeconfig",
                str(self.kubeconfig),
                "--config-dir",
                str(ROOT / "config"),
                *flags,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self.lines: list[str] = []
        self.errors: list[str] = []
        for stream, into in ((self.proc.stdout, self.lines), (self.proc.stderr, self.errors)):
            threading.Thread(target=self._read, args=(stream, into), daemon=True).start()
        try:
            self.wait_for("press Ctrl-C to stop", timeout=60)
        except AssertionError:
            self.proc.kill()
            raise

    @staticmethod
    def _read(stream: object, into: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            into.append(line.rstrip("\n"))

    def said(self, line: str) -> bool:
        return line in self.lines

    def wait_for(self, line: str, timeout: float) -> None:
        def said() -> bool:
            if self.proc.poll() is not None and not self.said(line):
                raise AssertionError(f"ome-sim run exited with code {self.proc.poll()}")
            return self.said(line)

        said.__name__ = f"said {line!r}"
        try:
            eventually(said, timeout=timeout, interval=0.05)
        except AssertionError as e:
            console = "\n".join(self.lines + self.errors)
            raise AssertionError(f"{e}; its console:\n{console}") from None

    def first_manager(self) -> int:
        for line in self.lines:
            if m := re.fullmatch(r"  starting the manager, pid (\d+) \(its log: .*\)", line):
                return int(m.group(1))
        raise AssertionError(f"no manager pid printed:\n{self.lines}")

    def managers(self) -> list[int]:
        """The live (not zombie) children of ome-sim: its manager, or none between two."""
        out = subprocess.run(
            ["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True
        ).stdout.split()
        return [int(pid) for pid in out if not _zombie(pid)]

    def kubectl(self, *args: str, timeout: int = 60) -> str:
        out = subprocess.run(
            [shutil.which("kubectl") or "kubectl", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig), "HOME": str(self.directory)},
            timeout=timeout,
            cwd=ROOT,
        )
        assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
        return out.stdout

    def logged_ports(self) -> list[int]:
        """Every port a manager of this run served, from its log (all of them: it appends)."""
        log = (self.directory / "manager.log").read_text()
        return [int(p) for p in re.findall(r"serving [a-z ]+ on port (\d+)", log)]

    def interrupt(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def _ready_condition(run: _Run) -> tuple[str, str, str]:
    """The InferenceService's Ready condition (status, lastTransitionTime) and its pod's
    UID: all three stay as they were if the service never stopped being Ready."""
    isvc = json.loads(
        run.kubectl("get", "inferenceservice/qwen3-tpu", "-n", "qwen3-tpu", "-o", "json")
    )
    ready = next(c for c in isvc["status"]["conditions"] if c["type"] == "Ready")
    uid = run.kubectl(
        "get",
        "pod",
        "qwen3-tpu-engine-0-default-0",
        "-n",
        "qwen3-tpu",
        "-o",
        "jsonpath={.metadata.uid}",
    )
    return ready["status"], ready["lastTransitionTime"], uid


def _reconciled_inference_services(metrics_url: str) -> float:
    with urllib.request.urlopen(metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('controller_runtime_reconcile_total{controller="inferenceservice"')
    )


@pytest.mark.timeout(90)
def test_a_killed_manager_is_restarted_and_the_services_stay_ready(tmp_path: Path) -> None:
    """``kill -9`` of the manager: a new one within 10 s, said on the console, on the same
    metrics URL, and the InferenceService Ready throughout; Ctrl-C still leaves nothing."""
    run = _Run(tmp_path)
    wait = ("wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", "qwen3-tpu")
    try:
        first = run.first_manager()
        assert run.managers() == [first]
        metrics = next(line for line in run.lines if line.startswith("manager metrics: "))
        metrics_url = metrics.split(": ", 1)[1]
        run.kubectl("apply", "-f", "config/samples/qwen3-tpu-isvc.yaml")
        run.kubectl(*wait, "--timeout=60s", timeout=70)
        before = _ready_condition(run)
        assert before[0] == "True"

        os.kill(first, signal.SIGKILL)
        [second] = eventually(lambda: [p for p in run.managers() if p != first], timeout=10)
        assert Path(f"/proc/{second}").exists() and not _zombie(str(second))
        run.wait_for(
            "the manager exited with code -9 (killed by SIGKILL); restarting it now (restart 1)",
            timeout=10,
        )
        run.wait_for(f"the manager is running again (pid {second})", timeout=30)
        # Its ports were free again, so it has them back and the printed URL holds (unless
        # another process took the port meanwhile: then the new URL is printed).
        moved = [line for line in run.lines if re.match(r"manager metrics: .* \(a new port", line)]
        if moved:
            metrics_url = moved[-1].split(" ")[2]
        run.kubectl(*wait, "--timeout=30s", timeout=40)
        # The new manager has reconciled the InferenceService, and it never left Ready.
        eventually(lambda: _reconciled_inference_services(metrics_url) > 0, timeout=30)
        assert _ready_condition(run) == before
        assert run.managers() == [second]

        log = (tmp_path / "manager.log").read_text().splitlines()
        messages = [json.loads(line)["message"] for line in log]
        assert messages.count("starting ome-manager") == 2
        separator = (
            "---------- ome-sim: restart 1: the manager exited with code -9 (killed by SIGKILL)"
            " ----------"
        )
        at = messages.index(separator)
        assert messages.index("starting ome-manager") < at < len(messages) - 1
    finally:
        code = run.interrupt()
    assert code == 0
    assert run.lines[-1] == "stopping"
    assert not any("Traceback" in line for line in run.errors), run.errors
    _assert_nothing_left([first, second], run.logged_ports(), tmp_path)


def test_ctrl_c_while_the_manager_waits_to_restart_stops_at_once(tmp_path: Path) -> None:
    """A second crash waits 10 s to restart; Ctrl-C then stops everything without waiting."""
    run = _Run(tmp_path)
    pids = [run.first_manager()]
    try:
        os.kill(pids[0], signal.SIGKILL)
        [second] = eventually(lambda: [p for p in run.managers() if p != pids[0]], timeout=10)
        pids.append(second)
        run.wait_for(f"the manager is running again (pid {second})", timeout=30)
        os.kill(second, signal.SIGKILL)
        run.wait_for(
            "the manager exited with code -9 (killed by SIGKILL); restarting it in 10s (restart 2)",
            timeout=10,
        )
        assert run.managers() == []
    finally:
        started = time.monotonic()
        code = run.interrupt()
        took = time.monotonic() - started
    assert code == 0
    assert took < 5, f"Ctrl-C took {took:.1f}s during the backoff"
    assert run.lines[-1] == "stopping"
    assert not any("Traceback" in line for line in run.errors), run.errors
    _assert_nothing_left(pids, run.logged_ports(), tmp_path)


def test_ctrl_c_while_a_restarted_manager_starts_leaves_nothing(tmp_path: Path) -> None:
    """Ctrl-C the moment a restarted manager exists (it is still importing, long before it
    serves): it is stopped with the rest, and nothing is left."""
    run = _Run(tmp_path)
    pids = [run.first_manager()]
    try:
        os.kill(pids[0], signal.SIGKILL)
        [second] = eventually(lambda: [p for p in run.managers() if p != pids[0]], timeout=10)
        pids.append(second)
    finally:
        code = run.interrupt()
    assert code == 0
    assert run.lines[-1] == "stopping"
    assert not any("Traceback" in line for line in run.errors), run.errors
    _assert_nothing_left(pids, run.logged_ports(), tmp_path)


def test_the_restart_backoff_is_the_kubelets() -> None:
    """At once, then 10 s doubling to the 5-minute cap; a manager that ran 10 minutes
    starts the sequence over."""
    backoff = CrashLoopBackoff()
    delays = [backoff.delay(ran_for=1.0) for _ in range(9)]
    assert delays == [0, 10, 20, 40, 80, 160, 300, 300, 300]
    assert backoff.delay(ran_for=599.0) == 300
    assert backoff.delay(ran_for=600.0) == 0
    assert backoff.delay(ran_for=5.0) == 10
    assert describe_exit(-9) == "exited with code -9 (killed by SIGKILL)"
    assert describe_exit(1) == "exited with code 1"
    assert describe_exit(0) == "exited with code 0"


def test_a_port_still_held_by_a_process_of_the_run_is_found_and_one_of_another_is_not(
    tmp_path: Path,
) -> None:
    """The check behind every Ctrl-C test: a listener left by a process whose command line
    names the run's directory fails it; the same port held by anyone else passes it."""
    script = (
        "import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen();"
        " print(s.getsockname()[1], flush=True); sys.stdin.read()"
    )
    leftover = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "kubeconfig")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert leftover.stdout is not None
        port = int(leftover.stdout.readline())
        assert _listener_of(port) is not None
        assert _listener_of(port)[0] == leftover.pid  # type: ignore[index]
        with pytest.raises(AssertionError, match=f"still listens on {port}"):
            _assert_nothing_left([], [port], tmp_path)
        _assert_nothing_left([], [port], tmp_path / "another-run")
    finally:
        leftover.kill()
        leftover.wait()


def test_a_port_that_is_only_a_connections_own_end_passes(tmp_path: Path) -> None:
    """The kernel hands a port a manager freed to the next connection that needs one (the
    ephemeral range is the same): a client of another test, bound there without
    SO_REUSEADDR, makes the check's bind fail, yet nothing listens on the port. CI met it
    (``port ... is held, and its holder not found``)."""
    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen()
        client.bind(("127.0.0.1", 0))
        port = client.getsockname()[1]
        client.connect(server.getsockname())
        with socket.socket() as probe, pytest.raises(OSError):
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))  # as the check's own bind meets it
        assert _listener_of(port) is None
        _assert_nothing_left([], [port], tmp_path)

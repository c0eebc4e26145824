"""The black-box suite: kubectl against a cluster, as a user would.

With ``OME_E2E_KUBECONFIG`` set, it runs against that cluster: one with OME, its webhook and
the simulated provider, such as a kind cluster set up by hack/kind-e2e.sh (and
``OME_E2E_METRICS_URL`` for the manager's metrics, if it is reachable). Otherwise it starts
``ome-sim run`` itself, exactly as ``make run`` does, on free ports with a kubeconfig in a
temporary directory.

Tests that need a slower simulator (a Slice activating long enough to act on it) get a
second environment started with other ``ome-sim run`` flags; against a given cluster they
are skipped, since its simulator cannot be reconfigured from here, unless
``OME_E2E_CONTROL_PLANE=kube`` says to start that second one on a real control plane
(``ome-sim run --control-plane kube``; hack/e2e-kube.sh sets it). Without a given cluster,
``OME_E2E_CONTROL_PLANE=kube`` starts both environments on a real control plane.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Environment:
    kubeconfig: Path
    home: Path
    metrics_url: str | None = None

    @property
    def manager_log(self) -> Path | None:
        """The manager's log, where ``ome-sim run`` writes it (beside the kubeconfig), or
        ``OME_E2E_MANAGER_LOG``; None when neither exists (a kind cluster: kubectl logs)."""
        given = os.environ.get("OME_E2E_MANAGER_LOG")
        path = Path(given) if given else self.kubeconfig.parent / "manager.log"
        return path if path.is_file() else None

    def manager_log_text(self) -> str | None:
        """The manager's log: the file `manager_log`, or else its pods' logs (``kubectl logs
        -l control-plane=ome-controller-manager``, when it runs as the Deployment's pod);
        None when neither can be had."""
        path = self.manager_log
        if path is not None:
            return path.read_text()
        out = self.kubectl(
            "logs",
            "-n",
            "ome",
            "-l",
            "control-plane=ome-controller-manager",
            "--tail=-1",
            check=False,
        )
        return out.stdout if out.returncode == 0 and out.stdout else None

    def enforces_rbac(self) -> bool:
        """Whether the server authorizes by RBAC (kube-apiserver; not the embedded one)."""
        probe = self.kubectl("get", "--raw", "/apis/rbac.authorization.k8s.io/v1", check=False)
        return probe.returncode == 0

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "HOME": str(self.home)}

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: int = 60
    ) -> subprocess.CompletedProcess[str]:
        return self.tool(
            shutil.which("kubectl") or "kubectl", *args, input=input, check=check, timeout=timeout
        )

    def tool(
        self,
        binary: str,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: int = 60,
    ) -> subprocess.CompletedProcess[str]:
        """``binary`` (kubectl, helm) with this environment's KUBECONFIG and HOME, from the
        repository's root; a failure is an AssertionError with its output when ``check``."""
        proc = subprocess.run(
            [binary, *args],
            input=input,
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            cwd=ROOT,
        )
        if check and proc.returncode != 0:
            name = Path(binary).name
            raise AssertionError(f"{name} {' '.join(args)} failed:\n{proc.stderr}{proc.stdout}")
        return proc


def _ome_sim() -> list[str]:
    script = Path(sys.executable).parent / "ome-sim"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ome_sim.cli"]


def guide_sample(name: str) -> str:
    """config/samples/qwen3-tpu-isvc.yaml (the walkthrough's InferenceService and its namespace)
    as YAML, with ``name`` for both the namespace and the service."""
    import yaml

    docs = list(
        yaml.safe_load_all((ROOT / "config" / "samples" / "qwen3-tpu-isvc.yaml").read_text())
    )
    for doc in docs:
        doc["metadata"]["name"] = name
        if doc["kind"] != "Namespace":
            doc["metadata"]["namespace"] = name
    return str(yaml.safe_dump_all(docs))


def control_plane() -> str:
    return os.environ.get("OME_E2E_CONTROL_PLANE") or "embedded"


def start_system(directory: Path, home: Path, *flags: str) -> Iterator[Environment]:
    """``ome-sim run`` until the test session ends; its output until ready is kept for the
    failure message."""
    kubeconfig = directory / "kubeconfig"
    flags = ("--control-plane", control_plane(), *flags)
    proc = subprocess.Popen(
        [
            *_ome_sim(),
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--config-dir",
            str(ROOT / "config"),
            *flags,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    seen: list[str] = []
    metrics: str | None = None
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("manager metrics: "):
            metrics = line.split(": ", 1)[1].strip()
        if line.startswith("press Ctrl-C"):
            break
    else:
        proc.wait(10)
        pytest.fail("ome-sim run did not start:\n" + "".join(seen))
    try:
        yield Environment(kubeconfig, home, metrics)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise


@pytest.fixture(scope="session")
def environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environment]:
    home = tmp_path_factory.mktemp("home")
    given = os.environ.get("OME_E2E_KUBECONFIG")
    if given:
        yield Environment(Path(given), home, os.environ.get("OME_E2E_METRICS_URL"))
        return
    yield from start_system(tmp_path_factory.mktemp("cluster"), home, "--activation-delay", "1s")


@pytest.fixture(scope="module")
def kube(environment: Environment) -> Iterator[Environment]:
    """The environment, when its server is kube-apiserver (RBAC enforced); else the test is
    skipped: the embedded server has no RBAC, and ``make e2e-kube`` runs it."""
    if not environment.enforces_rbac():
        pytest.skip("the server enforces no RBAC (the embedded one): make e2e-kube runs this")
    yield environment


@pytest.fixture(scope="session")
def slow_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environment]:
    """Slices activate in 5 s and time out after 10 s: time to act while one activates."""
    if os.environ.get("OME_E2E_KUBECONFIG") and control_plane() != "kube":
        pytest.skip("needs ome-sim run with --activation-delay and --slice-ready-timeout")
    home = tmp_path_factory.mktemp("home-slow")
    yield from start_system(
        tmp_path_factory.mktemp("slow-cluster"),
        home,
        "--activation-delay",
        "5s",
        "--slice-ready-timeout",
        "10s",
    )

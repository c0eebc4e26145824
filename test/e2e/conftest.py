"""The black-box suite: kubectl against a cluster, as a user would.

With ``OME_E2E_KUBECONFIG`` set, it runs against that cluster (a kind cluster with the
provider, say: see hack/kind-e2e.sh). Otherwise it starts ``ome-sim up`` itself, exactly as
``make run`` does, on a free port with a kubeconfig in a temporary directory.
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


@dataclass
class Environment:
    kubeconfig: Path
    home: Path

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: int = 60
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "HOME": str(self.home)}
        proc = subprocess.run(
            [shutil.which("kubectl") or "kubectl", *args],
            input=input,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{proc.stderr}")
        return proc


def _ome_sim() -> list[str]:
    script = Path(sys.executable).parent / "ome-sim"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ome.sim.cli"]


@pytest.fixture(scope="session")
def environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environment]:
    home = tmp_path_factory.mktemp("home")
    given = os.environ.get("OME_E2E_KUBECONFIG")
    if given:
        yield Environment(Path(given), home)
        return
    kubeconfig = tmp_path_factory.mktemp("cluster") / "kubeconfig"
    proc = subprocess.Popen(
        [*_ome_sim(), "up", "--kubeconfig", str(kubeconfig), "--activation-delay", "1s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    seen: list[str] = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("press Ctrl-C"):
            break
    else:
        proc.wait(10)
        pytest.fail("ome-sim up did not start:\n" + "".join(seen))
    try:
        yield Environment(kubeconfig, home)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise

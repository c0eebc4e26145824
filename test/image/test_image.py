"""The manager's image, as `make image` built it, run as the chart runs it (`make image-test`).

Every container here gets the chart's securityContext: uid and gid 65532, a read-only root,
every capability dropped, no privilege escalation, and a tmpfs on /tmp (the chart's
emptyDir). The measurements (size, cold start to /readyz) are printed for docs/deploy.md.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import ome
from ome.tpuslice.types import GUIDE_CONFIG_JSON
from ome_sim import containers
from test.cluster import Cluster, Kubectl
from test.manifests import configmap

ROOT = Path(__file__).resolve().parents[2]
SECURITY = (
    "--user", "65532:65532", "--read-only", "--cap-drop", "ALL",
    "--security-opt", "no-new-privileges", "--tmpfs", "/tmp:rw,size=64m",
)  # fmt: skip


@pytest.fixture(scope="module")
def image() -> str:
    name = containers.image_name()
    if not containers.inspect(name):
        pytest.fail(f"no image {name}: make image-test builds it first (make image)")
    return name


def run(image: str, *args: str, entrypoint: str | None = None, stdin: str | None = None,
        extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:  # fmt: skip
    cmd = [*containers.tool(), "run", "--rm", "-i", *containers.run_flags(), *SECURITY, *extra]
    if entrypoint:
        cmd += ["--entrypoint", entrypoint]
    return subprocess.run(
        [*cmd, image, *args], input=stdin, capture_output=True, text=True, timeout=120
    )


def probe(image: str, code: str) -> Any:
    """What the Python ``code`` prints as JSON, run by the image's Python."""
    proc = run(image, "-c", code, entrypoint="python3")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_it_runs_as_65532_on_a_read_only_root_with_only_tmp_writable(image: str) -> None:
    code = (
        "import os, json\n"
        "out = {'uid': os.getuid(), 'gid': os.getgid()}\n"
        "for path in ('/probe', '/opt/ome/probe', '/tmp/probe'):\n"
        "    try:\n"
        "        open(path, 'w').close(); out[path] = 'written'\n"
        "    except OSError as e:\n"
        "        out[path] = e.strerror\n"
        "print(json.dumps(out))\n"
    )
    assert probe(image, code) == {
        "uid": 65532,
        "gid": 65532,
        "/probe": "Read-only file system",
        "/opt/ome/probe": "Read-only file system",
        "/tmp/probe": "written",
    }


def test_version_names_the_version_and_the_commit_it_was_built_from(image: str) -> None:
    proc = run(image, "--version")
    assert proc.returncode == 0, proc.stderr
    env = containers.inspect(image)["Config"]["Env"]
    baked = [e.split("=", 1)[1] for e in env if e.startswith("OME_GIT_COMMIT=")]
    assert baked and baked[0], "make image passes the commit as GIT_COMMIT"
    assert proc.stdout == f"ome-manager {ome.__version__} (commit {baked[0]})\n"


def test_check_config_accepts_the_guides_block_and_refuses_a_bad_one(image: str) -> None:
    good = run(image, "check-config", "-", stdin=GUIDE_CONFIG_JSON)
    assert (good.returncode, good.stdout) == (0, "ok\n"), good.stderr
    bad = json.loads(GUIDE_CONFIG_JSON)
    bad["slice"]["readyTimeout"] = "soon"
    refused = run(image, "check-config", "-", stdin=json.dumps(bad))
    assert refused.returncode == 1
    assert "readyTimeout" in refused.stdout + refused.stderr
    assert "Traceback" not in refused.stdout + refused.stderr


def test_it_holds_no_compiler_and_no_pip(image: str) -> None:
    code = (
        "import importlib.util, os, shutil, sys, json\n"
        "tools = ['gcc', 'cc', 'c++', 'g++', 'clang', 'cpp', 'ld', 'as', 'make',\n"
        "         'pip', 'pip3', 'pip3.11', 'apt-get']\n"
        "found = {t: shutil.which(t) for t in tools if shutil.which(t)}\n"
        "mods = [m for m in ('pip', 'ensurepip', 'setuptools', 'wheel')\n"
        "        if importlib.util.find_spec(m)]\n"
        "print(json.dumps({'tools': found, 'modules': mods}))\n"
    )
    seen = probe(image, code)
    # apt-get is the base's package manager (Debian's images all have it); it cannot run
    # here: the root is read-only and the user is not root.
    seen["tools"].pop("apt-get", None)
    assert seen == {"tools": {}, "modules": []}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def test_cold_start_to_readyz_against_a_cluster(
    image: str, cluster: Cluster, kubectl: Kubectl, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The container starts, reads its kubeconfig, syncs its caches and answers /readyz;
    the time from `run` to the first 200 is the cold start docs/deploy.md gives."""
    kubectl("apply", "-f", str(ROOT / "config" / "crd"))
    kubectl("create", "namespace", "ome")
    cm = configmap("inferenceservice-config", "ome")
    cm["data"] = {"tpuSliceProvisioning": GUIDE_CONFIG_JSON}
    kubectl("apply", "-f", "-", input=json.dumps(cm))
    config = tmp_path / "kubeconfig"
    config.write_text(cluster.kubeconfig.read_text())
    config.chmod(0o644)
    probes = free_port()
    name = f"ome-image-test-{probes}"
    started = time.monotonic()
    cmd = [
        *containers.tool(), "run", "--rm", "--name", name, "--network", "host",
        *containers.run_flags(), *SECURITY,
        "-v", f"{config}:/etc/ome/kubeconfig:ro", "-e", "OTEL_SDK_DISABLED=true",
        image, "--kubeconfig", "/etc/ome/kubeconfig", "--namespace", "ome",
        "--metrics-bind-address", "0", "--webhook-bind-address", "0",
        "--health-probe-bind-address", f"127.0.0.1:{probes}",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = started + 120
        while not ready(f"http://127.0.0.1:{probes}/readyz"):
            assert proc.poll() is None, f"the manager exited: {proc.communicate()[0]}"
            assert time.monotonic() < deadline, "not ready within 120 s"
            time.sleep(0.05)
        cold = time.monotonic() - started
    finally:
        subprocess.run([*containers.tool(), "stop", "-t", "10", name], capture_output=True)
        out, _ = proc.communicate(timeout=60)
    size = int(containers.inspect(image)["Size"])
    with capsys.disabled():
        print(f"\nimage: {image}: {size / 1e6:.0f} MB; cold start to /readyz {cold:.1f} s")
    # A graceful stop: the manager logged its start and its stop, and no traceback.
    assert "starting ome-manager" in out
    assert "Traceback" not in out
    assert proc.returncode == 0, out

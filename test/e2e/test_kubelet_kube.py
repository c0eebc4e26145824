"""The provider's kubelet stand-in running the manager's pod as a process, on a real control
plane: readiness from its probe, ``kubectl logs`` (also ``--previous``) through the kubelet
API, the mapped metrics port, a crash restarted with restartCount 1, and deletion stopping
the process. Runs with ``OME_E2E_CONTROL_PLANE=kube`` (and the binaries built)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from ome.runtime.rest import Rest
from ome_sim.controlplane import ControlPlane, binaries_dir, missing_binaries
from ome_sim.gke.model import parse_pools
from ome_sim.gke.provider import Options, Provider, install_slice_crd

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "ghcr.io/moirai-internal/ome-manager"

pytestmark = pytest.mark.skipif(
    os.environ.get("OME_E2E_CONTROL_PLANE") != "kube" or bool(missing_binaries(binaries_dir())),
    reason="needs the control plane binaries: make e2e-kube runs this",
)

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "ome-controller-manager-test",
        "namespace": "ome",
        "labels": {"control-plane": "ome-controller-manager"},
    },
    "spec": {
        "serviceAccountName": "ome-controller-manager",
        "terminationGracePeriodSeconds": 10,
        "containers": [
            {
                "name": "manager",
                "image": f"{IMAGE}:test",
                "args": [
                    "--metrics-bind-address=:8080",
                    "--metrics-secure=false",
                    "--health-probe-bind-address=:8081",
                    "--webhook-bind-address=0",
                ],
                "env": [
                    {
                        "name": "POD_NAMESPACE",
                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                    },
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
                "ports": [
                    {"name": "metrics", "containerPort": 8080},
                    {"name": "health", "containerPort": 8081},
                ],
                "readinessProbe": {
                    "httpGet": {"path": "/readyz", "port": "health"},
                    "periodSeconds": 1,
                },
                "livenessProbe": {
                    "httpGet": {"path": "/healthz", "port": "health"},
                    "initialDelaySeconds": 15,
                    "periodSeconds": 20,
                },
            }
        ],
    },
}


def eventually(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


class Kube:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True, timeout: int = 60
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [shutil.which("kubectl") or "kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{proc.stderr}")
        return proc

    def pod(self) -> dict[str, Any]:
        out = self("get", "pod", "-n", "ome", POD["metadata"]["name"], "-o", "json")  # type: ignore[index]
        return dict(json.loads(out.stdout))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kube, Provider]]:
    tmp = tmp_path_factory.mktemp("kubelet")
    plane = ControlPlane(log_dir=tmp / "logs")
    plane.start()
    provider: Provider | None = None
    try:
        admin = plane.write_kubeconfig(tmp / "kubeconfig")
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(admin), client_configuration=cfg)  # type: ignore[no-untyped-call]
        rest = Rest(client.ApiClient(cfg))
        install_slice_crd(rest)
        provider = Provider(
            rest,
            parse_pools(["tpu7x:provision-only:1"]),
            Options(
                heartbeat_interval=2.0,
                status_interval=10.0,
                scheduler="on",
                system_nodes=1,
                run_images=(IMAGE,),
                kubelet_api=True,
                pod_dir=str(tmp / "pods"),
            ),
        )
        provider.start()
        kube = Kube(admin)
        kube("create", "namespace", "ome")
        kube("apply", "--server-side", "-f", str(ROOT / "config" / "crd"))
        for f in sorted((ROOT / "config" / "rbac").glob("*.yaml")):
            if f.name != "kustomization.yaml":
                kube("apply", "-f", str(f))
        kube("apply", "-f", "-", input=json.dumps(POD))
        yield kube, provider
    finally:
        if provider is not None:
            provider.stop()
        plane.stop()


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def test_the_managers_pod_runs_logs_restarts_and_stops(cluster: tuple[Kube, Provider]) -> None:
    kube, provider = cluster
    pod = eventually(lambda: p if ready(p := kube.pod()) else None, 90, "the pod Ready")
    assert pod["spec"]["nodeName"] == "gke-default-pool-node-0"  # untainted: no tolerations
    node = json.loads(kube("get", "node", "gke-default-pool-node-0", "-o", "json").stdout)
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0
    status = pod["status"]["containerStatuses"][0]
    assert status["ready"] and "running" in status["state"] and status["restartCount"] == 0

    # kubectl logs goes through kube-apiserver to the kubelet API: the manager's JSON lines.
    def json_lines(*args: str) -> list[dict[str, Any]]:
        out = kube("logs", "-n", "ome", *args, check=False)
        lines = []
        for line in out.stdout.splitlines():
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
        return lines

    first = eventually(
        lambda: json_lines(POD["metadata"]["name"]),  # type: ignore[index]
        30,
        "the manager's log lines",
    )
    assert any("starting ome-manager" in str(line.get("message") or line) for line in first), first
    by_label = kube("logs", "-n", "ome", "-l", "control-plane=ome-controller-manager", "--tail=-1")
    assert "starting ome-manager" in by_label.stdout
    assert (
        len(kube("logs", "-n", "ome", pod["metadata"]["name"], "--tail=1").stdout.splitlines()) == 1
    )
    none = kube("logs", "-n", "ome", pod["metadata"]["name"], "--previous", check=False)
    assert none.returncode != 0 and "previous terminated container" in none.stderr

    # The mapped ports, and the metrics behind them.
    annotations = pod["metadata"]["annotations"]
    ports = json.loads(annotations["sim.ome.io/ports"])
    assert set(ports) == {"8080", "8081"}
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['8080']}/metrics", timeout=10) as r:
        assert r.status == 200 and b"# TYPE" in r.read()

    # A crash: restarted, restartCount 1, and the old run's lines under --previous.
    pid = json.loads(annotations["sim.ome.io/pid"])["manager"]
    os.kill(pid, signal.SIGKILL)

    def restarted() -> dict[str, Any] | None:
        p = kube.pod()
        s = p["status"]["containerStatuses"][0]
        return p if s["restartCount"] == 1 and ready(p) else None

    pod = eventually(restarted, 90, "the restarted pod Ready")
    last = pod["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert last["exitCode"] == 137 and last["reason"] == "Error"
    previous = kube("logs", "-n", "ome", pod["metadata"]["name"], "--previous")
    assert "starting ome-manager" in previous.stdout
    new_pid = json.loads(pod["metadata"]["annotations"]["sim.ome.io/pid"])["manager"]
    assert new_pid != pid

    # -f streams until the run ends; here, until the pod is deleted.
    follow = subprocess.Popen(
        [
            shutil.which("kubectl") or "kubectl",
            "--kubeconfig",
            str(kube.kubeconfig),
            "logs",
            "-n",
            "ome",
            "-f",
            pod["metadata"]["name"],
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Deleting the pod stops the process (SIGTERM), then the pod goes.
        kube("delete", "pod", "-n", "ome", pod["metadata"]["name"], "--wait=false")
        out, _ = follow.communicate(timeout=60)
        assert "starting ome-manager" in out
    finally:
        if follow.poll() is None:
            follow.kill()
    eventually(
        lambda: kube("get", "pod", "-n", "ome", "-o", "name").stdout.strip() == "",
        60,
        "the pod gone",
    )

    def dead() -> bool:
        try:
            os.kill(new_pid, 0)
        except ProcessLookupError:
            return True
        return False

    eventually(dead, 30, "the process gone")
    assert provider.runner is not None and not any(provider.runner.pids().values())

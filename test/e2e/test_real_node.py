"""The manager's pod on a real node (``ome-sim run --control-plane kube --node real``, as
``make e2e-kube`` starts it): the image `make image` built, in a runc container that the real
kubelet started, looked at from the host as an operator would (crictl, runc, /proc).

Skipped where there is no real node (the embedded default, or ``--node simulated``), said
by the ``node.json`` ome-sim writes beside the kubeconfig.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ome_sim import containers
from test.e2e.conftest import Environment, guide_sample
from test.helpers import eventually

SELECTOR = "control-plane=ome-controller-manager"


@dataclass
class Node:
    env: Environment
    info: dict[str, Any]

    def crictl(self, *args: str) -> str:
        proc = subprocess.run(
            [*self.info["crictl"], *args], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, f"crictl {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def manager_pod(self) -> dict[str, Any]:
        """The ready manager pod (there is one, on the real node)."""
        items = json.loads(
            self.env.kubectl("get", "pods", "-n", "ome", "-l", SELECTOR, "-o", "json").stdout
        )["items"]
        ready = [p for p in items if is_ready(p)]
        assert len(ready) == 1, [p["metadata"]["name"] for p in items]
        return ready[0]

    def pid_of(self, container_id: str) -> int:
        """The container's process id on the host, as containerd knows it."""
        inspected = json.loads(self.crictl("inspect", container_id.split("://", 1)[1]))
        return int(inspected["info"]["pid"])


def is_ready(pod: dict[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


@pytest.fixture(scope="module")
def node(environment: Environment) -> Iterator[Node]:
    path = environment.kubeconfig.parent / "node.json"
    if not path.is_file():
        pytest.skip("no real node here (make e2e-kube runs one: ome-sim run --node real)")
    yield Node(environment, json.loads(path.read_text()))


def proc_status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def test_the_managers_pod_runs_the_image_built_in_a_runc_container(node: Node) -> None:
    pod = node.manager_pod()
    assert pod["spec"]["nodeName"] == node.info["name"]
    [status] = pod["status"]["containerStatuses"]
    # The image make image built: containerd's id for it is the container tool's image id.
    image = containers.image_name()
    assert status["image"] == image
    assert status["imageID"] == "sha256:" + containers.inspect(image)["Id"]
    assert status["containerID"].startswith("containerd://")

    # From the host: runc runs it (under containerd's shim), as uid 65532, read-only root.
    cid = status["containerID"].split("://", 1)[1]
    state = json.loads(
        subprocess.run(
            ["runc", "--root", "/run/containerd/runc/k8s.io", "state", cid],
            capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    assert state["status"] == "running"
    pid = node.pid_of(status["containerID"])
    assert state["pid"] == pid
    assert b"ome-manager" in Path(f"/proc/{pid}/cmdline").read_bytes()
    seen = proc_status(pid)
    assert seen["Uid"].split()[:2] == ["65532", "65532"]
    assert seen["CapEff"] == "0000000000000000"  # capabilities: drop ALL
    assert seen["NoNewPrivs"] == "1"  # allowPrivilegeEscalation: false
    parent = int(seen["PPid"])
    assert "containerd-shim-runc-v2" in Path(f"/proc/{parent}/cmdline").read_text()

    # Through the kubelet: exec shows the read-only root and the writable /tmp (emptyDir).
    name = pod["metadata"]["name"]
    probe = (
        "import os\n"
        "for p in ('/probe', '/tmp/probe'):\n"
        "    try:\n"
        "        open(p, 'w').close(); print(p, 'written')\n"
        "    except OSError as e:\n"
        "        print(p, e.strerror)\n"
        "print('token', os.path.exists('/var/run/secrets/kubernetes.io/serviceaccount/token'))\n"
        "print('cert', os.path.exists('/tmp/k8s-webhook-server/serving-certs/tls.crt'))\n"
    )
    out = node.env.kubectl("exec", "-n", "ome", name, "--", "python3", "-c", probe).stdout
    assert out.splitlines() == [
        "/probe Read-only file system",
        "/tmp/probe written",
        "token True",
        "cert True",
    ]


@pytest.mark.timeout(600)
def test_a_killed_manager_container_is_restarted_and_the_service_stays_ready(
    node: Node,
) -> None:
    env = node.env
    env.kubectl("apply", "-f", "-", input=guide_sample("kill-probe"))
    try:
        env.kubectl(
            "wait", "--for=condition=Ready", "inferenceservice/kill-probe", "-n", "kill-probe",
            "--timeout=3m", timeout=200,
        )  # fmt: skip
        pod = node.manager_pod()
        name = pod["metadata"]["name"]
        [status] = pod["status"]["containerStatuses"]
        restarts = status["restartCount"]
        pid = node.pid_of(status["containerID"])
        os.kill(pid, signal.SIGKILL)  # from the host, as an OOM kill or an operator would

        def service_ready() -> bool:
            got = json.loads(
                env.kubectl(
                    "get", "inferenceservice", "kill-probe", "-n", "kill-probe", "-o", "json"
                ).stdout
            )
            conditions = (got.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        # Until the pod is Ready again with one more restart, the service never stops
        # being Ready (the webhook and the controllers are gone meanwhile; the serving
        # pods and the Slice are not).
        deadline = time.monotonic() + 180
        while True:
            assert service_ready(), "the InferenceService stopped being Ready"
            current = json.loads(env.kubectl("get", "pod", name, "-n", "ome", "-o", "json").stdout)
            [now] = current["status"]["containerStatuses"]
            if now["restartCount"] == restarts + 1 and is_ready(current):
                break
            assert time.monotonic() < deadline, f"not restarted and Ready in time: {now}"
            time.sleep(0.5)
        assert now["lastState"]["terminated"]["exitCode"] == 137  # SIGKILL
        assert now["containerID"] != status["containerID"]
        assert now["imageID"] == status["imageID"]
        # The new container serves: a change to the service is reconciled.
        env.kubectl("delete", "inferenceservice", "kill-probe", "-n", "kill-probe",
                    "--timeout=2m", timeout=150)  # fmt: skip
        eventually(
            lambda: not env.kubectl(
                "get", "slices.accelerator.gke.io", "-l",
                "cloud.google.com/slice-owner-name=kill-probe-engine", "-o", "name",
            ).stdout.strip(),
            timeout=120,
        )  # fmt: skip
    finally:
        env.kubectl("delete", "namespace", "kill-probe", "--timeout=2m", "--ignore-not-found",
                    timeout=150)  # fmt: skip

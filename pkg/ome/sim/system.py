"""``ome-sim run``: the whole system on the embedded cluster, as ``make run`` starts it.

The embedded API server and the simulated GKE provider (``ome-sim up``), then what an
operator installs on a real cluster: OME's CRDs, the ``inferenceservice-config`` ConfigMap
with the guide's Step 1 values, the webhook's Service, Secret and configuration
(config/webhook), the sample model and runtime (config/samples), and the manager, run as
its own process against the kubeconfig exactly as in a cluster. Each step says what it is
waiting for; Ctrl-C stops the manager, then the provider and the server.

The manager binds its ports itself (``127.0.0.1:0``) and logs them; they are read from its
JSON log, so no port is guessed and none is left behind.
"""

from __future__ import annotations

import copy
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from ome.api.v1beta1 import CLUSTER_BASE_MODELS, CLUSTER_SERVING_RUNTIMES
from ome.kube import Resource
from ome.runtime.rest import (
    CONFIGMAPS,
    CRDS,
    NAMESPACES,
    SECRETS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    Rest,
)
from ome.tpuslice.types import GUIDE_CONFIG_JSON

JSON = dict[str, Any]

NAMESPACE = "ome"
SERVICES = Resource("", "v1", "services")
KINDS = {
    "CustomResourceDefinition": CRDS,
    "Namespace": NAMESPACES,
    "ConfigMap": CONFIGMAPS,
    "Secret": SECRETS,
    "Service": SERVICES,
    "ValidatingWebhookConfiguration": VALIDATING_WEBHOOK_CONFIGURATIONS,
    "ClusterBaseModel": CLUSTER_BASE_MODELS,
    "ClusterServingRuntime": CLUSTER_SERVING_RUNTIMES,
}
SAMPLES = (
    "samples/clusterbasemodel-qwen3-0-6b.yaml",
    "samples/clusterservingruntime-srt-qwen3-tpu.yaml",
)
GUIDE_SAMPLE = "config/samples/qwen3-tpu-isvc.yaml"


class StartError(RuntimeError):
    """Something the system cannot start without; the message says what and why."""


def read_manifests(path: Path) -> list[JSON]:
    """Every document of a YAML file (or of each *.yaml file of a directory), in order."""
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    docs: list[JSON] = []
    for file in files:
        try:
            docs.extend(d for d in yaml.safe_load_all(file.read_text()) if isinstance(d, dict))
        except (OSError, yaml.YAMLError) as e:
            raise StartError(f"cannot read {file}: {e}") from None
    return docs


def create(rest: Rest, obj: JSON) -> None:
    """Create ``obj``; one that exists already is left as it is."""
    res = KINDS.get(str(obj.get("kind")))
    if res is None:
        raise StartError(f"no way to install a {obj.get('kind')}")
    namespace = (obj.get("metadata") or {}).get("namespace") if res.namespaced else None
    try:
        rest.create(res, obj, namespace)
    except ApiException as e:
        if e.status != 409:
            raise


def config_with(ready_timeout: str | None) -> str:
    """The guide's Step 1 ``tpuSliceProvisioning`` block, with another readyTimeout."""
    config = json.loads(GUIDE_CONFIG_JSON)
    if ready_timeout is not None:
        config["slice"]["readyTimeout"] = ready_timeout
    return json.dumps(config, separators=(",", ":"))


@dataclass
class ManagerProcess:
    """The manager as a child process; its JSON log goes to ``log_path`` and is scanned for
    the ports it bound."""

    proc: subprocess.Popen[str]
    log_path: Path
    ports: dict[str, int] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    _seen: threading.Condition = field(default_factory=threading.Condition)

    def pump(self) -> None:
        assert self.proc.stderr is not None
        with self.log_path.open("a") as log:
            for line in self.proc.stderr:
                log.write(line)
                log.flush()
                self._note(line)
        with self._seen:
            self._seen.notify_all()

    def _note(self, line: str) -> None:
        try:
            entry = json.loads(line)
        except ValueError:
            entry = {"msg": line.strip()}
        message = str(entry.get("msg", ""))
        with self._seen:
            self.lines = [*self.lines[-19:], message]
            for what in ("probes", "metrics", "admission webhooks"):
                prefix = f"serving {what} on port "
                if message.startswith(prefix):
                    self.ports[what] = int(message[len(prefix) :])
            self._seen.notify_all()

    def wait_for_port(self, what: str, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        with self._seen:
            while what not in self.ports:
                if self.proc.poll() is not None:
                    raise StartError(self.died())
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StartError(f"the manager did not serve {what} within {timeout:.0f}s")
                self._seen.wait(min(left, 0.5))
            return self.ports[what]

    def died(self) -> str:
        tail = "\n  ".join(self.lines[-10:]) or "(no output)"
        return f"the manager exited with code {self.proc.poll()}; its last lines:\n  {tail}"

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _prctl() -> Any:
    """libc's prctl, resolved here in the parent so that the forked child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, get SIGTERM when ``ome-sim`` dies, even by
    SIGKILL, so that no manager outlives it. Only a C call: safe between fork and exec."""
    if _PRCTL is not None:
        _PRCTL(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def start_manager(kubeconfig: Path, log_path: Path, extra: list[str]) -> ManagerProcess:
    command = [
        sys.executable,
        "-m",
        "ome.entrypoints.manager",
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        NAMESPACE,
        "--metrics-bind-address",
        "127.0.0.1:0",
        "--health-probe-bind-address",
        "127.0.0.1:0",
        "--webhook-bind-address",
        "127.0.0.1:0",
        "--log-format",
        "json",
        *extra,
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("")
    proc = subprocess.Popen(
        command,
        preexec_fn=_die_with_parent,  # noqa: PLW1509 - only a C call, between fork and exec
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    manager = ManagerProcess(proc, log_path)
    threading.Thread(target=manager.pump, name="manager-log", daemon=True).start()
    return manager


def readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()
    except OSError as e:
        return 0, str(e)


def wait_ready(
    manager: ManagerProcess,
    port: int,
    timeout: float,
    progress: Callable[[str], None],
    stop: threading.Event,
) -> None:
    """Until /readyz answers 200 (or ``stop`` is set), saying what it still waits for
    whenever that changes."""
    deadline = time.monotonic() + timeout
    last = ""
    while not stop.is_set():
        if manager.proc.poll() is not None:
            raise StartError(manager.died())
        status, body = readyz(port)
        if status == 200:
            return
        waiting = (
            "; ".join(line[4:] for line in body.splitlines() if line.startswith("[-] "))
            or body.strip()
        )
        if waiting != last:
            progress(f"waiting for the manager to be ready: {waiting}")
            last = waiting
        if time.monotonic() > deadline:
            raise StartError(f"the manager was not ready within {timeout:.0f}s: {waiting}")
        stop.wait(0.2)


def install(
    rest: Rest, config_dir: Path, slice_config: str, progress: Callable[[str], None]
) -> list[JSON]:
    """Everything but the manager; returns the webhook configuration, to be pointed at the
    manager's port once it is known."""
    for sub in ("crd", "webhook", "samples"):
        if not (config_dir / sub).is_dir():
            raise StartError(
                f"{config_dir / sub} not found: run from the repository's root, or pass "
                "--config-dir"
            )
    progress("installing OME's CRDs (config/crd)")
    for crd in read_manifests(config_dir / "crd"):
        create(rest, crd)
    progress(f"creating namespace {NAMESPACE} and the inferenceservice-config ConfigMap")
    create(rest, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    create(
        rest,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "inferenceservice-config", "namespace": NAMESPACE},
            "data": {"tpuSliceProvisioning": slice_config},
        },
    )
    progress("installing the webhook's Service, Secret and configuration (config/webhook)")
    webhook_configs = []
    for doc in read_manifests(config_dir / "webhook"):
        create(rest, doc)
        if doc.get("kind") == "ValidatingWebhookConfiguration":
            webhook_configs.append(doc)
    progress("installing the sample model and runtime (config/samples)")
    for sample in SAMPLES:
        for doc in read_manifests(config_dir / sample):
            create(rest, doc)
    return webhook_configs


def point_webhooks_at(rest: Rest, configs: list[JSON], port: int) -> None:
    """The embedded API server dials a webhook Service at 127.0.0.1:<its port>: give each
    webhook the manager's port, keeping the caBundle the manager filled in."""
    for doc in configs:
        name = doc["metadata"]["name"]
        for _ in range(5):
            live = rest.get(VALIDATING_WEBHOOK_CONFIGURATIONS, name)
            updated = copy.deepcopy(live)
            for hook in updated.get("webhooks") or []:
                service = (hook.get("clientConfig") or {}).get("service")
                if service is not None:
                    service["port"] = port
            try:
                rest.replace(VALIDATING_WEBHOOK_CONFIGURATIONS, updated)
                break
            except ApiException as e:
                if e.status != 409:
                    raise

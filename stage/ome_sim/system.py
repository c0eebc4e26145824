"""``ome-sim run``: the whole system on the embedded cluster, as ``make run`` starts it.

The embedded API server and the simulated GKE provider (``ome-sim up``), then what an
operator installs on a real cluster: OME's CRDs, the ``inferenceservice-config`` ConfigMap
with the walkthrough's Step 1 values, the webhook's Service, Secret and configuration
(config/webhook), the sample model and runtime (config/samples), and the manager, run as
its own process against the kubeconfig exactly as in a cluster. Each step says what it is
waiting for; Ctrl-C stops the manager, then the provider and the server.

The manager binds its ports itself (``127.0.0.1:0``) and logs them; they are read from its
JSON log, so no port is guessed and none is left behind.

Once OME is up, the manager is kept running as a Deployment's pod is (`Supervisor`): when
it exits, for whatever reason and with whatever code, it is restarted with the kubelet's
crash-loop backoff (`CrashLoopBackoff` has the numbers), on the ports it had when they are
still free, and its log goes on in the same file after a separator line. The API server,
the provider and everything in them live on meanwhile. Only Ctrl-C (SIGINT or SIGTERM to
``ome-sim``) stops it for good; a manager that fails before OME is first up is an error
reported as such, not restarted.
"""

from __future__ import annotations

import copy
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

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
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts")
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", namespaced=False
)
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings")
#: The manager's identity on a real control plane (config/rbac).
SERVICE_ACCOUNT = "ome-controller-manager"
KINDS = {
    "CustomResourceDefinition": CRDS,
    "Namespace": NAMESPACES,
    "ConfigMap": CONFIGMAPS,
    "Secret": SECRETS,
    "Service": SERVICES,
    "ValidatingWebhookConfiguration": VALIDATING_WEBHOOK_CONFIGURATIONS,
    "ServiceAccount": SERVICE_ACCOUNTS,
    "ClusterRole": CLUSTER_ROLES,
    "ClusterRoleBinding": CLUSTER_ROLE_BINDINGS,
    "Role": ROLES,
    "RoleBinding": ROLE_BINDINGS,
    "ClusterBaseModel": CLUSTER_BASE_MODELS,
    "ClusterServingRuntime": CLUSTER_SERVING_RUNTIMES,
}
SAMPLES = (
    "samples/clusterbasemodel-qwen3-0-6b.yaml",
    "samples/clusterservingruntime-srt-qwen3-tpu.yaml",
)
GUIDE_SAMPLE = "config/samples/qwen3-tpu-isvc.yaml"
# What the manager logs as "serving <what> on port N", and the flag that binds it.
PORT_FLAGS = {
    "probes": "--health-probe-bind-address",
    "metrics": "--metrics-bind-address",
    "admission webhooks": "--webhook-bind-address",
}


def rest_from(kubeconfig: str | Path, agent: str) -> Rest:
    """A client of the cluster ``kubeconfig`` names, sending ``agent`` as its User-Agent.
    Raises ``config.ConfigException`` or ``OSError`` when the file cannot be used."""
    cfg = kube_client.Configuration()
    kube_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)  # type: ignore[no-untyped-call]
    return Rest(kube_client.ApiClient(cfg), user_agent=agent)


class StartError(RuntimeError):
    """Something the system cannot start without; the message says what and why."""


def read_manifests(path: Path) -> list[JSON]:
    """Every document of a YAML file (or of each *.yaml file of a directory), in order; a
    kustomization.yaml is kustomize's, not an object, and is left out."""
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    docs: list[JSON] = []
    for file in files:
        try:
            docs.extend(
                d
                for d in yaml.safe_load_all(file.read_text())
                if isinstance(d, dict) and d.get("kind") != "Kustomization"
            )
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
    """The walkthrough's Step 1 ``tpuSliceProvisioning`` block, with another readyTimeout."""
    config = json.loads(GUIDE_CONFIG_JSON)
    if ready_timeout is not None:
        config["slice"]["readyTimeout"] = ready_timeout
    return json.dumps(config, separators=(",", ":"))


@dataclass
class ManagerProcess:
    """The manager as a child process; its JSON log goes to ``log_path`` and is scanned for
    the ports it bound and its leader-election identity."""

    proc: subprocess.Popen[str]
    log_path: Path
    ports: dict[str, int] = field(default_factory=dict)
    identity: str = ""
    lines: list[str] = field(default_factory=list)
    _seen: threading.Condition = field(default_factory=threading.Condition)
    _pump: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start_pump(self) -> None:
        self._pump = threading.Thread(target=self.pump, name="manager-log", daemon=True)
        self._pump.start()

    def join_pump(self, timeout: float = 5.0) -> None:
        """Until the log has every line the (exited) manager wrote."""
        if self._pump is not None:
            self._pump.join(timeout)

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
            entry = {"message": line.strip()}
        message = str(entry.get("message", ""))
        with self._seen:
            if entry.get("identity") and not self.identity:
                self.identity = str(entry["identity"])
            self.lines = [*self.lines[-19:], message]
            for what in ("probes", "metrics", "admission webhooks"):
                prefix = f"serving {what} on port "
                port = re.match(r"\d+", message[len(prefix) :])
                if message.startswith(prefix) and port:
                    self.ports[what] = int(port.group())
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
        return f"the manager {describe_exit(self.proc.poll())}; its last lines:\n  {tail}"

    def stop(self, timeout: float = 30.0) -> None:
        terminate(self.proc, timeout)
        self.join_pump()  # its last lines, in the log before ome-sim exits


def _prctl() -> Any:
    """libc's prctl, resolved here in the parent so that the forked child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def die_with_parent() -> None:
    """In the child, before exec: on Linux, get SIGTERM when ``ome-sim`` dies, even by
    SIGKILL, so that no manager outlives it. Only a C call: safe between fork and exec."""
    if _PRCTL is not None:
        _PRCTL(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def terminate(proc: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def describe_exit(code: int | None) -> str:
    """``exited with code -9 (killed by SIGKILL)``, as Popen reports a signal."""
    if code is None:
        return "is still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"exited with code {code} (killed by {name})"
    return f"exited with code {code}"


def port_is_free(port: int) -> bool:
    """Whether the manager can bind 127.0.0.1:``port`` now; its servers set SO_REUSEADDR
    too, so connections a killed manager left in TIME_WAIT do not count."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def log_separator(log_path: Path, message: str) -> None:
    """A line in the manager's JSON log, in its own format so that the log stays one JSON
    object a line, that marks where a restarted manager's lines begin."""
    entry = {
        "time": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "severity": "INFO",
        "logger": "ome-sim",
        "message": f"---------- {message} ----------",
    }
    with log_path.open("a") as log:
        log.write(json.dumps(entry) + "\n")


def start_manager(
    kubeconfig: Path,
    log_path: Path,
    extra: list[str],
    ports: dict[str, int] | None = None,
    separator: str | None = None,
    module: str = "ome.entrypoints.manager",
    env: dict[str, str] | None = None,
) -> ManagerProcess:
    """The manager as a child process, each of its servers on 127.0.0.1 at the port
    ``ports`` gives it (by what it logs it serves: probes, metrics, admission webhooks) or
    else a free one. The log is started afresh, or, given a ``separator``, appended to
    after that line. ``module`` is what runs (the soak's sabotaged manager wraps the real
    one), with ``env`` added to the environment.

    Call it from the main thread: PR_SET_PDEATHSIG fires when the thread that forked the
    child ends, not only the process, so a manager forked by a short-lived thread would be
    stopped with it."""
    binds = []
    for what, flag in PORT_FLAGS.items():
        binds += [flag, f"127.0.0.1:{(ports or {}).get(what, 0)}"]
    command = [
        sys.executable,
        "-m",
        module,
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        NAMESPACE,
        *binds,
        # Plain HTTP, so the printed metrics URL answers curl as the walkthrough shows it: the
        # embedded API server has no TokenReview to check a scraper's token with.
        "--metrics-secure=false",
        "--log-format",
        "json",
        *extra,
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if separator is None:
        log_path.write_text("")
    else:
        log_separator(log_path, separator)
    proc = subprocess.Popen(
        command,
        preexec_fn=die_with_parent,  # noqa: PLW1509 - only a C call, between fork and exec
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    manager = ManagerProcess(proc, log_path)
    manager.start_pump()
    return manager


def readyz(port: int, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=timeout) as resp:
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


def wait_established(rest: Rest, names: list[str], timeout: float = 60.0) -> None:
    """Until each CRD is Established: a real API server takes a moment to serve a new CRD,
    and a custom object created before then is refused with 404."""
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            crd = rest.get(CRDS, name)
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            ):
                break
            if time.monotonic() > deadline:
                raise StartError(f"CRD {name} was not Established within {timeout:.0f}s")
            time.sleep(0.1)


def install(
    rest: Rest,
    config_dir: Path,
    slice_config: str,
    progress: Callable[[str], None],
    rbac: bool = False,
) -> list[JSON]:
    """Everything but the manager; returns the webhook configuration, to be pointed at the
    manager's port once it is known. ``rbac`` installs config/rbac too (the manager's
    ServiceAccount and its roles), which only a real control plane enforces."""
    subs = ("crd", "webhook", "samples", *(("rbac",) if rbac else ()))
    for sub in subs:
        if not (config_dir / sub).is_dir():
            raise StartError(
                f"{config_dir / sub} not found: run from the repository's root, or pass "
                "--config-dir"
            )
    progress("installing OME's CRDs (config/crd)")
    crds = read_manifests(config_dir / "crd")
    for crd in crds:
        create(rest, crd)
    wait_established(rest, [crd["metadata"]["name"] for crd in crds])
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
    if rbac:
        progress("installing the manager's ServiceAccount and roles (config/rbac)")
        for doc in read_manifests(config_dir / "rbac"):
            create(rest, doc)
    install_samples(rest, config_dir, progress)
    return webhook_configs


def install_samples(rest: Rest, config_dir: Path, progress: Callable[[str], None]) -> None:
    progress("installing the sample model and runtime (config/samples)")
    for sample in SAMPLES:
        for doc in read_manifests(config_dir / sample):
            create(rest, doc)


def _update_webhooks(rest: Rest, configs: list[JSON], change: Callable[[JSON], None]) -> None:
    """Apply ``change`` to each webhook's ``clientConfig`` of each configuration, read live
    and written back (again on a conflict), so the caBundle the manager filled in stays."""
    for doc in configs:
        name = doc["metadata"]["name"]
        for _ in range(5):
            live = rest.get(VALIDATING_WEBHOOK_CONFIGURATIONS, name)
            updated = copy.deepcopy(live)
            for hook in updated.get("webhooks") or []:
                hook["clientConfig"] = hook.get("clientConfig") or {}
                change(hook["clientConfig"])
            try:
                rest.replace(VALIDATING_WEBHOOK_CONFIGURATIONS, updated)
                break
            except ApiException as e:
                if e.status != 409:
                    raise


def point_webhooks_at(rest: Rest, configs: list[JSON], port: int) -> None:
    """The embedded API server dials a webhook Service at 127.0.0.1:<its port>: give each
    webhook the manager's port, keeping the caBundle the manager filled in."""

    def change(client_config: JSON) -> None:
        service = client_config.get("service")
        if service is not None:
            service["port"] = port

    _update_webhooks(rest, configs, change)


@dataclass
class CrashLoopBackoff:
    """The kubelet's restart backoff for a container that keeps exiting, and its numbers.

    The first restart is at once; each later one waits 10 s, then 20 s, 40 s, 80 s, 160 s,
    and 300 s (5 min) from then on. A manager that ran 10 minutes (600 s) before it exited
    starts the sequence over: restarted at once, then 10 s, and so on. This is the
    kubelet's own order (its backoff applies from a container's second exit on, and is
    forgotten once it ran twice the 5-minute cap), and it puts the first restart well
    within 10 s of the exit.
    """

    initial: float = 10.0
    cap: float = 300.0
    reset_after: float = 600.0
    _next: float | None = None  # None: not backing off, so the next restart is at once

    def delay(self, ran_for: float) -> float:
        """How long to wait before restarting a manager that exited after running
        ``ran_for`` seconds."""
        if self._next is None or ran_for >= self.reset_after:
            self._next = self.initial
            return 0.0
        delay = self._next
        self._next = min(delay * 2, self.cap)
        return delay


class Supervisor:
    """Keeps the manager running until ``stop`` is set, as the kubelet keeps a Deployment's
    pod running: any exit while ``ome-sim`` runs is a crash, since ``ome-sim`` only ever
    asks the manager to stop on Ctrl-C (a ``kill -TERM`` from elsewhere, which the manager
    answers with a clean exit 0, is restarted too, as a pod's would be).

    Each exit is one console line (``the manager exited with code -9 (killed by SIGKILL);
    restarting it now (restart 1)``), the restart waits as `CrashLoopBackoff` says, and once
    the new manager is ready another line says so (``the manager is running again (pid
    N)``). The new manager is asked for the ports the last one had, each one that is still
    free; one it cannot have is a new free port, and a new metrics port is printed. The
    webhook configuration is pointed at the new manager's webhook port before it counts as
    ready. Ctrl-C (``stop``) is answered within ``poll`` seconds in every state: running,
    waiting to restart, or a restarted manager starting.

    Run it in the main thread, which forks every manager (see `start_manager`).
    """

    not_ready_warning = 60.0  # seconds a restarted manager may take before a line says why

    def __init__(
        self,
        manager: ManagerProcess,
        start: Callable[[dict[str, int], str], ManagerProcess],
        serving: Callable[[ManagerProcess], None],
        say: Callable[[str], None],
        stop: threading.Event,
        backoff: CrashLoopBackoff | None = None,
        poll: float = 0.2,
    ) -> None:
        """``manager`` is running and ready; ``start(ports, separator)`` starts another (see
        `start_manager`); ``serving(manager)`` is called once a manager serves its ports,
        before its readiness is asked, to point the webhooks at it."""
        self.manager = manager
        self.ports: dict[str, int] = {}  # the ports of the last manager seen ready
        self.restarts = 0
        self._start = start
        self._serving = serving
        self._say = say
        self._stop = stop
        self._backoff = backoff or CrashLoopBackoff()
        self._poll = poll

    def run(self) -> None:
        """Until ``stop`` is set, from a manager that serves and is ready; the manager of the
        moment is ``self.manager``."""
        self.ports = dict(self.manager.ports)
        started = time.monotonic()
        ready, pointed, warned = True, True, False
        while not self._stop.is_set():
            manager = self.manager
            code = manager.proc.poll()
            if code is not None:
                # A Ctrl-C at a terminal reaches the manager too: that is no crash.
                if self._stop.wait(0.1):
                    return
                self.restarts += 1
                delay = self._backoff.delay(time.monotonic() - started)
                when = "now" if delay == 0 else f"in {delay:.0f}s"
                exited = describe_exit(code)
                self._say(f"the manager {exited}; restarting it {when} (restart {self.restarts})")
                if self._stop.wait(delay):
                    return
                manager.join_pump()
                wanted = {what: port for what, port in self.ports.items() if port_is_free(port)}
                self.manager = self._start(
                    wanted, f"ome-sim: restart {self.restarts}: the manager {exited}"
                )
                started = time.monotonic()
                ready, pointed, warned = False, False, False
                continue
            if not ready:
                if not pointed and all(what in manager.ports for what in PORT_FLAGS):
                    pointed = self._point(manager)
                if pointed:
                    status, body = readyz(manager.ports["probes"], timeout=1.0)
                    ready = status == 200
                    if ready:
                        self._announce(manager)
                    elif not warned and time.monotonic() - started > self.not_ready_warning:
                        warned = True
                        waiting = "; ".join(
                            line[4:] for line in body.splitlines() if line.startswith("[-] ")
                        )
                        self._say(
                            f"the manager (pid {manager.pid}) is not ready after "
                            f"{self.not_ready_warning:.0f}s: {waiting or body.strip()}"
                        )
            self._stop.wait(self._poll)

    def _point(self, manager: ManagerProcess) -> bool:
        try:
            self._serving(manager)
        except (ApiException, HTTPError, OSError):
            return False  # the next poll tries again
        return True

    def _announce(self, manager: ManagerProcess) -> None:
        self._say(f"the manager is running again (pid {manager.pid})")
        old, new = self.ports.get("metrics"), manager.ports["metrics"]
        if old != new:
            self._say(
                f"manager metrics: http://127.0.0.1:{new}/metrics (a new port: {old} was taken)"
            )
        self.ports = dict(manager.ports)

    def stop(self) -> None:
        self.manager.stop()


def service_account_token(
    rest: Rest, name: str = SERVICE_ACCOUNT, namespace: str = NAMESPACE, seconds: int = 604800
) -> str:
    """A token of the ServiceAccount (TokenRequest), as the kubelet projects into a pod: the
    manager then runs under exactly the RBAC of config/rbac. It lasts a week by default."""
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": seconds},
    }
    answer = rest.request("POST", SERVICE_ACCOUNTS.path(namespace, name, "token"), body=body)
    return str(answer["status"]["token"])


def point_webhooks_at_url(rest: Rest, configs: list[JSON], port: int) -> None:
    """On a real API server: give each webhook the URL ``https://127.0.0.1:<port><path>``
    of the manager on loopback, keeping the caBundle the manager filled in (the manager is
    run with ``--webhook-host 127.0.0.1``, so its certificate names that address).

    For ``--manager process``, whose manager is no pod: kube-apiserver dials a webhook
    Service at its ClusterIP, which the provider's kube-proxy stand-in relays only to pods
    it runs, and Endpoints and EndpointSlices may not hold a loopback address (``may not be
    in the loopback range``). ``clientConfig.url`` reaches a process on 127.0.0.1
    (docs/embedded-apiserver.md)."""

    def change(client_config: JSON) -> None:
        service = client_config.pop("service", None)
        path = (service or {}).get("path") or urllib.parse.urlsplit(
            client_config.get("url", "")
        ).path
        client_config["url"] = f"https://127.0.0.1:{port}{path}"

    _update_webhooks(rest, configs, change)

"""Pods that run for real: the kubelet stand-in's container runtime for chosen images.

A pod on one of the provider's nodes whose container's image repository (the part before
``:``) is in ``Options.run_images`` is run as a child process: the image's entrypoint is
``ome-manager``, so the container's ``command`` (``ome-manager`` or none) becomes
``sys.executable -m ome.entrypoints.manager`` and its ``args`` follow, with the container's
``env`` (literal values and the downward API's ``fieldRef``s) and ``KUBECONFIG`` pointing at
a kubeconfig with a token of the pod's ServiceAccount (a TokenRequest bound to the pod), so
the process runs under the RBAC the pod would.

Networking: every "pod" shares the host's network, so a pod cannot have its own ports.
Each declared ``containerPort`` is mapped to a free port on 127.0.0.1; an argument
``--<x>-bind-address=:PORT`` (or ``=0.0.0.0:PORT``) naming a declared port is rewritten to
``127.0.0.1:<mapped>`` (a Service reaches it through the provider's kube-proxy stand-in,
`ome_sim.gke.serviceproxy`). The mapping is annotated on the pod as ``sim.ome.io/ports``
(JSON, by containerPort: ``{"8080": 41234}``), the processes' ids as ``sim.ome.io/pid``
(JSON, by container name).

The kubelet's behaviour: probes (httpGet) on the mapped ports decide readiness and restart
a container whose liveness probe fails ``failureThreshold`` times; an exited container is
restarted per ``restartPolicy`` with the kubelet's crash-loop backoff (``CrashLoopBackOff``
while it waits); a deleted pod's processes get SIGTERM and, after its grace period (at most
``MAX_GRACE`` seconds), SIGKILL. Each run's stdout and stderr go to a ``LogStore`` file.

All processes are started, watched and stopped by one thread that lives as long as the
runner: PR_SET_PDEATHSIG is sent when the forking *thread* ends, and it makes the children
die with ``ome-sim``. startupProbes, ``secretKeyRef``/``configMapKeyRef`` env, volumes and
exec/tcpSocket probes are not simulated.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from ome.runtime.rest import PODS, Rest
from ome_sim.controlplane import free_port
from ome_sim.system import CrashLoopBackoff, die_with_parent

from .kubeletapi import LogStore
from .model import SIM

JSON = dict[str, Any]
log = logging.getLogger(__name__)

PORTS_ANNOTATION = f"{SIM}/ports"
PID_ANNOTATION = f"{SIM}/pid"
#: The longest a deleted pod's processes are given to exit after SIGTERM.
MAX_GRACE = 30.0
#: How often the runner looks at its processes; readiness is probed at most this often
#: but at least every second (faster than periodSeconds: the simulator need not wait).
TICK = 0.2
READINESS_PERIOD = 1.0
TOKEN_SECONDS = 86400
MANAGER_ENTRYPOINTS = ("ome-manager", "manager", "/manager", "/ome-manager")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- pure decisions ------------------------------------------------------------------------


def image_repository(image: str) -> str:
    """``ghcr.io/x/ome-manager:v1`` (or ``@sha256:...``) -> ``ghcr.io/x/ome-manager``."""
    image = image.split("@", 1)[0]
    slash = image.rfind("/")
    colon = image.rfind(":")
    return image[:colon] if colon > slash else image


def containers_to_run(pod: JSON, images: Iterable[str]) -> list[str]:
    """Names of the pod's containers whose image repository is one of ``images``."""
    wanted = set(images)
    return [
        str(c.get("name", ""))
        for c in (pod.get("spec") or {}).get("containers") or []
        if image_repository(str(c.get("image", ""))) in wanted
    ]


def declared_ports(container: JSON) -> list[int]:
    return [int(p["containerPort"]) for p in container.get("ports") or [] if p.get("containerPort")]


def map_ports(pod: JSON, names: Iterable[str], free: Callable[[], int]) -> dict[int, int]:
    """A free host port for every containerPort of the named containers."""
    wanted = set(names)
    mapped: dict[int, int] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name") in wanted:
            for port in declared_ports(c):
                mapped.setdefault(port, free())
    return mapped


_BIND = re.compile(r"^(--[A-Za-z0-9-]+-bind-address)(=)?(?:0\.0\.0\.0)?:(\d+)$")
_BIND_VALUE = re.compile(r"^(?:0\.0\.0\.0)?:(\d+)$")


def rewrite_args(args: list[str], mapped: Mapping[int, int]) -> list[str]:
    """``--x-bind-address=:PORT`` / ``=0.0.0.0:PORT`` (or the flag and value apart) whose
    PORT is a mapped containerPort -> ``127.0.0.1:<mapped>``; everything else as is."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        m = _BIND.match(arg)
        if m and m.group(2) and int(m.group(3)) in mapped:
            out.append(f"{m.group(1)}=127.0.0.1:{mapped[int(m.group(3))]}")
        elif (
            arg.startswith("--")
            and arg.endswith("-bind-address")
            and i + 1 < len(args)
            and (v := _BIND_VALUE.match(args[i + 1]))
            and int(v.group(1)) in mapped
        ):
            out += [arg, f"127.0.0.1:{mapped[int(v.group(1))]}"]
            i += 1
        else:
            out.append(arg)
        i += 1
    return out


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: a defined VAR is replaced, an undefined one kept;
    ``$$`` is a literal ``$``."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR.sub(sub, text)


_FIELD_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_value(pod: JSON, path: str) -> str | None:
    """A downward API ``fieldRef.fieldPath`` of the pod; None if not supported."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    m = _FIELD_SUBSCRIPT.match(path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    return None


def resolve_env(container: JSON, pod: JSON) -> dict[str, str]:
    """The container's ``env``: literal values (with ``$(VAR)`` of earlier ones expanded)
    and ``valueFrom.fieldRef``s; other sources are left out (and logged)."""
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        name = str(item.get("name", ""))
        if "value" in item:
            env[name] = expand(str(item.get("value") or ""), env)
            continue
        ref = (item.get("valueFrom") or {}).get("fieldRef")
        value = field_value(pod, str(ref.get("fieldPath", ""))) if ref else None
        if value is None:
            log.warning("podrunner: env %s of container %s is not simulated", name, container)
            continue
        env[name] = value
    return env


def command_line(
    container: JSON, env: Mapping[str, str], mapped: Mapping[int, int], python: str = sys.executable
) -> list[str]:
    """What to exec for the container: its image's entrypoint (``ome-manager``) or its
    ``command``, then its ``args`` with ``$(VAR)`` expanded and bind addresses rewritten.
    Nothing is added: the webhook is reached through its Service, at a loopback ClusterIP
    the provider's kube-proxy stand-in serves (`ome_sim.gke.serviceproxy`)."""
    command = [expand(str(a), env) for a in container.get("command") or []]
    args = rewrite_args([expand(str(a), env) for a in container.get("args") or []], mapped)
    manager = not command or command[0] in MANAGER_ENTRYPOINTS
    if manager:
        head = [python, "-m", "ome.entrypoints.manager", *command[1:]]
        return [*head, *args]
    return [*command, *args]


@dataclass(frozen=True)
class Probe:
    url: str
    initial_delay: float
    period: float
    timeout: float
    failure_threshold: int
    success_threshold: int


def probe_of(probe: JSON | None, container: JSON, mapped: Mapping[int, int]) -> Probe | None:
    """An httpGet probe against the mapped port; None without one (or another kind)."""
    get = (probe or {}).get("httpGet")
    if not probe or not get:
        return None
    port: Any = get.get("port")
    if isinstance(port, str) and not port.isdigit():
        named = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
        port = named.get(port)
    if port is None or int(port) not in mapped:
        return None
    scheme = str(get.get("scheme") or "HTTP").lower()
    path = str(get.get("path") or "/")
    path = path if path.startswith("/") else "/" + path
    return Probe(
        url=f"{scheme}://127.0.0.1:{mapped[int(port)]}{path}",
        initial_delay=float(probe.get("initialDelaySeconds") or 0),
        period=float(probe.get("periodSeconds") or 10),
        timeout=float(probe.get("timeoutSeconds") or 1),
        failure_threshold=int(probe.get("failureThreshold") or 3),
        success_threshold=int(probe.get("successThreshold") or 1),
    )


def probe_ok(probe: Probe) -> bool:
    """An HTTP answer from 200 to 399 passes, as the kubelet's httpGet probe."""
    context = ssl._create_unverified_context()
    try:
        with urllib.request.urlopen(probe.url, timeout=probe.timeout, context=context) as r:
            return 200 <= int(r.status) < 400
    except urllib.error.HTTPError as e:
        return 200 <= e.code < 400
    except (OSError, ValueError):
        return False


def should_restart(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def exit_code_of(returncode: int) -> int:
    """Popen's ``-9`` is a container's 137 (128 + the signal)."""
    return 128 - returncode if returncode < 0 else returncode


def grace_seconds(pod: JSON) -> float:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    grace = meta.get("deletionGracePeriodSeconds")
    if grace is None:
        grace = spec.get("terminationGracePeriodSeconds", 30)
    return max(0.0, min(float(grace), MAX_GRACE))


def token_kubeconfig(server: str, ca_pem: bytes | None, token: str, namespace: str) -> JSON:
    cluster: JSON = {"server": server}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    else:
        cluster["insecure-skip-tls-verify"] = True
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sim", "cluster": cluster}],
        "users": [{"name": "pod", "user": {"token": token}}],
        "contexts": [
            {"name": "sim", "context": {"cluster": "sim", "user": "pod", "namespace": namespace}}
        ],
        "current-context": "sim",
    }


# -- the runtime ---------------------------------------------------------------------------


@dataclass
class _Container:
    name: str
    spec: JSON
    restart_count: int = 0
    proc: subprocess.Popen[bytes] | None = None
    started_at: str = ""
    started_mono: float = 0.0
    last_terminated: JSON | None = None
    terminated: JSON | None = None  # final: exited and not to be restarted
    restart_at: float = 0.0
    backoff_delay: float = 0.0
    backoff: CrashLoopBackoff = field(default_factory=CrashLoopBackoff)
    ready: bool = False
    ready_streak: int = 0
    not_ready_streak: int = 0
    live_failures: int = 0
    next_ready: float = 0.0
    next_live: float = 0.0
    readiness: Probe | None = None
    liveness: Probe | None = None
    killed_by_probe: bool = False
    kill_at: float = 0.0  # a liveness kill: SIGKILL then

    def status(self, pod: JSON) -> JSON:
        meta = pod["metadata"]
        out: JSON = {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": f"sim://{self.spec.get('image', '')}",
            "restartCount": self.restart_count,
            "ready": False,
            "started": False,
            "lastState": {"terminated": self.last_terminated} if self.last_terminated else {},
        }
        if self.proc is not None:
            out["containerID"] = f"containerd://sim-{self.proc.pid}"
        if self.terminated is not None:
            out["state"] = {"terminated": self.terminated}
        elif self.proc is not None and self.proc.returncode is None:
            out.update(
                ready=self.ready,
                started=True,
                state={"running": {"startedAt": self.started_at}},
            )
        elif self.last_terminated is not None:
            out["state"] = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {self.backoff_delay:.0f}s restarting failed "
                    f"container={self.name} pod={meta['name']}_{meta['namespace']}"
                    f"({meta.get('uid', '')})",
                }
            }
        else:
            out["state"] = {"waiting": {"reason": "ContainerCreating"}}
        return out


@dataclass
class _Pod:
    uid: str
    key: str
    pod: JSON
    containers: dict[str, _Container]
    ports: dict[int, int] = field(default_factory=dict)
    annotated: dict[str, str] = field(default_factory=dict)
    deleting: bool = False
    kill_at: float = 0.0
    gone: bool = False
    next_attempt: float = 0.0

    def running(self) -> list[subprocess.Popen[bytes]]:
        return [
            c.proc for c in self.containers.values() if c.proc is not None and c.proc.poll() is None
        ]


class PodRunner:
    """Runs the pods of ``images``. The provider calls ``sync`` for each such pod it sees,
    ``terminate`` for a deleted one (until it says the processes are gone) and ``gone`` for
    a pod that vanished; ``statuses`` gives what to report. ``notify(pod key)`` is called
    (from the runner's thread) whenever a pod's status changes."""

    def __init__(
        self,
        rest: Rest,
        logs: LogStore,
        images: Iterable[str],
        notify: Callable[[str], None],
        work_dir: Path,
    ) -> None:
        self.rest = rest
        self.logs = logs
        self.images = tuple(images)
        self.notify = notify
        self.work_dir = work_dir
        cfg = rest.api_client.configuration
        self.server = str(cfg.host)
        ca_file = getattr(cfg, "ssl_ca_cert", None)
        self.ca_pem = Path(ca_file).read_bytes() if ca_file else None
        self._pods: dict[str, _Pod] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- called by the provider ----------------------------------------------------------

    def matches(self, pod: JSON) -> bool:
        return bool(containers_to_run(pod, self.images))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="gke-podrunner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL after their grace) and the thread."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(MAX_GRACE + 10)

    def sync(self, pod: JSON, key: str) -> None:
        meta = pod["metadata"]
        uid = str(meta["uid"])
        with self._lock:
            entry = self._pods.get(uid)
            if entry is None:
                specs = {
                    str(c.get("name", "")): c
                    for c in (pod.get("spec") or {}).get("containers") or []
                }
                names = containers_to_run(pod, self.images)
                entry = _Pod(uid, key, pod, {n: _Container(n, specs[n]) for n in names})
                self._pods[uid] = entry
                self.logs.register(str(meta["namespace"]), str(meta["name"]), uid)
            else:
                entry.pod = pod
            if meta.get("deletionTimestamp"):
                entry.deleting = True
        self._wake.set()

    def terminate(self, pod: JSON, key: str) -> bool:
        """The pod is being deleted: stop its processes. True once none runs."""
        self.sync(pod, key)
        with self._lock:
            entry = self._pods[str(pod["metadata"]["uid"])]
            return entry.kill_at > 0 and not entry.running()

    def gone(self, uid: str) -> None:
        with self._lock:
            entry = self._pods.get(uid)
            if entry is not None:
                entry.deleting = entry.gone = True
        self._wake.set()

    def statuses(self, uid: str) -> tuple[dict[str, JSON], str] | None:
        """containerStatuses by container name and the pod's phase; None if unknown."""
        with self._lock:
            entry = self._pods.get(uid)
            if entry is None:
                return None
            runs = {n: c.status(entry.pod) for n, c in entry.containers.items()}
            if all(c.terminated is not None for c in entry.containers.values()):
                failed = any(
                    c.terminated and c.terminated["exitCode"] for c in entry.containers.values()
                )
                phase = "Failed" if failed else "Succeeded"
            elif all(c.proc is None for c in entry.containers.values()):
                phase = "Pending"
            else:
                phase = "Running"
            return runs, phase

    def pids(self) -> dict[str, dict[str, int]]:
        """Running processes, by pod key and container (for tests and logs)."""
        with self._lock:
            return {
                e.key: {
                    n: c.proc.pid
                    for n, c in e.containers.items()
                    if c.proc is not None and c.proc.poll() is None
                }
                for e in self._pods.values()
            }

    # -- the runner's thread ---------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(TICK)
            self._wake.clear()
            with self._lock:
                entries = list(self._pods.values())
            for entry in entries:
                try:
                    self._step(entry)
                except Exception:
                    log.exception("podrunner: pod %s", entry.key)
        self._stop_all()

    def _stop_all(self) -> None:
        with self._lock:
            entries = list(self._pods.values())
        procs = [p for e in entries for p in e.running()]
        for p in procs:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + min(
            (grace_seconds(e.pod) for e in entries), default=MAX_GRACE
        )
        for p in procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for e in entries:
            for c in e.containers.values():
                self.logs.end_run(e.uid, c.name)

    def _step(self, entry: _Pod) -> None:
        changed = False
        now = time.monotonic()
        for c in entry.containers.values():
            if c.proc is not None and c.proc.returncode is None and c.proc.poll() is not None:
                self._exited(entry, c, now)
                changed = True
        if entry.deleting:
            changed |= self._stopping(entry, now)
            if entry.gone and not entry.running():
                with self._lock:
                    self._pods.pop(entry.uid, None)
                self.logs.forget(entry.uid)
                return
        else:
            for c in entry.containers.values():
                if c.terminated is not None:
                    continue
                if c.proc is None or c.proc.returncode is not None:
                    if now >= c.restart_at and now >= entry.next_attempt:
                        changed |= self._start(entry, c)
                elif c.kill_at and now >= c.kill_at:
                    c.proc.kill()
                elif not c.kill_at:
                    changed |= self._probe(entry, c, now)
        if changed:
            self.notify(entry.key)

    def _stopping(self, entry: _Pod, now: float) -> bool:
        running = entry.running()
        if entry.kill_at == 0:
            entry.kill_at = now + grace_seconds(entry.pod)
            for p in running:
                p.send_signal(signal.SIGTERM)
            return not running
        if running and now >= entry.kill_at:
            for p in running:
                p.kill()
        return False

    def _exited(self, entry: _Pod, c: _Container, now: float) -> None:
        assert c.proc is not None
        code = exit_code_of(int(c.proc.returncode))
        self.logs.end_run(entry.uid, c.name)
        finished = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": c.started_at,
            "finishedAt": now_rfc3339(),
            "containerID": f"containerd://sim-{c.proc.pid}",
        }
        c.ready, c.ready_streak, c.not_ready_streak, c.live_failures = False, 0, 0, 0
        policy = str((entry.pod.get("spec") or {}).get("restartPolicy") or "Always")
        log.info(
            "podrunner: %s container %s exited with %d%s",
            entry.key,
            c.name,
            code,
            " (liveness probe failed)" if c.killed_by_probe else "",
        )
        c.killed_by_probe = False
        c.kill_at = 0.0
        if entry.deleting or not should_restart(policy, code):
            c.terminated = finished
            return
        c.last_terminated = finished
        c.backoff_delay = c.backoff.delay(now - c.started_mono)
        c.restart_at = now + c.backoff_delay

    def _token(self, entry: _Pod) -> str:
        meta, spec = entry.pod["metadata"], entry.pod.get("spec") or {}
        account = spec.get("serviceAccountName") or "default"
        answer = self.rest.request(
            "POST",
            f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "expirationSeconds": TOKEN_SECONDS,
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": meta["name"],
                        "uid": meta["uid"],
                    },
                },
            },
        )
        return str(answer["status"]["token"])

    def _start(self, entry: _Pod, c: _Container) -> bool:
        meta = entry.pod["metadata"]
        try:
            if not entry.ports:
                entry.ports = map_ports(entry.pod, entry.containers, free_port)
            token = self._token(entry)
        except ApiException as e:
            log.warning("podrunner: %s: cannot get a token: %s %s", entry.key, e.status, e.reason)
            entry.next_attempt = time.monotonic() + 1.0
            return False
        directory = self.work_dir / entry.uid
        directory.mkdir(parents=True, exist_ok=True)
        kubeconfig = directory / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(token_kubeconfig(self.server, self.ca_pem, token, meta["namespace"]))
        )
        kubeconfig.chmod(0o600)
        env = resolve_env(c.spec, entry.pod)
        argv = command_line(c.spec, env, entry.ports)
        path = self.logs.new_run(entry.uid, c.name)
        child_env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG",)}
        child_env.update(env)
        child_env.update(KUBECONFIG=str(kubeconfig), PYTHONUNBUFFERED="1")
        with path.open("ab") as out:
            c.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_env,
                cwd=directory,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - only a C call, between fork and exec
            )
        if c.started_at:
            c.restart_count += 1
        c.started_at, c.started_mono = now_rfc3339(), time.monotonic()
        c.readiness = probe_of(c.spec.get("readinessProbe"), c.spec, entry.ports)
        c.liveness = probe_of(c.spec.get("livenessProbe"), c.spec, entry.ports)
        c.ready = c.readiness is None
        c.next_ready = c.started_mono + (c.readiness.initial_delay if c.readiness else 0)
        c.next_live = c.started_mono + (c.liveness.initial_delay if c.liveness else 0)
        log.info("podrunner: %s container %s started: pid %d", entry.key, c.name, c.proc.pid)
        self._annotate(entry)
        return True

    def _annotate(self, entry: _Pod) -> None:
        pids = {n: c.proc.pid for n, c in entry.containers.items() if c.proc is not None}
        want = {
            PORTS_ANNOTATION: json.dumps({str(k): v for k, v in sorted(entry.ports.items())}),
            PID_ANNOTATION: json.dumps(pids),
        }
        if want == entry.annotated:
            return
        meta = entry.pod["metadata"]
        try:
            self.rest.patch(
                PODS, meta["name"], {"metadata": {"annotations": want}}, namespace=meta["namespace"]
            )
            entry.annotated = want
        except ApiException as e:
            log.info("podrunner: %s: annotating failed: %s %s", entry.key, e.status, e.reason)

    def _probe(self, entry: _Pod, c: _Container, now: float) -> bool:
        changed = False
        if c.readiness is not None and now >= c.next_ready:
            c.next_ready = now + min(c.readiness.period, READINESS_PERIOD)
            if probe_ok(c.readiness):
                c.ready_streak, c.not_ready_streak = c.ready_streak + 1, 0
                if not c.ready and c.ready_streak >= c.readiness.success_threshold:
                    c.ready = changed = True
            else:
                c.ready_streak, c.not_ready_streak = 0, c.not_ready_streak + 1
                if c.ready and c.not_ready_streak >= c.readiness.failure_threshold:
                    c.ready, changed = False, True
        if c.liveness is not None and now >= c.next_live and c.proc is not None:
            c.next_live = now + c.liveness.period
            if probe_ok(c.liveness):
                c.live_failures = 0
            else:
                c.live_failures += 1
                if c.live_failures >= c.liveness.failure_threshold:
                    log.info("podrunner: %s container %s failed liveness", entry.key, c.name)
                    c.killed_by_probe = True
                    c.live_failures = 0
                    c.kill_at = now + grace_seconds(entry.pod)
                    c.proc.send_signal(signal.SIGTERM)
        return changed


__all__ = [
    "PID_ANNOTATION",
    "PORTS_ANNOTATION",
    "PodRunner",
    "command_line",
    "containers_to_run",
    "expand",
    "field_value",
    "image_repository",
    "map_ports",
    "probe_of",
    "resolve_env",
    "rewrite_args",
]

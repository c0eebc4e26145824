"""A real Kubernetes node on this machine, for ``ome-sim run --control-plane kube --node real``
(and so ``make e2e-kube``): containerd 2 with runc, the kubelet, CNI (Debian's bridge,
host-local and portmap plugins) and kube-proxy in iptables mode, all built or installed by
hack/node-binaries.sh and hack/container-tools.sh, joined to the `ControlPlane`.

The manager's pod runs there as a cluster runs it: its image (``make image``) is imported
into containerd beside the sandbox (pause) image, since nothing can be pulled here; the
kubelet starts it with the chart's securityContext, volumes, probes and restarts; kube-proxy
serves its Services, so kube-apiserver reaches the webhook through the webhook Service, and
the manager reaches kube-apiserver through the ``kubernetes`` Service. The TPU nodes stay the
provider's simulated ones.

What it needs of the machine (`RealNode.start` says which is missing, in one line): root;
cgroups v1 or v2 (v1 is accepted with the kubelet's ``failCgroupV1: false``); runc, the CNI
plugins, iptables and conntrack; the node binaries; a container tool (podman) to hand the
images to containerd. It changes the machine while it runs, and undoes it on `stop`: the
``cni0`` bridge, the KUBE-*/CNI-* iptables rules, ``net.ipv4.ip_forward``, the kubelet's
``kubepods`` cgroups, and mounts under its directory. One real node runs on a machine at a
time (a lock file says so).

Notes on this machine's limits (no CAP_SYS_RESOURCE): the kubelet and kube-proxy keep their
own oom_score_adj (``oomScoreAdj: 0``), containerd never asks for a score below its own
(``restrict_oom_score_adj``), and kube-proxy leaves the conntrack sysctls alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from . import containers, system
from .controlplane import (
    Component,
    ControlPlane,
    ControlPlaneError,
    Pem,
    free_port,
    kubeconfig,
    write_kubeconfig,
)

ROOT = Path(__file__).resolve().parents[2]
NODE_NAME = "ome-system-node"
#: The pods' addresses (one node: one /24) and what kube-proxy treats as in-cluster.
POD_CIDR = "10.244.0.0/24"
CLUSTER_CIDR = "10.244.0.0/16"
BRIDGE = "cni0"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"
CNI_DIR = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "portmap", "loopback")
LOCK = Path("/run/ome-sim-real-node.lock")


class NodeError(RuntimeError):
    """The real node could not start: one line saying why."""


def binaries_dir() -> Path:
    return Path(containers.hack("node-binaries.sh", "--dir"))


def build_binaries(progress: Callable[[str], None]) -> Path:
    """hack/node-binaries.sh: a no-op when built, else a build whose progress lines go to the
    console (about 2 minutes after hack/kube-binaries.sh, 5 from nothing)."""
    script = ROOT / "hack" / "node-binaries.sh"
    if subprocess.run(["bash", str(script), "--check"], check=False).returncode != 0:
        progress("building the node binaries (hack/node-binaries.sh; once per machine)")
        proc = subprocess.run(["bash", str(script)], check=False, stdout=subprocess.PIPE)
        if proc.returncode != 0:
            raise NodeError(f"hack/node-binaries.sh failed (exit code {proc.returncode})")
    return binaries_dir()


def host_ip() -> str:
    """The machine's primary IPv4 address (the source of its default route): the address
    kube-apiserver advertises and the pods reach it at."""
    proc = subprocess.run(
        ["ip", "-4", "route", "get", "1.1.1.1"], capture_output=True, text=True, check=False
    )
    match = re.search(r"\bsrc (\d+\.\d+\.\d+\.\d+)", proc.stdout)
    if match:
        return match.group(1)
    proc = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"],
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", proc.stdout)
    if not match:
        raise NodeError("this machine has no global IPv4 address for the node and its pods")
    return match.group(1)


def missing_prerequisites() -> list[str]:
    """What this machine lacks for a real node, each as a short phrase (empty: nothing)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (the kubelet, containerd and kube-proxy need it)")
    for tool in ("runc", "iptables", "iptables-save", "iptables-restore", "conntrack", "ip"):
        if not shutil.which(tool) and not Path("/usr/sbin", tool).exists():
            missing.append(tool)
    for plugin in CNI_PLUGINS:
        if not (CNI_DIR / plugin).exists():
            missing.append(f"{CNI_DIR / plugin} (Debian: containernetworking-plugins)")
    return missing


def _quiet(*cmd: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """A best-effort command (a teardown step, a probe): its failure is not an error."""
    return subprocess.run(cmd, check=False, capture_output=True, text=True, **kwargs)


def _which(tool: str) -> str:
    found = shutil.which(tool) or str(Path("/usr/sbin", tool))
    return found


@dataclass
class RealNode:
    """containerd, the kubelet and kube-proxy, joined to ``plane`` as node `NODE_NAME`.

    ``start`` returns once the Node is Ready; ``images`` (the container tool's names) are in
    containerd by then. ``stop`` undoes everything and is safe to call twice."""

    plane: ControlPlane
    log_dir: Path
    images: tuple[str, ...] = ()
    progress: Callable[[str], None] = lambda _m: None
    name: str = NODE_NAME
    binaries: Path | None = None
    work: Path | None = None
    ports: dict[str, int] = field(default_factory=dict)
    processes: list[Component] = field(default_factory=list)
    _lock: IO[str] | None = None
    _ip_forward: str | None = None

    # -- lifecycle --

    def start(self, timeout: float = 180.0) -> None:
        missing = missing_prerequisites()
        if missing:
            raise NodeError(f"a real node needs {', '.join(missing)}")
        if not self.plane.node_ip:
            raise ControlPlaneError("the control plane was not started for a real node (node_ip)")
        self._take_lock()
        try:
            deadline = time.monotonic() + timeout
            self.binaries = self.binaries or build_binaries(self.progress)
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self.work = Path(tempfile.mkdtemp(prefix="ome-node-"))
            self._network()
            self._certificates()
            self._containerd(deadline)
            self._import_images()
            self._kubelet()
            self._kube_proxy()
            self._wait_ready(deadline)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop kube-proxy and the kubelet, remove the pods' sandboxes while containerd
        still runs, stop containerd, then undo what was changed on the machine."""
        by_name = {p.name: p for p in self.processes}
        for name in ("kube-proxy", "kubelet"):
            if name in by_name:
                by_name[name].stop()
        if "containerd" in by_name and by_name["containerd"].proc.poll() is None:
            crictl = self._crictl()
            for pod in _quiet(*crictl, "pods", "-q").stdout.split():
                _quiet(*crictl, "stopp", pod, timeout=60)
                _quiet(*crictl, "rmp", "-f", pod, timeout=60)
            by_name["containerd"].stop()
        for process in self.processes:
            process.stop()
        self.processes.clear()
        if self.work is not None:
            self._unmount(self.work)
            _quiet("ip", "link", "del", BRIDGE)
            self._remove_iptables_rules()
            for hierarchy in Path("/sys/fs/cgroup").glob("*/kubepods"):
                # Deepest first; a cgroup still in use stays (rmdir refuses it).
                for d in sorted(hierarchy.rglob("*"), key=lambda p: -len(p.parts)):
                    if d.is_dir():
                        with contextlib.suppress(OSError):
                            d.rmdir()
                with contextlib.suppress(OSError):
                    hierarchy.rmdir()
            shutil.rmtree(self.work, ignore_errors=True)
            self.work = None
        if self._ip_forward is not None:
            Path("/proc/sys/net/ipv4/ip_forward").write_text(self._ip_forward)
            self._ip_forward = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def check(self) -> None:
        """Raise `ControlPlaneError` if a component has exited."""
        for process in self.processes:
            process.check()

    # -- for tests and tools --

    @property
    def containerd_socket(self) -> Path:
        assert self.work is not None
        return self.work / "containerd" / "containerd.sock"

    def _crictl(self) -> list[str]:
        assert self.binaries is not None
        endpoint = f"unix://{self.containerd_socket}"
        return [str(self.binaries / "crictl"), "-r", endpoint, "-i", endpoint]

    def describe(self) -> dict[str, Any]:
        """What a test needs to look at the node from the host (written as node.json)."""
        return {
            "name": self.name,
            "ip": self.plane.node_ip,
            "crictl": self._crictl(),
            "containerd_socket": str(self.containerd_socket),
            "logs": str(self.log_dir),
        }

    # -- steps --

    def _take_lock(self) -> None:
        LOCK.parent.mkdir(parents=True, exist_ok=True)
        handle = LOCK.open("w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise NodeError(
                f"another real node runs on this machine ({LOCK} is locked): one at a time"
            ) from None
        self._lock = handle

    def _network(self) -> None:
        self.progress(f"node network: pods on {POD_CIDR} (bridge {BRIDGE}), IP forwarding on")
        forward = Path("/proc/sys/net/ipv4/ip_forward")
        self._ip_forward = forward.read_text().strip()
        forward.write_text("1")
        if shutil.which("modprobe"):
            _quiet("modprobe", "br_netfilter")
        nf = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
        if nf.exists():
            nf.write_text("1")
        assert self.work is not None
        conf = self.work / "cni" / "net.d"
        conf.mkdir(parents=True)
        gateway = POD_CIDR.rsplit(".", 1)[0] + ".1"
        (conf / "10-ome.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "ome",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": BRIDGE,
                            "isGateway": True,
                            "ipMasq": True,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": POD_CIDR, "gateway": gateway}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(self.work / "cni" / "ipam"),
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                    ],
                },
                indent=2,
            )
        )

    def _pki(self, name: str, pem: Pem) -> tuple[Path, Path]:
        assert self.work is not None
        pki = self.work / "pki"
        pki.mkdir(exist_ok=True)
        cert, key = pki / f"{name}.crt", pki / f"{name}.key"
        cert.write_bytes(pem.cert)
        key.write_bytes(pem.key)
        key.chmod(0o600)
        return cert, key

    def _certificates(self) -> None:
        assert self.plane.ca is not None and self.work is not None
        ca = self.plane.ca
        (self.work / "pki").mkdir(exist_ok=True)
        (self.work / "pki" / "ca.crt").write_bytes(ca.pem.cert)
        node_user = f"system:node:{self.name}"
        kubelet = ca.issue(node_user, groups=("system:nodes",))
        write_kubeconfig(
            self.work / "kubelet.kubeconfig",
            kubeconfig(self.plane.node_url, ca.pem.cert, node_user, cert=kubelet),
        )
        serving = ca.issue(
            node_user,
            groups=("system:nodes",),
            dns=(self.name,),
            ips=(self.plane.node_ip, "127.0.0.1"),
        )
        self._pki("kubelet-serving", serving)
        proxy = ca.issue("system:kube-proxy")
        write_kubeconfig(
            self.work / "kube-proxy.kubeconfig",
            kubeconfig(self.plane.node_url, ca.pem.cert, "system:kube-proxy", cert=proxy),
        )

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Component:
        """As the control plane spawns its components: a log each, and they die with us. Each
        in a process group of its own, so that a terminal's Ctrl-C reaches ome-sim alone:
        ``stop`` needs containerd running to remove the pods' sandboxes, and containerd
        given the same SIGINT would exit first and leave their shims behind."""
        log = self.log_dir / f"{name}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                preexec_fn=system.die_with_parent,  # noqa: PLW1509 - only a C call
                process_group=0,
            )
        process = Component(name, proc, log)
        self.processes.append(process)
        return process

    def _containerd(self, deadline: float) -> None:
        assert self.work is not None and self.binaries is not None
        base = self.work / "containerd"
        base.mkdir()
        config = base / "config.toml"
        config.write_text(
            f"""version = 3
root = "{base / "root"}"
state = "{base / "state"}"

[grpc]
  address = "{self.containerd_socket}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{_which("runc")}"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{CNI_DIR}"]
    conf_dir = "{self.work / "cni" / "net.d"}"
    max_conf_num = 1
"""
        )
        self.progress("starting containerd (runc, CNI bridge)")
        process = self._spawn(
            "containerd",
            [str(self.binaries / "containerd"), "--config", str(config)],
            # containerd finds containerd-shim-runc-v2 on its PATH.
            env={"PATH": f"{self.binaries}:{os.environ.get('PATH', '')}"},
        )
        while True:
            version = subprocess.run(
                [*self._ctr(), "version"], capture_output=True, text=True, check=False
            )
            if version.returncode == 0:
                return
            process.check()
            if time.monotonic() > deadline:
                raise NodeError(f"containerd did not answer in time:\n{process.tail()}")
            time.sleep(0.2)

    def _ctr(self) -> list[str]:
        assert self.binaries is not None
        return [str(self.binaries / "ctr"), "--address", str(self.containerd_socket)]

    def _pause_image(self) -> None:
        """The sandbox image, made from the pause binary (nothing can be pulled), once per
        machine: the container tool keeps it."""
        assert self.binaries is not None
        if containers.inspect(PAUSE_IMAGE):
            return
        self.progress(f"building the sandbox image {PAUSE_IMAGE} from the pause binary")
        with tempfile.TemporaryDirectory() as context:
            shutil.copy(self.binaries / "pause", Path(context) / "pause")
            (Path(context) / "Containerfile").write_text(
                'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'
            )
            proc = subprocess.run(
                [*containers.tool(), "build", "-q", "-t", PAUSE_IMAGE, context],
                capture_output=True,
                text=True,
                check=False,
            )
        if proc.returncode != 0:
            raise NodeError(f"building {PAUSE_IMAGE} failed: {proc.stderr.strip()}")

    def _import_images(self) -> None:
        self._pause_image()
        assert self.work is not None
        for image in (PAUSE_IMAGE, *self.images):
            if not containers.inspect(image):
                raise NodeError(f"the container tool has no image {image} (make image builds it)")
            self.progress(f"importing {image} into containerd")
            archive = self.work / "image.tar"
            save = _quiet(
                *containers.tool(), "save", "-q", "--format", "docker-archive", "-o",
                str(archive), image,
            )  # fmt: skip
            if save.returncode != 0:
                raise NodeError(f"saving {image} failed: {save.stderr.strip()}")
            load = _quiet(
                *self._ctr(), "-n", "k8s.io", "images", "import", "--all-platforms", str(archive)
            )
            archive.unlink()
            if load.returncode != 0:
                raise NodeError(f"importing {image} into containerd failed: {load.stderr.strip()}")

    def _kubelet(self) -> None:
        assert self.work is not None and self.binaries is not None
        self.ports["kubelet"] = port = free_port()
        pki = self.work / "pki"
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # Kubernetes 1.35 and later refuse a cgroup v1 host unless told not to.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "address": self.plane.node_ip,
            "port": port,
            "readOnlyPort": 0,
            "healthzPort": 0,
            "tlsCertFile": str(pki / "kubelet-serving.crt"),
            "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "clusterDomain": "cluster.local",
            "resolvConf": "/etc/resolv.conf",
            "podLogsDir": str(self.work / "pod-logs"),
            "registerNode": True,
            # No CAP_SYS_RESOURCE here: the kubelet keeps its own oom_score_adj.
            "oomScoreAdj": 0,
            "protectKernelDefaults": False,
            "makeIPTablesUtilChains": True,
            "serializeImagePulls": False,
            # Never garbage-collect the imported images (they cannot be pulled again), and
            # never evict the manager for a full disk on a shared test machine.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
        }
        path = self.work / "kubelet-config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.progress(f"starting the kubelet (node {self.name}, {self.plane.node_ip}:{port})")
        self._spawn(
            "kubelet",
            [
                str(self.binaries / "kubelet"),
                f"--config={path}",
                f"--kubeconfig={self.work / 'kubelet.kubeconfig'}",
                f"--root-dir={self.work / 'kubelet'}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.plane.node_ip}",
                "--v=2",
            ],
        )

    def _kube_proxy(self) -> None:
        assert self.work is not None and self.binaries is not None
        self.ports["kube-proxy-healthz"] = healthz = free_port()
        self.ports["kube-proxy-metrics"] = metrics = free_port()
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(self.work / "kube-proxy.kubeconfig")},
            "clusterCIDR": CLUSTER_CIDR,
            "hostnameOverride": self.name,
            "bindAddress": "0.0.0.0",
            "oomScoreAdj": 0,
            "nodePortAddresses": ["primary"],
            "healthzBindAddress": f"127.0.0.1:{healthz}",
            "metricsBindAddress": f"127.0.0.1:{metrics}",
            # Leave the machine's conntrack sysctls alone (they need CAP_SYS_RESOURCE
            # or would change the host for every other program).
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
        }
        path = self.work / "kube-proxy-config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.progress("starting kube-proxy (iptables)")
        self._spawn("kube-proxy", [str(self.binaries / "kube-proxy"), f"--config={path}", "--v=2"])

    def _wait_ready(self, deadline: float) -> None:
        self.progress(f"waiting for node {self.name} to be Ready")
        context = self.plane.admin_context()
        url = f"{self.plane.url}/api/v1/nodes/{self.name}"
        while True:
            self.check()
            try:
                with urllib.request.urlopen(url, context=context, timeout=5) as resp:
                    node = json.load(resp)
                conditions = (node.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                    self.progress(f"node {self.name} is Ready")
                    return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                kubelet = next(p for p in self.processes if p.name == "kubelet")
                raise NodeError(f"node {self.name} was not Ready in time; the kubelet's log "
                                f"({kubelet.log}) ends:\n{kubelet.tail()}")  # fmt: skip
            time.sleep(0.5)

    # -- undo --

    @staticmethod
    def _unmount(under: Path) -> None:
        prefix = str(under).rstrip("/") + "/"
        try:
            mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        except OSError:
            return
        for mount in sorted((m for m in mounts if m.startswith(prefix)), reverse=True):
            _quiet("umount", "-l", mount)

    @staticmethod
    def _remove_iptables_rules() -> None:
        """The KUBE-* and CNI-* chains and rules kube-proxy, the kubelet and the CNI
        plugins made (kube-proxy's own ``--cleanup`` leaves the kubelet's and CNI's)."""
        for table in ("nat", "filter", "mangle"):
            saved = _quiet("iptables-save", "-t", table).stdout
            ours = re.compile(r"KUBE-|CNI-")
            if not ours.search(saved):
                continue
            kept = [line for line in saved.splitlines() if not ours.search(line)]
            _quiet("iptables-restore", input="\n".join(kept) + "\n")


__all__ = ["NODE_NAME", "NodeError", "RealNode", "host_ip", "missing_prerequisites"]

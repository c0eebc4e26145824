"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and
kube-controller-manager, built from their Go modules by ``hack/kube-binaries.sh``.

What controller-runtime's envtest runs (etcd and kube-apiserver, no kubelet), plus
kube-controller-manager for garbage collection, namespace deletion, Deployments,
ReplicaSets, EndpointSlices and ServiceAccount tokens. The simulated GKE provider plays the
nodes, the kubelet and the scheduler against it, as it does against the embedded server.

Everything is chosen at run time: the ports (free ones on 127.0.0.1), the certificates (a
fresh cluster CA; serving, service-account signing and one client certificate per identity)
and a data directory (etcd's data and the certificates), which `ControlPlane.stop` removes.
Each component's log goes to ``<log_dir>/<component>.log``, which is kept.

Written by hand rather than taken from a library: envtest is Go-only, and what it does (pick
ports, write certificates, start three processes and wait for each to be healthy) is a page
of Python with ``cryptography`` and ``subprocess``.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ome.runtime.certs import generate_ca

from . import system

# The versions hack/kube-binaries.sh builds; a test keeps the two in step.
KUBE_VERSION = "v1.37.2"
ETCD_VERSION = "v3.7.3"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager")
#: Services get loopback ClusterIPs (127.1.x.y), so that the provider's kube-proxy stand-in
#: (`ome_sim.gke.serviceproxy`) can listen on them: kube-apiserver then reaches a webhook
#: Service at its ClusterIP, as in a cluster. (kube-apiserver accepts a loopback range;
#: Endpoints and EndpointSlices, which would be the other route, refuse loopback addresses.)
SERVICE_CIDR = "127.1.0.0/16"
#: With a real node (`ome_sim.node`): real kube-proxy serves Services at ordinary ClusterIPs,
#: and pods reach kube-apiserver through the ``kubernetes`` Service at the first of them.
REAL_NODE_SERVICE_CIDR = "10.96.0.0/16"
ADMIN_USER = "ome-sim-admin"


def binaries_dir() -> Path:
    """Where hack/kube-binaries.sh puts the binaries (``$OME_KUBE_BINARIES`` overrides it)."""
    given = os.environ.get("OME_KUBE_BINARIES")
    if given:
        return Path(given)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "ome-tpu-slices" / "kube" / KUBE_VERSION


def missing_binaries(directory: Path) -> list[str]:
    return [b for b in COMPONENTS if not os.access(directory / b, os.X_OK)]


class ControlPlaneError(RuntimeError):
    """The control plane could not start; the message says which component and why."""


# --- certificates -----------------------------------------------------------------------


@dataclass(frozen=True)
class Pem:
    cert: bytes
    key: bytes


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, groups: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


class Authority:
    """The cluster CA (`ome.runtime.certs.generate_ca`'s, for a week): it signs the
    apiserver's serving certificate and every client certificate, which may carry groups
    (``O=system:masters``), and kube-apiserver's ``--client-ca-file`` trusts it."""

    def __init__(self, common_name: str = "ome-sim-kube-ca") -> None:
        ca = generate_ca(common_name, valid_for=timedelta(days=7))
        key = serialization.load_pem_private_key(ca.key_pem, password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        self._key = key
        self._name = x509.load_pem_x509_certificate(ca.cert_pem).subject
        self.pem = Pem(ca.cert_pem, ca.key_pem)

    def issue(
        self,
        common_name: str,
        groups: tuple[str, ...] = (),
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
    ) -> Pem:
        """A client certificate (``dns``/``ips`` empty) or a serving one."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.now(UTC)
        serving = bool(dns or ips)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, groups))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                    if serving
                    else [ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if serving:
            sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
            sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return Pem(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def kubeconfig(
    server: str,
    ca: bytes,
    user: str,
    cert: Pem | None = None,
    token: str | None = None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """A kubeconfig with one cluster, one user (a client certificate or a bearer token) and
    one current context, everything inline."""
    creds: dict[str, str] = {}
    if cert is not None:
        creds["client-certificate-data"] = base64.b64encode(cert.cert).decode()
        creds["client-key-data"] = base64.b64encode(cert.key).decode()
    if token is not None:
        creds["token"] = token
    context: dict[str, str] = {"cluster": "ome-sim-kube", "user": user}
    if namespace:
        context["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "ome-sim-kube",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": "ome-sim-kube", "context": context}],
        "current-context": "ome-sim-kube",
    }


def write_kubeconfig(path: Path, config: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path


# --- processes ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Component:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 8) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n  ".join(text[-lines:]) or "(no output)"

    def check(self) -> None:
        code = self.proc.poll()
        if code is not None:
            raise ControlPlaneError(
                f"{self.name} {system.describe_exit(code)}; the end of {self.log}:\n  {self.tail()}"
            )

    def stop(self, timeout: float = 20.0) -> None:
        system.terminate(self.proc, timeout)


@dataclass
class ControlPlane:
    """etcd, kube-apiserver and kube-controller-manager on 127.0.0.1 until `stop`.

    ``start`` returns once the apiserver's ``/readyz`` and the controller manager's
    ``/healthz`` answer 200 and the ``default`` ServiceAccount exists (so pods can be
    created). ``progress`` gets a line per step."""

    log_dir: Path
    binaries: Path = field(default_factory=binaries_dir)
    progress: Callable[[str], None] = lambda _m: None
    extra_apiserver_flags: tuple[str, ...] = ()
    api_port: int = 0  # 0: a free one
    #: For a real node (`ome_sim.node.RealNode`): the machine's address that kube-apiserver
    #: also listens on and advertises (the ``kubernetes`` Service's endpoint), so that pods
    #: reach it; Services then get ordinary ClusterIPs (`REAL_NODE_SERVICE_CIDR`) that
    #: kube-proxy serves. Empty: loopback only, for the provider's stand-ins.
    node_ip: str = ""
    data_dir: Path | None = None
    url: str = ""
    ca: Authority | None = None
    admin: Pem | None = None
    components: list[Component] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)

    # -- lifecycle --

    def start(self, timeout: float = 120.0) -> None:
        missing = missing_binaries(self.binaries)
        if missing:
            raise ControlPlaneError(
                f"{', '.join(missing)} not built in {self.binaries}: run hack/kube-binaries.sh"
            )
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = Path(tempfile.mkdtemp(prefix="ome-kube-"))
        try:
            self._certificates()
            deadline = time.monotonic() + timeout
            self._etcd(deadline)
            self._apiserver(deadline)
            self._controller_manager(deadline)
            self._wait_for_default_service_account(deadline)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the components in the reverse order of their start, then remove the data
        directory; safe to call twice."""
        for component in reversed(self.components):
            component.stop()
        self.components.clear()
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    @property
    def service_cidr(self) -> str:
        return REAL_NODE_SERVICE_CIDR if self.node_ip else SERVICE_CIDR

    @property
    def node_url(self) -> str:
        """kube-apiserver's URL for a node and its pods (``url`` is loopback)."""
        return self.url.replace("127.0.0.1", self.node_ip) if self.node_ip else self.url

    def admin_context(self) -> ssl.SSLContext:
        """TLS to kube-apiserver as the admin (system:masters)."""
        return self._client_context(self.admin)

    def check(self) -> None:
        """Raise `ControlPlaneError` if a component has exited."""
        for component in self.components:
            component.check()

    # -- kubeconfigs --

    def admin_kubeconfig(self) -> dict[str, Any]:
        assert self.ca is not None and self.admin is not None
        return kubeconfig(self.url, self.ca.pem.cert, ADMIN_USER, cert=self.admin)

    def write_kubeconfig(self, path: Path) -> Path:
        """The admin's kubeconfig (group system:masters)."""
        return write_kubeconfig(path, self.admin_kubeconfig())

    def token_kubeconfig(
        self, user: str, token: str, namespace: str | None = None
    ) -> dict[str, Any]:
        assert self.ca is not None
        return kubeconfig(self.url, self.ca.pem.cert, user, token=token, namespace=namespace)

    # -- steps --

    def _file(self, name: str, data: bytes) -> str:
        assert self.data_dir is not None
        path = self.data_dir / "pki" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o600)
        return str(path)

    def _certificates(self) -> None:
        self.progress("generating the cluster CA, serving, service-account and client certificates")
        self.ca = ca = Authority()
        self._file("ca.crt", ca.pem.cert)
        self._file("ca.key", ca.pem.key)
        first_service_ip = str(next(ipaddress.ip_network(self.service_cidr).hosts()))
        serving = ca.issue(
            "kube-apiserver",
            dns=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ips=("127.0.0.1", first_service_ip, *([self.node_ip] if self.node_ip else [])),
        )
        self._file("apiserver.crt", serving.cert)
        self._file("apiserver.key", serving.key)
        sa_key = ec.generate_private_key(ec.SECP256R1())
        self._file("sa.key", _key_pem(sa_key))
        self._file(
            "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
        self.admin = ca.issue(ADMIN_USER, groups=("system:masters",))
        kcm = ca.issue("system:kube-controller-manager")
        self._file("kube-controller-manager.crt", kcm.cert)
        self._file("kube-controller-manager.key", kcm.key)
        kubelet_client = ca.issue("kube-apiserver-kubelet-client", groups=("system:masters",))
        self._file("apiserver-kubelet-client.crt", kubelet_client.cert)
        self._file("apiserver-kubelet-client.key", kubelet_client.key)

    def _spawn(self, name: str, args: list[str]) -> Component:
        log = self.log_dir / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(self.binaries / name), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=system.die_with_parent,  # noqa: PLW1509 - only a C call
            )
        component = Component(name, proc, log)
        self.components.append(component)
        return component

    def _wait(
        self,
        component: Component,
        url: str,
        deadline: float,
        context: ssl.SSLContext | None = None,
    ) -> None:
        last = ""
        while True:
            component.check()
            try:
                with urllib.request.urlopen(url, timeout=5, context=context) as resp:
                    if resp.status == 200:
                        return
            except urllib.error.HTTPError as e:
                last = f"{e.code} {e.read().decode(errors='replace').strip()[-300:]}"
            except OSError as e:
                last = str(e)
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{component.name} was not healthy in time ({url}: {last}); the end of "
                    f"{component.log}:\n  {component.tail()}"
                )
            time.sleep(0.2)

    def _etcd(self, deadline: float) -> None:
        assert self.data_dir is not None
        client, peer = free_port(), free_port()
        self.ports["etcd"] = client
        self.progress(f"starting etcd {ETCD_VERSION} on 127.0.0.1:{client}")
        etcd = self._spawn(
            "etcd",
            [
                f"--data-dir={self.data_dir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait(etcd, f"http://127.0.0.1:{client}/health", deadline)

    def _client_context(self, cert: Pem | None) -> ssl.SSLContext:
        assert self.ca is not None and self.data_dir is not None
        context = ssl.create_default_context(cadata=self.ca.pem.cert.decode())
        if cert is not None:
            path = self.data_dir / "pki" / "probe.pem"
            path.write_bytes(cert.cert + cert.key)
            path.chmod(0o600)
            context.load_cert_chain(str(path))
        return context

    def _apiserver(self, deadline: float) -> None:
        assert self.data_dir is not None
        port = self.api_port or free_port()
        self.ports["kube-apiserver"] = port
        self.url = f"https://127.0.0.1:{port}"
        pki = self.data_dir / "pki"
        self.progress(f"starting kube-apiserver {KUBE_VERSION} on {self.url}")
        apiserver = self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                *self._address_flags(),
                f"--secure-port={port}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={self.service_cidr}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                "--profiling=false",
                *self.extra_apiserver_flags,
            ],
        )
        self._wait(apiserver, f"{self.url}/readyz", deadline, self._client_context(self.admin))

    def _address_flags(self) -> list[str]:
        if self.node_ip:
            # Loopback for the machine's clients, the node's address for pods (through
            # the kubernetes Service, whose endpoint it is).
            return ["--bind-address=0.0.0.0", f"--advertise-address={self.node_ip}"]
        return [
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # Endpoints may not hold a loopback address: no reconciler for the
            # kubernetes Service (nothing here dials its ClusterIP anyway).
            "--endpoint-reconciler-type=none",
        ]

    def _controller_manager(self, deadline: float) -> None:
        assert self.data_dir is not None and self.ca is not None
        pki = self.data_dir / "pki"
        kcm_cert = Pem(
            (pki / "kube-controller-manager.crt").read_bytes(),
            (pki / "kube-controller-manager.key").read_bytes(),
        )
        kcm_config = write_kubeconfig(
            self.data_dir / "kube-controller-manager.kubeconfig",
            kubeconfig(self.url, self.ca.pem.cert, "system:kube-controller-manager", cert=kcm_cert),
        )
        port = free_port()
        self.ports["kube-controller-manager"] = port
        self.progress(f"starting kube-controller-manager {KUBE_VERSION} (127.0.0.1:{port})")
        kcm = self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={kcm_config}",
                f"--authentication-kubeconfig={kcm_config}",
                f"--authorization-kubeconfig={kcm_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={pki / 'kcm'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                "--use-service-account-credentials=true",
                "--controllers=*",
                "--leader-elect=false",
                "--profiling=false",
            ],
        )
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its serving certificate is self-signed
        self._wait(kcm, f"https://127.0.0.1:{port}/healthz", deadline, insecure)

    def _wait_for_default_service_account(self, deadline: float) -> None:
        """Until the ServiceAccount controller has made ``default/default``: before it, a pod
        create fails (the ServiceAccount admission plugin)."""
        self.progress("waiting for the default ServiceAccount")
        context = self._client_context(self.admin)
        url = f"{self.url}/api/v1/namespaces/default/serviceaccounts/default"
        self._wait(self.components[-1], url, deadline, context)

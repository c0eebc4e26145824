"""OME installed as the walkthrough's Step 1 does it: ``helm upgrade --install ome
charts/ome-resources --namespace ome -f values.yaml``, then a wait for the rollout, on the
real control plane (``ome-sim run --control-plane kube``, ``--manager pod``).

The manager then runs as the Deployment's pod: the provider's kubelet stand-in starts it as
a process (``Options.run_images``) and maps its container ports to free loopback ports,
which it writes on the pod (annotation ``sim.ome.io/ports``); its kube-proxy stand-in
serves the webhook Service at its (loopback) ClusterIP, so kube-apiserver calls the webhook
as the chart configures it. `metrics_relay` gives the metrics a plain-HTTP URL that outlives
pods, scraping the manager's HTTPS metrics with a metrics-reader token.

Helm itself is hack/helm.sh's pinned binary; ``kubectl rollout status``'s rule is
`rollout_done`.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from ome.kube import Resource
from ome.runtime.rest import PODS, Rest

from . import system

JSON = dict[str, Any]

DEPLOYMENTS = Resource("apps", "v1", "deployments")
RELEASE = "ome"
DEPLOYMENT = "ome-controller-manager"
SELECTOR = "control-plane=ome-controller-manager"
PORTS_ANNOTATION = "sim.ome.io/ports"
METRICS_PORT = "8443"
#: The ServiceAccount the metrics relay scrapes as, and the chart's role it is bound to.
SCRAPER = "ome-metrics-scraper"
METRICS_READER = "ome-metrics-reader"
#: The chart's image repository: the pods the kubelet stand-in runs as processes.
MANAGER_IMAGE = "ghcr.io/moirai-internal/ome-manager"


def helm_binary(root: Path) -> str:
    """hack/helm.sh's helm (installed into the tools cache on first use)."""
    script = root / "hack" / "helm.sh"
    if not script.is_file():
        raise system.StartError(f"{script} not found: run from the repository's root")
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise system.StartError(f"{script} failed: {proc.stderr.strip()}")
    return proc.stdout.strip().splitlines()[-1]


def guide_values(root: Path, ready_timeout: str | None) -> str:
    """config/samples/values.yaml (the walkthrough's Step 1 block), with another readyTimeout."""
    path = root / "config" / "samples" / "values.yaml"
    try:
        values = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise system.StartError(f"cannot read {path}: {e}") from None
    if ready_timeout is not None:
        values["ome"]["controller"]["tpuSliceProvisioning"]["slice"]["readyTimeout"] = ready_timeout
    return str(yaml.safe_dump(values, sort_keys=False))


def upgrade_install(
    helm: str, kubeconfig: Path, root: Path, values: str, progress: Callable[[str], None]
) -> None:
    """The walkthrough's command, with the chart's path for its OCI reference."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="values-") as f:
        f.write(values)
        f.flush()
        command = [
            helm,
            "upgrade",
            "--install",
            RELEASE,
            str(root / "charts" / "ome-resources"),
            "--namespace",
            system.NAMESPACE,
            "-f",
            f.name,
        ]
        progress(
            "helm upgrade --install ome charts/ome-resources --namespace ome -f values.yaml "
            "(the walkthrough's Step 1 values)"
        )
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env={"KUBECONFIG": str(kubeconfig), "HOME": str(kubeconfig.parent), "PATH": ""},
            check=False,
        )
    if proc.returncode != 0:
        raise system.StartError(f"helm upgrade --install failed: {proc.stderr.strip()}")


def rollout_done(deployment: JSON) -> tuple[bool, str]:
    """``kubectl rollout status``'s rule for a Deployment: done, or what it waits for."""
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    generation = deployment["metadata"].get("generation", 0)
    wanted = int(spec.get("replicas", 1))
    updated = int(status.get("updatedReplicas", 0))
    replicas = int(status.get("replicas", 0))
    available = int(status.get("availableReplicas", 0))
    if int(status.get("observedGeneration", 0)) < generation:
        return False, "waiting for the deployment spec update to be observed"
    if updated < wanted:
        return False, f"{updated} out of {wanted} new replicas have been updated"
    if replicas > updated:
        return False, f"{replicas - updated} old replicas are pending termination"
    if available < updated:
        return False, f"{available} of {updated} updated replicas are available"
    return True, f'deployment "{deployment["metadata"]["name"]}" successfully rolled out'


def wait_rollout(
    rest: Rest,
    timeout: float,
    progress: Callable[[str], None],
    stop: threading.Event,
) -> None:
    """Until the manager's Deployment has rolled out (or ``stop``), saying what it waits
    for whenever that changes."""
    deadline = time.monotonic() + timeout
    last = ""
    while not stop.is_set():
        try:
            done, why = rollout_done(rest.get(DEPLOYMENTS, DEPLOYMENT, system.NAMESPACE))
        except ApiException as e:
            if e.status != 404:
                raise
            done, why = False, f"deployment {DEPLOYMENT} not created yet"
        if done:
            progress(why)
            return
        if why != last:
            progress(f"waiting for the rollout: {why}")
            last = why
        if time.monotonic() > deadline:
            raise system.StartError(
                f"the manager's rollout did not finish within {timeout:.0f}s: {why}"
            )
        stop.wait(0.2)


def ready(pod: JSON) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return not pod["metadata"].get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )


def mapped_ports(pod: JSON) -> dict[str, int]:
    """The kubelet stand-in's map of the pod's containerPorts to loopback ports."""
    raw = (pod["metadata"].get("annotations") or {}).get(PORTS_ANNOTATION)
    try:
        ports = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return {str(k): int(v) for k, v in ports.items()} if isinstance(ports, dict) else {}


def metrics_address(pod: JSON) -> tuple[str, int] | None:
    """Where the pod's metrics are served, seen from this machine: the kubelet stand-in's
    loopback port, or a real node's pod IP and the container port."""
    mapped = mapped_ports(pod)
    if METRICS_PORT in mapped:
        return "127.0.0.1", mapped[METRICS_PORT]
    if PORTS_ANNOTATION in (pod["metadata"].get("annotations") or {}):
        return None  # the stand-in's pod, its ports not mapped yet
    ip = (pod.get("status") or {}).get("podIP")
    return (str(ip), int(METRICS_PORT)) if ip else None


def serving_pod(rest: Rest) -> JSON | None:
    """The newest ready manager pod whose metrics can be reached, if any."""
    pods = rest.list(PODS, system.NAMESPACE, label_selector=SELECTOR).get("items") or []
    candidates = [p for p in pods if ready(p) and metrics_address(p) is not None]
    candidates.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
    return candidates[-1] if candidates else None


class MetricsRelay:
    """``http://127.0.0.1:<port>/metrics`` for the manager's secure metrics: each GET is
    fetched from the serving manager pod over HTTPS with the bearer token of the
    ServiceAccount ``ome-metrics-scraper``, bound to the chart's ``metrics-reader``
    ClusterRole, as a Prometheus in the cluster scrapes; the pod's answer (a 401 or 403
    included) is passed on. Pods change with every rollout, the printed URL does not.

    Written by hand on the standard library: a stage helper of one GET route. The token is
    requested once (TokenRequest) and again after a 401."""

    def __init__(self, rest: Rest, target: tuple[str, int] | None = None) -> None:
        self._rest = rest
        self._target = target  # a fixed address (a port-forward's), else the serving pod
        self._lock = threading.Lock()
        self._token: str | None = None  # under _lock
        self._tls = ssl.create_default_context()
        self._tls.check_hostname = False
        self._tls.verify_mode = ssl.CERT_NONE  # the manager's certificate is self-signed
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                code, content_type, body = relay.fetch(self.path)
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        serve = self._server.serve_forever
        threading.Thread(target=serve, name="metrics-relay", daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def token(self, fresh: bool = False) -> str:
        with self._lock:
            if self._token is None or fresh:
                ensure_metrics_scraper(self._rest)
                self._token = system.service_account_token(self._rest, SCRAPER, system.NAMESPACE)
            return self._token

    def fetch(self, path: str) -> tuple[int, str, bytes]:
        address = self._target
        if address is None:
            try:
                pod = serving_pod(self._rest)
            except (ApiException, HTTPError, OSError) as e:
                return 503, "text/plain", f"cannot list the manager's pods: {e}\n".encode()
            address = metrics_address(pod) if pod else None
        if address is None:
            return 503, "text/plain", b"no ready manager pod serves metrics yet\n"
        host, port = address
        url = f"https://{host}:{port}{path}"
        try:
            answer = self._scrape(url, self.token())
            if answer[0] == 401:  # the token expired, or the binding was remade: a new one
                answer = self._scrape(url, self.token(fresh=True))
        except (ApiException, HTTPError) as e:
            return 503, "text/plain", f"cannot get a scraper token: {e}\n".encode()
        except OSError as e:
            return 502, "text/plain", f"the manager's metrics at {host}:{port}: {e}\n".encode()
        return answer

    def _scrape(self, url: str, token: str) -> tuple[int, str, bytes]:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=10, context=self._tls) as r:
                return r.status, r.headers.get("Content-Type", "text/plain"), r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type", "text/plain"), e.read()


def ensure_metrics_scraper(rest: Rest) -> None:
    """The ServiceAccount the relay scrapes as, bound to the chart's metrics-reader role."""
    system.create(
        rest,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SCRAPER, "namespace": system.NAMESPACE},
        },
    )
    system.create(
        rest,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": SCRAPER},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": METRICS_READER,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": SCRAPER, "namespace": system.NAMESPACE}
            ],
        },
    )


def metrics_relay(rest: Rest, target: tuple[str, int] | None = None) -> MetricsRelay:
    """A stable plain-HTTP URL for the manager's secure metrics (see `MetricsRelay`)."""
    return MetricsRelay(rest, target)

"""kube-proxy's stand-in, for the pods the kubelet stand-in runs as processes.

On the real control plane (``ome-sim run --control-plane kube``) Services get their
ClusterIPs from a loopback range (`ome_sim.controlplane.SERVICE_CIDR`, 127.1.0.0/16), so an
address like 127.1.42.7 is this machine's. For each Service with a selector, this listens on
``<clusterIP>:<port>`` for every port and forwards each connection to a ready pod the
selector picks, at the loopback port the pod runner mapped the Service's ``targetPort`` to
(the pod's ``sim.ome.io/ports`` annotation). kube-apiserver dials a webhook Service at its
ClusterIP, so the manager's admission webhook is reached exactly as in a cluster, through
the chart's Service; `kubectl port-forward`-free metrics scraping works the same way.

Services whose pods are not run as processes get a listener too, which closes each
connection at once (no backend), as a Service without ready endpoints does. Ports below
1024 (the webhook Service's 443) need root or CAP_NET_BIND_SERVICE; without, the Service is
skipped with one warning line.

Written by hand: it is a TCP relay, a thread per connection direction, and the Services and
pods come from the provider's informers.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)
JSON = dict[str, Any]
PORTS_ANNOTATION = "sim.ome.io/ports"


def pod_ready(pod: JSON) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return not pod["metadata"].get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )


def selects(selector: dict[str, str], pod: JSON) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def target_port(port: JSON, pod: JSON) -> int | None:
    """The container port a Service port's ``targetPort`` names in ``pod`` (a number, or a
    containerPort's name), as kube-proxy resolves it per endpoint."""
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int) or (isinstance(target, str) and target.isdigit()):
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for declared in container.get("ports") or []:
            if declared.get("name") == target:
                return int(declared["containerPort"])
    return None


def backend(service: JSON, port: JSON, pods: list[JSON]) -> int | None:
    """The loopback port of the newest ready pod behind ``service``'s ``port``, if any."""
    meta, spec = service["metadata"], service.get("spec") or {}
    selector = spec.get("selector") or {}
    chosen: list[tuple[str, int]] = []
    for pod in pods:
        if pod["metadata"].get("namespace") != meta.get("namespace"):
            continue
        if not selects(selector, pod) or not pod_ready(pod):
            continue
        raw = (pod["metadata"].get("annotations") or {}).get(PORTS_ANNOTATION)
        try:
            mapped = {int(k): int(v) for k, v in json.loads(raw).items()} if raw else {}
        except (ValueError, AttributeError):
            continue
        container_port = target_port(port, pod)
        if container_port in mapped:
            chosen.append((pod["metadata"].get("creationTimestamp", ""), mapped[container_port]))
    return max(chosen)[1] if chosen else None


def loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


class Relay:
    """A TCP listener on ``address:port`` that relays each connection to what ``resolve()``
    gives at that moment: a port on 127.0.0.1, or a (host, port) such as a real pod's
    address; or closes it when that is None."""

    def __init__(
        self, address: str, port: int, resolve: Callable[[], int | tuple[str, int] | None]
    ) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, port))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self._resolve = resolve
        self._thread = threading.Thread(
            target=self._accept, name=f"svc-{address}:{port}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return  # closed
            target = self._resolve()
            if target is None:
                client.close()
                continue
            if isinstance(target, int):
                target = ("127.0.0.1", target)
            try:
                upstream = socket.create_connection(target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


class ServiceProxy:
    """Listeners for the Services of ``services()``, kept in step by `sync`, each forwarding
    to ``pods()``' ready backends.

    Shared state: ``_listeners`` (by (namespace, name, clusterIP, port)), touched by `sync`
    and `stop` under ``_lock``; connections read the informers' caches only."""

    def __init__(self, services: Callable[[], list[JSON]], pods: Callable[[], list[JSON]]) -> None:
        self._services = services
        self._pods = pods
        self._lock = threading.Lock()
        self._listeners: dict[tuple[str, str, str, int], Relay] = {}
        self._refused: set[tuple[str, str, str, int]] = set()

    def sync(self) -> None:
        wanted: dict[tuple[str, str, str, int], tuple[JSON, JSON]] = {}
        for service in self._services():
            spec = service.get("spec") or {}
            ip = spec.get("clusterIP") or ""
            if not loopback(ip) or not spec.get("selector"):
                continue
            meta = service["metadata"]
            for port in spec.get("ports") or []:
                if (port.get("protocol") or "TCP") == "TCP":
                    key = (meta["namespace"], meta["name"], ip, int(port["port"]))
                    wanted[key] = (service, port)
        with self._lock:
            for key in list(self._listeners):
                if key not in wanted:
                    self._listeners.pop(key).close()
            for key, (_service, port) in wanted.items():
                if key in self._listeners or key in self._refused:
                    continue
                try:
                    self._listeners[key] = Relay(
                        key[2], key[3], self._resolver(key[0], key[1], int(port["port"]))
                    )
                except OSError as e:
                    self._refused.add(key)
                    log.warning(
                        "service %s/%s: cannot listen on %s:%d (%s); it has no proxy",
                        key[0],
                        key[1],
                        key[2],
                        key[3],
                        e.strerror or e,
                    )

    def _resolver(self, namespace: str, name: str, port: int) -> Callable[[], int | None]:
        def resolve() -> int | None:
            for service in self._services():
                meta = service["metadata"]
                if (meta["namespace"], meta["name"]) == (namespace, name):
                    for p in (service.get("spec") or {}).get("ports") or []:
                        if int(p["port"]) == port:
                            return backend(service, p, self._pods())
            return None

        return resolve

    def stop(self) -> None:
        with self._lock:
            for listener in self._listeners.values():
                listener.close()
            self._listeners.clear()

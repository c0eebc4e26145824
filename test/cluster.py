"""The clusters the suites run against, and how to reach them: a fresh embedded API server per
test, or (``OME_CONFORMANCE_APISERVER=kube``) one real control plane for the session (etcd,
kube-apiserver and kube-controller-manager, ``ome_sim.controlplane.ControlPlane``), cleaned
after every test. The fixtures that hand them out are in the repository's root ``conftest.py``,
so that the product's suites (``test/``) and the stage's (``stage/tests/``) share them.
"""

from __future__ import annotations

import json
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config

from ome_sim.apiserver import EmbeddedAPIServer, ServerThread

#: ``OME_CONFORMANCE_APISERVER=kube`` runs the ``conformance`` tests on kube-apiserver.
APISERVER = os.environ.get("OME_CONFORMANCE_APISERVER", "embedded")
ON_KUBE = APISERVER == "kube"


@dataclass
class Cluster:
    """A running API server and how to reach it. ``server`` and ``thread`` are the embedded
    server's; both are None on kube-apiserver (``OME_CONFORMANCE_APISERVER=kube``)."""

    server: EmbeddedAPIServer | None
    thread: ServerThread | None
    kubeconfig: Path
    api: client.ApiClient
    home: Path
    url: str = ""
    #: How to reach ``url`` with the admin's client certificate (kube-apiserver only).
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)

    @property
    def kube(self) -> bool:
        """Whether this is the real kube-apiserver."""
        return self.server is None

    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def ext(self) -> client.ApiextensionsV1Api:
        return client.ApiextensionsV1Api(self.api)

    def urlopen(self, req: Any, timeout: float = 30) -> Any:
        """``urllib.request.urlopen`` with the credentials the server needs."""
        import urllib.request

        if isinstance(req, str):
            req = urllib.request.Request(self.url + req if req.startswith("/") else req)
        return urllib.request.urlopen(req, timeout=timeout, context=self.ssl_context)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        """A raw HTTP call, for what the typed client cannot express (bad bodies, Accept)."""
        import urllib.error
        import urllib.request

        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with self.urlopen(req, timeout=30) as resp:
                text = resp.read()
                return resp.status, maybe_json(text), dict(resp.headers)
        except urllib.error.HTTPError as e:
            return e.code, maybe_json(e.read()), dict(e.headers)


def maybe_json(text: bytes) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text.decode()


def api_client(kubeconfig: Path) -> client.ApiClient:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return client.ApiClient(cfg)


# --- the real control plane (OME_CONFORMANCE_APISERVER=kube) -------------------------------

#: Namespaces kube-apiserver makes and keeps; every other one is a test's.
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
#: What the control plane itself keeps in ``default``: (resource, name).
SYSTEM_OBJECTS = frozenset(
    {
        ("configmaps", "kube-root-ca.crt"),
        ("services", "kubernetes"),
        ("serviceaccounts", "default"),
        ("endpoints", "kubernetes"),
        ("endpointslices", "kubernetes"),
    }
)
#: Namespaced kinds a test may leave in ``default``: (group/version path, resource).
DEFAULT_KINDS = (
    ("/api/v1", "pods"),
    ("/api/v1", "configmaps"),
    ("/api/v1", "secrets"),
    ("/api/v1", "services"),
    ("/api/v1", "events"),
    ("/api/v1", "serviceaccounts"),
    ("/apis/coordination.k8s.io/v1", "leases"),
    ("/apis/apps/v1", "controllerrevisions"),
    ("/apis/apps/v1", "replicasets"),
    ("/apis/apps/v1", "deployments"),
)
#: Cluster-scoped kinds a test may make (the control plane makes none of them).
CLUSTER_KINDS = (
    ("/api/v1", "nodes"),
    ("/apis/admissionregistration.k8s.io/v1", "validatingwebhookconfigurations"),
    ("/apis/admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations"),
    ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions"),
)


@dataclass
class KubeCluster:
    """The session's control plane, and how to put it back as it started."""

    url: str
    kubeconfig: Path
    context: ssl.SSLContext

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        import urllib.error
        import urllib.request

        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        content = "application/merge-patch+json" if method == "PATCH" else "application/json"
        req.add_header("Content-Type", content)
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.context) as resp:
                return resp.status, maybe_json(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, maybe_json(e.read())

    def items(self, path: str) -> list[dict[str, Any]]:
        code, body = self.call("GET", path)
        if code != 200 or not isinstance(body, dict):
            return []
        return list(body.get("items") or [])

    def _remove(self, path: str, obj: dict[str, Any]) -> None:
        """Drop the object's finalizers, then delete it now (grace period 0)."""
        if obj["metadata"].get("finalizers"):
            self.call("PATCH", path, {"metadata": {"finalizers": None}})
        self.call("DELETE", path + "?gracePeriodSeconds=0&propagationPolicy=Background")

    def _custom_resources(self) -> list[tuple[str, bool]]:
        """(collection path, namespaced) of every served custom resource."""
        out = []
        for crd in self.items("/apis/apiextensions.k8s.io/v1/customresourcedefinitions"):
            spec = crd["spec"]
            namespaced = spec.get("scope") == "Namespaced"
            for v in spec.get("versions") or []:
                if v.get("served"):
                    out.append(
                        (f"/apis/{spec['group']}/{v['name']}/{spec['names']['plural']}", namespaced)
                    )
                    break
        return out

    def clean(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        namespaces = [
            n["metadata"]["name"]
            for n in self.items("/api/v1/namespaces")
            if n["metadata"]["name"] not in SYSTEM_NAMESPACES
        ]
        # Custom resources first: their finalizers would hold their CRD and namespace.
        for collection, namespaced in self._custom_resources():
            for obj in self.items(collection):
                md = obj["metadata"]
                if namespaced:
                    prefix, _, plural = collection.rpartition("/")
                    path = f"{prefix}/namespaces/{md['namespace']}/{plural}/{md['name']}"
                else:
                    path = f"{collection}/{md['name']}"
                self._remove(path, obj)
        for ns in ["default", *namespaces]:
            for prefix, resource in DEFAULT_KINDS:
                for obj in self.items(f"{prefix}/namespaces/{ns}/{resource}"):
                    name = obj["metadata"]["name"]
                    if ns == "default" and (resource, name) in SYSTEM_OBJECTS:
                        continue
                    if ns != "default" and not obj["metadata"].get("finalizers"):
                        continue  # the namespace's deletion takes it
                    self._remove(f"{prefix}/namespaces/{ns}/{resource}/{name}", obj)
        for ns in namespaces:
            self.call("DELETE", f"/api/v1/namespaces/{ns}")
        for prefix, resource in CLUSTER_KINDS:
            for obj in self.items(f"{prefix}/{resource}"):
                self._remove(f"{prefix}/{resource}/{obj['metadata']['name']}", obj)
        # Wait until it is all gone, so that the next test starts clean.
        while True:
            left = [
                f"namespace {n['metadata']['name']}"
                for n in self.items("/api/v1/namespaces")
                if n["metadata"]["name"] not in SYSTEM_NAMESPACES
            ]
            left += [
                f"{resource} {o['metadata']['name']}"
                for prefix, resource in CLUSTER_KINDS
                for o in self.items(f"{prefix}/{resource}")
            ]
            left += [
                f"{resource} default/{o['metadata']['name']}"
                for prefix, resource in DEFAULT_KINDS
                for o in self.items(f"{prefix}/namespaces/default/{resource}")
                if (resource, o["metadata"]["name"]) not in SYSTEM_OBJECTS
            ]
            if not left:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"kube-apiserver not clean after the test: {left}")
            # Something a controller or the test's own finalizer added since: again.
            for collection, namespaced in self._custom_resources():
                for obj in self.items(collection):
                    if obj["metadata"].get("finalizers"):
                        md = obj["metadata"]
                        prefix, _, plural = collection.rpartition("/")
                        path = (
                            f"{prefix}/namespaces/{md['namespace']}/{plural}/{md['name']}"
                            if namespaced
                            else f"{collection}/{md['name']}"
                        )
                        self.call("PATCH", path, {"metadata": {"finalizers": None}})
            # ... or what a controller recorded since about what went, such as
            # kube-controller-manager's events about a deleted node: removed again.
            for prefix, resource in DEFAULT_KINDS:
                for obj in self.items(f"{prefix}/namespaces/default/{resource}"):
                    name = obj["metadata"]["name"]
                    if (resource, name) not in SYSTEM_OBJECTS:
                        self._remove(f"{prefix}/namespaces/default/{resource}/{name}", obj)
            time.sleep(0.1)


@dataclass
class KubectlResult:
    returncode: int
    stdout: str
    stderr: str


Kubectl = Callable[..., KubectlResult]

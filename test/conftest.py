"""Fixtures shared by every suite: an embedded cluster per test, and two independent clients
(the official ``kubernetes`` Python client and the ``kubectl`` binary) pointed at it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from ome.sim.apiserver import EmbeddedAPIServer, ServerThread


@dataclass
class Cluster:
    """A running embedded API server and how to reach it."""

    server: EmbeddedAPIServer
    thread: ServerThread
    kubeconfig: Path
    api: client.ApiClient
    home: Path

    @property
    def url(self) -> str:
        return self.server.url

    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def ext(self) -> client.ApiextensionsV1Api:
        return client.ApiextensionsV1Api(self.api)

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
            with urllib.request.urlopen(req, timeout=30) as resp:
                text = resp.read()
                return resp.status, _maybe_json(text), dict(resp.headers)
        except urllib.error.HTTPError as e:
            return e.code, _maybe_json(e.read()), dict(e.headers)


def _maybe_json(text: bytes) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text.decode()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    thread = ServerThread(bookmark_interval=0.5)
    server = thread.start()
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    api = client.ApiClient(cfg)
    home = tmp_path / "home"
    home.mkdir()
    try:
        yield Cluster(server, thread, kubeconfig, api, home)
    finally:
        api.close()
        thread.stop()


@dataclass
class KubectlResult:
    returncode: int
    stdout: str
    stderr: str


Kubectl = Callable[..., KubectlResult]


@pytest.fixture
def kubectl(cluster: Cluster) -> Kubectl:
    """Run the real kubectl against the cluster; ``check=False`` returns failures too."""
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.fail("kubectl is not on PATH: the machine image ships it, install it to test")

    def run(
        *args: str, input: str | None = None, check: bool = True, timeout: int = 60
    ) -> KubectlResult:
        env = {**os.environ, "HOME": str(cluster.home), "KUBECONFIG": str(cluster.kubeconfig)}
        proc = subprocess.run(
            [binary, *args],
            input=input,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        result = KubectlResult(proc.returncode, proc.stdout, proc.stderr)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"
            )
        return result

    return run

"""Fixtures shared by every suite, the product's (``test/``) and the stage's (``stage/tests/``):
a cluster per test, and two independent clients (the official ``kubernetes`` Python client and
the ``kubectl`` binary) pointed at it (``test/cluster.py`` says what the clusters are).

With ``OME_CONFORMANCE_APISERVER=kube`` only the tests marked ``conformance`` run; the others
are skipped.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test.cluster import (
    APISERVER,
    ON_KUBE,
    Cluster,
    KubeCluster,
    Kubectl,
    KubectlResult,
    api_client,
)

from ome_sim.apiserver import ServerThread


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "conformance: a check of the API server through its clients only; it runs on "
        "kube-apiserver too (OME_CONFORMANCE_APISERVER=kube)",
    )
    if APISERVER not in ("embedded", "kube"):
        raise pytest.UsageError(
            f"OME_CONFORMANCE_APISERVER={APISERVER!r}: expected 'kube' or unset ('embedded')"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not ON_KUBE:
        return
    skip = pytest.mark.skip(
        reason="not a conformance check (it needs the embedded server's internals); "
        "OME_CONFORMANCE_APISERVER=kube runs only the tests marked conformance"
    )
    for item in items:
        if item.get_closest_marker("conformance") is None:
            item.add_marker(skip)


#: The suite whose files share session fixtures: the ``ome-sim run`` environments of
#: test/e2e/conftest.py, and what earlier tests left in them.
E2E = "test/e2e/"


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's stock schedulers
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist's ``--dist loadfile`` (``make test``, ``make unit``), a test file's
    tests run on one worker in their order, which makes its module-scoped fixtures once; here
    all of test/e2e is one such unit too, so that one worker starts its environments once and
    runs its files in their order, as a run without xdist does."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesAndE2E(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return E2E if nodeid.startswith(E2E) else super()._split_scope(nodeid)

    return FilesAndE2E(config, log)


@pytest.fixture(autouse=True)
def _cpu_scheduling_restored() -> Iterator[None]:
    """A test that runs ``ome-manager``'s main in this process moves this thread to the
    ``SCHED_BATCH`` policy (``--cpu-scheduling``), and every thread and process started
    after it would inherit it: put the policy back, so no test runs under another's."""
    if not hasattr(os, "sched_getscheduler"):
        yield
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    yield
    if os.sched_getscheduler(0) != policy:
        os.sched_setscheduler(0, policy, param)


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    home = tmp_path / "home"
    home.mkdir()
    if ON_KUBE:
        kube: KubeCluster = request.getfixturevalue("_kube_control_plane")
        api = api_client(kube.kubeconfig)
        try:
            yield Cluster(
                None, None, kube.kubeconfig, api, home, url=kube.url, ssl_context=kube.context
            )
        finally:
            api.close()
            kube.clean()
        return
    thread = ServerThread(bookmark_interval=0.5)
    server = thread.start()
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    api = api_client(kubeconfig)
    try:
        yield Cluster(server, thread, kubeconfig, api, home, url=server.url)
    finally:
        api.close()
        thread.stop()


@pytest.fixture(scope="session")
def _kube_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    from ome_sim.controlplane import ControlPlane, binaries_dir, missing_binaries

    missing = missing_binaries(binaries_dir())
    if missing:
        pytest.fail(
            f"OME_CONFORMANCE_APISERVER=kube: {', '.join(missing)} not built in "
            f"{binaries_dir()}: run hack/kube-binaries.sh"
        )
    root = tmp_path_factory.mktemp("kube")
    cp = ControlPlane(log_dir=root / "logs")
    cp.start()
    try:
        kubeconfig = cp.write_kubeconfig(root / "kubeconfig")
        assert cp.ca is not None and cp.admin is not None
        context = ssl.create_default_context(cadata=cp.ca.pem.cert.decode())
        with tempfile.NamedTemporaryFile(dir=root, suffix=".pem", delete=False) as f:
            f.write(cp.admin.cert + cp.admin.key)
        context.load_cert_chain(f.name)
        kube = KubeCluster(cp.url, kubeconfig, context)
        kube.clean()
        yield kube
    finally:
        cp.stop()


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

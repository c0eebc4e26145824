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
    # pytest-xdist registers it too; here for a run without it (``-p no:xdist``).
    config.addinivalue_line("markers", "xdist_group(name): run on the worker of this group")
    if APISERVER not in ("embedded", "kube"):
        raise pytest.UsageError(
            f"OME_CONFORMANCE_APISERVER={APISERVER!r}: expected 'kube' or unset ('embedded')"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_worker_group(config, item)))
    if not ON_KUBE:
        return
    skip = pytest.mark.skip(
        reason="not a conformance check (it needs the embedded server's internals); "
        "OME_CONFORMANCE_APISERVER=kube runs only the tests marked conformance"
    )
    for item in items:
        if item.get_closest_marker("conformance") is None:
            item.add_marker(skip)


def _worker_group(config: pytest.Config, item: pytest.Item) -> str:
    """Which tests run on one pytest-xdist worker under ``--dist loadgroup`` (``make test``,
    ``make unit``): a test file's, in their order, so that its module-scoped fixtures are made
    once; and all of test/e2e, whose files share the session's ``ome-sim run`` environments
    (test/e2e/conftest.py), which one worker then starts once. Without xdist it means nothing."""
    path = item.path.relative_to(config.rootpath)
    return "test/e2e" if path.parts[:2] == ("test", "e2e") else path.as_posix()


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

"""The real control plane itself (`ome_sim.controlplane`, what ``--control-plane kube``
starts): the real server version, RBAC enforced for anyone but the admin, namespace
deletion by kube-controller-manager, and nothing left behind on stop. Runs under
``make e2e-kube`` (``OME_E2E_CONTROL_PLANE=kube``); elsewhere it is skipped, since the
binaries may not be built."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ome_sim.controlplane import KUBE_VERSION, ControlPlane, write_kubeconfig

pytestmark = pytest.mark.skipif(
    os.environ.get("OME_E2E_CONTROL_PLANE") != "kube",
    reason="needs the control plane binaries: make e2e-kube runs this",
)


def kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shutil.which("kubectl") or "kubectl", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_it_is_kube_apiserver_with_rbac_and_leaves_nothing_behind(tmp_path: Path) -> None:
    lines: list[str] = []
    plane = ControlPlane(log_dir=tmp_path / "logs", progress=lines.append)
    plane.start()
    try:
        data = plane.data_dir
        assert data is not None and (data / "etcd").is_dir()
        admin = plane.write_kubeconfig(tmp_path / "kubeconfig")
        version = json.loads(kubectl(admin, "version", "-o", "json").stdout)
        assert version["serverVersion"]["gitVersion"] == KUBE_VERSION
        # Namespace deletion is kube-controller-manager's.
        assert kubectl(admin, "create", "namespace", "probe").returncode == 0
        out = kubectl(admin, "delete", "namespace", "probe", "--timeout=60s")
        assert out.returncode == 0, out.stderr
        # Anyone but system:masters is subject to RBAC: a token of a fresh ServiceAccount
        # may do nothing.
        assert kubectl(admin, "create", "serviceaccount", "nobody").returncode == 0
        token = kubectl(admin, "create", "token", "nobody").stdout.strip()
        nobody = write_kubeconfig(
            tmp_path / "nobody", plane.token_kubeconfig("nobody", token, "default")
        )
        out = kubectl(nobody, "get", "pods")
        assert out.returncode != 0
        assert 'User "system:serviceaccount:default:nobody" cannot list resource "pods"' in (
            out.stderr
        )
        # All three still run, the apiserver on loopback at the port chosen for it.
        for component in plane.components:
            assert component.proc.poll() is None, component.tail()
        assert plane.url == f"https://127.0.0.1:{plane.ports['kube-apiserver']}"
        procs = [c.proc for c in plane.components]
    finally:
        plane.stop()
    assert not data.exists()
    assert all(p.poll() is not None for p in procs)
    assert [line.split()[1] for line in lines if line.startswith("starting ")] == [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
    ]
    assert (tmp_path / "logs" / "kube-apiserver.log").stat().st_size > 0  # logs are kept


def test_the_guides_helm_upgrade_and_config_default_on_a_fresh_control_plane(
    tmp_path: Path,
) -> None:
    """The walkthrough's Step 1 as written, on a cluster of its own: ``helm upgrade --install ome
    charts/ome-resources --namespace ome -f values.yaml`` (the walkthrough's block), then the
    ConfigMap entry is the walkthrough's JSON; and ``kubectl apply --dry-run=server -k
    config/default`` is admitted as a whole. (The pod never runs: no kubelet here.)"""
    from ome.tpuslice.types import GUIDE_CONFIG_JSON
    from test.unit.test_chart import CHART, SAMPLE_VALUES, helm_binary

    helm = helm_binary()
    plane = ControlPlane(log_dir=tmp_path / "logs")
    plane.start()
    try:
        admin = plane.write_kubeconfig(tmp_path / "kubeconfig")
        # A server-side dry run creates nothing, the namespace included: make it first.
        assert kubectl(admin, "create", "namespace", "ome").returncode == 0
        out = kubectl(
            admin, "apply", "--dry-run=server", "-k", str(CHART.parents[1] / "config" / "default")
        )
        assert out.returncode == 0, out.stderr
        assert "deployment.apps/ome-controller-manager created (server dry run)" in out.stdout
        env = {**os.environ, "KUBECONFIG": str(admin), "HOME": str(tmp_path)}
        upgrade = subprocess.run(
            [
                helm,
                "upgrade",
                "--install",
                "ome",
                str(CHART),
                "--namespace",
                "ome",
                "-f",
                str(SAMPLE_VALUES),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert upgrade.returncode == 0, upgrade.stderr
        entry = kubectl(
            admin,
            "get",
            "configmap",
            "inferenceservice-config",
            "-n",
            "ome",
            "-o",
            "jsonpath={.data.tpuSliceProvisioning}",
        ).stdout
        assert entry == GUIDE_CONFIG_JSON
        deployment = json.loads(
            kubectl(
                admin, "get", "deployment", "ome-controller-manager", "-n", "ome", "-o", "json"
            ).stdout
        )
        assert deployment["spec"]["template"]["metadata"]["labels"]["control-plane"] == (
            "ome-controller-manager"
        )
        assert "checksum/config" in deployment["spec"]["template"]["metadata"]["annotations"]
    finally:
        plane.stop()

"""The walkthrough's Step 1 and the troubleshooting cases about the manager itself, on the real
control plane with the manager running as its Deployment's pod (``ome-sim run
--control-plane kube``, as ``make e2e-kube`` starts it). Each command is the walkthrough's, with
the chart's path for its OCI reference and ``values.yaml`` the walkthrough's block
(config/samples/values.yaml, copied into a working directory); ``helm`` is hack/helm.sh's.

Skipped where the manager runs beside the cluster rather than in a pod (the embedded
default): there is no Deployment to roll there.

The invalid values of "The manager doesn't start after the upgrade" are a ``chipResource``
that is not a qualified name and the topology ``2x1x1``: 2 chips, not a whole number of the
4-chip hosts (the issue's ``2x2x3`` is 12 chips, three whole hosts, which the configuration
accepts). A block with a field missing never reaches the pod: the chart's values.schema.json
makes ``helm upgrade`` refuse it, naming the field, and nothing changes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ome import __version__
from ome.tpuslice.types import GUIDE_CONFIG_JSON
from test.e2e.conftest import ROOT, Environment, guide_sample
from test.helpers import eventually
from test.unit.test_chart import CHART, SAMPLE_VALUES, helm_binary

GUIDE_UPGRADE = (
    "helm upgrade --install ome oci://ghcr.io/moirai-internal/charts/ome-resources \\\n"
    f"  --namespace ome --version {__version__} -f values.yaml"
)
UPGRADE = GUIDE_UPGRADE.replace("oci://ghcr.io/moirai-internal/charts/ome-resources", str(CHART))
ROLLOUT = "kubectl rollout status deployment ome-controller-manager -n ome"
ENTRY = (
    "kubectl get configmap inferenceservice-config -n ome -o "
    "jsonpath='{.data.tpuSliceProvisioning}'"
)
NO_CRD_LOG = (
    "kubectl logs -n ome -l control-plane=ome-controller-manager --tail=-1 | grep \"won't "
    'provision TPU slices"'
)
RESTART = "kubectl rollout restart deployment ome-controller-manager -n ome"
SLICE_CRD = ROOT / "test" / "e2e" / "crds" / "slices.accelerator.gke.io.yaml"


class Guide:
    """bash in a working directory holding ``values.yaml``, with helm on the PATH."""

    def __init__(self, env: Environment, workdir: Path) -> None:
        self.env = env
        self.workdir = workdir
        helm = Path(helm_binary())
        self.path = f"{helm.parent}:{os.environ.get('PATH', '')}"
        self.values(lambda _block: None)

    def values(self, change: object) -> None:
        values = yaml.safe_load(SAMPLE_VALUES.read_text())
        change(values["ome"]["controller"]["tpuSliceProvisioning"])  # type: ignore[operator]
        (self.workdir / "values.yaml").write_text(yaml.safe_dump(values, sort_keys=False))

    def run(
        self, command: str, check: bool = True, timeout: int = 240
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["bash", "-c", "set -o pipefail\n" + command],
            env={**self.env.env(), "PATH": self.path},
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.workdir,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{command}\nfailed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def json(self, *args: str) -> dict:
        return json.loads(self.env.kubectl(*args, "-o", "json").stdout)

    def replica_sets(self) -> set[str]:
        items = self.json(
            "get", "replicasets", "-n", "ome", "-l", "control-plane=ome-controller-manager"
        )["items"]
        return {rs["metadata"]["name"] for rs in items}

    def ready_pods(self) -> list[str]:
        items = self.json("get", "pods", "-n", "ome", "-l", "control-plane=ome-controller-manager")[
            "items"
        ]
        return sorted(
            p["metadata"]["name"]
            for p in items
            if not p["metadata"].get("deletionTimestamp")
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        )

    def container(self, pod: str) -> tuple[str, str]:
        """The pod's manager container: (imageID, containerID)."""
        [status] = self.json("get", "pod", pod, "-n", "ome")["status"]["containerStatuses"]
        return status["imageID"], status["containerID"]

    def holder(self) -> str:
        lease = self.json("get", "lease", "ome-controller-manager", "-n", "ome")
        return str(lease["spec"].get("holderIdentity", ""))


@pytest.fixture(scope="module")
def guide(environment: Environment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guide]:
    probe = environment.kubectl(
        "get", "deployment", "ome-controller-manager", "-n", "ome", check=False
    )
    if probe.returncode != 0:
        pytest.skip(
            "the manager runs beside the cluster here, not as a Deployment's pod "
            "(make e2e-kube runs this on the real control plane)"
        )
    g = Guide(environment, tmp_path_factory.mktemp("step1"))
    yield g
    # Leave OME as the walkthrough's Step 1 left it, for the tests that follow.
    g.values(lambda _block: None)
    g.run(UPGRADE)
    g.run(ROLLOUT)


def test_the_docs_show_these_commands() -> None:
    """The README's Step 1 shows the walkthrough's commands; docs/control-plane.md shows the case
    of a manager started without the Slice CRD."""
    readme = (ROOT / "README.md").read_text()
    shown = GUIDE_UPGRADE.replace(
        "oci://ghcr.io/moirai-internal/charts/ome-resources \\\n  ", "charts/ome-resources "
    )
    for command in (shown, ROLLOUT, ENTRY):
        assert command in readme, command
    control_plane = (ROOT / "docs" / "control-plane.md").read_text()
    for command in (RESTART, ROLLOUT, NO_CRD_LOG):
        assert command in control_plane, command


def test_step_1_rolls_out_and_the_entry_is_the_guides_json(guide: Guide) -> None:
    guide.run(UPGRADE)
    out = guide.run(ROLLOUT).stdout
    assert (
        out.strip().splitlines()[-1]
        == 'deployment "ome-controller-manager" successfully rolled out'
    )
    assert guide.run(ENTRY).stdout == GUIDE_CONFIG_JSON


def test_a_values_change_rolls_the_pods_and_the_new_manager_takes_the_lease(guide: Guide) -> None:
    before = guide.replica_sets()
    old = guide.ready_pods()
    [before_image] = {guide.container(p)[0] for p in old}
    before_containers = {guide.container(p)[1] for p in old}

    def longer(block: dict) -> None:
        block["slice"]["readyTimeout"] = "20m"

    guide.values(longer)
    guide.run(UPGRADE)
    assert "successfully rolled out" in guide.run(ROLLOUT).stdout
    assert guide.replica_sets() - before, "no new ReplicaSet: the checksum did not change"
    assert '"readyTimeout":"20m"' in guide.run(ENTRY).stdout
    new = eventually(lambda: [p for p in guide.ready_pods() if p not in old], timeout=60)
    eventually(lambda: guide.holder().startswith(new[0] + "_"), timeout=60)
    # A new container, from the same image (the values changed, not the image).
    assert {guide.container(p)[0] for p in new} == {before_image}
    assert not {guide.container(p)[1] for p in new} & before_containers


def message_of(line: str) -> str:
    """A JSON log line's message (what Cloud Logging shows); any other line as it is."""
    try:
        entry = json.loads(line)
    except ValueError:
        return line
    return str(entry.get("message", line)) if isinstance(entry, dict) else line


@pytest.mark.timeout(600)
def test_the_manager_doesnt_start_after_a_bad_upgrade_and_the_old_one_keeps_serving(
    guide: Guide,
) -> None:
    guide.values(lambda _block: None)
    guide.run(UPGRADE)
    guide.run(ROLLOUT)
    serving = guide.ready_pods()

    def incomplete(block: dict) -> None:
        del block["chipResource"]

    guide.values(incomplete)
    refused = guide.run(UPGRADE, check=False)
    assert refused.returncode != 0
    assert "missing property 'chipResource'" in refused.stderr, refused.stderr
    assert guide.ready_pods() == serving  # refused before anything reached the cluster

    def broken(block: dict) -> None:
        block["chipResource"] = "google.com/tpu chips"
        block["accelerators"]["tpu7x"]["topologies"] = ["2x2x1", "2x1x1"]

    guide.values(broken)
    guide.run(UPGRADE)
    try:
        waiting = guide.run(ROLLOUT + " --timeout=30s", check=False, timeout=90)
        assert waiting.returncode != 0
        assert "timed out" in waiting.stderr, waiting.stderr
        items = guide.json(
            "get", "pods", "-n", "ome", "-l", "control-plane=ome-controller-manager"
        )["items"]
        [crashing] = [p["metadata"]["name"] for p in items if p["metadata"]["name"] not in serving]
        logs = guide.env.kubectl("logs", "-n", "ome", crashing, check=False).stdout
        logs += guide.env.kubectl("logs", "-n", "ome", crashing, "--previous", check=False).stdout
        logs = "\n".join(message_of(line) for line in logs.splitlines())  # as a user reads them
        assert "Failed to initialize TPU slice provisioning configuration" in logs, logs
        assert 'chipResource: "google.com/tpu chips" is not a qualified name' in logs, logs
        assert "topology 2x1x1 is 2 chips, not a whole number of 4-chip hosts" in logs, logs
        assert guide.ready_pods() == serving  # the old manager was not taken away

        def status_column() -> str:
            row = guide.env.kubectl("get", "pod", crashing, "-n", "ome", "--no-headers").stdout
            return row.split()[2] if row.strip() else ""

        # It is restarted with the kubelet's backoff, which kubectl shows. A real kubelet shows
        # the waiting state only once a back-off outlasts its status sync (10 s, 20 s, 40 s...):
        # about three minutes after the first crash.
        eventually(lambda: status_column() == "CrashLoopBackOff", timeout=330, interval=0.5)

        # It still serves: a service applied meanwhile gets its Slice.
        guide.env.kubectl("apply", "-f", "-", input=guide_sample("step1-probe"))
        eventually(
            lambda: guide.env.kubectl(
                "get",
                "slices.accelerator.gke.io",
                "-l",
                "cloud.google.com/slice-owner-name=step1-probe-engine",
                "-o",
                "name",
            ).stdout.strip(),
            timeout=60,
        )
    finally:  # fixed, even when a check above failed: the next tests need a manager
        guide.values(lambda _block: None)
        guide.run(UPGRADE)
    assert "successfully rolled out" in guide.run(ROLLOUT).stdout
    guide.env.kubectl("delete", "namespace", "step1-probe", "--timeout=2m", timeout=150)


def test_no_slices_item_2_a_manager_started_without_the_slice_crd_says_so(guide: Guide) -> None:
    guide.env.kubectl("delete", "crd", "slices.accelerator.gke.io", "--timeout=60s")
    try:
        guide.run(RESTART)
        guide.run(ROLLOUT)
        line = eventually(lambda: guide.run(NO_CRD_LOG, check=False).stdout, timeout=60)
        assert "won't provision TPU slices" in line
    finally:
        guide.env.kubectl("apply", "-f", str(SLICE_CRD))
        guide.env.kubectl(
            "wait", "--for=condition=Established", "crd/slices.accelerator.gke.io", "--timeout=60s"
        )
    guide.run(RESTART)
    guide.run(ROLLOUT)
    # Once the old pod is gone (it terminates after the rollout), grep finds nothing.
    eventually(lambda: guide.run(NO_CRD_LOG, check=False).returncode == 1, timeout=90)
    guide.env.kubectl("apply", "-f", "-", input=guide_sample("step1-crd"))
    guide.env.kubectl(
        "wait",
        "--for=condition=Ready",
        "inferenceservice/step1-crd",
        "-n",
        "step1-crd",
        "--timeout=3m",
        timeout=200,
    )
    assert re.search(
        r"step1-crd-engine-0-0-[0-9a-f]{8}",
        guide.env.kubectl("get", "slices.accelerator.gke.io", "-o", "name").stdout,
    )
    guide.env.kubectl("delete", "namespace", "step1-crd", "--timeout=2m", timeout=150)

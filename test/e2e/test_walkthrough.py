"""The README's walkthrough and docs/troubleshooting.md, run as a user runs them: each
command is taken as written on the page that shows it (the test fails if it is not there),
run with bash and kubectl against the environment ``make run`` starts, and its output
checked against what the page shows.

The tests run in order and build on each other, as the pages do: the README's Steps 2 and 3,
then each troubleshooting case from where the one before it left the cluster, then the
README's Clean up; the last two cases on a slower simulator, as the page says.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator

import pytest

from test.e2e.conftest import ROOT, Environment
from test.helpers import eventually


class Page:
    """A page of the docs, by its path in the repository, and its text."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.text = (ROOT / path).read_text()

    def shows(self, command: str) -> None:
        assert command in self.text, f"{self.path} does not show this command:\n{command}"

    def line(self, start: str) -> str:
        """The page's line that starts with ``start``, whole."""
        at = self.text.index(start)
        return self.text[at : self.text.index("\n", at)]

    def block(self, start: str) -> str:
        """The page's multi-line command that starts with ``start`` (a heredoc, to EOF)."""
        at = self.text.index(start)
        end = self.text.index("\nEOF\n", at) + len("\nEOF")
        return self.text[at:end]


README = Page("README.md")
TROUBLESHOOTING = Page("docs/troubleshooting.md")
NS = "qwen3-tpu"
SAMPLE = "kubectl apply -f config/samples/qwen3-tpu-isvc.yaml"
WAIT = "kubectl wait --for=condition=Ready inferenceservice/qwen3-tpu -n qwen3-tpu --timeout=5m"
STEP3 = (
    "kubectl get slices.accelerator.gke.io -l ome.io/managed-by=OMENative -o "
    "'custom-columns=NAME:.metadata.name,TYPE:.spec.type,TOPOLOGY:.spec.topology,"
    'STATE:.status.conditions[?(@.type=="Ready")].reason\''
)
SLICE = (
    "SLICE=$(kubectl get slices.accelerator.gke.io -l cloud.google.com/slice-owner-name="
    "qwen3-tpu-engine,ome.io/instance-index=0 -o jsonpath='{.items[0].metadata.name}')"
)
OWNED = (
    "kubectl get slices.accelerator.gke.io -l cloud.google.com/slice-owner-name=qwen3-tpu-engine"
)


def events(reason: str) -> str:
    return (
        f"kubectl get events -n qwen3-tpu --field-selector reason={reason} "
        "-o jsonpath='{range .items[*]}{.message}{\"\\n\"}{end}'"
    )


def scale(n: int) -> str:
    return (
        "kubectl patch inferenceservice qwen3-tpu -n qwen3-tpu --type merge -p "
        f'\'{{"spec":{{"engine":{{"minReplicas":{n},"maxReplicas":{n}}}}}}}\''
    )


def chips(n: int) -> str:
    patch = '{"spec":{"engine":{"runner":{"resources":{"requests":{"google.com/tpu":N},"limits":{"google.com/tpu":N}}}}}}'
    return f"kubectl patch inferenceservice qwen3-tpu -n qwen3-tpu --type merge -p '{patch.replace('N', str(n))}'"


class Shell:
    """bash with the environment's KUBECONFIG and the variables earlier steps set, following
    one page: each command it is given must be written there."""

    def __init__(self, environment: Environment, page: Page) -> None:
        self.environment = environment
        self.page = page
        self.vars: dict[str, str] = {}
        #: ``export`` lines of the pages, run before every command as a user's shell would
        self.exports: list[str] = []

    def on(self, page: Page) -> Shell:
        """The same shell (its variables and exports shared) following another page."""
        other = Shell(self.environment, page)
        other.vars = self.vars
        other.exports = self.exports
        return other

    def __call__(self, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        self.page.shows(command)
        return self.run(command, check)

    def run(self, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        exports = "".join(f"{line}\n" for line in self.exports)
        exports += "".join(f"{k}='{v}'\n" for k, v in self.vars.items())
        proc = subprocess.run(
            ["bash", "-c", "set -o pipefail\n" + exports + command],
            env=self.environment.env(),
            capture_output=True,
            text=True,
            timeout=360,
            cwd=ROOT,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{command}\nfailed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def export(self, line: str) -> None:
        """Run the page's ``export`` line before every later command."""
        self.page.shows(line)
        self.exports.append(line)

    def set(self, assignment: str) -> str:
        """Run ``NAME=$(...)`` as the page shows it and keep NAME for later steps."""
        name = assignment.split("=", 1)[0]
        self.page.shows(assignment)
        value = self.run(f'{assignment}\nprintf %s "${name}"').stdout
        assert value, f"{name} is empty"
        self.vars[name] = value
        return value

    def lines(self, command: str) -> list[str]:
        return [line for line in self(command).stdout.splitlines() if line.strip()]


#: The line that puts the ``kubectl ome`` plugin on the PATH (the README's quick start, and
#: the troubleshooting page's "Before you start").
PLUGIN_PATH = 'export PATH="$PWD/.venv/bin:$PATH"'


@pytest.fixture(scope="module")
def walk(environment: Environment) -> Iterator[Shell]:
    """The README's walkthrough."""
    shell = Shell(environment, README)
    shell.export(PLUGIN_PATH)
    yield shell


@pytest.fixture(scope="module")
def trouble(walk: Shell) -> Iterator[Shell]:
    """docs/troubleshooting.md, in the same shell as the walkthrough before it."""
    TROUBLESHOOTING.shows(PLUGIN_PATH)
    yield walk.on(TROUBLESHOOTING)


#: M7: the service's conditions, as a user reads them.
DESCRIBE = "kubectl describe inferenceservice qwen3-tpu -n qwen3-tpu"


def instance_status(index: int) -> str:
    return f"kubectl ome instance status qwen3-tpu {index} --component engine -n qwen3-tpu -o wide"


# -- Steps 2 and 3 -----------------------------------------------------------------------------


def test_step_2_and_3_a_slice_per_instance_then_the_pod_confined_to_it(walk: Shell) -> None:
    walk(SAMPLE)
    header = walk.lines("kubectl get inferencereplica qwen3-tpu-engine -n qwen3-tpu")[0]
    assert header.split() == [
        "NAME",
        "COMPONENT",
        "DESIRED",
        "CURRENT",
        "READY",
        "AVAILABLE",
        "AGE",
    ]
    walk(WAIT)
    rows = walk.lines(STEP3)
    assert rows[0].split() == ["NAME", "TYPE", "TOPOLOGY", "STATE"]
    assert len(rows) == 2 and re.fullmatch(
        r"qwen3-tpu-engine-0-0-[0-9a-f]{8}\s+tpu7x\s+2x2x1\s+ACTIVE", rows[1].strip()
    ), rows
    selector = walk(
        "kubectl get pod qwen3-tpu-engine-0-default-0 -n qwen3-tpu -o "
        r"jsonpath='{.spec.nodeSelector.cloud\.google\.com/gke-tpu-slice}'"
    ).stdout
    assert selector == rows[1].split()[0]
    shown = walk.lines(instance_status(0))
    assert shown[:2] == ["FIELD       VALUE", "state       Ready"], shown
    assert f"pod         slice={selector}" in shown


def test_multi_host_a_leader_and_a_worker_share_one_slice(walk: Shell) -> None:
    walk("kubectl apply -f config/samples/qwen3-tpu-multihost-isvc.yaml")
    walk(
        "kubectl wait --for=condition=Ready inferenceservice/qwen3-tpu-multihost -n qwen3-tpu "
        "--timeout=5m"
    )
    rows = walk.lines(
        "kubectl get slices.accelerator.gke.io -l "
        "cloud.google.com/slice-owner-name=qwen3-tpu-multihost-engine"
    )
    assert len(rows) == 2 and rows[1].split()[1:4] == ["tpu7x", "2x2x2", "ACTIVE"], rows
    walk("kubectl delete inferenceservice qwen3-tpu-multihost -n qwen3-tpu")


def test_metrics_at_the_printed_url(walk: Shell) -> None:
    url = walk.environment.metrics_url
    if url is None:
        pytest.skip("no metrics URL for this cluster (set OME_E2E_METRICS_URL)")
    shown = "curl -s http://127.0.0.1:40123/metrics | grep '^ome_tpu_slice'"
    README.shows(shown)
    out = walk.run(shown.replace("http://127.0.0.1:40123/metrics", url)).stdout
    created = re.search(
        r'^ome_tpu_slice_created_total\{slice_type="tpu7x",topology="2x2x1"\} (\S+)$', out, re.M
    )
    assert created and float(created.group(1)) >= 1.0, out
    assert 'ome_tpu_slice_lost_total{slice_type="tpu7x",topology="2x2x2"} 0.0' in out


# -- Troubleshooting (docs/troubleshooting.md) -----------------------------------------------


def test_component_reconcile_error_from_the_webhook_then_healed(trouble: Shell) -> None:
    trouble(chips(2))
    message = eventually(lambda: trouble.lines(events("ComponentReconcileError")), timeout=30)[0]
    assert message.endswith(
        "pods cannot be placed on a provisioned slice: 1 pod x 2 chips do not fill topology "
        "2x2x1: it is 4 chips on 1 host, which takes 2 pods"
    ), message
    trouble(chips(4))
    trouble(WAIT)


def test_slice_lost_when_deleted_from_outside_and_rebuilt(trouble: Shell) -> None:
    name = trouble.set(SLICE)
    uid = trouble.run(
        f"kubectl get pod qwen3-tpu-engine-0-default-0 -n {NS} -o jsonpath='{{.metadata.uid}}'"
    ).stdout
    trouble("kubectl delete slices.accelerator.gke.io $SLICE --wait=false")
    message = eventually(lambda: trouble.lines(events("SliceLost")), timeout=60)[0]
    assert message == (
        f"TPU slice {name} was deleted while pods qwen3-tpu-engine-0-default-0 ran on it; "
        "they are deleted so that their Instance is rebuilt"
    )

    def rebuilt() -> bool:
        proc = trouble.run(
            f"kubectl get pod qwen3-tpu-engine-0-default-0 -n {NS} -o jsonpath='{{.metadata.uid}}'",
            check=False,
        )
        return proc.returncode == 0 and proc.stdout not in ("", uid)

    eventually(rebuilt, timeout=60)
    trouble(WAIT)
    rows = trouble.lines("kubectl ome slices qwen3-tpu -n qwen3-tpu")
    assert len(rows) == 2 and rows[1].split()[2:8] == ["0", "0", name, "tpu7x", "2x2x1", "ACTIVE"]


def test_slice_ownership_conflict_with_a_foreign_slice_at_the_name(trouble: Shell) -> None:
    name = trouble.set(SLICE)
    foreign = f"qwen3-tpu-engine-1-0-{name.rsplit('-', 1)[1]}"
    trouble(
        TROUBLESHOOTING.block("kubectl create -f - <<EOF\napiVersion: accelerator.gke.io/v1beta1")
    )
    trouble(scale(2))
    message = eventually(lambda: trouble.lines(events("SliceOwnershipConflict")), timeout=60)[0]
    assert message == (
        "OMENative component=engine instance=1 withheld: slice is owned by another object: "
        f"{foreign}"
    )
    shown = trouble.lines(
        "kubectl get slices.accelerator.gke.io qwen3-tpu-engine-1-0-${SLICE##*-} --show-labels"
    )
    assert "team=other" in shown[1]
    # OME creates its own Slice at the name at once: kubectl's wait for the deletion could
    # take it for the foreign one and wait for it to go (the page says so).
    trouble(
        "kubectl delete slices.accelerator.gke.io qwen3-tpu-engine-1-0-${SLICE##*-} --wait=false"
    )
    trouble(WAIT)

    def two_ready() -> bool:
        row = trouble.lines("kubectl get inferencereplica qwen3-tpu-engine -n qwen3-tpu")[1].split()
        return row[4] == "2"

    eventually(two_ready, timeout=60)
    labels = trouble.run(f"kubectl get slices.accelerator.gke.io {foreign} --show-labels").stdout
    assert "ome.io/managed-by=OMENative" in labels, "OME's own Slice is at the name now"


def test_slice_release_deferred_while_another_workload_holds_chips(trouble: Shell) -> None:
    name = trouble.set(SLICE)
    second = f"qwen3-tpu-engine-1-0-{name.rsplit('-', 1)[1]}"
    trouble.set(
        "HOST=$(kubectl get nodes -l cloud.google.com/gke-tpu-slice=qwen3-tpu-engine-1-0-"
        "${SLICE##*-} -o jsonpath='{.items[0].metadata.name}')"
    )
    trouble("kubectl create namespace tpu-batch")
    trouble(TROUBLESHOOTING.block("kubectl create -n tpu-batch -f - <<EOF"))
    trouble(scale(1))
    message = eventually(lambda: trouble.lines(events("SliceReleaseDeferred")), timeout=60)[0]
    assert message == (
        f"TPU slice {second} is kept: pods of other workloads hold chips on its hosts "
        "(tpu-batch/indexer-0); it is released once they are gone"
    )
    assert second in trouble(OWNED).stdout
    trouble("kubectl delete namespace tpu-batch")
    eventually(lambda: second not in trouble(OWNED).stdout, timeout=60)
    assert name in trouble(OWNED).stdout


def test_pods_wait_for_a_slice_shown_by_kubectl_ome(trouble: Shell) -> None:
    """A ninth Instance on make run's 8-host pool: its Slice waits for its partition, and
    ``kubectl ome`` says so in the words of its lastFailure."""
    nodes = trouble.run(
        "kubectl get nodes -l cloud.google.com/gke-accelerator-topology-mode=PROVISION_ONLY "
        "--no-headers"
    ).stdout.splitlines()
    assert len(nodes) == 8, "the page counts on make run's 8 provision-only hosts"
    trouble(scale(9))

    def waiting() -> list[str]:
        rows = trouble.lines("kubectl ome slices qwen3-tpu -n qwen3-tpu")
        return [r for r in rows[1:] if r.split()[2] == "8" and "is waiting for partition" in r]

    (row,) = eventually(waiting, timeout=60)
    cells = row.split()
    assert cells[:4] == ["qwen3-tpu", "engine", "8", "0"] and cells[7:10] == [
        "<none>",
        "<none>",
        "0/1",
    ], row
    assert row.endswith(f"slice {cells[4]} is waiting for partition assignment"), row
    shown = trouble.lines(instance_status(8))
    assert "failure     reason=CapacityProvisioning" in shown, shown
    assert "op hold     waiting=CapacityProvisioning" in shown, shown
    assert "op timing   deadline=-" in shown, shown
    message = (
        "failure     message=CapacityProvisioning: pod qwen3-tpu-engine-8-default-0 is withheld "
        f"until its capacity is ready: slice {cells[4]} is waiting for partition assignment"
    )
    assert message in shown, shown
    # M7: once held a minute, the Instance is named in the service's condition, as the page
    # shows it (the Slice's hash aside); and dropped from it once it no longer waits.
    named = (
        "Message:               8 of 9 instances ready; instance 8 is withheld until its "
        f"capacity is ready: slice {cells[4]} is waiting for partition assignment"
    )
    page = TROUBLESHOOTING.line("    Message:               8 of 9 instances ready;").strip()
    assert page == named.replace(cells[4].rsplit("-", 1)[1], "8f3a21c7"), page
    eventually(lambda: named in [line.strip() for line in trouble.lines(DESCRIBE)], timeout=120)
    trouble(scale(1))
    eventually(
        lambda: len(trouble.lines("kubectl ome slices qwen3-tpu -n qwen3-tpu")) == 2, timeout=90
    )
    ready = "Message:               1 of 1 instances ready"
    eventually(lambda: ready in [line.strip() for line in trouble.lines(DESCRIBE)], timeout=60)


def test_an_orphaned_slice_is_released_by_ome(trouble: Shell) -> None:
    """G6: the replica's finalizer removed by force while its teardown waits for the pod: the
    Slice outlives the replica, is kept while the old pod is on it, then released by OME
    itself, as the log says; the service runs again on a new replica."""
    name = trouble.set(SLICE)
    pod = "kubectl patch pod qwen3-tpu-engine-0-default-0 -n qwen3-tpu --type merge -p "
    trouble(pod + '\'{"metadata":{"finalizers":["example.com/drain"]}}\'')
    uid = trouble.run(
        "kubectl get inferencereplica qwen3-tpu-engine -n qwen3-tpu -o jsonpath='{.metadata.uid}'"
    ).stdout
    trouble("kubectl delete inferencereplica qwen3-tpu-engine -n qwen3-tpu --wait=false")
    trouble(
        "kubectl patch inferencereplica qwen3-tpu-engine -n qwen3-tpu --type merge -p "
        '\'{"metadata":{"finalizers":null}}\''
    )
    shown = trouble.lines("kubectl get slices.accelerator.gke.io $SLICE -L ome.io/slice-owner-uid")
    assert shown[1].split()[0] == name and shown[1].split()[-1] == uid, shown
    kept = (
        f"orphaned TPU slice {name} (no InferenceReplica has its owner UID {uid}) is kept while "
        f"pods qwen3-tpu/qwen3-tpu-engine-0-default-0 run on it; it is released once they are "
        "gone"
    )
    log = trouble.environment.manager_log_text
    if log() is not None:
        eventually(lambda: kept in (log() or ""), timeout=60)
    assert not trouble.run(f"kubectl get slices.accelerator.gke.io {name} -o name").returncode
    trouble(pod + '\'{"metadata":{"finalizers":null}}\'')
    trouble("kubectl wait --for=delete slices.accelerator.gke.io/$SLICE --timeout=2m")
    trouble(WAIT)
    released = (
        f"released orphaned TPU slice {name}: no InferenceReplica has its owner UID {uid} (its "
        "owner was qwen3-tpu/qwen3-tpu-engine)"
    )
    if log() is not None:
        # Logged just after the manager's delete returns: the Slice may be seen gone first.
        eventually(lambda: released in (log() or ""), timeout=10)
        for line in (kept, released):
            page = TROUBLESHOOTING.line(line[: line.index(name)])
            assert page == line.replace(name.rsplit("-", 1)[1], "8f3a21c7").replace(
                uid, "6a1f2b3c-0000-4000-8000-000000000001"
            ), page
    assert name not in trouble(OWNED).stdout


def test_clean_up_leaves_no_slice(walk: Shell) -> None:
    walk("kubectl delete inferenceservice qwen3-tpu -n qwen3-tpu")
    walk("kubectl delete namespace qwen3-tpu")
    out = walk(OWNED)
    assert "No resources found" in out.stdout + out.stderr


# -- the two cases that need a Slice activating slowly ---------------------------------------


@pytest.fixture(scope="module")
def slow(slow_environment: Environment) -> Iterator[Shell]:
    """The troubleshooting page's last two cases, on the slower ``make run`` it starts."""
    TROUBLESHOOTING.shows('make run ARGS="--activation-delay 15s --slice-ready-timeout 45s"')
    shell = Shell(slow_environment, TROUBLESHOOTING)
    shell.export(PLUGIN_PATH)
    yield shell


def activating_slice(shell: Shell) -> str:
    """Apply the sample and return Instance 0's Slice, read again as the page says, once it
    has its partition."""
    shell(SAMPLE)
    name = eventually(
        lambda: shell.run(SLICE, check=False).returncode == 0 and shell.set(SLICE), timeout=30
    )
    eventually(
        lambda: (
            shell.run(
                f"kubectl get slices.accelerator.gke.io {name} -o "
                "jsonpath='{.spec.partitionIds[0]}'"
            ).stdout
        ),
        timeout=30,
    )
    return str(name)


def test_slice_host_unavailable_for_a_host_cordoned_while_activating(slow: Shell) -> None:
    name = activating_slice(slow)
    assert name in slow("kubectl get slices.accelerator.gke.io $SLICE").stdout
    host = slow.set(TROUBLESHOOTING.line("HOST=$(kubectl get nodes --no-headers"))
    slow("kubectl cordon $HOST")
    message = eventually(lambda: slow.lines(events("SliceHostUnavailable")), timeout=60)[0]
    assert message == (
        f"OMENative component=engine instance=0 withheld: slice {name} is ACTIVE, but node "
        f"{host} is cordoned; it is released and provisioned again once no pod holds it"
    )
    slow(WAIT)


def no_slices_owned(shell: Shell) -> bool:
    out = shell(OWNED, check=False)
    return "No resources found" in out.stdout + out.stderr


def test_slice_ready_timeout_for_a_slice_that_never_activates(slow: Shell) -> None:
    """Followed after the case before, as the page says: that case leaves an ACTIVE Slice,
    on which the knob does nothing, so the service is deleted and applied again first; its
    Slice then has a new name (a new replica), read again."""
    before = slow.vars.get("SLICE")
    slow("kubectl delete inferenceservice qwen3-tpu -n qwen3-tpu")
    # The replica and its Slices go after the service, by garbage collection and teardown: a
    # real control plane takes a moment, and the Slice read next must not be the old one.
    eventually(lambda: no_slices_owned(slow), timeout=90)
    name = activating_slice(slow)
    assert name != before, "a new replica's Slice has a new name"
    slow("kubectl annotate slices.accelerator.gke.io $SLICE sim.ome.io/stick-activating=true")
    message = eventually(lambda: slow.lines(events("SliceReadyTimeout")), timeout=60)[0]
    assert re.fullmatch(
        f"OMENative component=engine instance=0 withheld: slice {name} is ACTIVATING for "
        r"\S+, longer than the 10s ready timeout; it is released and provisioned again once no "
        "pod holds it",
        message,
    ), message
    slow(WAIT)


# -- what the manager did, against what config/rbac grants --------------------------------

#: Grants the walkthrough does not exercise, each with why it is still needed.
UNEXERCISED = {
    ("secrets", "create"): "the webhook Secret is created only when missing (config/webhook "
    "installs it)",
    ("inferencereplicas.ome.io", "delete"): "a component removed from a service; the walkthrough "
    "removes none (test/integration/test_omenative.py does)",
    **{
        (resource, "create"): "secure metrics: make run serves plain HTTP "
        "(--metrics-secure=false); test/e2e/test_metrics_auth.py scrapes them on kube-apiserver"
        for resource in (
            "tokenreviews.authentication.k8s.io",
            "subjectaccessreviews.authorization.k8s.io",
        )
    },
    **{
        ("leases.coordination.k8s.io", verb): "leader election: ome-sim run starts one manager "
        "without --leader-elect (the Deployment has it; test/integration/test_leader.py)"
        for verb in ("create", "get", "update")
    },
}


def test_the_manager_used_exactly_the_verbs_config_rbac_grants(walk: Shell) -> None:
    """The embedded server's request accounting, by User-Agent (``ome-manager/``), over the
    whole walkthrough: every verb the manager sent is granted, and every grant was used but
    for `UNEXERCISED`. A real control plane has no accounting; there the RBAC checks of
    test_rbac.py (kubectl auth can-i, a 403 on a verb taken away) stand for this one."""
    import yaml

    from test.unit.test_rbac import AUDIT

    env = walk.environment
    server = yaml.safe_load(env.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    if not server.startswith("http://"):
        pytest.skip("no request accounting on this server (the embedded one has it)")
    out = walk.run(f"curl -sf {server}/_sim/requests").stdout
    import json

    plurals = {key.split("/")[0].split(".")[0]: key.split("/")[0] for key in AUDIT}
    used: set[tuple[str, str]] = set()
    for row in json.loads(out)["requests"]:
        if not row["userAgent"].startswith("ome-manager/") or row["resource"].startswith("/"):
            continue  # another client, or discovery and other non-resource paths
        plural, _, sub = row["resource"].partition("/")
        resource = plurals.get(plural, plural) + (f"/{sub}" if sub else "")
        used.add((resource, row["verb"]))
    granted = {(resource, verb) for resource, verbs in AUDIT.items() for verb in verbs}
    assert used - granted == set(), "sent without a grant"
    assert granted - used - set(UNEXERCISED) == set(), "granted but never used"

"""``kubectl ome`` on the embedded cluster, with the simulated GKE provider and a manager:
the walkthrough's InferenceService and the multi-host sample brought into each state an operator
asks about, then read with the plugin as a user runs it (the ``kubectl-ome`` console script,
and through kubectl's plugin discovery).

For each state, ``instance status`` matches its golden files (``golden/kubectl_ome/``: table
and wide, times, ages and hashes masked), ``-o json`` parses, and the ``slices`` rows say what
each slot waits for in the words of the Instance's ``lastFailure`` or OME's event.

``OME_UPDATE_GOLDEN=1`` rewrites the golden files from what the plugin prints.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from ome.controllers.holds import hold_reason
from ome.controllers.inferencereplica import instances
from ome.controllers.slices import messages
from ome.provider import gke
from ome.runtime.rest import NODES
from test.cluster import Cluster, Kubectl
from test.helpers import eventually
from test.integration.test_slices import (
    Env,
    activating_host,
    env,
    hold_chips_on,
    make_env,
    opted,
    the_slice,
    tight,
    timing_out,
)

#: test_slices.py's fixtures: the walkthrough's pools (env), one provision-only host (tight), and a
#: 2 s ready timeout (timing_out).
__all__ = ["env", "tight", "timing_out"]

pytestmark = pytest.mark.kubectl

NS = "qwen3-tpu"
ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "config" / "samples"
GOLDEN = Path(__file__).parent / "golden" / "kubectl_ome"
PLUGIN = Path(sys.executable).parent / "kubectl-ome"
UPDATE = os.environ.get("OME_UPDATE_GOLDEN") == "1"

JSON = dict[str, Any]


def plugin(cluster: Cluster, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``kubectl-ome`` as a user runs it, with the cluster's kubeconfig."""
    proc = subprocess.run(
        [str(PLUGIN), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(cluster.home)},
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl-ome {' '.join(args)}: {proc.returncode}\n{proc.stderr}")
    return proc


@pytest.fixture(autouse=True)
def _prompt_rewording(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each state here is read once the hold's record says it. A hold is first recorded
    while its Slice is in an earlier state, and E7 lets a record stand 5 s before another
    wording of the same hold replaces it (30 s between two routine ones): a second here, so
    that a test waits for its state, not for those intervals."""
    monkeypatch.setattr(instances, "HOLD_REWORD_AFTER", timedelta(seconds=1))
    monkeypatch.setattr(instances, "HOLD_ROUTINE_REWORD_AFTER", timedelta(seconds=1))


def only_slot(env: Env, service: str) -> JSON:
    rows = slot_rows(env, service)
    assert len(rows) == 1, json.dumps(rows, indent=1)
    return rows[0]


def status(env: Env, name: str, index: int, *more: str) -> str:
    args = ["instance", "status", name, str(index), "--component", "engine", "-n", NS, *more]
    return plugin(env.cluster, *args).stdout


def slot_rows(env: Env, service: str) -> list[JSON]:
    """The rows of ``slices -o json``, a kubectl ``List``; ``-o yaml`` prints the same."""
    args = ("slices", service, "-n", NS, "-o")
    document = json.loads(plugin(env.cluster, *args, "json").stdout)
    assert {k: v for k, v in document.items() if k != "items"} == {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    }
    as_yaml = yaml.safe_load(plugin(env.cluster, *args, "yaml").stdout)
    assert as_yaml == document or (
        [r["slice"] for r in as_yaml["items"]] == [r["slice"] for r in document["items"]]
    )  # read twice: a row may change between the reads, not its slots
    return list(document["items"])


_MASKS = (
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z"), "<TIME>"),
    (re.compile(r"\b(start|progress|refused)=(?!-(?:\s|$))\S+"), r"\1=<AGE>"),
    (re.compile(r"\bdeadline=(?!-(?:\s|$))\S+"), "deadline=<LEFT>"),
    (re.compile(r"(-\d+-\d+-)[0-9a-f]{1,8}(?![0-9a-z])"), r"\1<HASH>"),
    (re.compile(r"\b[0-9a-f]{10}\b"), "<REV>"),
    (re.compile(r" for (?:\d+[hms])+, longer"), " for <WAITED>, longer"),
)


def masked(text: str) -> str:
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


def matches_golden(text: str, name: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(masked(text))
    assert masked(text) == path.read_text(), f"{name} differs from its golden file:\n{text}"


def check_state(env: Env, name: str, index: int, state: str, held: bool) -> JSON:
    """The acceptance of one state: golden table and wide output, the hold's rows while held,
    and ``-o json`` (also ``-o yaml``) parsing to the stored row. Returns the row."""
    table = status(env, name, index)
    wide = status(env, name, index, "-o", "wide")
    matches_golden(table, f"{state}.table.txt")
    matches_golden(wide, f"{state}.wide.txt")
    assert all(len(line) <= len("FIELD       ") + 64 for line in table.splitlines())
    if held:
        assert "failure     reason=CapacityProvisioning" in wide.splitlines()
        assert "op hold     waiting=CapacityProvisioning" in wide.splitlines()
        assert "OperationWaitingUnknown" not in wide
    document = json.loads(status(env, name, index, "-o", "json"))
    assert yaml.safe_load(status(env, name, index, "-o", "yaml")) == document
    assert document["instance"]["index"] == index
    return dict(document["instance"])


def hold_text(row: JSON) -> str:
    """The reason the Instance's hold records (E7), as ``lastFailure`` gives it."""
    reason = hold_reason(row["lastFailure"])
    assert reason is not None, row["lastFailure"]
    return reason


def held_row(env: Env, replica: str, contains: str) -> JSON:
    """Instance 0's row once its operation holds on CapacityProvisioning for a reason that
    contains ``contains``."""

    def check() -> JSON | None:
        rows = env.rows(replica)
        op = (rows[0].get("operation") or {}) if rows else {}
        failure = rows[0].get("lastFailure") or {} if rows else {}
        if op.get("waiting") == messages.CAPACITY and contains in failure.get("message", ""):
            return rows[0]
        return None

    return dict(eventually(check, timeout=60))


def apply_sample(env: Env, name: str) -> None:
    env.kubectl("apply", "-f", str(SAMPLES / name))


def wait_ready(env: Env, service: str) -> None:
    env.kubectl(
        "wait", "--for=condition=Ready", f"inferenceservice/{service}", "-n", NS, "--timeout=60s"
    )


# -- the states ---------------------------------------------------------------------------


def test_waiting_for_partition_while_the_pool_is_full(tight: Env) -> None:
    env = tight
    env.apply(opted("first"))
    eventually(lambda: (r := env.rows("first-engine")) and r[0]["phase"] == "Ready", timeout=60)
    apply_sample(env, "qwen3-tpu-isvc.yaml")
    row = held_row(env, "qwen3-tpu-engine", "is waiting for partition assignment")
    checked = check_state(env, "qwen3-tpu", 0, "pool-full", held=True)
    assert checked["operation"]["deadline"] is None
    slot = only_slot(env, "qwen3-tpu")
    assert slot["waiting"] == hold_text(row)
    assert slot["waiting"] == messages.waiting_for_partitions(slot["slice"])
    assert slot["state"] == "" and slot["partitions"] == [] and slot["pods"] == []


@pytest.fixture
def activating(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    """Slices stay ACTIVATING for an hour."""
    yield from make_env(cluster, kubectl, ["tpu7x:provision-only:4"], activation_delay=3600)


def test_a_multi_host_slice_activating(activating: Env) -> None:
    env = activating
    apply_sample(env, "qwen3-tpu-multihost-isvc.yaml")
    row = held_row(env, "qwen3-tpu-multihost-engine", "is ACTIVATING")
    check_state(env, "qwen3-tpu-multihost", 0, "activating", held=True)
    slot = only_slot(env, "qwen3-tpu-multihost")
    assert slot["waiting"] == hold_text(row) == f"slice {slot['slice']} is ACTIVATING"
    assert slot["topology"] == "2x2x2" and len(slot["partitions"]) == 2
    assert slot["hosts"] == {"ready": 0, "needed": 2}  # labelled once ACTIVE


@pytest.fixture
def slow(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    """Slices activate in 5 s: time to cordon a host while its Slice activates."""
    yield from make_env(cluster, kubectl, ["tpu7x:provision-only:2"], activation_delay=5.0)


def test_active_but_a_host_cordoned(slow: Env) -> None:
    """The Slice is ACTIVE with a cordoned host: OME withholds the pod and recycles the Slice
    once nothing holds it; a pod of another workload on that host keeps it where it is."""
    env = slow
    apply_sample(env, "qwen3-tpu-isvc.yaml")
    host = activating_host(env)[1]["metadata"]["name"]
    hold_chips_on(env, host)
    env.kubectl("cordon", host)
    row = held_row(env, "qwen3-tpu-engine", "is cordoned")
    eventually(lambda: env.events("SliceReleaseDeferred"), timeout=30)
    check_state(env, "qwen3-tpu", 0, "cordoned", held=True)
    slot = only_slot(env, "qwen3-tpu")
    assert (
        slot["waiting"]
        == hold_text(row)
        == messages.hosts_unavailable(slot["slice"], "ACTIVE", [f"node {host} is cordoned"])
    )
    assert slot["hosts"] == {"ready": 0, "needed": 1}
    assert slot["holders"] == ["tpu-batch/indexer-0"]
    (event,) = env.events("SliceHostUnavailable")
    assert event == messages.withheld("engine", 0, slot["waiting"])


def test_a_ready_timeout_recycle_in_progress(timing_out: Env) -> None:
    """A Slice stuck ACTIVATING past the ready timeout is released; while GKE holds it behind
    a finalizer (here, a test's), the slot waits for it to go."""
    env = timing_out
    apply_sample(env, "qwen3-tpu-isvc.yaml")
    first = the_slice(env)
    name = first["metadata"]["name"]
    env.kubectl(
        "patch", "slices.accelerator.gke.io", name, "--type=merge",
        "-p", '{"metadata":{"finalizers":["test.ome.io/keep"]}}',
    )  # fmt: skip
    env.kubectl("annotate", "slices.accelerator.gke.io", name, "sim.ome.io/stick-activating=true")
    (event,) = eventually(lambda: env.events("SliceReadyTimeout"), timeout=60)
    assert event.endswith("longer than the 2s ready timeout; " + messages.RECYCLED)
    row = held_row(env, "qwen3-tpu-engine", messages.being_released(name))
    check_state(env, "qwen3-tpu", 0, "ready-timeout", held=True)
    slot = only_slot(env, "qwen3-tpu")
    assert slot["waiting"] == hold_text(row) == messages.being_released(name)
    assert slot["state"] == "DEACTIVATING"
    assert env.rest.get(gke.SLICES, name)["metadata"]["uid"] == first["metadata"]["uid"]
    env.kubectl(
        "patch", "slices.accelerator.gke.io", name, "--type=json",
        "-p", '[{"op":"remove","path":"/metadata/finalizers"}]',
    )  # fmt: skip


def test_a_release_deferred_by_a_foreign_pod(env: Env) -> None:
    svc = yaml.safe_load_all((SAMPLES / "qwen3-tpu-isvc.yaml").read_text())
    service = next(d for d in svc if d["kind"] == "InferenceService")
    service["spec"]["engine"].update(minReplicas=2, maxReplicas=2)
    env.apply(service)
    wait_ready(env, "qwen3-tpu")
    eventually(lambda: len(env.slices()) == 2 and len(env.pods()) == 2, timeout=60)
    doomed = next(
        s for s in env.slices() if s["metadata"]["labels"]["ome.io/instance-index"] == "1"
    )
    name = doomed["metadata"]["name"]
    host = env.rest.list(NODES, label_selector=f"cloud.google.com/gke-tpu-slice={name}")["items"][
        0
    ]["metadata"]["name"]
    hold_chips_on(env, host)
    apply_sample(env, "qwen3-tpu-isvc.yaml")  # back to one Instance
    event = eventually(lambda: env.events("SliceReleaseDeferred"), timeout=30)[0]
    eventually(lambda: len(env.pods()) == 1, timeout=30)
    check_state(env, "qwen3-tpu", 0, "release-deferred", held=False)
    kept, gone = slot_rows(env, "qwen3-tpu")
    assert (kept["instance"], kept["waiting"], kept["state"]) == (0, "", "ACTIVE")
    assert (gone["instance"], gone["slice"]) == (1, name)
    assert gone["waiting"] == event == messages.release_deferred(name, ["tpu-batch/indexer-0"])
    assert gone["holders"] == ["tpu-batch/indexer-0"] and gone["pods"] == []
    wide = plugin(env.cluster, "slices", "-n", NS, "-o", "wide").stdout
    header, *lines = wide.splitlines()
    assert header.split()[-2:] == ["HOLDERS", "OWNER-UID"]
    assert lines[1].split()[-2:] == [
        "tpu-batch/indexer-0",
        doomed["metadata"]["labels"]["ome.io/slice-owner-uid"],
    ]
    assert lines[1].split()[:5] == ["qwen3-tpu", "engine", "1", "0", name]


def test_ready(env: Env) -> None:
    apply_sample(env, "qwen3-tpu-isvc.yaml")
    wait_ready(env, "qwen3-tpu")
    row = check_state(env, "qwen3-tpu", 0, "ready", held=False)
    assert row["phase"] == "Ready"
    slot = only_slot(env, "qwen3-tpu")
    assert slot["waiting"] == "" and slot["state"] == "ACTIVE"
    assert slot["pods"] == [{"name": "qwen3-tpu-engine-0-default-0", "phase": "Running"}]
    assert slot["hosts"] == {"ready": 1, "needed": 1}
    table = plugin(env.cluster, "slices", "-n", NS).stdout.splitlines()
    assert table[0].split() == [
        "SERVICE", "COMPONENT", "INSTANCE", "ORDINAL", "SLICE", "TYPE", "TOPOLOGY", "STATE",
        "PARTITIONS", "HOSTS", "AGE", "PODS", "WAITING",
    ]  # fmt: skip
    cells = table[1].split()
    assert cells[:5] == ["qwen3-tpu", "engine", "0", "0", slot["slice"]]
    assert cells[5:8] == ["tpu7x", "2x2x1", "ACTIVE"]
    assert cells[9] == "1/1" and cells[11] == "qwen3-tpu-engine-0-default-0(Running)"
    assert len(cells) == 12  # WAITING is empty
    # -A adds the namespace; the kubeconfig context's namespace is the default one.
    everywhere = plugin(env.cluster, "slices", "-A").stdout.splitlines()
    assert everywhere[0].split()[0] == "NAMESPACE" and everywhere[1].split()[0] == NS
    nothing = plugin(env.cluster, "slices")
    assert (
        nothing.stdout == ""
        and nothing.stderr == "No TPU slice slots found in namespace default.\n"
    )
    # A context's namespace is the default one, as kubectl's is; --context picks a context.
    copy = env.cluster.home / "kubeconfig-ns"
    shutil.copy(env.cluster.kubeconfig, copy)
    doc = yaml.safe_load(copy.read_text())
    current = next(c for c in doc["contexts"] if c["name"] == doc["current-context"])["context"]
    env.kubectl(
        "config", "set-context", "in-ns", "--kubeconfig", str(copy), "--namespace", NS,
        "--cluster", current["cluster"], "--user", current["user"],
    )  # fmt: skip
    by_context = plugin(env.cluster, "--kubeconfig", str(copy), "--context", "in-ns", "slices")
    assert by_context.stdout.splitlines()[1].split()[:5] == cells[:5]
    env.kubectl("config", "use-context", "in-ns", "--kubeconfig", str(copy))
    args = ("instance", "status", "qwen3-tpu", "0", "--component", "engine")
    in_ns = plugin(env.cluster, *args, "--kubeconfig", str(copy))
    assert in_ns.stdout.splitlines()[:2] == ["FIELD       VALUE", "state       Ready"]


def test_a_surge_update_has_two_slices_for_one_instance(tight: Env) -> None:
    env = tight
    apply_sample(env, "qwen3-tpu-isvc.yaml")
    wait_ready(env, "qwen3-tpu")
    env.kubectl(
        "patch", "inferenceservice", "qwen3-tpu", "-n", NS, "--type=merge",
        "-p", '{"spec":{"engine":{"runner":{"image":"registry.example/sglang-tpu:v2"}}}}',
    )  # fmt: skip
    row = held_row(env, "qwen3-tpu-engine", "is waiting for partition assignment")
    assert row["lastFailure"]["podName"] == "qwen3-tpu-engine-0-default-1"
    check_state(env, "qwen3-tpu", 0, "surge", held=True)
    old, surge = slot_rows(env, "qwen3-tpu")
    assert (old["ordinal"], old["state"], old["waiting"]) == (0, "ACTIVE", "")
    assert old["pods"] == [{"name": "qwen3-tpu-engine-0-default-0", "phase": "Running"}]
    assert surge["ordinal"] == 1 and surge["waiting"] == hold_text(row)
    assert surge["waiting"] == messages.waiting_for_partitions(surge["slice"])


# -- as a plugin, and its errors ------------------------------------------------------------


def test_kubectl_finds_the_plugin_on_path(env: Env) -> None:
    apply_sample(env, "qwen3-tpu-isvc.yaml")
    wait_ready(env, "qwen3-tpu")
    kubectl = shutil.which("kubectl")
    assert kubectl is not None
    path = f"{PLUGIN.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    run_env = {
        **os.environ,
        "PATH": path,
        "HOME": str(env.cluster.home),
        "KUBECONFIG": str(env.cluster.kubeconfig),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [kubectl, *args], capture_output=True, text=True, env=run_env, timeout=60, check=True
        )

    listed = run("plugin", "list").stdout
    assert str(PLUGIN) in listed
    assert "instance" in run("ome", "--help").stdout
    out = run("ome", "instance", "status", "qwen3-tpu", "0", "--component", "engine", "-n", NS)
    assert out.stdout == status(env, "qwen3-tpu", 0)
    assert out.stdout.splitlines()[1].split() == ["state", "Ready"]


def test_bad_arguments_get_one_line_and_exit_1(env: Env, tmp_path: Path) -> None:
    apply_sample(env, "qwen3-tpu-isvc.yaml")
    wait_ready(env, "qwen3-tpu")
    garbage = tmp_path / "garbage"
    garbage.write_text("{not: [a kubeconfig")
    closed = tmp_path / "closed"  # a kubeconfig whose server listens nowhere
    doc = yaml.safe_load(env.cluster.kubeconfig.read_text())
    for entry in doc["clusters"]:
        entry["cluster"]["server"] = "https://127.0.0.1:1"
    closed.write_text(yaml.safe_dump(doc))
    contexts = [c["name"] for c in doc["contexts"]]
    cases = {
        ("instance", "status", "nope", "0", "--component", "engine", "-n", NS): (
            'error: inferenceservice "nope" not found in namespace "qwen3-tpu"'
        ),
        ("instance", "status", "qwen3-tpu", "0", "--component", "decoder", "-n", NS): (
            'error: inferenceservice "qwen3-tpu" has no component "decoder" (no '
            'inferencereplica "qwen3-tpu-decoder" in namespace "qwen3-tpu")'
        ),
        ("instance", "status", "qwen3-tpu", "7", "--component", "engine", "-n", NS): (
            'error: component "engine" of inferenceservice "qwen3-tpu" has no instance 7 '
            "(instances: 0)"
        ),
        ("instance", "status", "qwen3-tpu", "--component", "engine"): (
            "error: the following arguments are required: INDEX "
            "(see 'kubectl ome instance status --help')"
        ),
        ("instance", "status", "qwen3-tpu", "x", "--component", "engine"): (
            "error: argument INDEX: INDEX must be a non-negative integer, not 'x' "
            "(see 'kubectl ome instance status --help')"
        ),
        ("slices", "nope", "-n", NS): (
            'error: inferenceservice "nope" not found in namespace "qwen3-tpu"'
        ),
        ("slices", "-o", "xml"): (
            "error: argument -o/--output: invalid choice: 'xml' (choose from 'table', 'wide', "
            "'json', 'yaml') (see 'kubectl ome slices --help')"
        ),
        ("completion", "fish"): (
            "error: argument SHELL: invalid choice: 'fish' (choose from 'bash', 'zsh') "
            "(see 'kubectl ome completion --help')"
        ),
        ("--kubeconfig", str(garbage), "slices"): None,
        ("--kubeconfig", str(tmp_path / "missing"), "slices"): None,
        ("--context", "nosuch", "slices"): (
            f'error: context "nosuch" is not in {env.cluster.kubeconfig} (its contexts: '
            f"{', '.join(contexts)})"
        ),
        ("--kubeconfig", str(closed), "--context", "nosuch", "slices"): (
            f'error: context "nosuch" is not in {closed} (its contexts: {", ".join(contexts)})'
        ),
        ("--kubeconfig", str(closed), "slices", "-n", NS): (
            "error: cannot reach the API server at https://127.0.0.1:1: Failed to establish a "
            "new connection: [Errno 111] Connection refused"
        ),
        ("-A", "instance", "status", "qwen3-tpu", "0", "--component", "engine"): (
            "error: instance status reads one namespace: drop -A"
        ),
        ("slices", "qwen3-tpu", "-A"): (
            "error: ISVC names a service of one namespace: drop -A, or use -n"
        ),
        ("slices", "--ome-namespace", "elsewhere"): (
            "error: configmap elsewhere/inferenceservice-config not found: TPU slice "
            "provisioning is off, or OME runs in another namespace (--ome-namespace)"
        ),
    }
    for args, expected in cases.items():
        proc = plugin(env.cluster, *args, check=False)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert proc.stdout == "", args
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, proc.stderr)
        if expected is not None:
            assert lines[0] == expected, args
    for args in (
        ("--help",),
        ("instance", "--help"),
        ("instance", "status", "--help"),
        ("slices", "--help"),
        ("completion", "--help"),
    ):
        proc = plugin(env.cluster, *args)
        assert proc.stdout.startswith("usage: kubectl ome"), args
    assert "-w, --watch" in plugin(env.cluster, "slices", "--help").stdout
    assert "{table,wide,json,yaml}" in plugin(env.cluster, "slices", "--help").stdout
    assert "completion" in plugin(env.cluster, "--help").stdout


def test_instance_status_needs_no_component_when_the_service_has_one(env: Env) -> None:
    apply_sample(env, "qwen3-tpu-isvc.yaml")
    wait_ready(env, "qwen3-tpu")
    alone = plugin(env.cluster, "instance", "status", "qwen3-tpu", "0", "-n", NS).stdout
    assert alone == status(env, "qwen3-tpu", 0)  # the same as with --component engine
    assert alone.splitlines()[1].split() == ["state", "Ready"]
    docs = yaml.safe_load_all((SAMPLES / "qwen3-tpu-isvc.yaml").read_text())
    service = next(d for d in docs if d["kind"] == "InferenceService")
    service["metadata"]["name"] = "two-part"
    service["spec"]["decoder"] = service["spec"]["engine"]
    env.apply(service)
    proc = plugin(env.cluster, "instance", "status", "two-part", "0", "-n", NS, check=False)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        'error: inferenceservice "two-part" has components engine, decoder: choose one with '
        "--component\n"
    )

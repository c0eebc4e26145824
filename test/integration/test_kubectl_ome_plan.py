"""``kubectl ome plan -f FILE`` on the embedded cluster (the walkthrough's pools: 4
provision-only hosts, 2 static), with the simulated GKE provider and a manager serving its
admission webhook, run as a user runs the plugin: a service that fits; one that would wait
(more Instances than free hosts); one refused, with the very text the webhook refuses its
replica with when the same manifest is applied; a multi-host engine. Each plan is asserted
whole (golden text) with its exit code; the plan writes nothing; bad arguments give one line
and exit 1.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from ome.api.v1beta1 import INFERENCE_REPLICAS
from ome.tpuslice import naming
from test.cluster import Cluster, Kubectl
from test.helpers import eventually
from test.integration.test_kubectl_ome import NS, PLUGIN
from test.integration.test_slices import Env, make_env, opted

pytestmark = pytest.mark.kubectl

JSON = dict[str, Any]

WEBHOOK = "inferencereplica.ome.io"
HEADER = (
    "COMPONENT   REPLICA            ACCELERATOR   TOPOLOGY   HOSTS   CHIPS   INSTANCES   "
    "NEEDED   FREE   SURGE   PLAN"
)
LEGEND = (
    "<hash>: not known yet: the first 8 hex characters of SHA-256 of <namespace>/<name>/<uid> "
    "of the InferenceReplica, whose UID the API server gives on create\n"
)


@pytest.fixture
def env(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    yield from make_env(
        cluster, kubectl, ["tpu7x:provision-only:4", "tpu7x:static:2"], webhook=True
    )


def run(env: Env, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``kubectl-ome`` as a user runs it, with the cluster's kubeconfig (and ``stdin``)."""
    return subprocess.run(
        [str(PLUGIN), "--kubeconfig", str(env.cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
        env={**os.environ, "HOME": str(env.cluster.home)},
    )


def plan(env: Env, service: JSON, code: int) -> str:
    """The plan of ``service`` read from standard input, with its exit status ``code``; it
    writes nothing."""
    before = env.cluster.server.accounting.writes("kubectl-ome")
    proc = run(env, "plan", "-f", "-", stdin=json.dumps(service))
    assert (proc.returncode, proc.stderr) == (code, ""), proc.stderr
    assert env.cluster.server.accounting.writes("kubectl-ome") == before
    return proc.stdout


def test_a_service_that_fits_and_the_slice_it_gets(env: Env, tmp_path: Any) -> None:
    svc = opted()
    assert plan(env, svc, 0) == (
        f"{HEADER}\n"
        "engine      qwen3-tpu-engine   tpu7x         2x2x1      1       4       1           "
        "1        4      fits    fits\n"
        "\n"
        "INSTANCE                  SLOT   SLICE                         HOSTS   FREE   FITS\n"
        "qwen3-tpu-engine[0]       0,0    qwen3-tpu-engine-0-0-<hash>   1       4      yes\n"
        "qwen3-tpu-engine[surge]   0,1    qwen3-tpu-engine-0-1-<hash>   1       3      yes\n"
        "\n"
        f"{LEGEND}"
    )
    manifest = tmp_path / "svc.yaml"
    manifest.write_text(json.dumps(svc))
    by_file = run(env, "plan", "--filename", str(manifest))
    assert (by_file.returncode, by_file.stdout) == (0, plan(env, svc, 0))
    assert env.rest.list(INFERENCE_REPLICAS, NS)["items"] == []

    env.apply(svc)
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    uid = env.rest.get(INFERENCE_REPLICAS, "qwen3-tpu-engine", NS)["metadata"]["uid"]
    hash8 = naming.owner_hash(NS, "qwen3-tpu-engine", uid)
    assert [s["metadata"]["name"] for s in env.slices()] == [f"qwen3-tpu-engine-0-0-{hash8}"]


def test_more_instances_than_free_hosts_would_wait(env: Env) -> None:
    svc = opted(minReplicas=5, maxReplicas=5)
    assert plan(env, svc, 2) == (
        f"{HEADER}\n"
        "engine      qwen3-tpu-engine   tpu7x         2x2x1      1       4       5           "
        "5        4      waits   waits\n"
        "\n"
        "INSTANCE                  SLOT   SLICE                         HOSTS   FREE   FITS\n"
        "qwen3-tpu-engine[0]       0,0    qwen3-tpu-engine-0-0-<hash>   1       4      yes\n"
        "qwen3-tpu-engine[1]       1,0    qwen3-tpu-engine-1-0-<hash>   1       3      yes\n"
        "qwen3-tpu-engine[2]       2,0    qwen3-tpu-engine-2-0-<hash>   1       2      yes\n"
        "qwen3-tpu-engine[3]       3,0    qwen3-tpu-engine-3-0-<hash>   1       1      yes\n"
        "qwen3-tpu-engine[4]       4,0    qwen3-tpu-engine-4-0-<hash>   1       0      no\n"
        "qwen3-tpu-engine[surge]   0,1    qwen3-tpu-engine-0-1-<hash>   1       0      no\n"
        "\n"
        f"{LEGEND}"
    )


def test_a_refusal_is_the_webhooks_own_text(env: Env) -> None:
    svc = opted()
    limits = {"google.com/tpu": 2}
    svc["spec"]["engine"]["runner"]["resources"] = {"requests": limits, "limits": limits}
    refusal = (
        f"InferenceReplica {NS}/qwen3-tpu-engine: pods cannot be placed on a provisioned slice: "
        "1 pod x 2 chips do not fill topology 2x2x1: it is 4 chips on 1 host, which takes 2 pods"
    )
    assert plan(env, svc, 1) == (
        "COMPONENT   REPLICA            ACCELERATOR   TOPOLOGY   HOSTS    CHIPS    INSTANCES   "
        "NEEDED   FREE     SURGE    PLAN\n"
        "engine      qwen3-tpu-engine   <none>        <none>     <none>   <none>   1           "
        "<none>   <none>   <none>   refused\n"
        "\n"
        f"engine: refused: {refusal}\n"
    )
    env.apply(svc)

    def denied() -> list[str]:
        return env.events("ComponentReconcileError")

    (message,) = eventually(denied, timeout=30)
    assert message.endswith(f'admission webhook "{WEBHOOK}" denied the request: {refusal}'), message


def test_a_multi_host_engine(env: Env) -> None:
    svc = opted(leader={}, worker={"size": 1}, minReplicas=2, maxReplicas=2)
    svc["spec"]["engine"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] = "2x2x2"
    assert plan(env, svc, 0) == (
        f"{HEADER}\n"
        "engine      qwen3-tpu-engine   tpu7x         2x2x2      2       8       2           "
        "4        4      waits   fits\n"
        "\n"
        "INSTANCE                  SLOT   SLICE                         HOSTS   FREE   FITS\n"
        "qwen3-tpu-engine[0]       0,0    qwen3-tpu-engine-0-0-<hash>   2       4      yes\n"
        "qwen3-tpu-engine[1]       1,0    qwen3-tpu-engine-1-0-<hash>   2       2      yes\n"
        "qwen3-tpu-engine[surge]   2,0    qwen3-tpu-engine-2-0-<hash>   2       0      no\n"
        "\n"
        f"{LEGEND}"
    )


@pytest.mark.parametrize(
    ("args", "stdin", "line"),
    [
        (
            (),
            None,
            "error: the following arguments are required: -f/--filename "
            "(see 'kubectl ome plan --help')\n",
        ),
        (
            ("-f", "/nonexistent/svc.yaml"),
            None,
            "error: cannot read /nonexistent/svc.yaml: No such file or directory\n",
        ),
        (("-f", "-"), "a: [b", "error: standard input is not YAML or JSON: "),
        (
            ("-f", "-"),
            json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
            "error: standard input holds Pod, not an ome.io/v1beta1 InferenceService\n",
        ),
        (
            ("-f", "-"),
            "",
            "error: standard input holds 0 objects: plan reads one InferenceService\n",
        ),
    ],
)
def test_bad_arguments_are_one_line_and_exit_1(
    env: Env, args: tuple[str, ...], stdin: str | None, line: str
) -> None:
    proc = run(env, "plan", *args, stdin=stdin)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr.startswith(line) and proc.stderr.count("\n") == 1, proc.stderr


def test_help(env: Env) -> None:
    proc = run(env, "plan", "--help")
    assert proc.returncode == 0 and proc.stderr == ""
    # Python 3.13's argparse names the metavar once ("-f, --filename FILE"), earlier ones twice.
    assert re.search(r"-f( FILE)?, --filename FILE", proc.stdout), proc.stdout
    assert (
        "Exit status: 0 when everything fits, 2 when an Instance would wait for capacity, 1 "
        "when it would be refused." in " ".join(proc.stdout.split())
    )

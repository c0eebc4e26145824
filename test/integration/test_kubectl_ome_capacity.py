"""``kubectl ome capacity`` on the embedded cluster, with the simulated GKE provider and a
manager, read with the plugin as a user runs it: an empty pool; a pool with OME's Slice, a
foreign Slice, a cordoned and a not-ready host; a full pool with an Instance waiting for
capacity. Each table is asserted whole (golden text; the wait, the one thing that moves, is
masked), with its exit code; and bad arguments give one line and exit 1.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from ome.provider import gke
from ome.runtime.rest import NODES
from test.helpers import eventually
from test.integration.test_kubectl_ome import NS, plugin
from test.integration.test_slices import Env, env, opted, tight

#: test_slices.py's fixtures: the walkthrough's pools (env: 4 provision-only hosts, 2 static)
#: and one provision-only host (tight).
__all__ = ["env", "tight"]

pytestmark = pytest.mark.kubectl

JSON = dict[str, Any]

HEADER = (
    "ACCELERATOR   TOPOLOGY   HOSTS   OME   FOREIGN   FREE   CORDONED   NOT-READY   "
    "UNREACHABLE   IDLE-CHIPS   WAITING   LONGEST-WAIT"
)
#: The same, with a row whose OME cell is ``ACTIVE=1``.
HEADER_ACTIVE = HEADER.replace("OME   ", "OME        ")


def capacity(env: Env, *args: str) -> str:
    proc = plugin(env.cluster, "capacity", *args)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout


def listed(env: Env, *args: str) -> list[JSON]:
    """The rows of ``capacity -o json``, a kubectl ``List``; ``-o yaml`` prints the same (but
    for the waits, which grow between the two reads)."""
    document = json.loads(capacity(env, *args, "-o", "json"))
    assert document["kind"] == "List" and document["apiVersion"] == "v1"
    assert still(yaml.safe_load(capacity(env, *args, "-o", "yaml"))) == still(document)
    return list(document["items"])


def still(document: JSON) -> JSON:
    """``document`` without the waits' seconds."""
    items = [
        {
            **row,
            "longestWaitSeconds": None,
            "waiting": [{**w, "waitedSeconds": None} for w in row["waiting"]],
        }
        for row in document["items"]
    ]
    return {**document, "items": items}


def provision_only_hosts(env: Env) -> list[str]:
    nodes = env.rest.list(NODES)["items"]
    return sorted(
        n["metadata"]["name"]
        for n in nodes
        if n["metadata"]["labels"].get("cloud.google.com/gke-accelerator-topology-mode")
        == "PROVISION_ONLY"
    )


def slice_of(env: Env, host: str) -> str:
    labels = env.rest.get(NODES, host)["metadata"].get("labels") or {}
    return str(labels.get("cloud.google.com/gke-tpu-slice", ""))


def test_an_empty_pool_is_all_free(env: Env) -> None:
    table = capacity(env)
    assert table == (
        f"{HEADER}\n"
        "tpu7x         <none>     4       0     0         4      0          0           "
        "0             0            0         <none>\n"
    )
    assert capacity(env, "--accelerator", "tpu7x") == table
    hosts = provision_only_hosts(env)
    (row,) = listed(env)
    assert row == {
        "accelerator": "tpu7x",
        "topology": "",
        "hosts": hosts,
        "omeSlices": [],
        "foreign": [],
        "free": hosts,
        "cordoned": [],
        "notReady": [],
        "unreachable": [],
        "idleChips": 0,
        "idleSlices": [],
        "waiting": [],
        "longestWaitSeconds": None,
    }
    wide = capacity(env, "-o", "wide").splitlines()
    assert wide[0].split()[12:] == [
        "OME-HOSTS",
        "FOREIGN-HOSTS",
        "FREE-HOSTS",
        "UNUSABLE-HOSTS",
        "IDLE-SLICES",
        "WAITING-INSTANCES",
    ]
    assert wide[1].split()[12:] == ["<none>", "<none>", ",".join(hosts)] + ["<none>"] * 3


def test_ours_a_foreign_slice_a_cordoned_and_a_not_ready_host(env: Env) -> None:
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    env.rest.create(
        gke.SLICES,
        {
            "apiVersion": "accelerator.gke.io/v1beta1",
            "kind": "Slice",
            "metadata": {"name": "batch-slice", "labels": {"team": "batch"}},
            "spec": {"type": "tpu7x", "topology": "2x2x1", "partitionIds": []},
        },
    )
    hosts = provision_only_hosts(env)
    foreign = eventually(
        lambda: next((h for h in hosts if slice_of(env, h) == "batch-slice"), None), timeout=30
    )
    ours = next(h for h in hosts if slice_of(env, h).startswith("qwen3-tpu-engine-0-0-"))
    cordoned, broken = (h for h in hosts if h not in (foreign, ours))
    env.kubectl("cordon", cordoned)
    env.kubectl("annotate", "node", broken, "sim.ome.io/not-ready=true")
    eventually(
        lambda: (
            next(
                c["status"]
                for c in env.rest.get(NODES, broken)["status"]["conditions"]
                if c["type"] == "Ready"
            )
            == "False"
        ),
        timeout=30,
    )

    assert capacity(env) == (
        f"{HEADER_ACTIVE}\n"
        "tpu7x         <none>     2       0          0         0      1          1           "
        "0             0            0         <none>\n"
        "tpu7x         2x2x1      2       ACTIVE=1   1         0      0          0           "
        "0             0            0         <none>\n"
    )
    wide = capacity(env, "-o", "wide").splitlines()
    assert wide[1].split()[12:] == [
        "<none>",
        "<none>",
        "<none>",
        f"{broken}(not-ready),{cordoned}(cordoned)"
        if broken < cordoned
        else f"{cordoned}(cordoned),{broken}(not-ready)",
        "<none>",
        "<none>",
    ]
    assert wide[2].split()[12:] == [f"{ours}(ACTIVE)", foreign] + ["<none>"] * 4
    free, sliced = listed(env)
    assert (free["cordoned"], free["notReady"], free["free"]) == ([cordoned], [broken], [])
    assert sliced["omeSlices"] == [{"state": "ACTIVE", "hosts": [ours]}]
    assert (sliced["foreign"], sliced["idleChips"]) == ([foreign], 0)


def test_a_full_pool_with_an_instance_waiting(tight: Env) -> None:
    env = tight
    env.apply(opted("first"))
    eventually(lambda: (r := env.rows("first-engine")) and r[0]["phase"] == "Ready", timeout=60)
    env.apply(opted("second"))
    eventually(
        lambda: (
            (r := env.rows("second-engine"))
            and (r[0].get("operation") or {}).get("waiting") == "CapacityProvisioning"
        ),
        timeout=30,
    )
    table = capacity(env)
    assert re.sub(r"\d+[smhdy][0-9smhdy]*$", "<WAIT>", table, flags=re.M) == (
        f"{HEADER_ACTIVE}\n"
        "tpu7x         <none>     0       0          0         0      0          0           "
        "0             0            0         <none>\n"
        "tpu7x         2x2x1      1       ACTIVE=1   0         0      0          0           "
        "0             0            1         <WAIT>\n"
    )
    (host,) = provision_only_hosts(env)
    wide = capacity(env, "-o", "wide").splitlines()
    assert wide[2].split()[12:] == [
        f"{host}(ACTIVE)",
        "<none>",
        "<none>",
        "<none>",
        "<none>",
        f"{NS}/second-engine[0]",
    ]
    _, row = listed(env)
    (waiter,) = row["waiting"]
    assert (waiter["inferenceReplica"], waiter["instance"]) == ("second-engine", 0)
    assert row["longestWaitSeconds"] == max(w["waitedSeconds"] for w in row["waiting"]) >= 0


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("--accelerator", "v9"),
            'error: accelerator "v9" is not configured (configured: tpu7x)\n',
        ),
        (
            ("-o", "tree"),
            "error: argument -o/--output: invalid choice: 'tree' (choose from 'table', 'wide', "
            "'json', 'yaml') (see 'kubectl ome capacity --help')\n",
        ),
        (("extra",), "error: unrecognized arguments: extra (see 'kubectl ome --help')\n"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_1(env: Env, args: tuple[str, ...], line: str) -> None:
    proc = plugin(env.cluster, "capacity", *args, check=False)
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", line)


def test_help_names_the_columns(env: Env) -> None:
    proc = plugin(env.cluster, "capacity", "--help")
    assert proc.returncode == 0 and proc.stderr == ""
    assert "--accelerator ACCELERATOR" in proc.stdout and "provision-only" in proc.stdout

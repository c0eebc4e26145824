"""The simulated GKE provider seen through kubectl alone: the pool's nodes, and a Slice
that goes from no state to ACTIVE, labels its hosts and unlabels them when deleted."""

from __future__ import annotations

import json

from test.e2e.conftest import Environment
from test.helpers import eventually

POOL = "cloud.google.com/gke-tpu-accelerator=tpu7x,cloud.google.com/gke-accelerator-topology-mode=PROVISION_ONLY"

SLICE = {
    "apiVersion": "accelerator.gke.io/v1beta1",
    "kind": "Slice",
    "metadata": {"name": "e2e-slice"},
    "spec": {"type": "tpu7x", "topology": "2x2x2", "partitionIds": []},
}


def test_the_pool_lists_its_provision_only_nodes(environment: Environment) -> None:
    names = environment.kubectl("get", "nodes", "-l", POOL, "-o", "name").stdout.split()
    assert len(names) >= 2 and all(n.startswith("node/") for n in names)


def test_a_slice_becomes_active_labels_its_hosts_and_unlabels_them_on_delete(
    environment: Environment,
) -> None:
    k = environment.kubectl
    k("apply", "-f", "-", input=json.dumps(SLICE))
    k(
        "wait",
        "slice/e2e-slice",
        "--for=jsonpath={.status.conditions[0].reason}=ACTIVE",
        "--timeout=60s",
    )
    partitions = json.loads(
        k("get", "slice", "e2e-slice", "-o", "jsonpath={.spec.partitionIds}").stdout
    )
    assert len(partitions) == 2
    row = k("get", "slices", "e2e-slice").stdout.splitlines()
    assert row[0].split()[:4] == ["NAME", "TYPE", "TOPOLOGY", "STATE"]
    assert row[1].split()[:4] == ["e2e-slice", "tpu7x", "2x2x2", "ACTIVE"]
    # GKE labels the hosts once the Slice is active: the labels may trail the state a moment.
    hosts = eventually(
        lambda: (
            len(
                labelled := k(
                    "get", "nodes", "-l", "cloud.google.com/gke-tpu-slice=e2e-slice", "-o", "name"
                ).stdout.split()
            )
            == 2
            and labelled
        )
    )
    assert len(set(hosts)) == 2
    k("delete", "slice", "e2e-slice", "--timeout=60s")
    assert (
        k(
            "get", "nodes", "-l", "cloud.google.com/gke-tpu-slice=e2e-slice", "-o", "name"
        ).stdout.split()
        == []
    )

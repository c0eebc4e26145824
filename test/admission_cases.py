"""The InferenceReplica admission cases (J2), as plain data: the unit tests run
them on the pure decision, the integration tests through the API server and the webhook."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

NS = "qwen3-tpu"
NAME = "qwen3-tpu-engine"
E = "pods cannot be placed on a provisioned slice"
OPT_IN = {"ome.io/tpu-slice-provisioning": "true"}


def runner(
    name: str = "default",
    chips: int = 4,
    topology: str = "2x2x1",
    opted: bool = True,
    size: int | None = None,
) -> JSON:
    template: JSON = {
        "metadata": {"annotations": dict(OPT_IN)} if opted else {},
        "spec": {
            "nodeSelector": {
                "cloud.google.com/gke-tpu-accelerator": "tpu7x",
                "cloud.google.com/gke-tpu-topology": topology,
            },
            "tolerations": [
                {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [
                {
                    "name": "ome-container",
                    "image": "registry.example/sglang-tpu:v1",
                    "resources": {
                        "requests": {"google.com/tpu": chips},
                        "limits": {"google.com/tpu": chips},
                    },
                }
            ],
        },
    }
    out: JSON = {"name": name, "template": template}
    out["size"] = 1 if size is None else size
    return out


def replica(*runners: JSON, replicas: int = 1) -> JSON:
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceReplica",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {"component": "engine", "replicas": replicas, "runners": list(runners)},
    }


VALID = replica(runner())
IDLE_CHIPS = replica(runner(chips=2))
IDLE_CHIPS_REASON = (
    f"{E}: 1 pod x 2 chips do not fill topology 2x2x1: it is 4 chips on 1 host, which takes 2 pods"
)


@dataclass(frozen=True)
class Case:
    id: str
    operation: str  # CREATE | UPDATE
    new: JSON
    old: JSON | None = None
    #: "provision-only": tpu7x has provision-only nodes; "static": only static tpu7x nodes;
    #: "fail": the node read fails.
    nodes: str = "provision-only"
    configured: bool = True
    allowed: bool = True
    reason: str = ""  # the demand error of a denial, after "InferenceReplica <ns>/<name>: "
    reads_nodes: bool = True

    @property
    def message(self) -> str:
        return f"InferenceReplica {NS}/{NAME}: {self.reason}" if self.reason else ""


def _scaled(obj: JSON, replicas: int) -> JSON:
    out = copy.deepcopy(obj)
    out["spec"]["replicas"] = replicas
    return out


CASES = [
    Case("create-valid", "CREATE", VALID),
    Case("create-idle-chips", "CREATE", IDLE_CHIPS, allowed=False, reason=IDLE_CHIPS_REASON),
    Case(
        "leader-and-2-workers-overfill-2x2x2",
        "CREATE",
        replica(runner("leader", topology="2x2x2"), runner("worker", topology="2x2x2", size=2)),
        allowed=False,
        reason=(
            f"{E}: 3 pods x 4 chips do not fill topology 2x2x2: it is 8 chips on 2 hosts, "
            "which takes 2 pods"
        ),
    ),
    Case(
        "topology-not-provisionable",
        "CREATE",
        replica(runner(topology="4x4x4")),
        allowed=False,
        reason=(
            f'{E}: topology 4x4x4 is not provisionable for accelerator "tpu7x"; '
            "provisionable: 2x2x1, 2x2x2"
        ),
    ),
    Case("not-opted-in", "CREATE", replica(runner(chips=2, opted=False)), reads_nodes=False),
    Case(
        "only-the-worker-annotated",
        "CREATE",
        replica(
            runner("leader", topology="2x2x2", opted=False),
            runner("worker", topology="2x2x2", size=2),
        ),
        reads_nodes=False,
    ),
    Case("static-pool", "CREATE", IDLE_CHIPS, nodes="static"),
    Case("no-config", "CREATE", IDLE_CHIPS, configured=False, reads_nodes=False),
    Case("node-read-failure", "CREATE", IDLE_CHIPS, nodes="fail"),
    Case(
        "update-introduces-the-problem",
        "UPDATE",
        IDLE_CHIPS,
        old=VALID,
        allowed=False,
        reason=IDLE_CHIPS_REASON,
    ),
    Case("update-of-an-invalid-object", "UPDATE", replica(runner(chips=3)), old=IDLE_CHIPS),
    Case("scale-only-update", "UPDATE", _scaled(IDLE_CHIPS, 2), old=IDLE_CHIPS, reads_nodes=False),
]

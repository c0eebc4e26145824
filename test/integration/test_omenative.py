"""The OMENative chain on the embedded cluster with the simulated provider's static pool,
scheduler and kubelet: InferenceService -> InferenceReplica -> Instances -> pods."""

from __future__ import annotations

import copy
import json
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from ome.api.v1beta1 import (
    CLUSTER_SERVING_RUNTIMES,
    CONTROLLER_REVISIONS,
    INFERENCE_REPLICAS,
    INFERENCE_SERVICES,
)
from ome.controllers.holds import Gated, Hold
from ome.controllers.inferencereplica.controller import Hooks
from ome.controllers.setup import setup_controllers
from ome.runtime.certs import generate_ca, issue_serving_cert
from ome.runtime.manager import Manager, ManagerOptions
from ome.runtime.rest import NAMESPACES, PODS, Rest
from ome_sim.gke.model import parse_pools
from ome_sim.gke.provider import Options, Provider, install_slice_crd
from test.cluster import Cluster, Kubectl
from test.helpers import eventually, gone
from test.webhooks import WebhookServer, config, deny, webhook

JSON = dict[str, Any]
NS = "qwen3-tpu"
TPU = {
    "cloud.google.com/gke-tpu-accelerator": "tpu7x",
    "cloud.google.com/gke-tpu-topology": "2x2x1",
}
TOLERATION = [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
RUNTIME = {
    "apiVersion": "ome.io/v1beta1",
    "kind": "ClusterServingRuntime",
    "metadata": {"name": "srt-qwen3-tpu"},
    "spec": {
        "supportedModelFormats": [{"name": "safetensors", "autoSelect": True}],
        "engineConfig": {
            "runner": {
                "name": "ome-container",
                "image": "registry.example/sglang-tpu:v1",
                "args": ["--model-path", "/mnt/models"],
            }
        },
    },
}
MODEL = {
    "apiVersion": "ome.io/v1beta1",
    "kind": "ClusterBaseModel",
    "metadata": {"name": "qwen3-0-6b"},
    "spec": {
        "modelFormat": {"name": "safetensors"},
        "storage": {"storageUri": "hf://Qwen/Qwen3-0.6B"},
    },
}


def isvc(name: str = "qwen3-tpu", **engine: Any) -> JSON:
    """The walkthrough's Step 2 InferenceService, without the opt-in annotation."""
    component = {
        "minReplicas": 1,
        "maxReplicas": 1,
        "nodeSelector": dict(TPU),
        "tolerations": copy.deepcopy(TOLERATION),
        "runner": {
            "name": "ome-container",
            "resources": {"requests": {"google.com/tpu": 4}, "limits": {"google.com/tpu": 4}},
        },
    }
    component.update(engine)
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "deploymentMode": "OMENative",
            "model": {"name": "qwen3-0-6b"},
            "runtime": {"name": "srt-qwen3-tpu"},
            "engine": component,
        },
    }


@dataclass
class Env:
    cluster: Cluster
    rest: Rest
    kubectl: Kubectl
    holds: dict[int, str]

    def apply(self, obj: JSON) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def pods(self) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.rest.list(PODS, NS)["items"])

    def replica(self, name: str = "qwen3-tpu-engine") -> JSON:
        return self.rest.get(INFERENCE_REPLICAS, name, NS)

    def rows(self, name: str = "qwen3-tpu-engine") -> list[JSON]:
        try:
            replica = self.replica(name)
        except ApiException as e:
            if e.status == 404:
                return []  # not projected yet
            raise
        return list((replica.get("status") or {}).get("instanceStatuses") or [])

    def ready(self, name: str = "qwen3-tpu-engine", count: int = 1) -> bool:
        rows = self.rows(name)
        return len(rows) == count and all(r["phase"] == "Ready" for r in rows)

    def condition(self, name: str, ctype: str) -> JSON | None:
        obj = self.rest.get(INFERENCE_SERVICES, name, NS)
        return next(
            (c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype),
            None,
        )


@pytest.fixture
def env(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    kubectl("apply", "-f", "config/crd/")
    rest = Rest(cluster.api)
    install_slice_crd(rest)
    provider = Provider(
        rest, parse_pools(["tpu7x:static:4"]), Options(heartbeat_interval=5, scheduler="on")
    )
    provider.start()
    holds: dict[int, str] = {}

    def test_gate(_replica: JSON, pending: Mapping[int, list[JSON]]) -> Gated:
        return Gated({i: Hold(t, "a test holds it") for i in pending if (t := holds.get(i))})

    manager = Manager(
        rest,
        ManagerOptions(
            namespace="default", metrics_bind_address="0", health_probe_bind_address="0"
        ),
        registry=CollectorRegistry(),
    )
    setup_controllers(manager, Hooks(gates=[test_gate]))
    stop = threading.Event()
    thread = threading.Thread(target=manager.run, args=(stop,), daemon=True)
    thread.start()
    rest.create(NAMESPACES, {"metadata": {"name": NS}})
    e = Env(cluster, rest, kubectl, holds)
    e.apply(RUNTIME)
    e.apply(MODEL)
    try:
        yield e
    finally:
        stop.set()
        thread.join(30)
        provider.stop()


def test_the_guides_service_runs_one_pod_and_becomes_ready(env: Env) -> None:
    env.apply(isvc())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    pod = env.rest.get(PODS, "qwen3-tpu-engine-0-default-0", NS)
    assert pod["spec"]["nodeSelector"] == TPU
    assert {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"][
        "tolerations"
    ]
    container = pod["spec"]["containers"][0]
    assert container["image"] == "registry.example/sglang-tpu:v1", (
        "the runtime's image is merged in"
    )
    assert container["resources"]["limits"]["google.com/tpu"] in (4, "4")
    assert pod["status"]["phase"] == "Running"
    labels = pod["metadata"]["labels"]
    assert labels["ome.io/inferenceservice"] == "qwen3-tpu" and labels["component"] == "engine"
    assert labels["ome.io/managed-by"] == "OMENative" and labels["ome.io/instance-index"] == "0"
    assert labels["ome.io/runner"] == "default" and labels["ome.io/pod-ordinal"] == "0"
    assert labels["ome.io/revision-hash"]
    out = env.kubectl("get", "inferencereplica", "-n", NS).stdout.splitlines()
    assert out[0].split() == [
        "NAME",
        "COMPONENT",
        "DESIRED",
        "CURRENT",
        "READY",
        "AVAILABLE",
        "AGE",
    ]
    assert out[1].split()[:6] == ["qwen3-tpu-engine", "engine", "1", "1", "1", "1"]
    revisions = env.rest.list(CONTROLLER_REVISIONS, NS)["items"]
    assert len(revisions) == 1


def test_a_leader_and_a_worker_form_one_instance(env: Env) -> None:
    env.apply(isvc(leader={}, worker={"size": 1}))
    eventually(env.ready, timeout=60)
    assert env.pods() == ["qwen3-tpu-engine-0-leader-0", "qwen3-tpu-engine-0-worker-0"]


def test_a_single_pod_update_surges_at_the_other_ordinal(env: Env) -> None:
    env.apply(isvc())
    eventually(env.ready, timeout=60)
    changed = isvc()
    changed["spec"]["engine"]["runner"]["image"] = "registry.example/sglang-tpu:v2"
    env.apply(changed)
    eventually(lambda: "qwen3-tpu-engine-0-default-1" in env.pods(), timeout=30)
    eventually(lambda: env.pods() == ["qwen3-tpu-engine-0-default-1"], timeout=60)
    eventually(lambda: env.ready() and env.rows()[0]["activeOrdinal"] == 1, timeout=30)
    pod = env.rest.get(PODS, "qwen3-tpu-engine-0-default-1", NS)
    assert pod["spec"]["containers"][0]["image"] == "registry.example/sglang-tpu:v2"


def test_a_multi_pod_update_surges_to_a_new_index(env: Env) -> None:
    env.apply(isvc(leader={}, worker={"size": 1}))
    eventually(env.ready, timeout=60)
    changed = isvc(leader={}, worker={"size": 1})
    changed["spec"]["engine"]["runner"]["image"] = "registry.example/sglang-tpu:v2"
    env.apply(changed)
    eventually(lambda: "qwen3-tpu-engine-1-leader-0" in env.pods(), timeout=30)
    eventually(
        lambda: env.pods() == ["qwen3-tpu-engine-1-leader-0", "qwen3-tpu-engine-1-worker-0"],
        timeout=60,
    )
    eventually(lambda: env.ready() and env.rows()[0]["index"] == 1, timeout=30)


def scaled(replicas: int) -> JSON:
    svc = isvc()
    svc["spec"]["engine"].update(minReplicas=replicas, maxReplicas=replicas)
    return svc


def test_scaling_up_and_down_keeps_the_lowest_indexes(env: Env) -> None:
    env.apply(isvc())
    eventually(env.ready, timeout=60)
    env.apply(scaled(3))
    eventually(lambda: env.ready(count=3), timeout=60)
    assert [r["index"] for r in env.rows()] == [0, 1, 2]
    env.apply(scaled(1))
    eventually(
        lambda: env.ready(count=1) and env.pods() == ["qwen3-tpu-engine-0-default-0"], timeout=60
    )
    assert [r["index"] for r in env.rows()] == [0]


def test_kubectl_scale_moves_replicas_within_min_and_max(env: Env) -> None:
    svc = isvc()
    svc["spec"]["engine"].update(minReplicas=1, maxReplicas=2)
    env.apply(svc)
    eventually(env.ready, timeout=60)
    env.kubectl("scale", "inferencereplica", "qwen3-tpu-engine", "-n", NS, "--replicas=2")
    eventually(lambda: env.ready(count=2), timeout=60)
    env.kubectl("scale", "inferencereplica", "qwen3-tpu-engine", "-n", NS, "--replicas=5")
    eventually(lambda: env.replica()["spec"]["replicas"] == 2, timeout=30)  # held at maxReplicas


def test_deleting_the_service_or_its_namespace_leaves_nothing(env: Env) -> None:
    env.apply(isvc())
    eventually(env.ready, timeout=60)
    env.kubectl("delete", "inferenceservice", "qwen3-tpu", "-n", NS, "--timeout=60s")
    eventually(lambda: gone(env.replica) and env.pods() == [], timeout=60)
    env.apply(isvc("second"))
    eventually(lambda: env.ready("second-engine"), timeout=60)
    env.kubectl("delete", "namespace", NS, "--timeout=90s")
    eventually(lambda: gone(lambda: env.rest.get(NAMESPACES, NS)), timeout=60)


def test_a_hold_parks_the_deadline_and_its_release_restarts_it(env: Env) -> None:
    env.holds[0] = "TestHold"
    svc = isvc()
    # Its pod will find no node, so the Instance stays short of Ready and the restarted
    # deadline can be read after the hold ends.
    svc["spec"]["engine"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] = "9x9x9"
    env.apply(svc)
    replica = eventually(lambda: env.rows() and env.replica(), timeout=30)
    env.rest.patch(
        INFERENCE_REPLICAS,
        "qwen3-tpu-engine",
        {"spec": {"lifecycle": {"instanceReadyTimeout": "10m"}}},
        NS,
    )
    held = eventually(
        lambda: (
            (r := env.rows())
            and r[0]["operation"]
            and r[0]["operation"]["waiting"] == "TestHold"
            and r[0]
        ),
        timeout=30,
    )
    assert held["operation"]["deadline"] is None, "parked while held"
    assert held["lastFailure"]["reason"] == "TestHold"
    assert held["lastFailure"]["podName"] == "qwen3-tpu-engine-0-default-0"
    assert env.pods() == [], "the pods are withheld"
    del env.holds[0]
    env.rest.patch(
        INFERENCE_REPLICAS, "qwen3-tpu-engine", {"metadata": {"annotations": {"poke": "1"}}}, NS
    )
    running = eventually(
        lambda: (r := env.rows()) and r[0]["operation"] and r[0]["operation"]["deadline"] and r[0],
        timeout=30,
    )
    assert running["operation"]["waiting"] is None
    assert replica is not None


def test_a_killed_pod_rebuilds_its_instance(env: Env) -> None:
    env.apply(isvc())
    eventually(env.ready, timeout=60)
    pod = env.rest.get(PODS, "qwen3-tpu-engine-0-default-0", NS)
    env.rest.delete(PODS, pod["metadata"]["name"], NS, grace_period_seconds=0)
    row = eventually(lambda: (r := env.rows()) and r[0]["incarnation"] == 1 and r[0], timeout=30)
    assert row["lastFailure"]["podName"] == "qwen3-tpu-engine-0-default-0"
    eventually(env.ready, timeout=60)
    new = env.rest.get(PODS, "qwen3-tpu-engine-0-default-0", NS)
    assert new["metadata"]["uid"] != pod["metadata"]["uid"]


def test_a_replica_made_anew_gets_its_pod_once_its_predecessors_pod_is_gone(env: Env) -> None:
    """A replica removed by force (deleted, its finalizer stripped) while its pod is held
    terminating (a finalizer, as a long grace period): its service makes a new one at once,
    whose pod's name the old pod still holds. The create is refused (AlreadyExists) by a pod
    that is not the new replica's; once that pod is gone, the new replica creates its own
    within seconds (not after its expectations time out)."""
    env.apply(isvc())
    eventually(env.ready, timeout=60)
    name = "qwen3-tpu-engine-0-default-0"
    old = env.rest.patch(PODS, name, {"metadata": {"finalizers": ["example.com/drain"]}}, NS)
    replica = env.replica()
    env.rest.delete(INFERENCE_REPLICAS, "qwen3-tpu-engine", NS)
    env.rest.patch(INFERENCE_REPLICAS, "qwen3-tpu-engine", {"metadata": {"finalizers": None}}, NS)
    eventually(
        lambda: env.rows() and env.replica()["metadata"]["uid"] != replica["metadata"]["uid"]
    )
    # The new replica has tried its pod: refused while the old one terminates.
    eventually(lambda: env.rest.get(PODS, name, NS)["metadata"].get("deletionTimestamp"))
    eventually(lambda: (r := env.rows()) and r[0].get("podCount") == 1, timeout=30)
    env.rest.patch(PODS, name, {"metadata": {"finalizers": None}}, NS)
    eventually(env.ready, timeout=30)
    new = env.rest.get(PODS, name, NS)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["metadata"]["ownerReferences"][0]["uid"] == env.replica()["metadata"]["uid"]


def test_a_pod_that_loses_and_regains_readiness_leaves_its_instance_ready(env: Env) -> None:
    env.apply(isvc())
    eventually(env.ready, timeout=60)
    first = env.rows()[0]
    node = env.rest.get(PODS, "qwen3-tpu-engine-0-default-0", NS)["spec"]["nodeName"]
    env.kubectl("annotate", "node", node, "sim.ome.io/not-ready=true")  # the pod goes unready
    row = eventually(lambda: (r := env.rows()) and r[0]["servingPodCount"] == 0 and r[0])
    assert row["phase"] == "Creating" and row["readySince"] is None
    assert row["operation"] is None and row["incarnation"] == 0, "no rebuild for a blip"
    env.kubectl("annotate", "node", node, "sim.ome.io/not-ready-")
    row = eventually(lambda: (r := env.rows()) and r[0]["phase"] == "Ready" and r[0])
    assert row["servingPodCount"] == 1 and row["readySince"] >= first["readySince"]
    assert row["incarnation"] == 0


@pytest.mark.parametrize(
    ("change", "reason", "text"),
    [
        (
            {"runtime": {"name": "no-such-runtime"}},
            "RuntimeNotFound",
            'runtime "no-such-runtime" not found',
        ),
        (
            {"deploymentMode": "RawDeployment"},
            "UnsupportedDeploymentMode",
            'deploymentMode "RawDeployment" is not supported',
        ),
    ],
)
def test_bad_service_specs_get_a_clear_condition(
    env: Env, change: JSON, reason: str, text: str
) -> None:
    svc = isvc()
    svc["spec"].update(change)
    env.apply(svc)
    cond = eventually(lambda: env.condition("qwen3-tpu", "Ready"), timeout=30)
    assert cond["status"] == "False" and cond["reason"] == reason and text in cond["message"]


@pytest.mark.parametrize(
    ("engine", "text"),
    [
        ({"leader": {}, "worker": {"size": -1}}, "worker.size must be a whole number >= 0, not -1"),
        ({"runner": None}, "no runner"),
    ],
)
def test_bad_components_get_a_clear_condition_and_event(env: Env, engine: JSON, text: str) -> None:
    svc = isvc(**engine)
    if engine.get("runner", "keep") is None:
        del svc["spec"]["engine"]["runner"]
        env.rest.patch(
            CLUSTER_SERVING_RUNTIMES, "srt-qwen3-tpu", {"spec": {"engineConfig": {"runner": None}}}
        )
    env.apply(svc)
    cond = eventually(lambda: env.condition("qwen3-tpu", "EngineReady"), timeout=30)
    assert cond["status"] == "False" and text in cond["message"]
    # The Warning is written in the background: wait for it, and for its text.
    messages = eventually(
        lambda: env.kubectl(
            "get",
            "events",
            "-n",
            NS,
            "--field-selector",
            "reason=InvalidSpec",
            "-o",
            'jsonpath={range .items[*]}{.message}{"\\n"}{end}',
        ).stdout.strip(),
        timeout=30,
    )
    assert text in messages
    assert env.condition("qwen3-tpu", "Ready")["status"] == "False"


def test_a_refused_replica_write_is_a_component_reconcile_error(env: Env) -> None:
    ca = generate_ca("test-ca")
    server = WebhookServer(
        issue_serving_cert(ca, ["localhost"], ["127.0.0.1"]), Path(tempfile.mkdtemp())
    )
    server.start()
    try:
        server.responders["/deny"] = deny(
            {"message": "pods cannot be placed on a provisioned slice: nope"}
        )
        hook = webhook(
            "irep.ome.io",
            f"https://127.0.0.1:{server.port}/deny",
            ca,
            rules=[
                {
                    "operations": ["CREATE", "UPDATE"],
                    "apiGroups": ["ome.io"],
                    "apiVersions": ["v1beta1"],
                    "resources": ["inferencereplicas"],
                }
            ],
        )
        env.apply(config("irep", hook))
        env.apply(isvc())
        out = eventually(
            lambda: env.kubectl(
                "get",
                "events",
                "-n",
                NS,
                "--field-selector",
                "reason=ComponentReconcileError",
                "-o",
                'jsonpath={range .items[*]}{.message}{"\\n"}{end}',
            ).stdout.strip(),
            timeout=30,
        )
        assert out.splitlines()[0].endswith(
            'admission webhook "irep.ome.io" denied the request: '
            "pods cannot be placed on a provisioned slice: nope"
        )
        cond = eventually(lambda: env.condition("qwen3-tpu", "EngineReady"), timeout=30)
        assert cond["reason"] == "ComponentReconcileError"
    finally:
        server.stop()


def test_a_component_removed_from_the_spec_loses_its_replica(env: Env) -> None:
    """The router's replica goes once the router leaves the spec (after the live service
    confirms it), and the engine it never concerned runs on."""
    both = isvc()
    both["spec"]["router"] = copy.deepcopy(both["spec"]["engine"])
    env.apply(both)
    eventually(lambda: env.ready() and env.ready("qwen3-tpu-router"), timeout=60)
    engine_pods = [p for p in env.pods() if "-engine-" in p]
    env.kubectl(
        "patch",
        "inferenceservice",
        "qwen3-tpu",
        "-n",
        NS,
        "--type=json",
        "-p",
        '[{"op": "remove", "path": "/spec/router"}]',
    )
    eventually(lambda: gone(lambda: env.replica("qwen3-tpu-router")), timeout=60)
    assert env.ready() and [p for p in env.pods() if "-engine-" in p] == engine_pods

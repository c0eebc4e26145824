"""OME's generated CRDs on the embedded API server, through kubectl and the official client:
they install, explain, accept the sample InferenceService strictly, print the InferenceReplica
columns, scale, and keep unknown container fields of runners."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from test.cluster import Cluster, Kubectl
from test.helpers import eventually
from test.manifests import served

from ome.api import crdgen, v1beta1

pytestmark = pytest.mark.kubectl

CONFIG = Path(__file__).resolve().parents[3] / "config" / "crd"

JSON = dict[str, Any]

# The walkthrough's Step 2 InferenceService (config/samples/qwen3-tpu-isvc.yaml), verbatim.
GUIDE_ISVC = """\
apiVersion: ome.io/v1beta1
kind: InferenceService
metadata:
  name: qwen3-tpu
  namespace: qwen3-tpu
spec:
  deploymentMode: OMENative
  model:
    name: qwen3-0-6b
  runtime:
    name: srt-qwen3-tpu
  engine:
    minReplicas: 1
    maxReplicas: 1
    annotations:
      ome.io/tpu-slice-provisioning: "true"
    nodeSelector:
      cloud.google.com/gke-tpu-accelerator: tpu7x
      cloud.google.com/gke-tpu-topology: 2x2x1
    tolerations:
      - key: google.com/tpu
        operator: Exists
        effect: NoSchedule
    runner:
      name: ome-container
      resources:
        requests:
          google.com/tpu: 4
        limits:
          google.com/tpu: 4
"""


def _install(kubectl: Kubectl, cluster: Cluster) -> str:
    out = kubectl("apply", "-f", f"{CONFIG}/").stdout
    for kind in v1beta1.KINDS:
        served(cluster, crdgen.crd(kind))
    return out


def _replica(name: str = "qwen3-tpu-engine", replicas: int = 1) -> JSON:
    return {
        "apiVersion": v1beta1.API_VERSION,
        "kind": "InferenceReplica",
        "metadata": {"name": name},
        "spec": {
            "component": "engine",
            "replicas": replicas,
            "runners": [
                {
                    "name": "default",
                    "size": 1,
                    "template": {
                        "metadata": {
                            "labels": {v1beta1.LABEL_COMPONENT: "engine"},
                            "annotations": {v1beta1.ANNOTATION_TPU_SLICE_PROVISIONING: "true"},
                        },
                        "spec": {
                            "containers": [
                                {
                                    "name": "ome-container",
                                    "image": "srt:latest",
                                    "readinessProbe": {"httpGet": {"path": "/health"}},
                                }
                            ]
                        },
                    },
                }
            ],
            "lifecycle": {"instanceReadyTimeout": "10m", "teardownTimeout": "5m"},
        },
    }


@pytest.mark.conformance
def test_kubectl_apply_installs_all_six_crds(cluster: Cluster, kubectl: Kubectl) -> None:
    out = _install(kubectl, cluster)
    names = sorted(kind.crd_name for kind in v1beta1.KINDS)
    for name in names:
        assert f"customresourcedefinition.apiextensions.k8s.io/{name} created" in out
    listed = kubectl("get", "crd", "-o", "name").stdout.split()
    assert sorted(n.split("/", 1)[1] for n in listed if n.endswith(".ome.io")) == names
    # The kustomization installs the same six.
    again = kubectl("apply", "-k", f"{CONFIG}/").stdout.splitlines()
    assert sorted(line.split()[0].split("/", 1)[1] for line in again) == names
    # kube-apiserver stores a CRD as Go structs, which drop the generated
    # ``x-kubernetes-embedded-resource: false`` of inferencereplicas: kubectl then finds the
    # stored object different from the file and says "configured" (the embedded server too).
    assert all(line.endswith((" unchanged", " configured")) for line in again), again
    status, body, _ = cluster.request("GET", "/apis/ome.io/v1beta1")
    assert status == 200
    served = {r["name"] for r in body["resources"]}
    assert "inferencereplicas/scale" in served
    for kind in v1beta1.KINDS:
        assert {kind.resource.plural, f"{kind.resource.plural}/status"} <= served
    for short in ("bm", "cbm", "sr", "csr", "isvc", "irep"):
        assert kubectl("get", short, "-A").returncode == 0


def test_the_files_are_what_the_generator_builds() -> None:
    for kind in v1beta1.KINDS:
        text = (CONFIG / crdgen.file_name(kind)).read_text()
        assert yaml.safe_load(text) == crdgen.crd(kind)


@pytest.mark.conformance
def test_kubectl_explain_prints_descriptions(cluster: Cluster, kubectl: Kubectl) -> None:
    _install(kubectl, cluster)

    def explained() -> str:
        # kube-apiserver publishes a new CRD's OpenAPI a moment after serving it.
        out = kubectl("explain", "inferencereplica.spec.runners", check=False)
        return out.stdout if out.returncode == 0 else ""

    out = eventually(explained, timeout=30, interval=0.2)
    assert "The pods of an Instance" in out
    for field in ("name", "size", "template"):
        assert f"  {field}\t" in out
    assert "default (the one pod of a single-pod Instance), leader or worker." in out
    out = kubectl("explain", "inferenceservice.spec.engine").stdout
    assert "The engine component: it serves the model." in out
    for field in ("minReplicas", "maxReplicas", "runner", "leader", "worker", "tolerations"):
        assert f"  {field}\t" in out
    out = kubectl("explain", "irep.status.instanceStatuses.operation.deadline").stdout
    assert "null while parked" in out


@pytest.mark.conformance
def test_the_guides_inference_service_applies_strictly(cluster: Cluster, kubectl: Kubectl) -> None:
    _install(kubectl, cluster)
    kubectl("create", "namespace", "qwen3-tpu")
    out = kubectl("apply", "-f", "-", input=GUIDE_ISVC).stdout
    assert out.strip() == "inferenceservice.ome.io/qwen3-tpu created"
    stored = cluster.custom().get_namespaced_custom_object(
        "ome.io", "v1beta1", "qwen3-tpu", "inferenceservices", "qwen3-tpu"
    )
    assert stored["spec"] == yaml.safe_load(GUIDE_ISVC)["spec"], "nothing was pruned"
    # Strict validation is on: a misspelt field is refused, not dropped.
    typo = GUIDE_ISVC.replace("minReplicas", "minReplica")
    result = kubectl("apply", "-f", "-", input=typo, check=False)
    assert result.returncode != 0
    assert 'unknown field "spec.engine.minReplica"' in result.stderr
    lines = kubectl("get", "isvc", "-n", "qwen3-tpu").stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "AGE"]
    lines = kubectl("get", "isvc", "-n", "qwen3-tpu", "-o", "wide").stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "REASON", "AGE"]


@pytest.mark.conformance
def test_inference_replica_columns(cluster: Cluster, kubectl: Kubectl) -> None:
    _install(kubectl, cluster)
    custom = cluster.custom()
    custom.create_namespaced_custom_object(
        "ome.io", "v1beta1", "default", "inferencereplicas", _replica()
    )
    custom.patch_namespaced_custom_object_status(
        "ome.io",
        "v1beta1",
        "default",
        "inferencereplicas",
        "qwen3-tpu-engine",
        {"status": {"replicas": 1, "readyReplicas": 0, "availableReplicas": 0}},
    )
    out = kubectl("get", "inferencereplica").stdout.splitlines()
    assert out[0].split() == [
        "NAME",
        "COMPONENT",
        "DESIRED",
        "CURRENT",
        "READY",
        "AVAILABLE",
        "AGE",
    ]
    assert out[1].split()[:6] == ["qwen3-tpu-engine", "engine", "1", "1", "0", "0"]


@pytest.mark.conformance
def test_kubectl_scale_goes_through_the_scale_subresource(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    _install(kubectl, cluster)
    custom = cluster.custom()
    custom.create_namespaced_custom_object(
        "ome.io", "v1beta1", "default", "inferencereplicas", _replica("x")
    )
    selector = "ome.io/inferenceservice=qwen3-tpu,component=engine"
    custom.patch_namespaced_custom_object_status(
        "ome.io",
        "v1beta1",
        "default",
        "inferencereplicas",
        "x",
        {"status": {"replicas": 1, "selector": selector}},
    )
    out = kubectl("scale", "inferencereplica", "x", "--replicas=3").stdout
    assert out.strip() == "inferencereplica.ome.io/x scaled"
    obj = custom.get_namespaced_custom_object(
        "ome.io", "v1beta1", "default", "inferencereplicas", "x"
    )
    assert obj["spec"]["replicas"] == 3 and obj["metadata"]["generation"] == 2
    scale = custom.get_namespaced_custom_object_scale(
        "ome.io", "v1beta1", "default", "inferencereplicas", "x"
    )
    assert scale["spec"]["replicas"] == 3
    assert scale["status"] == {"replicas": 1, "selector": selector}


@pytest.mark.conformance
def test_scale_below_zero_is_refused(cluster: Cluster, kubectl: Kubectl) -> None:
    _install(kubectl, cluster)
    body = _replica("neg", replicas=-1)
    result = kubectl("apply", "-f", "-", input=json.dumps(body), check=False)
    assert result.returncode != 0 and "spec.replicas" in result.stderr
    body = _replica("empty")
    body["spec"]["runners"] = []
    result = kubectl("apply", "-f", "-", input=json.dumps(body), check=False)
    assert result.returncode != 0 and "spec.runners" in result.stderr


@pytest.mark.conformance
def test_unknown_runner_container_fields_are_preserved(cluster: Cluster, kubectl: Kubectl) -> None:
    _install(kubectl, cluster)
    probe = {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 5}
    runner = {
        "name": "ome-container",
        "image": "srt:latest",
        "readinessProbe": probe,
        "securityContext": {"privileged": False},
        "resources": {"limits": {"google.com/tpu": 4, "memory": "16Gi"}},
    }
    isvc = yaml.safe_load(GUIDE_ISVC)
    isvc["metadata"]["namespace"] = "default"
    isvc["spec"]["engine"]["runner"] = runner
    isvc["spec"]["engine"]["leader"] = {"runner": runner}
    isvc["spec"]["engine"]["worker"] = {"size": 1, "runner": runner}
    kubectl("apply", "-f", "-", input=json.dumps(isvc))
    stored = cluster.custom().get_namespaced_custom_object(
        "ome.io", "v1beta1", "default", "inferenceservices", "qwen3-tpu"
    )
    engine = stored["spec"]["engine"]
    assert engine["runner"] == runner
    assert engine["leader"]["runner"] == runner and engine["worker"]["runner"] == runner

    runtime = {
        "apiVersion": v1beta1.API_VERSION,
        "kind": "ClusterServingRuntime",
        "metadata": {"name": "srt-qwen3-tpu"},
        "spec": {
            "supportedModelFormats": [{"name": "safetensors", "autoSelect": True}],
            "disabled": False,
            "engineConfig": {
                "annotations": {"a": "b"},
                "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu7x"},
                "tolerations": [{"key": "google.com/tpu", "operator": "Exists"}],
                "runner": runner,
                "worker": {"size": 1, "runner": runner},
            },
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(runtime))
    stored = cluster.custom().get_cluster_custom_object(
        "ome.io", "v1beta1", "clusterservingruntimes", "srt-qwen3-tpu"
    )
    assert stored["spec"] == runtime["spec"]
    # Not the short name: on kube-apiserver "csr" is certificatesigningrequests.
    out = kubectl("get", "clusterservingruntimes").stdout.splitlines()
    assert out[0].split() == ["NAME", "DISABLED", "AGE"]

    kubectl("apply", "-f", "-", input=json.dumps(_replica("r")))
    stored = cluster.custom().get_namespaced_custom_object(
        "ome.io", "v1beta1", "default", "inferencereplicas", "r"
    )
    assert stored["spec"] == _replica("r")["spec"]


@pytest.mark.conformance
def test_instance_status_rows_accept_nulls(cluster: Cluster, kubectl: Kubectl) -> None:
    _install(kubectl, cluster)
    custom = cluster.custom()
    custom.create_namespaced_custom_object(
        "ome.io", "v1beta1", "default", "inferencereplicas", _replica("r")
    )
    row: v1beta1.InstanceStatus = {
        "index": 0,
        "incarnation": 1,
        "phase": "Creating",
        "runningRevision": "",
        "targetRevision": "abc",
        "podCount": 0,
        "servingPodCount": 0,
        "availablePodCount": 0,
        "readySince": None,
        "activeOrdinal": 0,
        "operation": {
            "id": "op-1",
            "type": "Create",
            "step": "CreatePods",
            "startedAt": "2025-01-01T00:00:00Z",
            "lastProgressAt": "2025-01-01T00:00:00Z",
            "deadline": None,
            "retryCount": 0,
            "targetRevision": "abc",
            "reason": "ScaleUp",
            "waiting": "CapacityProvisioning",
            "capacityRefusedAt": None,
            "surgeIndex": None,
        },
        "lastFailure": {
            "podName": "",
            "containerName": "",
            "reason": "CapacityProvisioning",
            "exitCode": None,
            "message": "slice r-0-0-8f3a21c7 is waiting for partition assignment",
            "time": "2025-01-01T00:00:00Z",
        },
    }
    status: v1beta1.InferenceReplicaStatus = {
        "replicas": 1,
        "conditions": [{"type": "Ready", "status": "False", "reason": "CapacityProvisioning"}],
        "instanceStatuses": [row],
    }

    def put(status: JSON) -> JSON:
        current = custom.get_namespaced_custom_object(
            "ome.io", "v1beta1", "default", "inferencereplicas", "r"
        )
        got: JSON = custom.replace_namespaced_custom_object_status(
            "ome.io", "v1beta1", "default", "inferencereplicas", "r", current | {"status": status}
        )
        return got

    # An update keeps the nulls of nullable fields.
    assert put(status)["status"]["instanceStatuses"] == [row]
    row["operation"] = None
    row["lastFailure"] = None
    row["readySince"] = "2025-01-01T00:05:00Z"
    assert put(status)["status"]["instanceStatuses"] == [row]
    # A merge patch prunes them (the nulls of a value that replaces a list, too): JSON merge
    # patch as kube-apiserver runs it (evanphx/json-patch) drops every null it adds.
    got = custom.patch_namespaced_custom_object_status(
        "ome.io", "v1beta1", "default", "inferencereplicas", "r", {"status": status}
    )
    assert got["status"]["instanceStatuses"] == [{k: v for k, v in row.items() if v is not None}]

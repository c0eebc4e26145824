"""Lifecycle deadlines set on an InferenceService's component (and its runtime's engineConfig)
on the embedded cluster: the CRD keeps them, ``kubectl explain`` describes them, and the
projection puts them on the InferenceReplica's ``spec.lifecycle``, the component's fields over
the runtime's, where the replica's controller applies them."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from ome.api.v1beta1 import CLUSTER_SERVING_RUNTIMES, INFERENCE_SERVICES
from ome.durations import parse_go_duration
from ome.kube import parse_time
from ome.runtime.rest import PODS
from test.cluster import Cluster, Kubectl
from test.helpers import eventually
from test.integration.test_omenative import JSON, NS, RUNTIME, Env, env, isvc

__all__ = ["env"]  # the OMENative environment fixture, shared with test_omenative.py

pytestmark = pytest.mark.kubectl

CONFIG = Path(__file__).resolve().parents[2] / "config" / "crd"

# The walkthrough's Step 2 service, with the deadlines on its engine, as a user writes it.
SERVICE_YAML = """\
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
    lifecycle:
      teardownTimeout: 30s
      instanceReadyTimeout: 5m
"""
BOTH = {"teardownTimeout": "30s", "instanceReadyTimeout": "5m"}


def projected_lifecycle(env: Env, wanted: JSON) -> JSON | None:
    """The replica's ``spec.lifecycle`` once it is ``wanted``."""
    try:
        lifecycle = (env.replica().get("spec") or {}).get("lifecycle")
    except ApiException as e:
        if e.status == 404:
            return None  # not projected yet
        raise
    return lifecycle if lifecycle == wanted else None


def creating_row(env: Env) -> JSON | None:
    """Instance 0's row while its Create operation runs with a deadline."""
    rows = env.rows()
    op = rows[0].get("operation") if rows else None
    return rows[0] if op and op.get("type") == "Create" and op.get("deadline") else None


def test_the_engines_lifecycle_is_kept_and_reaches_its_replica(env: Env) -> None:
    out = env.kubectl("apply", "-f", "-", input=SERVICE_YAML).stdout
    assert out.strip() == "inferenceservice.ome.io/qwen3-tpu created"
    stored = json.loads(env.kubectl("get", "isvc", "qwen3-tpu", "-n", NS, "-o", "json").stdout)
    assert stored["spec"]["engine"]["lifecycle"] == BOTH, "not pruned"
    assert stored["spec"] == yaml.safe_load(SERVICE_YAML)["spec"], "nothing was pruned"
    eventually(lambda: projected_lifecycle(env, BOTH), timeout=30)
    replica = json.loads(
        env.kubectl("get", "irep", "qwen3-tpu-engine", "-n", NS, "-o", "json").stdout
    )
    assert replica["spec"]["lifecycle"] == BOTH
    eventually(env.ready, timeout=60)


def test_the_components_deadline_is_the_one_the_instance_runs_against(env: Env) -> None:
    # Its pod finds no node, so the Create operation stays open and its deadline can be read.
    svc = isvc(lifecycle={"instanceReadyTimeout": "5m"})
    svc["spec"]["engine"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] = "9x9x9"
    env.apply(svc)
    row = eventually(lambda: creating_row(env), timeout=30)
    op = row["operation"]
    started, deadline = parse_time(op["startedAt"]), parse_time(op["deadline"])
    assert started is not None and deadline is not None
    assert deadline - started == timedelta(minutes=5)


def test_the_runtimes_lifecycle_fills_the_fields_the_component_leaves_unset(env: Env) -> None:
    runtime: JSON = copy.deepcopy(RUNTIME)
    runtime["spec"]["engineConfig"]["lifecycle"] = {
        "instanceReadyTimeout": "1m",
        "teardownTimeout": "2m",
    }
    env.apply(runtime)
    stored = env.rest.get(CLUSTER_SERVING_RUNTIMES, "srt-qwen3-tpu")
    assert (
        stored["spec"]["engineConfig"]["lifecycle"] == runtime["spec"]["engineConfig"]["lifecycle"]
    ), "not pruned"
    env.apply(isvc(lifecycle={"instanceReadyTimeout": "5m"}))
    eventually(
        lambda: projected_lifecycle(env, {"instanceReadyTimeout": "5m", "teardownTimeout": "2m"}),
        timeout=30,
    )
    # A change of the component's lifecycle is projected again.
    env.apply(isvc(lifecycle={"instanceReadyTimeout": "5m", "teardownTimeout": "30s"}))
    eventually(lambda: projected_lifecycle(env, BOTH), timeout=30)


def test_an_unreadable_duration_is_passed_through_and_stalls_nothing(env: Env) -> None:
    with pytest.raises(ValueError):
        parse_go_duration("soon")
    env.apply(isvc(lifecycle={"instanceReadyTimeout": "soon", "teardownTimeout": "30s"}))
    eventually(
        lambda: projected_lifecycle(
            env, {"instanceReadyTimeout": "soon", "teardownTimeout": "30s"}
        ),
        timeout=30,
    )
    eventually(env.ready, timeout=60)
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    assert env.rest.get(PODS, "qwen3-tpu-engine-0-default-0", NS)["status"]["phase"] == "Running"
    assert env.rest.get(INFERENCE_SERVICES, "qwen3-tpu", NS)["spec"]["engine"]["lifecycle"] == {
        "instanceReadyTimeout": "soon",
        "teardownTimeout": "30s",
    }


def _flat(text: str) -> str:
    """``kubectl explain`` output with its line wrapping undone."""
    return " ".join(text.split())


def test_kubectl_explain_describes_the_lifecycle_fields(cluster: Cluster, kubectl: Kubectl) -> None:
    kubectl("apply", "-f", f"{CONFIG}/")
    out = kubectl("explain", "inferenceservice.spec.engine.lifecycle").stdout
    flat = _flat(out)
    assert "Deadlines of the Instances' operations, copied to the InferenceReplica's" in flat
    for field in ("instanceReadyTimeout", "teardownTimeout"):
        assert f"  {field}\t<string>" in out, out
    assert (
        "How long an Instance's pods may take to be Ready once created (while not held), as a "
        "Go duration, e.g. 10m; unset or unreadable, there is no deadline."
    ) in flat
    assert (
        "How long deletion waits for the pods and Slices to go before it finishes anyway, as a "
        "Go duration, e.g. 10m; unset or unreadable, 10m."
    ) in flat
    engine = kubectl("explain", "inferenceservice.spec.engine").stdout
    assert "  lifecycle\t<Object>" in engine, engine
    field = _flat(kubectl("explain", "isvc.spec.decoder.lifecycle.teardownTimeout").stdout)
    assert "FIELD: teardownTimeout <string>" in field
    assert "as a Go duration" in field
    runtime = _flat(kubectl("explain", "clusterservingruntime.spec.engineConfig.lifecycle").stdout)
    assert "instanceReadyTimeout <string>" in runtime and "teardownTimeout <string>" in runtime

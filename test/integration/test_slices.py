"""TPU slice provisioning, one test per section of the guide, on the embedded cluster with
the simulated GKE provider: what a user sees (Slices, events, Instance rows, labels)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from ome.api.v1beta1 import INFERENCE_REPLICAS
from ome.controllers.setup import setup
from ome.provider import gke
from ome.runtime.manager import Manager, ManagerOptions
from ome.runtime.rest import CONFIGMAPS, EVENTS, NAMESPACES, PODS, Rest
from ome.sim.gke.model import parse_pools
from ome.sim.gke.provider import Options, Provider, install_slice_crd
from ome.tpuslice.types import GUIDE_CONFIG_JSON
from test.conftest import Cluster, Kubectl
from test.helpers import eventually, gone
from test.integration.test_omenative import MODEL, NS, RUNTIME, isvc

JSON = dict[str, Any]
OPT_IN = {"ome.io/tpu-slice-provisioning": "true"}
MANAGER_AGENT = "ome-manager-under-test"


def opted(name: str = "qwen3-tpu", **engine: Any) -> JSON:
    svc = isvc(name, **engine)
    svc["spec"]["engine"]["annotations"] = dict(OPT_IN)
    return svc


@dataclass
class Env:
    cluster: Cluster
    rest: Rest
    kubectl: Kubectl
    manager: Manager
    registry: CollectorRegistry

    def apply(self, obj: JSON) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def slices(self) -> list[JSON]:
        return list(
            self.rest.list(gke.SLICES, label_selector="ome.io/managed-by=OMENative")["items"]
        )

    def rows(self, name: str = "qwen3-tpu-engine") -> list[JSON]:
        try:
            replica = self.rest.get(INFERENCE_REPLICAS, name, NS)
        except Exception:
            return []
        return list((replica.get("status") or {}).get("instanceStatuses") or [])

    def pods(self) -> list[JSON]:
        return list(self.rest.list(PODS, NS)["items"])

    def events(self, reason: str) -> list[str]:
        items = self.rest.list(EVENTS, NS, field_selector=f"reason={reason}")["items"]
        return [e["message"] for e in items]


def make_env(
    cluster: Cluster,
    kubectl: Kubectl,
    pools: list[str],
    config: str | None = GUIDE_CONFIG_JSON,
    crd: bool = True,
    activation_delay: float = 0.2,
) -> Iterator[Env]:
    kubectl("apply", "-f", "config/crd/")
    rest = Rest(cluster.api)
    if crd:
        install_slice_crd(rest)
        provider = Provider(
            rest,
            parse_pools(pools),
            Options(activation_delay=activation_delay, heartbeat_interval=5, scheduler="on"),
        )
    else:
        from ome.sim.gke import provider as sim

        provider = Provider(rest, parse_pools(pools), Options(heartbeat_interval=5, scheduler="on"))
        provider.slices = sim.Informer(rest, NAMESPACES)  # nothing to watch without the CRD
    provider.start()
    rest.create(NAMESPACES, {"metadata": {"name": "ome"}})
    if config is not None:
        rest.create(
            CONFIGMAPS,
            {
                "metadata": {"name": "inferenceservice-config"},
                "data": {"tpuSliceProvisioning": config},
            },
            "ome",
        )
    registry = CollectorRegistry()
    manager_api = client.ApiClient(cluster.api.configuration)
    manager_api.user_agent = MANAGER_AGENT
    manager = Manager(
        Rest(manager_api),
        ManagerOptions(namespace="ome", metrics_bind_address="0", health_probe_bind_address="0"),
        registry=registry,
    )
    setup(manager)
    stop = threading.Event()
    thread = threading.Thread(target=manager.run, args=(stop,), daemon=True)
    thread.start()
    rest.create(NAMESPACES, {"metadata": {"name": NS}})
    env = Env(cluster, rest, kubectl, manager, registry)
    env.apply(RUNTIME)
    env.apply(MODEL)
    try:
        yield env
    finally:
        stop.set()
        thread.join(30)
        provider.stop()


@pytest.fixture
def env(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    yield from make_env(cluster, kubectl, ["tpu7x:provision-only:4", "tpu7x:static:2"])


def ready_condition(obj: JSON) -> JSON:
    return next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")


def test_step3_a_slice_per_instance_then_the_pod_confined_to_it(env: Env) -> None:
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    out = env.kubectl(
        "get",
        "slices.accelerator.gke.io",
        "-l",
        "ome.io/managed-by=OMENative",
        "-o",
        "custom-columns=NAME:.metadata.name,TYPE:.spec.type,TOPOLOGY:.spec.topology,"
        'STATE:.status.conditions[?(@.type=="Ready")].reason',
    ).stdout.splitlines()
    assert out[0].split() == ["NAME", "TYPE", "TOPOLOGY", "STATE"]
    name, stype, topo, state = out[1].split()
    assert name.startswith("qwen3-tpu-engine-0-0-") and len(name.rsplit("-", 1)[1]) == 8
    assert (stype, topo, state) == ("tpu7x", "2x2x1", "ACTIVE")
    selector = env.kubectl(
        "get",
        "pod",
        "qwen3-tpu-engine-0-default-0",
        "-n",
        NS,
        "-o",
        r"jsonpath={.spec.nodeSelector.cloud\.google\.com/gke-tpu-slice}",
    ).stdout
    assert selector == name
    slice_obj = env.rest.get(gke.SLICES, name)
    pod = env.rest.get(PODS, "qwen3-tpu-engine-0-default-0", NS)
    assert pod["metadata"]["creationTimestamp"] >= ready_condition(slice_obj)["lastTransitionTime"]
    labels = slice_obj["metadata"]["labels"]
    assert labels["ome.io/managed-by"] == "OMENative" and labels["ome.io/instance-index"] == "0"
    assert labels["cloud.google.com/slice-owner-name"] == "qwen3-tpu-engine"
    assert slice_obj["metadata"]["annotations"]["ome.io/slice-owner"] == f"{NS}/qwen3-tpu-engine"


def test_a_multi_host_instance_shares_one_slice(env: Env) -> None:
    svc = opted(leader={}, worker={"size": 1})
    svc["spec"]["engine"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] = "2x2x2"
    env.apply(svc)
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    slices = env.slices()
    assert len(slices) == 1 and slices[0]["spec"]["topology"] == "2x2x2"
    selectors = {p["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-slice"] for p in env.pods()}
    assert selectors == {slices[0]["metadata"]["name"]}


@pytest.fixture
def tight(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    yield from make_env(cluster, kubectl, ["tpu7x:provision-only:1", "tpu7x:static:1"])


def test_pods_wait_while_the_pool_has_no_capacity(tight: Env) -> None:
    env = tight
    env.apply(opted("first"))
    eventually(lambda: (r := env.rows("first-engine")) and r[0]["phase"] == "Ready", timeout=60)
    env.apply(opted("second"))
    row = eventually(
        lambda: (
            (r := env.rows("second-engine"))
            and r[0].get("operation")
            and r[0]["operation"].get("waiting") == "CapacityProvisioning"
            and r[0]
        ),
        timeout=30,
    )
    assert row["phase"] == "Creating"
    assert row["operation"]["deadline"] is None
    assert row["lastFailure"]["message"].endswith("is waiting for partition assignment")
    assert not [p for p in env.pods() if p["metadata"]["name"].startswith("second-")]


def test_an_invalid_demand_is_withheld_with_an_event(env: Env) -> None:
    svc = opted()
    svc["spec"]["engine"]["runner"]["resources"] = {
        "requests": {"google.com/tpu": 2},
        "limits": {"google.com/tpu": 2},
    }
    env.apply(svc)
    messages = eventually(lambda: env.events("SliceDemandInvalid"), timeout=30)
    assert messages[0] == (
        "OMENative component=engine instance=0 withheld: pods cannot be placed on a provisioned slice: "
        "1 pods x 2 chips do not fill topology 2x2x1: it is 4 chips on 1 hosts, which takes 2 pods"
    )
    assert env.slices() == [] and env.pods() == []


def test_a_static_pool_gets_no_slice(cluster: Cluster, kubectl: Kubectl) -> None:
    for env in make_env(cluster, kubectl, ["tpu7x:static:2"]):
        env.apply(opted())
        env.kubectl(
            "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
        )
        assert env.slices() == []
        pod = env.rest.get(PODS, "qwen3-tpu-engine-0-default-0", NS)
        assert "cloud.google.com/gke-tpu-slice" not in pod["spec"]["nodeSelector"]


def test_without_the_slice_crd_the_exact_line_is_logged(
    cluster: Cluster, kubectl: Kubectl, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ome.controllers.setup"):
        for env in make_env(cluster, kubectl, ["tpu7x:static:2"], crd=False):
            assert gke.CRD_MISSING_LOG in [r.getMessage() for r in caplog.records]
            env.apply(opted())
            env.kubectl(
                "wait",
                "--for=condition=Ready",
                "inferenceservice/qwen3-tpu",
                "-n",
                NS,
                "--timeout=60s",
            )


def test_scale_down_and_clean_up_release_the_slices(env: Env) -> None:
    svc = opted()
    svc["spec"]["engine"].update(minReplicas=2, maxReplicas=2)
    env.apply(svc)
    eventually(
        lambda: len(env.rows()) == 2 and all(r["phase"] == "Ready" for r in env.rows()), timeout=60
    )
    assert len(env.slices()) == 2
    env.apply(opted())
    eventually(lambda: len(env.slices()) == 1, timeout=60)
    assert env.slices()[0]["metadata"]["labels"]["ome.io/instance-index"] == "0"
    env.kubectl("delete", "inferenceservice", "qwen3-tpu", "-n", NS, "--timeout=60s")
    eventually(
        lambda: gone(lambda: env.rest.get(INFERENCE_REPLICAS, "qwen3-tpu-engine", NS)), timeout=60
    )
    out = env.kubectl(
        "get",
        "slices.accelerator.gke.io",
        "-l",
        "cloud.google.com/slice-owner-name=qwen3-tpu-engine",
    )
    assert "No resources found" in out.stderr + out.stdout


def test_metrics_start_at_zero_for_every_configured_type_and_topology(env: Env) -> None:
    for topology in ("2x2x1", "2x2x2"):
        labels = {"slice_type": "tpu7x", "topology": topology}
        for family in (
            "ome_tpu_slice_created_total",
            "ome_tpu_slice_released_total",
            "ome_tpu_slice_release_deferred_total",
            "ome_tpu_slice_lost_total",
            "ome_tpu_slice_provision_duration_seconds_count",
        ):
            assert env.registry.get_sample_value(family, labels) == 0.0, (family, topology)


def test_the_manager_only_ever_creates_and_deletes_slices(env: Env) -> None:
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    env.kubectl("delete", "inferenceservice", "qwen3-tpu", "-n", NS, "--timeout=60s")
    eventually(lambda: env.slices() == [], timeout=60)
    acc = env.cluster.server.accounting
    assert acc.total("create", "slices", MANAGER_AGENT) == 1, "one create per slot lifecycle"
    assert acc.total("delete", "slices", MANAGER_AGENT) == 1
    for verb in ("update", "patch"):
        assert acc.total(verb, "slices", MANAGER_AGENT) == 0
        assert acc.total(verb, "slices/status", MANAGER_AGENT) == 0

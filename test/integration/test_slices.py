"""TPU slice provisioning, one test per section of the walkthrough, on the embedded cluster with
the simulated GKE provider: what a user sees (Slices, events, Instance rows, labels)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY, CollectorRegistry

from ome.api.v1beta1 import INFERENCE_REPLICAS
from ome.controllers.inferencereplica import instances
from ome.controllers.inferenceservice import decide
from ome.controllers.setup import setup_controllers
from ome.controllers.slices import messages
from ome.kube import parse_time
from ome.provider import gke
from ome.runtime.manager import Manager, ManagerOptions
from ome.runtime.rest import (
    CONFIGMAPS,
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    Rest,
)
from ome.tpuslice import naming
from ome.tpuslice.placement import opted_in
from ome.tpuslice.types import GUIDE_CONFIG_JSON
from ome_sim.apiserver.faults import Fault
from ome_sim.gke.model import parse_pools
from ome_sim.gke.provider import Informer, Options, Provider, install_slice_crd
from test.cluster import Cluster, Kubectl
from test.helpers import a_second_after, clock_past, eventually, gone
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
    options: ManagerOptions
    stop: threading.Event
    thread: threading.Thread
    orphan_collection: bool = True

    def stop_manager(self) -> None:
        """Stop the manager (as a rollout or a crash would): nothing of it acts any more."""
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the manager did not stop"

    def start_manager(self) -> None:
        """A new manager process, as after a restart: fresh caches, expectations and
        metrics, the same User-Agent."""
        self.manager, self.registry, self.stop, self.thread = _start_manager(
            self.cluster, self.options, self.orphan_collection
        )

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


def _invariant(cluster: Cluster, violations: list[str]) -> Any:
    """A pod of an opted-in Instance is never created before its Slice is ready, and never
    without the slice-label selector: checked on the server, at the moment of each create."""
    ready_states = tuple(json.loads(GUIDE_CONFIG_JSON)["slice"]["readyStates"])

    def check(change: Any) -> None:
        if change.type != "ADDED" or change.tkey != ("", "pods"):
            return
        pod = change.obj
        labels = pod["metadata"].get("labels") or {}
        if labels.get("ome.io/managed-by") != "OMENative":
            return
        replica = cluster.server.store.peek(
            ("ome.io", "inferencereplicas"),
            (pod["metadata"]["namespace"], labels.get("ome.io/inferencereplica", "")),
        )
        if replica is None or not opted_in(replica["spec"].get("runners") or []):
            return  # C1: the Instance is not opted in (its leader or default runner decides)
        selector = pod["spec"].get("nodeSelector") or {}
        if "cloud.google.com/gke-tpu-topology" not in selector:
            return  # B6.2: no pod of it selects a topology, so it asks for no slice
        name = selector.get("cloud.google.com/gke-tpu-slice")
        if not name:
            violations.append(
                f"pod {pod['metadata']['name']} was created without the slice selector"
            )
            return
        found = cluster.server.store.peek(("accelerator.gke.io", "slices"), ("", name))
        conds = ((found or {}).get("status") or {}).get("conditions") or []
        ready = next((c for c in conds if c.get("type") == "Ready"), None)
        if found is None or not ready or ready.get("reason") not in ready_states:
            violations.append(
                f"pod {pod['metadata']['name']} was created before slice {name} was ready"
            )

    return check


def ready_timeout_config(timeout: str) -> str:
    """The walkthrough's Step 1 block with another ``slice.readyTimeout``."""
    config = json.loads(GUIDE_CONFIG_JSON)
    config["slice"]["readyTimeout"] = timeout
    return json.dumps(config)


def make_env(
    cluster: Cluster,
    kubectl: Kubectl,
    pools: list[str],
    config: str | None = GUIDE_CONFIG_JSON,
    crd: bool = True,
    activation_delay: float = 0.2,
    webhook: bool = False,
    orphan_collection: bool = True,
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
        provider = Provider(rest, parse_pools(pools), Options(heartbeat_interval=5, scheduler="on"))
        provider.slices = Informer(rest, NAMESPACES)  # nothing to watch without the CRD
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
    options = ManagerOptions(
        namespace="ome", metrics_bind_address="0", health_probe_bind_address="0"
    )
    if webhook:
        options.webhook_bind_address = "127.0.0.1:0"
        options.webhook_cert_check_interval = 0.2
    manager, registry, stop, thread = _start_manager(cluster, options, orphan_collection)
    if webhook:
        install_webhook_configuration(rest, kubectl, manager)
    rest.create(NAMESPACES, {"metadata": {"name": NS}})
    env = Env(cluster, rest, kubectl, manager, registry, options, stop, thread, orphan_collection)
    violations: list[str] = []
    if any(":provision-only:" in p for p in pools) and crd and config is not None:
        cluster.thread.call(
            lambda: cluster.server.store.listeners.append(_invariant(cluster, violations))
        )
    env.apply(RUNTIME)
    env.apply(MODEL)
    try:
        yield env
    finally:
        env.stop.set()
        env.thread.join(30)
        provider.stop()
    assert violations == [], "\n".join(violations)
    acc = cluster.server.accounting
    for resource in ("pods", "slices"):
        # Write discipline, across every scenario: a delete names the UID it means.
        assert acc.deletes_without_uid(resource, MANAGER_AGENT) == 0, resource


def _start_manager(
    cluster: Cluster, options: ManagerOptions, orphan_collection: bool = True
) -> tuple[Manager, CollectorRegistry, threading.Event, threading.Thread]:
    """An in-process manager under ``MANAGER_AGENT``, with its controllers, running."""
    registry = CollectorRegistry()
    manager_api = client.ApiClient(cluster.api.configuration)
    manager_api.user_agent = MANAGER_AGENT
    manager = Manager(Rest(manager_api), options, registry=registry)
    setup_controllers(manager, orphan_collection=orphan_collection)
    stop = threading.Event()
    thread = threading.Thread(target=manager.run, args=(stop,), daemon=True)
    thread.start()
    return manager, registry, stop, thread


def install_webhook_configuration(rest: Rest, kubectl: Kubectl, manager: Manager) -> None:
    """config/webhook as shipped, its Service port pointed at the manager's webhook (the
    embedded API server dials a Service at 127.0.0.1:<port>); then wait for the manager to
    have filled the caBundle and to serve its certificate."""
    docs = list(yaml.safe_load_all(Path("config/webhook/manifests.yaml").read_text()))
    port = eventually(lambda: manager.webhook is not None and manager.webhook.port, timeout=10)
    for doc in docs:
        for hook in doc.get("webhooks") or []:
            hook["clientConfig"]["service"]["port"] = port
    kubectl("apply", "-f", "-", input="---\n".join(yaml.safe_dump(d) for d in docs))

    def wired() -> bool:
        vwc = rest.get(VALIDATING_WEBHOOK_CONFIGURATIONS, docs[0]["metadata"]["name"])
        bundle = all(h["clientConfig"].get("caBundle") for h in vwc["webhooks"])
        return bool(bundle) and manager.webhook is not None and manager.webhook.ready() is None

    eventually(wired, timeout=30)


def guide_env(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    """The walkthrough's pools: a provision-only tpu7x pool of 4 hosts and a static one of 2."""
    yield from make_env(cluster, kubectl, ["tpu7x:provision-only:4", "tpu7x:static:2"])


@pytest.fixture
def env(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    yield from guide_env(cluster, kubectl)


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


def test_every_controller_waits_for_each_cache_its_passes_read(env: Env) -> None:
    """A controller's workers start once its own informers have synced, not every one: each
    must count every cache its passes read among them, or a pass would read one still
    listing (the orphan controller would see every Slice's owner missing)."""
    sources = {
        c.name: sorted(i.resource.plural for i in c.sources) for c in env.manager.controllers
    }
    slices = ["inferencereplicas", "nodes", "pods", "slices"]
    assert sources == {
        "inferencereplica": slices,
        "tpuslice": slices,
        "tpuslice-orphans": slices,
        "inferenceservice": sorted(
            [
                "inferenceservices",
                "inferencereplicas",
                "servingruntimes",
                "clusterservingruntimes",
                "basemodels",
                "clusterbasemodels",
            ]
        ),
    }


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


def engine_message(env: Env) -> str:
    """The EngineReady condition's message as ``kubectl describe inferenceservice`` prints it."""
    out = env.kubectl("describe", "inferenceservice", "qwen3-tpu", "-n", NS).stdout
    lines = [line.strip() for line in out.splitlines()]
    at = lines.index("Type:                  EngineReady")
    # A condition's fields print in order: Last Transition Time, Message, ..., Type.
    message = next(line for line in reversed(lines[:at]) if line.startswith("Message:"))
    return message.removeprefix("Message:").strip()


def test_the_condition_names_the_instance_that_waits_until_it_fits(
    tight: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M7, as a user reads it: more Instances than the pool has hosts. The component's
    condition names the first one withheld and why, in the words of its hold, counts the
    others, and drops them once they no longer wait. Its threshold is a second here, and
    E7's rewordings are prompt, so that the test waits for the state, not for them."""
    monkeypatch.setattr(decide, "NAME_HELD_AFTER", timedelta(seconds=1))
    monkeypatch.setattr(instances, "HOLD_REWORD_AFTER", timedelta(seconds=1))
    monkeypatch.setattr(instances, "HOLD_ROUTINE_REWORD_AFTER", timedelta(seconds=1))
    env = tight
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    assert engine_message(env) == "1 of 1 instances ready"

    def scaled(n: int) -> JSON:
        svc = opted()
        svc["spec"]["engine"].update(minReplicas=n, maxReplicas=n)
        return svc

    def slice_of(index: int) -> str:
        (found,) = eventually(
            lambda: [
                s["metadata"]["name"]
                for s in env.slices()
                if s["metadata"]["labels"]["ome.io/instance-index"] == str(index)
            ],
            timeout=30,
        )
        return str(found)

    env.apply(scaled(3))
    waits = "is waiting for partition assignment"
    three = (
        f"1 of 3 instances ready; instance 1 is withheld until its capacity is ready: "
        f"slice {slice_of(1)} {waits}; 1 more instance is withheld"
    )
    eventually(lambda: engine_message(env) == three, timeout=60)
    env.apply(scaled(2))
    two = (
        f"1 of 2 instances ready; instance 1 is withheld until its capacity is ready: "
        f"slice {slice_of(1)} {waits}"
    )
    eventually(lambda: engine_message(env) == two, timeout=60)
    env.apply(scaled(1))
    eventually(lambda: engine_message(env) == "1 of 1 instances ready", timeout=60)


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
        "1 pod x 2 chips do not fill topology 2x2x1: it is 4 chips on 1 host, which takes 2 pods"
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
            assert messages.CRD_MISSING_LOG in [r.getMessage() for r in caplog.records]
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


def test_one_services_lifecycle_writes_what_a_user_reads_and_no_more(env: Env) -> None:
    """The writes of a sample service from create to gone: the replica created with its
    teardown finalizer (no patch to add it) and one patch taking it off; the Instance's row
    written when the user would read something new (held, pods created, Ready), not for
    each state its Slice passes through; one Slice and one pod created and deleted."""
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    replica = env.rest.get(INFERENCE_REPLICAS, "qwen3-tpu-engine", NS)
    assert replica["metadata"]["finalizers"] == ["ome.io/ir-teardown"]
    env.kubectl("delete", "inferenceservice", "qwen3-tpu", "-n", NS, "--timeout=60s")
    # The lifecycle ends when the replica is gone: its finalizer's removal is the last write
    # (the Slice and pod can be gone a moment before it, on a busy machine).
    eventually(
        lambda: (
            env.slices() == []
            and env.pods() == []
            and gone(lambda: env.rest.get(INFERENCE_REPLICAS, "qwen3-tpu-engine", NS))
        ),
        timeout=60,
    )
    acc = env.cluster.server.accounting
    written = {
        (verb, resource): acc.total(verb, resource, MANAGER_AGENT)
        for verb in ("create", "update", "patch", "delete")
        for resource in (
            "inferencereplicas",
            "inferencereplicas/status",
            "inferenceservices/status",
            "slices",
            "pods",
        )
    }
    assert {k: v for k, v in written.items() if v} == {
        ("create", "inferencereplicas"): 1,
        ("patch", "inferencereplicas"): 1,
        ("update", "inferencereplicas/status"): 3,
        ("update", "inferenceservices/status"): 2,
        ("create", "slices"): 1,
        ("delete", "slices"): 1,
        ("create", "pods"): 1,
        ("delete", "pods"): 1,
    }


def test_teardown_waits_on_the_informer_while_its_slice_goes(env: Env) -> None:
    """G4: a deleted replica whose Slice GKE is still releasing (held here by a test's
    finalizer) reads nothing live while it waits; the Slice's going wakes it, and it is gone
    with it."""
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    (found,) = env.slices()
    name = found["metadata"]["name"]
    env.rest.patch(
        gke.SLICES,
        name,
        {"metadata": {"finalizers": [*found["metadata"]["finalizers"], "test.ome.io/keep"]}},
    )
    env.kubectl("delete", "inferenceservice", "qwen3-tpu", "-n", NS, "--wait=false")
    eventually(
        lambda: env.rest.get(gke.SLICES, name)["metadata"].get("deletionTimestamp"), timeout=30
    )
    eventually(lambda: env.pods() == [], timeout=30)
    acc = env.cluster.server.accounting

    def lists() -> int:
        return acc.total("list", "slices", MANAGER_AGENT) + acc.total("list", "pods", MANAGER_AGENT)

    def a_pass_lists_nothing() -> bool:
        before = lists()
        after_a_pass(env, "inferencereplica")
        return lists() == before

    # Once the passes that saw the Slice and the pod go are over, no pass lists live.
    eventually(a_pass_lists_nothing, timeout=30)
    before = lists()
    for _ in range(3):
        after_a_pass(env, "inferencereplica")
    assert lists() == before, "no live list while the cache shows the Slice going"
    assert env.rest.get(INFERENCE_REPLICAS, "qwen3-tpu-engine", NS)
    env.rest.patch(gke.SLICES, name, {"metadata": {"finalizers": None}})
    eventually(
        lambda: gone(lambda: env.rest.get(INFERENCE_REPLICAS, "qwen3-tpu-engine", NS)), timeout=30
    )


KEEP = "test.ome.io/keep"


def reconciles(controller: str) -> float:
    """How many passes ``controller`` has finished in this process (controller-runtime's
    ``controller_runtime_reconcile_total``, every result)."""
    return sum(
        REGISTRY.get_sample_value(
            "controller_runtime_reconcile_total", {"controller": controller, "result": r}
        )
        or 0.0
        for r in ("success", "error", "requeue", "requeue_after")
    )


def record_goings(env: Env) -> list[tuple[str, str]]:
    """The server's record, in commit order, of each pod deleted and each Slice marked for
    deletion (or deleted): ("pod", name) and ("slice", name)."""
    seen: list[tuple[str, str]] = []
    marked: set[str] = set()

    def listen(change: Any) -> None:
        name = change.obj["metadata"]["name"]
        if change.tkey == ("", "pods") and change.type == "DELETED":
            seen.append(("pod", name))
        elif (
            change.tkey == ("accelerator.gke.io", "slices")
            and name not in marked
            and (change.type == "DELETED" or change.obj["metadata"].get("deletionTimestamp"))
        ):
            marked.add(name)
            seen.append(("slice", name))

    env.cluster.thread.call(lambda: env.cluster.server.store.listeners.append(listen))
    return seen


def keep_terminating(env: Env, pod: str) -> None:
    """Hold ``pod`` with a finalizer of the test's: deleted, it stays, terminating, until
    ``let_go``, as an engine in a long termination grace period does."""
    env.rest.patch(PODS, pod, {"metadata": {"finalizers": [KEEP]}}, NS)


def after_a_pass(env: Env, controller: str, replica: str = "qwen3-tpu-engine") -> None:
    """Return once ``controller`` has finished a pass over the replica that began after this
    call: the replica is nudged (an annotation), which queues it, and the pass counted."""
    passes = reconciles(controller)
    env.rest.patch(
        INFERENCE_REPLICAS,
        replica,
        {"metadata": {"annotations": {"test.ome.io/nudge": str(passes)}}},
        NS,
    )
    eventually(lambda: reconciles(controller) > passes, timeout=30)


def let_go(env: Env, pod: str) -> None:
    env.rest.patch(PODS, pod, {"metadata": {"finalizers": None}}, NS)


def test_a_deleted_services_slice_outlives_its_own_terminating_pod(env: Env) -> None:
    """G5: OME releases a Slice only once no pod holds it, the service's own pods
    included: deleting the InferenceService deletes its pod, and its Slice goes only once
    the pod is gone (its engine may serve in-flight requests through its grace period); then
    within seconds, and the deletion finishes."""
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    name = the_slice(env)["metadata"]["name"]
    pod = "qwen3-tpu-engine-0-default-0"
    keep_terminating(env, pod)
    goings = record_goings(env)
    env.kubectl("delete", "inferenceservice", "qwen3-tpu", "-n", NS, "--wait=false")
    eventually(lambda: env.rest.get(PODS, pod, NS)["metadata"].get("deletionTimestamp"))
    # The teardown has run since the pod was seen terminating, and left the Slice alone.
    after_a_pass(env, "inferencereplica")
    assert not env.rest.get(gke.SLICES, name)["metadata"].get("deletionTimestamp")
    let_go(env, pod)
    eventually(lambda: gone(lambda: env.rest.get(gke.SLICES, name)), timeout=10)
    eventually(
        lambda: gone(lambda: env.rest.get(INFERENCE_REPLICAS, "qwen3-tpu-engine", NS)), timeout=30
    )
    assert goings[:2] == [("pod", pod), ("slice", name)], "the pod went first"


def test_a_scale_down_releases_the_slice_only_once_its_terminating_pod_is_gone(env: Env) -> None:
    """G4 with the same care: scaling from 2 to 1 deletes Instance 1's pod, and its Slice
    goes once the pod is gone, within seconds, not while the pod terminates."""
    svc = opted()
    svc["spec"]["engine"].update(minReplicas=2, maxReplicas=2)
    env.apply(svc)
    eventually(
        lambda: len(env.rows()) == 2 and all(r["phase"] == "Ready" for r in env.rows()), timeout=60
    )
    (second,) = [
        s["metadata"]["name"]
        for s in env.slices()
        if s["metadata"]["labels"]["ome.io/instance-index"] == "1"
    ]
    pod = "qwen3-tpu-engine-1-default-0"
    keep_terminating(env, pod)
    goings = record_goings(env)
    env.apply(opted())
    eventually(lambda: env.rest.get(PODS, pod, NS)["metadata"].get("deletionTimestamp"))
    after_a_pass(env, "tpuslice")
    assert not env.rest.get(gke.SLICES, second)["metadata"].get("deletionTimestamp")
    let_go(env, pod)
    eventually(lambda: gone(lambda: env.rest.get(gke.SLICES, second)), timeout=10)
    assert goings[:2] == [("pod", pod), ("slice", second)], "the pod went first"
    assert [s["metadata"]["labels"]["ome.io/instance-index"] for s in env.slices()] == ["0"]


def hold_chips_on(env: Env, node: str) -> None:
    """Another workload's pod, bound to ``node``, holding one chip (tpu-batch/indexer-0)."""
    env.rest.create(NAMESPACES, {"metadata": {"name": "tpu-batch"}})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "indexer-0"},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "c", "image": "x:1", "resources": {"limits": {"google.com/tpu": "1"}}}
            ],
        },
    }
    env.rest.create(PODS, pod, "tpu-batch")


def the_slice(env: Env) -> JSON:
    return eventually(lambda: (s := env.slices()) and len(s) == 1 and s[0], timeout=30)


def test_slice_lost_when_deleted_from_outside(env: Env) -> None:
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    old = the_slice(env)
    old_pod = env.rest.get(PODS, "qwen3-tpu-engine-0-default-0", NS)
    env.kubectl("delete", "slices.accelerator.gke.io", old["metadata"]["name"], "--wait=false")
    message = eventually(lambda: env.events("SliceLost"), timeout=30)[0]
    assert message == (
        f"TPU slice {old['metadata']['name']} was deleted while pods qwen3-tpu-engine-0-default-0 "
        "ran on it; they are deleted so that their Instance is rebuilt"
    )
    # The Instance is rebuilt on a new Slice at the same name, with a new pod.
    new = eventually(
        lambda: (
            (s := env.slices())
            and s[0]["metadata"]["uid"] != old["metadata"]["uid"]
            and not s[0]["metadata"].get("deletionTimestamp")
            and s[0]
        ),
        timeout=60,
    )
    assert new["metadata"]["name"] == old["metadata"]["name"]
    eventually(
        lambda: (r := env.rows()) and r[0]["phase"] == "Ready" and r[0]["incarnation"] >= 1,
        timeout=60,
    )
    pod = env.rest.get(PODS, "qwen3-tpu-engine-0-default-0", NS)
    assert pod["metadata"]["uid"] != old_pod["metadata"]["uid"]
    labels = {"slice_type": "tpu7x", "topology": "2x2x1"}
    assert env.registry.get_sample_value("ome_tpu_slice_lost_total", labels) == 1.0


def test_slice_lost_when_its_partitions_go(env: Env) -> None:
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    name = the_slice(env)["metadata"]["name"]
    env.kubectl("annotate", "slices.accelerator.gke.io", name, "sim.ome.io/drop-partitions=true")
    message = eventually(lambda: env.events("SliceLost"), timeout=30)[0]
    assert message.startswith(
        f"TPU slice {name} lost its partitions while pods qwen3-tpu-engine-0-default-0"
    )


def test_a_foreign_slice_at_the_name_is_an_ownership_conflict(tight: Env) -> None:
    env = tight
    env.apply(opted("first"))  # takes the pool's only host
    eventually(lambda: (r := env.rows("first-engine")) and r[0]["phase"] == "Ready", timeout=60)
    env.apply(opted("second"))
    waiting = eventually(
        lambda: [s for s in env.slices() if s["metadata"]["name"].startswith("second-engine-0-0-")],
        timeout=30,
    )[0]
    name = waiting["metadata"]["name"]
    # Someone deletes OME's waiting Slice and puts their own at the name. (The manager's own
    # creates are held off meanwhile, so that the other party wins the race for the name.)
    env.cluster.server.faults.add(
        Fault(verb="create", resource="slices", user_agent=MANAGER_AGENT, code=503, times=None)
    )
    env.rest.delete(gke.SLICES, name)
    eventually(lambda: gone(lambda: env.rest.get(gke.SLICES, name)), timeout=30)
    env.rest.create(
        gke.SLICES,
        {
            "apiVersion": "accelerator.gke.io/v1beta1",
            "kind": "Slice",
            "metadata": {"name": name, "labels": {"team": "other"}},
            "spec": {"type": "tpu7x", "topology": "2x2x1", "partitionIds": []},
        },
    )
    foreign = env.rest.get(gke.SLICES, name)
    env.cluster.server.faults.clear()
    message = eventually(lambda: env.events("SliceOwnershipConflict"), timeout=30)[0]
    assert (
        message
        == f"OMENative component=engine instance=0 withheld: slice is owned by another object: {name}"
    )
    # Never adopted, changed or deleted; the pods stay withheld.
    env.kubectl("delete", "inferenceservice", "second", "-n", NS, "--timeout=60s")
    after = env.rest.get(gke.SLICES, name)
    assert after["metadata"]["uid"] == foreign["metadata"]["uid"]
    assert after["metadata"]["labels"] == {"team": "other"}


@pytest.fixture
def timing_out(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    yield from make_env(
        cluster,
        kubectl,
        ["tpu7x:provision-only:2"],
        config=ready_timeout_config("2s"),
        activation_delay=3.0,
    )


def test_a_slice_stuck_activating_is_recycled_after_the_ready_timeout(timing_out: Env) -> None:
    env = timing_out
    env.apply(opted())
    first = the_slice(env)
    env.kubectl(
        "annotate",
        "slices.accelerator.gke.io",
        first["metadata"]["name"],
        "sim.ome.io/stick-activating=true",
    )
    message = eventually(lambda: env.events("SliceReadyTimeout"), timeout=60)[0]
    assert message.startswith(
        f"OMENative component=engine instance=0 withheld: slice {first['metadata']['name']} is ACTIVATING for "
    )
    assert message.endswith(
        ", longer than the 2s ready timeout; it is released and provisioned again once no pod holds it"
    )
    # A new Slice (new UID) at the same name, which the provider activates.
    eventually(
        lambda: (s := env.slices()) and s[0]["metadata"]["uid"] != first["metadata"]["uid"],
        timeout=60,
    )
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )


@pytest.fixture
def slow(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    yield from make_env(cluster, kubectl, ["tpu7x:provision-only:2"], activation_delay=2.0)


def activating_host(env: Env) -> tuple[JSON, JSON]:
    """The sample service's Slice once it has its partition, while it activates, and its
    host: the simulator names a host's partition in its ``sim.ome.io/partition-id``
    annotation (the slice label comes once the Slice is ACTIVE)."""
    first = eventually(
        lambda: (s := env.slices()) and s[0]["spec"].get("partitionIds") and s[0], timeout=30
    )
    partition = first["spec"]["partitionIds"][0]
    host = next(
        n
        for n in env.rest.list(NODES)["items"]
        if (n["metadata"].get("annotations") or {}).get("sim.ome.io/partition-id") == partition
    )
    return first, host


def test_a_ready_slice_on_a_broken_host_is_recycled(slow: Env) -> None:
    env = slow
    env.apply(opted())
    first, host = activating_host(env)
    env.kubectl("cordon", host["metadata"]["name"])  # before the Slice turns ready
    message = eventually(lambda: env.events("SliceHostUnavailable"), timeout=60)[0]
    assert message == (
        f"OMENative component=engine instance=0 withheld: slice {first['metadata']['name']} is ACTIVE, "
        f"but node {host['metadata']['name']} is cordoned; it is released and provisioned again once no "
        "pod holds it"
    )
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    pod = env.rest.get(PODS, "qwen3-tpu-engine-0-default-0", NS)
    assert pod["spec"]["nodeName"] != host["metadata"]["name"]


def test_deferred_release_goes_within_seconds_of_the_last_holder(env: Env) -> None:
    """G2: a foreign pod holding chips on a Slice's host defers its release; the holder's
    deletion wakes the Slice's owner (no other event, no nudge), which releases it at once."""
    svc = opted()
    svc["spec"]["engine"].update(minReplicas=2, maxReplicas=2)
    env.apply(svc)
    eventually(
        lambda: len(env.rows()) == 2 and all(r["phase"] == "Ready" for r in env.rows()), timeout=60
    )
    doomed = next(
        s for s in env.slices() if s["metadata"]["labels"]["ome.io/instance-index"] == "1"
    )
    host = env.rest.list(
        NODES,
        label_selector=f"cloud.google.com/gke-tpu-slice={doomed['metadata']['name']}",
    )["items"][0]
    # A foreign pod bound to the host, holding chips (bound directly: as a kubelet sees it).
    hold_chips_on(env, host["metadata"]["name"])
    env.apply(opted())  # scale down to 1: Instance 1's Slice is to be released
    message = eventually(lambda: env.events("SliceReleaseDeferred"), timeout=30)[0]
    assert message == (
        f"TPU slice {doomed['metadata']['name']} is kept: pods of other workloads hold chips on its "
        "hosts (tpu-batch/indexer-0); it is released once they are gone"
    )
    assert env.rest.get(gke.SLICES, doomed["metadata"]["name"])
    labels = {"slice_type": "tpu7x", "topology": "2x2x1"}
    # While it stays held, the release is retried with a backoff (1 s, 2 s, then 4 s) ...
    eventually(
        lambda: env.registry.get_sample_value("ome_tpu_slice_release_deferred_total", labels) >= 3,
        timeout=30,
    )
    env.rest.delete(PODS, "indexer-0", "tpu-batch", grace_period_seconds=0)
    # ... but the holder's going is what wakes it: released well before the next retry.
    eventually(lambda: released(env, doomed), timeout=3)
    eventually(lambda: len(env.slices()) == 1, timeout=30)


def released(env: Env, found: JSON) -> bool:
    """Whether the manager has released the Slice: it is gone, or going (GKE holds it behind
    its finalizer while it releases the partition)."""
    try:
        live = env.rest.get(gke.SLICES, found["metadata"]["name"])
    except ApiException as e:
        return e.status == 404
    return live["metadata"]["uid"] != found["metadata"]["uid"] or bool(
        live["metadata"].get("deletionTimestamp")
    )


def test_the_slices_gauge_counts_states_while_leading(env: Env) -> None:
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    labels = {"slice_type": "tpu7x", "topology": "2x2x1", "state": "ready"}
    eventually(lambda: env.registry.get_sample_value("ome_tpu_slices", labels) == 1.0, timeout=10)


def test_a_surge_update_gets_its_own_slice_and_the_old_one_goes(env: Env) -> None:
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    old = the_slice(env)
    changed = opted()
    changed["spec"]["engine"]["runner"]["image"] = "registry.example/sglang-tpu:v2"
    env.apply(changed)
    surge = eventually(
        lambda: [s for s in env.slices() if s["metadata"]["labels"]["ome.io/pod-ordinal"] == "1"],
        timeout=30,
    )[0]
    assert surge["metadata"]["name"].startswith("qwen3-tpu-engine-0-1-")
    eventually(
        lambda: [s["metadata"]["name"] for s in env.slices()] == [surge["metadata"]["name"]],
        timeout=60,
    )
    pod = env.rest.get(PODS, "qwen3-tpu-engine-0-default-1", NS)
    assert (
        pod["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-slice"] == surge["metadata"]["name"]
    )
    assert gone(lambda: env.rest.get(gke.SLICES, old["metadata"]["name"]))


def test_an_invalid_config_stops_the_manager_listing_every_error(
    cluster: Cluster, kubectl: Kubectl, tmp_path: Any
) -> None:
    import subprocess
    import sys
    from pathlib import Path

    rest = Rest(cluster.api)
    kubectl("apply", "-f", "config/crd/")
    rest.create(NAMESPACES, {"metadata": {"name": "ome"}})
    bad = json.loads(GUIDE_CONFIG_JSON)
    bad["chipResource"] = ""
    bad["slice"]["readyStates"] = []
    rest.create(
        CONFIGMAPS,
        {
            "metadata": {"name": "inferenceservice-config"},
            "data": {"tpuSliceProvisioning": json.dumps(bad)},
        },
        "ome",
    )
    script = Path(sys.executable).parent / "ome-manager"
    out = subprocess.run(
        [
            str(script),
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
            "--webhook-bind-address",
            "0",
            "--log-format",
            "text",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "Failed to initialize TPU slice provisioning configuration" in out.stderr
    assert "chipResource: required" in out.stderr
    assert "slice.readyStates: at least one state is required" in out.stderr


def test_a_config_map_it_cannot_read_at_start_is_one_line_and_an_exit_not_a_traceback(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    """Found by the soak: 429s on every start-up read of the ConfigMap outlasted the client's
    retries, and the manager died with a traceback. An API error at start is routine: one
    line naming it, and exit 1 for the Deployment to restart the manager."""
    import subprocess
    import sys

    kubectl("apply", "-f", "config/crd/")
    Rest(cluster.api).create(NAMESPACES, {"metadata": {"name": "ome"}})
    cluster.server.faults.add(
        Fault(verb="get", resource="configmaps", code=429, retry_after=0, times=None)
    )
    script = Path(sys.executable).parent / "ome-manager"
    out = subprocess.run(
        [
            str(script),
            *("--kubeconfig", str(cluster.kubeconfig)),
            *("--metrics-bind-address", "0", "--health-probe-bind-address", "0"),
            *("--webhook-bind-address", "0", "--log-format", "text"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert "cannot start: reading ConfigMap ome/inferenceservice-config failed: 429" in last


def test_a_teardown_past_its_deadline_finishes_with_a_warning(env: Env) -> None:
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    replica = env.rest.patch(
        INFERENCE_REPLICAS,
        "qwen3-tpu-engine",
        {"spec": {"lifecycle": {"teardownTimeout": "1s"}}},
        NS,
    )
    held = the_slice(env)
    host = eventually(
        lambda: env.rest.list(
            NODES, label_selector=f"cloud.google.com/gke-tpu-slice={held['metadata']['name']}"
        )["items"],
        timeout=10,
    )[0]
    hold_chips_on(env, host["metadata"]["name"])
    env.kubectl("delete", "inferenceservice", "qwen3-tpu", "-n", NS, "--wait=false")
    eventually(
        lambda: gone(lambda: env.rest.get(INFERENCE_REPLICAS, "qwen3-tpu-engine", NS)), timeout=60
    )
    items = eventually(
        lambda: env.rest.list(EVENTS, NS, field_selector="reason=TeardownDeadlineExceeded")[
            "items"
        ],
        timeout=10,
    )  # events are written in the background
    uid = replica["metadata"]["uid"]
    assert items and items[0]["message"] == (
        "teardown deadline exceeded; releasing owned TPU slices failed: TPU slice "
        f"{held['metadata']['name']} is kept: pods of other workloads hold chips on its hosts "
        f"(tpu-batch/indexer-0); delete the slices labeled ome.io/slice-owner-uid={uid} by hand"
    )
    assert items[0]["involvedObject"]["kind"] == "InferenceReplica"


@pytest.mark.parametrize(
    ("knob", "why"),
    [("sim.ome.io/not-ready", "is not ready"), ("sim.ome.io/unreachable", "is unreachable")],
)
def test_a_ready_slice_on_a_not_ready_or_unreachable_host_is_recycled(
    slow: Env, knob: str, why: str
) -> None:
    env = slow
    env.apply(opted())
    _, host = activating_host(env)
    env.kubectl("annotate", "node", host["metadata"]["name"], f"{knob}=true")
    message = eventually(lambda: env.events("SliceHostUnavailable"), timeout=60)[0]
    assert f"but node {host['metadata']['name']} {why}; it is released" in message
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )


def test_a_running_instances_slice_is_left_alone_when_a_host_breaks(env: Env) -> None:
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    running = the_slice(env)
    host = env.rest.get(PODS, "qwen3-tpu-engine-0-default-0", NS)["spec"]["nodeName"]
    env.kubectl("cordon", host)
    env.rest.patch(
        INFERENCE_REPLICAS, "qwen3-tpu-engine", {"metadata": {"annotations": {"nudge": "1"}}}, NS
    )
    eventually(lambda: env.rows()[0]["phase"] == "Ready", timeout=10)
    assert env.events("SliceHostUnavailable") == []
    assert env.slices()[0]["metadata"]["uid"] == running["metadata"]["uid"]


def test_slice_lost_when_moved_off_its_node(env: Env) -> None:
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    name = the_slice(env)["metadata"]["name"]
    host = env.rest.get(PODS, "qwen3-tpu-engine-0-default-0", NS)["spec"]["nodeName"]
    env.kubectl("annotate", "slices.accelerator.gke.io", name, "sim.ome.io/move=1")
    message = eventually(lambda: env.events("SliceLost"), timeout=30)[0]
    assert message == (
        f"TPU slice {name} moved off node {host} while pods qwen3-tpu-engine-0-default-0 ran on it; "
        "they are deleted so that their Instance is rebuilt"
    )


@pytest.fixture
def tight_timeout(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    yield from make_env(
        cluster, kubectl, ["tpu7x:provision-only:1"], config=ready_timeout_config("1s")
    )


def test_pool_without_capacity_never_times_out(tight_timeout: Env) -> None:
    env = tight_timeout
    env.apply(opted("first"))
    eventually(lambda: (r := env.rows("first-engine")) and r[0]["phase"] == "Ready", timeout=60)
    env.apply(opted("second"))
    waiting = eventually(
        lambda: [s for s in env.slices() if s["metadata"]["name"].startswith("second-")], timeout=30
    )[0]
    # The scenario is time passing: past the 1s ready timeout (from the Slice's creation,
    # which its stamp's one-second resolution may show up to a second early), and a pass.
    created = parse_time(waiting["metadata"]["creationTimestamp"])
    assert created is not None
    clock_past(created + timedelta(seconds=2))
    after_a_pass(env, "tpuslice", "second-engine")
    still = env.rest.get(gke.SLICES, waiting["metadata"]["name"])
    assert still["metadata"]["uid"] == waiting["metadata"]["uid"]
    assert "deletionTimestamp" not in still["metadata"]
    # (The first Slice may time out while it activates on a slow machine; the waiting one never.)
    assert not [m for m in env.events("SliceReadyTimeout") if waiting["metadata"]["name"] in m]


def test_slice_lost_when_recreated_from_outside(env: Env) -> None:
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    old = the_slice(env)
    name = old["metadata"]["name"]
    copy_of = {
        "apiVersion": old["apiVersion"],
        "kind": "Slice",
        "metadata": {
            "name": name,
            "labels": old["metadata"]["labels"],
            "annotations": old["metadata"]["annotations"],
        },
        "spec": {"type": "tpu7x", "topology": "2x2x1", "partitionIds": []},
    }
    a_second_after(old["metadata"]["creationTimestamp"])  # the copy is younger
    env.cluster.server.faults.add(
        Fault(verb="create", resource="slices", user_agent=MANAGER_AGENT, code=503, times=None)
    )
    env.rest.delete(gke.SLICES, name)
    eventually(lambda: gone(lambda: env.rest.get(gke.SLICES, name)), timeout=30)
    env.rest.create(gke.SLICES, copy_of)  # re-created from outside, with OME's labels
    env.cluster.server.faults.clear()
    message = eventually(lambda: env.events("SliceLost"), timeout=30)[0]
    assert message.startswith(
        f"TPU slice {name} was deleted while pods qwen3-tpu-engine-0-default-0 ran on it"
    )


def test_a_replacement_pod_created_during_a_loss_is_never_deleted(env: Env) -> None:
    """The manager decides to delete a lost pod; before its delete lands, the pod is replaced
    at the same name. The delete names the old UID, so the server refuses it. The replacement
    is the test's, or the manager's own when its InferenceReplica pass saw the pod gone first
    (its Slice is ready on its new hosts): either way a pod of a new UID."""
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    name = the_slice(env)["metadata"]["name"]
    pod_name = "qwen3-tpu-engine-0-default-0"
    old = env.rest.get(PODS, pod_name, NS)
    deleted_uids: list[str] = []

    def record(change: Any) -> None:
        if change.type == "DELETED" and change.tkey == ("", "pods"):
            deleted_uids.append(change.obj["metadata"]["uid"])

    env.cluster.thread.call(lambda: env.cluster.server.store.listeners.append(record))
    acc = env.cluster.server.accounting
    before = acc.total("delete", "pods", MANAGER_AGENT)
    held, answered = threading.Event(), threading.Event()
    env.cluster.server.faults.add(
        Fault(
            verb="delete", resource="pods", user_agent=MANAGER_AGENT, hold=held, answered=answered
        )
    )
    try:
        env.kubectl("annotate", "slices.accelerator.gke.io", name, "sim.ome.io/move=1")
        # The manager's delete of the old pod is in flight, held by the server.
        eventually(lambda: acc.total("delete", "pods", MANAGER_AGENT) > before, timeout=30)
        env.rest.delete(PODS, pod_name, NS, grace_period_seconds=0)
        eventually(lambda: gone(lambda: env.rest.get(PODS, pod_name, NS)), timeout=10)
        replacement = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                k: old["metadata"][k]
                for k in ("name", "labels", "annotations", "ownerReferences")
                if k in old["metadata"]
            },
            "spec": {k: v for k, v in old["spec"].items() if k != "nodeName"},
        }
        try:
            new_uid = env.rest.create(PODS, replacement, NS)["metadata"]["uid"]
        except ApiException as e:
            assert e.status == 409, e
            new_uid = env.rest.get(PODS, pod_name, NS)["metadata"]["uid"]
        assert new_uid != old["metadata"]["uid"]
    finally:
        held.set()
    assert answered.wait(30), "the manager's held delete was never answered"
    assert env.rest.get(PODS, pod_name, NS)["metadata"]["uid"] == new_uid
    # The replacement follows the slice label to the Slice's new host and serves there.
    eventually(lambda: (r := env.rows()) and r[0]["phase"] == "Ready", timeout=60)
    assert new_uid not in deleted_uids
    assert env.rest.get(PODS, pod_name, NS)["metadata"]["uid"] == new_uid
    assert env.events("SliceLost") == [], "the manager deleted nothing, so it reports nothing"


def test_a_failed_create_is_counted_by_its_reason_and_tried_again(env: Env) -> None:
    attempts = env.manager.client.policy.attempts
    env.cluster.server.faults.add(
        Fault(verb="create", resource="slices", user_agent=MANAGER_AGENT, code=500, times=attempts)
    )
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    series = {"slice_type": "tpu7x", "topology": "2x2x1"}
    failures = env.registry.get_sample_value(
        "ome_tpu_slice_create_failures_total", {**series, "reason": "InternalError"}
    )
    assert failures == 1.0, "one create call, its retries used up, failed"
    assert env.registry.get_sample_value("ome_tpu_slice_created_total", series) == 1.0
    assert len(env.slices()) == 1


def test_a_create_that_meets_a_foreign_slice_counts_an_ownership_conflict(env: Env) -> None:
    """The manager's create is in flight when someone else takes the name: AlreadyExists, a
    live read finds another owner, and the failure is counted as OwnershipConflict."""
    held, answered = threading.Event(), threading.Event()
    env.cluster.server.faults.add(
        Fault(
            verb="create", resource="slices", user_agent=MANAGER_AGENT, hold=held, answered=answered
        )
    )
    try:
        env.apply(opted())
        acc = env.cluster.server.accounting
        eventually(lambda: acc.total("create", "slices", MANAGER_AGENT) == 1, timeout=30)
        replica = env.rest.get(INFERENCE_REPLICAS, "qwen3-tpu-engine", NS)["metadata"]
        name = naming.slice_name(
            "qwen3-tpu-engine",
            naming.Slot(0, 0),
            naming.owner_hash(NS, "qwen3-tpu-engine", replica["uid"]),
        )
        foreign = env.rest.create(
            gke.SLICES,
            {
                "apiVersion": "accelerator.gke.io/v1beta1",
                "kind": "Slice",
                "metadata": {"name": name, "labels": {"team": "other"}},
                "spec": {"type": "tpu7x", "topology": "2x2x1", "partitionIds": []},
            },
        )
    finally:
        held.set()
    assert answered.wait(30)
    labels = {"slice_type": "tpu7x", "topology": "2x2x1", "reason": "OwnershipConflict"}
    eventually(
        lambda: env.registry.get_sample_value("ome_tpu_slice_create_failures_total", labels) == 1.0
    )
    eventually(lambda: env.events("SliceOwnershipConflict"), timeout=30)
    assert env.rest.get(gke.SLICES, name)["metadata"]["uid"] == foreign["metadata"]["uid"]
    assert env.pods() == []

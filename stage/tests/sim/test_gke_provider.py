"""The simulated GKE provider against the embedded API server: node pools and heartbeats,
the Slice lifecycle, every knob, and the scheduler and kubelet stand-ins."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test.cluster import Cluster, Kubectl
from test.helpers import a_second_after, eventually, gone

from ome.runtime.rest import LEASES, NODES, PODS, Rest
from ome_sim.gke.model import (
    ACCELERATOR_LABEL,
    KNOB,
    SLICE_FINALIZER,
    SLICE_LABEL,
    TOPOLOGY_LABEL,
    parse_pools,
)
from ome_sim.gke.provider import SLICES, Options, Provider, install_slice_crd

JSON = dict[str, Any]


class Sim:
    def __init__(self, cluster: Cluster, provider: Provider, rest: Rest) -> None:
        self.cluster, self.provider, self.rest = cluster, provider, rest

    def slice(self, name: str, topology: str = "2x2x1", **annotations: str) -> JSON:
        body = {
            "apiVersion": "accelerator.gke.io/v1beta1",
            "kind": "Slice",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"type": "tpu7x", "topology": topology, "partitionIds": []},
        }
        return self.rest.create(SLICES, body)

    def get(self, name: str) -> JSON:
        return self.rest.get(SLICES, name)

    def state(self, name: str) -> str:
        for c in (self.get(name).get("status") or {}).get("conditions") or []:
            if c["type"] == "Ready":
                return str(c.get("reason", ""))
        return ""

    def wait_state(self, name: str, state: str, timeout: float = 10.0) -> JSON:
        eventually(lambda: self.state(name) == state, timeout)
        return self.get(name)

    def hosts(self, name: str) -> list[str]:
        return sorted(
            n["metadata"]["name"]
            for n in self.rest.list(NODES, label_selector=f"{SLICE_LABEL}={name}")["items"]
        )

    def annotate(self, kind: str, name: str, key: str, value: str | None) -> None:
        res = SLICES if kind == "slice" else NODES
        self.rest.patch(res, name, {"metadata": {"annotations": {key: value}}})

    def node(self, name: str) -> JSON:
        return self.rest.get(NODES, name)

    def heartbeats(self, count: int = 2, status_reports: int = 0) -> None:
        """Return once the provider has renewed its nodes' leases ``count`` more times (and
        reported their status ``status_reports`` more times). It works through one queue in
        the order things fall due, and each heartbeat queues the next one, an interval on:
        from the second on, a heartbeat comes after all that was due when this was called."""
        work = self.provider.work
        beats, reports = work["heartbeat"], work["node-status"]
        eventually(
            lambda: (
                work["heartbeat"] >= beats + count
                and work["node-status"] >= reports + status_reports
            )
        )


def ready_of(obj: JSON) -> JSON:
    return next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")


def start_sim(cluster: Cluster, pools: list[str], **options: Any) -> Iterator[Sim]:
    rest = Rest(cluster.api)
    install_slice_crd(rest)
    opts = Options(
        activation_delay=0.2, heartbeat_interval=0.5, status_interval=1.0, scheduler="on"
    )
    for k, v in options.items():
        setattr(opts, k, v)
    provider = Provider(rest, parse_pools(pools), opts)
    provider.start()
    try:
        yield Sim(cluster, provider, rest)
    finally:
        provider.stop()


@pytest.fixture
def sim(cluster: Cluster) -> Iterator[Sim]:
    yield from start_sim(cluster, ["tpu7x:provision-only:4", "tpu7x:static:2"])


@pytest.fixture
def small(cluster: Cluster) -> Iterator[Sim]:
    yield from start_sim(cluster, ["tpu7x:provision-only:2"])


# -- node pools ------------------------------------------------------------------------------


def test_pools_create_labelled_tainted_ready_tpu_hosts(sim: Sim, kubectl: Kubectl) -> None:
    out = kubectl(
        "get",
        "nodes",
        "-o",
        "name",
        "-l",
        "cloud.google.com/gke-tpu-accelerator=tpu7x,cloud.google.com/gke-accelerator-topology-mode=PROVISION_ONLY",
    ).stdout.split()
    assert out == [f"node/gke-tpu-pool-node-{i}" for i in range(4)]
    node = sim.node("gke-tpu-pool-node-0")
    assert node["status"]["capacity"]["google.com/tpu"] == "4"
    assert node["status"]["allocatable"]["google.com/tpu"] == "4"
    assert {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"} in node["spec"][
        "taints"
    ]
    assert ready_of(node)["status"] == "True"
    static = sim.node("gke-tpu-static-node-0")["metadata"]["labels"]
    assert static[ACCELERATOR_LABEL] == "tpu7x" and static[TOPOLOGY_LABEL] == "2x2x1"
    assert "cloud.google.com/gke-accelerator-topology-mode" not in static


def test_heartbeats_renew_leases_and_keep_nodes_ready(sim: Sim) -> None:
    first = sim.rest.get(LEASES, "gke-tpu-pool-node-0", "kube-node-lease")["spec"]["renewTime"]
    eventually(
        lambda: (
            sim.rest.get(LEASES, "gke-tpu-pool-node-0", "kube-node-lease")["spec"]["renewTime"]
            != first
        )
    )
    beat = ready_of(sim.node("gke-tpu-pool-node-1"))["lastHeartbeatTime"]
    eventually(
        lambda: ready_of(sim.node("gke-tpu-pool-node-1"))["lastHeartbeatTime"] != beat, timeout=5
    )
    assert ready_of(sim.node("gke-tpu-pool-node-1"))["status"] == "True"


# -- the Slice lifecycle ---------------------------------------------------------------------


def test_a_slice_goes_from_no_state_to_active_and_back_to_free_hosts(sim: Sim) -> None:
    rv = sim.rest.list(SLICES)["metadata"]["resourceVersion"]
    sim.slice("s1", "2x2x2")
    active = sim.wait_state("s1", "ACTIVE")
    assert SLICE_FINALIZER in active["metadata"]["finalizers"]
    assert len(active["spec"]["partitionIds"]) == 2
    hosts = eventually(lambda: sim.hosts("s1") if len(sim.hosts("s1")) == 2 else None)
    assert len(set(hosts)) == 2, "a 2x2x2 slice gets two distinct hosts"
    assert all(sim.node(h)["metadata"]["labels"][TOPOLOGY_LABEL] == "2x2x2" for h in hosts)
    sim.rest.delete(SLICES, "s1")
    eventually(lambda: gone(lambda: sim.get("s1")))
    assert sim.hosts("s1") == []
    assert all(TOPOLOGY_LABEL not in sim.node(h)["metadata"]["labels"] for h in hosts)
    states = []
    for event in sim.rest.watch(SLICES, rv, timeout_seconds=1):
        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
            conds = (event["object"].get("status") or {}).get("conditions") or []
            states.append(conds[0].get("reason", "") if conds else "")
    ordered = [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]
    assert ordered == ["", "ACTIVATING", "ACTIVE", "DEACTIVATING"]


def test_a_slice_waits_for_capacity_then_takes_a_released_slices_hosts(small: Sim) -> None:
    small.slice("big", "2x2x2")
    small.wait_state("big", "ACTIVE")
    small.slice("waiting-1", **{KNOB["stick-activating"]: "true"})
    # GKE's Ready condition says why it waits (what `kubectl describe` shows), with no
    # reason: no state, so OME reads "waiting for partition assignment".
    waiting = eventually(
        lambda: w if (w := small.get("waiting-1")).get("status", {}).get("conditions") else None
    )
    assert waiting["spec"]["partitionIds"] == [] and small.state("waiting-1") == ""
    ready = ready_of(waiting)
    assert ready["status"] == "Unknown" and "reason" not in ready
    assert ready["message"] == (
        "waiting for partition assignment: not enough free tpu7x hosts for topology 2x2x1 "
        "(1 host needed)"
    )
    small.slice("waiting-2")
    a_second_after(ready["lastTransitionTime"])
    small.rest.delete(SLICES, "big")
    activating = small.wait_state("waiting-1", "ACTIVATING")
    assert ready_of(activating)["lastTransitionTime"] > ready["lastTransitionTime"], (
        "the first state starts a new transition: the wait for capacity is not counted "
        "against the ready timeout"
    )
    small.annotate("slice", "waiting-1", KNOB["stick-activating"], None)
    small.wait_state("waiting-1", "ACTIVE")
    small.wait_state("waiting-2", "ACTIVE")
    assert set(small.hosts("waiting-1")).isdisjoint(small.hosts("waiting-2"))


@pytest.fixture
def one_host(cluster: Cluster) -> Iterator[Sim]:
    yield from start_sim(cluster, ["tpu7x:provision-only:1"])


def test_released_hosts_serve_the_oldest_waiting_slice_first(one_host: Sim) -> None:
    sim = one_host
    sim.slice("first")
    sim.wait_state("first", "ACTIVE")
    sim.slice("older")
    a_second_after(sim.get("older")["metadata"]["creationTimestamp"])
    sim.slice("younger")
    sim.rest.delete(SLICES, "first")
    sim.wait_state("older", "ACTIVE")
    assert sim.get("younger")["spec"]["partitionIds"] == []


def test_a_topology_that_never_fits_waits_without_a_busy_loop(small: Sim) -> None:
    small.slice("huge", "4x4x4")
    small.slice("fits")
    small.wait_state("fits", "ACTIVE")
    before = small.provider.work["assign"]
    small.heartbeats()
    assert small.state("huge") == "" and small.get("huge")["spec"]["partitionIds"] == []
    # Heartbeat status writes may wake it a few times; a busy loop would run thousands.
    assert small.provider.work["assign"] - before <= 10, "no assignment pass without a change"


def test_an_impossible_topology_fails_creation(sim: Sim) -> None:
    sim.slice("odd", "1x3")
    failed = sim.wait_state("odd", "SliceCreationFailed")
    assert (
        ready_of(failed)["message"] == "topology 1x3 is 3 chips, not a whole number of 4-chip hosts"
    )


# -- knobs -----------------------------------------------------------------------------------


def test_activation_delay_knob(sim: Sim) -> None:
    start = time.monotonic()
    sim.slice("slow", **{KNOB["activation-delay"]: "1s"})
    sim.wait_state("slow", "ACTIVATING")
    sim.wait_state("slow", "ACTIVE")
    assert time.monotonic() - start >= 1.0


def test_stick_activating_knob_holds_until_removed(sim: Sim) -> None:
    sim.slice("stuck", **{KNOB["stick-activating"]: "true"})
    stuck = sim.wait_state("stuck", "ACTIVATING")
    assert stuck["spec"]["partitionIds"], "it has its partition but no ready state"
    sim.heartbeats()  # past its activation's due time (0.2 s here, a heartbeat is 0.5 s)
    assert sim.state("stuck") == "ACTIVATING" and sim.hosts("stuck") == []
    sim.annotate("slice", "stuck", KNOB["stick-activating"], None)
    sim.wait_state("stuck", "ACTIVE")


def test_fail_and_degrade_knobs(sim: Sim) -> None:
    sim.slice("s")
    sim.wait_state("s", "ACTIVE")
    sim.annotate("slice", "s", KNOB["degrade"], "true")
    degraded = sim.wait_state("s", "ACTIVE_DEGRADED")
    assert ready_of(degraded)["status"] == "True"
    sim.annotate("slice", "s", KNOB["degrade"], None)
    sim.wait_state("s", "ACTIVE")
    sim.annotate("slice", "s", KNOB["fail"], "true")
    failed = sim.wait_state("s", "FAILED")
    assert ready_of(failed)["status"] == "False"
    sim.slice("never", **{KNOB["fail"]: "true"})
    sim.wait_state("never", "FAILED")


def test_drop_partitions_knob(sim: Sim) -> None:
    sim.slice("s")
    sim.wait_state("s", "ACTIVE")
    eventually(lambda: sim.hosts("s"))
    sim.annotate("slice", "s", KNOB["drop-partitions"], "true")
    eventually(lambda: sim.get("s")["spec"]["partitionIds"] == [])
    eventually(lambda: sim.hosts("s") == [])
    sim.heartbeats()
    assert sim.get("s")["spec"]["partitionIds"] == [], (
        "not given new partitions while the knob is set"
    )


def test_move_knob_moves_the_slice_to_other_hosts(sim: Sim) -> None:
    sim.slice("s", "2x2x2")
    sim.wait_state("s", "ACTIVE")
    before = eventually(lambda: sim.hosts("s") if len(sim.hosts("s")) == 2 else None)
    old_partitions = sim.get("s")["spec"]["partitionIds"]
    sim.annotate("slice", "s", KNOB["move"], "1")
    eventually(lambda: sim.get("s")["metadata"]["annotations"].get("sim.ome.io/moved") == "1")
    after = eventually(
        lambda: sim.hosts("s") if len(sim.hosts("s")) == 2 and sim.hosts("s") != before else None
    )
    assert set(after).isdisjoint(before)
    assert sim.get("s")["spec"]["partitionIds"] != old_partitions
    assert sim.state("s") == "ACTIVE"


def test_node_knobs_not_ready_unreachable_and_cordon(sim: Sim, kubectl: Kubectl) -> None:
    sim.annotate("node", "gke-tpu-pool-node-0", KNOB["not-ready"], "true")
    eventually(lambda: ready_of(sim.node("gke-tpu-pool-node-0"))["status"] == "False")
    taints = sim.node("gke-tpu-pool-node-0")["spec"]["taints"]
    assert {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"} in taints
    sim.annotate("node", "gke-tpu-pool-node-1", KNOB["unreachable"], "true")
    eventually(lambda: ready_of(sim.node("gke-tpu-pool-node-1"))["status"] == "Unknown")
    lease = sim.rest.get(LEASES, "gke-tpu-pool-node-1", "kube-node-lease")["spec"]["renewTime"]
    sim.heartbeats()
    assert (
        sim.rest.get(LEASES, "gke-tpu-pool-node-1", "kube-node-lease")["spec"]["renewTime"] == lease
    )
    kubectl("cordon", "gke-tpu-pool-node-2")
    # Only node-3 is healthy: a 2-host slice waits, a 1-host slice gets node-3.
    sim.slice("two", "2x2x2")
    sim.slice("one")
    sim.wait_state("one", "ACTIVE")
    assert eventually(lambda: sim.hosts("one")) == ["gke-tpu-pool-node-3"]
    assert sim.state("two") == ""
    sim.annotate("node", "gke-tpu-pool-node-0", KNOB["not-ready"], None)
    eventually(lambda: ready_of(sim.node("gke-tpu-pool-node-0"))["status"] == "True")
    kubectl("uncordon", "gke-tpu-pool-node-2")
    sim.wait_state("two", "ACTIVE")


def test_a_removed_host_stays_removed(sim: Sim, kubectl: Kubectl) -> None:
    kubectl("delete", "node", "gke-tpu-pool-node-3")
    sim.heartbeats(status_reports=1)
    assert gone(lambda: sim.node("gke-tpu-pool-node-3"))


# -- scheduler and kubelet stand-ins -------------------------------------------------------------


def tpu_pod(
    name: str, chips: int, selector: JSON, tolerate: bool = True, namespace: str = "default"
) -> JSON:
    spec: JSON = {
        "nodeSelector": selector,
        "containers": [
            {
                "name": "main",
                "image": "registry.example/tpu:1",
                "resources": {"limits": {"google.com/tpu": str(chips)}},
            }
        ],
    }
    if tolerate:
        spec["tolerations"] = [
            {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


STATIC = {ACCELERATOR_LABEL: "tpu7x", TOPOLOGY_LABEL: "2x2x1"}


def pod_of(sim: Sim, name: str) -> JSON:
    return sim.rest.get(PODS, name, "default")


def scheduled_condition(pod: JSON) -> JSON | None:
    """The pod's PodScheduled condition; None until the scheduler has written one."""
    conditions = pod["status"].get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodScheduled"), None)


def test_scheduler_never_overcommits_chips_and_says_why(sim: Sim) -> None:
    for i in range(3):
        sim.rest.create(PODS, tpu_pod(f"p{i}", 4, STATIC), "default")
    nodes = eventually(
        lambda: (
            sorted(n for n in (pod_of(sim, f"p{i}")["spec"].get("nodeName") for i in range(3)) if n)
            if sum(1 for i in range(3) if pod_of(sim, f"p{i}")["spec"].get("nodeName")) == 2
            else None
        )
    )
    assert nodes == ["gke-tpu-static-node-0", "gke-tpu-static-node-1"]
    waiting = next(
        pod_of(sim, f"p{i}") for i in range(3) if not pod_of(sim, f"p{i}")["spec"].get("nodeName")
    )
    cond = eventually(lambda: scheduled_condition(pod_of(sim, waiting["metadata"]["name"])))
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
    assert "2 Insufficient google.com/tpu" in cond["message"]
    # Capacity frees up: the waiting pod is bound once a running one is gone.
    bound = next(f"p{i}" for i in range(3) if pod_of(sim, f"p{i}")["spec"].get("nodeName"))
    sim.rest.delete(PODS, bound, "default")
    eventually(lambda: pod_of(sim, waiting["metadata"]["name"])["spec"].get("nodeName"))


def test_scheduler_honours_selectors_and_taints(sim: Sim) -> None:
    sim.rest.create(PODS, tpu_pod("untolerating", 4, STATIC, tolerate=False), "default")
    sim.rest.create(PODS, tpu_pod("nowhere", 4, {ACCELERATOR_LABEL: "v9"}), "default")
    for name, reason in (
        ("untolerating", "untolerated taint {google.com/tpu: present}"),
        ("nowhere", "didn't match Pod's node affinity/selector"),
    ):
        cond = eventually(lambda n=name: scheduled_condition(pod_of(sim, n)))
        assert cond["reason"] == "Unschedulable" and reason in cond["message"]
        assert not pod_of(sim, name)["spec"].get("nodeName")


def test_kubelet_runs_bound_pods_and_finishes_graceful_deletion(sim: Sim) -> None:
    sim.rest.create(PODS, tpu_pod("runner", 4, STATIC), "default")
    running = eventually(
        lambda: (
            pod_of(sim, "runner")
            if pod_of(sim, "runner")["status"].get("phase") == "Running"
            else None
        )
    )
    ready = next(c for c in running["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and running["status"]["podIP"]
    node = running["spec"]["nodeName"]
    sim.annotate("node", node, KNOB["not-ready"], "true")
    eventually(
        lambda: (
            next(c for c in pod_of(sim, "runner")["status"]["conditions"] if c["type"] == "Ready")[
                "status"
            ]
            == "False"
        )
    )
    sim.annotate("node", node, KNOB["not-ready"], None)
    eventually(
        lambda: (
            next(c for c in pod_of(sim, "runner")["status"]["conditions"] if c["type"] == "Ready")[
                "status"
            ]
            == "True"
        )
    )
    sim.rest.delete(PODS, "runner", "default")
    eventually(lambda: gone(lambda: pod_of(sim, "runner")))


def test_slice_hosts_take_pods_that_select_the_slice(sim: Sim) -> None:
    sim.slice("s")
    sim.wait_state("s", "ACTIVE")
    eventually(lambda: sim.hosts("s"))
    selector = {ACCELERATOR_LABEL: "tpu7x", TOPOLOGY_LABEL: "2x2x1", SLICE_LABEL: "s"}
    sim.rest.create(PODS, tpu_pod("on-slice", 4, selector), "default")
    bound = eventually(lambda: pod_of(sim, "on-slice")["spec"].get("nodeName"))
    assert [bound] == sim.hosts("s")


# -- cost ------------------------------------------------------------------------------------


@pytest.fixture
def crowded(cluster: Cluster) -> Iterator[Sim]:
    yield from start_sim(
        cluster,
        ["tpu7x:provision-only:8"],
        heartbeat_interval=0.3,
        status_interval=3600.0,
        activation_delay=0.0,
    )


def test_a_quiet_cluster_costs_only_heartbeats(cluster: Cluster, crowded: Sim) -> None:
    sim = crowded
    for i in range(500):
        sim.slice(f"s-{i:03d}")

    def settled() -> bool:
        items = sim.rest.list(SLICES)["items"]
        states = [ready_of(s) if (s.get("status") or {}).get("conditions") else {} for s in items]
        active = sum(1 for r in states if r.get("reason") == "ACTIVE")
        waiting = sum(1 for r in states if r.get("status") == "Unknown" and "reason" not in r)
        held = all(SLICE_FINALIZER in (s["metadata"].get("finalizers") or []) for s in items)
        return active == 8 and waiting == 492 and held

    eventually(settled, timeout=60)

    def drained() -> bool:
        """A heartbeat went by with no other work: the last writes' events are worked off."""
        before = dict(sim.provider.work)
        sim.heartbeats(1)
        after = dict(sim.provider.work)
        return {k for k, v in after.items() if v != before.get(k, 0)} <= {"heartbeat"}

    eventually(drained, timeout=30)
    accounting = cluster.server.accounting
    accounting.reset()
    work = dict(sim.provider.work)
    sim.heartbeats(3)
    writes = [
        r
        for r in accounting.snapshot()
        if r["verb"] in ("create", "update", "patch", "delete") and r["resource"] != "leases"
    ]
    assert writes == [], json.dumps(writes)
    assert accounting.total("patch", "leases") >= 8
    changed = {k: v - work.get(k, 0) for k, v in sim.provider.work.items() if v != work.get(k, 0)}
    assert set(changed) <= {"heartbeat"}, changed

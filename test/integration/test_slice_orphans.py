"""Orphan collection (G6) on the embedded cluster with the simulated GKE provider: a Slice whose
InferenceReplica is gone is released by OME itself, by the rules of any release, and nothing
else is ever touched. What a user sees: the Slice gone, the counters, the log line, the
Warnings."""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from ome.api.v1beta1 import INFERENCE_REPLICAS
from ome.controllers.slices import orphans
from ome.provider import gke
from ome.runtime.informer import EventHandler
from ome.runtime.rest import EVENTS, NODES, PODS
from ome.tpuslice import naming
from ome_sim.apiserver.faults import Fault
from test import admission_cases
from test.cluster import Cluster, Kubectl
from test.helpers import a_second_after, eventually, gone
from test.integration.test_omenative import NS
from test.integration.test_slices import (
    MANAGER_AGENT,
    Env,
    guide_env,
    hold_chips_on,
    keep_terminating,
    let_go,
    opted,
    reconciles,
    the_slice,
)

JSON = dict[str, Any]
REPLICA = "qwen3-tpu-engine"
SERIES = {"slice_type": "tpu7x", "topology": "2x2x1"}


@pytest.fixture
def env(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    yield from guide_env(cluster, kubectl)


def serving(env: Env) -> tuple[JSON, JSON]:
    """The walkthrough's service, Ready: its replica and its one Slice."""
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    return env.rest.get(INFERENCE_REPLICAS, REPLICA, NS), the_slice(env)


def force_gone(env: Env) -> None:
    """What a person does to a replica whose teardown they gave up on: the service deleted,
    then the replica's finalizer removed by force."""
    env.kubectl("delete", "inferenceservice", "qwen3-tpu", "-n", NS, "--wait=false")
    strip_finalizer(env)


def metric(env: Env, name: str, labels: dict[str, str] = SERIES) -> float:
    return env.registry.get_sample_value(name, labels) or 0.0


def released(env: Env, found: JSON) -> bool:
    """The Slice is gone, or going (its delete accepted: GKE releases it behind its
    finalizer)."""
    try:
        live = env.rest.get(gke.SLICES, found["metadata"]["name"])
    except Exception:
        return gone(lambda: env.rest.get(gke.SLICES, found["metadata"]["name"]))
    return bool(
        live["metadata"]["uid"] != found["metadata"]["uid"]
        or live["metadata"].get("deletionTimestamp")
    )


def counted(env: Env, name: str, total: float = 1) -> None:
    """The counter ``name`` reaches ``total`` and stays there: the manager counts a release
    just after its delete returns, so a test that saw the Slice going may look first."""
    eventually(lambda: metric(env, name) >= total, timeout=5)
    assert metric(env, name) == total


def slice_deletes(env: Env) -> int:
    return env.cluster.server.accounting.total("delete", "slices", MANAGER_AGENT)


def strip_finalizer(env: Env) -> None:
    """The replica's finalizer removed by force (``kubectl patch``): a deleting replica goes at
    once, and its pods with it (the garbage collector)."""
    env.kubectl(
        "patch",
        "inferencereplica",
        REPLICA,
        "-n",
        NS,
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":null}}',
    )
    eventually(lambda: gone(lambda: env.rest.get(INFERENCE_REPLICAS, REPLICA, NS)), timeout=30)


def stuck_teardown(env: Env) -> str:
    """The service deleted while its pod is held terminating (a finalizer of the test's, as a
    long grace period would): its replica's teardown waits for the pod, its Slice kept. The
    pod's name."""
    pod = f"{REPLICA}-0-default-0"
    keep_terminating(env, pod)
    env.kubectl("delete", "inferenceservice", "qwen3-tpu", "-n", NS, "--wait=false")
    eventually(lambda: env.rest.get(PODS, pod, NS)["metadata"].get("deletionTimestamp"))
    eventually(
        lambda: env.rest.get(INFERENCE_REPLICAS, REPLICA, NS)["metadata"].get("deletionTimestamp")
    )
    return pod


def test_a_slice_whose_replica_lost_its_finalizer_by_force_is_released_within_30s(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """The manager is running when a person strips the finalizer of a replica whose teardown
    waits: the replica's going wakes the orphan controller, which sees the Slice twice, 10 s
    apart, confirms live that no replica has its owner UID and releases it; the log says so
    in one line, the counters and the gauge follow."""
    replica, found = serving(env)
    name, uid = found["metadata"]["name"], replica["metadata"]["uid"]
    pod = stuck_teardown(env)
    with caplog.at_level(logging.INFO, logger="ome.controllers.slices.act"):
        start = time.monotonic()
        strip_finalizer(env)
        let_go(env, pod)
        eventually(lambda: released(env, found), timeout=30)
        assert time.monotonic() - start < 30
        counted(env, "ome_tpu_slice_orphans_released_total")
        counted(env, "ome_tpu_slice_released_total")
        said = (
            f"released orphaned TPU slice {name}: no InferenceReplica has its owner UID {uid} "
            f"(its owner was {NS}/{REPLICA})"
        )
        eventually(lambda: said in caplog.messages, timeout=5)
    assert [m for m in caplog.messages if "orphaned TPU slice" in m] == [said]
    eventually(lambda: gone(lambda: env.rest.get(gke.SLICES, name)), timeout=30)
    assert not env.registry.get_sample_value("ome_tpu_slices", {**SERIES, "state": "orphaned"}), (
        "the orphaned gauge is back to 0"
    )


def test_an_orphan_is_kept_while_its_owners_pod_still_runs_on_it(
    env: Env, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod confined to the orphan that has not finished (its owner's, in a long grace
    period) keeps it, as a teardown would: said once in the log; released once the pod is
    gone."""
    monkeypatch.setattr(orphans, "ORPHAN_GRACE", orphans.ORPHAN_GRACE / 10)
    replica, found = serving(env)
    name, uid = found["metadata"]["name"], replica["metadata"]["uid"]
    pod = stuck_teardown(env)
    kept = (
        f"orphaned TPU slice {name} (no InferenceReplica has its owner UID {uid}) is kept while "
        f"pods {NS}/{pod} run on it; it is released once they are gone"
    )
    with caplog.at_level(logging.INFO, logger="ome.controllers.slices.act"):
        strip_finalizer(env)
        eventually(lambda: kept in caplog.messages, timeout=30)
        assert not released(env, found)
        let_go(env, pod)
        eventually(lambda: released(env, found), timeout=30)
    assert caplog.messages.count(kept) == 1


def test_an_orphan_found_at_start_is_released(env: Env) -> None:
    """The finalizer is removed by force while no manager runs: the next one, at its start,
    finds the orphan by looking over its caches, and releases it within 30 s."""
    _, found = serving(env)
    env.stop_manager()
    force_gone(env)
    env.start_manager()
    eventually(lambda: released(env, found), timeout=30)
    counted(env, "ome_tpu_slice_orphans_released_total")


def test_a_teardown_past_its_deadline_leaves_a_slice_that_goes_once_deletes_work(
    env: Env,
) -> None:
    """G5 then G6: Slice deletes fail through the teardown's deadline, so the deletion
    finishes with the TeardownDeadlineExceeded Warning and the Slice is left; once deletes
    work again, OME releases it within 60 s, retrying with backoff."""
    serving(env)
    replica = env.rest.patch(
        INFERENCE_REPLICAS, REPLICA, {"spec": {"lifecycle": {"teardownTimeout": "1s"}}}, NS
    )
    found = the_slice(env)
    env.cluster.server.faults.add(
        Fault(verb="delete", resource="slices", user_agent=MANAGER_AGENT, code=500, times=None)
    )
    env.kubectl("delete", "inferenceservice", "qwen3-tpu", "-n", NS, "--wait=false")
    eventually(lambda: gone(lambda: env.rest.get(INFERENCE_REPLICAS, REPLICA, NS)), timeout=60)
    warnings = eventually(lambda: env.events("TeardownDeadlineExceeded"), timeout=10)
    uid = replica["metadata"]["uid"]
    assert warnings[0].startswith(
        f"teardown deadline exceeded; releasing owned TPU slices failed: deleting TPU slice "
        f"{found['metadata']['name']} failed: "
    )
    assert warnings[0].endswith(f"delete the slices labeled ome.io/slice-owner-uid={uid} by hand")
    # The orphan's first tries fail too (the API still refuses): it waits, it is not gone.
    tries = slice_deletes(env)
    eventually(lambda: slice_deletes(env) > tries, timeout=30)
    assert not released(env, found)
    env.cluster.server.faults.clear()
    start = time.monotonic()
    eventually(lambda: released(env, found), timeout=60)
    assert time.monotonic() - start < 60
    counted(env, "ome_tpu_slice_orphans_released_total")


def test_an_orphan_held_by_another_workload_is_deferred_then_released(env: Env) -> None:
    """G2 holds for orphans too: while another workload's pod holds chips on its host, the
    orphan is kept (the counter and the SliceReleaseDeferred Warning, on the Slice itself, in
    the default namespace); once the pod goes, it is released."""
    _, found = serving(env)
    name = found["metadata"]["name"]
    (host,) = env.rest.list(NODES, label_selector=f"cloud.google.com/gke-tpu-slice={name}")["items"]
    hold_chips_on(env, host["metadata"]["name"])
    env.stop_manager()
    force_gone(env)
    env.start_manager()

    def deferred() -> list[JSON]:
        items = env.rest.list(EVENTS, "default", field_selector="reason=SliceReleaseDeferred")
        return list(items["items"])

    (event,) = eventually(deferred, timeout=30)
    assert event["involvedObject"]["kind"] == "Slice"
    assert event["involvedObject"]["name"] == name
    assert event["message"] == (
        f"TPU slice {name} is kept: pods of other workloads hold chips on its hosts "
        "(tpu-batch/indexer-0); it is released once they are gone"
    )
    assert metric(env, "ome_tpu_slice_release_deferred_total") >= 1
    assert not released(env, found)
    env.kubectl("delete", "pod", "indexer-0", "-n", "tpu-batch", "--wait=false")
    eventually(lambda: released(env, found), timeout=30)
    counted(env, "ome_tpu_slice_orphans_released_total")


def foreign(name: str, labels: dict[str, str] | None = None) -> JSON:
    return {
        "apiVersion": gke.API_VERSION,
        "kind": gke.KIND,
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"type": "tpu7x", "topology": "2x2x1", "partitionIds": []},
    }


def test_foreign_slices_are_never_touched(env: Env) -> None:
    """D4: a Slice without OME's owner-UID label is not OME's, whatever its name says: with
    an OME-like name and OME's other labels, or a name of its own, it is left byte for byte
    while OME collects a real orphan beside it."""
    replica, found = serving(env)
    like_ome = naming.slice_name(
        "qwen3-tpu-engine", naming.Slot(3, 0), naming.owner_hash(NS, REPLICA, "a-gone-uid")
    )
    env.rest.create(
        gke.SLICES,
        foreign(
            like_ome,
            {
                "ome.io/managed-by": "OMENative",
                "ome.io/instance-index": "3",
                "ome.io/pod-ordinal": "0",
            },
        ),
    )
    env.rest.create(gke.SLICES, foreign("team-b-training"))

    def settled() -> dict[str, JSON]:
        """Both as GKE leaves them once active: from then on only OME could change them."""
        found = {n: env.rest.get(gke.SLICES, n) for n in (like_ome, "team-b-training")}
        return found if all(gke.parse(f).state == "ACTIVE" for f in found.values()) else {}

    before = eventually(settled, timeout=30)
    env.stop_manager()
    force_gone(env)
    env.start_manager()
    eventually(lambda: released(env, found), timeout=30)
    # The collector has looked at every Slice since (its scan at start) and acted.
    after = {n: env.rest.get(gke.SLICES, n) for n in before}
    assert json.dumps(after, sort_keys=True) == json.dumps(before, sort_keys=True)
    assert replica["metadata"]["uid"] != ""


def test_a_replica_the_cache_has_not_seen_yet_is_never_taken_for_gone(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica and its Slice made in the same second, while the manager's replica cache lags
    (its informer stuck on an earlier event): the Slice looks like an orphan in the caches,
    twice, but the live read finds its owner, so it is left alone: whether the annotation
    names the owner (one read) or not (a list of them all)."""
    monkeypatch.setattr(orphans, "ORPHAN_GRACE", orphans.ORPHAN_GRACE / 10)
    informer = env.manager.informers.informer(INFERENCE_REPLICAS)
    stuck, release = threading.Event(), threading.Event()

    def stall(obj: JSON) -> None:
        if obj["metadata"]["name"] == "decoy":
            stuck.set()
            release.wait(60)

    informer.add_handler(EventHandler(on_add=stall))
    body = admission_cases.replica(admission_cases.runner(opted=False), replicas=0)
    body["metadata"]["name"] = "decoy"
    try:
        env.rest.create(INFERENCE_REPLICAS, body, NS)
        eventually(stuck.is_set, timeout=10)
        a_second_after(datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        owner = env.rest.create(
            INFERENCE_REPLICAS,
            {**copy.deepcopy(body), "metadata": {"name": "late", "namespace": NS}},
            NS,
        )
        uid = owner["metadata"]["uid"]
        labels = {"ome.io/slice-owner-uid": uid, "ome.io/managed-by": "OMENative"}
        annotated = foreign(
            naming.slice_name("late", naming.Slot(0, 0), naming.owner_hash(NS, "late", uid)),
            {**labels, "ome.io/instance-index": "0", "ome.io/pod-ordinal": "0"},
        )
        annotated["metadata"]["annotations"] = {"ome.io/slice-owner": f"{NS}/late"}
        bare = foreign("late-without-annotation", labels)
        made = [env.rest.create(gke.SLICES, s) for s in (annotated, bare)]
        assert {s["metadata"]["creationTimestamp"] for s in made} == {
            owner["metadata"]["creationTimestamp"]
        }, "made in the same second"
        reads = env.cluster.server.accounting

        def confirmed() -> bool:
            return (
                reads.total("get", "inferencereplicas", MANAGER_AGENT) >= 1
                and reads.total("list", "inferencereplicas", MANAGER_AGENT) >= 2
            )

        passes = reconciles("tpuslice-orphans")
        eventually(confirmed, timeout=30)  # each was confirmed live, after two sightings
        eventually(lambda: reconciles("tpuslice-orphans") > passes + 2, timeout=30)
        for s in made:
            live = env.rest.get(gke.SLICES, s["metadata"]["name"])
            assert live["metadata"]["uid"] == s["metadata"]["uid"]
            assert not live["metadata"].get("deletionTimestamp")
        assert slice_deletes(env) == 0
        assert metric(env, "ome_tpu_slice_orphans_released_total") == 0
    finally:
        release.set()

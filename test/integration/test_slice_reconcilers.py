"""The slice reconcilers under the faults a review found them weak at, on the embedded cluster
with the simulated GKE provider: each test is what a user would notice, and each failed
before the reconcilers were split into pure decisions and one act layer."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from ome.api.v1beta1 import INFERENCE_REPLICAS
from ome.kube import rfc3339
from ome.provider import gke
from ome.runtime.rest import EVENTS, NODES, PODS
from ome.tpuslice.types import GUIDE_CONFIG_JSON
from ome_sim.apiserver.faults import Fault
from test.cluster import Cluster, Kubectl
from test.helpers import eventually, gone
from test.integration.test_omenative import NS
from test.integration.test_slices import (
    MANAGER_AGENT,
    Env,
    activating_host,
    guide_env,
    make_env,
    opted,
    ready_timeout_config,
    released,
    the_slice,
)

JSON = dict[str, Any]
SERIES = {"slice_type": "tpu7x", "topology": "2x2x1"}


@pytest.fixture
def env(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    yield from guide_env(cluster, kubectl)


def wait_ready(env: Env, name: str = "qwen3-tpu") -> None:
    env.kubectl(
        "wait", "--for=condition=Ready", f"inferenceservice/{name}", "-n", NS, "--timeout=60s"
    )


def row0(env: Env, name: str = "qwen3-tpu-engine") -> JSON:
    rows = env.rows(name)
    return rows[0] if rows else {}


# -- release ------------------------------------------------------------------------------------


@pytest.fixture
def two_accelerators(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    """tpu7x and v6e both serve 2x2x1 on 4-chip hosts, one host each."""
    config = json.loads(GUIDE_CONFIG_JSON)
    config["accelerators"]["v6e"] = {"sliceType": "v6e", "chipsPerHost": 4, "topologies": ["2x2x1"]}
    yield from make_env(
        cluster,
        kubectl,
        ["tpu7x:provision-only:1", "v6e:provision-only:1:v6e-pool"],
        config=json.dumps(config),
    )


def test_a_wrong_type_slice_of_the_right_topology_is_replaced(two_accelerators: Env) -> None:
    """An Instance still Creating moves from tpu7x to v6e, of the same topology: its tpu7x
    Slice is released and a v6e one provisioned (the sweep used to compare only the
    topology, so the gate said "it is replaced once no pod holds it" forever)."""
    env = two_accelerators
    env.apply(opted("first"))  # takes the only tpu7x host
    eventually(lambda: row0(env, "first-engine").get("phase") == "Ready", timeout=60)
    env.apply(opted("second"))
    waiting = eventually(
        lambda: [s for s in env.slices() if s["metadata"]["name"].startswith("second-engine-")],
        timeout=30,
    )[0]
    assert waiting["spec"]["type"] == "tpu7x"
    moved = opted("second")
    moved["spec"]["engine"]["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] = "v6e"
    env.apply(moved)
    wait_ready(env, "second")
    mine = [s for s in env.slices() if s["metadata"]["name"].startswith("second-engine-")]
    assert [(s["spec"]["type"], s["metadata"]["name"]) for s in mine] == [
        ("v6e", waiting["metadata"]["name"])
    ]
    assert gone(lambda: env.rest.get(gke.SLICES, waiting["metadata"]["name"])) or (
        env.rest.get(gke.SLICES, waiting["metadata"]["name"])["metadata"]["uid"]
        != waiting["metadata"]["uid"]
    )


def test_a_scale_down_from_four_to_one_releases_each_slice_once(env: Env) -> None:
    """Three Slices go, each deleted once and counted once, even while the manager's Slice
    cache is frozen (its watch cut and refused): passes planned from a cache that does not
    show the deletes yet must not delete (and count) them again."""
    svc = opted()
    svc["spec"]["engine"].update(minReplicas=4, maxReplicas=4)
    env.apply(svc)
    eventually(
        lambda: len(env.rows()) == 4 and all(r["phase"] == "Ready" for r in env.rows()), timeout=90
    )
    acc = env.cluster.server.accounting
    deletes = acc.total("delete", "slices", MANAGER_AGENT)
    released_before = env.registry.get_sample_value("ome_tpu_slice_released_total", SERIES)
    server = env.cluster.server
    for verb in ("watch", "list"):
        server.faults.add(
            Fault(verb=verb, resource="slices", user_agent=MANAGER_AGENT, code=503, times=None)
        )
    env.cluster.thread.call(lambda: server.drop_watches("slices"))
    env.apply(opted())  # back to one Instance
    # The Instances and their pods go while the cache still shows every Slice alive.
    eventually(lambda: len(env.rows()) == 1 and len(env.pods()) == 1, timeout=60)
    eventually(
        lambda: sum(1 for s in env.slices() if not s["metadata"].get("deletionTimestamp")) == 1,
        timeout=60,
    )
    server.faults.clear()
    eventually(lambda: len(env.slices()) == 1, timeout=60)
    cache = next(i for i in env.manager.informers.informers() if i.resource == gke.SLICES)
    eventually(lambda: len(cache.list()) == 1, timeout=30)  # the manager has seen them go
    assert acc.total("delete", "slices", MANAGER_AGENT) - deletes == 3
    released_total = env.registry.get_sample_value("ome_tpu_slice_released_total", SERIES)
    assert released_total - released_before == 3


# -- teardown -----------------------------------------------------------------------------------


def test_a_teardown_whose_slice_deletes_fail_finishes_at_its_deadline(env: Env) -> None:
    """G5: the Slice deletes fail (500) until the teardown deadline passes; the deletion
    finishes anyway, and the Warning names the API error and the selector to clean up by."""
    env.apply(opted())
    wait_ready(env)
    held = the_slice(env)
    replica = env.rest.patch(
        INFERENCE_REPLICAS,
        "qwen3-tpu-engine",
        {"spec": {"lifecycle": {"teardownTimeout": "3s"}}},
        NS,
    )
    env.cluster.server.faults.add(
        Fault(verb="delete", resource="slices", user_agent=MANAGER_AGENT, code=500, times=None)
    )
    env.kubectl("delete", "inferenceservice", "qwen3-tpu", "-n", NS, "--wait=false")
    eventually(
        lambda: gone(lambda: env.rest.get(INFERENCE_REPLICAS, "qwen3-tpu-engine", NS)), timeout=90
    )
    env.cluster.server.faults.clear()
    items = eventually(
        lambda: env.rest.list(EVENTS, NS, field_selector="reason=TeardownDeadlineExceeded")[
            "items"
        ],
        timeout=10,
    )
    uid = replica["metadata"]["uid"]
    message = items[0]["message"]
    assert message.startswith(
        "teardown deadline exceeded; releasing owned TPU slices failed: deleting TPU slice "
        f"{held['metadata']['name']} failed: 500 InternalError"
    ), message
    assert message.endswith(f"; delete the slices labeled ome.io/slice-owner-uid={uid} by hand")
    assert items[0]["involvedObject"]["kind"] == "InferenceReplica"
    # What OME could not release is left for the operator, found by that selector.
    left = env.rest.list(gke.SLICES, label_selector=f"ome.io/slice-owner-uid={uid}")["items"]
    assert [s["metadata"]["uid"] for s in left] == [held["metadata"]["uid"]]


# -- gating -------------------------------------------------------------------------------------


@pytest.fixture
def activating_with_timeout(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    """Slices activate for 30 s and time out after 1 s."""
    yield from make_env(
        cluster,
        kubectl,
        ["tpu7x:provision-only:2"],
        config=ready_timeout_config("1s"),
        activation_delay=30.0,
    )


def test_a_timed_out_slices_hold_says_how_long_it_waited(activating_with_timeout: Env) -> None:
    """E5: while a timed-out Slice cannot be released yet (its deletes fail), the Instance's
    last failure carries the whole ready-timeout text, not just the state."""
    env = activating_with_timeout
    env.cluster.server.faults.add(
        Fault(verb="delete", resource="slices", user_agent=MANAGER_AGENT, code=500, times=None)
    )
    env.apply(opted())
    name = eventually(lambda: (s := env.slices()) and s[0]["metadata"]["name"], timeout=30)
    pattern = re.compile(
        r"CapacityProvisioning: pod qwen3-tpu-engine-0-default-0 is withheld until its capacity "
        rf"is ready: slice {name} is ACTIVATING for \d+s, longer than the 1s ready timeout; it is "
        r"released and provisioned again once no pod holds it"
    )
    row = eventually(
        lambda: (
            pattern.fullmatch((row0(env).get("lastFailure") or {}).get("message") or "")
            and row0(env)
        ),
        timeout=30,
    )
    assert row["operation"]["waiting"] == "CapacityProvisioning"
    assert row["operation"]["deadline"] is None
    env.cluster.server.faults.clear()


@pytest.fixture
def multihost(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    yield from make_env(cluster, kubectl, ["tpu7x:provision-only:4"], activation_delay=2.0)


def test_a_host_is_usable_only_if_every_pod_of_the_instance_tolerates_it(multihost: Env) -> None:
    """E6, F: the leader tolerates cordoned nodes but the worker does not; with the Slice's
    hosts cordoned while it activates, the Slice is recycled (only the first pod's
    tolerations used to count, and the worker waited for a node forever)."""
    env = multihost
    tpu = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
    cordon = {
        "key": "node.kubernetes.io/unschedulable",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    svc = opted(leader={"tolerations": [tpu, cordon]}, worker={"size": 1, "tolerations": [tpu]})
    svc["spec"]["engine"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] = "2x2x2"
    env.apply(svc)
    first, _ = activating_host(env)
    partitions = set(first["spec"]["partitionIds"])
    for node in env.rest.list(NODES)["items"]:
        if (node["metadata"].get("annotations") or {}).get("sim.ome.io/partition-id") in partitions:
            env.kubectl("cordon", node["metadata"]["name"])
    message = eventually(lambda: env.events("SliceHostUnavailable"), timeout=60)[0]
    assert message.startswith(
        f"OMENative component=engine instance=0 withheld: slice {first['metadata']['name']} is "
        "ACTIVE, but node "
    )
    assert message.endswith(
        "is cordoned; it is released and provisioned again once no pod holds it"
    )
    wait_ready(env)
    assert the_slice(env)["metadata"]["uid"] != first["metadata"]["uid"]


def test_a_ready_slice_whose_partitions_went_waits_for_partition_assignment(env: Env) -> None:
    """E3, E4: after its partitions are dropped, the rebuilt Instance waits on a Slice that
    reads as waiting for partition assignment (not "only 0 of its 1 hosts are visible yet");
    once it is Ready again, no stale hold is left in its last failure."""
    env.apply(opted())
    wait_ready(env)
    name = the_slice(env)["metadata"]["name"]
    env.kubectl("annotate", "slices.accelerator.gke.io", name, "sim.ome.io/drop-partitions=true")
    row = eventually(
        lambda: (
            (r := row0(env)).get("operation")
            and r["operation"].get("waiting") == "CapacityProvisioning"
            and r
        ),
        timeout=30,
    )
    assert row["lastFailure"]["message"].endswith(
        f"slice {name} is waiting for partition assignment"
    )
    env.kubectl("annotate", "slices.accelerator.gke.io", name, "sim.ome.io/drop-partitions-")
    ready = eventually(lambda: (r := row0(env)).get("phase") == "Ready" and r, timeout=60)
    assert ready["lastFailure"] is None or ready["lastFailure"]["reason"] != "CapacityProvisioning"


# -- provisioning -------------------------------------------------------------------------------


def test_a_create_that_gets_no_answer_counts_as_unknown_and_is_tried_again(env: Env) -> None:
    """K: a Slice create whose connection drops without an answer, every retry, counts
    ``reason="Unknown"``; the next pass creates the Slice."""
    attempts = env.manager.client.policy.attempts
    env.cluster.server.faults.add(
        Fault(verb="create", resource="slices", user_agent=MANAGER_AGENT, drop=True, times=attempts)
    )
    env.apply(opted())
    wait_ready(env)
    failures = env.registry.get_sample_value(
        "ome_tpu_slice_create_failures_total", {**SERIES, "reason": "Unknown"}
    )
    assert failures == 1.0
    assert env.registry.get_sample_value("ome_tpu_slice_created_total", SERIES) == 1.0


# -- loss ---------------------------------------------------------------------------------------


def test_a_terminating_slice_at_the_pods_name_is_lost_even_if_it_is_not_ours(env: Env) -> None:
    """H3's order: "absent or terminating: was deleted" comes before "not ours: leave alone".
    The pods' Slice loses OME's owner label (someone else's now) and is then deleted, held
    terminating by a finalizer: its pods are deleted and their Instance rebuilt."""
    env.apply(opted())
    wait_ready(env)
    old = the_slice(env)
    name = old["metadata"]["name"]
    pod = "qwen3-tpu-engine-0-default-0"
    env.rest.patch(
        gke.SLICES,
        name,
        {
            "metadata": {
                "labels": {"ome.io/slice-owner-uid": None, "team": "other"},
                "finalizers": [*old["metadata"].get("finalizers", []), "test.ome.io/hold"],
            }
        },
    )
    env.rest.delete(gke.SLICES, name)  # terminating, held by the finalizer
    assert env.rest.get(gke.SLICES, name)["metadata"].get("deletionTimestamp")
    message = eventually(lambda: env.events("SliceLost"), timeout=30)[0]
    assert message == (
        f"TPU slice {name} was deleted while pods {pod} ran on it; they are deleted so that "
        "their Instance is rebuilt"
    )
    env.rest.patch(gke.SLICES, name, {"metadata": {"finalizers": []}})
    wait_ready(env)
    assert released(env, old)
    assert env.rest.get(PODS, pod, NS)["metadata"]["labels"]["ome.io/incarnation"] != "0"


def test_loss_detection_does_not_wait_for_the_instance_pass(env: Env) -> None:
    """Loss detection runs in a controller of its own: while every pod create of the
    InferenceReplica pass fails (Instance 1's), Instance 0's Slice is deleted from outside,
    and its pods are deleted all the same."""
    env.apply(opted())
    wait_ready(env)
    name = the_slice(env)["metadata"]["name"]
    acc = env.cluster.server.accounting
    creates = acc.total("create", "pods", MANAGER_AGENT)
    env.cluster.server.faults.add(
        Fault(verb="create", resource="pods", user_agent=MANAGER_AGENT, code=500, times=None)
    )
    two = opted()
    two["spec"]["engine"].update(minReplicas=2, maxReplicas=2)
    env.apply(two)
    # Instance 1's Slice is ready and its pod create is failing: the pass fails every time.
    eventually(lambda: acc.total("create", "pods", MANAGER_AGENT) > creates, timeout=30)
    env.kubectl("delete", "slices.accelerator.gke.io", name, "--wait=false")
    message = eventually(lambda: env.events("SliceLost"), timeout=30)[0]
    assert message.startswith(f"TPU slice {name} was deleted while pods ")
    env.cluster.server.faults.clear()
    eventually(
        lambda: len(env.rows()) == 2 and all(r["phase"] == "Ready" for r in env.rows()), timeout=60
    )


def test_a_slice_replaced_from_outside_while_the_manager_is_down_is_lost(env: Env) -> None:
    """With the manager stopped, OME's Slice is deleted and someone else's is created at its
    name: on restart the pods are deleted under their UIDs (SliceLost: "was deleted", since
    the Slice is younger than them), the slot records SliceOwnershipConflict, the foreign
    Slice is never touched, and once it is removed the Instance heals on a Slice of OME's."""
    env.apply(opted())
    wait_ready(env)
    name = the_slice(env)["metadata"]["name"]
    pod = env.rest.get(PODS, "qwen3-tpu-engine-0-default-0", NS)
    env.stop_manager()
    env.rest.delete(gke.SLICES, name)
    eventually(lambda: gone(lambda: env.rest.get(gke.SLICES, name)), timeout=30)
    # creationTimestamps have one-second resolution: the foreign Slice is to be younger.
    eventually(lambda: rfc3339(datetime.now(UTC)) > pod["metadata"]["creationTimestamp"])
    foreign = env.rest.create(
        gke.SLICES,
        {
            "apiVersion": "accelerator.gke.io/v1beta1",
            "kind": "Slice",
            "metadata": {"name": name, "labels": {"team": "other"}},
            "spec": {"type": "tpu7x", "topology": "2x2x1", "partitionIds": []},
        },
    )
    foreign = eventually(  # the simulated GKE gives it a partition and its finalizer
        lambda: (s := env.rest.get(gke.SLICES, name))["spec"]["partitionIds"] and s, timeout=30
    )
    deletes = env.cluster.server.accounting.total("delete", "pods", MANAGER_AGENT)
    env.start_manager()
    lost = eventually(lambda: env.events("SliceLost"), timeout=30)[0]
    assert lost == (
        f"TPU slice {name} was deleted while pods {pod['metadata']['name']} ran on it; they are "
        "deleted so that their Instance is rebuilt"
    )
    conflict = eventually(lambda: env.events("SliceOwnershipConflict"), timeout=30)[0]
    assert conflict == (
        f"OMENative component=engine instance=0 withheld: slice is owned by another object: {name}"
    )
    acc = env.cluster.server.accounting
    assert acc.total("delete", "pods", MANAGER_AGENT) > deletes
    assert acc.deletes_without_uid("pods", MANAGER_AGENT) == 0
    after = env.rest.get(gke.SLICES, name)
    for part in ("uid", "labels"):
        assert after["metadata"][part] == foreign["metadata"][part], part
    assert after["spec"] == foreign["spec"]
    assert acc.total("patch", "slices", MANAGER_AGENT) == 0
    assert acc.total("update", "slices", MANAGER_AGENT) == 0
    # Removed by its owner: its deletion wakes the replica whose name it carries at once
    # (not at the held Instance's periodic look, 5 s later), and OME provisions the slot.
    seen: dict[str, float] = {}

    def record(change: Any) -> None:
        if (
            change.tkey == ("accelerator.gke.io", "slices")
            and change.obj["metadata"]["name"] == name
        ):
            seen.setdefault(f"{change.type} {change.obj['metadata']['uid']}", time.monotonic())

    env.cluster.thread.call(lambda: env.cluster.server.store.listeners.append(record))
    env.rest.delete(gke.SLICES, name)
    mine = eventually(
        lambda: (
            (s := env.slices()) and s[0]["metadata"]["uid"] != foreign["metadata"]["uid"] and s[0]
        ),
        timeout=30,
    )
    created = eventually(lambda: seen.get(f"ADDED {mine['metadata']['uid']}"), timeout=5)
    removed = seen[f"DELETED {foreign['metadata']['uid']}"]
    assert 0 <= created - removed < 1.0, created - removed
    wait_ready(env)


# -- what the manager says ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "orphan_collection", "line"),
    [
        pytest.param(
            GUIDE_CONFIG_JSON,
            True,
            "TPU slice provisioning is on: tpu7x (2x2x1, 2x2x2); orphaned slices are released",
            id="on",
        ),
        pytest.param(
            GUIDE_CONFIG_JSON,
            False,
            "TPU slice provisioning is on: tpu7x (2x2x1, 2x2x2); orphaned slices are left alone "
            "(--orphan-slice-collection=false)",
            id="on, orphans left alone",
        ),
        pytest.param(
            None,
            True,
            "TPU slice provisioning is off: there is no inferenceservice-config ConfigMap in "
            "namespace ome",
            id="no ConfigMap",
        ),
        pytest.param(
            "",
            True,
            "TPU slice provisioning is off: the inferenceservice-config ConfigMap in namespace "
            "ome has no tpuSliceProvisioning entry",
            id="no entry",
        ),
    ],
)
def test_the_start_up_line_says_whether_provisioning_is_on_and_why_not(
    cluster: Cluster,
    kubectl: Kubectl,
    caplog: pytest.LogCaptureFixture,
    config: str | None,
    orphan_collection: bool,
    line: str,
) -> None:
    with caplog.at_level(logging.INFO, logger="ome.controllers.setup"):
        for env in make_env(
            cluster,
            kubectl,
            ["tpu7x:provision-only:1"],
            config=config,
            orphan_collection=orphan_collection,
        ):
            said = [r.getMessage() for r in caplog.records if "provisioning is" in r.getMessage()]
            assert said == [line]
            # G6: the orphan controller runs exactly when the line says orphans are released.
            running = {c.name for c in env.manager.controllers}
            assert ("tpuslice-orphans" in running) == line.endswith("orphaned slices are released")


def test_an_opted_in_component_without_a_topology_is_told_once(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """B5/B6: no pod selects a topology, so no Slice and no error; the pods are created
    unconfined, and the user is told once (a Warning on the InferenceService, a log line)."""
    svc = opted()
    del svc["spec"]["engine"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"]
    with caplog.at_level(logging.WARNING, logger="ome.controllers.slices.act"):
        env.apply(svc)
        wait_ready(env)
    text = (
        "OMENative component=engine: opted in to TPU slice provisioning, but no pod selects a "
        "topology under cloud.google.com/gke-tpu-topology; its pods are created without a slice"
    )
    items = eventually(
        lambda: env.rest.list(EVENTS, NS, field_selector="reason=SliceTopologyMissing")["items"],
        timeout=10,
    )
    assert [(e["message"], e.get("count", 1), e["involvedObject"]["kind"]) for e in items] == [
        (text, 1, "InferenceService")
    ]
    assert [r.getMessage() for r in caplog.records if "opted in" in r.getMessage()] == [text]
    assert env.slices() == []
    pod = env.rest.get(PODS, "qwen3-tpu-engine-0-default-0", NS)
    assert "cloud.google.com/gke-tpu-slice" not in pod["spec"]["nodeSelector"]


RETRY_LINE = re.compile(
    r"(create|update|patch|delete|get|list) [a-z/]+( \S+)? failed: 50[03] \w+(: .*)?; "
    r"retrying in \d+\.\ds \(attempt \d+ of \d+\)"
)


def test_a_storm_of_server_errors_and_deletions_logs_no_traceback(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """Routine API errors are one line each: a retried 5xx is a WARNING naming the call, the
    error and the next attempt (never the response headers); a write to an object deleted a
    moment before is quiet. A traceback is for bugs, and there is none."""
    for verb, resource in (
        ("update", "inferencereplicas/status"),
        ("update", "inferenceservices/status"),
        ("create", "pods"),
        ("create", "slices"),
        ("create", "events"),
    ):
        env.cluster.server.faults.add(
            Fault(verb=verb, resource=resource, user_agent=MANAGER_AGENT, code=500, times=6)
        )
    with caplog.at_level(logging.DEBUG, logger="ome"):
        env.apply(opted())
        wait_ready(env)
        env.kubectl("delete", "inferenceservice", "qwen3-tpu", "-n", NS, "--timeout=60s")
        eventually(
            lambda: gone(lambda: env.rest.get(INFERENCE_REPLICAS, "qwen3-tpu-engine", NS)),
            timeout=60,
        )
        eventually(lambda: env.slices() == [], timeout=60)
    product = [r for r in caplog.records if not r.name.startswith("ome_sim")]
    assert [r.getMessage() for r in product if r.exc_info] == []
    retries = [r for r in product if "retrying in" in r.getMessage()]
    assert retries, "the storm was retried"
    for record in retries:
        assert record.levelno == logging.WARNING, record.getMessage()
        assert RETRY_LINE.fullmatch(record.getMessage()), record.getMessage()
    assert not [r for r in product if "HTTP response headers" in r.getMessage()]
    assert not [r for r in product if r.levelno >= logging.ERROR and "404" in r.getMessage()]

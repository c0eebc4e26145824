"""Teardowns deferred for minutes by another workload's pod, on the embedded cluster (minutes
of real time: ``make long``, not ``make test``): a deferral that lasts does not cost the
Warning at the deadline, nor more than a few requests a minute, and the holder's going
releases the Slice at once."""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ome.api.v1beta1 import INFERENCE_REPLICAS, INFERENCE_SERVICES
from ome.provider import gke
from ome.runtime.rest import EVENTS, NODES, PODS
from ome_sim.apiserver.faults import Fault
from test.cluster import Cluster, Kubectl
from test.helpers import eventually, gone
from test.integration.test_slices import (
    MANAGER_AGENT,
    NS,
    Env,
    guide_env,
    hold_chips_on,
    opted,
    the_slice,
)

pytestmark = pytest.mark.timeout(900)

JSON = dict[str, Any]
HOLDER = ("tpu-batch", "indexer-0")


@pytest.fixture
def env(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    yield from guide_env(cluster, kubectl)


def ready(env: Env, svc: dict[str, Any]) -> tuple[str, str]:
    """Apply ``svc``, wait until it is Ready; its Slice's name and its host's."""
    env.apply(svc)
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    name = the_slice(env)["metadata"]["name"]
    host = eventually(
        lambda: env.rest.list(NODES, label_selector=f"cloud.google.com/gke-tpu-slice={name}")[
            "items"
        ],
        timeout=10,
    )[0]["metadata"]["name"]
    return name, host


def warnings(env: Env, reason: str, on: str = "InferenceReplica") -> list[JSON]:
    items = env.rest.list(EVENTS, NS, field_selector=f"reason={reason}")["items"]
    return [e for e in items if e["involvedObject"]["kind"] == on]


def test_a_teardown_deferred_for_minutes_still_records_its_deadline_warning(env: Env) -> None:
    """teardownTimeout 3m; another workload's pod holds chips on the Slice's host for most
    of it, then goes, while the Slice's deletes fail (500). At the deadline the replica's
    TeardownDeadlineExceeded Warning is written, with the API error and the selector the
    Warning tells the user to clean up with, and the deletion finishes; the selector finds
    the Slice left behind, and OME releases it itself once its deletes work again (G6)."""
    name, host = ready(env, opted(lifecycle={"teardownTimeout": "3m"}))
    uid = env.rest.get(INFERENCE_REPLICAS, "qwen3-tpu-engine", NS)["metadata"]["uid"]
    hold_chips_on(env, host)
    assert env.cluster.server is not None
    env.cluster.server.faults.add(
        Fault(verb="delete", resource="slices", user_agent=MANAGER_AGENT, code=500, times=None)
    )
    env.kubectl("delete", "inferenceservice", "qwen3-tpu", "-n", NS, "--wait=false")
    eventually(lambda: warnings(env, "SliceReleaseDeferred"), timeout=30)
    deleted = time.monotonic()
    # The holder stays for two and a half minutes of the three; then the deletes still fail.
    time.sleep(max(0.0, deleted + 150 - time.monotonic()))
    env.rest.delete(PODS, HOLDER[1], HOLDER[0], grace_period_seconds=0)
    eventually(
        lambda: gone(lambda: env.rest.get(INFERENCE_REPLICAS, "qwen3-tpu-engine", NS)),
        timeout=90,
    )
    eventually(lambda: gone(lambda: env.rest.get(INFERENCE_SERVICES, "qwen3-tpu", NS)), timeout=30)
    (warning,) = eventually(lambda: warnings(env, "TeardownDeadlineExceeded"), timeout=10)
    assert re.fullmatch(
        "teardown deadline exceeded; releasing owned TPU slices failed: deleting TPU slice "
        f"{name} failed: 500 InternalError: [^;]*injected fault; delete the slices labeled "
        f"ome.io/slice-owner-uid={uid} by hand",
        warning["message"],
    ), warning["message"]
    (deferred,) = warnings(env, "SliceReleaseDeferred")
    print(f"measured: SliceReleaseDeferred count {deferred['count']}; {warning['message']}")
    assert deferred["count"] <= 5, "recorded when it started, then about once a minute"
    # The Slice the selector names is an orphan now: OME releases it itself (G6) once its
    # deletes work again, without anyone deleting it by hand.
    assert env.kubectl(
        "get", "slices.accelerator.gke.io", "-l", f"ome.io/slice-owner-uid={uid}", "-o", "name"
    ).stdout.split() == [f"slice.accelerator.gke.io/{name}"]
    env.cluster.server.faults.clear()
    cleared = time.monotonic()
    eventually(lambda: gone(lambda: env.rest.get(gke.SLICES, name)), timeout=90)
    print(f"measured: the orphan released {time.monotonic() - cleared:.1f}s after deletes worked")


def test_a_teardown_deferred_for_five_minutes_costs_a_few_requests_a_minute(env: Env) -> None:
    """A deleted service's Slice is kept for five minutes by another workload's pod: after
    the first minute the manager sends at most 10 requests a minute for it (its retries back
    off to once a minute, its Warning is refreshed once a minute, nothing polls), and the
    Slice's delete follows the holder's within 2 s, because the holder's going wakes it."""
    name, host = ready(env, opted())
    hold_chips_on(env, host)
    assert env.cluster.server is not None and env.cluster.thread is not None
    acc = env.cluster.server.accounting
    gone_at: dict[str, float] = {}
    lock = threading.Lock()

    def listen(change: Any) -> None:
        meta = change.obj["metadata"]
        with lock:
            if change.tkey == ("", "pods") and change.type == "DELETED":
                gone_at.setdefault(f"pod {meta['namespace']}/{meta['name']}", time.monotonic())
            elif change.tkey == ("accelerator.gke.io", "slices") and (
                change.type == "DELETED" or meta.get("deletionTimestamp")
            ):
                gone_at.setdefault(f"slice {meta['name']}", time.monotonic())

    server = env.cluster.server
    env.cluster.thread.call(lambda: server.store.listeners.append(listen))

    def requests() -> int:
        """The manager's requests but for its leader lease and its informers' watches."""
        every = acc.total(user_agent=MANAGER_AGENT)
        return (
            every
            - acc.total(resource="leases", user_agent=MANAGER_AGENT)
            - acc.total(verb="watch", user_agent=MANAGER_AGENT)
        )

    env.kubectl("delete", "inferenceservice", "qwen3-tpu", "-n", NS, "--wait=false")
    eventually(lambda: warnings(env, "SliceReleaseDeferred"), timeout=30)
    start, counts = time.monotonic(), [requests()]
    for minute in range(1, 6):
        time.sleep(max(0.0, start + 60 * minute - time.monotonic()))  # five minutes pass
        counts.append(requests())
    per_minute = [b - a for a, b in itertools.pairwise(counts)]
    print(f"measured: the manager's requests in each minute of the deferral: {per_minute}")
    assert max(per_minute[1:]) <= 10, per_minute
    assert not env.rest.get(gke.SLICES, name)["metadata"].get("deletionTimestamp")
    env.rest.delete(PODS, HOLDER[1], HOLDER[0], grace_period_seconds=0)
    eventually(lambda: f"slice {name}" in gone_at, timeout=10)
    waited = gone_at[f"slice {name}"] - gone_at[f"pod {HOLDER[0]}/{HOLDER[1]}"]
    print(f"measured: the Slice's delete came {waited:.2f}s after the holder's")
    assert 0 <= waited <= 2.0, f"the release came {waited:.1f}s after the holder went"
    eventually(
        lambda: gone(lambda: env.rest.get(INFERENCE_REPLICAS, "qwen3-tpu-engine", NS)), timeout=30
    )

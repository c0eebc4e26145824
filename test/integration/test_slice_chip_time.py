"""Chip time on the embedded cluster (K6, K7): a Ready service's Slice counts its chips x
seconds as serving, and a Slice whose release another workload's pod defers shows its chips
as idle, then none once it goes."""

from __future__ import annotations

import time

from ome.runtime.rest import NODES, PODS
from test.helpers import eventually
from test.integration.test_omenative import NS
from test.integration.test_slices import Env, env, hold_chips_on, opted, released

#: test_slices.py's fixture: the walkthrough's pools (4 provision-only hosts, 2 static).
__all__ = ["env"]

SHAPE = {"slice_type": "tpu7x", "topology": "2x2x1"}
CHIPS = 4  # 2x2x1
SECONDS = "ome_tpu_slice_chip_seconds_total"
IDLE = "ome_tpu_slice_idle_chips"
#: The window the serving counter is measured over. The manager runs in this process and
#: accounts with the same monotonic clock the test reads, so the two differ by milliseconds:
#: 5% of 10 s (half a second) is far above that skew, and far below what a phase counted
#: wrongly, a second counted twice or a scrape-free span left out would show.
WINDOW = 10.0


def chip_seconds(env: Env, phase: str) -> float:
    value = env.registry.get_sample_value(SECONDS, {**SHAPE, "phase": phase})
    assert value is not None, phase
    return value


def serving_over(env: Env, window: float) -> None:
    """The walkthrough's service, Ready: over ``window`` seconds in which nothing scrapes, its
    serving chip time rises by its chips times the seconds, within 5%, and no other phase's."""
    env.apply(opted())
    env.kubectl(
        "wait", "--for=condition=Ready", "inferenceservice/qwen3-tpu", "-n", NS, "--timeout=60s"
    )
    eventually(lambda: chip_seconds(env, "serving") > 0, timeout=30)
    assert env.registry.get_sample_value(IDLE, SHAPE) == 0
    others = {p: chip_seconds(env, p) for p in ("provisioning", "idle", "orphaned")}
    assert others["provisioning"] > 0  # it was provisioned first
    before, start = chip_seconds(env, "serving"), time.monotonic()
    # Nothing scrapes during the window: the next collect counts it all.
    eventually(lambda: time.monotonic() >= start + window, timeout=window + 5, interval=0.05)
    after, end = chip_seconds(env, "serving"), time.monotonic()
    expected = CHIPS * (end - start)
    assert abs((after - before) - expected) <= 0.05 * CHIPS * window, (after - before, expected)
    assert {p: chip_seconds(env, p) for p in others} == others


def test_a_ready_services_slice_counts_its_chips_times_seconds_as_serving(env: Env) -> None:
    serving_over(env, WINDOW)


def test_a_slice_whose_release_is_deferred_shows_its_chips_as_idle(env: Env) -> None:
    svc = opted()
    svc["spec"]["engine"].update(minReplicas=2, maxReplicas=2)
    env.apply(svc)
    eventually(
        lambda: len(env.rows()) == 2 and all(r["phase"] == "Ready" for r in env.rows()), timeout=60
    )
    eventually(lambda: env.registry.get_sample_value(IDLE, SHAPE) == 0, timeout=10)
    doomed = next(
        s for s in env.slices() if s["metadata"]["labels"]["ome.io/instance-index"] == "1"
    )
    host = env.rest.list(
        NODES, label_selector=f"cloud.google.com/gke-tpu-slice={doomed['metadata']['name']}"
    )["items"][0]
    hold_chips_on(env, host["metadata"]["name"])
    env.apply(opted())  # scale down to 1: Instance 1's Slice is to be released, and is kept
    eventually(lambda: env.events("SliceReleaseDeferred"), timeout=30)
    eventually(lambda: env.registry.get_sample_value(IDLE, SHAPE) == CHIPS, timeout=30)
    idle = chip_seconds(env, "idle")
    eventually(lambda: chip_seconds(env, "idle") > idle, timeout=10)
    env.rest.delete(PODS, "indexer-0", "tpu-batch", grace_period_seconds=0)
    eventually(lambda: released(env, doomed), timeout=10)
    eventually(lambda: env.registry.get_sample_value(IDLE, SHAPE) == 0, timeout=30)

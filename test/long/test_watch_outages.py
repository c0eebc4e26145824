"""The manager through outages of its watches, on the embedded cluster (minutes of real time:
``make long``, not ``make test``): a minute of watches that answer 410 costs a bounded number
of lists and log lines, and a scale-down made while the watches are dropped is applied
within 45 s, because the informers re-list after repeated watch failures."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ome.api.v1beta1 import INFERENCE_SERVICES
from ome.provider import gke
from ome.runtime.rest import PODS
from ome_sim.apiserver.faults import Fault
from test.cluster import Cluster, Kubectl
from test.helpers import eventually, gone
from test.integration.test_slices import MANAGER_AGENT, NS, Env, guide_env, opted

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def env(cluster: Cluster, kubectl: Kubectl) -> Iterator[Env]:
    yield from guide_env(cluster, kubectl)


def manager_lines(records: list[logging.LogRecord]) -> list[str]:
    """What the manager's own code logged at its default level (INFO), the stage's not."""
    return [
        r.getMessage()
        for r in records
        if r.levelno >= logging.INFO
        and r.name.startswith("ome.")
        and not r.name.startswith("ome_sim")
    ]


def ready_rows(env: Env, name: str) -> int:
    return sum(1 for r in env.rows(f"{name}-engine") if r["phase"] == "Ready")


def drop_open_watches(env: Env) -> None:
    """End every open watch: the manager's next ones meet the installed fault."""
    assert env.cluster.thread is not None and env.cluster.server is not None
    server = env.cluster.server
    env.cluster.thread.call(lambda: server.drop_watches())


def test_a_minute_of_watches_answering_410_costs_few_lists_and_lines(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """Every watch of the manager answers 410 (Gone) for 60 s while services change: each
    informer re-lists after its backoff instead of at once, so the manager sends at most 100
    LISTs in that minute and logs at most 20 lines (an expired watch is routine: debug). Once
    the watches work again, the changes made meanwhile are applied."""
    env.apply(opted("first"))
    eventually(lambda: ready_rows(env, "first") == 1, timeout=60)
    assert env.cluster.server is not None
    acc, faults = env.cluster.server.accounting, env.cluster.server.faults
    caplog.set_level(logging.INFO)
    faults.add(Fault(verb="watch", user_agent=MANAGER_AGENT, code=410, times=None))
    lists = acc.total("list", user_agent=MANAGER_AGENT)
    caplog.clear()
    start = time.monotonic()
    drop_open_watches(env)
    changes = [
        (5.0, lambda: env.apply(opted("second"))),
        (20.0, lambda: env.apply(opted("first", minReplicas=2, maxReplicas=2))),
        (
            40.0,
            lambda: env.kubectl("delete", "inferenceservice", "second", "-n", NS, "--wait=false"),
        ),
    ]
    for at, change in changes:
        time.sleep(max(0.0, start + at - time.monotonic()))  # the scenario is a minute
        change()
    time.sleep(max(0.0, start + 60 - time.monotonic()))
    sent = acc.total("list", user_agent=MANAGER_AGENT) - lists
    lines = manager_lines(caplog.records)
    faults.clear()
    print(f"measured: {sent} LISTs and {len(lines)} log lines in the minute")
    assert sent <= 100, f"{sent} LISTs in the minute"
    assert len(lines) <= 20, "\n".join(lines)
    eventually(
        lambda: (
            ready_rows(env, "first") == 2
            and gone(lambda: env.rest.get(INFERENCE_SERVICES, "second", NS))
        ),
        timeout=90,
    )


def test_a_scale_down_during_a_two_minute_watch_outage_is_applied_within_45s(env: Env) -> None:
    """Every watch of the manager is dropped for two minutes (lists still answer). A scale
    from 2 to 1 made well into the outage deletes the second Instance's pod within 45 s,
    before the watches are back; its Slice is released once they are."""
    svc: dict[str, Any] = opted(minReplicas=2, maxReplicas=2)
    env.apply(svc)
    eventually(lambda: ready_rows(env, "qwen3-tpu") == 2, timeout=60)
    (second,) = [
        s["metadata"]["name"]
        for s in env.slices()
        if s["metadata"]["labels"]["ome.io/instance-index"] == "1"
    ]
    pod = "qwen3-tpu-engine-1-default-0"
    assert env.cluster.server is not None
    faults = env.cluster.server.faults
    faults.add(Fault(verb="watch", user_agent=MANAGER_AGENT, drop=True, times=None))
    outage_end = time.monotonic() + 120
    drop_open_watches(env)
    # Well into the outage: every informer has failed often enough to back off to its cap.
    time.sleep(40)
    env.apply(opted())
    scaled = time.monotonic()
    eventually(lambda: gone(lambda: env.rest.get(PODS, pod, NS)), timeout=45)
    took = time.monotonic() - scaled
    print(f"measured: the scale-down's pod was gone {took:.1f}s after the change")
    assert time.monotonic() < outage_end, f"applied during the outage ({took:.1f}s)"
    time.sleep(max(0.0, outage_end - time.monotonic()))
    faults.clear()
    eventually(lambda: gone(lambda: env.rest.get(gke.SLICES, second)), timeout=60)
    assert ready_rows(env, "qwen3-tpu") == 1

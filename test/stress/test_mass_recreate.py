"""A mass delete and re-create with the same names, twice, in one manager process, with the
manager's watches cut in the middle of each delete: afterwards every InferenceService's
Ready matches what exists, and no Instance was rebuilt more than a few times a minute.

It is run by ``make stress`` (``.ci/run`` runs it after ``make test``), not by ``make test``:
200 services twice costs about three minutes on two cores. ``STRESS_SERVICES`` sets the count.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from ome.api.v1beta1 import INFERENCE_REPLICAS, INFERENCE_SERVICES
from ome.controllers.setup import setup_controllers
from ome.runtime.manager import Manager, ManagerOptions
from ome.runtime.rest import NAMESPACES, PODS, Rest
from ome_sim.gke.model import parse_pools
from ome_sim.gke.provider import Options, Provider, install_slice_crd
from test.cluster import Cluster, Kubectl
from test.helpers import eventually
from test.integration.test_omenative import MODEL, NS, RUNTIME, isvc

JSON = dict[str, Any]
COUNT = int(os.environ.get("STRESS_SERVICES", "200"))
AGENT = "ome-manager-under-stress"
pytestmark = pytest.mark.timeout(900)


def service(i: int) -> JSON:
    """A plain OMENative service (no TPU chips, so hundreds of pods fit a few hosts)."""
    svc = isvc(f"svc-{i:03d}")
    del svc["spec"]["engine"]["runner"]["resources"]
    return svc


@pytest.fixture
def stage(cluster: Cluster, kubectl: Kubectl) -> Iterator[Rest]:
    kubectl("apply", "-f", "config/crd/")
    rest = Rest(cluster.api)
    install_slice_crd(rest)
    provider = Provider(
        rest, parse_pools(["tpu7x:static:4"]), Options(heartbeat_interval=30, scheduler="on")
    )
    provider.start()
    rest.create(NAMESPACES, {"metadata": {"name": NS}})
    for obj in (RUNTIME, MODEL):
        kubectl("apply", "-f", "-", input=json.dumps(obj))
    api = client.ApiClient(cluster.api.configuration)
    api.user_agent = AGENT
    manager = Manager(
        Rest(api),
        ManagerOptions(namespace="ome", metrics_bind_address="0", health_probe_bind_address="0"),
        registry=CollectorRegistry(),
    )
    setup_controllers(manager)
    stop = threading.Event()
    thread = threading.Thread(target=manager.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield rest
    finally:
        stop.set()
        thread.join(60)
        provider.stop()


def ready_of(obj: JSON) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return str(c.get("status"))
    return "Unknown"


def all_ready(rest: Rest) -> bool:
    items = rest.list(INFERENCE_SERVICES, NS)["items"]
    return len(items) == COUNT and all(ready_of(s) == "True" for s in items)


def nothing_left(rest: Rest) -> bool:
    return not any(
        rest.list(res, NS)["items"] for res in (INFERENCE_SERVICES, INFERENCE_REPLICAS, PODS)
    )


def check_ready_matches_what_exists(rest: Rest) -> None:
    """A Ready service has its own replica (its UID as controller owner) with a Ready pod."""
    replicas = {r["metadata"]["name"]: r for r in rest.list(INFERENCE_REPLICAS, NS)["items"]}
    pods = {p["metadata"]["name"]: p for p in rest.list(PODS, NS)["items"]}
    wrong = []
    for svc in rest.list(INFERENCE_SERVICES, NS)["items"]:
        name = svc["metadata"]["name"]
        replica = replicas.get(f"{name}-engine")
        owner = ((replica or {}).get("metadata") or {}).get("ownerReferences") or [{}]
        pod = pods.get(f"{name}-engine-0-default-0")
        pod_ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in ((pod or {}).get("status") or {}).get("conditions") or []
        )
        exists = replica is not None and owner[0].get("uid") == svc["metadata"]["uid"] and pod_ready
        if (ready_of(svc) == "True") != exists:
            wrong.append(f"{name}: Ready={ready_of(svc)}, replica and pod exist: {exists}")
    assert wrong == [], "\n".join(wrong[:20])


class WatchCutter:
    """Resets every watch connection every ``period`` seconds while the services churn, as
    a flaky network or an API server restart would: each watch reconnects from the last
    resourceVersion its client saw, bookmarks included."""

    def __init__(self, cluster: Cluster, period: float = 0.25) -> None:
        self.cluster, self.period = cluster, period
        self.stop = threading.Event()
        self.cuts = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.period):
            self.cluster.thread.call(self._cut)
            self.cuts += 1

    def _cut(self) -> None:
        self.cluster.server.drop_watches(mode="reset")

    def __enter__(self) -> WatchCutter:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(10)


def churn(cluster: Cluster, burst: Callable[[], object], after: float = 5.0) -> None:
    """Run ``burst`` (hundreds of writes) with every watch cut four times a second, and for
    ``after`` seconds more, while the manager answers the burst with writes of its own."""
    with WatchCutter(cluster):
        burst()
        threading.Event().wait(after)  # the scenario is time passing under cuts


def test_a_mass_delete_and_re_create_with_the_same_names_leaves_every_ready_true(
    cluster: Cluster, stage: Rest
) -> None:
    rest = stage
    started = time.monotonic()
    for round_ in (1, 2):
        churn(
            cluster, lambda: [rest.create(INFERENCE_SERVICES, service(i), NS) for i in range(COUNT)]
        )
        eventually(lambda: all_ready(rest), timeout=300, interval=1.0)
        check_ready_matches_what_exists(rest)
        churn(
            cluster,
            lambda: [rest.delete(INFERENCE_SERVICES, f"svc-{i:03d}", NS) for i in range(COUNT)],
        )
        eventually(lambda: nothing_left(rest), timeout=300, interval=1.0)
        print(f"round {round_}: {time.monotonic() - started:.0f}s")
    # And once more, created with the same names.
    churn(cluster, lambda: [rest.create(INFERENCE_SERVICES, service(i), NS) for i in range(COUNT)])
    eventually(lambda: all_ready(rest), timeout=300, interval=1.0)
    check_ready_matches_what_exists(rest)
    minutes = max(1.0, (time.monotonic() - started) / 60)
    rebuilt = [
        (r["metadata"]["name"], row["incarnation"])
        for r in rest.list(INFERENCE_REPLICAS, NS)["items"]
        for row in (r.get("status") or {}).get("instanceStatuses") or []
        if row.get("incarnation", 0) > 3
    ]
    assert rebuilt == [], rebuilt
    writes = cluster.server.accounting.total("update", "inferencereplicas/status", AGENT)
    # About ten status writes per service life; a rebuild loop writes thousands a minute.
    assert writes < 3 * COUNT * 15, f"{writes} replica status writes in {minutes:.1f} min"

"""G6, carried out: what the act layer reads live before it releases an orphan (the Slice, its
owner by one read or by a list, the pods on its hosts), what it writes (a delete under the
UID and resourceVersion read), counts and records, against an in-memory API. No server."""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from ome.api.v1beta1 import INFERENCE_REPLICAS
from ome.controllers.slices.act import MAX_RETRY_WAIT, SliceActor
from ome.controllers.slices.metrics import SliceMetrics
from ome.provider import gke
from ome.runtime.expectations import Expectations
from ome.runtime.rest import NODES, PODS
from ome.tpuslice.naming import Slot
from test.unit import slicekit
from test.unit.slicekit import CONFIG, JSON, NAME, NAMESPACE, NOW, UID

SERIES = {"slice_type": "tpu7x", "topology": "2x2x1"}


def orphan(**meta: Any) -> JSON:
    """Our Slice at slot (0, 0) of the walkthrough's replica, as the server holds it."""
    replica = slicekit.replica(rows=[slicekit.row(0)])
    body = gke.body(replica.raw, Slot(0, 0), slicekit.ONE_HOST, CONFIG, replica.annotations)
    body["metadata"].update({"uid": "slice-uid-1", "resourceVersion": "42", **meta})
    return body


def node(name: str, slice_name: str) -> JSON:
    return {"metadata": {"name": name, "labels": {CONFIG.slice_label: slice_name}}}


def pod(name: str, namespace: str, node_name: str, selector: str = "", chips: int = 4) -> JSON:
    spec: JSON = {
        "nodeName": node_name,
        "containers": [{"name": "c", "resources": {"limits": {CONFIG.chip_resource: chips}}}],
    }
    if selector:
        spec["nodeSelector"] = {CONFIG.slice_label: selector}
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": spec,
        "status": {"phase": "Running"},
    }


@dataclass
class API:
    """Slices by name, replicas by ``namespace/name``, nodes and pods; every read and delete
    it was sent."""

    slices: dict[str, JSON] = field(default_factory=dict)
    replicas: dict[str, JSON] = field(default_factory=dict)
    nodes: list[JSON] = field(default_factory=list)
    pods: list[JSON] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    deleted: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    refuse: ApiException | None = None

    def live_get_or_none(self, res: Any, name: str, namespace: str | None = None) -> JSON | None:
        if res == INFERENCE_REPLICAS:
            self.reads.append(f"get replica {namespace}/{name}")
            return copy.deepcopy(self.replicas.get(f"{namespace}/{name}"))
        assert res == gke.SLICES
        self.reads.append(f"get slice {name}")
        return copy.deepcopy(self.slices.get(name))

    def live_list(self, res: Any, namespace: str | None = None, **kw: Any) -> list[JSON]:
        if res == INFERENCE_REPLICAS:
            self.reads.append("list replicas")
            return copy.deepcopy(list(self.replicas.values()))
        if res == NODES:
            self.reads.append(f"list nodes {kw['label_selector']}")
            label, _, value = kw["label_selector"].partition("=")
            return [n for n in self.nodes if n["metadata"]["labels"].get(label) == value]
        assert res == PODS
        node_name = kw["field_selector"].removeprefix("spec.nodeName=")
        self.reads.append(f"list pods on {node_name}")
        return [p for p in self.pods if p["spec"]["nodeName"] == node_name]

    def delete(self, res: Any, name: str, namespace: str | None = None, **kw: Any) -> JSON:
        assert res == gke.SLICES
        if self.refuse is not None:
            raise self.refuse
        self.deleted.append((name, kw.get("uid"), kw.get("resource_version")))
        return {"kind": "Status", "status": "Success"}


@dataclass
class Recorder:
    events: list[tuple[JSON, str, str]] = field(default_factory=list)

    def event(self, obj: JSON, type_: str, reason: str, message: str) -> None:
        self.events.append((obj, reason, message))

    def lasting(self, obj: JSON, type_: str, reason: str, message: str, **_: Any) -> None:
        self.events.append((obj, reason, message))


def collect(api: API, recorder: Recorder | None = None) -> tuple[Any, CollectorRegistry, Any]:
    registry = CollectorRegistry()
    act = SliceActor(
        api,  # type: ignore[arg-type]
        CONFIG,
        recorder or Recorder(),  # type: ignore[arg-type]
        SliceMetrics(CONFIG, registry),
        Expectations(),
        Expectations(),
        lambda: NOW,
    )
    cached = [gke.parse(s) for s in api.slices.values()]
    return act.collect_orphans(UID, cached), registry, act


def sample(registry: CollectorRegistry, name: str) -> float:
    return registry.get_sample_value(name, SERIES) or 0.0


def test_an_orphan_is_confirmed_by_one_read_of_its_owner_then_deleted_under_uid_and_version() -> (
    None
):
    found = orphan()
    name = found["metadata"]["name"]
    api = API(slices={name: found})
    out, registry, _ = collect(api)
    assert api.reads == [
        f"get slice {name}",
        f"get replica {NAMESPACE}/{NAME}",
        f"list nodes {CONFIG.slice_label}={name}",
    ]
    assert api.deleted == [(name, "slice-uid-1", "42")]
    assert out.retry_after is None and not out.failed
    assert sample(registry, "ome_tpu_slice_orphans_released_total") == 1
    assert sample(registry, "ome_tpu_slice_released_total") == 1


def test_an_owner_found_by_its_read_keeps_the_slice() -> None:
    found = orphan()
    name = found["metadata"]["name"]
    api = API(
        slices={name: found},
        replicas={f"{NAMESPACE}/{NAME}": {"metadata": {"name": NAME, "uid": UID}}},
    )
    collect(api)
    assert api.deleted == []


def test_a_replica_of_the_same_name_but_another_uid_is_not_the_owner() -> None:
    found = orphan()
    name = found["metadata"]["name"]
    api = API(
        slices={name: found},
        replicas={f"{NAMESPACE}/{NAME}": {"metadata": {"name": NAME, "uid": "a-new-uid"}}},
    )
    collect(api)
    assert api.deleted == [(name, "slice-uid-1", "42")]


@pytest.mark.parametrize(
    "annotations",
    [{}, {"ome.io/slice-owner": f"{NAMESPACE}/another-engine"}],
    ids=["no annotation", "an annotation the name does not vouch for"],
)
def test_without_an_annotation_to_trust_every_replica_is_listed(annotations: JSON) -> None:
    """The owner is wherever a replica with its UID is: found under another name by the list,
    the Slice stays; with none, it goes."""
    found = orphan(annotations=annotations)
    name = found["metadata"]["name"]
    elsewhere = {"metadata": {"name": "renamed", "uid": UID}}
    api = API(slices={name: found}, replicas={f"{NAMESPACE}/renamed": elsewhere})
    collect(api)
    assert "list replicas" in api.reads and not any("get replica" in r for r in api.reads)
    assert api.deleted == []
    api = API(slices={name: copy.deepcopy(found)})
    collect(api)
    assert api.deleted == [(name, "slice-uid-1", "42")]


def test_a_holder_defers_an_orphan_with_a_warning_on_the_slice_itself() -> None:
    found = orphan()
    name = found["metadata"]["name"]
    api = API(
        slices={name: found},
        nodes=[node("host-a", name)],
        pods=[pod("indexer-0", "tpu-batch", "host-a")],
    )
    recorder = Recorder()
    out, registry, _ = collect(api, recorder)
    assert api.deleted == []
    ((target, reason, message),) = recorder.events
    assert target == {
        "apiVersion": "accelerator.gke.io/v1beta1",
        "kind": "Slice",
        "metadata": {"name": name, "uid": "slice-uid-1"},
    }
    assert (reason, message) == (
        "SliceReleaseDeferred",
        f"TPU slice {name} is kept: pods of other workloads hold chips on its hosts "
        "(tpu-batch/indexer-0); it is released once they are gone",
    )
    assert sample(registry, "ome_tpu_slice_release_deferred_total") == 1
    assert out.retry_after == 1.0


def test_a_pod_confined_to_the_orphan_keeps_it_and_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    found = orphan()
    name = found["metadata"]["name"]
    api = API(
        slices={name: found},
        nodes=[node("host-a", name)],
        pods=[pod("engine-0", NAMESPACE, "host-a", selector=name)],
    )
    with caplog.at_level(logging.INFO, logger="ome.controllers.slices.act"):
        _, _, act = collect(api)
        again = act.collect_orphans(UID, [gke.parse(found)])
    assert api.deleted == []
    assert again.retry_after == 2.0, "the backoff grows between tries"
    said = [m for m in caplog.messages if "is kept while pods" in m]
    assert said == [
        f"orphaned TPU slice {name} (no InferenceReplica has its owner UID {UID}) is kept while "
        f"pods {NAMESPACE}/engine-0 run on it; it is released once they are gone"
    ]


@pytest.mark.parametrize(
    "live",
    [None, orphan(uid="another-slice"), orphan(deletionTimestamp="2025-03-01T11:00:00Z")],
    ids=["gone", "replaced", "terminating"],
)
def test_a_slice_gone_replaced_or_going_is_left_alone(live: JSON | None) -> None:
    found = orphan()
    name = found["metadata"]["name"]
    api = API(slices={} if live is None else {name: live})
    registry = CollectorRegistry()
    act = SliceActor(
        api,  # type: ignore[arg-type]
        CONFIG,
        Recorder(),  # type: ignore[arg-type]
        SliceMetrics(CONFIG, registry),
        Expectations(),
        Expectations(),
        lambda: NOW,
    )
    out = act.collect_orphans(UID, [gke.parse(found)])
    assert api.deleted == [] and api.reads == [f"get slice {name}"]
    assert out.retry_after is None


def test_a_refused_delete_is_one_line_and_a_backoff(caplog: pytest.LogCaptureFixture) -> None:
    found = orphan()
    name = found["metadata"]["name"]
    api = API(slices={name: found}, refuse=ApiException(status=500, reason="Internal Error"))
    out, registry, act = collect(api)
    assert out.retry_after == 1.0
    (line,) = [m for m in caplog.messages if "orphaned" in m]
    assert line.startswith(f"releasing orphaned TPU slice {name} failed: ")
    assert "Traceback" not in caplog.text
    for _ in range(10):
        out = act.collect_orphans(UID, [gke.parse(found)])
    assert out.retry_after == MAX_RETRY_WAIT
    assert sample(registry, "ome_tpu_slice_orphans_released_total") == 0

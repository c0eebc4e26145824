"""What an InferenceService pass decides from what it observed: where it stops (mode, model,
runtime, no components), the replica each component is to have (created, replaced, or left
as it is), the replicas of removed components to delete, the conditions and the status.
Every condition text is checked verbatim. Plain values only: no server, no client."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ome.api.v1beta1 import FINALIZER_IR_TEARDOWN
from ome.controllers.conditions import WantedCondition
from ome.controllers.inferenceservice.decide import (
    Applied,
    ServiceObservation,
    ServicePlan,
    plan_component,
    plan_service,
    removal_confirmed,
    service_conditions,
    service_status,
)

JSON = dict[str, Any]
NS, NAME, UID = "qwen3-tpu", "qwen3-tpu", "uid-isvc"
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
ENGINE_CONFIG: JSON = {"runner": {"name": "ome-container", "image": "registry.example/sgl:v1"}}


def service(**spec: Any) -> JSON:
    base: JSON = {
        "model": {"name": "qwen3"},
        "runtime": {"name": "sglang"},
        "engine": {"minReplicas": 1, "maxReplicas": 3},
    }
    base.update(spec)
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": NAME,
            "namespace": NS,
            "uid": UID,
            "generation": 2,
            "resourceVersion": "7",
        },
        "spec": {k: v for k, v in base.items() if v is not None},
    }


def replica(
    component: str, spec: JSON, ready: int = 0, revisions: tuple[str, str] = ("a", "a")
) -> JSON:
    return {
        "metadata": {
            "name": f"{NAME}-{component}",
            "namespace": NS,
            "uid": f"uid-{component}",
            "labels": {"ome.io/inferenceservice": NAME, "component": component},
        },
        "spec": spec,
        "status": {
            "readyReplicas": ready,
            "updateRevision": revisions[0],
            "currentRevision": revisions[1],
        },
    }


def observe(
    isvc: JSON,
    replicas: dict[str, JSON] | None = None,
    model_found: bool = True,
    engine_config: JSON | None = ENGINE_CONFIG,
) -> ServiceObservation:
    return ServiceObservation(isvc, model_found, engine_config, replicas or {})


def ready_of(conditions: list[WantedCondition]) -> WantedCondition:
    return next(c for c in conditions if c.type == "Ready")


# -- where a pass stops -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obs", "reason", "message"),
    [
        (
            observe(service(deploymentMode="RawDeployment")),
            "UnsupportedDeploymentMode",
            'deploymentMode "RawDeployment" is not supported: '
            "this controller serves OMENative only",
        ),
        (
            observe(service(), model_found=False),
            "ModelNotFound",
            'model "qwen3" not found: no BaseModel in namespace qwen3-tpu and no ClusterBaseModel',
        ),
        (
            observe(service(), engine_config=None),
            "RuntimeNotFound",
            'runtime "sglang" not found: '
            "no ServingRuntime in namespace qwen3-tpu and no ClusterServingRuntime",
        ),
        (
            observe(service(engine=None)),
            "NoComponents",
            "the InferenceService has no engine, decoder or router",
        ),
        (  # the mode is read first, then the model, then the runtime
            observe(service(deploymentMode="Serverless"), model_found=False, engine_config=None),
            "UnsupportedDeploymentMode",
            'deploymentMode "Serverless" is not supported: this controller serves OMENative only',
        ),
        (
            observe(service(), model_found=False, engine_config=None),
            "ModelNotFound",
            'model "qwen3" not found: no BaseModel in namespace qwen3-tpu and no ClusterBaseModel',
        ),
    ],
)
def test_a_service_that_cannot_be_served_stops_with_its_ready_condition_alone(
    obs: ServiceObservation, reason: str, message: str
) -> None:
    plan = plan_service(obs)
    assert plan == ServicePlan(stop=WantedCondition("Ready", False, reason, message))
    assert service_conditions(obs, plan, [], NOW) == [
        WantedCondition("Ready", False, reason, message)
    ]


def test_a_service_with_no_components_deletes_no_replica() -> None:
    """As before: the removed components' replicas go only once a component is present."""
    obs = observe(service(engine=None), {"decoder": replica("decoder", {})})
    assert plan_service(obs).delete == ()


# -- the replica each component is to have ------------------------------------------------------


def test_a_component_without_a_replica_gets_one_with_its_teardown_finalizer() -> None:
    [engine] = plan_service(observe(service())).components
    assert (engine.component, engine.replica, engine.desired, engine.update) == (
        "engine",
        "qwen3-tpu-engine",
        1,
        None,
    )
    body = engine.create
    assert body is not None
    assert body["metadata"]["finalizers"] == [FINALIZER_IR_TEARDOWN]
    assert body["metadata"]["ownerReferences"][0]["uid"] == UID
    assert body["metadata"]["labels"] == {"ome.io/inferenceservice": NAME, "component": "engine"}
    assert body["spec"]["replicas"] == 1


def test_a_replica_as_planned_is_left_as_it_is() -> None:
    [first] = plan_service(observe(service())).components
    assert first.create is not None
    current = replica("engine", copy.deepcopy(first.create["spec"]))
    [again] = plan_service(observe(service(), {"engine": current})).components
    assert (again.create, again.update, again.desired) == (None, None, 1)


@pytest.mark.parametrize(
    ("current", "kept"),
    [(2, 2), (3, 3), (7, 3), (0, 1), (None, 1), ("2", 1)],
)
def test_a_scaled_replica_keeps_its_count_within_min_and_max(current: object, kept: int) -> None:
    [first] = plan_service(observe(service())).components
    assert first.create is not None
    spec = copy.deepcopy(first.create["spec"])
    spec["replicas"] = current
    [planned] = plan_service(observe(service(), {"engine": replica("engine", spec)})).components
    assert planned.desired == kept
    if current == kept:
        assert planned.update is None
    else:
        assert planned.update is not None and planned.update["spec"]["replicas"] == kept


def test_a_replicas_own_lifecycle_is_kept_when_the_service_sets_none() -> None:
    [first] = plan_service(observe(service())).components
    assert first.create is not None
    spec = dict(copy.deepcopy(first.create["spec"]), lifecycle={"teardownTimeout": "1m"})
    current = replica("engine", spec)
    [planned] = plan_service(observe(service(), {"engine": current})).components
    assert planned.update is None, "the operator's lifecycle is no difference"
    lifecycle = {"instanceReadyTimeout": "5m"}
    engine = {"minReplicas": 1, "maxReplicas": 3, "lifecycle": lifecycle}
    [planned] = plan_service(observe(service(engine=engine), {"engine": current})).components
    assert planned.update is not None and planned.update["spec"]["lifecycle"] == lifecycle


def test_an_update_copies_the_replica_and_adds_the_labels_it_lacks() -> None:
    [first] = plan_service(observe(service())).components
    assert first.create is not None
    current = replica("engine", copy.deepcopy(first.create["spec"]))
    current["metadata"]["labels"] = {"team": "a"}
    before = copy.deepcopy(current)
    [planned] = plan_service(observe(service(), {"engine": current})).components
    assert planned.update is not None
    assert planned.update["metadata"]["labels"] == {
        "team": "a",
        "ome.io/inferenceservice": NAME,
        "component": "engine",
    }
    assert planned.update["metadata"]["uid"] == "uid-engine"
    assert current == before, "the cache's replica is only read"


def test_an_invalid_component_is_planned_as_invalid_and_written_nowhere() -> None:
    obs = observe(service(engine={"minReplicas": 2, "maxReplicas": 1}))
    [engine] = plan_service(obs).components
    assert engine.invalid == "component engine: maxReplicas 1 is less than minReplicas 2"
    assert (engine.create, engine.update) == (None, None)


def test_the_replicas_of_removed_components_are_deleted_under_their_uid_once() -> None:
    going = replica("router", {})
    going["metadata"]["deletionTimestamp"] = "2026-03-01T11:00:00Z"
    obs = observe(service(), {"decoder": replica("decoder", {}), "router": going})
    assert plan_service(obs).delete == (("qwen3-tpu-decoder", "uid-decoder"),)


# -- conditions and status -----------------------------------------------------------------------


def test_each_component_reports_its_ready_instances_and_why_it_is_not_ready() -> None:
    engine = {"minReplicas": 2, "maxReplicas": 2}
    decoder = {"minReplicas": 1, "maxReplicas": 1}
    router = {"minReplicas": 3, "maxReplicas": 1}
    isvc = service(engine=engine, decoder=decoder, router=router)
    first = plan_service(observe(isvc))
    specs = {c.component: c.create["spec"] for c in first.components if c.create is not None}
    obs = observe(
        isvc,
        {
            "engine": replica("engine", specs["engine"], ready=2),
            "decoder": replica("decoder", specs["decoder"], ready=1, revisions=("b", "a")),
        },
    )
    plan = plan_service(obs)
    refused = "failed to reconcile component qwen3-tpu-decoder: denied"
    assert service_conditions(obs, plan, [Applied(), Applied(), Applied()], NOW) == [
        WantedCondition("EngineReady", True, "ComponentReady", "2 of 2 instances ready"),
        WantedCondition("DecoderReady", False, "ComponentNotReady", "1 of 1 instances ready"),
        WantedCondition(
            "RouterReady",
            False,
            "InvalidSpec",
            "component router: maxReplicas 1 is less than minReplicas 3",
        ),
        WantedCondition("Ready", False, "ComponentsNotReady", "some components are not ready"),
    ]
    assert service_conditions(obs, plan, [Applied(), Applied(refused=refused), Applied()], NOW)[
        1
    ] == WantedCondition("DecoderReady", False, "ComponentReconcileError", refused)


def test_a_service_whose_components_are_all_ready_is_ready() -> None:
    isvc = service()
    [first] = plan_service(observe(isvc)).components
    assert first.create is not None
    obs = observe(isvc, {"engine": replica("engine", first.create["spec"], ready=1)})
    conditions = service_conditions(obs, plan_service(obs), [Applied()], NOW)
    assert ready_of(conditions) == WantedCondition(
        "Ready", True, "AllComponentsReady", "all components are ready"
    )
    status = service_status(isvc, conditions, NOW)
    assert status is not None
    assert status["observedGeneration"] == 2
    assert [(c["type"], c["status"], c["lastTransitionTime"]) for c in status["conditions"]] == [
        ("EngineReady", "True", "2026-03-01T12:00:00Z"),
        ("Ready", "True", "2026-03-01T12:00:00Z"),
    ]
    isvc["status"] = status
    assert service_status(isvc, conditions, NOW + timedelta(minutes=5)) is None, "unchanged"


def test_a_stopped_service_keeps_no_component_condition_and_the_rest_of_its_status() -> None:
    isvc = service(deploymentMode="RawDeployment")
    isvc["status"] = {
        "url": "http://x",
        "conditions": [
            {"type": "EngineReady", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ],
    }
    obs = observe(isvc)
    status = service_status(isvc, service_conditions(obs, plan_service(obs), [], NOW), NOW)
    assert status is not None
    assert status["url"] == "http://x"
    assert [c["type"] for c in status["conditions"]] == ["Ready"]


readiness = st.tuples(st.integers(0, 4), st.booleans(), st.booleans())


@given(
    st.fixed_dictionaries(
        {}, optional={c: readiness for c in ("engine", "decoder", "router")}
    ).filter(bool),
    st.data(),
)
def test_a_service_is_ready_exactly_when_every_component_is(
    components: dict[str, tuple[int, bool, bool]], data: st.DataObject
) -> None:
    """Each present component, with or without a replica that has some ready instances, at
    or behind its update revision, and a write that went or was refused."""
    specs: dict[str, Any] = {"engine": None}
    specs.update({c: {"minReplicas": 2, "maxReplicas": 2} for c in components})
    isvc = service(**specs)
    replicas = {}
    for c, (ready, exists, rolled) in components.items():
        if exists:
            body = plan_component(isvc, c, ENGINE_CONFIG, None).create
            assert body is not None
            replicas[c] = replica(c, body["spec"], ready, ("a", "a") if rolled else ("b", "a"))
    obs = observe(isvc, replicas)
    plan = plan_service(obs)
    applied = [
        data.draw(st.sampled_from([Applied(), Applied(refused="no"), Applied(stale=True)]))
        for _ in plan.components
    ]
    conditions = service_conditions(obs, plan, applied, NOW)
    assert [c.type for c in conditions[:-1]] == [
        f"{c.capitalize()}Ready" for c in ("engine", "decoder", "router") if c in components
    ]
    for cond, component, result in zip(conditions, plan.components, applied, strict=False):
        ready, exists, rolled = components[component.component]
        assert cond.ok == (result.refused is None and exists and ready >= 2 and rolled)
    assert conditions[-1].ok == all(c.ok for c in conditions[:-1])
    status = service_status(isvc, conditions, NOW)
    assert status is not None
    isvc["status"] = status
    assert service_status(isvc, conditions, NOW + timedelta(hours=1)) is None


def _live(uid: str = "u1", deleting: bool = False, **components: JSON) -> JSON:
    meta: JSON = {"name": "svc", "namespace": "ns", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T00:00:00Z"
    return {"metadata": meta, "spec": dict(components)}


@pytest.mark.parametrize(
    ("live", "confirmed"),
    [
        (_live(engine={}), True),  # the router is still gone from the server's copy
        (_live(engine={}, router={}), False),  # added back since the cache's copy
        (_live(uid="u2", engine={}), False),  # another service of the same name
        (_live(deleting=True, engine={}), False),  # its replicas go with it
        (None, False),  # gone: nothing to confirm against
    ],
)
def test_a_removed_components_replica_is_deleted_only_if_the_live_service_still_lacks_it(
    live: JSON | None, confirmed: bool
) -> None:
    assert removal_confirmed(live, "u1", "svc-router") is confirmed

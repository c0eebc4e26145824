"""The InferenceService projection (M2, M6): a component of
an InferenceService, merged over its runtime's ``engineConfig``, becomes the InferenceReplica
``<isvc>-<component>`` with ``default`` or ``leader``/``worker`` runners. Every refusal's
message (the ``InvalidSpec`` condition's text) is checked verbatim. Plain values only."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ome.controllers.inferenceservice.decide import clamp_replicas
from ome.controllers.inferenceservice.project import (
    COMPONENTS,
    DEFAULT_CONTAINER,
    ReplicaSpec,
    SpecError,
    deep_merge,
    merge_component,
    replica_spec,
    validate_component,
)
from ome.durations import parse_go_duration

JSON = dict[str, Any]

NS = "qwen3-tpu"
OPT_IN = "ome.io/tpu-slice-provisioning"
IMAGE = "registry.example/sglang-tpu:v1"
TPU = {
    "cloud.google.com/gke-tpu-accelerator": "tpu7x",
    "cloud.google.com/gke-tpu-topology": "2x2x1",
}
TOLERATION = [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
# The walkthrough's ClusterServingRuntime's engineConfig (test/integration/test_omenative.py).
ENGINE_CONFIG: JSON = {
    "runner": {
        "name": "ome-container",
        "image": IMAGE,
        "args": ["--model-path", "/mnt/models"],
    }
}
RESOURCES = {"requests": {"google.com/tpu": 4}, "limits": {"google.com/tpu": 4}}


def engine(**extra: Any) -> JSON:
    """The walkthrough's Step 2 engine component, with ``extra`` replacing its top-level fields."""
    component: JSON = {
        "minReplicas": 1,
        "maxReplicas": 1,
        "nodeSelector": dict(TPU),
        "tolerations": copy.deepcopy(TOLERATION),
        "runner": {"name": "ome-container", "resources": copy.deepcopy(RESOURCES)},
    }
    component.update(extra)
    return component


def isvc(name: str = "qwen3-tpu", **components: JSON) -> JSON:
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "deploymentMode": "OMENative",
            "model": {"name": "qwen3-0-6b"},
            "runtime": {"name": "srt-qwen3-tpu"},
            **components,
        },
    }


def project(
    component: JSON,
    engine_config: JSON | None = ENGINE_CONFIG,
    name: str = "engine",
    service: JSON | None = None,
) -> ReplicaSpec:
    """What the reconciler does per component: merge, then project."""
    service = service if service is not None else isvc(**{name: component})
    return replica_spec(service, name, merge_component(engine_config, component))


def refusal(
    component: JSON, engine_config: JSON | None = ENGINE_CONFIG, name: str = "engine"
) -> str:
    with pytest.raises(SpecError) as e:
        project(component, engine_config, name)
    return str(e.value)


def runners(spec: ReplicaSpec) -> dict[str, JSON]:
    return {r["name"]: r for r in spec.spec["runners"]}


def container(runner: JSON) -> JSON:
    containers = runner["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: JSON = containers[0]
    return result


# -- the replica: name, labels, component --------------------------------------------------------


@pytest.mark.parametrize("component", COMPONENTS)
def test_the_replica_is_named_isvc_dash_component_and_labelled_with_both(component: str) -> None:
    out = project(engine(), name=component)
    assert out.name == f"qwen3-tpu-{component}"
    assert out.labels == {"ome.io/inferenceservice": "qwen3-tpu", "component": component}
    assert out.spec["component"] == component


def test_the_components_are_engine_decoder_and_router() -> None:
    assert COMPONENTS == ("engine", "decoder", "router")


def test_the_replica_name_uses_the_service_name_not_its_namespace() -> None:
    service = isvc("llama.3", engine=engine())
    service["metadata"]["namespace"] = "other"
    out = project(engine(), service=service)
    assert out.name == "llama.3-engine"
    assert out.labels["ome.io/inferenceservice"] == "llama.3"


def test_the_guides_service_projects_one_default_runner_with_the_runtimes_image() -> None:
    out = project(engine())
    assert out.spec == {
        "component": "engine",
        "replicas": 1,
        "runners": [
            {
                "name": "default",
                "size": 1,
                "template": {
                    "metadata": {},
                    "spec": {
                        "containers": [
                            {
                                "name": "ome-container",
                                "image": IMAGE,
                                "args": ["--model-path", "/mnt/models"],
                                "resources": RESOURCES,
                            }
                        ],
                        "nodeSelector": TPU,
                        "tolerations": TOLERATION,
                    },
                },
            }
        ],
    }


def test_the_opt_in_annotation_reaches_the_default_runners_template() -> None:
    out = project(engine(annotations={OPT_IN: "true"}))
    assert runners(out)["default"]["template"]["metadata"] == {"annotations": {OPT_IN: "true"}}


def test_no_labels_annotations_node_selector_or_tolerations_means_none_in_the_template() -> None:
    out = project({"runner": {"image": "img"}}, engine_config=None)
    assert runners(out)["default"]["template"] == {
        "metadata": {},
        "spec": {"containers": [{"image": "img", "name": DEFAULT_CONTAINER}]},
    }


@pytest.mark.parametrize("empty", [{}, None], ids=["empty", "null"])
def test_empty_labels_annotations_node_selector_and_tolerations_are_left_out(empty: Any) -> None:
    component = {
        "runner": {"image": "img"},
        "labels": empty,
        "annotations": empty,
        "nodeSelector": empty,
        "tolerations": [] if empty is not None else None,
    }
    template = runners(project(component, engine_config=None))["default"]["template"]
    assert template["metadata"] == {}
    assert set(template["spec"]) == {"containers"}


# -- the container: runtime under component ------------------------------------------------------


@pytest.mark.parametrize(
    ("runtime_runner", "component_runner", "expected"),
    [
        pytest.param(
            {"image": IMAGE},
            {"resources": {"limits": {"google.com/tpu": 4}}},
            {
                "name": DEFAULT_CONTAINER,
                "image": IMAGE,
                "resources": {"limits": {"google.com/tpu": 4}},
            },
            id="runtime-image-merged-in-and-name-defaulted",
        ),
        pytest.param(
            {"image": IMAGE, "name": "engine"},
            {},
            {"name": "engine", "image": IMAGE},
            id="runtime-container-name-kept",
        ),
        pytest.param(
            {"image": IMAGE, "name": "engine"},
            {"name": "mine"},
            {"name": "mine", "image": IMAGE},
            id="component-container-name-wins",
        ),
        pytest.param(
            {"image": IMAGE},
            {"image": "registry.example/mine:v2"},
            {"name": DEFAULT_CONTAINER, "image": "registry.example/mine:v2"},
            id="component-image-wins",
        ),
        pytest.param(
            {"image": IMAGE, "args": ["--model-path", "/mnt/models", "--tp", "4"]},
            {"args": ["--tp", "8"]},
            {"name": DEFAULT_CONTAINER, "image": IMAGE, "args": ["--tp", "8"]},
            id="args-list-replaced-whole",
        ),
        pytest.param(
            {"image": IMAGE, "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
            {"env": [{"name": "B", "value": "3"}]},
            {"name": DEFAULT_CONTAINER, "image": IMAGE, "env": [{"name": "B", "value": "3"}]},
            id="env-list-replaced-whole",
        ),
        pytest.param(
            {"image": IMAGE, "resources": {"requests": {"cpu": "8", "memory": "32Gi"}}},
            {"resources": {"requests": {"cpu": "4"}, "limits": {"google.com/tpu": 4}}},
            {
                "name": DEFAULT_CONTAINER,
                "image": IMAGE,
                "resources": {
                    "requests": {"cpu": "4", "memory": "32Gi"},
                    "limits": {"google.com/tpu": 4},
                },
            },
            id="resources-maps-merged-key-by-key",
        ),
        pytest.param(
            {},
            {"image": "img", "ports": [{"containerPort": 8080}]},
            {"name": DEFAULT_CONTAINER, "image": "img", "ports": [{"containerPort": 8080}]},
            id="runtime-without-runner-fields",
        ),
    ],
)
def test_the_components_runner_is_merged_over_the_runtimes(
    runtime_runner: JSON, component_runner: JSON, expected: JSON
) -> None:
    out = project({"runner": component_runner}, engine_config={"runner": runtime_runner})
    assert container(runners(out)["default"]) == expected


def test_a_runtime_alone_can_supply_the_whole_runner() -> None:
    out = project({"minReplicas": 2}, engine_config=ENGINE_CONFIG)
    assert container(runners(out)["default"]) == ENGINE_CONFIG["runner"]
    assert out.spec["replicas"] == 2


@pytest.mark.parametrize("engine_config", [None, {}], ids=["none", "empty"])
def test_no_runtime_config_leaves_the_component_as_it_is(engine_config: JSON | None) -> None:
    out = project(
        {"runner": {"image": "img"}, "nodeSelector": TPU, "tolerations": TOLERATION},
        engine_config=engine_config,
    )
    template = runners(out)["default"]["template"]
    assert template["spec"] == {
        "containers": [{"image": "img", "name": DEFAULT_CONTAINER}],
        "nodeSelector": TPU,
        "tolerations": TOLERATION,
    }


# -- pod-level fields: runtime under component ---------------------------------------------------


def test_node_selectors_merge_key_by_key_with_the_component_winning() -> None:
    runtime = {
        "runner": {"image": IMAGE},
        "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p", "pool": "a"},
    }
    out = project(engine(), engine_config=runtime)
    assert runners(out)["default"]["template"]["spec"]["nodeSelector"] == {**TPU, "pool": "a"}


def test_the_components_tolerations_replace_the_runtimes_whole() -> None:
    runtime = {
        "runner": {"image": IMAGE},
        "tolerations": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}],
    }
    out = project(engine(), engine_config=runtime)
    assert runners(out)["default"]["template"]["spec"]["tolerations"] == TOLERATION


def test_the_runtimes_tolerations_apply_when_the_component_has_none() -> None:
    runtime = {"runner": {"image": IMAGE}, "tolerations": TOLERATION}
    out = project({"minReplicas": 1}, engine_config=runtime)
    assert runners(out)["default"]["template"]["spec"]["tolerations"] == TOLERATION


@pytest.mark.parametrize(
    ("runtime_annotations", "component_annotations", "expected"),
    [
        ({}, {OPT_IN: "true"}, {OPT_IN: "true"}),
        ({OPT_IN: "true"}, {}, {OPT_IN: "true"}),
        (
            {"team.example.com/cost-center": "42"},
            {OPT_IN: "true"},
            {"team.example.com/cost-center": "42", OPT_IN: "true"},
        ),
        ({OPT_IN: "true"}, {OPT_IN: "false"}, {OPT_IN: "false"}),
        ({OPT_IN: "false"}, {OPT_IN: "true"}, {OPT_IN: "true"}),
    ],
)
def test_annotations_of_runtime_and_component_reach_the_template_the_component_winning(
    runtime_annotations: JSON, component_annotations: JSON, expected: JSON
) -> None:
    runtime = {"runner": {"image": IMAGE}, "annotations": runtime_annotations}
    out = project(engine(annotations=component_annotations), engine_config=runtime)
    assert runners(out)["default"]["template"]["metadata"]["annotations"] == expected


def test_labels_of_runtime_and_component_reach_the_template_the_component_winning() -> None:
    runtime = {"runner": {"image": IMAGE}, "labels": {"app": "sglang", "tier": "runtime"}}
    out = project(engine(labels={"tier": "engine", "team": "ml"}), engine_config=runtime)
    assert runners(out)["default"]["template"]["metadata"]["labels"] == {
        "app": "sglang",
        "tier": "engine",
        "team": "ml",
    }
    # The template's labels are not the replica's own.
    assert out.labels == {"ome.io/inferenceservice": "qwen3-tpu", "component": "engine"}


# -- multi-host: leader and worker ---------------------------------------------------------------


def test_a_multi_host_component_has_a_leader_and_size_workers_and_no_default() -> None:
    component = engine(
        annotations={OPT_IN: "true"},
        labels={"team": "ml"},
        leader={"runner": {"args": ["--role", "leader"]}},
        worker={"size": 3, "runner": {"args": ["--role", "worker"]}},
    )
    runtime = {"runner": {"image": IMAGE}, "leader": {"runner": {"image": IMAGE}}}
    runtime["worker"] = {"runner": {"image": IMAGE}}
    out = project(component, engine_config=runtime)
    assert [(r["name"], r["size"]) for r in out.spec["runners"]] == [("leader", 1), ("worker", 3)]
    for name, role in (("leader", "leader"), ("worker", "worker")):
        runner = runners(out)[name]
        assert runner["template"]["metadata"] == {
            "labels": {"team": "ml"},
            "annotations": {OPT_IN: "true"},
        }, f"the component's labels and annotations reach the {name} template"
        assert runner["template"]["spec"]["nodeSelector"] == TPU
        assert runner["template"]["spec"]["tolerations"] == TOLERATION
        assert container(runner) == {
            "name": "ome-container",
            "image": IMAGE,
            "resources": RESOURCES,
            "args": ["--role", role],
        }, "the component's runner under the leader's or worker's own"


@pytest.mark.parametrize(
    ("leader", "worker", "sizes"),
    [
        pytest.param({}, None, [("leader", 1), ("worker", 0)], id="leader-only"),
        pytest.param(None, {}, [("leader", 1), ("worker", 0)], id="worker-without-size"),
        pytest.param(None, {"size": 0}, [("leader", 1), ("worker", 0)], id="worker-size-0"),
        pytest.param(None, {"size": None}, [("leader", 1), ("worker", 0)], id="worker-size-null"),
        pytest.param(None, {"size": 7}, [("leader", 1), ("worker", 7)], id="worker-only"),
        pytest.param({}, {"size": 2}, [("leader", 1), ("worker", 2)], id="both"),
    ],
)
def test_either_leader_or_worker_makes_the_component_multi_host(
    leader: JSON | None, worker: JSON | None, sizes: list[tuple[str, int]]
) -> None:
    component: JSON = {"runner": {"image": IMAGE}}
    if leader is not None:
        component["leader"] = leader
    if worker is not None:
        component["worker"] = worker
    out = project(component, engine_config=None)
    assert [(r["name"], r["size"]) for r in out.spec["runners"]] == sizes
    for runner in out.spec["runners"]:
        assert container(runner) == {"name": DEFAULT_CONTAINER, "image": IMAGE}


def test_null_leader_and_worker_mean_a_single_host_component() -> None:
    out = project({"runner": {"image": IMAGE}, "leader": None, "worker": None}, None)
    assert [r["name"] for r in out.spec["runners"]] == ["default"]


def test_a_runtimes_leader_and_worker_make_the_component_multi_host() -> None:
    runtime = {"runner": {"image": IMAGE}, "worker": {"size": 1}}
    out = project(engine(worker={"size": 3}), engine_config=runtime)
    assert [(r["name"], r["size"]) for r in out.spec["runners"]] == [("leader", 1), ("worker", 3)]
    out = project(engine(), engine_config=runtime)
    assert [(r["name"], r["size"]) for r in out.spec["runners"]] == [("leader", 1), ("worker", 1)]


def test_the_leader_and_workers_own_runner_images_win() -> None:
    component = {
        "runner": {"image": IMAGE},
        "leader": {"runner": {"image": "lead:v1"}},
        "worker": {"size": 2, "runner": {"image": "work:v1", "name": "worker"}},
    }
    out = project(component, engine_config=None)
    assert container(runners(out)["leader"]) == {"name": DEFAULT_CONTAINER, "image": "lead:v1"}
    assert container(runners(out)["worker"]) == {"name": "worker", "image": "work:v1"}


def test_a_leader_runner_alone_is_enough_for_the_leader() -> None:
    out = project({"leader": {"runner": {"image": "lead:v1"}}}, engine_config=None)
    assert container(runners(out)["leader"]) == {"name": DEFAULT_CONTAINER, "image": "lead:v1"}


def test_the_leaders_and_workers_node_selectors_refine_the_components() -> None:
    component = engine(
        leader={"nodeSelector": {"role": "lead"}},
        worker={
            "size": 1,
            "nodeSelector": {"cloud.google.com/gke-tpu-topology": "2x2x2", "role": "work"},
        },
    )
    out = project(component)
    assert runners(out)["leader"]["template"]["spec"]["nodeSelector"] == {**TPU, "role": "lead"}
    assert runners(out)["worker"]["template"]["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu7x",
        "cloud.google.com/gke-tpu-topology": "2x2x2",
        "role": "work",
    }


def test_the_leaders_and_workers_tolerations_replace_the_components() -> None:
    own = [{"key": "lead", "operator": "Exists"}]
    component = engine(leader={"tolerations": own}, worker={"size": 1, "tolerations": []})
    out = project(component)
    assert runners(out)["leader"]["template"]["spec"]["tolerations"] == own
    assert "tolerations" not in runners(out)["worker"]["template"]["spec"], (
        "an explicit empty list clears the component's tolerations"
    )


def test_null_tolerations_on_the_worker_keep_the_components() -> None:
    out = project(engine(worker={"size": 1, "tolerations": None}))
    assert runners(out)["worker"]["template"]["spec"]["tolerations"] == TOLERATION


# -- replicas and lifecycle ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bounds", "replicas"),
    [
        ({}, 1),
        ({"minReplicas": None}, 1),
        ({"minReplicas": 0}, 0),
        ({"minReplicas": 2}, 2),
        ({"maxReplicas": 5}, 1),
        ({"minReplicas": 3, "maxReplicas": 5}, 3),
        ({"minReplicas": 4, "maxReplicas": 4}, 4),
        ({"minReplicas": 0, "maxReplicas": 0}, 0),
    ],
)
def test_the_replica_starts_at_min_replicas_or_one(bounds: JSON, replicas: int) -> None:
    component = {"runner": {"image": IMAGE}, **bounds}
    assert project(component, engine_config=None).spec["replicas"] == replicas


def test_the_runtime_can_set_min_replicas_and_the_component_overrides_it() -> None:
    runtime = {"runner": {"image": IMAGE}, "minReplicas": 2}
    assert project({}, engine_config=runtime).spec["replicas"] == 2
    assert project({"minReplicas": 5}, engine_config=runtime).spec["replicas"] == 5


@pytest.mark.parametrize(
    ("lifecycle", "expected"),
    [
        ({"instanceReadyTimeout": "10m"}, {"instanceReadyTimeout": "10m"}),
        ({}, {}),
        (None, None),
        ("10m", None),
        (["10m"], None),
    ],
)
def test_a_lifecycle_map_is_copied_to_the_replica_and_anything_else_left_out(
    lifecycle: Any, expected: JSON | None
) -> None:
    out = project(engine(lifecycle=lifecycle))
    assert out.spec.get("lifecycle") == expected
    assert ("lifecycle" in out.spec) == (expected is not None)


def test_the_runtimes_lifecycle_merges_under_the_components() -> None:
    runtime = {**ENGINE_CONFIG, "lifecycle": {"instanceReadyTimeout": "5m", "other": 1}}
    out = project(engine(lifecycle={"instanceReadyTimeout": "20m"}), engine_config=runtime)
    assert out.spec["lifecycle"] == {"instanceReadyTimeout": "20m", "other": 1}


READY_5M = {"instanceReadyTimeout": "5m"}
TEARDOWN_30S = {"teardownTimeout": "30s"}
BOTH = {"instanceReadyTimeout": "5m", "teardownTimeout": "30s"}
UNSET = object()  # the key is left out, as opposed to set to None


@pytest.mark.parametrize(
    ("runtime", "component", "expected"),
    [
        pytest.param(UNSET, UNSET, None, id="absent-everywhere"),
        pytest.param(UNSET, BOTH, BOTH, id="component-only"),
        pytest.param(BOTH, UNSET, BOTH, id="runtime-only"),
        pytest.param(BOTH, {}, BOTH, id="component-empty-keeps-runtimes"),
        pytest.param({}, UNSET, {}, id="runtime-empty"),
        pytest.param(READY_5M, TEARDOWN_30S, BOTH, id="one-field-each"),
        pytest.param(
            BOTH,
            {"teardownTimeout": "2m"},
            {"instanceReadyTimeout": "5m", "teardownTimeout": "2m"},
            id="component-wins-its-field-only",
        ),
        pytest.param(
            BOTH,
            {"instanceReadyTimeout": "20m", "teardownTimeout": "1m"},
            {"instanceReadyTimeout": "20m", "teardownTimeout": "1m"},
            id="component-wins-both",
        ),
        pytest.param(
            BOTH,
            {"instanceReadyTimeout": "soon"},
            {"instanceReadyTimeout": "soon", "teardownTimeout": "30s"},
            id="unreadable-component-value-still-wins",
        ),
        pytest.param(
            {"teardownTimeout": "10"},
            READY_5M,
            {"instanceReadyTimeout": "5m", "teardownTimeout": "10"},
            id="unreadable-runtime-value-passed-through",
        ),
        pytest.param("10m", BOTH, BOTH, id="runtime-not-a-map"),
        pytest.param(BOTH, None, None, id="component-null-replaces-as-other-fields"),
    ],
)
@pytest.mark.parametrize("name", COMPONENTS)
def test_the_lifecycle_reaches_the_replica_the_components_fields_over_the_runtimes(
    name: str, runtime: Any, component: Any, expected: JSON | None
) -> None:
    engine_config = copy.deepcopy(ENGINE_CONFIG)
    if runtime is not UNSET:
        engine_config["lifecycle"] = copy.deepcopy(runtime)
    comp = engine() if component is UNSET else engine(lifecycle=copy.deepcopy(component))
    out = project(comp, engine_config=engine_config, name=name)
    assert out.spec.get("lifecycle") == expected
    assert ("lifecycle" in out.spec) == (expected is not None)


@pytest.mark.parametrize("text", ["soon", "10", "5 m", "", "1h-5m"])
def test_an_unreadable_duration_is_projected_as_written_never_refused(text: str) -> None:
    if text:
        with pytest.raises(ValueError):
            parse_go_duration(text)  # the replica's controller treats it as unset
    out = project(engine(lifecycle={"instanceReadyTimeout": text, "teardownTimeout": text}))
    assert out.spec["lifecycle"] == {"instanceReadyTimeout": text, "teardownTimeout": text}


@pytest.mark.parametrize(
    ("current", "bounds", "kept"),
    [
        pytest.param(2, {"minReplicas": 1, "maxReplicas": 3}, 2, id="inside-kept"),
        pytest.param(5, {"minReplicas": 1, "maxReplicas": 3}, 3, id="above-max"),
        pytest.param(0, {"minReplicas": 1, "maxReplicas": 3}, 1, id="below-min"),
        pytest.param(-4, {"minReplicas": 0, "maxReplicas": 3}, 0, id="negative"),
        pytest.param(3, {"minReplicas": 3, "maxReplicas": 3}, 3, id="pinned"),
        pytest.param(9, {"minReplicas": 3, "maxReplicas": 3}, 3, id="pinned-above"),
        pytest.param(None, {"minReplicas": 2, "maxReplicas": 4}, 2, id="unset-is-min"),
        pytest.param("3", {"minReplicas": 1, "maxReplicas": 5}, 1, id="string-is-min"),
        pytest.param(3.0, {"minReplicas": 1, "maxReplicas": 5}, 1, id="float-is-min"),
        pytest.param(True, {"minReplicas": 2, "maxReplicas": 4}, 2, id="bool-is-min"),
        pytest.param(7, {}, 7, id="no-bounds-keeps"),
        pytest.param(0, {}, 1, id="no-min-means-one"),
        pytest.param(4, {"maxReplicas": 3}, 3, id="only-max"),
        pytest.param(50, {"minReplicas": 2}, 50, id="only-min"),
    ],
)
def test_an_existing_replicas_count_is_held_within_min_and_max(
    current: object, bounds: JSON, kept: int
) -> None:
    assert clamp_replicas(current, bounds) == kept


# -- refusals: the InvalidSpec condition's message -----------------------------------------------


@pytest.mark.parametrize(
    ("component", "message"),
    [
        pytest.param(
            {"minReplicas": -1},
            "component engine: minReplicas must be a whole number >= 0, not -1",
            id="min-negative",
        ),
        pytest.param(
            {"minReplicas": "2"},
            "component engine: minReplicas must be a whole number >= 0, not '2'",
            id="min-string",
        ),
        pytest.param(
            {"minReplicas": 1.5},
            "component engine: minReplicas must be a whole number >= 0, not 1.5",
            id="min-float",
        ),
        pytest.param(
            {"minReplicas": 2.0},
            "component engine: minReplicas must be a whole number >= 0, not 2.0",
            id="min-whole-float",
        ),
        pytest.param(
            {"minReplicas": True},
            "component engine: minReplicas must be a whole number >= 0, not True",
            id="min-bool",
        ),
        pytest.param(
            {"minReplicas": [1]},
            "component engine: minReplicas must be a whole number >= 0, not [1]",
            id="min-list",
        ),
        pytest.param(
            {"maxReplicas": -3},
            "component engine: maxReplicas must be a whole number >= 0, not -3",
            id="max-negative",
        ),
        pytest.param(
            {"maxReplicas": "many"},
            "component engine: maxReplicas must be a whole number >= 0, not 'many'",
            id="max-string",
        ),
        pytest.param(
            {"maxReplicas": False},
            "component engine: maxReplicas must be a whole number >= 0, not False",
            id="max-bool",
        ),
        pytest.param(
            {"minReplicas": 3, "maxReplicas": 2},
            "component engine: maxReplicas 2 is less than minReplicas 3",
            id="max-below-min",
        ),
        pytest.param(
            {"minReplicas": 10, "maxReplicas": 1},
            "component engine: maxReplicas 1 is less than minReplicas 10",
            id="max-one-below-min",
        ),
        pytest.param(
            {"worker": {"size": -1}},
            "component engine: worker.size must be a whole number >= 0, not -1",
            id="worker-size-negative",
        ),
        pytest.param(
            {"worker": {"size": "2"}},
            "component engine: worker.size must be a whole number >= 0, not '2'",
            id="worker-size-string",
        ),
        pytest.param(
            {"worker": {"size": 1.5}},
            "component engine: worker.size must be a whole number >= 0, not 1.5",
            id="worker-size-float",
        ),
        pytest.param(
            {"worker": {"size": True}},
            "component engine: worker.size must be a whole number >= 0, not True",
            id="worker-size-bool",
        ),
    ],
)
def test_bad_counts_are_refused_with_the_field_and_value(component: JSON, message: str) -> None:
    assert refusal(component) == message


@pytest.mark.parametrize(
    ("component", "engine_config", "message"),
    [
        pytest.param(
            {"minReplicas": 1},
            None,
            "component engine: no runner: set engine.runner (or the runtime's engineConfig.runner)",
            id="no-runner-no-runtime",
        ),
        pytest.param(
            {"minReplicas": 1},
            {"nodeSelector": TPU},
            "component engine: no runner: set engine.runner (or the runtime's engineConfig.runner)",
            id="runtime-without-runner",
        ),
        pytest.param(
            {"runner": None},
            None,
            "component engine: no runner: set engine.runner (or the runtime's engineConfig.runner)",
            id="null-runner",
        ),
        pytest.param(
            {"runner": {}},
            {},
            "component engine: no runner: set engine.runner (or the runtime's engineConfig.runner)",
            id="empty-runner",
        ),
        pytest.param(
            {"leader": {}, "worker": {"size": 2}},
            None,
            "component engine: no runner: set engine.runner (or the runtime's engineConfig.runner)",
            id="multi-host-no-runner",
        ),
        pytest.param(
            {"leader": {"runner": None}},
            None,
            "component engine: no runner: set engine.runner (or the runtime's engineConfig.runner)",
            id="leader-null-runner",
        ),
        pytest.param(
            {"runner": {"name": "ome-container", "resources": RESOURCES}},
            None,
            "component engine: runner has no image (set it here or in the runtime)",
            id="runner-without-image",
        ),
        pytest.param(
            {"runner": {"image": ""}},
            None,
            "component engine: runner has no image (set it here or in the runtime)",
            id="runner-empty-image",
        ),
        pytest.param(
            {"runner": {"image": None}},
            {"runner": {"image": IMAGE}},
            "component engine: runner has no image (set it here or in the runtime)",
            id="component-nulls-the-runtimes-image",
        ),
        pytest.param(
            {"runner": {"resources": RESOURCES}},
            {"runner": {"name": "ome-container"}},
            "component engine: runner has no image (set it here or in the runtime)",
            id="neither-has-an-image",
        ),
        pytest.param(
            {"leader": {"runner": {"args": ["--lead"]}}},
            None,
            "component engine: leader.runner has no image (set it here or in the runtime)",
            id="leader-runner-without-image",
        ),
        pytest.param(
            {"leader": {"runner": {"image": "lead:v1"}}, "worker": {"runner": {"args": []}}},
            None,
            "component engine: worker.runner has no image (set it here or in the runtime)",
            id="worker-runner-without-image",
        ),
    ],
)
def test_a_component_without_a_runner_or_image_is_refused(
    component: JSON, engine_config: JSON | None, message: str
) -> None:
    assert refusal(component, engine_config) == message


@pytest.mark.parametrize("component", COMPONENTS)
def test_the_refusal_names_the_component(component: str) -> None:
    assert refusal({"minReplicas": -1}, name=component) == (
        f"component {component}: minReplicas must be a whole number >= 0, not -1"
    )
    assert refusal({}, engine_config=None, name=component) == (
        f"component {component}: no runner: set {component}.runner "
        "(or the runtime's engineConfig.runner)"
    )


@pytest.mark.parametrize(
    ("component", "message"),
    [
        pytest.param(
            {"minReplicas": -1, "maxReplicas": -2, "worker": {"size": -3}},
            "component engine: minReplicas must be a whole number >= 0, not -1",
            id="min-first",
        ),
        pytest.param(
            {"maxReplicas": -2, "worker": {"size": -3}},
            "component engine: maxReplicas must be a whole number >= 0, not -2",
            id="then-max",
        ),
        pytest.param(
            {"minReplicas": 3, "maxReplicas": 2, "worker": {"size": -3}},
            "component engine: maxReplicas 2 is less than minReplicas 3",
            id="then-their-order",
        ),
        pytest.param(
            {"worker": {"size": -3, "runner": {"args": []}}},
            "component engine: worker.size must be a whole number >= 0, not -3",
            id="then-worker-size",
        ),
        pytest.param(
            {"runner": {"image": ""}, "worker": {"runner": {"args": []}}},
            "component engine: runner has no image (set it here or in the runtime)",
            id="then-runner-before-worker-runner",
        ),
    ],
)
def test_the_first_problem_in_check_order_is_reported(component: JSON, message: str) -> None:
    assert refusal(component, engine_config=None) == message


def test_spec_error_is_a_value_error() -> None:
    assert issubclass(SpecError, ValueError)


def test_max_replicas_equal_to_min_or_unset_is_accepted() -> None:
    for bounds in ({"minReplicas": 2, "maxReplicas": 2}, {"minReplicas": 2}, {"maxReplicas": 9}):
        assert validate_component("engine", {"runner": {"image": IMAGE}, **bounds}) is None


def test_validation_reads_the_merged_component_so_the_runtime_can_fix_it() -> None:
    """The refusal is about the merged component: the runtime's image satisfies it."""
    component = {"runner": {"resources": RESOURCES}}
    assert refusal(component, engine_config=None) == (
        "component engine: runner has no image (set it here or in the runtime)"
    )
    assert container(runners(project(component))["default"])["image"] == IMAGE


# -- merging -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "override", "merged"),
    [
        ({"a": 1}, {"b": 2}, {"a": 1, "b": 2}),
        ({"a": 1}, {"a": 2}, {"a": 2}),
        ({"a": {"x": 1, "y": 2}}, {"a": {"y": 3}}, {"a": {"x": 1, "y": 3}}),
        ({"a": [1, 2, 3]}, {"a": [4]}, {"a": [4]}),
        ({"a": {"x": 1}}, {"a": None}, {"a": None}),
        ({"a": {"x": 1}}, {"a": "s"}, {"a": "s"}),
        ({"a": "s"}, {"a": {"x": 1}}, {"a": {"x": 1}}),
        ({"a": 1}, {}, {"a": 1}),
        ({}, {"a": 1}, {"a": 1}),
        ({"a": 1}, [1], [1]),
        ([1], {"a": 1}, {"a": 1}),
        (None, {"a": 1}, {"a": 1}),
        ({"a": 1}, None, None),
        (1, 2, 2),
    ],
)
def test_deep_merge_merges_maps_and_replaces_everything_else(
    base: Any, override: Any, merged: Any
) -> None:
    assert deep_merge(base, override) == merged


def test_merge_component_puts_the_runtime_under_the_component() -> None:
    runtime = {
        "runner": {"image": IMAGE, "args": ["a"]},
        "annotations": {"x": "1"},
        "tolerations": [{"key": "r"}],
    }
    component = {"runner": {"args": ["b"]}, "annotations": {"y": "2"}, "tolerations": []}
    assert merge_component(runtime, component) == {
        "runner": {"image": IMAGE, "args": ["b"]},
        "annotations": {"x": "1", "y": "2"},
        "tolerations": [],
    }
    assert merge_component(None, component) == component


def test_the_merge_shares_nothing_with_its_inputs() -> None:
    runtime = copy.deepcopy(ENGINE_CONFIG)
    component = engine(annotations={OPT_IN: "true"})
    merged = merge_component(runtime, component)
    merged["runner"]["args"].append("--more")
    merged["runner"]["resources"]["limits"]["google.com/tpu"] = 8
    merged["annotations"][OPT_IN] = "false"
    merged["tolerations"][0]["key"] = "changed"
    assert runtime == ENGINE_CONFIG
    assert component == engine(annotations={OPT_IN: "true"})


def test_the_replica_spec_shares_nothing_mutable_with_the_merged_component() -> None:
    component = engine(
        annotations={OPT_IN: "true"},
        labels={"team": "ml"},
        lifecycle={"instanceReadyTimeout": "10m"},
        worker={"size": 1, "nodeSelector": {"role": "w"}},
    )
    merged = merge_component(ENGINE_CONFIG, component)
    before = copy.deepcopy(merged)
    out = replica_spec(isvc(engine=component), "engine", merged)
    for runner in out.spec["runners"]:
        template = runner["template"]
        template["metadata"]["annotations"][OPT_IN] = "false"
        template["metadata"]["labels"]["team"] = "other"
        template["spec"]["nodeSelector"]["extra"] = "1"
        template["spec"]["tolerations"][0]["key"] = "changed"
        template["spec"]["containers"][0]["args"].append("--more")
        template["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"] = 8
    out.spec["lifecycle"]["instanceReadyTimeout"] = "1m"
    assert merged == before


# -- properties ----------------------------------------------------------------------------------

keys = st.sampled_from(["a", "b", "x", OPT_IN, "cloud.google.com/gke-tpu-topology"])
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 5),
    st.floats(-2, 5, allow_nan=False),
    st.text("ab1", max_size=3),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text("abxy", max_size=2), inner, max_size=3)
    ),
    max_leaves=8,
)
string_maps = st.one_of(st.none(), st.dictionaries(keys, st.sampled_from(["true", "false", "1"])))
counts = st.one_of(st.none(), st.integers(-2, 6), st.sampled_from([True, 1.0, "2"]))
images = st.one_of(st.none(), st.sampled_from(["", IMAGE, "lead:v1"]))


def maybe(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[JSON]:
    """Maps with any subset of ``fields``."""
    return st.fixed_dictionaries({}, optional=fields)


runner_maps = st.one_of(
    st.none(),
    maybe(
        image=images,
        name=st.sampled_from(["ome-container", "engine"]),
        args=st.lists(st.text("-ab", max_size=3), max_size=3),
        resources=st.one_of(st.none(), st.dictionaries(keys, json_values, max_size=2)),
        env=json_values,
    ),
)
toleration_lists = st.one_of(
    st.none(), st.lists(st.fixed_dictionaries({"key": keys, "operator": st.just("Exists")}))
)
pod_fields: dict[str, st.SearchStrategy[Any]] = {
    "nodeSelector": string_maps,
    "tolerations": toleration_lists,
    "runner": runner_maps,
}
# Shaped like the CRDs' schemas (a map where a map goes), with arbitrary values at the leaves.
components = maybe(
    minReplicas=counts,
    maxReplicas=counts,
    annotations=string_maps,
    labels=string_maps,
    lifecycle=st.one_of(st.none(), json_values),
    leader=st.one_of(st.none(), maybe(**pod_fields)),
    worker=st.one_of(st.none(), maybe(size=counts, **pod_fields)),
    **pod_fields,
)
engine_configs = st.one_of(st.none(), components)
component_names = st.sampled_from(COMPONENTS)
service_names = st.text("abc-.0", min_size=1, max_size=20)


def outcome(service: JSON, name: str, engine_config: JSON | None, component: JSON) -> Any:
    try:
        return replica_spec(service, name, merge_component(engine_config, component))
    except SpecError as e:
        return f"SpecError: {e}"


@settings(max_examples=250, deadline=None)
@given(component_names, engine_configs, components)
def test_the_projection_refuses_with_spec_error_or_projects_never_crashing(
    name: str, engine_config: JSON | None, component: JSON
) -> None:
    result = outcome(isvc(engine=component), name, engine_config, component)
    if isinstance(result, str):
        assert result.startswith(f"SpecError: component {name}: ")
    else:
        assert isinstance(result, ReplicaSpec)
        assert result.spec["component"] == name
        assert [r["name"] for r in result.spec["runners"]] in (["default"], ["leader", "worker"])


@settings(max_examples=150, deadline=None)
@given(service_names, component_names, engine_configs, components)
def test_the_projection_is_deterministic_and_leaves_its_inputs_alone(
    service_name: str, name: str, engine_config: JSON | None, component: JSON
) -> None:
    service = isvc(service_name, **{name: component})
    before = copy.deepcopy((service, engine_config, component))
    first = outcome(service, name, engine_config, component)
    assert (service, engine_config, component) == before
    assert outcome(service, name, engine_config, component) == first
    assert outcome(copy.deepcopy(service), name, copy.deepcopy(engine_config), component) == first
    if isinstance(first, ReplicaSpec):
        assert first.name == f"{service_name}-{name}"
        assert first.labels == {"ome.io/inferenceservice": service_name, "component": name}


@settings(max_examples=150, deadline=None)
@given(components, st.integers(-2, 8), st.integers(-2, 8))
def test_projected_replicas_lie_within_min_and_max(component: JSON, low: int, high: int) -> None:
    # Left out: maxReplicas 0 under a positive minReplicas, which validation accepts as "no
    # upper bound" while clamp_replicas pins minReplicas 0 / maxReplicas 0 to 0; unsettled.
    assume(not (high == 0 and low > 0))
    component = {**component, "minReplicas": low, "maxReplicas": high}
    component["runner"] = {"image": IMAGE}
    result = outcome(isvc(engine=component), "engine", None, component)
    if 0 <= low <= high:
        assert isinstance(result, ReplicaSpec) or "Replicas" not in result
    if isinstance(result, ReplicaSpec):
        assert low <= result.spec["replicas"] <= high
        assert result.spec["replicas"] == low


def deployable(component: JSON) -> JSON:
    """``component`` with valid counts and an image in every runner it has."""
    out = {k: v for k, v in component.items() if k not in ("minReplicas", "maxReplicas")}
    out["runner"] = {**(out.get("runner") or {}), "image": IMAGE}
    for part in ("leader", "worker"):
        if isinstance(out.get(part), dict):
            out[part] = dict(out[part])
            if out[part].get("runner") is not None:
                out[part]["runner"] = {**out[part]["runner"], "image": IMAGE}
            if part == "worker":
                out[part]["size"] = 2
    return out


@settings(max_examples=100, deadline=None)
@given(components.map(deployable), st.one_of(st.none(), components.map(deployable)))
def test_the_components_annotations_reach_every_runners_template(
    component: JSON, engine_config: JSON | None
) -> None:
    component = {**component, "annotations": {OPT_IN: "true"}}
    result = outcome(isvc(engine=component), "engine", engine_config, component)
    assert isinstance(result, ReplicaSpec), result
    for runner in result.spec["runners"]:
        assert runner["template"]["metadata"]["annotations"][OPT_IN] == "true"


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.none(), st.integers(-5, 20), st.sampled_from(["3", 2.0, True])), st.data())
def test_clamped_replicas_lie_within_min_and_max(current: object, data: st.DataObject) -> None:
    low = data.draw(st.integers(0, 8))
    high = data.draw(st.integers(max(low, 1), 12))
    value = clamp_replicas(current, {"minReplicas": low, "maxReplicas": high})
    assert low <= value <= high
    if isinstance(current, int) and not isinstance(current, bool) and low <= current <= high:
        assert value == current, "a count inside the bounds is kept"


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(keys, json_values, max_size=4), st.dictionaries(keys, json_values, max_size=4)
)
def test_deep_merge_keeps_every_key_and_the_overrides_leaves(base: JSON, override: JSON) -> None:
    merged = deep_merge(base, override)
    assert set(merged) == set(base) | set(override)
    for key, value in override.items():
        if not (isinstance(value, dict) and isinstance(base.get(key), dict)):
            assert merged[key] == value
    for key in set(base) - set(override):
        assert merged[key] == base[key]
    assert deep_merge(base, {}) == base
    assert deep_merge({}, override) == override


durations = st.one_of(
    st.sampled_from(["30s", "5m", "10m", "1h30m", "0", "soon", "10", ""]),
    st.text("0123456789.hms", max_size=5),
)
lifecycles = st.one_of(
    st.none(),
    maybe(instanceReadyTimeout=durations, teardownTimeout=durations),
)


@settings(max_examples=150, deadline=None)
@given(component_names, lifecycles, lifecycles)
def test_each_lifecycle_field_is_the_components_else_the_runtimes(
    name: str, runtime: JSON | None, component: JSON | None
) -> None:
    engine_config = {**ENGINE_CONFIG, **({} if runtime is None else {"lifecycle": runtime})}
    comp = engine(**({} if component is None else {"lifecycle": component}))
    out = project(comp, engine_config=engine_config, name=name)
    if runtime is None and component is None:
        assert "lifecycle" not in out.spec
        return
    lifecycle = out.spec["lifecycle"]
    for field in ("instanceReadyTimeout", "teardownTimeout"):
        if component is not None and field in component:
            assert lifecycle[field] == component[field]
        elif runtime is not None and field in runtime:
            assert lifecycle[field] == runtime[field]
        else:
            assert field not in lifecycle


# -- images and types are checked on the runners as built -------------------------------------


def test_workers_without_an_image_are_refused() -> None:
    assert refusal(
        {"leader": {"runner": {"image": "i"}}, "worker": {"size": 2}}, engine_config=None
    ) == ("component engine: worker.runner has no image (set it here or in the runtime)")


def test_a_leader_override_keeps_the_components_runner_image() -> None:
    out = project(
        {"runner": {"image": "i"}, "leader": {"runner": {"args": ["a"]}}, "worker": {"size": 1}},
        engine_config=None,
    )
    assert container(runners(out)["leader"])["image"] == "i"
    assert container(runners(out)["leader"])["args"] == ["a"]
    assert container(runners(out)["worker"])["image"] == "i"


def test_runtime_images_for_leader_and_worker_alone_are_enough() -> None:
    runtime = {
        "leader": {"runner": {"image": "lead:v1"}},
        "worker": {"size": 1, "runner": {"image": "work:v1"}},
    }
    out = project({"runner": {"resources": {"limits": {"google.com/tpu": 4}}}}, runtime)
    assert container(runners(out)["leader"])["image"] == "lead:v1"
    assert container(runners(out)["worker"])["image"] == "work:v1"


@pytest.mark.parametrize(
    ("component", "message"),
    [
        ({"runner": "x"}, "component engine: runner must be an object"),
        ({"worker": [1]}, "component engine: worker must be an object"),
        ({"leader": "x"}, "component engine: leader must be an object"),
        ({"leader": {"runner": 3}}, "component engine: leader.runner must be an object"),
        ({"labels": [1]}, "component engine: labels must be an object"),
        ({"nodeSelector": [1]}, "component engine: nodeSelector must be an object"),
        ({"tolerations": {"a": 1}}, "component engine: tolerations must be a list"),
    ],
)
def test_badly_typed_parts_are_refused_not_crashed_on(component: JSON, message: str) -> None:
    assert refusal(component, engine_config=None) == message


def test_a_non_object_component_is_refused() -> None:
    with pytest.raises(SpecError, match="component engine: must be an object, not list"):
        validate_component("engine", [])  # type: ignore[arg-type]


@pytest.mark.parametrize(("low", "current"), [(0, 5), (3, 9)])
def test_a_max_of_zero_is_no_upper_bound(low: int, current: int) -> None:
    assert clamp_replicas(current, {"minReplicas": low, "maxReplicas": 0}) == current


def test_more_workers_than_an_instance_may_have_is_refused_not_planned() -> None:
    from ome.api.v1beta1 import MAX_WORKERS

    assert refusal({"leader": {}, "worker": {"size": MAX_WORKERS + 1}}) == (
        f"component engine: worker.size {MAX_WORKERS + 1} is more than {MAX_WORKERS}"
    )
    assert len(runners(project({"leader": {}, "worker": {"size": MAX_WORKERS}}))) == 2

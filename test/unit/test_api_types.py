"""The CRDs in config/crd/ are exactly what ``ome.api.crdgen`` builds from ``ome.api.v1beta1``,
and what it builds is a structural schema that describes every field."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from ome.api import crdgen, v1beta1
from ome.api.v1beta1 import Field
from ome_sim.apiserver.schema import validate_crd_schema

CONFIG = Path(__file__).resolve().parents[2] / "config" / "crd"

JSON = dict[str, Any]


def _schema(kind: v1beta1.Kind) -> JSON:
    schema: JSON = crdgen.crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _properties(node: JSON, path: str = "") -> Iterator[tuple[str, JSON]]:
    """Every property below ``node`` (through items and additionalProperties), with its path."""
    for name, sub in (node.get("properties") or {}).items():
        child = f"{path}.{name}" if path else name
        yield child, sub
        yield from _properties(sub, child)
    if isinstance(node.get("items"), dict):
        yield from _properties(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _properties(node["additionalProperties"], f"{path}.*")


def _at(schema: JSON, path: str) -> JSON:
    node = schema
    for part in path.split("."):
        if part.endswith("[]"):
            node = node["properties"][part[:-2]]["items"]
        else:
            node = node["properties"][part]
    return node


# -- one source of truth ------------------------------------------------------------------


def test_config_crd_holds_exactly_what_the_types_generate() -> None:
    assert crdgen.stale(CONFIG) == [], "run: python -m ome.api.crdgen config/crd"
    for name, text in crdgen.files().items():
        assert (CONFIG / name).read_text() == text, name
    assert sorted(p.name for p in CONFIG.glob("ome.io_*.yaml")) == sorted(
        crdgen.file_name(kind) for kind in v1beta1.KINDS
    )


def test_a_type_change_without_regenerating_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        v1beta1.InferenceReplicaSpec.__annotations__,
        "paused",
        Annotated[bool, Field("Whether the replica is paused.")],
    )
    assert crdgen.stale(CONFIG) == ["ome.io_inferencereplicas.yaml"]


def test_check_exits_1_listing_stale_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert crdgen.main([str(tmp_path)]) == 0
    assert crdgen.main(["--check", str(tmp_path)]) == 0
    (tmp_path / "ome.io_basemodels.yaml").write_text("edited by hand\n")
    (tmp_path / "ome.io_widgets.yaml").write_text("left over\n")
    (tmp_path / "ome.io_inferencereplicas.yaml").unlink()
    capsys.readouterr()
    assert crdgen.main(["--check", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    for name in ("ome.io_basemodels.yaml", "ome.io_widgets.yaml", "ome.io_inferencereplicas.yaml"):
        assert f"stale: {tmp_path / name}" in err
    assert "ome.io_servingruntimes.yaml" not in err


def test_generating_into_a_copy_changes_nothing(tmp_path: Path) -> None:
    copy = tmp_path / "crd"
    shutil.copytree(CONFIG, copy)
    assert crdgen.write(copy) == []


def test_kustomization_lists_every_crd_and_does_not_break_kubectl_apply_f() -> None:
    import yaml

    kustomization = yaml.safe_load(crdgen.kustomization())
    assert kustomization["resources"] == [crdgen.file_name(kind) for kind in v1beta1.KINDS]
    # kubectl apply -f DIR reads *.yaml, *.yml and *.json only.
    assert not crdgen.KUSTOMIZATION.endswith((".yaml", ".yml", ".json"))


# -- schemas ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", v1beta1.KINDS, ids=lambda k: k.kind)
def test_every_property_has_a_description(kind: v1beta1.Kind) -> None:
    schema = _schema(kind)
    assert schema.get("description")
    missing = [path for path, sub in _properties(schema) if not sub.get("description")]
    # metadata is ObjectMeta: kube-apiserver refuses a CRD that says anything of it but
    # ``type: object``, a description included.
    assert missing == ["metadata"]
    assert schema["properties"]["metadata"] == {"type": "object"}


@pytest.mark.parametrize("kind", v1beta1.KINDS, ids=lambda k: k.kind)
def test_schema_is_structural(kind: v1beta1.Kind) -> None:
    errors = validate_crd_schema(_schema(kind), prefix="spec.versions[0].schema.openAPIV3Schema")
    assert [str(e) for e in errors] == []


def test_a_property_without_description_is_refused() -> None:
    class Bare(TypedDict, total=False):
        name: str

    with pytest.raises(crdgen.SchemaError, match="name: every property needs"):
        crdgen.schema_of(Bare)


def test_unions_other_than_int_or_string_are_refused() -> None:
    with pytest.raises(crdgen.SchemaError):
        crdgen.schema_of(Annotated[int | bool, Field("x")])


def test_crd_names_scope_and_subresources() -> None:
    expected = {
        "BaseModel": ("basemodels", "Namespaced", ["bm"]),
        "ClusterBaseModel": ("clusterbasemodels", "Cluster", ["cbm"]),
        "ServingRuntime": ("servingruntimes", "Namespaced", ["sr"]),
        "ClusterServingRuntime": ("clusterservingruntimes", "Cluster", ["csr"]),
        "InferenceService": ("inferenceservices", "Namespaced", ["isvc"]),
        "InferenceReplica": ("inferencereplicas", "Namespaced", ["irep"]),
    }
    for kind in v1beta1.KINDS:
        crd = crdgen.crd(kind)
        plural, scope, short = expected[kind.kind]
        assert crd["metadata"]["name"] == f"{plural}.ome.io"
        assert crd["spec"]["group"] == "ome.io"
        assert (crd["spec"]["scope"], crd["spec"]["names"]["shortNames"]) == (scope, short)
        (version,) = crd["spec"]["versions"]
        assert version["name"] == "v1beta1" and version["served"] and version["storage"]
        assert version["subresources"]["status"] == {}
        assert kind.resource.namespaced == (scope == "Namespaced")
    ir = crdgen.crd(v1beta1.INFERENCE_REPLICA)["spec"]["versions"][0]
    assert ir["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }


def test_printer_columns() -> None:
    def columns(kind: v1beta1.Kind) -> list[tuple[str, str, str, int]]:
        version = crdgen.crd(kind)["spec"]["versions"][0]
        return [
            (c["name"], c["type"], c["jsonPath"], c.get("priority", 0))
            for c in version["additionalPrinterColumns"]
        ]

    age = ".metadata.creationTimestamp"
    assert columns(v1beta1.INFERENCE_REPLICA) == [
        ("COMPONENT", "string", ".spec.component", 0),
        ("DESIRED", "integer", ".spec.replicas", 0),
        ("CURRENT", "integer", ".status.replicas", 0),
        ("READY", "integer", ".status.readyReplicas", 0),
        ("AVAILABLE", "integer", ".status.availableReplicas", 0),
        ("AGE", "date", age, 0),
    ]
    ready = '.status.conditions[?(@.type=="Ready")]'
    assert columns(v1beta1.INFERENCE_SERVICE) == [
        ("Ready", "string", f"{ready}.status", 0),
        ("Reason", "string", f"{ready}.reason", 1),
        ("Age", "date", age, 0),
    ]
    for kind in (v1beta1.BASE_MODEL, v1beta1.CLUSTER_BASE_MODEL):
        assert columns(kind) == [
            ("Format", "string", ".spec.modelFormat.name", 0),
            ("Age", "date", age, 0),
        ]
    for kind in (v1beta1.SERVING_RUNTIME, v1beta1.CLUSTER_SERVING_RUNTIME):
        assert columns(kind) == [
            ("Disabled", "boolean", ".spec.disabled", 0),
            ("Age", "date", age, 0),
        ]


def test_inference_service_schema() -> None:
    schema = _schema(v1beta1.INFERENCE_SERVICE)
    assert _at(schema, "metadata") == {"type": "object"}  # as kube-apiserver requires
    mode = _at(schema, "spec.deploymentMode")
    assert mode["type"] == "string" and "enum" not in mode
    assert _at(schema, "spec.model.kind")["enum"] == ["BaseModel", "ClusterBaseModel"]
    assert _at(schema, "spec.runtime.kind")["enum"] == ["ServingRuntime", "ClusterServingRuntime"]
    for component in ("engine", "decoder", "router"):
        spec = _at(schema, f"spec.{component}")
        assert set(spec["properties"]) == {
            "minReplicas",
            "maxReplicas",
            "annotations",
            "labels",
            "nodeSelector",
            "tolerations",
            "runner",
            "leader",
            "worker",
            "lifecycle",
        }
        for name in ("minReplicas", "maxReplicas"):
            assert spec["properties"][name]["type"] == "integer"
            assert "minimum" not in spec["properties"][name]
        worker_size = _at(schema, f"spec.{component}.worker.size")
        assert worker_size["type"] == "integer" and "minimum" not in worker_size
        assert set(_at(schema, f"spec.{component}.leader")["properties"]) == {
            "runner",
            "nodeSelector",
            "tolerations",
        }
    assert set(_at(schema, "spec.engine.tolerations")["items"]["properties"]) == {
        "key",
        "operator",
        "value",
        "effect",
        "tolerationSeconds",
    }
    assert _at(schema, "spec.engine.nodeSelector")["additionalProperties"] == {"type": "string"}
    condition = _at(schema, "status.conditions")["items"]
    assert condition["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert condition["properties"]["lastTransitionTime"]["format"] == "date-time"
    counts = _at(schema, "status.components")["additionalProperties"]
    assert set(counts["properties"]) == {"replicas", "readyReplicas"}


LIFECYCLE_FIELDS = {
    "instanceReadyTimeout": (
        "How long an Instance's pods may take to be Ready once created (while not held), "
        "as a Go duration, e.g. 10m; unset or unreadable, there is no deadline."
    ),
    "teardownTimeout": (
        "How long deletion waits for the pods and Slices to go before it finishes anyway, "
        "as a Go duration, e.g. 10m; unset or unreadable, 10m."
    ),
}


def _lifecycles() -> dict[str, JSON]:
    """Every ``lifecycle`` a user can write, by kind and path."""
    isvc = _schema(v1beta1.INFERENCE_SERVICE)
    out = {f"isvc.spec.{c}.lifecycle": _at(isvc, f"spec.{c}.lifecycle") for c in v1beta1.COMPONENTS}
    for kind in (v1beta1.SERVING_RUNTIME, v1beta1.CLUSTER_SERVING_RUNTIME):
        out[f"{kind.singular}.spec.engineConfig.lifecycle"] = _at(
            _schema(kind), "spec.engineConfig.lifecycle"
        )
    return out


def test_components_and_runtimes_have_a_lifecycle_of_go_durations_with_descriptions() -> None:
    lifecycles = _lifecycles()
    assert len(lifecycles) == 5
    for path, lifecycle in lifecycles.items():
        assert lifecycle["type"] == "object", path
        assert "copied to the InferenceReplica's spec.lifecycle" in lifecycle["description"], path
        assert "wins over the runtime's" in lifecycle["description"], path
        assert lifecycle["properties"] == {
            name: {"description": text, "type": "string"} for name, text in LIFECYCLE_FIELDS.items()
        }, path
        assert "x-kubernetes-preserve-unknown-fields" not in lifecycle, path


def test_the_replicas_lifecycle_has_the_same_fields_as_the_ones_projected_onto_it() -> None:
    replica = _at(_schema(v1beta1.INFERENCE_REPLICA), "spec.lifecycle")
    assert "keeps this one when it sets none" in replica["description"]
    for path, lifecycle in _lifecycles().items():
        assert lifecycle["properties"] == replica["properties"], path


def test_runner_preserves_unknown_container_fields() -> None:
    isvc = _schema(v1beta1.INFERENCE_SERVICE)
    runtime = _schema(v1beta1.SERVING_RUNTIME)
    runners = [
        _at(isvc, "spec.engine.runner"),
        _at(isvc, "spec.engine.leader.runner"),
        _at(isvc, "spec.engine.worker.runner"),
        _at(runtime, "spec.engineConfig.runner"),
        _at(runtime, "spec.engineConfig.leader.runner"),
        _at(runtime, "spec.engineConfig.worker.runner"),
    ]
    for runner in runners:
        assert runner["x-kubernetes-preserve-unknown-fields"] is True
        assert set(runner["properties"]) == {
            "name",
            "image",
            "command",
            "args",
            "env",
            "ports",
            "resources",
            "volumeMounts",
        }
        quantity = runner["properties"]["resources"]["properties"]["requests"]
        assert quantity["additionalProperties"] == {"x-kubernetes-int-or-string": True}
        for name in ("env", "ports", "volumeMounts"):
            items = runner["properties"][name]["items"]
            assert items == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert _at(runtime, "spec.engineConfig.worker.size")["type"] == "integer"


def test_base_model_spec_stays_open() -> None:
    for kind in (v1beta1.BASE_MODEL, v1beta1.CLUSTER_BASE_MODEL):
        schema = _schema(kind)
        assert _at(schema, "spec")["x-kubernetes-preserve-unknown-fields"] is True
        assert set(_at(schema, "spec.modelFormat")["properties"]) == {"name", "version"}
        assert set(_at(schema, "spec.storage")["properties"]) == {"storageUri", "path"}
        assert _at(schema, "status.state")["type"] == "string"


def test_inference_replica_schema() -> None:
    schema = _schema(v1beta1.INFERENCE_REPLICA)
    spec = _at(schema, "spec")
    assert spec["required"] == ["runners"]
    assert _at(schema, "spec.replicas")["minimum"] == 0
    runners = _at(schema, "spec.runners")
    assert runners["minItems"] == 1
    runner = runners["items"]
    assert runner["properties"]["name"]["enum"] == ["default", "leader", "worker"]
    assert runner["properties"]["size"]["minimum"] == 0
    template = runner["properties"]["template"]
    assert template["x-kubernetes-preserve-unknown-fields"] is True
    # Not an embedded resource: false is the default, and kube-apiserver stores no zero value.
    assert "x-kubernetes-embedded-resource" not in template
    assert set(template["properties"]["metadata"]["properties"]) == {"labels", "annotations"}
    assert template["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"] is True
    assert set(_at(schema, "spec.lifecycle")["properties"]) == {
        "instanceReadyTimeout",
        "teardownTimeout",
    }
    status = _at(schema, "status")
    assert set(status["properties"]) == {
        "replicas",
        "readyReplicas",
        "availableReplicas",
        "updatedReplicas",
        "observedGeneration",
        "selector",
        "currentRevision",
        "updateRevision",
        "conditions",
        "instanceStatuses",
    }


def test_instance_status_matches_behaviour_m1() -> None:
    row = _at(_schema(v1beta1.INFERENCE_REPLICA), "status.instanceStatuses")["items"]
    props = row["properties"]
    assert set(props) == {
        "index",
        "incarnation",
        "phase",
        "runningRevision",
        "targetRevision",
        "podCount",
        "servingPodCount",
        "availablePodCount",
        "readySince",
        "activeOrdinal",
        "operation",
        "lastFailure",
    }
    assert props["phase"]["type"] == "string" and "enum" not in props["phase"]
    assert props["readySince"]["nullable"] is True
    assert props["readySince"]["format"] == "date-time"
    operation = props["operation"]
    assert operation["nullable"] is True
    assert set(operation["properties"]) == {
        "id",
        "type",
        "step",
        "startedAt",
        "lastProgressAt",
        "deadline",
        "retryCount",
        "targetRevision",
        "reason",
        "waiting",
        "capacityRefusedAt",
        "surgeIndex",
    }
    op = operation["properties"]
    assert op["type"]["enum"] == ["Create", "Update", "Restart", "Migrate", "Delete"]
    assert op["deadline"] == {
        "description": op["deadline"]["description"],
        "type": "string",
        "format": "date-time",
        "nullable": True,
    }
    for name in ("waiting", "capacityRefusedAt", "surgeIndex"):
        assert op[name]["nullable"] is True
    assert op["surgeIndex"]["type"] == "integer"
    failure = props["lastFailure"]
    assert failure["nullable"] is True
    assert set(failure["properties"]) == {
        "podName",
        "containerName",
        "reason",
        "exitCode",
        "message",
        "time",
    }
    assert failure["properties"]["exitCode"]["nullable"] is True


# -- names --------------------------------------------------------------------------------


def test_names() -> None:
    assert (v1beta1.GROUP, v1beta1.VERSION, v1beta1.API_VERSION) == (
        "ome.io",
        "v1beta1",
        "ome.io/v1beta1",
    )
    assert v1beta1.LABEL_INFERENCE_SERVICE == "ome.io/inferenceservice"
    assert v1beta1.LABEL_COMPONENT == "component"
    assert (v1beta1.LABEL_MANAGED_BY, v1beta1.MANAGED_BY_OMENATIVE) == (
        "ome.io/managed-by",
        "OMENative",
    )
    assert v1beta1.LABEL_INSTANCE_INDEX == "ome.io/instance-index"
    assert v1beta1.LABEL_RUNNER == "ome.io/runner"
    assert v1beta1.LABEL_REVISION_HASH == "ome.io/revision-hash"
    assert v1beta1.LABEL_POD_ORDINAL == "ome.io/pod-ordinal"
    assert v1beta1.LABEL_INCARNATION == "ome.io/incarnation"
    assert v1beta1.ANNOTATION_TPU_SLICE_PROVISIONING == "ome.io/tpu-slice-provisioning"
    assert v1beta1.FINALIZER_IR_TEARDOWN == "ome.io/ir-teardown"


def test_resources() -> None:
    assert v1beta1.INFERENCE_REPLICAS.path("ns", "x", "scale") == (
        "/apis/ome.io/v1beta1/namespaces/ns/inferencereplicas/x/scale"
    )
    assert v1beta1.CLUSTER_SERVING_RUNTIMES.path("ns", "x") == (
        "/apis/ome.io/v1beta1/clusterservingruntimes/x"
    )
    assert not v1beta1.CLUSTER_BASE_MODELS.namespaced
    assert (
        v1beta1.CONTROLLER_REVISIONS.path("ns") == "/apis/apps/v1/namespaces/ns/controllerrevisions"
    )
    resources = {kind.resource for kind in v1beta1.KINDS}
    assert resources == {
        v1beta1.BASE_MODELS,
        v1beta1.CLUSTER_BASE_MODELS,
        v1beta1.SERVING_RUNTIMES,
        v1beta1.CLUSTER_SERVING_RUNTIMES,
        v1beta1.INFERENCE_SERVICES,
        v1beta1.INFERENCE_REPLICAS,
    }

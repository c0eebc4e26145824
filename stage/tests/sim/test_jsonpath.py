"""Kubernetes JSONPath as CRD printer columns and ``kubectl -o jsonpath`` evaluate it."""

from __future__ import annotations

from typing import Any

import pytest

from ome_sim.apiserver.jsonpath import evaluate

OBJ: dict[str, Any] = {
    "metadata": {
        "name": "svc-a",
        "labels": {"app": "web", "kubernetes.io/hostname": "node-1"},
        "annotations": {"example.com/note": "hi"},
    },
    "spec": {
        "replicas": 3,
        "paused": False,
        "containers": [
            {"name": "main", "image": "img:1", "ports": [{"containerPort": 80}]},
            {"name": "sidecar", "image": "img:2", "ports": [{"containerPort": 9090}]},
            {"name": "init", "image": "img:3"},
        ],
        "empty": None,
    },
    "status": {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "ACTIVE", "priority": 2},
            {"type": "Degraded", "status": "False", "reason": "Fine", "priority": 5},
        ],
        "score": 0.75,
    },
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param(
            '.status.conditions[?(@.type=="Ready")].reason',
            ["ACTIVE"],
            id="condition reason by type (printer column idiom)",
        ),
        pytest.param("{.metadata.name}", ["svc-a"], id="braces"),
        pytest.param("$.metadata.name", ["svc-a"], id="dollar root"),
        pytest.param("metadata.name", ["svc-a"], id="bare first field"),
        pytest.param(".spec.replicas", [3], id="numbers keep their type"),
        pytest.param(".spec.paused", [False], id="false is a value, not missing"),
        pytest.param(".spec.empty", [None], id="null field is present"),
        pytest.param(".spec.containers[0].name", ["main"], id="index"),
        pytest.param(".spec.containers[-1].name", ["init"], id="negative index"),
        pytest.param(".spec.containers[*].name", ["main", "sidecar", "init"], id="star index"),
        pytest.param(".spec.containers[1:].name", ["sidecar", "init"], id="open slice"),
        pytest.param(".spec.containers[0:2].image", ["img:1", "img:2"], id="slice"),
        pytest.param(".spec.containers[::2].name", ["main", "init"], id="slice step"),
        pytest.param(".spec.containers[0,2].name", ["main", "init"], id="union"),
        pytest.param(".metadata.labels.*", ["web", "node-1"], id="wildcard over map"),
        pytest.param(".spec.containers.*.name", ["main", "sidecar", "init"], id="wildcard list"),
        pytest.param(
            ".metadata.labels['kubernetes.io/hostname']", ["node-1"], id="quoted key with dots"
        ),
        pytest.param('.metadata.annotations["example.com/note"]', ["hi"], id="double quoted key"),
        pytest.param(
            r".metadata.labels.kubernetes\.io/hostname", ["node-1"], id="escaped dots in key"
        ),
        pytest.param(".spec.containers[*].ports[*].containerPort", [80, 9090], id="nested star"),
        pytest.param("..containerPort", [80, 9090], id="recursive descent"),
        pytest.param(
            '.status.conditions[?(@.status!="True")].type', ["Degraded"], id="not equal filter"
        ),
        pytest.param(
            ".spec.containers[?(@.ports)].name", ["main", "sidecar"], id="existence filter"
        ),
        pytest.param(
            ".status.conditions[?(@.priority>3)].type", ["Degraded"], id="greater than number"
        ),
        pytest.param(
            ".status.conditions[?(@.priority<=2)].type", ["Ready"], id="less or equal number"
        ),
        pytest.param(
            ".status.conditions[?(@.priority >= 2)].type",
            ["Ready", "Degraded"],
            id="spaces around operator",
        ),
        pytest.param(
            ".status.conditions[?(@.type=='Ready')].status", ["True"], id="single quoted literal"
        ),
        pytest.param('.status.conditions[?(@.reason<"B")].type', ["Ready"], id="string ordering"),
        pytest.param(
            ".spec.containers[?(@.ports[0].containerPort==9090)].name",
            ["sidecar"],
            id="filter on nested index",
        ),
    ],
)
def test_evaluate_selects(path: str, expected: list[Any]) -> None:
    assert evaluate(path, OBJ) == expected


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(".status.missing", id="missing field"),
        pytest.param(".metadata.name.deeper", id="field of a string"),
        pytest.param(".spec.containers[7].name", id="index out of range"),
        pytest.param(".spec.containers[-9].name", id="negative index out of range"),
        pytest.param(".metadata[0]", id="index into a map"),
        pytest.param('.status.conditions[?(@.type=="Nope")].reason', id="filter without match"),
        pytest.param(".metadata[?(@.a)]", id="filter on a map"),
        pytest.param('.status.conditions[?(@.priority=="2")].type', id="number vs string"),
        pytest.param(".spec.containers[?(@.missing)].name", id="existence filter on missing"),
    ],
)
def test_evaluate_missing_data_is_an_empty_result(path: str) -> None:
    assert evaluate(path, OBJ) == []


def test_evaluate_on_empty_list_and_scalar_root() -> None:
    assert evaluate(".items[0]", {"items": []}) == []
    assert evaluate(".a", "text") == []
    assert evaluate(".", {"a": 1}) == [{"a": 1}]


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(".a[", id="unterminated index"),
        pytest.param(".a[x]", id="non numeric index"),
        pytest.param('.a[?(@.b=="x"]', id="unterminated filter"),
        pytest.param(".a[?(@.b=x)]", id="single equals operator"),
        pytest.param(".a[?(@.b==bogus)]", id="unquoted literal"),
        pytest.param("{.a", id="unclosed brace"),
        pytest.param(".a}", id="stray closing brace"),
        pytest.param(".a{.b}", id="unexpected brace inside"),
        pytest.param(".a..", id="dangling recursive descent"),
    ],
)
def test_malformed_path_raises_value_error(path: str) -> None:
    with pytest.raises(ValueError, match="JSONPath"):
        evaluate(path, OBJ)

"""Label and field selectors behave as ``kubectl get -l`` / ``--field-selector`` see them."""

from __future__ import annotations

from typing import Any

import pytest

from ome_sim.apiserver.errors import APIError
from ome_sim.apiserver.selectors import (
    check_field_selector,
    label_selector_from_dict,
    object_fields,
    parse_field_selector,
    parse_label_selector,
)

LABELS = {"app": "web", "tier": "frontend", "example.com/team": "ml", "count": "7"}


@pytest.mark.parametrize(
    ("selector", "labels", "selected"),
    [
        pytest.param("", LABELS, True, id="empty selector lists everything"),
        pytest.param("", None, True, id="empty selector lists unlabelled objects"),
        pytest.param("app=web", LABELS, True, id="equality selects matching label"),
        pytest.param("app==web", LABELS, True, id="double equals is equality"),
        pytest.param("app=db", LABELS, False, id="equality rejects other value"),
        pytest.param("app!=db", LABELS, True, id="inequality selects other value"),
        pytest.param("app!=web", LABELS, False, id="inequality rejects same value"),
        pytest.param("missing!=x", LABELS, True, id="inequality selects objects lacking key"),
        pytest.param("missing=x", LABELS, False, id="equality rejects objects lacking key"),
        pytest.param("app in (db,web)", LABELS, True, id="in selects a listed value"),
        pytest.param("app in (db, cache)", LABELS, False, id="in rejects unlisted value"),
        pytest.param("missing in (x)", LABELS, False, id="in rejects objects lacking key"),
        pytest.param("app notin (db)", LABELS, True, id="notin selects unlisted value"),
        pytest.param("app notin (web)", LABELS, False, id="notin rejects listed value"),
        pytest.param("missing notin (x)", LABELS, True, id="notin selects objects lacking key"),
        pytest.param("app", LABELS, True, id="bare key selects objects having it"),
        pytest.param("missing", LABELS, False, id="bare key rejects objects lacking it"),
        pytest.param("!missing", LABELS, True, id="bang selects objects lacking key"),
        pytest.param("!app", LABELS, False, id="bang rejects objects having key"),
        pytest.param("example.com/team=ml", LABELS, True, id="prefixed key"),
        pytest.param("app=web,tier=frontend", LABELS, True, id="comma is and: all hold"),
        pytest.param("app=web,tier=backend", LABELS, False, id="comma is and: one fails"),
        pytest.param("  app = web ,  tier in ( frontend )  ", LABELS, True, id="whitespace"),
        pytest.param("app=", {"app": ""}, True, id="empty value selects empty label"),
        pytest.param("app=", LABELS, False, id="empty value rejects non-empty label"),
        pytest.param("count>5", LABELS, True, id="greater than compares integers"),
        pytest.param("count<5", LABELS, False, id="less than compares integers"),
        pytest.param("app>5", LABELS, False, id="greater than rejects non-integer label"),
        pytest.param("in in (in)", {"in": "in"}, True, id="keywords usable as key and value"),
    ],
)
def test_label_selector_matching(
    selector: str, labels: dict[str, str] | None, selected: bool
) -> None:
    assert parse_label_selector(selector).matches(labels) is selected


@pytest.mark.parametrize(
    ("selector", "canonical"),
    [
        pytest.param("tier=frontend,app=web", "app=web,tier=frontend", id="sorted by key"),
        pytest.param("x in (b, a, b)", "x in (a,b)", id="values sorted and deduplicated"),
        pytest.param("x notin (a)", "x notin (a)", id="notin"),
        pytest.param(" !x , y ", "!x,y", id="existence"),
        pytest.param("a==b,c!=d", "a==b,c!=d", id="double equals kept"),
        pytest.param("n>3", "n>3", id="greater than"),
        pytest.param("", "", id="everything"),
    ],
)
def test_label_selector_renders_canonical_text(selector: str, canonical: str) -> None:
    assert str(parse_label_selector(selector)) == canonical


def test_empty_label_selector_is_empty() -> None:
    assert parse_label_selector("").empty
    assert parse_label_selector("   ").empty
    assert not parse_label_selector("a").empty


@pytest.mark.parametrize(
    ("selector", "fragment"),
    [
        pytest.param("a b", "unable to parse requirement: found 'b', expected: in, notin", id="sp"),
        pytest.param("a,", "expected: identifier after ','", id="trailing comma"),
        pytest.param(",a", "found ',', expected: !, identifier", id="leading comma"),
        pytest.param("a=b=c", "found '=', expected: ',' or 'end of string'", id="double op"),
        pytest.param("!a=b", "found '=', expected: ',' or 'end of string'", id="bang with value"),
        pytest.param("!", "unable to parse requirement: found '', expected: identifier", id="!"),
        pytest.param("a in (x", "expected: ',' or ')'", id="unclosed parenthesis"),
        pytest.param("a in x", "expected: '('", id="in without parenthesis"),
        pytest.param("-a=b", 'key: Invalid value: "-a"', id="key starting with dash"),
        pytest.param("a/b/c=d", "a valid label key must consist", id="two slashes in key"),
        pytest.param("Bad_Prefix/a=b", "prefix part a lowercase RFC 1123", id="bad prefix"),
        pytest.param("a=b@c", 'Invalid value: "b@c": a valid label must', id="bad value"),
        pytest.param("a=" + "x" * 64, "must be no more than 63 bytes", id="long value"),
        pytest.param("n>x", "the value must be an integer", id="gt non integer"),
    ],
)
def test_invalid_label_selector_is_a_400(selector: str, fragment: str) -> None:
    with pytest.raises(APIError) as info:
        parse_label_selector(selector)
    assert info.value.code == 400
    assert info.value.reason == "BadRequest"
    assert fragment in info.value.message
    assert info.value.message.startswith(
        ("unable to parse requirement:", f'couldn\'t parse the selector string "{selector}":')
    )


@pytest.mark.parametrize(
    ("selector", "labels", "selected"),
    [
        pytest.param(None, {}, True, id="unset selector matches everything"),
        pytest.param({}, {"a": "b"}, True, id="empty selector matches everything"),
        pytest.param({"matchLabels": {"app": "web"}}, {"app": "web"}, True, id="matchLabels"),
        pytest.param({"matchLabels": {"app": "web"}}, {"app": "db"}, False, id="matchLabels miss"),
        pytest.param(
            {"matchExpressions": [{"key": "env", "operator": "In", "values": ["a", "b"]}]},
            {"env": "b"},
            True,
            id="In",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["a"]}]},
            {},
            True,
            id="NotIn selects objects lacking key",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "env", "operator": "Exists"}]},
            {"env": ""},
            True,
            id="Exists",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]},
            {"env": "x"},
            False,
            id="DoesNotExist",
        ),
        pytest.param(
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "env", "operator": "Exists"}],
            },
            {"app": "web"},
            False,
            id="matchLabels and matchExpressions must both hold",
        ),
    ],
)
def test_metav1_label_selector(
    selector: dict[str, Any] | None, labels: dict[str, str], selected: bool
) -> None:
    assert label_selector_from_dict(selector).matches(labels) is selected


def test_metav1_label_selector_renders_like_kubectl_describe() -> None:
    sel = label_selector_from_dict(
        {
            "matchLabels": {"tier": "web"},
            "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod", "dev"]}],
        }
    )
    assert str(sel) == "env notin (dev,prod),tier=web"


@pytest.mark.parametrize(
    ("selector", "fragment"),
    [
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            '"Gt" is not a valid label selector operator',
            id="unknown operator",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
            "values set can't be empty",
            id="In without values",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            "values set must be empty for exists",
            id="Exists with values",
        ),
        pytest.param({"matchLabels": {"a b": "c"}}, 'Invalid value: "a b"', id="bad key"),
    ],
)
def test_invalid_metav1_label_selector_is_a_400(selector: dict[str, Any], fragment: str) -> None:
    with pytest.raises(APIError) as info:
        label_selector_from_dict(selector)
    assert info.value.code == 400
    assert fragment in info.value.message


@pytest.mark.parametrize(
    ("selector", "fields", "selected"),
    [
        pytest.param("", {"metadata.name": "a"}, True, id="empty selects everything"),
        pytest.param("metadata.name=a", {"metadata.name": "a"}, True, id="equals"),
        pytest.param("metadata.name==a", {"metadata.name": "a"}, True, id="double equals"),
        pytest.param("metadata.name=b", {"metadata.name": "a"}, False, id="equals miss"),
        pytest.param("metadata.name!=b", {"metadata.name": "a"}, True, id="not equals"),
        pytest.param("status.phase=", {"status.phase": ""}, True, id="empty value"),
        pytest.param("spec.nodeName!=", {"spec.nodeName": "n1"}, True, id="scheduled pods"),
        pytest.param(
            "metadata.name=a,metadata.namespace=ns",
            {"metadata.name": "a", "metadata.namespace": "other"},
            False,
            id="comma is and",
        ),
        pytest.param(r"metadata.name=a\,b", {"metadata.name": "a,b"}, True, id="escaped comma"),
        pytest.param(r"metadata.name=a\=b", {"metadata.name": "a=b"}, True, id="escaped equals"),
        pytest.param(r"metadata.name=a\\b", {"metadata.name": "a\\b"}, True, id="escaped slash"),
    ],
)
def test_field_selector_matching(selector: str, fields: dict[str, str], selected: bool) -> None:
    assert parse_field_selector(selector).matches(fields) is selected


def test_field_selector_requirements_are_normalised() -> None:
    sel = parse_field_selector(r"status.phase!=Running,metadata.name==a\,b")
    assert [(r.field, r.op, r.value) for r in sel.requirements] == [
        ("metadata.name", "=", "a,b"),
        ("status.phase", "!=", "Running"),
    ]
    assert str(sel) == r"metadata.name=a\,b,status.phase!=Running"
    assert parse_field_selector("").empty


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        pytest.param(
            "metadata.name", "invalid selector: 'metadata.name'; can't understand", id="op"
        ),
        pytest.param(r"a=b\x", r"invalid field selector: invalid escape sequence: \x", id="esc"),
        pytest.param("a=b\\", "invalid field selector: invalid escape sequence: \\", id="trailing"),
        pytest.param("a=b=c", "invalid field selector: unescaped character in value", id="equals"),
    ],
)
def test_invalid_field_selector_is_a_400(selector: str, message: str) -> None:
    with pytest.raises(APIError) as info:
        parse_field_selector(selector)
    assert info.value.code == 400
    assert info.value.message.startswith(message)


POD = {
    "metadata": {"name": "p", "namespace": "ns"},
    "spec": {"nodeName": "n1", "restartPolicy": "Always", "hostNetwork": True},
    "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}], "podIP": "10.0.0.5"},
}


def test_pod_fields_cover_what_kubectl_selects_on() -> None:
    fields = object_fields("", "pods", POD)
    assert fields == {
        "metadata.name": "p",
        "metadata.namespace": "ns",
        "spec.nodeName": "n1",
        "spec.restartPolicy": "Always",
        "spec.schedulerName": "",
        "spec.serviceAccountName": "",
        "spec.hostNetwork": "true",
        "status.phase": "Running",
        "status.podIP": "10.0.0.5",
        "status.nominatedNodeName": "",
    }
    assert object_fields("", "pods", {"metadata": {"name": "q"}})["spec.hostNetwork"] == "false"


@pytest.mark.parametrize(
    ("plural", "obj", "field", "value"),
    [
        pytest.param(
            "nodes", {"spec": {"unschedulable": True}}, "spec.unschedulable", "true", id="c"
        ),
        pytest.param("nodes", {}, "spec.unschedulable", "false", id="node schedulable by default"),
        pytest.param("secrets", {"type": "Opaque"}, "type", "Opaque", id="secret type"),
        pytest.param(
            "namespaces", {"status": {"phase": "Active"}}, "status.phase", "Active", id="ns"
        ),
        pytest.param(
            "events",
            {"involvedObject": {"kind": "Pod", "name": "p", "uid": "u1"}},
            "involvedObject.uid",
            "u1",
            id="event involved object",
        ),
        pytest.param("events", {"source": {"component": "kubelet"}}, "source", "kubelet", id="src"),
        pytest.param(
            "events", {"reportingComponent": "ctrl"}, "source", "ctrl", id="source falls back"
        ),
        pytest.param("events", {"type": "Warning"}, "type", "Warning", id="event type"),
        pytest.param("configmaps", {}, "metadata.namespace", "", id="missing namespace is empty"),
    ],
)
def test_resource_specific_fields(plural: str, obj: dict[str, Any], field: str, value: str) -> None:
    assert object_fields("", plural, obj)[field] == value


def test_cluster_scoped_builtins_have_no_namespace_field() -> None:
    assert "metadata.namespace" not in object_fields("", "nodes", {"metadata": {"name": "n"}})
    assert object_fields("", "nodes", {"metadata": {"name": "n"}})["metadata.name"] == "n"


def test_field_selector_selects_scheduled_pods_on_a_node() -> None:
    sel = parse_field_selector("spec.nodeName=n1,status.phase!=Succeeded")
    assert sel.matches(object_fields("", "pods", POD))
    other = {**POD, "spec": {"nodeName": "n2"}}
    assert not sel.matches(object_fields("", "pods", other))


@pytest.mark.parametrize(
    ("group", "plural", "namespaced", "selector"),
    [
        pytest.param("", "pods", True, "spec.nodeName=n1,metadata.namespace=a", id="pods"),
        pytest.param("", "nodes", False, "spec.unschedulable=false", id="nodes"),
        pytest.param("", "events", True, "involvedObject.name=p,reason=Failed", id="events"),
        pytest.param("", "secrets", True, "type=Opaque", id="secrets"),
        pytest.param("", "namespaces", False, "status.phase=Active", id="namespaces"),
        pytest.param("ome.io", "widgets", True, "metadata.name=x", id="custom resource name"),
    ],
)
def test_supported_field_labels_are_accepted(
    group: str, plural: str, namespaced: bool, selector: str
) -> None:
    check_field_selector(group, plural, namespaced, parse_field_selector(selector))


@pytest.mark.parametrize(
    ("group", "plural", "namespaced", "selector", "field"),
    [
        pytest.param("", "pods", True, "spec.foo=x", "spec.foo", id="unknown pod field"),
        pytest.param("", "configmaps", True, "status.phase=x", "status.phase", id="cm phase"),
        pytest.param("", "nodes", False, "metadata.namespace=x", "metadata.namespace", id="node"),
        pytest.param(
            "ome.io", "widgets", False, "metadata.namespace=", "metadata.namespace", id="c"
        ),
        pytest.param("", "pods", True, "metadata.name =x", "metadata.name ", id="space kept"),
    ],
)
def test_unsupported_field_label_is_a_400(
    group: str, plural: str, namespaced: bool, selector: str, field: str
) -> None:
    with pytest.raises(APIError) as info:
        check_field_selector(group, plural, namespaced, parse_field_selector(selector))
    assert info.value.code == 400
    assert info.value.message == f"field label not supported: {field}"

"""Server-side Tables: what ``kubectl get`` (and ``-o wide``) prints for each resource."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ome_sim.apiserver.errors import APIError
from ome_sim.apiserver.resources import ResourceType, builtin_types
from ome_sim.apiserver.tables import column_definitions, human_duration, render_table

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def ago(**delta: float) -> str:
    return (NOW - timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def builtin(plural: str) -> ResourceType:
    return next(rt for rt in builtin_types() if rt.plural == plural)


def names(rt: ResourceType) -> list[tuple[str, int]]:
    return [(c["name"], c["priority"]) for c in column_definitions(rt, rt.storage_version)]


def row(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    cells = render_table(rt, rt.storage_version, [obj], NOW)["rows"][0]["cells"]
    headers = [c["name"] for c in column_definitions(rt, rt.storage_version)]
    assert len(cells) == len(headers)
    return dict(zip(headers, cells, strict=True))


# ------------------------------------------------------------------------ human_duration


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(-5, "<invalid>", id="clock skew beyond a second is invalid"),
        pytest.param(-1.5, "0s", id="a second of skew is now"),
        pytest.param(0, "0s", id="now"),
        pytest.param(1, "1s", id="one second"),
        pytest.param(70, "70s", id="seconds up to two minutes"),
        pytest.param(119.9, "119s", id="seconds truncate"),
        pytest.param(120, "2m", id="two minutes"),
        pytest.param(190, "3m10s", id="minutes and seconds below ten minutes"),
        pytest.param(600, "10m", id="ten minutes"),
        pytest.param(70 * 60, "70m", id="minutes up to three hours"),
        pytest.param(185 * 60, "3h5m", id="hours and minutes below eight hours"),
        pytest.param(3 * 3600, "3h", id="whole hours"),
        pytest.param(47 * 3600, "47h", id="hours up to two days"),
        pytest.param(49 * 3600, "2d1h", id="days and hours below eight days"),
        pytest.param(48 * 3600, "2d", id="whole days"),
        pytest.param((8 * 24 + 2) * 3600, "8d", id="days"),
        pytest.param(367 * 24 * 3600, "367d", id="days up to two years"),
        pytest.param((365 * 2 * 24 + 25) * 3600, "2y1d", id="years and days"),
        pytest.param(365 * 3 * 24 * 3600, "3y", id="whole years"),
        pytest.param((365 * 8 * 24 + 2) * 3600, "8y", id="years"),
    ],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


# ---------------------------------------------------------------------------- table shape


def test_table_envelope_and_metadata_rows() -> None:
    rt = builtin("configmaps")
    obj = {"metadata": {"name": "c", "namespace": "ns", "creationTimestamp": ago(seconds=30)}}
    table = render_table(rt, "v1", [obj], NOW, list_metadata={"resourceVersion": "42"})
    assert table["kind"] == "Table"
    assert table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "42"}
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert table["rows"][0]["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }


@pytest.mark.parametrize(
    ("include", "expected"),
    [
        pytest.param("Object", "whole", id="includeObject=Object returns the object"),
        pytest.param("None", "absent", id="includeObject=None omits it"),
        pytest.param("", "partial", id="empty includeObject means Metadata"),
    ],
)
def test_include_object(include: str, expected: str) -> None:
    obj = {"metadata": {"name": "c"}, "data": {"k": "v"}}
    out = render_table(builtin("configmaps"), "v1", [obj], NOW, include_object=include)["rows"][0]
    if expected == "whole":
        assert out["object"] == obj
    elif expected == "absent":
        assert "object" not in out
    else:
        assert out["object"]["kind"] == "PartialObjectMetadata"


def test_bad_include_object_is_a_400() -> None:
    with pytest.raises(APIError) as info:
        render_table(builtin("configmaps"), "v1", [], NOW, include_object="Everything")
    assert info.value.code == 400
    assert "Everything" in info.value.message


def test_watch_rows_after_the_first_omit_column_definitions() -> None:
    table = render_table(builtin("configmaps"), "v1", [], NOW, with_columns=False)
    assert "columnDefinitions" not in table
    assert table["rows"] == []
    assert table["metadata"] == {}


def test_column_definitions_have_every_field() -> None:
    for rt in builtin_types():
        for col in column_definitions(rt, "v1"):
            assert set(col) == {"name", "type", "format", "description", "priority"}
            assert col["description"]


# ---------------------------------------------------------------------------------- pods


def pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "web-0", "namespace": "ns", "creationTimestamp": ago(minutes=5)},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "node-1"},
        "status": status,
    }


def running(name: str, ready: bool = True, restarts: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "ready": ready,
        "restartCount": restarts,
        "state": {"running": {"startedAt": ago(minutes=4)}},
    }


def test_pod_columns_match_kubectl_get_pods() -> None:
    assert names(builtin("pods")) == [
        ("Name", 0),
        ("Ready", 0),
        ("Status", 0),
        ("Restarts", 0),
        ("Age", 0),
        ("IP", 1),
        ("Node", 1),
        ("Nominated Node", 1),
        ("Readiness Gates", 1),
    ]


def test_running_pod_row() -> None:
    cells = row(
        builtin("pods"),
        pod(
            phase="Running",
            podIP="10.0.0.7",
            containerStatuses=[running("a"), running("b", ready=False)],
        ),
    )
    assert cells == {
        "Name": "web-0",
        "Ready": "1/2",
        "Status": "Running",
        "Restarts": "0",
        "Age": "5m",
        "IP": "10.0.0.7",
        "Node": "node-1",
        "Nominated Node": "<none>",
        "Readiness Gates": "<none>",
    }


@pytest.mark.parametrize(
    ("status", "deleting", "spec_extra", "shown"),
    [
        pytest.param({"phase": "Pending"}, False, {}, "Pending", id="pending"),
        pytest.param(
            {"phase": "Failed", "reason": "Evicted"}, False, {}, "Evicted", id="status reason wins"
        ),
        pytest.param(
            {
                "phase": "Pending",
                "containerStatuses": [
                    {"name": "a", "state": {"waiting": {"reason": "ImagePullBackOff"}}}
                ],
            },
            False,
            {},
            "ImagePullBackOff",
            id="waiting container reason",
        ),
        pytest.param(
            {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "a", "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}
                ],
            },
            False,
            {},
            "OOMKilled",
            id="terminated container reason",
        ),
        pytest.param(
            {
                "phase": "Running",
                "containerStatuses": [{"name": "a", "state": {"terminated": {"exitCode": 3}}}],
            },
            False,
            {},
            "ExitCode:3",
            id="terminated without reason shows exit code",
        ),
        pytest.param({"phase": "Running"}, True, {}, "Terminating", id="terminating"),
        pytest.param(
            {"phase": "Succeeded"}, True, {}, "Succeeded", id="finished pods never terminate"
        ),
        pytest.param(
            {"phase": "Pending"},
            False,
            {"schedulingGates": [{"name": "ome.io/slice"}]},
            "SchedulingGated",
            id="scheduling gated",
        ),
        pytest.param(
            {
                "phase": "Pending",
                "initContainerStatuses": [
                    {"name": "init", "state": {"waiting": {"reason": "PodInitializing"}}}
                ],
            },
            False,
            {"initContainers": [{"name": "init"}]},
            "Init:0/1",
            id="init containers in progress",
        ),
        pytest.param(
            {
                "phase": "Pending",
                "initContainerStatuses": [
                    {"name": "init", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
                ],
            },
            False,
            {"initContainers": [{"name": "init"}]},
            "Init:CrashLoopBackOff",
            id="init container waiting reason",
        ),
    ],
)
def test_pod_status_column(
    status: dict[str, Any], deleting: bool, spec_extra: dict[str, Any], shown: str
) -> None:
    obj = pod(**status)
    obj["spec"].update(spec_extra)
    if deleting:
        obj["metadata"]["deletionTimestamp"] = ago(seconds=1)
    assert row(builtin("pods"), obj)["Status"] == shown


def test_pod_restarts_sum_and_show_when_last_restarted() -> None:
    obj = pod(
        phase="Running", containerStatuses=[running("a", restarts=2), running("b", restarts=1)]
    )
    assert row(builtin("pods"), obj)["Restarts"] == "3"
    obj["status"]["containerStatuses"][0]["lastState"] = {
        "terminated": {"exitCode": 1, "finishedAt": ago(minutes=2)}
    }
    assert row(builtin("pods"), obj)["Restarts"] == "3 (2m ago)"


def test_completed_pod_row_is_marked_completed() -> None:
    table = render_table(builtin("pods"), "v1", [pod(phase="Succeeded")], NOW)
    assert table["rows"][0]["conditions"][0]["type"] == "Completed"
    running_table = render_table(builtin("pods"), "v1", [pod(phase="Running")], NOW)
    assert "conditions" not in running_table["rows"][0]


def test_pod_without_ip_or_node_shows_none() -> None:
    obj = pod(phase="Pending")
    del obj["spec"]["nodeName"]
    cells = row(builtin("pods"), obj)
    assert (cells["IP"], cells["Node"]) == ("<none>", "<none>")


# --------------------------------------------------------------------------------- nodes


def node(ready: str | None, **extra: Any) -> dict[str, Any]:
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {
        "metadata": {
            "name": "node-1",
            "creationTimestamp": ago(days=3),
            "labels": {
                "node-role.kubernetes.io/control-plane": "",
                "node-role.kubernetes.io/worker": "",
            },
        },
        "spec": extra,
        "status": {
            "conditions": conditions,
            "nodeInfo": {"kubeletVersion": "v1.31.0", "osImage": "COS"},
            "addresses": [{"type": "InternalIP", "address": "10.1.0.2"}],
        },
    }


def test_node_row() -> None:
    cells = row(builtin("nodes"), node("True"))
    assert cells == {
        "Name": "node-1",
        "Status": "Ready",
        "Roles": "control-plane,worker",
        "Age": "3d",
        "Version": "v1.31.0",
        "Internal-IP": "10.1.0.2",
        "External-IP": "<none>",
        "OS-Image": "COS",
        "Kernel-Version": "<unknown>",
        "Container-Runtime": "<unknown>",
    }


@pytest.mark.parametrize(
    ("ready", "unschedulable", "shown"),
    [
        pytest.param("False", False, "NotReady", id="not ready"),
        pytest.param("Unknown", False, "NotReady", id="unknown ready status is not ready"),
        pytest.param(None, False, "Unknown", id="no ready condition"),
        pytest.param("True", True, "Ready,SchedulingDisabled", id="cordoned"),
    ],
)
def test_node_status(ready: str | None, unschedulable: bool, shown: str) -> None:
    obj = node(ready, unschedulable=unschedulable)
    assert row(builtin("nodes"), obj)["Status"] == shown


def test_node_without_roles() -> None:
    obj = node("True")
    obj["metadata"]["labels"] = {}
    assert row(builtin("nodes"), obj)["Roles"] == "<none>"


# -------------------------------------------------------------------------------- events


def test_event_columns_and_row() -> None:
    rt = builtin("events")
    assert names(rt) == [
        ("Last Seen", 0),
        ("Type", 0),
        ("Reason", 0),
        ("Object", 0),
        ("Subobject", 1),
        ("Source", 1),
        ("Message", 0),
        ("First Seen", 1),
        ("Count", 1),
        ("Name", 1),
    ]
    event = {
        "metadata": {"name": "web-0.17a", "namespace": "ns", "creationTimestamp": ago(hours=1)},
        "involvedObject": {"kind": "Pod", "name": "web-0", "fieldPath": "spec.containers{a}"},
        "reason": "BackOff",
        "message": "Back-off restarting failed container\n",
        "type": "Warning",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": ago(minutes=30),
        "lastTimestamp": ago(seconds=40),
        "count": 12,
    }
    assert row(rt, event) == {
        "Last Seen": "40s",
        "Type": "Warning",
        "Reason": "BackOff",
        "Object": "pod/web-0",
        "Subobject": "spec.containers{a}",
        "Source": "kubelet, node-1",
        "Message": "Back-off restarting failed container",
        "First Seen": "30m",
        "Count": 12,
        "Name": "web-0.17a",
    }


def test_new_style_event_uses_event_time_and_counts_once() -> None:
    event = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "InferenceService"},
        "eventTime": (NOW - timedelta(seconds=90)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingComponent": "ome-controller",
    }
    cells = row(builtin("events"), event)
    assert cells["Last Seen"] == "90s"
    assert cells["First Seen"] == "90s"
    assert cells["Count"] == 1
    assert cells["Object"] == "inferenceservice"
    assert cells["Source"] == "ome-controller"


# ---------------------------------------------------------------------- other built-ins


@pytest.mark.parametrize(
    ("plural", "obj", "expected"),
    [
        pytest.param(
            "namespaces",
            {
                "metadata": {"name": "ns", "creationTimestamp": ago(days=400)},
                "status": {"phase": "Active"},
            },
            ["ns", "Active", "400d"],
            id="namespace",
        ),
        pytest.param(
            "configmaps",
            {"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}},
            ["c", 3, "<unknown>"],
            id="configmap counts data and binaryData",
        ),
        pytest.param(
            "secrets",
            {
                "metadata": {"name": "s", "creationTimestamp": ago(hours=2)},
                "type": "Opaque",
                "data": {"k": "dg=="},
            },
            ["s", "Opaque", 1, "120m"],
            id="secret",
        ),
        pytest.param(
            "services",
            {
                "metadata": {"name": "svc", "creationTimestamp": ago(seconds=5)},
                "spec": {
                    "type": "ClusterIP",
                    "clusterIP": "10.96.0.10",
                    "clusterIPs": ["10.96.0.10"],
                    "ports": [{"port": 80, "protocol": "TCP"}, {"port": 443, "protocol": "TCP"}],
                    "selector": {"app": "web", "tier": "fe"},
                },
            },
            ["svc", "ClusterIP", "10.96.0.10", "<none>", "80/TCP,443/TCP", "5s", "app=web,tier=fe"],
            id="service",
        ),
        pytest.param(
            "services",
            {
                "metadata": {"name": "lb"},
                "spec": {
                    "type": "LoadBalancer",
                    "clusterIP": "10.96.0.11",
                    "ports": [{"port": 80, "nodePort": 30080, "protocol": "UDP"}],
                },
            },
            [
                "lb",
                "LoadBalancer",
                "10.96.0.11",
                "<pending>",
                "80:30080/UDP",
                "<unknown>",
                "<none>",
            ],
            id="load balancer waiting for an address",
        ),
        pytest.param(
            "leases",
            {
                "metadata": {"name": "l", "creationTimestamp": ago(seconds=3)},
                "spec": {"holderIdentity": "pod-1"},
            },
            ["l", "pod-1", "3s"],
            id="lease",
        ),
        pytest.param(
            "leases",
            {"metadata": {"name": "l"}, "spec": {}},
            ["l", "", "<unknown>"],
            id="lease without holder",
        ),
        pytest.param(
            "controllerrevisions",
            {
                "metadata": {
                    "name": "web-7c9",
                    "creationTimestamp": ago(minutes=1),
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Pod", "name": "x"},
                        {
                            "apiVersion": "apps/v1",
                            "kind": "StatefulSet",
                            "name": "web",
                            "controller": True,
                        },
                    ],
                },
                "revision": 4,
            },
            ["web-7c9", "statefulset.apps/web", 4, "60s"],
            id="controller revision",
        ),
        pytest.param(
            "controllerrevisions",
            {"metadata": {"name": "r"}, "revision": 1},
            ["r", "<none>", 1, "<unknown>"],
            id="controller revision without controller",
        ),
        pytest.param(
            "customresourcedefinitions",
            {"metadata": {"name": "widgets.ome.io", "creationTimestamp": "2024-04-30T10:00:00Z"}},
            ["widgets.ome.io", "2024-04-30T10:00:00Z"],
            id="crd created at",
        ),
        pytest.param(
            "validatingwebhookconfigurations",
            {"metadata": {"name": "v", "creationTimestamp": ago(days=1)}, "webhooks": [{}, {}]},
            ["v", 2, "24h"],
            id="webhook configuration counts webhooks",
        ),
    ],
)
def test_builtin_rows(plural: str, obj: dict[str, Any], expected: list[Any]) -> None:
    rt = builtin(plural)
    assert list(row(rt, obj).values()) == expected


def test_builtin_headers() -> None:
    assert names(builtin("services"))[-1] == ("Selector", 1)
    crd_cols = column_definitions(builtin("customresourcedefinitions"), "v1")
    assert [(c["name"], c["type"]) for c in crd_cols] == [
        ("Name", "string"),
        ("Created At", "date"),
    ]
    webhooks = column_definitions(builtin("validatingwebhookconfigurations"), "v1")
    assert webhooks[1]["type"] == "integer"


def test_unknown_builtin_gets_name_and_age() -> None:
    rt = ResourceType("apps", ["v1"], "Deployment", "deployments", "deployment", True)
    assert names(rt) == [("Name", 0), ("Age", 0)]
    obj = {"metadata": {"name": "d", "creationTimestamp": ago(seconds=59)}}
    assert list(row(rt, obj).values()) == ["d", "59s"]


# ---------------------------------------------------------------------- custom resources

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
    },
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "priority": 1},
    {"name": "Score", "type": "number", "jsonPath": ".status.score", "format": "float"},
    {"name": "Paused", "type": "boolean", "jsonPath": ".spec.paused"},
    {"name": "Models", "type": "string", "jsonPath": ".spec.models[*].name"},
    {"name": "Args", "type": "string", "jsonPath": ".spec.args"},
    {"name": "Started", "type": "date", "jsonPath": ".status.startTime"},
    {"name": "Missing", "type": "string", "jsonPath": ".status.nothing", "description": "Nope."},
]


def crd_type(columns: list[dict[str, Any]] | None) -> ResourceType:
    return ResourceType(
        group="ome.io",
        versions=["v1beta1"],
        kind="InferenceService",
        plural="inferenceservices",
        singular="inferenceservice",
        namespaced=True,
        custom=True,
        printer_columns={"v1beta1": columns} if columns is not None else {},
    )


def test_custom_resource_columns_follow_printer_columns() -> None:
    cols = column_definitions(crd_type(PRINTER_COLUMNS), "v1beta1")
    assert cols[0] == {
        "name": "Name",
        "type": "string",
        "format": "name",
        "description": cols[0]["description"],
        "priority": 0,
    }
    assert [(c["name"], c["type"], c["priority"]) for c in cols[1:4]] == [
        ("Ready", "string", 0),
        ("Replicas", "integer", 1),
        ("Score", "number", 0),
    ]
    assert cols[3]["format"] == "float"
    assert cols[1]["description"] == (
        "Custom resource definition column (in JSONPath format): "
        '.status.conditions[?(@.type=="Ready")].reason'
    )
    assert cols[-1]["description"] == "Nope."


def test_custom_resource_cells() -> None:
    obj = {
        "metadata": {"name": "llama", "namespace": "ns", "creationTimestamp": ago(hours=1)},
        "spec": {
            "replicas": 2,
            "paused": True,
            "models": [{"name": "a"}, {"name": "b"}],
            "args": ["--x", "--y"],
        },
        "status": {
            "conditions": [{"type": "Ready", "reason": "ACTIVE"}],
            "score": 0.5,
            "startTime": ago(minutes=15),
        },
    }
    cells = render_table(crd_type(PRINTER_COLUMNS), "v1beta1", [obj], NOW)["rows"][0]["cells"]
    assert cells == ["llama", "ACTIVE", 2, 0.5, True, "a", '["--x","--y"]', "15m", None]


@pytest.mark.parametrize(
    ("column_type", "value", "cell"),
    [
        pytest.param("integer", 3.9, 3, id="integer column truncates floats"),
        pytest.param("integer", "3", None, id="integer column rejects strings"),
        pytest.param("integer", True, None, id="integer column rejects booleans"),
        pytest.param("number", 4, 4, id="number column keeps integers"),
        pytest.param("boolean", "true", None, id="boolean column rejects strings"),
        pytest.param("string", 7, "7", id="string column prints numbers"),
        pytest.param("string", 2.0, "2", id="string column prints whole floats like Go"),
        pytest.param("string", False, "false", id="string column prints booleans"),
        pytest.param("string", {"b": 1}, '{"b":1}', id="string column prints maps as JSON"),
        pytest.param("date", "yesterday", "<invalid>", id="date column rejects non timestamps"),
        pytest.param("date", 5, None, id="date column needs a string"),
        pytest.param("string", None, None, id="null is an empty cell"),
    ],
)
def test_custom_resource_cell_types(column_type: str, value: Any, cell: Any) -> None:
    rt = crd_type([{"name": "X", "type": column_type, "jsonPath": ".spec.x"}])
    obj = {"metadata": {"name": "o"}, "spec": {"x": value}}
    assert render_table(rt, "v1beta1", [obj], NOW)["rows"][0]["cells"] == ["o", cell]


def test_custom_resource_without_printer_columns_shows_age() -> None:
    rt = crd_type(None)
    assert [(c["name"], c["type"]) for c in column_definitions(rt, "v1beta1")] == [
        ("Name", "string"),
        ("Age", "date"),
    ]
    obj = {"metadata": {"name": "o", "creationTimestamp": ago(minutes=7, seconds=3)}}
    assert render_table(rt, "v1beta1", [obj], NOW)["rows"][0]["cells"] == ["o", "7m3s"]


def test_custom_resource_broken_column_path_gives_empty_cells() -> None:
    rt = crd_type([{"name": "Bad", "type": "string", "jsonPath": ".spec[?("}])
    table = render_table(rt, "v1beta1", [{"metadata": {"name": "o"}}], NOW)
    assert table["rows"][0]["cells"] == ["o", None]

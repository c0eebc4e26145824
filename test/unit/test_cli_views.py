"""What ``kubectl ome`` prints, from plain values: M5's rows and tokens, the 64-column cut,
kubectl's ages, the hold's reason read back from ``lastFailure``, and the slices view's
WAITING text; malformed input prints, never raises."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ome.cli import instance, slices
from ome.cli.render import cut, human_duration
from ome.controllers.holds import hold_failure_message, hold_reason
from ome.controllers.slices import messages
from ome.kube import rfc3339
from ome.tpuslice import config
from ome.tpuslice.types import GUIDE_CONFIG_JSON

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
JSON = dict[str, Any]


def ago(seconds: float) -> str:
    return rfc3339(NOW - timedelta(seconds=seconds))


def held_row(
    token: str | None = "CapacityProvisioning", reason: str = "slice s is ACTIVATING"
) -> JSON:
    pod = "svc-engine-0-default-0"
    return {
        "index": 0,
        "incarnation": 2,
        "phase": "Creating",
        "runningRevision": "",
        "targetRevision": "abcdef0123",
        "activeOrdinal": 0,
        "operation": {
            "id": "create-0",
            "type": "Create",
            "step": "CreatePods",
            "startedAt": ago(125),
            "lastProgressAt": ago(5),
            "deadline": None,
            "retryCount": 1,
            "waiting": token,
            "capacityRefusedAt": None,
            "surgeIndex": None,
        },
        "lastFailure": {
            "podName": pod,
            "containerName": "",
            "reason": token,
            "exitCode": None,
            "message": hold_failure_message(str(token), pod, reason),
            "time": ago(60),
        },
    }


def view(row: JSON, pods: list[JSON] | None = None) -> instance.StatusView:
    return instance.status(
        "svc", "ns", "engine", "svc-engine", row, pods or [], NOW, "cloud.google.com/gke-tpu-slice"
    )


def values(v: instance.StatusView) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for row in v.rows:
        out.setdefault(row.name, []).append(row.value())
    return out


def test_the_rows_of_a_held_instance_in_m5s_order() -> None:
    v = view(held_row())
    assert [r.name for r in v.rows] == [
        "state", "instance", "revisions", "operation", "op timing", "op hold", "failure",
        "fail time",
    ]  # fmt: skip
    got = values(v)
    assert got["state"] == ["Creating, waiting on CapacityProvisioning"]
    assert got["instance"] == ["svc-engine inc=2 phase=Creating"]
    assert got["revisions"] == ["running=- target=abcdef0123"]
    assert got["operation"] == ["Create id=create-0 step=CreatePods retry=1"]
    assert got["op timing"] == ["start=2m5s progress=5s deadline=-"]
    assert got["op hold"] == ["waiting=CapacityProvisioning refused=-"]
    assert got["failure"][0].startswith(
        "pod=svc-engine-0-default-0 container=- reason=CapacityProvisioning exit=- message="
    )
    assert got["fail time"] == [ago(60)]


@pytest.mark.parametrize("token", instance.KNOWN_WAITING)
def test_every_known_token_prints_itself(token: str) -> None:
    got = values(view(held_row(token)))
    assert got["op hold"] == [f"waiting={token} refused=-"]
    assert "issue" not in got


def test_an_unknown_token_prints_unknown_with_an_issue_row() -> None:
    got = values(view(held_row("GremlinsAteIt")))
    assert got["op hold"] == ["waiting=Unknown refused=-"]
    assert got["state"] == ["Creating, waiting on Unknown"]
    (issue,) = got["issue"]
    assert issue.startswith("OperationWaitingUnknown: the operation waits on 'GremlinsAteIt'")


def test_the_table_cuts_at_64_columns_and_wide_prints_one_field_per_row_uncut() -> None:
    reason = "slice svc-engine-0-0-8f3a21c7 is waiting for partition assignment"
    v = view(held_row(reason=reason))
    table = v.table().splitlines()
    assert table[0] == "FIELD       VALUE"
    failure = next(line for line in table if line.startswith("failure"))
    assert len(failure) == len("failure     ") + 64 and failure.endswith("...")
    wide = v.table(wide=True).splitlines()
    assert "failure     reason=CapacityProvisioning" in wide
    assert "op hold     waiting=CapacityProvisioning" in wide
    assert any(line.endswith(f"ready: {reason}") for line in wide)
    assert all(len(line) <= len("FIELD       ") + 64 for line in table)


def test_pod_rows_and_issues_for_a_failed_pod_and_a_passed_deadline() -> None:
    row = held_row(token=None)
    row["operation"]["deadline"] = ago(30)
    row["lastFailure"] = None
    pods = [
        {
            "metadata": {
                "name": "svc-engine-0-default-0",
                "labels": {"ome.io/instance-index": "0"},
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "c"}],
                "nodeSelector": {"cloud.google.com/gke-tpu-slice": "svc-engine-0-0-8f3a21c7"},
            },
            "status": {"phase": "Failed", "reason": "Evicted"},
        },
        {"metadata": {"name": "other-index", "labels": {"ome.io/instance-index": "1"}}},
    ]
    got = values(view(row, pods))
    assert got["state"] == ["Creating: Create at step CreatePods"]
    assert got["op timing"] == ["start=2m5s progress=5s deadline=-30s"]
    assert got["failure"] == ["-"]
    assert got["pod"] == [
        "svc-engine-0-default-0 phase=Failed ready=0/1 node=n1 slice=svc-engine-0-0-8f3a21c7"
    ]
    assert got["issue"] == [
        "OperationDeadlinePassed: operation create-0 passed its deadline 30s ago",
        "PodFailed: pod svc-engine-0-default-0 failed: Evicted",
    ]


def test_the_document_is_the_row_as_stored_with_the_instances_pods() -> None:
    row = held_row()
    row["operation"]["surgeIndex"] = 3
    pods = [
        {"metadata": {"name": n, "labels": {"ome.io/instance-index": i}}}
        for n, i in (("b", "3"), ("a", "0"), ("c", "1"))
    ]
    doc = view(row, pods).document
    assert doc["instance"] is row
    assert [p["metadata"]["name"] for p in doc["pods"]] == ["a", "b"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (125, "2m5s"),
        (600, "10m"), (3 * 3600 - 1, "179m"), (3 * 3600, "3h"), (3 * 3600 + 60, "3h1m"),
        (8 * 3600, "8h"), (47 * 3600, "47h"), (48 * 3600, "2d"), (50 * 3600, "2d2h"),
        (8 * 86400, "8d"), (729 * 86400, "729d"), (730 * 86400, "2y"), (731 * 86400, "2y1d"),
        (8 * 365 * 86400, "8y"),
    ],
)  # fmt: skip
def test_ages_read_as_kubectl_prints_them(seconds: int, text: str) -> None:
    assert human_duration(timedelta(seconds=seconds)) == text


def test_cut_marks_what_it_cut() -> None:
    assert cut("x" * 64, 64) == "x" * 64
    assert cut("x" * 65, 64) == "x" * 61 + "..."


@given(
    token=st.text(min_size=1, max_size=20),
    pod=st.text(max_size=30),
    reason=st.text(max_size=80),
)
def test_a_holds_reason_reads_back_from_its_last_failure(token: str, pod: str, reason: str) -> None:
    failure = {"reason": token, "podName": pod, "message": hold_failure_message(token, pod, reason)}
    assert hold_reason(failure) == reason
    assert hold_reason({**failure, "message": "OOMKilled"}) is None
    assert hold_reason(None) is None


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    row=st.dictionaries(
        st.sampled_from(
            ["index", "phase", "operation", "lastFailure", "incarnation", "runningRevision"]
        ),
        _JSONISH,
    ),
    pods=st.lists(_JSONISH, max_size=3),
)
def test_a_malformed_row_prints_never_raises(row: JSON, pods: list[Any]) -> None:
    v = view(row, [p for p in pods if isinstance(p, dict)])
    assert v.table().startswith("FIELD")
    assert v.table(wide=True).startswith("FIELD")


# -- slices ------------------------------------------------------------------------------

CONFIG = config.parse_config(GUIDE_CONFIG_JSON)
assert CONFIG is not None


def replica(rows: list[JSON] | None = None, replicas: int = 1) -> JSON:
    template = {
        "metadata": {"annotations": {"ome.io/tpu-slice-provisioning": "true"}},
        "spec": {
            "nodeSelector": {
                "cloud.google.com/gke-tpu-accelerator": "tpu7x",
                "cloud.google.com/gke-tpu-topology": "2x2x1",
            },
            "containers": [{"name": "c", "resources": {"limits": {"google.com/tpu": "4"}}}],
        },
    }
    return {
        "metadata": {
            "name": "svc-engine",
            "namespace": "ns",
            "uid": "u-1",
            "labels": {"ome.io/inferenceservice": "svc"},
        },
        "spec": {
            "component": "engine",
            "replicas": replicas,
            "runners": [{"name": "default", "template": template}],
        },
        "status": {"instanceStatuses": rows or []},
    }


PROVISION_ONLY_NODE = {
    "metadata": {
        "name": "n0",
        "labels": {
            "cloud.google.com/gke-tpu-accelerator": "tpu7x",
            "cloud.google.com/gke-accelerator-topology-mode": "PROVISION_ONLY",
        },
    },
    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
}


def test_a_slot_without_a_slice_waits_for_its_partition() -> None:
    world = slices.World((), (PROVISION_ONLY_NODE,), {}, {})
    assert CONFIG is not None
    (row,) = slices.rows([replica()], world, CONFIG, NOW)
    assert (row.instance, row.ordinal, row.exists) == (0, 0, False)
    assert row.slice.startswith("svc-engine-0-0-")
    assert row.waiting == messages.waiting_for_partitions(row.slice)
    assert row.hosts_needed == 1


def test_an_invalid_demand_waits_with_its_error() -> None:
    bad = replica()
    bad["spec"]["runners"][0]["template"]["spec"]["containers"][0]["resources"]["limits"] = {
        "google.com/tpu": "2"
    }
    world = slices.World((), (PROVISION_ONLY_NODE,), {}, {})
    assert CONFIG is not None
    (row,) = slices.rows([bad], world, CONFIG, NOW)
    assert row.waiting.startswith("pods cannot be placed on a provisioned slice: ")


@settings(max_examples=100, deadline=None)
@given(st.lists(_JSONISH, max_size=3), st.lists(_JSONISH, max_size=3))
def test_malformed_slices_and_nodes_never_raise(found: list[Any], nodes: list[Any]) -> None:
    world = slices.World(
        tuple(s for s in found if isinstance(s, dict)),
        (PROVISION_ONLY_NODE, *(n for n in nodes if isinstance(n, dict))),
        {},
        {},
    )
    assert CONFIG is not None
    out = slices.rows([replica()], world, CONFIG, NOW)
    slices.render(out, NOW, wide=True, namespaces=True)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["index", "phase", "operation", "lastFailure", "activeOrdinal"]),
            _JSONISH,
        ),
        max_size=3,
    )
)
def test_malformed_instance_rows_never_raise(rows: list[JSON]) -> None:
    world = slices.World((), (PROVISION_ONLY_NODE,), {}, {})
    assert CONFIG is not None
    slices.rows([replica(rows)], world, CONFIG, NOW)

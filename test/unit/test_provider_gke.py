"""GKE's Slice object: the body OME creates (D3), which Slices are ours and at
which slot (D4), and what a Slice says of itself (E1, E2), read into ``SliceInfo`` by
``gke.parse`` from whatever someone wrote."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ome.api import v1beta1
from ome.api.v1beta1 import LABEL_INSTANCE_INDEX, LABEL_MANAGED_BY, LABEL_POD_ORDINAL
from ome.provider import gke
from ome.tpuslice.naming import OWNER_ANNOTATION, OWNER_UID_LABEL, Slot
from ome.tpuslice.placement import Demand
from ome.tpuslice.shape import Topology
from ome.tpuslice.slices import SliceInfo
from test.helpers import assert_strings_and_partitions
from test.unit import slicekit
from test.unit.slicekit import JSON, NAME, NAMESPACE, ONE_HOST, READY_STATES, TPU7X, UID

REPLICA: JSON = {"metadata": {"name": NAME, "namespace": NAMESPACE, "uid": UID}}
#: The sample configuration, copying a pod annotation onto Slices and without a ready timeout.
CONFIG = replace(
    slicekit.CONFIG,
    slice=replace(
        slicekit.CONFIG.slice,
        pod_annotations=("team.example.com/cost-center", "team.example.com/absent"),
        ready_timeout=None,
    ),
)

# -- D3 --------------------------------------------------------------------------------------------


def test_the_slice_carries_its_shape_owner_and_slot() -> None:
    body = gke.body(
        REPLICA,
        Slot(0, 1),
        ONE_HOST,
        CONFIG,
        {"team.example.com/cost-center": "ml", "team.example.com/other": "x"},
    )
    assert body == {
        "apiVersion": "accelerator.gke.io/v1beta1",
        "kind": "Slice",
        "metadata": {
            "name": "qwen3-tpu-engine-0-1-30d2d711",
            "labels": {
                "ome.io/slice-owner-uid": UID,
                "ome.io/managed-by": "OMENative",
                "ome.io/instance-index": "0",
                "ome.io/pod-ordinal": "1",
                "cloud.google.com/slice-owner-kind": "InferenceReplica",
                "cloud.google.com/slice-owner-name": "qwen3-tpu-engine",
            },
            "annotations": {
                "cloud.google.com/managed-by": "slice-scheduler",
                "slice.gke.io/retry-on-failure": "true",
                "team.example.com/cost-center": "ml",
                "ome.io/slice-owner": "qwen3-tpu/qwen3-tpu-engine",
            },
        },
        "spec": {"type": "tpu7x", "topology": "2x2x1", "partitionIds": []},
    }
    assert "namespace" not in body["metadata"]  # cluster-scoped


def test_the_annotations_keep_their_order_configured_then_copied_then_the_owner() -> None:
    body = gke.body(REPLICA, Slot(0, 0), ONE_HOST, CONFIG, {"team.example.com/cost-center": "ml"})
    assert list(body["metadata"]["annotations"]) == [
        "cloud.google.com/managed-by",
        "slice.gke.io/retry-on-failure",
        "team.example.com/cost-center",
        "ome.io/slice-owner",
    ]


def test_building_a_body_changes_neither_the_replica_nor_the_configuration() -> None:
    replica = copy.deepcopy(REPLICA)
    pod_annotations = {"team.example.com/cost-center": "ml"}
    body = gke.body(replica, Slot(0, 0), ONE_HOST, CONFIG, pod_annotations)
    body["metadata"]["annotations"]["x"] = "y"
    body["metadata"]["labels"]["x"] = "y"
    assert replica == REPLICA
    assert pod_annotations == {"team.example.com/cost-center": "ml"}
    assert dict(CONFIG.slice.annotations) == {
        "cloud.google.com/managed-by": "slice-scheduler",
        "slice.gke.io/retry-on-failure": "true",
    }


def test_the_owner_name_label_is_cut_to_a_label_value() -> None:
    for name, label in [("a" * 62 + ".b", "a" * 62), ("a" * 61 + "--b", "a" * 61)]:
        replica = {"metadata": {"name": name, "namespace": "ns", "uid": UID}}
        body = gke.body(replica, Slot(0, 0), ONE_HOST, CONFIG, {})
        assert body["metadata"]["labels"]["cloud.google.com/slice-owner-name"] == label
        assert body["metadata"]["annotations"][OWNER_ANNOTATION] == f"ns/{name}"
        assert len(body["metadata"]["name"]) <= 49


def test_the_labels_are_the_apis() -> None:
    assert gke.API_VERSION == "accelerator.gke.io/v1beta1"
    assert LABEL_MANAGED_BY == v1beta1.LABEL_MANAGED_BY
    assert LABEL_INSTANCE_INDEX == v1beta1.LABEL_INSTANCE_INDEX
    assert LABEL_POD_ORDINAL == v1beta1.LABEL_POD_ORDINAL
    assert OWNER_UID_LABEL == "ome.io/slice-owner-uid"
    assert OWNER_ANNOTATION == "ome.io/slice-owner"


def test_the_slice_resource_is_gkes_cluster_scoped_slices() -> None:
    assert (gke.GROUP, gke.VERSION, gke.KIND) == ("accelerator.gke.io", "v1beta1", "Slice")
    assert gke.SLICES.api_version == gke.API_VERSION
    assert gke.SLICES.plural == "slices" and not gke.SLICES.namespaced
    assert gke.CRD_NAME == "slices.accelerator.gke.io"
    assert gke.SLICES.path(name="s-0-0-8f3a21c7") == (
        "/apis/accelerator.gke.io/v1beta1/slices/s-0-0-8f3a21c7"
    )


# -- D4, D3: ownership and slot --------------------------------------------------------------------


def slice_obj(
    labels: dict[str, str] | None = None,
    *,
    name: str = "s-0-0-8f3a21c7",
    type_: str = "tpu7x",
    topology: str = "2x2x1",
    partitions: list[str] | None = None,
    ready: JSON | None = None,
    deleting: bool = False,
) -> JSON:
    metadata: JSON = {
        "name": name,
        "labels": {OWNER_UID_LABEL: UID, LABEL_INSTANCE_INDEX: "0", LABEL_POD_ORDINAL: "0"}
        if labels is None
        else labels,
    }
    if deleting:
        metadata["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    obj: JSON = {
        "metadata": metadata,
        "spec": {"type": type_, "topology": topology, "partitionIds": partitions or []},
    }
    if ready is not None:
        obj["status"] = {
            "conditions": [{"type": "Other", "reason": "X"}, {"type": "Ready", **ready}]
        }
    return obj


def test_only_the_owner_uid_label_makes_a_slice_ours() -> None:
    assert gke.parse(slice_obj()).owned_by(UID)
    assert not gke.parse(slice_obj()).owned_by("other-uid")
    assert not gke.parse(slice_obj({})).owned_by(UID)
    assert not gke.parse(slice_obj({OWNER_UID_LABEL: ""})).owned_by("")
    assert not gke.parse({}).owned_by(UID)


@pytest.mark.parametrize(
    ("info", "uid", "ours"),
    [
        pytest.param(SliceInfo("s", "u", owner_uid=UID), UID, True, id="same uid"),
        pytest.param(SliceInfo("s", "u", owner_uid=UID), "other-uid", False, id="other uid"),
        pytest.param(SliceInfo("s", "u", owner_uid=""), UID, False, id="no label"),
        pytest.param(SliceInfo("s", "u", owner_uid=""), "", False, id="empty owns nothing"),
        pytest.param(
            SliceInfo("s", "u", owner_uid=UID, owner="ns/other"), UID, True, id="annotation ignored"
        ),
        pytest.param(
            SliceInfo("s", "u", owner_uid="x", owner="qwen3-tpu/qwen3-tpu-engine"),
            UID,
            False,
            id="annotation does not adopt",
        ),
        pytest.param(SliceInfo("s", "u", owner_uid=UID.upper()), UID, False, id="case matters"),
    ],
)
def test_a_slice_is_ours_by_its_owner_uid_label_alone(
    info: SliceInfo, uid: str, ours: bool
) -> None:
    assert info.owned_by(uid) is ours


@pytest.mark.parametrize(
    ("labels", "slot"),
    [
        ({LABEL_INSTANCE_INDEX: "3", LABEL_POD_ORDINAL: "1"}, Slot(3, 1)),
        ({LABEL_INSTANCE_INDEX: "0", LABEL_POD_ORDINAL: "0"}, Slot(0, 0)),
        ({LABEL_INSTANCE_INDEX: "3"}, None),
        ({LABEL_POD_ORDINAL: "1"}, None),
        ({LABEL_INSTANCE_INDEX: "-1", LABEL_POD_ORDINAL: "0"}, None),
        ({LABEL_INSTANCE_INDEX: "01", LABEL_POD_ORDINAL: "0"}, None),
        ({LABEL_INSTANCE_INDEX: "x", LABEL_POD_ORDINAL: "0"}, None),
        ({LABEL_INSTANCE_INDEX: "", LABEL_POD_ORDINAL: "0"}, None),
    ],
)
def test_a_slices_slot_comes_from_its_labels(labels: dict[str, str], slot: Slot | None) -> None:
    assert gke.parse(slice_obj(labels)).slot == slot


def test_a_built_slice_parses_back_to_its_slot() -> None:
    assert gke.parse(gke.body(REPLICA, Slot(7, 1), ONE_HOST, CONFIG, {})).slot == Slot(7, 1)


@settings(deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(0, 1),
    st.sampled_from([Topology((2, 2, 1)), Topology((2, 2, 2))]),
)
def test_a_built_slice_parses_back_to_its_slot_owner_and_shape(
    instance: int, ordinal: int, topology: Topology
) -> None:
    demand = Demand(TPU7X, topology, hosts=topology.chips // 4, pods=1, chips_per_pod=4)
    body = gke.body(REPLICA, Slot(instance, ordinal), demand, CONFIG, {})
    info = gke.parse(body)
    assert info == SliceInfo(
        name=f"qwen3-tpu-engine-{instance}-{ordinal}-30d2d711",
        uid="",
        owner_uid=UID,
        owner="qwen3-tpu/qwen3-tpu-engine",
        slot=Slot(instance, ordinal),
        slice_type="tpu7x",
        topology=str(topology),
    )
    assert info.owned_by(UID) and not info.ready(READY_STATES)


# -- E1, E2 ----------------------------------------------------------------------------------------


def test_the_state_is_the_first_ready_conditions_reason() -> None:
    obj = slice_obj(
        partitions=["p1", "p2"],
        ready={
            "reason": "ACTIVE",
            "status": "True",
            "message": "ok",
            "lastTransitionTime": "2025-01-01T00:00:00Z",
        },
    )
    obj["status"]["conditions"].append({"type": "Ready", "reason": "FAILED"})
    info = gke.parse(obj)
    assert (
        info.state,
        info.status,
        info.message,
        info.last_transition,
        info.terminating,
        info.partitions,
    ) == ("ACTIVE", "True", "ok", datetime(2025, 1, 1, tzinfo=UTC), False, ("p1", "p2"))
    assert gke.parse({}) == SliceInfo(name="", uid="")
    empty = gke.parse({})
    assert (
        empty.state,
        empty.status,
        empty.message,
        empty.last_transition,
        empty.terminating,
        empty.partitions,
    ) == ("", "", "", None, False, ())
    assert gke.parse(slice_obj(deleting=True)).terminating


def written(labels: dict[str, str] | None = None, **metadata: str) -> JSON:
    """``slice_obj`` with every field ``parse`` reads written: ACTIVE, with a partition."""
    obj = slice_obj(
        labels,
        partitions=["p1"],
        ready={
            "reason": "ACTIVE",
            "status": "True",
            "message": "ok",
            "lastTransitionTime": "2025-01-01T00:05:00Z",
        },
    )
    obj["metadata"].update(
        uid="slice-uid",
        resourceVersion="42",
        creationTimestamp="2025-01-01T00:00:00Z",
        annotations={OWNER_ANNOTATION: "qwen3-tpu/qwen3-tpu-engine"},
        **metadata,
    )
    return obj


def test_a_slice_is_read_whole() -> None:
    obj = written({OWNER_UID_LABEL: UID, LABEL_INSTANCE_INDEX: "2", LABEL_POD_ORDINAL: "1"})
    assert gke.parse(obj) == SliceInfo(
        name="s-0-0-8f3a21c7",
        uid="slice-uid",
        resource_version="42",
        created=datetime(2025, 1, 1, tzinfo=UTC),
        owner_uid=UID,
        owner="qwen3-tpu/qwen3-tpu-engine",
        slot=Slot(2, 1),
        slice_type="tpu7x",
        topology="2x2x1",
        state="ACTIVE",
        status="True",
        message="ok",
        last_transition=datetime(2025, 1, 1, 0, 5, tzinfo=UTC),
        terminating=False,
        partitions=("p1",),
    )


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        pytest.param("2025-01-01T00:00:00Z", datetime(2025, 1, 1, tzinfo=UTC), id="Z"),
        pytest.param(
            "2025-06-30T23:59:58.5Z",
            datetime(2025, 6, 30, 23, 59, 58, 500000, tzinfo=UTC),
            id="frac",
        ),
        pytest.param(
            "2025-01-01T02:00:00+02:00", datetime(2025, 1, 1, tzinfo=UTC), id="offset, same instant"
        ),
        pytest.param("", None, id="empty"),
        pytest.param("yesterday", None, id="not a time"),
        pytest.param(1735689600, None, id="a number is not a time"),
        pytest.param(None, None, id="null"),
    ],
)
def test_created_and_last_transition_are_parsed_times(
    text: object, parsed: datetime | None
) -> None:
    obj = slice_obj(ready={"reason": "ACTIVE", "status": "True", "lastTransitionTime": text})
    obj["metadata"]["creationTimestamp"] = text
    info = gke.parse(obj)
    assert info.created == parsed and info.last_transition == parsed
    for t in (info.created, info.last_transition):
        assert t is None or t.tzinfo is not None


def test_the_transition_time_is_the_first_ready_conditions() -> None:
    obj = slice_obj(ready={"reason": "ACTIVATING", "status": "False"})
    obj["status"]["conditions"].append(
        {"type": "Ready", "reason": "ACTIVE", "lastTransitionTime": "2025-01-01T00:00:00Z"}
    )
    info = gke.parse(obj)
    assert (info.state, info.last_transition) == ("ACTIVATING", None)


@pytest.mark.parametrize(
    ("state", "ready"),
    [
        (SliceInfo("s", "u", state="ACTIVE", status="True", partitions=("p",)), True),
        (SliceInfo("s", "u", state="ACTIVE_DEGRADED", status="True", partitions=("p",)), True),
        (SliceInfo("s", "u", state="ACTIVE", status="False", partitions=("p",)), True),
        (SliceInfo("s", "u", state="ACTIVE", status="Unknown", partitions=("p",)), False),
        (
            SliceInfo("s", "u", state="ACTIVE", status="True", terminating=True, partitions=("p",)),
            False,
        ),
        (SliceInfo("s", "u", state="ACTIVATING", status="False", partitions=("p",)), False),
        (SliceInfo("s", "u"), False),
    ],
)
def test_ready_is_a_ready_state_not_terminating_and_not_unknown(
    state: SliceInfo, ready: bool
) -> None:
    assert state.ready(READY_STATES) is ready


def test_ready_states_are_the_configured_ones() -> None:
    info = SliceInfo("s", "u", state="ACTIVE", status="True")
    assert info.ready(("ACTIVE",)) and not info.ready(("RUNNING",)) and not info.ready(())
    assert not SliceInfo("s", "u", state="active", status="True").ready(READY_STATES)


# -- parse never trusts what it reads --------------------------------------------------------------

json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
KEYS = {
    "root": ["metadata", "spec", "status", "apiVersion", "kind"],
    "metadata": [
        "name",
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "labels",
        "annotations",
    ],
    "labels": [OWNER_UID_LABEL, LABEL_INSTANCE_INDEX, LABEL_POD_ORDINAL],
    "annotations": [OWNER_ANNOTATION],
    "spec": ["type", "topology", "partitionIds"],
    "status": ["conditions"],
    "condition": ["type", "reason", "status", "message", "lastTransitionTime"],
}


def shaped(level: str) -> st.SearchStrategy[Any]:
    """A dict with the keys a Slice has at ``level``, each holding any JSON value or, one level
    down, a dict of the right keys again: the Slice's own shape with anything anywhere."""
    children = {
        "root": {"metadata": "metadata", "spec": "spec", "status": "status"},
        "metadata": {"labels": "labels", "annotations": "annotations"},
    }.get(level, {})
    values: dict[str, st.SearchStrategy[Any]] = {}
    for key in KEYS[level]:
        options = [
            json_values,
            st.sampled_from(["Ready", "0", "1", "ACTIVE", "2025-01-01T00:00:00Z"]),
        ]
        if key in children:
            options.append(shaped(children[key]))
        if level == "status":
            options.append(st.lists(st.one_of(json_values, shaped("condition")), max_size=3))
        values[key] = st.one_of(*options)
    return st.fixed_dictionaries({}, optional=values)


@settings(deadline=None)
@given(st.one_of(st.dictionaries(st.text(max_size=8), json_values, max_size=4), shaped("root")))
def test_parse_never_raises_on_a_malformed_slice(obj: JSON) -> None:
    info = gke.parse(obj)
    assert_strings_and_partitions(info)
    for t in (info.created, info.last_transition):
        assert t is None or (isinstance(t, datetime) and t.tzinfo is not None)
    assert info.slot is None or (type(info.slot.instance) is int and type(info.slot.ordinal) is int)
    assert isinstance(info.terminating, bool)


def well_formed() -> JSON:
    """A Slice with every field ``parse`` reads, a deletion timestamp too."""
    return written(deletionTimestamp="2025-01-01T00:10:00Z")


#: Every field ``parse`` reads, by path, with the JSON type it must have. The Ready condition is
#: ``status.conditions[1]`` in ``well_formed``.
FIELDS: list[tuple[tuple[str | int, ...], type]] = [
    (("metadata",), dict),
    (("metadata", "name"), str),
    (("metadata", "uid"), str),
    (("metadata", "resourceVersion"), str),
    (("metadata", "creationTimestamp"), str),
    # metadata.deletionTimestamp: test_a_deletion_timestamp_of_the_wrong_type_reads_as_absent
    (("metadata", "labels"), dict),
    (("metadata", "labels", OWNER_UID_LABEL), str),
    (("metadata", "labels", LABEL_INSTANCE_INDEX), str),
    (("metadata", "labels", LABEL_POD_ORDINAL), str),
    (("metadata", "annotations"), dict),
    (("metadata", "annotations", OWNER_ANNOTATION), str),
    (("spec",), dict),
    (("spec", "type"), str),
    (("spec", "topology"), str),
    (("spec", "partitionIds"), list),
    (("status",), dict),
    (("status", "conditions"), list),
    (("status", "conditions", 1, "reason"), str),
    (("status", "conditions", 1, "status"), str),
    (("status", "conditions", 1, "message"), str),
    (("status", "conditions", 1, "lastTransitionTime"), str),
]


def _set(obj: JSON, path: tuple[str | int, ...], value: object) -> None:
    for step in path[:-1]:
        obj = obj[step]  # type: ignore[index]
    obj[path[-1]] = value  # type: ignore[index]


def _delete(obj: JSON, path: tuple[str | int, ...]) -> None:
    for step in path[:-1]:
        obj = obj[step]  # type: ignore[index]
    del obj[path[-1]]  # type: ignore[arg-type]


def _json_type(value: object) -> type:
    return bool if isinstance(value, bool) else type(value)


@settings(deadline=None)
@given(st.sampled_from(FIELDS), json_values)
def test_a_field_of_the_wrong_type_reads_as_absent(
    field: tuple[tuple[str | int, ...], type], value: object
) -> None:
    path, kind = field
    if _json_type(value) is kind:
        return
    wrong, absent = well_formed(), well_formed()
    _set(wrong, path, value)
    _delete(absent, path)
    assert gke.parse(wrong) == gke.parse(absent)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(1735689600, id="number"),
        pytest.param({"time": "2025-01-01T00:00:00Z"}, id="object"),
    ],
)
def test_a_deletion_timestamp_of_the_wrong_type_reads_as_absent(value: object) -> None:
    # gke.parse: "Fields of the wrong type read as absent"; a Slice read as terminating is
    # taken for deleted by loss (H3) and withholds its slot (E3).
    obj = slice_obj()
    obj["metadata"]["deletionTimestamp"] = value
    assert not gke.parse(obj).terminating


@pytest.mark.parametrize(
    ("value", "terminating"),
    [
        pytest.param("2025-01-01T00:00:00Z", True, id="a time"),
        pytest.param(None, False, id="null"),
        pytest.param("", False, id="empty"),
    ],
)
def test_a_slice_is_terminating_once_it_has_a_deletion_timestamp(
    value: object, terminating: bool
) -> None:
    obj = slice_obj()
    obj["metadata"]["deletionTimestamp"] = value
    assert gke.parse(obj).terminating is terminating


def test_a_non_string_partition_or_a_non_object_condition_is_skipped() -> None:
    obj = slice_obj(partitions=["p1"], ready={"reason": "ACTIVE", "status": "True"})
    obj["spec"]["partitionIds"] = [1, "p1", None, {"id": "p2"}, "p3"]
    obj["status"]["conditions"].insert(0, "Ready")
    obj["status"]["conditions"].insert(0, {"type": ["Ready"], "reason": "FAILED"})
    info = gke.parse(obj)
    assert info.partitions == ("p1", "p3")
    assert (info.state, info.status) == ("ACTIVE", "True")

"""The values the slice reconcilers decide from: an InferenceReplica and its pods read from JSON
(B3, B7, C1, D1, D2), the slots its stored Instance rows want (G3), and the slot of
each Instance about to get pods (D1). Reading never raises: a field of the wrong type reads as
absent."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ome.api.v1beta1 import (
    ANNOTATION_TPU_SLICE_PROVISIONING,
    LABEL_INFERENCE_REPLICA,
    LABEL_INSTANCE_INDEX,
    LABEL_POD_ORDINAL,
)
from ome.controllers.slices.model import Event, Pod, Replica, slots_of, wanted_slots
from ome.tpuslice.hosts import Host, instance_host_problems
from ome.tpuslice.naming import Slot
from test.unit.slicekit import HASH, JSON, NAME, NAMESPACE, TPU, TPU_TOLERATION, UID
from test.unit.slicekit import SLICE as SLICE_LABEL
from test.unit.slicekit import UNSCHEDULABLE_TOLERATION as UNSCHEDULABLE

#: Read here as the API names it.
OPT_IN = ANNOTATION_TPU_SLICE_PROVISIONING


def runner(
    name: str | None,
    *,
    opt_in: str | None = None,
    annotations: dict[str, Any] | None = None,
    tolerations: Any = None,
    size: Any = None,
    chips: int = 4,
) -> JSON:
    """A runner as written, with only the fields given: this file reads what is (not) there."""
    notes = dict(annotations or {})
    if opt_in is not None:
        notes[OPT_IN] = opt_in
    spec: JSON = {
        "containers": [{"name": "main", "resources": {"limits": {TPU: chips}}}],
        "nodeSelector": {"runner": str(name)},
    }
    if tolerations is not None:
        spec["tolerations"] = tolerations
    template: JSON = {"spec": spec}
    if notes:
        template["metadata"] = {"annotations": notes}
    r: JSON = {"template": template}
    if name is not None:
        r["name"] = name
    if size is not None:
        r["size"] = size
    return r


def replica(
    runners: list[JSON],
    rows: list[Any] | None = None,
    *,
    deleting: bool = False,
    name: str = NAME,
) -> JSON:
    """An InferenceReplica object to read (``slicekit.replica`` gives one already read)."""
    meta: JSON = {"name": name, "namespace": NAMESPACE, "uid": UID, "resourceVersion": "17"}
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    obj: JSON = {"metadata": meta, "spec": {"component": "engine", "runners": runners}}
    if rows is not None:
        obj["status"] = {"instanceStatuses": rows}
    return obj


SINGLE = [runner("default", opt_in="true")]
MULTI = [runner("leader", opt_in="true"), runner("worker", size=3)]

# -- Replica.from_json -----------------------------------------------------------------------------


def test_a_replica_is_read_whole() -> None:
    raw = replica(
        [
            runner(
                "leader",
                opt_in="true",
                annotations={"team.example.com/cost-center": "ml"},
                tolerations=[UNSCHEDULABLE],
            ),
            runner("worker", size=2, tolerations=[TPU_TOLERATION]),
        ],
        rows=[{"index": 0, "phase": "Ready"}],
    )
    r = Replica.from_json(raw)
    assert (r.namespace, r.name, r.uid, r.component, r.resource_version) == (
        NAMESPACE,
        NAME,
        UID,
        "engine",
        "17",
    )
    assert (r.multi_pod, r.opted_in, r.deleting) == (True, True, False)
    assert r.pod_specs == (
        raw["spec"]["runners"][0]["template"]["spec"],
        raw["spec"]["runners"][1]["template"]["spec"],
        raw["spec"]["runners"][1]["template"]["spec"],
    )
    assert r.tolerations == ((UNSCHEDULABLE,), (TPU_TOLERATION,), (TPU_TOLERATION,))
    assert dict(r.annotations) == {OPT_IN: "true", "team.example.com/cost-center": "ml"}
    assert r.rows == ({"index": 0, "phase": "Ready"},)
    assert r.raw is raw
    assert r.key == f"{NAMESPACE}/{NAME}"
    assert r.hash8 == HASH


@pytest.mark.parametrize(
    ("runners", "multi_pod"),
    [
        pytest.param([runner("default")], False, id="default"),
        pytest.param([runner(None)], False, id="unnamed is default"),
        pytest.param([runner("leader")], True, id="leader alone"),
        pytest.param([runner("leader"), runner("worker", size=1)], True, id="leader and worker"),
        pytest.param([runner("worker", size=0)], True, id="worker alone"),
        pytest.param([runner("default"), runner("other")], False, id="unknown runner"),
        pytest.param([], False, id="no runners"),
    ],
)
def test_an_instance_is_multi_pod_when_it_has_a_leader_or_worker(
    runners: list[JSON], multi_pod: bool
) -> None:
    assert Replica.from_json(replica(runners)).multi_pod is multi_pod


@pytest.mark.parametrize(
    ("runners", "opted_in"),
    [
        pytest.param([runner("default", opt_in="true")], True, id="default true"),
        pytest.param([runner(None, opt_in="true")], True, id="unnamed default true"),
        pytest.param([runner("default", opt_in="True")], False, id="True is not true"),
        pytest.param([runner("default", opt_in="yes")], False, id="yes"),
        pytest.param([runner("default")], False, id="no annotation"),
        pytest.param([runner("leader", opt_in="true"), runner("worker", size=1)], True, id="lead"),
        pytest.param(
            [runner("leader"), runner("worker", opt_in="true", size=1)], False, id="worker ignored"
        ),
        pytest.param(
            [runner("worker", size=1), runner("leader", opt_in="true")], True, id="first leader"
        ),
        pytest.param(
            [runner("default"), runner("leader", opt_in="true")], False, id="first decides"
        ),
        pytest.param([runner("worker", opt_in="true", size=1)], False, id="no leader"),
        pytest.param(
            [runner("default", annotations={OPT_IN: True})], False, id="boolean annotation"
        ),
    ],
)
def test_the_first_default_or_leader_runner_opts_in(runners: list[JSON], opted_in: bool) -> None:
    assert Replica.from_json(replica(runners)).opted_in is opted_in


@pytest.mark.parametrize(
    ("runners", "pods"),
    [
        pytest.param([runner("default")], ["default"], id="default"),
        pytest.param(
            [runner("leader"), runner("worker", size=3)],
            ["leader", "worker", "worker", "worker"],
            id="leader and three workers",
        ),
        pytest.param(
            [runner("worker", size=2), runner("leader")],
            ["worker", "worker", "leader"],
            id="runner order",
        ),
        pytest.param([runner("leader"), runner("worker", size=0)], ["leader"], id="size 0"),
        pytest.param([runner("leader"), runner("worker")], ["leader"], id="no size"),
        pytest.param([runner("leader"), runner("worker", size=-2)], ["leader"], id="negative"),
        pytest.param([runner("leader"), runner("worker", size="2")], ["leader"], id="text size"),
        pytest.param([runner("leader"), runner("worker", size=True)], ["leader"], id="bool size"),
        pytest.param([runner("default"), runner("sidecar")], ["default"], id="unknown runner"),
    ],
)
def test_an_instance_has_one_pod_spec_per_pod(runners: list[JSON], pods: list[str]) -> None:
    r = Replica.from_json(replica(runners))
    assert [spec["nodeSelector"]["runner"] for spec in r.pod_specs] == pods
    assert len(r.tolerations) == len(pods)


def test_each_pod_has_its_runners_tolerations() -> None:
    r = Replica.from_json(
        replica(
            [
                runner("leader", tolerations=[UNSCHEDULABLE, TPU_TOLERATION]),
                runner("worker", size=2),
                runner("worker", size=1, tolerations="all"),
            ]
        )
    )
    assert r.tolerations == ((UNSCHEDULABLE, TPU_TOLERATION), (), (), ())


def test_a_malformed_toleration_tolerates_nothing() -> None:
    # "a field of the wrong type reads as absent": a toleration that is not an object is no
    # toleration at all, not the empty toleration, which tolerates every value-less taint.
    r = Replica.from_json(replica([runner("default", tolerations=["junk", TPU_TOLERATION])]))
    cordoned = Host("gke-tpu-pool-node-3", unschedulable=True)
    assert instance_host_problems([cordoned], r.tolerations) == [
        "node gke-tpu-pool-node-3 is cordoned"
    ]


@pytest.mark.parametrize(
    ("runners", "annotations"),
    [
        pytest.param(
            [runner("default", opt_in="true", annotations={"a": "1"})],
            {OPT_IN: "true", "a": "1"},
            id="default",
        ),
        pytest.param(
            [runner("worker", size=1, annotations={"w": "1"}), runner("leader", annotations={})],
            {},
            id="leader, not the worker",
        ),
        pytest.param(
            [runner("leader", annotations={"a": "1"}), runner("leader", annotations={"b": "2"})],
            {"a": "1"},
            id="the first",
        ),
        pytest.param(
            [runner("default", annotations={"a": "1", "n": 2, "l": ["x"], "z": None})],
            {"a": "1"},
            id="only string values",
        ),
        pytest.param([runner("worker", size=1, annotations={"w": "1"})], {}, id="no leader"),
    ],
)
def test_the_annotations_are_the_first_default_or_leader_runners(
    runners: list[JSON], annotations: dict[str, str]
) -> None:
    r = Replica.from_json(replica(runners))
    assert dict(r.annotations) == annotations
    with pytest.raises(TypeError):
        r.annotations["x"] = "y"  # type: ignore[index]


def test_the_rows_are_the_stored_instance_statuses() -> None:
    rows = [{"index": 0, "phase": "Ready"}, "junk", {"index": 1}]
    r = Replica.from_json(replica(SINGLE, rows))
    assert r.rows == ({"index": 0, "phase": "Ready"}, {}, {"index": 1})
    assert Replica.from_json(replica(SINGLE)).rows == ()


@pytest.mark.parametrize(
    ("timestamp", "deleting"),
    [
        pytest.param("2025-01-01T00:00:00Z", True, id="deleting"),
        pytest.param(None, False, id="null"),
        pytest.param("", False, id="empty"),
    ],
)
def test_a_replica_is_deleting_once_it_has_a_deletion_timestamp(
    timestamp: str | None, deleting: bool
) -> None:
    raw = replica(SINGLE)
    raw["metadata"]["deletionTimestamp"] = timestamp
    assert Replica.from_json(raw).deleting is deleting
    assert Replica.from_json(replica(SINGLE)).deleting is False


def test_a_replica_names_its_slices_and_reads_them_back() -> None:
    r = Replica.from_json(replica(MULTI))
    assert r.slice_name(Slot(0, 0)) == f"{NAME}-0-0-{HASH}"
    assert r.slice_name(Slot(12, 1)) == f"{NAME}-12-1-{HASH}"
    assert r.slot_of(f"{NAME}-12-1-{HASH}") == Slot(12, 1)
    assert r.slot_of(f"{NAME}-12-1-8f3a21c7") is None
    assert r.slot_of("other-0-0-" + HASH) is None
    assert r.slot_of("") is None


def test_another_replica_of_the_same_name_does_not_read_our_names() -> None:
    ours = Replica.from_json(replica(SINGLE))
    theirs_raw = replica(SINGLE)
    theirs_raw["metadata"]["uid"] = "6a1f2b3c-0000-4000-8000-000000000002"
    theirs = Replica.from_json(theirs_raw)
    assert theirs.hash8 != ours.hash8
    assert theirs.slot_of(ours.slice_name(Slot(0, 0))) is None


def test_replicas_compare_by_identity() -> None:
    raw = replica(SINGLE)
    a, b = Replica.from_json(raw), Replica.from_json(raw)
    assert a == a and a != b


def test_an_empty_object_reads_as_an_empty_replica() -> None:
    r = Replica.from_json({})
    assert (r.namespace, r.name, r.uid, r.component, r.resource_version) == ("", "", "", "", "")
    assert (r.multi_pod, r.opted_in, r.deleting) == (False, False, False)
    assert (r.pod_specs, r.tolerations, dict(r.annotations), r.rows) == ((), (), {}, ())


json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True),
    st.text(max_size=6),
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)


def anything_or(*strategies: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(json_values, *strategies)


runner_objects = st.fixed_dictionaries(
    {},
    optional={
        "name": anything_or(st.sampled_from(["default", "leader", "worker", "other"])),
        # sizes stay small: B7 repeats the worker spec size times
        "size": st.one_of(st.integers(-3, 4), st.booleans(), st.text(max_size=2)),
        "template": anything_or(
            st.fixed_dictionaries(
                {},
                optional={
                    "metadata": anything_or(
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "annotations": anything_or(
                                    st.dictionaries(
                                        st.sampled_from([OPT_IN, "a"]),
                                        anything_or(st.just("true")),
                                    )
                                )
                            },
                        )
                    ),
                    "spec": anything_or(
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "tolerations": anything_or(st.lists(json_values, max_size=3))
                            },
                        )
                    ),
                },
            )
        ),
    },
)
small = st.one_of(st.integers(-2, 3), st.sampled_from(["0", "1", "Deleting", "Ready"]))
rows = anything_or(
    st.fixed_dictionaries(
        {},
        optional={
            "index": anything_or(small),
            "phase": anything_or(small),
            "activeOrdinal": anything_or(small),
            "operation": anything_or(
                st.fixed_dictionaries({}, optional={"surgeIndex": anything_or(small)})
            ),
        },
    )
)
replica_objects = st.fixed_dictionaries(
    {},
    optional={
        "metadata": anything_or(
            st.fixed_dictionaries(
                {},
                optional={
                    k: anything_or(st.text(max_size=6))
                    for k in ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp")
                },
            )
        ),
        "spec": anything_or(
            st.fixed_dictionaries(
                {},
                optional={
                    "component": json_values,
                    "runners": anything_or(st.lists(anything_or(runner_objects), max_size=3)),
                },
            )
        ),
        "status": anything_or(
            st.fixed_dictionaries(
                {}, optional={"instanceStatuses": anything_or(st.lists(rows, max_size=3))}
            )
        ),
    },
)


@settings(deadline=None)
@given(replica_objects)
def test_reading_a_replica_never_raises(obj: JSON) -> None:
    r = Replica.from_json(obj)
    for text in (r.namespace, r.name, r.uid, r.component, r.resource_version):
        assert isinstance(text, str)
    assert len(r.tolerations) == len(r.pod_specs)
    assert all(isinstance(s, dict) for s in r.pod_specs)
    assert all(isinstance(t, dict) for pod in r.tolerations for t in pod)
    assert all(isinstance(v, str) for v in r.annotations.values())
    assert all(isinstance(row, dict) for row in r.rows)
    assert isinstance(wanted_slots(r), frozenset)


# -- Pod.from_json ---------------------------------------------------------------------------------


def pod(
    *,
    node: str | None = "gke-tpu-pool-node-3",
    selector: str | None = f"{NAME}-0-0-{HASH}",
    phase: str = "Running",
    deleting: bool = False,
    containers: list[Any] | None = None,
    labels: dict[str, Any] | None = None,
) -> JSON:
    spec: JSON = {
        "containers": [{"name": "main", "resources": {"limits": {TPU: 4}}}]
        if containers is None
        else containers
    }
    if node is not None:
        spec["nodeName"] = node
    if selector is not None:
        spec["nodeSelector"] = {SLICE_LABEL: selector, "other": "x"}
    meta: JSON = {
        "name": f"{NAME}-0-0",
        "namespace": NAMESPACE,
        "uid": "pod-uid",
        "creationTimestamp": "2025-01-01T00:00:00Z",
        "labels": {
            LABEL_INFERENCE_REPLICA: NAME,
            LABEL_INSTANCE_INDEX: "0",
            LABEL_POD_ORDINAL: "1",
        }
        if labels is None
        else labels,
    }
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:05:00Z"
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def read(obj: JSON) -> Pod:
    return Pod.from_json(obj, SLICE_LABEL, TPU)


def test_a_pod_is_read_whole() -> None:
    assert read(pod()) == Pod(
        namespace=NAMESPACE,
        name=f"{NAME}-0-0",
        uid="pod-uid",
        node="gke-tpu-pool-node-3",
        slice_name=f"{NAME}-0-0-{HASH}",
        created=datetime(2025, 1, 1, tzinfo=UTC),
        terminating=False,
        terminal=False,
        chips=4,
        replica=NAME,
        instance=0,
        ordinal=1,
    )
    assert read(pod()).ref == f"{NAMESPACE}/{NAME}-0-0"


def test_an_unbound_pod_without_a_slice_selector_is_on_no_node_and_no_slice() -> None:
    p = read(pod(node=None, selector=None))
    assert (p.node, p.slice_name) == ("", "")


def test_the_slice_selector_is_read_under_the_configured_label() -> None:
    obj = pod(selector="s-0-0-8f3a21c7")
    assert Pod.from_json(obj, SLICE_LABEL, TPU).slice_name == "s-0-0-8f3a21c7"
    assert Pod.from_json(obj, "example.com/slice", TPU).slice_name == ""
    assert Pod.from_json(obj, "other", TPU).slice_name == "x"


@pytest.mark.parametrize(
    ("phase", "terminal"),
    [
        ("Succeeded", True),
        ("Failed", True),
        ("Running", False),
        ("Pending", False),
        ("Unknown", False),
        ("", False),
    ],
)
def test_a_pod_that_succeeded_or_failed_is_terminal(phase: str, terminal: bool) -> None:
    assert read(pod(phase=phase)).terminal is terminal


def test_a_pod_with_a_deletion_timestamp_is_terminating_and_still_holds() -> None:
    p = read(pod(deleting=True))
    assert p.terminating and not p.terminal and p.chips == 4
    assert not read(pod()).terminating


def c(limit: Any = None, request: Any = None, resource: str = TPU) -> JSON:
    resources: JSON = {}
    if limit is not None:
        resources["limits"] = {resource: limit}
    if request is not None:
        resources["requests"] = {resource: request}
    return {"name": "c", "resources": resources}


@pytest.mark.parametrize(
    ("containers", "chips"),
    [
        pytest.param([c(4)], 4, id="limit"),
        pytest.param([c(None, 4)], 4, id="request without limit"),
        pytest.param([c(4, 8)], 4, id="limit before request"),
        pytest.param([c("2"), c(2)], 4, id="sum of containers"),
        pytest.param([c("1500m")], 2, id="rounded up"),
        pytest.param([c(4, resource="cpu")], 0, id="other resource"),
        pytest.param([], 0, id="no containers"),
        pytest.param([c("many")], 1, id="a quantity that does not parse holds"),
        pytest.param([c(-1)], 1, id="a negative quantity holds"),
        pytest.param([c(4), c(None, [4])], 1, id="one bad quantity of many holds"),
    ],
)
def test_a_pods_chips_are_its_containers_limits_or_requests(
    containers: list[JSON], chips: int
) -> None:
    assert read(pod(containers=containers)).chips == chips


def test_init_containers_hold_no_chips() -> None:
    obj = pod(containers=[])
    obj["spec"]["initContainers"] = [c(4)]
    assert read(obj).chips == 0


def test_chips_are_counted_under_the_configured_resource() -> None:
    obj = pod(containers=[c(4, resource="example.com/tpu")])
    assert Pod.from_json(obj, SLICE_LABEL, "example.com/tpu").chips == 4
    assert Pod.from_json(obj, SLICE_LABEL, TPU).chips == 0


@pytest.mark.parametrize(
    ("labels", "replica_name", "instance", "ordinal"),
    [
        pytest.param(
            {LABEL_INFERENCE_REPLICA: NAME, LABEL_INSTANCE_INDEX: "3", LABEL_POD_ORDINAL: "0"},
            NAME,
            3,
            0,
            id="labelled",
        ),
        pytest.param({}, "", None, None, id="no labels"),
        pytest.param(
            {LABEL_INFERENCE_REPLICA: 1, LABEL_INSTANCE_INDEX: "03", LABEL_POD_ORDINAL: 1},
            "",
            None,
            None,
            id="malformed",
        ),
    ],
)
def test_a_pod_names_its_replica_instance_and_ordinal(
    labels: JSON, replica_name: str, instance: int | None, ordinal: int | None
) -> None:
    p = read(pod(labels=labels))
    assert (p.replica, p.instance, p.ordinal) == (replica_name, instance, ordinal)


def test_a_pod_with_a_malformed_phase_is_read_as_not_terminal() -> None:
    # "Parsing never raises on a malformed object: a field of the wrong type reads as absent."
    for phase in (["Failed"], {"phase": "Failed"}):
        obj = pod()
        obj["status"]["phase"] = phase
        assert read(obj).terminal is False


quantities = st.one_of(
    json_values, st.sampled_from(["4", "1500m", "2k", "x", "-1", "1e400", "NaN", "Infinity"])
)
pod_objects = st.fixed_dictionaries(
    {},
    optional={
        "metadata": anything_or(
            st.fixed_dictionaries(
                {},
                optional={
                    "name": json_values,
                    "namespace": json_values,
                    "uid": json_values,
                    "creationTimestamp": anything_or(st.just("2025-01-01T00:00:00Z")),
                    "deletionTimestamp": json_values,
                    "labels": anything_or(
                        st.dictionaries(
                            st.sampled_from(
                                [LABEL_INFERENCE_REPLICA, LABEL_INSTANCE_INDEX, LABEL_POD_ORDINAL]
                            ),
                            anything_or(st.sampled_from(["0", "1", "01"])),
                        )
                    ),
                },
            )
        ),
        "spec": anything_or(
            st.fixed_dictionaries(
                {},
                optional={
                    "nodeName": json_values,
                    "nodeSelector": anything_or(
                        st.dictionaries(st.sampled_from([SLICE_LABEL, "x"]), json_values)
                    ),
                    "containers": anything_or(
                        st.lists(
                            anything_or(
                                st.builds(
                                    lambda limit, request: {
                                        "resources": {
                                            "limits": {TPU: limit},
                                            "requests": {TPU: request},
                                        }
                                    },
                                    quantities,
                                    quantities,
                                )
                            ),
                            max_size=3,
                        )
                    ),
                },
            )
        ),
        "status": anything_or(
            st.fixed_dictionaries({}, optional={"phase": anything_or(st.just("Failed"))})
        ),
    },
)


@settings(deadline=None)
@given(pod_objects)
def test_reading_a_pod_never_raises(obj: JSON) -> None:
    p = read(obj)
    for text in (p.namespace, p.name, p.uid, p.node, p.slice_name, p.replica):
        assert isinstance(text, str)
    assert isinstance(p.chips, int) and p.chips >= 0
    assert p.instance is None or p.instance >= 0
    assert p.ordinal is None or p.ordinal >= 0


def test_an_event_is_recorded_on_the_service_unless_said_otherwise() -> None:
    assert Event("SliceLost", "m").on == "service"
    assert Event("SliceReleaseDeferred", "m", on="replica").on == "replica"


# -- G3: the slots the stored rows want ------------------------------------------------------------


def wanted(runners: list[JSON], rows: list[Any], *, deleting: bool = False) -> set[Slot]:
    return set(wanted_slots(Replica.from_json(replica(runners, rows, deleting=deleting))))


OP = {"id": "op-1", "type": "Update"}


@pytest.mark.parametrize(
    ("runners", "rows", "slots"),
    [
        pytest.param(MULTI, [{"index": 0}, {"index": 2}], {Slot(0, 0), Slot(2, 0)}, id="multi"),
        pytest.param(
            MULTI,
            [{"index": 0, "activeOrdinal": 1, "operation": OP}],
            {Slot(0, 0)},
            id="multi ignores ordinals",
        ),
        pytest.param(
            MULTI,
            [{"index": 0, "operation": {**OP, "surgeIndex": 3}}],
            {Slot(0, 0), Slot(3, 0)},
            id="multi with a surge index",
        ),
        pytest.param(
            MULTI,
            [{"index": 0, "operation": {**OP, "surgeIndex": -1}}],
            {Slot(0, 0)},
            id="negative surge index",
        ),
        pytest.param(
            MULTI,
            [{"index": 0, "operation": {**OP, "surgeIndex": "3"}}],
            {Slot(0, 0)},
            id="text surge index",
        ),
        pytest.param(SINGLE, [{"index": 0}], {Slot(0, 0)}, id="single, active 0 by default"),
        pytest.param(SINGLE, [{"index": 4, "activeOrdinal": 1}], {Slot(4, 1)}, id="active 1"),
        pytest.param(
            SINGLE,
            [{"index": 4, "activeOrdinal": 0}, {"index": 5}],
            {Slot(4, 0), Slot(5, 0)},
            id="two instances",
        ),
        pytest.param(
            SINGLE,
            [{"index": 2, "activeOrdinal": 1, "operation": OP}],
            {Slot(2, 0), Slot(2, 1)},
            id="single with an operation wants both ordinals",
        ),
        pytest.param(
            SINGLE,
            [{"index": 2, "operation": {**OP, "surgeIndex": 7}}],
            {Slot(2, 0), Slot(2, 1)},
            id="single ignores the surge index",
        ),
        pytest.param(
            SINGLE, [{"index": 2, "activeOrdinal": 1, "operation": {}}], {Slot(2, 1)}, id="op {}"
        ),
        pytest.param(
            SINGLE, [{"index": 2, "activeOrdinal": 1, "operation": None}], {Slot(2, 1)}, id="null"
        ),
        pytest.param(SINGLE, [{"index": 2, "activeOrdinal": 2}], {Slot(2, 0)}, id="active 2"),
        pytest.param(SINGLE, [{"index": 2, "activeOrdinal": "1"}], {Slot(2, 0)}, id="text"),
        pytest.param(
            SINGLE,
            [{"index": 0, "phase": "Deleting", "operation": OP}, {"index": 1, "phase": "Ready"}],
            {Slot(1, 0)},
            id="a deleting row wants nothing",
        ),
        pytest.param(
            MULTI,
            [{"index": 0, "phase": "Deleting", "operation": {**OP, "surgeIndex": 3}}],
            set(),
            id="a deleting row's surge index is not wanted",
        ),
        pytest.param(SINGLE, [], set(), id="no rows"),
        pytest.param(
            SINGLE,
            ["junk", {"index": "0"}, {"index": -1}, {"index": None}, {}, {"index": 1.0}, None],
            set(),
            id="malformed rows are skipped",
        ),
        pytest.param(
            SINGLE,
            [{"index": 0, "operation": "Update"}, {"index": 1, "operation": ["x"]}],
            {Slot(0, 0), Slot(1, 0)},
            id="a malformed operation reads as none",
        ),
    ],
)
def test_the_stored_rows_want_their_slots(
    runners: list[JSON], rows: list[Any], slots: set[Slot]
) -> None:
    assert wanted(runners, rows) == slots


def test_rows_stored_as_something_else_want_nothing() -> None:
    raw = replica(SINGLE)
    raw["status"] = {"instanceStatuses": {"0": {"index": 0}}}
    assert wanted_slots(Replica.from_json(raw)) == frozenset()


@pytest.mark.parametrize("runners", [SINGLE, MULTI], ids=["single", "multi"])
def test_a_deleting_replica_wants_nothing(runners: list[JSON]) -> None:
    rows = [{"index": 0, "operation": {**OP, "surgeIndex": 1}}, {"index": 1}]
    assert wanted(runners, rows, deleting=True) == set()
    assert wanted(runners, rows) != set()


def test_a_boolean_is_not_an_index_or_an_ordinal() -> None:
    # JSON true is not an integer: it reads as absent, as every other field of the wrong type.
    assert wanted(SINGLE, [{"index": True}, {"index": False}]) == set()
    assert wanted(SINGLE, [{"index": 0, "activeOrdinal": True}]) == {Slot(0, 0)}
    slots = wanted_slots(Replica.from_json(replica(SINGLE, [{"index": 0, "activeOrdinal": True}])))
    assert all(type(s.instance) is int and type(s.ordinal) is int for s in slots)
    assert wanted(MULTI, [{"index": 0, "operation": {**OP, "surgeIndex": True}}]) == {Slot(0, 0)}


# -- D1: the slot of each Instance about to get pods -----------------------------------------------


def new_pod(ordinal: Any) -> JSON:
    return {"metadata": {"labels": {LABEL_POD_ORDINAL: ordinal}}}


@pytest.mark.parametrize(
    ("runners", "pending", "slots"),
    [
        pytest.param(SINGLE, {0: [new_pod("0")]}, {0: Slot(0, 0)}, id="single, ordinal 0"),
        pytest.param(SINGLE, {3: [new_pod("1")]}, {3: Slot(3, 1)}, id="single, surge ordinal 1"),
        pytest.param(
            SINGLE,
            {0: [new_pod("1"), new_pod("0")]},
            {0: Slot(0, 1)},
            id="the first pod's ordinal",
        ),
        pytest.param(
            MULTI,
            {1: [new_pod("0"), new_pod("1"), new_pod("2")]},
            {1: Slot(1, 0)},
            id="multi shares (i, 0)",
        ),
        pytest.param(MULTI, {1: [new_pod("2")]}, {1: Slot(1, 0)}, id="multi, a worker first"),
        pytest.param(SINGLE, {2: []}, {2: Slot(2, 0)}, id="no pods"),
        pytest.param(SINGLE, {2: [new_pod("01")]}, {2: Slot(2, 0)}, id="bad ordinal"),
        pytest.param(SINGLE, {2: [new_pod(1)]}, {2: Slot(2, 0)}, id="number ordinal"),
        pytest.param(SINGLE, {2: [{}]}, {2: Slot(2, 0)}, id="no labels"),
        pytest.param(
            SINGLE,
            {0: [new_pod("1")], 4: [new_pod("0")]},
            {0: Slot(0, 1), 4: Slot(4, 0)},
            id="each instance",
        ),
        pytest.param(SINGLE, {}, {}, id="none pending"),
    ],
)
def test_an_instance_about_to_get_pods_has_the_slot_of_its_first_pod(
    runners: list[JSON], pending: dict[int, list[JSON]], slots: dict[int, Slot]
) -> None:
    assert slots_of(Replica.from_json(replica(runners)), pending) == slots


def test_the_pods_of_an_instance_may_be_any_iterable() -> None:
    r = Replica.from_json(replica(SINGLE))
    assert slots_of(r, {0: iter([new_pod("1")]), 1: ()}) == {0: Slot(0, 1), 1: Slot(1, 0)}


@pytest.mark.parametrize(
    ("runners", "replicas", "rows", "slots"),
    [
        # Found by the soak: a multi-pod surge moves the Instance to its surge index, so the
        # one Instance of replicas=1 lives at index 1; index 0 is nobody's, and its Slice leaked.
        pytest.param(MULTI, 1, [{"index": 1, "phase": "Ready"}], {Slot(1, 0)}, id="moved"),
        pytest.param(MULTI, 2, [{"index": 1}], {Slot(1, 0), Slot(0, 0)}, id="one more"),
        pytest.param(MULTI, 2, [], {Slot(0, 0), Slot(1, 0)}, id="none yet"),
        pytest.param(
            MULTI,
            2,
            [{"index": 0, "operation": {**OP, "surgeIndex": 1}}],
            {Slot(0, 0), Slot(1, 0), Slot(2, 0)},
            id="the new one goes past the surge target",
        ),
        pytest.param(SINGLE, 1, [{"index": 2, "activeOrdinal": 1}], {Slot(2, 1)}, id="single"),
    ],
)
def test_instances_without_a_row_want_the_indexes_the_plan_gives_them(
    runners: list[JSON], replicas: int, rows: list[Any], slots: set[Slot]
) -> None:
    """G3 as the Instance plan scales: as many Instances as ``spec.replicas``, counting the
    rows there are, the missing ones at the lowest free indexes (not a row's, nor a surge
    target's)."""
    obj = replica(runners, rows)
    obj["spec"]["replicas"] = replicas
    assert set(wanted_slots(Replica.from_json(obj))) == slots

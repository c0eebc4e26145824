"""Host availability (F1, F2): whether the pods of an Instance can use a host of their
Slice, with every message verbatim; a host is read from its Node by ``Host.from_node``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ome.tpuslice.hosts import Host, host_problems, instance_host_problems, tolerates
from test.unit.slicekit import JSON, TPU_TOLERATION
from test.unit.slicekit import SLICE as SLICE_LABEL
from test.unit.slicekit import UNSCHEDULABLE_TOLERATION as UNSCHEDULABLE


def node(
    ready: str | None = "True", cordoned: bool = False, name: str = "gke-tpu-pool-node-3"
) -> JSON:
    obj: JSON = {"metadata": {"name": name}, "spec": {}, "status": {"conditions": []}}
    if cordoned:
        obj["spec"]["unschedulable"] = True
    if ready is not None:
        obj["status"]["conditions"] = [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": ready},
        ]
    return obj


N3 = "node gke-tpu-pool-node-3"

# -- F1, F2 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "tolerations", "problems"),
    [
        pytest.param(node(), [TPU_TOLERATION], [], id="healthy"),
        pytest.param(node(cordoned=True), [TPU_TOLERATION], [f"{N3} is cordoned"], id="cordoned"),
        pytest.param(node(ready="Unknown"), [], [f"{N3} is unreachable"], id="unreachable"),
        pytest.param(node(ready="False"), [], [f"{N3} is not ready"], id="not ready"),
        pytest.param(node(ready=None), [], [f"{N3} is not ready"], id="no Ready condition"),
        pytest.param(
            node(ready="False", cordoned=True),
            [],
            [f"{N3} is cordoned", f"{N3} is not ready"],
            id="sorted",
        ),
        pytest.param(
            node(ready="Unknown", cordoned=True),
            [],
            [f"{N3} is cordoned", f"{N3} is unreachable"],
            id="cordoned and unreachable",
        ),
        pytest.param(
            node(cordoned=True),
            [UNSCHEDULABLE],
            [],
            id="cordon tolerated",
        ),
        pytest.param(
            node(cordoned=True),
            [{**UNSCHEDULABLE, "effect": "NoExecute"}],
            [f"{N3} is cordoned"],
            id="other effect does not tolerate",
        ),
        pytest.param(
            node(ready="Unknown", cordoned=True),
            [{"operator": "Exists"}],
            [],
            id="empty key and effect tolerate all",
        ),
        pytest.param(
            node(ready="Unknown"),
            [{"key": "node.kubernetes.io/unreachable", "operator": "Exists"}],
            [],
            id="unreachable tolerated without effect",
        ),
        pytest.param(
            node(ready="Unknown"),
            [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
            [f"{N3} is unreachable"],
            id="not-ready does not tolerate unreachable",
        ),
        pytest.param(
            node(ready="False"),
            [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}],
            [],
            id="Equal with empty value matches the empty taint value",
        ),
        pytest.param(
            node(ready="False"),
            [{"key": "node.kubernetes.io/not-ready", "operator": "Equal", "value": "x"}],
            [f"{N3} is not ready"],
            id="Equal with another value",
        ),
        pytest.param(
            node(ready="False"),
            [{"key": "node.kubernetes.io/not-ready", "operator": "Lt", "value": "1"}],
            [f"{N3} is not ready"],
            id="unknown operator never matches",
        ),
    ],
)
def test_a_host_the_pods_cannot_use_says_why(
    obj: JSON, tolerations: list[JSON], problems: list[str]
) -> None:
    assert host_problems(Host.from_node(obj), tolerations) == problems


def test_tolerations_may_be_any_iterable_read_once() -> None:
    host = Host.from_node(node(cordoned=True))
    assert host_problems(host, iter([TPU_TOLERATION, UNSCHEDULABLE])) == []
    assert host_problems(host, (t for t in [TPU_TOLERATION])) == [f"{N3} is cordoned"]


@pytest.mark.parametrize(
    ("toleration", "key", "value", "effect", "tolerated"),
    [
        pytest.param({"operator": "Exists"}, "k", "v", "NoExecute", True, id="exists all"),
        pytest.param({"key": "k", "operator": "Exists"}, "k", "v", "NoSchedule", True, id="key"),
        pytest.param({"key": "k", "operator": "Exists"}, "j", "", "NoSchedule", False, id="other"),
        pytest.param({"key": "k", "value": "v"}, "k", "v", "NoSchedule", True, id="equal"),
        pytest.param({"key": "k", "value": "v"}, "k", "w", "NoSchedule", False, id="not equal"),
        pytest.param(
            {"key": "k", "operator": "Gt", "value": "1"}, "k", "2", "NoSchedule", False, id="Gt"
        ),
        pytest.param(
            {"key": 1, "operator": "Exists"},
            "k",
            "",
            "NoSchedule",
            True,
            id="a key of the wrong type reads as absent",
        ),
    ],
)
def test_toleration_matching_follows_kubernetes(
    toleration: JSON, key: str, value: str, effect: str, tolerated: bool
) -> None:
    assert tolerates([toleration], key, value, effect) is tolerated


# -- Host.from_node --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "host"),
    [
        pytest.param(
            node(),
            Host("gke-tpu-pool-node-3", "", unschedulable=False, ready="True"),
            id="healthy",
        ),
        pytest.param(
            node(ready="Unknown", cordoned=True),
            Host("gke-tpu-pool-node-3", "", unschedulable=True, ready="Unknown"),
            id="cordoned, unreachable",
        ),
        pytest.param(
            node(ready=None), Host("gke-tpu-pool-node-3", "", ready=""), id="no Ready condition"
        ),
        pytest.param({}, Host("", "", ready=""), id="empty"),
        pytest.param(
            {
                "metadata": [],
                "spec": {"unschedulable": "true"},
                "status": {"conditions": ["Ready", {"type": "Ready", "status": 1}]},
            },
            Host("", "", unschedulable=False, ready=""),
            id="wrong types read as absent",
        ),
        pytest.param(
            {
                "metadata": {"name": "n"},
                "status": {
                    "conditions": [
                        {"type": "Ready", "status": "False"},
                        {"type": "Ready", "status": "True"},
                    ]
                },
            },
            Host("n", ready="False"),
            id="the first Ready condition",
        ),
    ],
)
def test_a_host_is_read_from_its_node(obj: JSON, host: Host) -> None:
    assert Host.from_node(obj, SLICE_LABEL) == host


@pytest.mark.parametrize(
    ("labels", "slice_label", "slice_name"),
    [
        pytest.param({SLICE_LABEL: "s-0-0-8f3a21c7"}, SLICE_LABEL, "s-0-0-8f3a21c7", id="labelled"),
        pytest.param({"other": "x"}, SLICE_LABEL, "", id="no slice label"),
        pytest.param({SLICE_LABEL: "s-0-0-8f3a21c7"}, "", "", id="no label to read"),
        pytest.param({SLICE_LABEL: 7}, SLICE_LABEL, "", id="not a string"),
        pytest.param("labels", SLICE_LABEL, "", id="labels not a map"),
    ],
)
def test_a_host_names_the_slice_its_slice_label_gives(
    labels: object, slice_label: str, slice_name: str
) -> None:
    obj = node()
    obj["metadata"]["labels"] = labels
    assert Host.from_node(obj, slice_label).slice_name == slice_name


def test_without_a_slice_label_a_host_names_no_slice() -> None:
    obj = node()
    obj["metadata"]["labels"] = {SLICE_LABEL: "s-0-0-8f3a21c7"}
    assert Host.from_node(obj).slice_name == ""


# -- F for a whole Instance ------------------------------------------------------------------------

CORDONED = Host("gke-tpu-pool-node-3", "s", unschedulable=True)
UNREACHABLE = Host("gke-tpu-pool-node-1", "s", ready="Unknown")
HEALTHY = Host("gke-tpu-pool-node-2", "s")
NOT_READY_TOLERATION = {"key": "node.kubernetes.io/not-ready", "operator": "Exists"}


def test_a_host_counts_as_usable_only_if_every_pod_tolerates_it() -> None:
    leader, worker = [UNSCHEDULABLE], [TPU_TOLERATION]
    assert instance_host_problems([CORDONED], [leader, worker]) == [f"{N3} is cordoned"]
    assert instance_host_problems([CORDONED], [leader, leader]) == []
    assert instance_host_problems([CORDONED], [worker, leader]) == [f"{N3} is cordoned"]


def test_a_problem_several_pods_have_appears_once() -> None:
    assert instance_host_problems([CORDONED], [[], [TPU_TOLERATION], []]) == [f"{N3} is cordoned"]


def test_problems_of_all_hosts_are_sorted() -> None:
    problems = instance_host_problems(
        [CORDONED, HEALTHY, UNREACHABLE, Host("gke-tpu-pool-node-3", ready="False")],
        [[], [UNSCHEDULABLE]],
    )
    assert problems == [
        "node gke-tpu-pool-node-1 is unreachable",
        f"{N3} is cordoned",
        f"{N3} is not ready",
    ]


def test_each_pods_problems_add_up() -> None:
    host = Host("gke-tpu-pool-node-3", unschedulable=True, ready="False")
    assert instance_host_problems([host], [[UNSCHEDULABLE], [NOT_READY_TOLERATION]]) == [
        f"{N3} is cordoned",
        f"{N3} is not ready",
    ]


def test_an_instance_without_pods_tolerates_nothing() -> None:
    assert instance_host_problems([CORDONED, UNREACHABLE], []) == [
        "node gke-tpu-pool-node-1 is unreachable",
        f"{N3} is cordoned",
    ]
    assert instance_host_problems([CORDONED], [[]]) == [f"{N3} is cordoned"]


def test_no_hosts_have_no_problems() -> None:
    assert instance_host_problems([], [[], [UNSCHEDULABLE]]) == []
    assert instance_host_problems([HEALTHY], [[], []]) == []


def test_hosts_and_tolerations_may_be_iterables_read_once() -> None:
    hosts = iter([CORDONED, UNREACHABLE])
    pods = (iter(t) for t in [[UNSCHEDULABLE], [TPU_TOLERATION]])
    assert instance_host_problems(hosts, pods) == [
        "node gke-tpu-pool-node-1 is unreachable",
        f"{N3} is cordoned",
    ]


toleration_sets = st.lists(
    st.sampled_from(
        [
            TPU_TOLERATION,
            UNSCHEDULABLE,
            NOT_READY_TOLERATION,
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists"},
            {"operator": "Exists"},
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoExecute"},
        ]
    ),
    max_size=3,
)
hosts = st.builds(
    Host,
    st.sampled_from(["node-a", "node-b", "node-c"]),
    st.just("s"),
    st.booleans(),
    st.sampled_from(["True", "False", "Unknown", ""]),
)


@settings(deadline=None)
@given(st.lists(hosts, max_size=4), st.lists(toleration_sets, max_size=4))
def test_an_instances_problems_are_the_union_of_each_pods_on_each_host(
    host_list: list[Host], pods: list[list[JSON]]
) -> None:
    problems = instance_host_problems(host_list, pods)
    union = {p for h in host_list for t in pods or [[]] for p in host_problems(h, t)}
    assert problems == sorted(union)
    for tolerations in pods:
        assert set(instance_host_problems(host_list, [tolerations])) <= set(problems)

"""The demand of an Instance, with the exact messages of B3 to B7 and C1."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ome.api.v1beta1 import ANNOTATION_TPU_SLICE_PROVISIONING
from ome.tpuslice.placement import (
    OPT_IN_ANNOTATION,
    Demand,
    DemandError,
    E,
    Shape,
    demand,
    instance_pod_specs,
    opted_in,
    pod_chips,
    pod_shape,
    tile,
)
from ome.tpuslice.shape import ShapeError, Topology, parse_topology
from ome.tpuslice.types import Accelerator, Config, SliceSettings

JSON = dict[str, Any]

ACC = "cloud.google.com/gke-tpu-accelerator"
TOPO = "cloud.google.com/gke-tpu-topology"
SLICE = "cloud.google.com/gke-tpu-slice"
TPU = "google.com/tpu"

TPU7X = Accelerator("tpu7x", "tpu7x", 4, ("2x2x1", "2x2x2"))
CONFIG = Config(
    chip_resource=TPU,
    accelerator_label=ACC,
    topology_label=TOPO,
    slice_label=SLICE,
    provision_only_key="cloud.google.com/gke-accelerator-topology-mode",
    provision_only_value="PROVISION_ONLY",
    accelerators={"tpu7x": TPU7X},
    slice=SliceSettings("cloud.google.com/slice-owner-kind", "cloud.google.com/slice-owner-name"),
)
PROVISION_ONLY = {"tpu7x"}


def container(
    limit: object = None, request: object = None, resource: str = TPU, name: str = "c"
) -> JSON:
    resources: JSON = {}
    if limit is not None:
        resources["limits"] = {resource: limit}
    if request is not None:
        resources["requests"] = {resource: request}
    return {"name": name, "resources": resources}


def pod(
    chips: object = 4,
    topology: str | None = "2x2x1",
    accelerator: str | None = "tpu7x",
    **selector: str,
) -> JSON:
    node_selector = dict(selector)
    if topology is not None:
        node_selector[TOPO] = topology
    if accelerator is not None:
        node_selector[ACC] = accelerator
    return {"nodeSelector": node_selector, "containers": [container(chips, chips)]}


# -- B3 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("containers", "chips"),
    [
        ([container(4)], 4),
        ([container("4")], 4),
        ([container("1500m")], 2),
        ([container("2k")], 2000),
        ([container("100m")], 1),
        ([container(0)], 0),
        ([container(request=4)], 4),
        ([container(limit=4, request=2)], 4),
        ([container(limit=2, request=4)], 2),
        ([container(4), container(request="1500m")], 6),
        ([container(4, resource="nvidia.com/gpu")], 0),
        ([{"name": "no-resources"}], 0),
        ([], 0),
    ],
)
def test_a_pod_requests_its_containers_limits_or_requests_rounded_up(
    containers: list[JSON], chips: int
) -> None:
    assert pod_chips({"containers": containers}, TPU) == chips


def test_init_containers_do_not_count() -> None:
    spec = {"initContainers": [container(4)], "containers": [container(2)]}
    assert pod_chips(spec, TPU) == 2


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            container("four"),
            'container "c": google.com/tpu limit "four" is not a non-negative quantity',
        ),
        (
            container(request="-4"),
            'container "c": google.com/tpu request "-4" is not a non-negative quantity',
        ),
        (
            {"resources": {"limits": {TPU: [4]}}},
            'container 0: google.com/tpu limit "[4]" is not a non-negative quantity',
        ),
    ],
)
def test_a_quantity_that_is_not_one_is_named(item: JSON, message: str) -> None:
    with pytest.raises(ShapeError) as e:
        pod_chips({"containers": [item]}, TPU)
    assert str(e.value) == message


# -- B4 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topology", "cph", "pods"),
    [("2x2x1", 4, [4]), ("2x2x1", 4, [2, 2]), ("2x2x1", 4, [1, 1, 1, 1]), ("2x2x2", 4, [4, 4])],
)
def test_pods_that_fill_the_topology_exactly_fit(topology: str, cph: int, pods: list[int]) -> None:
    tile(parse_topology(topology), cph, pods)  # raises when they do not


@pytest.mark.parametrize(
    ("topology", "cph", "pods", "message"),
    [
        ("1x3", 4, [3], "topology 1x3 is 3 chips, not a whole number of 4-chip hosts"),
        ("2x2x1", 4, [], "topology 2x2x1 needs 4 chips but no pod requests any"),
        (
            "2x2x2",
            4,
            [4, 0],
            "pod 1 requests no chips; every pod on a 2x2x2 slice must request chips",
        ),
        (
            "2x2x2",
            4,
            [0, 0],
            "pod 0 requests no chips; every pod on a 2x2x2 slice must request chips",
        ),
        (
            "2x2x2",
            4,
            [4, 2, 2],
            "pods request 4 and 2 chips; every pod on a slice must request the same count",
        ),
        ("2x2x2", 4, [8], "a pod requests 8 chips but a host has 4; a pod cannot span hosts"),
        ("2x2x2", 4, [3, 3], "3 chips per pod do not divide a 4-chip host exactly"),
        (
            "2x2x1",
            4,
            [2],
            "1 pod x 2 chips do not fill topology 2x2x1: it is 4 chips on 1 host, which takes 2 pods",
        ),
        (
            "2x2x2",
            4,
            [4],
            "1 pod x 4 chips do not fill topology 2x2x2: it is 8 chips on 2 hosts, which takes 2 pods",
        ),
        (
            "2x2x1",
            4,
            [4, 4],
            "2 pods x 4 chips do not fill topology 2x2x1: it is 4 chips on 1 host, which takes 1 pod",
        ),
        (
            "2x2x1",
            4,
            [1],
            "1 pod x 1 chip do not fill topology 2x2x1: it is 4 chips on 1 host, which takes 4 pods",
        ),
    ],
)
def test_pods_that_do_not_fill_the_topology_say_why(
    topology: str, cph: int, pods: list[int], message: str
) -> None:
    with pytest.raises(ShapeError) as e:
        tile(parse_topology(topology), cph, pods)
    assert str(e.value) == message


def fills(topology: Topology, cph: int, pods: list[int]) -> bool:
    """The oracle, by enumeration: with whole hosts, the accepted pod sets are exactly n chips
    repeated chips/n times, for each n that divides a host."""
    if cph <= 0 or topology.chips % cph:
        return False
    return any(pods == [n] * (topology.chips // n) for n in range(1, cph + 1) if cph % n == 0)


topologies = st.lists(st.integers(1, 6), min_size=2, max_size=3).map(lambda d: Topology(tuple(d)))


@st.composite
def tilings(draw: st.DrawFn) -> tuple[Topology, int, list[int]]:
    topology = draw(topologies)
    cph = draw(st.integers(-1, 16))
    near = st.integers(1, 16).flatmap(
        lambda n: st.integers(max(topology.chips // n - 1, 0), topology.chips // n + 1).map(
            lambda k: [n] * k
        )
    )
    pods = draw(st.one_of(near, st.lists(st.integers(-2, 17), max_size=12)))
    return topology, cph, pods


@given(tilings())
def test_tile_accepts_exactly_the_pod_sets_that_fill_the_topology(
    case: tuple[Topology, int, list[int]],
) -> None:
    topology, cph, pods = case
    try:
        tile(topology, cph, pods)
    except ShapeError:
        assert not fills(topology, cph, pods)
    else:
        assert fills(topology, cph, pods)


# -- B5 ----------------------------------------------------------------------------------------


def test_a_pod_without_a_topology_asks_for_no_slice() -> None:
    assert pod_shape({"nodeSelector": {ACC: "tpu7x"}}, CONFIG) is None
    assert pod_shape({}, CONFIG) is None


def test_a_pod_selects_its_shape() -> None:
    assert pod_shape(pod(), CONFIG) == Shape("tpu7x", Topology((2, 2, 1)), "2x2x1")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            pod(accelerator=None),
            'nodeSelector names topology "2x2x1" under cloud.google.com/gke-tpu-topology but '
            "no accelerator under cloud.google.com/gke-tpu-accelerator",
        ),
        (
            pod(topology='2"2', accelerator=""),
            'nodeSelector names topology "2\\"2" under cloud.google.com/gke-tpu-topology but '
            "no accelerator under cloud.google.com/gke-tpu-accelerator",
        ),
        (
            pod(topology="2x02"),
            'nodeSelector cloud.google.com/gke-tpu-topology: topology "2x02": dimension "02" is '
            "not a positive integer without leading zeros",
        ),
    ],
)
def test_a_bad_node_selector_says_why(spec: JSON, message: str) -> None:
    with pytest.raises(ShapeError) as e:
        pod_shape(spec, CONFIG)
    assert str(e.value) == message


# -- B6 ----------------------------------------------------------------------------------------


def test_a_single_pod_fills_a_single_host_slice() -> None:
    assert demand([pod()], CONFIG, PROVISION_ONLY) == Demand(TPU7X, Topology((2, 2, 1)), 1, 1, 4)


def test_a_leader_and_a_worker_fill_a_two_host_slice() -> None:
    specs = [pod(topology="2x2x2"), pod(topology="2x2x2")]
    assert demand(specs, CONFIG, PROVISION_ONLY) == Demand(TPU7X, Topology((2, 2, 2)), 2, 2, 4)


@pytest.mark.parametrize(
    ("specs", "provision_only"),
    [
        pytest.param([pod()], set[str](), id="static pool"),
        pytest.param([pod()], {"tpu7y"}, id="provision-only nodes of another accelerator"),
        pytest.param([pod(topology=None), pod(topology=None)], PROVISION_ONLY, id="no topology"),
        pytest.param([], PROVISION_ONLY, id="no pods"),
        pytest.param([pod(chips=1, topology="9x9")], {"tpu7y"}, id="static pool, bad fill"),
    ],
)
def test_no_slice_is_needed(specs: list[JSON], provision_only: set[str]) -> None:
    assert demand(specs, CONFIG, provision_only) is None


def test_provisioning_off_needs_no_slice_even_for_a_bad_shape() -> None:
    assert demand([pod(topology="bad")], None, PROVISION_ONLY) is None


def test_a_failed_node_read_checks_as_if_the_pool_were_provision_only() -> None:
    assert demand([pod()], CONFIG, None) == Demand(TPU7X, Topology((2, 2, 1)), 1, 1, 4)
    with pytest.raises(DemandError):
        demand([pod(chips=2)], CONFIG, None)


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        pytest.param(
            [pod(), pod(accelerator=None)],
            'pod 1: nodeSelector names topology "2x2x1" under cloud.google.com/gke-tpu-topology '
            "but no accelerator under cloud.google.com/gke-tpu-accelerator",
            id="B6.2 pod without accelerator",
        ),
        pytest.param(
            [pod(topology="2x2x2"), pod(accelerator="tpu7y"), pod(topology="2")],
            'pod 2: nodeSelector cloud.google.com/gke-tpu-topology: topology "2": want 2 or 3 '
            "dimensions separated by 'x'",
            id="B6.2 a bad selector comes before a mismatch",
        ),
        pytest.param(
            [pod(topology="2x2x2"), pod(topology=None), pod(topology="2x2x1")],
            "pods select tpu7x 2x2x2 and tpu7x 2x2x1; the pods of one instance share one slice",
            id="B6.2 different topologies",
        ),
        pytest.param(
            [pod(), pod(accelerator="tpu7y")],
            "pods select tpu7x 2x2x1 and tpu7y 2x2x1; the pods of one instance share one slice",
            id="B6.2 different accelerators",
        ),
        pytest.param(
            [pod(topology="2x2x2"), pod(topology=None, accelerator=None), pod(topology="2x2x2")],
            "2 of 3 pods select topology 2x2x2; the pods of one instance share one slice",
            id="B6.2 only some pods select",
        ),
        pytest.param(
            [pod(topology="2x2x2"), pod(topology="2x2x2", **{SLICE: "my-slice"})],
            'pod 1 selects slice "my-slice"; a provision-only pool\'s slice is provisioned for '
            "the pods",
            id="B6.4 a pod already selects a slice",
        ),
        pytest.param(
            [pod(chips=3, topology="2x2x2", **{SLICE: "s"})],
            'pod 0 selects slice "s"; a provision-only pool\'s slice is provisioned for the pods',
            id="B6.4 before the fill",
        ),
        pytest.param(
            [pod(accelerator="tpu7y")],
            'accelerator "tpu7y" has provision-only nodes but no provisioning configuration',
            id="B6.5 accelerator not configured",
        ),
        pytest.param(
            [pod(topology="2x4x4")],
            'topology 2x4x4 is not provisionable for accelerator "tpu7x"; provisionable: '
            "2x2x1, 2x2x2",
            id="B6.6 topology not configured",
        ),
        pytest.param(
            [pod(chips=2)],
            "1 pod x 2 chips do not fill topology 2x2x1: it is 4 chips on 1 host, which takes 2 "
            "pods",
            id="B6.7 the issue's example",
        ),
        pytest.param(
            [pod(topology="2x2x2", chips=4), pod(topology="2x2x2", chips=2)],
            "pods request 4 and 2 chips; every pod on a slice must request the same count",
            id="B6.7 unequal pods",
        ),
        pytest.param(
            [pod(topology="2x2x2"), pod(topology="2x2x2", chips="lots")],
            'pod 1: container "c": google.com/tpu limit "lots" is not a non-negative quantity',
            id="B6.7 a bad quantity",
        ),
    ],
)
def test_pods_that_cannot_have_a_slice_say_why(specs: list[JSON], message: str) -> None:
    accelerators = {"tpu7x", "tpu7y"}
    with pytest.raises(DemandError) as e:
        demand(specs, CONFIG, accelerators)
    assert str(e.value) == f"{E}: {message}"


OVERFLOWING_TOPOLOGIES = [
    "9999999999x9999999999x9999999999",
    "4294967296x2147483648",
    "9223372036854775808x1",
    "2x" + "9" * 5000,
]


def short_id(topology: str) -> str:
    return topology if len(topology) <= 40 else f"{topology[:8]}...({len(topology)} chars)"


@pytest.mark.parametrize("topology", OVERFLOWING_TOPOLOGIES, ids=short_id)
def test_a_node_selector_whose_topology_chip_count_overflows_int64_says_why(
    topology: str,
) -> None:
    with pytest.raises(ShapeError) as e:
        pod_shape(pod(topology=topology), CONFIG)
    assert str(e.value) == (
        f'nodeSelector cloud.google.com/gke-tpu-topology: topology "{topology}": chip count '
        "overflows a 64-bit integer"
    )


@pytest.mark.parametrize(
    "provision_only",
    [PROVISION_ONLY, None, set[str]()],
    ids=["provision-only pool", "failed node read", "static pool"],
)
@pytest.mark.parametrize("topology", OVERFLOWING_TOPOLOGIES, ids=short_id)
def test_a_pod_whose_topology_chip_count_overflows_int64_cannot_have_a_slice(
    topology: str, provision_only: set[str] | None
) -> None:
    with pytest.raises(DemandError) as e:
        demand([pod(topology=topology), pod(topology="2x2x2")], CONFIG, provision_only)
    assert str(e.value) == (
        "pods cannot be placed on a provisioned slice: pod 0: nodeSelector "
        f'cloud.google.com/gke-tpu-topology: topology "{topology}": chip count overflows a '
        "64-bit integer"
    )


def test_the_prefix_is_the_guides() -> None:
    assert E == "pods cannot be placed on a provisioned slice"
    assert isinstance(DemandError("x"), ValueError)


quantities = st.one_of(
    st.none(),
    st.integers(-5, 20),
    st.sampled_from(["4", "1500m", "2k", "-1", "x", "1e400", "NaN", "Infinity", "", "4Ki", "1ki"]),
    st.floats(allow_nan=True),
    st.booleans(),
    st.lists(st.integers(), max_size=1),
)
selector_values = st.sampled_from(
    ["2x2x1", "2x2x2", "2x4x4", "1x3", "2x02", "", "tpu7x", "tpu7y", *OVERFLOWING_TOPOLOGIES]
)
json_junk = st.one_of(
    st.none(), st.integers(), st.sampled_from(["", "x", "\u00e9"]), st.lists(st.none(), max_size=1)
)


@st.composite
def pod_specs(draw: st.DrawFn) -> JSON:
    spec: JSON = {}
    if draw(st.booleans()):
        keys = st.sampled_from([ACC, TOPO, SLICE, "other"])
        spec["nodeSelector"] = draw(
            st.one_of(json_junk, st.dictionaries(keys, st.one_of(selector_values, json_junk)))
        )
    containers = st.lists(
        st.one_of(
            json_junk,
            st.builds(
                lambda lim, req, res: {"resources": {"limits": {res: lim}, "requests": {res: req}}},
                quantities,
                quantities,
                st.sampled_from([TPU, "cpu"]),
            ),
            st.fixed_dictionaries(
                {"resources": st.one_of(json_junk, st.fixed_dictionaries({"limits": json_junk}))}
            ),
        ),
        max_size=3,
    )
    spec["containers"] = draw(st.one_of(json_junk, containers))
    return spec


odd_config = Config(
    chip_resource=TPU,
    accelerator_label=ACC,
    topology_label=TOPO,
    slice_label=SLICE,
    provision_only_key="k",
    provision_only_value="v",
    accelerators={"tpu7x": TPU7X, "tpu7y": Accelerator("tpu7y", "y", 0, ("1x3", "2x2"))},
    slice=CONFIG.slice,
)


@given(
    st.lists(pod_specs(), max_size=4),
    st.sampled_from([None, CONFIG, odd_config]),
    st.sampled_from([None, set[str](), {"tpu7x"}, {"tpu7x", "tpu7y"}]),
)
def test_demand_never_raises_anything_but_demand_error(
    specs: list[JSON], config: Config | None, provision_only: set[str] | None
) -> None:
    try:
        result = demand(specs, config, provision_only)
    except DemandError as err:
        assert str(err).startswith(f"{E}: ")
    else:
        if result is not None:
            assert result.pods == len(specs) and result.pods * result.chips_per_pod == (
                result.topology.chips
            )


# -- C1, B7 ------------------------------------------------------------------------------------


def runner(
    name: str, annotation: str | None = None, size: int | None = None, chips: int = 4
) -> JSON:
    template: JSON = {"spec": {"containers": [container(chips)], "name": name}}
    if annotation is not None:
        template["metadata"] = {"annotations": {OPT_IN_ANNOTATION: annotation}}
    r: JSON = {"name": name, "template": template}
    if size is not None:
        r["size"] = size
    return r


@pytest.mark.parametrize(
    ("runners", "opted"),
    [
        ([runner("default", "true")], True),
        ([runner("leader", "true"), runner("worker", None, 1)], True),
        ([runner("worker", "true", 1), runner("leader", "true")], True),
        ([runner("leader", None), runner("worker", "true", 1)], False),
        ([runner("default", "True")], False),
        ([runner("default", "yes")], False),
        ([runner("default", "")], False),
        ([runner("default")], False),
        ([runner("leader", "false"), runner("default", "true")], False),
        ([runner("worker", "true", 2)], False),
        ([], False),
    ],
)
def test_the_default_or_leader_runner_opts_in_with_exactly_true(
    runners: list[JSON], opted: bool
) -> None:
    assert opted_in(runners) is opted


def test_the_opt_in_annotation_is_the_apis() -> None:
    assert OPT_IN_ANNOTATION == ANNOTATION_TPU_SLICE_PROVISIONING


def test_an_instance_has_one_pod_spec_per_pod_in_runner_order() -> None:
    runners = [runner("leader"), runner("worker", size=3)]
    names = [spec["name"] for spec in instance_pod_specs(runners)]
    assert names == ["leader", "worker", "worker", "worker"]
    assert [s["name"] for s in instance_pod_specs([runner("default", size=5)])] == ["default"]
    assert instance_pod_specs([runner("worker")]) == []
    assert instance_pod_specs([runner("worker", size=-1)]) == []


def test_a_multi_host_instance_demands_its_slice_from_its_runners() -> None:
    runners = [runner("leader"), runner("worker", size=1)]
    for r in runners:
        r["template"]["spec"]["nodeSelector"] = {ACC: "tpu7x", TOPO: "2x2x2"}
    specs = instance_pod_specs(runners)
    assert demand(specs, CONFIG, PROVISION_ONLY) == Demand(TPU7X, Topology((2, 2, 2)), 2, 2, 4)

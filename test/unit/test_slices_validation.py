"""Demand validation of the slice reconcilers (B6, C1, I2): ``validation.validate``
decides whether an opted-in replica's Instances need a Slice, and ``validation.withhold`` turns an
invalid demand into SliceDemandInvalid holds and Warnings, with every text verbatim."""

from __future__ import annotations

from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ome.controllers.holds import Hold
from ome.controllers.slices.model import Event
from ome.controllers.slices.validation import Verdict, validate, withhold
from ome.tpuslice.placement import Demand
from ome.tpuslice.shape import Topology
from test.unit import slicekit
from test.unit.slicekit import ACC, BAD, CONFIG, JSON, PROVISION_ONLY, SLICE, TOPO, TPU7X, E

#: The walkthrough's runner also carries a label and an image, which validation ignores.
GUIDE_RUNNER: JSON = {"labels": {"app": "qwen3"}, "image": "engine:1"}
template = partial(slicekit.template, **GUIDE_RUNNER)
single = partial(slicekit.single, **GUIDE_RUNNER)
multi = partial(slicekit.multi, **GUIDE_RUNNER)
#: The replica as the walkthrough's service creates it: labelled with the service, one Instance.
replica = partial(slicekit.replica, replicas=1, labels={"ome.io/inferenceservice": "qwen3-tpu"})


# -- C1: opt-in --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "runners",
    [
        pytest.param(single(opt_in=None), id="no annotation"),
        pytest.param(single(opt_in="True"), id="True is not true"),
        pytest.param(single(opt_in="yes"), id="yes"),
        pytest.param(single(opt_in=""), id="empty"),
        pytest.param(
            multi(leader=template("2x2x2", opt_in=None), worker=template("2x2x2")),
            id="a worker's annotation is ignored",
        ),
        pytest.param(
            single(topology="4x4", chips=3, opt_in=None), id="an invalid shape does not matter"
        ),
    ],
)
def test_a_replica_that_did_not_opt_in_has_no_demand_and_no_error(runners: list[JSON]) -> None:
    assert validate(replica(runners), CONFIG, PROVISION_ONLY) == Verdict()


def test_the_leaders_annotation_opts_a_multi_pod_replica_in_whatever_the_workers_say() -> None:
    runners = multi(leader=template("2x2x2"), worker=template("2x2x2", opt_in="false"))
    verdict = validate(replica(runners), CONFIG, PROVISION_ONLY)
    assert verdict == Verdict(Demand(TPU7X, Topology((2, 2, 2)), 2, 2, 4))


# -- B6: the demand ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("runners", "demand"),
    [
        pytest.param(single(), Demand(TPU7X, Topology((2, 2, 1)), 1, 1, 4), id="single 2x2x1"),
        pytest.param(multi(), Demand(TPU7X, Topology((2, 2, 2)), 2, 2, 4), id="leader+1 2x2x2"),
        pytest.param(
            multi(3, template("2x2x2", chips=2), template("2x2x2", chips=2)),
            Demand(TPU7X, Topology((2, 2, 2)), 2, 4, 2),
            id="four 2-chip pods on 2x2x2",
        ),
    ],
)
def test_an_opted_in_replica_whose_pods_fill_a_provisionable_topology_has_its_demand(
    runners: list[JSON], demand: Demand
) -> None:
    assert validate(replica(runners), CONFIG, PROVISION_ONLY) == Verdict(demand)


@pytest.mark.parametrize(
    "runners",
    [
        pytest.param(single(topology=None, accelerator=None), id="no topology selected"),
        pytest.param(single(topology=None), id="accelerator without topology"),
    ],
)
def test_pods_that_select_no_topology_need_no_slice(runners: list[JSON]) -> None:
    """B6.2: no slice and no error; the verdict says why, so that the user is told."""
    assert validate(replica(runners), CONFIG, PROVISION_ONLY) == Verdict(no_topology=True)


def test_a_static_pool_or_an_opt_out_is_not_a_missing_topology() -> None:
    assert validate(replica(single()), CONFIG, set()) == Verdict()
    assert validate(replica(single(opt_in=None)), CONFIG, PROVISION_ONLY) == Verdict()


def test_a_pool_without_provision_only_nodes_is_static_even_for_a_shape_that_cannot_fill() -> None:
    """B6.3: a static pool: no slice, pods unconfined, and no error, even for 3 chips."""
    rep = replica(single(chips=3))
    assert validate(rep, CONFIG, frozenset()) == Verdict()
    assert validate(rep, CONFIG, frozenset({"tpu7y"})) == Verdict()


def test_a_failed_node_read_checks_the_demand_as_if_the_pool_were_provision_only() -> None:
    """B6.3: a failed node read is not a demand error; the shape is still checked."""
    assert validate(replica(single()), CONFIG, None) == Verdict(
        Demand(TPU7X, Topology((2, 2, 1)), 1, 1, 4)
    )
    assert validate(replica(single(chips=3)), CONFIG, None) == Verdict(
        error=f"{E}: 3 chips per pod do not divide a 4-chip host exactly"
    )


@pytest.mark.parametrize(
    ("runners", "provision_only", "error"),
    [
        pytest.param(
            single(topology="4x4"),
            PROVISION_ONLY,
            f'{E}: topology 4x4 is not provisionable for accelerator "tpu7x"; '
            "provisionable: 2x2x1, 2x2x2",
            id="topology not provisionable",
        ),
        pytest.param(
            single(chips=2),
            PROVISION_ONLY,
            f"{E}: 1 pod x 2 chips do not fill topology 2x2x1: it is 4 chips on 1 host, "
            "which takes 2 pods",
            id="chips do not fill",
        ),
        pytest.param(
            single(chips=8),
            PROVISION_ONLY,
            f"{E}: a pod requests 8 chips but a host has 4; a pod cannot span hosts",
            id="a pod spans hosts",
        ),
        pytest.param(
            single(chips=0),
            PROVISION_ONLY,
            f"{E}: pod 0 requests no chips; every pod on a 2x2x1 slice must request chips",
            id="no chips",
        ),
        pytest.param(
            multi(1, template("2x2x2", chips=4), template("2x2x2", chips=2)),
            PROVISION_ONLY,
            f"{E}: pods request 4 and 2 chips; every pod on a slice must request the same count",
            id="pods request different counts",
        ),
        pytest.param(
            single(**{SLICE: "mine"}),
            PROVISION_ONLY,
            f'{E}: pod 0 selects slice "mine"; a provision-only pool\'s slice is provisioned '
            "for the pods",
            id="a pod selects a slice",
        ),
        pytest.param(
            single(accelerator="tpu7y"),
            frozenset({"tpu7y"}),
            f'{E}: accelerator "tpu7y" has provision-only nodes but no provisioning configuration',
            id="accelerator not configured",
        ),
        pytest.param(
            multi(1, template("2x2x2"), template("2x2x1")),
            PROVISION_ONLY,
            f"{E}: pods select tpu7x 2x2x2 and tpu7x 2x2x1; the pods of one instance share "
            "one slice",
            id="pods select different shapes",
        ),
        pytest.param(
            multi(1, template("2x2x2"), template(None, None)),
            PROVISION_ONLY,
            f"{E}: 1 of 2 pods select topology 2x2x2; the pods of one instance share one slice",
            id="only some pods select a topology",
        ),
        pytest.param(
            single(accelerator=None),
            PROVISION_ONLY,
            f'{E}: pod 0: nodeSelector names topology "2x2x1" under {TOPO} but no accelerator '
            f"under {ACC}",
            id="topology without accelerator",
        ),
        pytest.param(
            single(topology="2x02"),
            PROVISION_ONLY,
            f'{E}: pod 0: nodeSelector {TOPO}: topology "2x02": dimension "02" is not a '
            "positive integer without leading zeros",
            id="bad topology",
        ),
        pytest.param(
            single(chips="four"),
            PROVISION_ONLY,
            f'{E}: pod 0: container "runner": google.com/tpu limit "four" is not a '
            "non-negative quantity",
            id="chips that do not parse",
        ),
    ],
)
def test_pods_that_cannot_fill_a_provisionable_slice_give_the_b6_error(
    runners: list[JSON], provision_only: frozenset[str], error: str
) -> None:
    assert validate(replica(runners), CONFIG, provision_only) == Verdict(error=error)


# -- I: SliceDemandInvalid ---------------------------------------------------------------------


def test_an_invalid_demand_withholds_each_instance_about_to_get_pods_with_a_warning() -> None:
    rep = replica(single(chips=2))
    verdict = validate(rep, CONFIG, PROVISION_ONLY)
    assert verdict.error == BAD
    holds, events = withhold(verdict, rep, [3, 0])
    assert holds == {0: Hold("SliceDemandInvalid", BAD), 3: Hold("SliceDemandInvalid", BAD)}
    assert list(holds) == [0, 3]
    assert events == [
        Event(
            "SliceDemandInvalid",
            f"OMENative component=engine instance=0 withheld: {BAD}",
            lasting="component=engine instance=0",
        ),
        Event(
            "SliceDemandInvalid",
            f"OMENative component=engine instance=3 withheld: {BAD}",
            lasting="component=engine instance=3",
        ),
    ]
    assert all(e.on == "service" for e in events)


@pytest.mark.parametrize(
    "verdict",
    [
        pytest.param(Verdict(), id="no demand"),
        pytest.param(Verdict(Demand(TPU7X, Topology((2, 2, 1)), 1, 1, 4)), id="a demand"),
    ],
)
def test_a_valid_or_absent_demand_withholds_nothing(verdict: Verdict) -> None:
    assert withhold(verdict, replica(single()), [0, 1]) == ({}, [])


def test_an_invalid_demand_with_no_instance_about_to_get_pods_withholds_nothing() -> None:
    rep = replica(single(chips=2))
    assert withhold(validate(rep, CONFIG, PROVISION_ONLY), rep, []) == ({}, [])


# -- properties --------------------------------------------------------------------------------

PROPERTY = settings(max_examples=150, deadline=None)
chips_values = st.one_of(st.integers(-2, 20), st.sampled_from(["4", "1500m", "x", None]))
topologies = st.sampled_from(["2x2x1", "2x2x2", "4x4", "2x2", "0x1", None])
accelerators = st.sampled_from(["tpu7x", "tpu7y", "", None])


@st.composite
def runner_sets(draw: st.DrawFn) -> list[JSON]:
    def one() -> JSON:
        return template(
            draw(topologies),
            draw(accelerators),
            draw(chips_values),
            draw(st.sampled_from(["true", "false", None])),
        )

    if draw(st.booleans()):
        return [{"name": "default", "template": one()}]
    return [
        {"name": "leader", "template": one()},
        {"name": "worker", "size": draw(st.integers(0, 3)), "template": one()},
    ]


@PROPERTY
@given(
    runner_sets(),
    st.one_of(st.none(), st.sets(st.sampled_from(["tpu7x", "tpu7y"])).map(frozenset)),
    st.sets(st.integers(0, 6)),
)
def test_validate_never_raises_and_gives_a_demand_or_an_error_never_both(
    runners: list[JSON], provision_only: frozenset[str] | None, indexes: set[int]
) -> None:
    rep = replica(runners)
    verdict = validate(rep, CONFIG, provision_only)
    assert verdict.demand is None or not verdict.error
    if not rep.opted_in:
        assert verdict == Verdict()
    if verdict.error:
        assert verdict.error.startswith(f"{E}: ")
    if verdict.demand is not None:
        demand = verdict.demand
        assert str(demand.topology) in demand.accelerator.topologies
        assert demand.pods * demand.chips_per_pod == demand.topology.chips
    holds, events = withhold(verdict, rep, indexes)
    assert set(holds) == (indexes if verdict.error else set())
    assert [e.message for e in events] == [
        f"OMENative component=engine instance={i} withheld: {verdict.error}" for i in sorted(holds)
    ]
    assert all(h == Hold("SliceDemandInvalid", verdict.error) for h in holds.values())

"""The admission decision (J2) on plain values: the shared table of cases, the
order of the checks, and that nodes are read only when the early checks did not decide."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ome.tpuslice.admission import UNCHECKED_LOG, Decision, decide, provision_only_accelerators
from ome.tpuslice.config import parse_config
from ome.tpuslice.types import GUIDE_CONFIG_JSON
from test.admission_cases import CASES, IDLE_CHIPS, VALID, Case, replica, runner

CONFIG = parse_config(GUIDE_CONFIG_JSON)
assert CONFIG is not None


def run(case: Case) -> tuple[Decision, int]:
    reads = 0

    def read_nodes(accelerators: frozenset[str]) -> set[str] | None:
        nonlocal reads
        reads += 1
        assert accelerators <= {"tpu7x", "tpu-v5-lite-podslice"}, accelerators
        return {"provision-only": {"tpu7x"}, "static": set(), "fail": None}[case.nodes]

    new, old = copy.deepcopy(case.new), copy.deepcopy(case.old)
    decision = decide(case.operation, new, old, CONFIG if case.configured else None, read_nodes)
    assert (new, old) == (case.new, case.old), "the decision never changes its inputs"
    return decision, reads


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_admission_table(case: Case) -> None:
    decision, reads = run(case)
    assert decision.allowed is case.allowed
    assert decision.message == case.message
    assert reads == (1 if case.reads_nodes else 0)
    assert decision.log == (UNCHECKED_LOG if case.nodes == "fail" else "")


def test_the_denial_names_the_replica_and_the_controllers_own_reason() -> None:
    decision, _ = run(next(c for c in CASES if c.id == "create-idle-chips"))
    assert decision.message == (
        "InferenceReplica qwen3-tpu/qwen3-tpu-engine: pods cannot be placed on a provisioned "
        "slice: 1 pod x 2 chips do not fill topology 2x2x1: it is 4 chips on 1 host, which "
        "takes 2 pods"
    )


def test_a_valid_demand_is_admitted_even_when_the_nodes_cannot_be_read() -> None:
    decision = decide("CREATE", VALID, None, CONFIG, lambda _: None)
    assert decision == Decision(True, "demand valid")


def test_an_update_from_a_not_opted_in_object_that_introduces_the_problem_is_denied() -> None:
    old = replica(runner(chips=2, opted=False))
    decision = decide("UPDATE", IDLE_CHIPS, old, CONFIG, lambda _: {"tpu7x"})
    assert not decision.allowed and decision.why == "demand invalid"


def test_provision_only_accelerators_come_from_the_labels() -> None:
    def node(**labels: str) -> dict[str, Any]:
        return {"metadata": {"name": "n", "labels": labels}}

    nodes = [
        node(
            **{
                "cloud.google.com/gke-accelerator-topology-mode": "PROVISION_ONLY",
                "cloud.google.com/gke-tpu-accelerator": "tpu7x",
            }
        ),
        node(**{"cloud.google.com/gke-tpu-accelerator": "tpu-v5p"}),
        node(**{"cloud.google.com/gke-accelerator-topology-mode": "PROVISION_ONLY"}),
        {"metadata": {"name": "bare"}},
    ]
    assert provision_only_accelerators(nodes, CONFIG) == {"tpu7x"}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 9) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["CREATE", "UPDATE"]),
    st.one_of(
        st.just(VALID), st.just(IDLE_CHIPS), st.dictionaries(st.text(max_size=8), json_values)
    ),
    st.one_of(st.none(), st.just(IDLE_CHIPS), st.dictionaries(st.text(max_size=8), json_values)),
    st.sampled_from([{"tpu7x"}, set(), None]),
)
def test_the_decision_never_raises_and_denies_only_with_a_message(
    operation: str, new: dict[str, Any], old: dict[str, Any] | None, nodes: set[str] | None
) -> None:
    before = json.dumps([new, old], sort_keys=True, default=str)
    decision = decide(operation, new, old, CONFIG, lambda _: nodes)
    assert json.dumps([new, old], sort_keys=True, default=str) == before
    if not decision.allowed:
        assert decision.message.startswith("InferenceReplica ")
        assert ": pods cannot be placed on a provisioned slice: " in decision.message


def test_the_node_read_is_asked_only_about_the_accelerators_the_pods_select() -> None:
    asked: list[frozenset[str]] = []

    def read_nodes(accelerators: frozenset[str]) -> set[str] | None:
        asked.append(accelerators)
        return set(accelerators)

    decide("CREATE", VALID, None, CONFIG, read_nodes)
    other = copy.deepcopy(VALID)
    for r in other["spec"]["runners"]:
        r["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] = "tpu8"
    decide("UPDATE", other, VALID, CONFIG, read_nodes)
    assert asked == [frozenset({"tpu7x"}), frozenset({"tpu7x", "tpu8"})]

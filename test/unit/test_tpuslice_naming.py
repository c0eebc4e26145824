"""Slots, Slice names and objects, slot wait reasons and host availability: behaviour.md D1 to
D4, E1 to E3 and F, with every message verbatim."""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ome.api import v1beta1
from ome.tpuslice.demand import Demand
from ome.tpuslice.naming import (
    INSTANCE_LABEL,
    MANAGED_BY_LABEL,
    ORDINAL_LABEL,
    OWNER_ANNOTATION,
    OWNER_UID_LABEL,
    SLICE_API_VERSION,
    SliceState,
    Slot,
    host_problems,
    is_ready,
    owner_hash,
    owns,
    parse_slot,
    slice_body,
    slice_name,
    slice_state,
    slot_for,
    slot_wait_reason,
)
from ome.tpuslice.shape import Topology
from ome.tpuslice.types import Accelerator, Config, SliceSettings

JSON = dict[str, Any]

UID = "6a1f2b3c-0000-4000-8000-000000000001"
REPLICA: JSON = {"metadata": {"name": "qwen3-tpu-engine", "namespace": "qwen3-tpu", "uid": UID}}
TPU7X = Accelerator("tpu7x", "tpu7x", 4, ("2x2x1", "2x2x2"))
DEMAND = Demand(TPU7X, Topology((2, 2, 1)), hosts=1, pods=1, chips_per_pod=4)
READY_STATES = ("ACTIVE", "ACTIVE_DEGRADED")
CONFIG = Config(
    chip_resource="google.com/tpu",
    accelerator_label="cloud.google.com/gke-tpu-accelerator",
    topology_label="cloud.google.com/gke-tpu-topology",
    slice_label="cloud.google.com/gke-tpu-slice",
    provision_only_key="cloud.google.com/gke-accelerator-topology-mode",
    provision_only_value="PROVISION_ONLY",
    accelerators={"tpu7x": TPU7X},
    slice=SliceSettings(
        owner_kind_label="cloud.google.com/slice-owner-kind",
        owner_name_label="cloud.google.com/slice-owner-name",
        annotations=MappingProxyType(
            {
                "cloud.google.com/managed-by": "slice-scheduler",
                "slice.gke.io/retry-on-failure": "true",
            }
        ),
        pod_annotations=("team.example.com/cost-center", "team.example.com/absent"),
        ready_states=READY_STATES,
    ),
)
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

# -- D1, D2 ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "ordinal", "multi_pod", "slot"),
    [
        (0, 0, False, Slot(0, 0)),
        (0, 1, False, Slot(0, 1)),
        (3, 1, False, Slot(3, 1)),
        (2, 0, True, Slot(2, 0)),
        (2, 3, True, Slot(2, 0)),
    ],
)
def test_multi_pod_instances_share_a_slot_and_single_pods_get_their_own(
    index: int, ordinal: int, multi_pod: bool, slot: Slot
) -> None:
    assert slot_for(index, ordinal, multi_pod) == slot


def test_slots_order_by_instance_then_ordinal() -> None:
    assert sorted([Slot(1, 0), Slot(0, 1), Slot(0, 0)]) == [Slot(0, 0), Slot(0, 1), Slot(1, 0)]


def test_the_owner_hash_is_the_start_of_sha256_of_namespace_name_uid() -> None:
    assert owner_hash("qwen3-tpu", "qwen3-tpu-engine", UID) == "30d2d711"


@pytest.mark.parametrize(
    ("replica", "slot", "name"),
    [
        ("qwen3-tpu-engine", Slot(0, 0), "qwen3-tpu-engine-0-0-8f3a21c7"),
        ("qwen3-tpu-engine", Slot(12, 1), "qwen3-tpu-engine-12-1-8f3a21c7"),
        ("llama.3-engine", Slot(0, 0), "llama-3-engine-0-0-8f3a21c7"),
        # 49 - len("-0-0-8f3a21c7") = 36 characters of base
        ("a" * 40, Slot(0, 0), "a" * 36 + "-0-0-8f3a21c7"),
        # the cut ends on "-" or ".": trailing dashes go
        ("a" * 35 + ".b", Slot(0, 0), "a" * 35 + "-0-0-8f3a21c7"),
        ("a" * 34 + "--b", Slot(0, 0), "a" * 34 + "-0-0-8f3a21c7"),
        ("a" * 35 + "-b", Slot(0, 0), "a" * 35 + "-0-0-8f3a21c7"),
        ("x" * 253, Slot(2147483647, 1), "x" * 27 + "-2147483647-1-8f3a21c7"),
    ],
)
def test_a_slice_is_named_after_the_replica_cut_to_fit(replica: str, slot: Slot, name: str) -> None:
    assert slice_name(replica, slot, "8f3a21c7") == name
    assert len(name) <= 49


@pytest.mark.parametrize(
    ("replica", "slot", "hash8"),
    [
        ("Upper", Slot(0, 0), "8f3a21c7"),
        ("-lead", Slot(0, 0), "8f3a21c7"),
        ("", Slot(0, 0), "8f3a21c7"),
        ("ok", Slot(-1, 0), "8f3a21c7"),
        ("ok", Slot(0, -1), "8f3a21c7"),
        ("ok", Slot(0, 0), "8F3A21C7"),
        ("ok", Slot(0, 0), "8f3a21c"),
        ("ok", Slot(10**20, 10**20), "8f3a21c7"),
    ],
)
def test_names_the_api_server_never_gives_are_refused(replica: str, slot: Slot, hash8: str) -> None:
    with pytest.raises(ValueError):
        slice_name(replica, slot, hash8)


dns_labels = (
    st.lists(st.sampled_from("abcz09-"), min_size=1, max_size=63)
    .map("".join)
    .filter(lambda s: s[0] != "-" and s[-1] != "-")
)
object_names = (
    st.lists(dns_labels, min_size=1, max_size=6).map(".".join).filter(lambda s: len(s) <= 253)
)
indices = st.integers(0, 10**12)
hashes = st.lists(st.sampled_from("0123456789abcdef"), min_size=8, max_size=8).map("".join)


@given(object_names, indices, indices, hashes)
def test_a_slice_name_is_always_a_dns_label_of_at_most_49_characters(
    replica: str, instance: int, ordinal: int, hash8: str
) -> None:
    name = slice_name(replica, Slot(instance, ordinal), hash8)
    assert len(name) <= 49 and DNS_1123_LABEL.fullmatch(name)
    assert name.endswith(f"-{instance}-{ordinal}-{hash8}")


@given(object_names, indices, indices, hashes, indices, indices, hashes)
def test_distinct_slots_or_owners_get_distinct_names(
    replica: str, i1: int, o1: int, h1: str, i2: int, o2: int, h2: str
) -> None:
    a = slice_name(replica, Slot(i1, o1), h1)
    b = slice_name(replica, Slot(i2, o2), h2)
    assert (a == b) == ((i1, o1, h1) == (i2, o2, h2))


@given(object_names, st.integers(0, 9), st.integers(0, 1), hashes)
def test_distinct_slots_of_one_owner_get_distinct_names_near_each_other(
    replica: str, instance: int, ordinal: int, hash8: str
) -> None:
    names = {
        slice_name(replica, Slot(i, o), hash8)
        for i in (instance, instance + 1, instance * 10 + 1, 10 * instance)
        for o in (ordinal, 1 - ordinal, 10 + ordinal)
    }
    slots = {
        (i, o)
        for i in (instance, instance + 1, instance * 10 + 1, 10 * instance)
        for o in (ordinal, 1 - ordinal, 10 + ordinal)
    }
    assert len(names) == len(slots)


# -- D3, D4 ------------------------------------------------------------------------------------


def test_the_slice_carries_its_shape_owner_and_slot() -> None:
    body = slice_body(
        REPLICA,
        Slot(0, 1),
        DEMAND,
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


def test_the_owner_name_label_is_cut_to_a_label_value() -> None:
    for name, label in [("a" * 62 + ".b", "a" * 62), ("a" * 61 + "--b", "a" * 61)]:
        replica = {"metadata": {"name": name, "namespace": "ns", "uid": UID}}
        body = slice_body(replica, Slot(0, 0), DEMAND, CONFIG, {})
        assert body["metadata"]["labels"]["cloud.google.com/slice-owner-name"] == label
        assert body["metadata"]["annotations"][OWNER_ANNOTATION] == f"ns/{name}"
        assert len(body["metadata"]["name"]) <= 49


def test_the_labels_are_the_apis() -> None:
    assert SLICE_API_VERSION == "accelerator.gke.io/v1beta1"
    assert MANAGED_BY_LABEL == v1beta1.LABEL_MANAGED_BY
    assert INSTANCE_LABEL == v1beta1.LABEL_INSTANCE_INDEX
    assert ORDINAL_LABEL == v1beta1.LABEL_POD_ORDINAL
    assert OWNER_UID_LABEL == "ome.io/slice-owner-uid"
    assert OWNER_ANNOTATION == "ome.io/slice-owner"


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
        "labels": {OWNER_UID_LABEL: UID, INSTANCE_LABEL: "0", ORDINAL_LABEL: "0"}
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
    assert owns(slice_obj(), UID)
    assert not owns(slice_obj(), "other-uid")
    assert not owns(slice_obj({}), UID)
    assert not owns(slice_obj({OWNER_UID_LABEL: ""}), "")
    assert not owns({}, UID)


@pytest.mark.parametrize(
    ("labels", "slot"),
    [
        ({INSTANCE_LABEL: "3", ORDINAL_LABEL: "1"}, Slot(3, 1)),
        ({INSTANCE_LABEL: "0", ORDINAL_LABEL: "0"}, Slot(0, 0)),
        ({INSTANCE_LABEL: "3"}, None),
        ({ORDINAL_LABEL: "1"}, None),
        ({INSTANCE_LABEL: "-1", ORDINAL_LABEL: "0"}, None),
        ({INSTANCE_LABEL: "01", ORDINAL_LABEL: "0"}, None),
        ({INSTANCE_LABEL: "x", ORDINAL_LABEL: "0"}, None),
        ({INSTANCE_LABEL: "", ORDINAL_LABEL: "0"}, None),
    ],
)
def test_a_slices_slot_comes_from_its_labels(labels: dict[str, str], slot: Slot | None) -> None:
    assert parse_slot(slice_obj(labels)) == slot


def test_a_built_slice_parses_back_to_its_slot() -> None:
    assert parse_slot(slice_body(REPLICA, Slot(7, 1), DEMAND, CONFIG, {})) == Slot(7, 1)


# -- E1, E2 ------------------------------------------------------------------------------------


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
    assert slice_state(obj) == SliceState(
        "ACTIVE", "True", "ok", "2025-01-01T00:00:00Z", False, ("p1", "p2")
    )
    assert slice_state({}) == SliceState("", "", "", None, False, ())
    assert slice_state(slice_obj(deleting=True)).terminating


@pytest.mark.parametrize(
    ("state", "ready"),
    [
        (SliceState("ACTIVE", "True", "", None, False, ("p",)), True),
        (SliceState("ACTIVE_DEGRADED", "True", "", None, False, ("p",)), True),
        (SliceState("ACTIVE", "False", "", None, False, ("p",)), True),
        (SliceState("ACTIVE", "Unknown", "", None, False, ("p",)), False),
        (SliceState("ACTIVE", "True", "", None, True, ("p",)), False),
        (SliceState("ACTIVATING", "False", "", None, False, ("p",)), False),
        (SliceState("", "", "", None, False, ()), False),
    ],
)
def test_ready_is_a_ready_state_not_terminating_and_not_unknown(
    state: SliceState, ready: bool
) -> None:
    assert is_ready(state, READY_STATES) is ready


# -- E3 ----------------------------------------------------------------------------------------

N = "s-0-0-8f3a21c7"


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        pytest.param(
            slice_obj({OWNER_UID_LABEL: "someone-else"}, deleting=True, type_="x"),
            ("conflict", f"slice is owned by another object: {N}"),
            id="not ours",
        ),
        pytest.param(
            slice_obj(deleting=True, type_="x", ready={"reason": "ACTIVE", "status": "True"}),
            ("terminating", f"slice {N} is being released"),
            id="terminating",
        ),
        pytest.param(
            slice_obj(type_="tpu7y", ready={"reason": "ACTIVE", "status": "True"}),
            (
                "wrong-shape",
                f"slice {N} is tpu7y 2x2x1, want tpu7x 2x2x1; it is replaced once no pod holds it",
            ),
            id="wrong type",
        ),
        pytest.param(
            slice_obj(topology="2x2x2"),
            (
                "wrong-shape",
                f"slice {N} is tpu7x 2x2x2, want tpu7x 2x2x1; it is replaced once no pod holds it",
            ),
            id="wrong topology",
        ),
        pytest.param(
            slice_obj(),
            ("not-ready", f"slice {N} is waiting for partition assignment"),
            id="no state, no partitions",
        ),
        pytest.param(
            slice_obj(ready={"status": "False", "message": "queued"}),
            ("not-ready", f"slice {N} is waiting for partition assignment"),
            id="empty reason, no partitions",
        ),
        pytest.param(
            slice_obj(partitions=["p"]),
            ("not-ready", f"slice {N} has partitions assigned and no state yet"),
            id="partitions, no state",
        ),
        pytest.param(
            slice_obj(partitions=["p"], ready={"reason": "ACTIVE", "status": "Unknown"}),
            ("not-ready", f"slice {N} is ACTIVE, but its readiness is unknown"),
            id="unknown",
        ),
        pytest.param(
            slice_obj(
                partitions=["p"],
                ready={"reason": "ACTIVATING", "status": "Unknown", "message": "lost contact"},
            ),
            ("not-ready", f"slice {N} is ACTIVATING, but its readiness is unknown: lost contact"),
            id="unknown with message",
        ),
        pytest.param(
            slice_obj(partitions=["p"], ready={"reason": "ACTIVATING", "status": "False"}),
            ("not-ready", f"slice {N} is ACTIVATING"),
            id="not a ready state",
        ),
        pytest.param(
            slice_obj(
                partitions=["p"],
                ready={"reason": "FAILED", "status": "False", "message": "no capacity"},
            ),
            ("not-ready", f"slice {N} is FAILED: no capacity"),
            id="not a ready state, with message",
        ),
        pytest.param(
            slice_obj(partitions=["p"], ready={"reason": "ACTIVE_DEGRADED", "status": "True"}),
            None,
            id="ready",
        ),
    ],
)
def test_a_slot_waits_for_its_slice_and_says_why(obj: JSON, reason: tuple[str, str] | None) -> None:
    assert slot_wait_reason(obj, UID, DEMAND, READY_STATES) == reason


# -- F -----------------------------------------------------------------------------------------


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


TPU_TOLERATION = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
N3 = "node gke-tpu-pool-node-3"


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
            [
                {
                    "key": "node.kubernetes.io/unschedulable",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                }
            ],
            [],
            id="cordon tolerated",
        ),
        pytest.param(
            node(cordoned=True),
            [
                {
                    "key": "node.kubernetes.io/unschedulable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                }
            ],
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
    assert host_problems(obj, tolerations) == problems

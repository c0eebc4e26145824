"""Fuzzing what the provider hands back: Slices (``provider.gke.parse`` into ``SliceInfo``) and
nodes (``Host.from_node``) of any shape, then the gate and release passes that decide from
them.

A Slice someone else wrote is read, never trusted: a missing status, conditions that are no
list, entries that are no object, an unknown reason, partitions of the wrong type... each
reads as a defined value, and a Slice is ready only when its first ``Ready`` condition says
a ready state and a status other than ``Unknown`` (E1, E2). The passes then hold the Instance
with a reason a user can read, or let it go on.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from ome.controllers.slices.model import Pod, Replica, slots_of
from ome.controllers.slices.plan import GateObservation, ReleaseObservation, gate_pass, release_pass
from ome.provider import gke
from ome.tpuslice import placement
from ome.tpuslice.hosts import Host, instance_host_problems
from ome.tpuslice.naming import Slot
from ome.tpuslice.slices import SliceInfo
from test.helpers import assert_strings_and_partitions

from .replicas import SLICE, nodes, replicas
from .strategies import FUZZ, GUIDE_CONFIG, JSON, TEXT, json_objects, json_values, mutants

CONFIG = GUIDE_CONFIG
READY_STATES = CONFIG.slice.ready_states
NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
UID = "6a1f2b3c-0000-4000-8000-000000000001"

#: What the Slice CRD's status may hold, and what nobody promised it would not.
CONDITION = st.fixed_dictionaries(
    {},
    optional={
        "type": st.one_of(st.sampled_from(["Ready", "ready", "Degraded", ""]), json_values(1)),
        "status": st.one_of(st.sampled_from(["True", "False", "Unknown", ""]), json_values(1)),
        "reason": st.one_of(
            st.sampled_from(["ACTIVE", "ACTIVE_DEGRADED", "ACTIVATING", "FAILED", "NEW_STATE", ""]),
            json_values(1),
        ),
        "message": st.one_of(TEXT, json_values(1)),
        "lastTransitionTime": st.one_of(
            st.sampled_from(["2025-03-01T11:00:00Z", "2025-03-01T11:00:00", "garbage", ""]),
            json_values(1),
        ),
    },
)


@st.composite
def slices(draw: st.DrawFn) -> JSON:
    """A Slice of ours at slot (0, 0) as the provider reports it, or mangled."""
    body: JSON = {
        "apiVersion": gke.API_VERSION,
        "kind": gke.KIND,
        "metadata": {
            "name": draw(st.sampled_from(["qwen3-tpu-engine-0-0-30d2d711", "other", ""])),
            "uid": "s-1",
            "resourceVersion": "9",
            "creationTimestamp": draw(
                st.sampled_from(["2025-03-01T11:00:00Z", "2025-03-01T12:30:00Z", "x"])
            ),
            "labels": {
                "ome.io/slice-owner-uid": draw(st.sampled_from([UID, "someone", ""])),
                "ome.io/instance-index": draw(
                    st.sampled_from(["0", "1", "00", "-1", "x", "99999999999999999999"])
                ),
                "ome.io/pod-ordinal": draw(st.sampled_from(["0", "1", "2"])),
            },
            "annotations": {"ome.io/slice-owner": "qwen3-tpu/qwen3-tpu-engine"},
        },
        "spec": {
            "type": draw(st.sampled_from(["tpu7x", "tpu-v5p", ""])),
            "topology": draw(st.sampled_from(["2x2x1", "2x2x2", "4x4", ""])),
            "partitionIds": draw(
                st.one_of(st.lists(st.one_of(TEXT, json_values(1)), max_size=3), json_values(2))
            ),
        },
        "status": {
            "conditions": draw(
                st.one_of(
                    st.lists(st.one_of(CONDITION, json_values(2)), max_size=3), json_values(2)
                )
            )
        },
    }
    if draw(st.integers(0, 4)) == 0:
        body["metadata"]["deletionTimestamp"] = draw(
            st.one_of(st.just("2025-03-01T11:59:00Z"), json_values(1))
        )
    return cast(JSON, draw(st.one_of(st.just(body), mutants(body), json_objects())))


def first_ready(obj: JSON) -> dict[str, Any] | None:
    """E1, written again the plain way: the first condition whose type is ``Ready``."""
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, dict) and c.get("type") == "Ready":
            return c
    return None


@settings(FUZZ, max_examples=150)
@given(obj=slices())
def test_a_slice_of_any_shape_reads_as_a_defined_state(obj: JSON) -> None:
    before = copy.deepcopy(obj)
    info = gke.parse(obj)
    assert obj == before
    assert_strings_and_partitions(info)
    ready = first_ready(obj)
    if ready is None or not isinstance(ready.get("reason"), str):
        assert info.state == "" and not info.ready(READY_STATES), "no readable state is not ready"
    if info.ready(READY_STATES):
        assert ready is not None and ready.get("reason") in READY_STATES
        assert ready.get("status") != "Unknown"
        meta = obj.get("metadata")
        assert not (
            isinstance(meta, dict)
            and isinstance(meta.get("deletionTimestamp"), str)
            and meta["deletionTimestamp"]
        )
    if info.slot is not None:
        assert info.slot.instance >= 0 and info.slot.ordinal >= 0


@settings(FUZZ, max_examples=100)
@given(
    node=nodes(),
    tolerations=st.lists(
        st.dictionaries(st.sampled_from(["key", "operator", "value", "effect"]), TEXT), max_size=3
    ),
)
def test_a_node_of_any_shape_is_a_host_with_clear_problems(
    node: JSON, tolerations: list[JSON]
) -> None:
    host = Host.from_node(node, SLICE)
    assert isinstance(host.name, str) and isinstance(host.ready, str)
    problems = instance_host_problems([host], (tuple(tolerations),))
    for problem in problems:
        assert problem.startswith(f"node {host.name} is "), problem


@settings(FUZZ, max_examples=40)
@given(
    replica=replicas(),
    raw_slices=st.lists(slices(), max_size=3),
    raw_nodes=st.lists(nodes(), max_size=3),
    provision_only=st.sampled_from([frozenset({"tpu7x"}), frozenset(), None]),
    pending=st.dictionaries(st.integers(0, 3), st.sampled_from([0, 1]), max_size=3),
)
def test_the_gate_holds_with_a_reason_or_lets_go(
    replica: JSON,
    raw_slices: list[JSON],
    raw_nodes: list[JSON],
    provision_only: frozenset[str] | None,
    pending: dict[int, int],
) -> None:
    replica["metadata"]["uid"] = UID
    read = Replica.from_json(replica)
    pods = {
        i: [{"metadata": {"name": f"p{i}", "labels": {"ome.io/pod-ordinal": str(o)}}}]
        for i, o in pending.items()
    }
    slots = slots_of(read, pods)
    infos = [gke.parse(s) for s in raw_slices]
    # Whatever the provider says, it says it of the names this replica gives its slots.
    named: dict[str, SliceInfo] = {}
    for slot, info in zip(slots.values(), infos, strict=False):
        named[read.slice_name(slot)] = info
    hosts = {name: tuple(Host.from_node(n, SLICE) for n in raw_nodes) for name in named}
    obs = GateObservation(
        replica=read,
        config=CONFIG,
        slots=slots,
        provision_only=provision_only,
        slices=named,
        hosts=hosts,
        creating=frozenset(),
        releasing=frozenset(),
        now=NOW,
    )
    out = gate_pass(obs)
    assert set(out.holds) <= set(slots)
    for hold in out.holds.values():
        assert hold.token and hold.message.strip()
    for event in [*out.events, *out.notices]:
        assert event.reason and event.message.strip()
    if out.verdict.error:
        assert out.verdict.error.startswith(placement.E + ": ")
        assert set(out.holds) == set(slots)
    for index, name in out.confine.items():
        assert index in slots and name == read.slice_name(slots[index])
        assert index not in out.holds


@settings(FUZZ, max_examples=40)
@given(
    replica=replicas(),
    raw_slices=st.lists(slices(), max_size=4),
    raw_pods=st.lists(
        st.one_of(
            json_values(),
            st.builds(
                lambda n, sel: {
                    "metadata": {
                        "name": n,
                        "namespace": "qwen3-tpu",
                        "labels": {"ome.io/inferencereplica": "qwen3-tpu-engine"},
                    },
                    "spec": {"nodeSelector": {SLICE: sel}, "nodeName": "n1"},
                },
                TEXT,
                TEXT,
            ),
        ),
        max_size=3,
    ),
    provision_only=st.sampled_from([frozenset({"tpu7x"}), frozenset(), None]),
)
def test_the_release_pass_releases_only_ours(
    replica: JSON,
    raw_slices: list[JSON],
    raw_pods: list[Any],
    provision_only: frozenset[str] | None,
) -> None:
    replica["metadata"]["uid"] = UID
    read = Replica.from_json(replica)
    infos = [gke.parse(s) for s in raw_slices]
    owned = tuple(i for i in infos if i.owned_by(UID))
    pods = tuple(
        Pod.from_json(p if isinstance(p, dict) else {}, SLICE, "google.com/tpu") for p in raw_pods
    )
    obs = ReleaseObservation(
        replica=read,
        config=CONFIG,
        provision_only=provision_only,
        owned=owned,
        named={i.name: i for i in infos},
        pods=pods,
        nodes={"n1": None},
        releasing=frozenset(),
    )
    out = release_pass(obs)
    assert all(s in owned for s in out.releases), "only our own Slices are ever released"
    assert all(isinstance(name, str) for name in out.suspects)
    if read.deleting:
        assert out.suspects == []


def test_a_slot_without_a_slice_is_provisioned() -> None:
    """The gate's fuzzing above meets Slices at random; this is the plain case it grows from."""
    read = Replica.from_json(
        {
            "metadata": {"name": "qwen3-tpu-engine", "namespace": "qwen3-tpu", "uid": UID},
            "spec": {
                "replicas": 1,
                "runners": [
                    {
                        "name": "default",
                        "template": {
                            "metadata": {"annotations": {"ome.io/tpu-slice-provisioning": "true"}},
                            "spec": {
                                "nodeSelector": {
                                    "cloud.google.com/gke-tpu-accelerator": "tpu7x",
                                    "cloud.google.com/gke-tpu-topology": "2x2x1",
                                },
                                "containers": [{"resources": {"limits": {"google.com/tpu": 4}}}],
                            },
                        },
                    }
                ],
            },
        }
    )
    obs = GateObservation(
        read, CONFIG, {0: Slot(0, 0)}, frozenset({"tpu7x"}), {}, {}, frozenset(), frozenset(), NOW
    )
    out = gate_pass(obs)
    assert [c.name for c in out.creates] == [read.slice_name(Slot(0, 0))]
    assert set(out.holds) == {0}

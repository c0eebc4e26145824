"""Slice provisioning (D1, D2, E3: a slot without a Slice, G3): ``provisioning.provision``
creates a Slice only for a slot that the stored Instance rows want, that has no Slice and no
create in flight, and holds every such Instance while its Slice waits for partitions."""

from __future__ import annotations

import hashlib
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ome.controllers.holds import Hold
from ome.controllers.slices.provisioning import Create, provision
from ome.tpuslice.naming import Slot
from ome.tpuslice.slices import SliceInfo
from test.unit import slicekit
from test.unit.slicekit import HASH, JSON, NAME, NAMESPACE, UID, create_op, n, replica, row

#: This file's runners tolerate nothing: provisioning does not read tolerations.
single = partial(slicekit.single, tolerations=None)
multi = partial(slicekit.multi, tolerations=None)


def waiting(name: str) -> Hold:
    return Hold("CapacityProvisioning", f"slice {name} is waiting for partition assignment")


def a_slice(name: str, owner: str = UID) -> SliceInfo:
    return SliceInfo(name=name, uid=f"uid-{name}", owner_uid=owner, slot=Slot(0, 0))


# -- D2: names ---------------------------------------------------------------------------------


def test_the_owner_hash_is_the_first_8_hex_chars_of_sha256_of_namespace_name_uid() -> None:
    assert hashlib.sha256(f"{NAMESPACE}/{NAME}/{UID}".encode()).hexdigest()[:8] == HASH
    assert replica(single()).hash8 == HASH


@pytest.mark.parametrize(
    ("name", "slot", "expected"),
    [
        pytest.param(NAME, Slot(0, 0), "qwen3-tpu-engine-0-0-{h}", id="the walkthrough's name"),
        pytest.param(NAME, Slot(12, 1), "qwen3-tpu-engine-12-1-{h}", id="index and ordinal"),
        pytest.param("a.b.c", Slot(0, 0), "a-b-c-0-0-{h}", id="dots become dashes"),
        pytest.param("x" * 60, Slot(3, 1), "x" * 36 + "-3-1-{h}", id="cut to 49 minus the suffix"),
        pytest.param(
            "x" * 35 + "-yyyy", Slot(3, 1), "x" * 35 + "-3-1-{h}", id="trailing dash removed"
        ),
    ],
)
def test_a_created_slice_is_named_per_d2(name: str, slot: Slot, expected: str) -> None:
    h = hashlib.sha256(f"{NAMESPACE}/{name}/{UID}".encode()).hexdigest()[:8]
    rep = replica(single(), [row(slot.instance, active=slot.ordinal)], name=name)
    creates, _ = provision(rep, {slot.instance: slot}, {}, frozenset())
    want = expected.format(h=h)
    assert [c.name for c in creates] == [want]
    assert len(want) <= 49


# -- creates and holds -------------------------------------------------------------------------


def test_a_wanted_slot_without_a_slice_gets_one_and_waits_for_partition_assignment() -> None:
    rep = replica(single(), [row(0, "Creating", operation=create_op())])
    creates, holds = provision(rep, {0: Slot(0, 0)}, {}, frozenset())
    assert creates == [Create(0, Slot(0, 0), n(0))]
    assert holds == {0: waiting(n(0))}
    assert holds[0].message == (
        "slice qwen3-tpu-engine-0-0-30d2d711 is waiting for partition assignment"
    )


def test_a_single_pod_surge_gets_a_slice_of_its_own_at_the_other_ordinal() -> None:
    rep = replica(single(), [row(0, "Updating", active=0, operation=create_op())])
    creates, holds = provision(rep, {0: Slot(0, 1)}, {n(0): a_slice(n(0))}, frozenset())
    assert creates == [Create(0, Slot(0, 1), n(0, 1))]
    assert holds == {0: waiting(n(0, 1))}


def test_a_multi_pod_surge_index_is_wanted_through_the_rows_surge_index() -> None:
    rep = replica(multi(), [row(0, "Updating", operation=create_op(surge=4))])
    creates, holds = provision(rep, {4: Slot(4, 0)}, {}, frozenset())
    assert creates == [Create(4, Slot(4, 0), n(4))]
    assert holds == {4: waiting(n(4))}


@pytest.mark.parametrize(
    ("rows", "slot"),
    [
        pytest.param([], Slot(0, 0), id="no stored row yet"),
        pytest.param([row(1)], Slot(0, 0), id="another index's row"),
        pytest.param([row(0, active=0)], Slot(0, 1), id="the other ordinal without operation"),
        pytest.param([row(0, "Deleting", operation=create_op())], Slot(0, 0), id="Deleting row"),
    ],
)
def test_no_slice_is_created_for_a_slot_the_stored_rows_do_not_want_yet(
    rows: list[JSON], slot: Slot
) -> None:
    """The docstring's rule: release decides from stored rows too, so such a slot waits."""
    rep = replica(single(), rows)
    creates, holds = provision(rep, {slot.instance: slot}, {}, frozenset())
    assert creates == []
    assert holds == {slot.instance: waiting(n(slot.instance, slot.ordinal))}


def test_an_instance_the_spec_wants_gets_its_slice_before_its_row_is_stored() -> None:
    """G3: a single-pod Instance without a row wants ordinal 0, since ``spec.replicas``
    (not the pass that is about to write its row) says it exists."""
    rep = replica(single(), [], replicas=1)
    creates, holds = provision(rep, {0: Slot(0, 0)}, {}, frozenset())
    assert creates == [Create(0, Slot(0, 0), n(0))]
    assert holds == {0: waiting(n(0))}


def test_a_deleting_replica_creates_no_slice() -> None:
    rep = replica(single(), [row(0, operation=create_op())], deleting=True)
    creates, holds = provision(rep, {0: Slot(0, 0)}, {}, frozenset())
    assert creates == []
    assert holds == {0: waiting(n(0))}


def test_no_second_create_while_one_is_in_flight() -> None:
    rep = replica(single(), [row(0, "Creating", operation=create_op())])
    creates, holds = provision(rep, {0: Slot(0, 0)}, {}, frozenset({n(0)}))
    assert creates == []
    assert holds == {0: waiting(n(0))}


@pytest.mark.parametrize(
    "found",
    [
        pytest.param(a_slice(n(0)), id="ours"),
        pytest.param(a_slice(n(0), owner="someone-else"), id="not ours"),
        pytest.param(a_slice(n(0), owner=""), id="no owner label"),
    ],
)
def test_a_slot_whose_slice_exists_is_left_to_the_gate(found: SliceInfo) -> None:
    """Existing Slices are never modified or adopted: no create, no hold here."""
    rep = replica(single(), [row(0, "Creating", operation=create_op())])
    assert provision(rep, {0: Slot(0, 0)}, {n(0): found}, frozenset()) == ([], {})


def test_several_instances_are_provisioned_in_index_order() -> None:
    rows = [row(i, "Creating", operation=create_op()) for i in (0, 1, 2, 3)]
    rep = replica(multi(), rows)
    slots = {3: Slot(3, 0), 1: Slot(1, 0), 0: Slot(0, 0), 2: Slot(2, 0)}
    creates, holds = provision(rep, slots, {n(1): a_slice(n(1))}, frozenset({n(2)}))
    assert creates == [Create(0, Slot(0, 0), n(0)), Create(3, Slot(3, 0), n(3))]
    assert holds == {0: waiting(n(0)), 2: waiting(n(2)), 3: waiting(n(3))}


def test_nothing_to_provision_without_instances_about_to_get_pods() -> None:
    assert provision(replica(single(), [row(0)]), {}, {}, frozenset()) == ([], {})


# -- properties --------------------------------------------------------------------------------


@st.composite
def stored_rows(draw: st.DrawFn) -> list[JSON]:
    rows = []
    for index in sorted(draw(st.sets(st.integers(0, 4), max_size=4))):
        op = draw(st.one_of(st.none(), st.integers(0, 6).map(create_op), st.just(create_op())))
        rows.append(
            row(
                index,
                draw(st.sampled_from(["Ready", "Creating", "Updating", "Deleting"])),
                draw(st.sampled_from([0, 1])),
                op,
            )
        )
    return rows


@settings(max_examples=150, deadline=None)
@given(
    st.booleans(),
    stored_rows(),
    st.dictionaries(st.integers(0, 6), st.integers(0, 1), max_size=5),
    st.sets(st.tuples(st.integers(0, 6), st.integers(0, 1)), max_size=4),
    st.sets(st.tuples(st.integers(0, 6), st.integers(0, 1)), max_size=4),
)
def test_provision_creates_only_for_wanted_absent_slots_not_in_flight_and_holds_each(
    is_multi: bool,
    rows: list[JSON],
    pending: dict[int, int],
    existing: set[tuple[int, int]],
    in_flight: set[tuple[int, int]],
) -> None:
    rep = replica(multi() if is_multi else single(), rows)
    slots = {i: Slot(i, 0 if is_multi else o) for i, o in pending.items()}
    slices = {n(i, o): a_slice(n(i, o)) for i, o in existing}
    creating = frozenset(n(i, o) for i, o in in_flight)
    creates, holds = provision(rep, slots, slices, creating)
    for c in creates:
        assert slots[c.index] == c.slot
        assert c.name == n(c.slot.instance, c.slot.ordinal)
        assert c.name not in slices and c.name not in creating
        assert c.index in holds
        # G3: the stored rows want the slot.
        wanting = [r for r in rows if r["index"] in (c.slot.instance,) and r["phase"] != "Deleting"]
        surging = [
            r
            for r in rows
            if r["phase"] != "Deleting"
            and is_multi
            and (r["operation"] or {}).get("surgeIndex") == c.slot.instance
        ]
        assert wanting or surging
    assert len({c.name for c in creates}) == len(creates)
    for index, hold in holds.items():
        name = n(index, slots[index].ordinal)
        assert name not in slices
        assert hold == waiting(name)
    assert set(holds) == {i for i, s in slots.items() if n(s.instance, s.ordinal) not in slices}

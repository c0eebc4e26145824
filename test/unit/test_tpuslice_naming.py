"""Slots and Slice names, and reading a name back to its slot: D1 and D2, and the
label and annotation names D3 and D4 write. The Slice object itself is ``test_provider_gke``'s,
host availability ``test_tpuslice_hosts``'s."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ome.tpuslice.naming import (
    Slot,
    owner_hash,
    owner_label_value,
    parse_index,
    slice_name,
    slot_for,
    slot_of_name,
)
from test.unit.slicekit import GUIDE_HASH as H
from test.unit.slicekit import UID

DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

# -- D1, D2 ----------------------------------------------------------------------------------------


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
    slots = {
        (i, o)
        for i in (instance, instance + 1, instance * 10 + 1, 10 * instance)
        for o in (ordinal, 1 - ordinal, 10 + ordinal)
    }
    names = {slice_name(replica, Slot(i, o), hash8) for i, o in slots}
    assert len(names) == len(slots)


# -- D3: indices in labels, the owner name label ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "index"),
    [
        pytest.param("0", 0, id="zero"),
        pytest.param("7", 7, id="one digit"),
        pytest.param("12", 12, id="two digits"),
        pytest.param("2147483647", 2147483647, id="int32 max"),
        pytest.param("123456789012345678901234567890", 123456789012345678901234567890, id="long"),
        pytest.param("", None, id="empty"),
        pytest.param("01", None, id="leading zero"),
        pytest.param("00", None, id="two zeros"),
        pytest.param("-1", None, id="negative"),
        pytest.param("+1", None, id="plus sign"),
        pytest.param(" 1", None, id="leading space"),
        pytest.param("1 ", None, id="trailing space"),
        pytest.param("1\n", None, id="trailing newline"),
        pytest.param("1.0", None, id="decimal"),
        pytest.param("1_000", None, id="underscore"),
        pytest.param("x", None, id="letter"),
        pytest.param("\u0661", None, id="arabic-indic digit"),
        pytest.param(1, None, id="an int is not a label"),
        pytest.param(True, None, id="bool"),
        pytest.param(None, None, id="None"),
        pytest.param(["1"], None, id="list"),
    ],
)
def test_an_index_label_is_a_canonical_non_negative_integer(
    text: object, index: int | None
) -> None:
    assert parse_index(text) == index


@given(st.integers(0, 10**30))
def test_every_index_written_as_a_label_reads_back(index: int) -> None:
    assert parse_index(str(index)) == index


@settings(deadline=None)
@given(st.text(max_size=12))
def test_any_label_text_reads_as_its_index_or_none(text: str) -> None:
    index = parse_index(text)
    assert index is None or str(index) == text


@pytest.mark.parametrize(
    ("name", "label"),
    [
        pytest.param("qwen3-tpu-engine", "qwen3-tpu-engine", id="short"),
        pytest.param("a.b", "a.b", id="dots stay"),
        pytest.param("a" * 63, "a" * 63, id="63 characters"),
        pytest.param("a" * 64, "a" * 63, id="cut to 63"),
        pytest.param("a" * 62 + ".b", "a" * 62, id="cut ends on a dot"),
        pytest.param("a" * 61 + "--b", "a" * 61, id="cut ends on dashes"),
        pytest.param("a" * 60 + ".-.b", "a" * 60, id="cut ends on dots and dashes"),
        pytest.param("x" * 253, "x" * 63, id="longest object name"),
    ],
)
def test_the_owner_name_label_value_is_the_replica_name_cut_to_a_label_value(
    name: str, label: str
) -> None:
    assert owner_label_value(name) == label


@settings(deadline=None)
@given(object_names)
def test_the_owner_name_label_value_is_always_a_label_value(name: str) -> None:
    label = owner_label_value(name)
    assert 1 <= len(label) <= 63
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", label)
    assert name.startswith(label)


# -- D2 read backwards: the slot a name belongs to -------------------------------------------------


@pytest.mark.parametrize(
    ("name", "replica", "slot"),
    [
        pytest.param("qwen3-tpu-engine-0-0-8f3a21c7", "qwen3-tpu-engine", Slot(0, 0), id="ours"),
        pytest.param("qwen3-tpu-engine-12-1-8f3a21c7", "qwen3-tpu-engine", Slot(12, 1), id="12-1"),
        pytest.param("llama-3-engine-0-0-8f3a21c7", "llama.3-engine", Slot(0, 0), id="dot"),
        pytest.param("a" * 36 + "-0-0-8f3a21c7", "a" * 40, Slot(0, 0), id="cut"),
        pytest.param("a" * 35 + "-0-0-8f3a21c7", "a" * 35 + ".b", Slot(0, 0), id="cut on a dot"),
        pytest.param(
            "x" * 27 + "-2147483647-1-8f3a21c7", "x" * 253, Slot(2147483647, 1), id="long slot"
        ),
        pytest.param("e-1-2-3-0-1-8f3a21c7", "e-1-2-3", Slot(0, 1), id="digits in the base"),
        pytest.param("a-b-0-0-8f3a21c7", "a-b", Slot(0, 0), id="a-b gives a-b's name"),
        pytest.param("a-b-0-0-8f3a21c7", "a.b", Slot(0, 0), id="so does a.b"),
        pytest.param("a" * 36 + "-0-0-8f3a21c7", "a" * 41, Slot(0, 0), id="so does a longer name"),
        pytest.param("qwen3-tpu-engine-0-0-30d2d711", "qwen3-tpu-engine", None, id="other hash"),
        pytest.param("qwen3-tpu-other-0-0-8f3a21c7", "qwen3-tpu-engine", None, id="other replica"),
        pytest.param("qwen3-tpu-engine-0-0-8f3a21c7", "qwen3-tpu", None, id="a prefix of it"),
        pytest.param("qwen3-tpu-engine-0-0-8f3a21c7", "qwen3-tpu-engine-0", None, id="longer"),
        pytest.param("a" * 35 + "-0-0-8f3a21c7", "a" * 40, None, id="not cut as D2 cuts"),
        pytest.param("qwen3-tpu-engine-01-0-8f3a21c7", "qwen3-tpu-engine", None, id="leading 0"),
        pytest.param("qwen3-tpu-engine-0-00-8f3a21c7", "qwen3-tpu-engine", None, id="ordinal 00"),
        pytest.param("qwen3-tpu-engine--1-0-8f3a21c7", "qwen3-tpu-engine", None, id="negative"),
        pytest.param("qwen3-tpu-engine-0-0-8F3A21C7", "qwen3-tpu-engine", None, id="upper hash"),
        pytest.param("qwen3-tpu-engine-0-0-8f3a21c", "qwen3-tpu-engine", None, id="short hash"),
        pytest.param("qwen3-tpu-engine-0-0-8f3a21c70", "qwen3-tpu-engine", None, id="long hash"),
        pytest.param("qwen3-tpu-engine-0-8f3a21c7", "qwen3-tpu-engine", None, id="no ordinal"),
        pytest.param("qwen3-tpu-engine-x-0-8f3a21c7", "qwen3-tpu-engine", None, id="letter"),
        pytest.param("qwen3-tpu-engine-0-0-8f3a21c7-x", "qwen3-tpu-engine", None, id="trailer"),
        pytest.param("-0-0-8f3a21c7", "qwen3-tpu-engine", None, id="no base"),
        pytest.param("0-0-8f3a21c7", "qwen3-tpu-engine", None, id="two dashes"),
        pytest.param("8f3a21c7", "qwen3-tpu-engine", None, id="a hash alone"),
        pytest.param("", "qwen3-tpu-engine", None, id="empty"),
        pytest.param("qwen3-tpu-engine-0-0-8f3a21c7", "Upper", None, id="no object name"),
        pytest.param("qwen3-tpu-engine-0-0-8f3a21c7", "", None, id="empty replica name"),
    ],
)
def test_a_name_reads_back_to_its_slot_only_for_the_replica_that_gives_it(
    name: str, replica: str, slot: Slot | None
) -> None:
    assert slot_of_name(name, replica, H) == slot


def test_a_name_of_another_owner_hash_is_not_ours() -> None:
    name = slice_name("qwen3-tpu-engine", Slot(0, 0), H)
    assert slot_of_name(name, "qwen3-tpu-engine", "30d2d711") is None
    assert slot_of_name(name, "qwen3-tpu-engine", "8F3A21C7") is None
    assert slot_of_name(name, "qwen3-tpu-engine", "") is None


@settings(deadline=None)
@given(object_names, indices, indices, hashes)
def test_every_slice_name_reads_back_to_its_slot(
    replica: str, instance: int, ordinal: int, hash8: str
) -> None:
    slot = Slot(instance, ordinal)
    assert slot_of_name(slice_name(replica, slot, hash8), replica, hash8) == slot


@settings(deadline=None)
@given(object_names, indices, indices, hashes, hashes)
def test_a_name_of_another_hash_reads_back_to_no_slot(
    replica: str, instance: int, ordinal: int, hash8: str, other: str
) -> None:
    name = slice_name(replica, Slot(instance, ordinal), hash8)
    assert slot_of_name(name, replica, other) == (
        Slot(instance, ordinal) if other == hash8 else None
    )


@settings(deadline=None)
@given(object_names, object_names, indices, indices, hashes)
def test_a_name_of_another_replica_reads_back_only_if_that_replica_gives_it_too(
    replica: str, other: str, instance: int, ordinal: int, hash8: str
) -> None:
    slot = Slot(instance, ordinal)
    name = slice_name(replica, slot, hash8)
    # Names cut to the same base ("a" * 40 and "a" * 41, or "a.b" and "a-b") do collide; in
    # practice the hash, of namespace, name and UID, tells them apart.
    expected = slot if slice_name(other, slot, hash8) == name else None
    assert slot_of_name(name, other, hash8) == expected


@settings(deadline=None)
@given(object_names, indices, indices, hashes, st.data())
def test_a_mangled_suffix_reads_back_to_no_slot(
    replica: str, instance: int, ordinal: int, hash8: str, data: st.DataObject
) -> None:
    name = slice_name(replica, Slot(instance, ordinal), hash8)
    base = name[: -len(f"-{instance}-{ordinal}-{hash8}")]
    mangle = data.draw(
        st.sampled_from(
            [
                f"{base}-0{instance}-{ordinal}-{hash8}",
                f"{base}-{instance}-0{ordinal}-{hash8}",
                f"{base}-{instance}-{ordinal}-{hash8}0",
                f"{base}-{instance}-{ordinal}-{hash8[:-1]}",
                f"{base}-{instance}-{ordinal}-{hash8.upper()}x",
                f"{base}-{instance}-{ordinal}{hash8}",
                f"{base}-{instance}-{ordinal}-{hash8}-0",
                f"{base}-{instance}-{ordinal}-{hash8}-{hash8}",
                f"{base}-{instance}--{ordinal}-{hash8}",
                f"{base}-{instance}-{ordinal}-{hash8[:4]}-{hash8[4:]}",
            ]
        )
    )
    assert slot_of_name(mangle, replica, hash8) is None


@settings(deadline=None)
@given(
    object_names,
    hashes,
    st.one_of(
        st.text(max_size=60),
        st.builds(
            lambda base, i, o, h: f"{base}-{i}-{o}-{h}",
            st.text("ab-0", max_size=40),
            indices,
            indices,
            hashes,
        ),
    ),
)
def test_a_name_reads_back_only_to_the_slot_that_is_given_it(
    replica: str, hash8: str, name: str
) -> None:
    # "x"*33 + "-51-12-<hash>" is slot (51, 12)'s name of "x"*33 + "-51more": a name whose
    # suffix looks merged ("-1-2-" written "-12-") can be another slot's, never a wrong one.
    slot = slot_of_name(name, replica, hash8)
    assert slot is None or slice_name(replica, slot, hash8) == name


def test_a_merged_suffix_is_the_name_of_another_slot_when_the_cut_makes_it_so() -> None:
    replica = "x" * 33 + "-51" + "more"
    name = slice_name(replica, Slot(1, 2), H)
    assert name == "x" * 33 + "-51-1-2-8f3a21c7"
    assert slot_of_name("x" * 33 + "-51-12-8f3a21c7", replica, H) == Slot(51, 12)
    assert slot_of_name("qwen3-tpu-engine-12-8f3a21c7", "qwen3-tpu-engine", H) is None

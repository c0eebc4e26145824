"""``ome.kube.json_copy``, the copy caches and the embedded API server make of every JSON
object they hand out: equal to ``copy.deepcopy`` on any JSON value, and independent of it."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ome.kube import json_copy, json_dumps, json_loads

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=30,
)


@given(JSON_VALUES)
def test_a_copy_equals_the_original_and_shares_nothing_mutable(value: Any) -> None:
    copied = json_copy(value)
    assert copied == copy.deepcopy(value)

    def containers(v: Any) -> list[Any]:
        if isinstance(v, dict):
            return [v, *(c for x in v.values() for c in containers(x))]
        if isinstance(v, list):
            return [v, *(c for x in v for c in containers(x))]
        return []

    originals = {id(c) for c in containers(value)}
    assert not originals & {id(c) for c in containers(copied)}


def test_changing_the_copy_leaves_the_original_alone() -> None:
    pod = {"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "c"}]}}
    copied = json_copy(pod)
    copied["metadata"]["labels"]["a"] = "2"
    copied["spec"]["containers"].append({"name": "d"})
    assert pod == {"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "c"}]}}


JSON_WITH_EVERY_FLOAT = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=30,
)


@given(JSON_WITH_EVERY_FLOAT)
def test_a_copy_keeps_what_orjson_cannot_encode(value: Any) -> None:
    """NaN, infinities, integers beyond 64 bits and lone surrogates survive the copy as they
    are (orjson would write NaN as null, and refuses the others)."""
    assert json.dumps(json_copy(value)) == json.dumps(value)


def test_a_copy_deeper_than_orjson_nests_is_still_a_copy() -> None:
    deep: Any = {"leaf": 1}
    for _ in range(150):  # 300 levels: more than orjson's 254
        deep = {"a": [deep]}
    copied = json_copy(deep)
    assert copied == deep and copied is not deep


INT64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)
API_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | INT64
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(blacklist_categories=["Cs"])),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=30,
)


@given(API_VALUES)
def test_the_codec_reads_and_writes_what_the_standard_library_does(value: Any) -> None:
    text = json.dumps(value)
    assert json_loads(text.encode()) == json.loads(text)
    assert json.loads(json_dumps(value)) == value


def test_the_codec_falls_back_where_orjson_refuses() -> None:
    assert json.loads(json_dumps({"big": 2**70})) == {"big": 2**70}
    deep = "[" * 300 + "]" * 300
    assert json_loads(deep) == json.loads(deep)
    with pytest.raises(TypeError):
        json_dumps({"when": object()})
    with pytest.raises(ValueError):
        json_loads(b"{not json")

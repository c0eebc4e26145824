"""``ome.kube.json_copy``, the copy caches and the embedded API server make of every JSON
object they hand out: equal to ``copy.deepcopy`` on any JSON value, and independent of it."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ome.kube import json_copy

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

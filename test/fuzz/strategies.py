"""What every fuzzer feeds the product: random JSON of any shape, hostile scalars (huge and
negative numbers, unicode, control characters), nesting far deeper than any schema, and
"mutants": a valid document with one field replaced, removed, or joined by a stranger.

Plain strategies over plain JSON values; nothing here knows what the product checks.
"""

from __future__ import annotations

import copy
import functools
import json
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from hypothesis import settings
from hypothesis import strategies as st

from ome.tpuslice.config import MAX_DEPTH, parse_config
from ome.tpuslice.types import GUIDE_CONFIG_JSON, Config

_T = TypeVar("_T")
JSON = dict[str, Any]
Path = tuple[str | int, ...]


def _guide_config() -> Config:
    config = parse_config(GUIDE_CONFIG_JSON)
    assert config is not None
    return config


#: The walkthrough's Step 1 configuration, parsed.
GUIDE_CONFIG = _guide_config()

#: The profile's own settings, for tests: ``@FUZZ`` or ``settings(FUZZ, max_examples=...)``.
FUZZ = settings.get_profile("ome-fuzz")

#: Strings a user might paste: every plane of unicode (surrogates excluded: they cannot be
#: encoded to send), control characters, the product's own separators and label keys.
KEYS = st.sampled_from(
    [
        "name",
        "metadata",
        "spec",
        "status",
        "runners",
        "template",
        "nodeSelector",
        "containers",
        "resources",
        "limits",
        "requests",
        "google.com/tpu",
        "cloud.google.com/gke-tpu-accelerator",
        "cloud.google.com/gke-tpu-topology",
        "cloud.google.com/gke-tpu-slice",
        "ome.io/tpu-slice-provisioning",
        "size",
        "type",
        "reason",
        "conditions",
        "",
        "\u0000",
        "ünïcödé",
        "\U0001d518\U0001d52b\U0001d526",  # Fraktur letters: outside the BMP
    ]
)
TEXT = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        [
            "",
            " ",
            "true",
            "default",
            "leader",
            "worker",
            "tpu7x",
            "2x2x1",
            "2x2x2",
            "0x0",
            "1x1x1x1",
            "9" * 40 + "x2",
            "4",
            "-4",
            "1500m",
            "1e309",
            "NaN",
            "Infinity",
            "2Ki",
            "4ki",
            "1e999999999k",
            "Ready",
            "ACTIVE",
            "Unknown",
            "True",
            "2026-01-02T03:04:05Z",
            "not-a-time",
            "\u202e\u0000\n\t",
            "ome.io/slice-owner",
        ]
    ),
)
INTS = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([0, -1, 1, 2**31, 2**63 - 1, -(2**63), 2**63, 10**30]),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    INTS,
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)


@functools.cache
def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Any JSON value, a few levels deep. One strategy per size, built once: the composites
    draw from it on every example, and a recursive strategy built anew each time costs more
    to set up than to draw from."""
    return st.recursive(
        SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(st.one_of(KEYS, st.text(max_size=8)), inner, max_size=4),
        ),
        max_leaves=max_leaves,
    )


@functools.cache
def json_objects(max_leaves: int = 12) -> st.SearchStrategy[JSON]:
    """A JSON object of no particular shape (built once per size, as ``json_values``)."""
    return st.dictionaries(
        st.one_of(KEYS, st.text(max_size=8)), json_values(max_leaves), max_size=5
    )


def in_thread(call: Callable[[], _T]) -> _T:
    """``call()`` on a fresh thread, as the webhook server and the controllers' workers run
    it: at the shallow stack the product runs at, not pytest's and Hypothesis's deep one.
    Whatever it raises is raised here."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append((True, call()))
        except BaseException as e:  # handed to the test's thread
            box.append((False, e))

    thread = threading.Thread(target=run, name="fuzz-call")
    thread.start()
    thread.join(30)
    assert box, "the call did not return within 30 s"
    ok, value = box[0]
    if not ok:
        raise value
    return cast(_T, value)


def nested(depth: int, leaf: Any = 1, kind: str = "list") -> Any:
    """``leaf`` inside ``depth`` arrays (or single-key objects): built by a loop, never by
    recursion, so that the test itself is not what overflows."""
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


def nested_text(depth: int, kind: str = "list") -> str:
    """The JSON text of ``nested(depth)``, built without ``json.dumps`` (which recurses)."""
    if kind == "list":
        return "[" * depth + "1" + "]" * depth
    return '{"k":' * depth + "1" + "}" * depth


#: Depths around every bound: the config's ``MAX_DEPTH``, the interpreter's recursion limit,
#: and far beyond both.
DEPTHS = st.sampled_from(
    [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 300, 500, 900, 990, 1000, 1100, 5000, 100_000]
)


# -- mutants -------------------------------------------------------------------------------


def leaf_paths(value: Any, prefix: Path = ()) -> list[Path]:
    """Every path of ``value``, containers included (the root excluded)."""
    out: list[Path] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out.append((*prefix, key))
            out.extend(leaf_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.append((*prefix, i))
            out.extend(leaf_paths(item, (*prefix, i)))
    return out


_DELETE = object()


def replace_at(doc: Any, path: Path, new: Any) -> Any:
    """A copy of ``doc`` with the value at ``path`` replaced by ``new`` (``_DELETE``: removed)."""
    out = copy.deepcopy(doc)
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if new is _DELETE:
        del parent[last]
    else:
        parent[last] = new
    return out


@st.composite
def mutants(draw: st.DrawFn, doc: Any, values: st.SearchStrategy[Any] | None = None) -> Any:
    """``doc`` with one to three of its fields replaced by random values, removed, or given
    a sibling of any name: how a user's typo looks."""
    values = values if values is not None else json_values()
    out = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        paths = leaf_paths(out)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "replace", "delete", "sibling"]))
        if action == "replace":
            out = replace_at(out, path, draw(values))
        elif action == "delete":
            out = replace_at(out, path, _DELETE)
        else:
            parent_path = path[:-1]
            parent = out
            for step in parent_path:
                parent = parent[step]
            if isinstance(parent, dict):
                parent[draw(st.one_of(KEYS, st.text(max_size=8)))] = draw(values)
            else:
                parent.append(draw(values))
    return out


def dumps(value: Any) -> str:
    """JSON text of ``value``, or of its string form when it cannot be written (a float that
    JSON has no literal for is already excluded by ``SCALARS``)."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (ValueError, RecursionError):
        return str(value)

"""Fuzzing the ``tpuSliceProvisioning`` configuration (A1 to A5) through its three doors:
the pure parser (``parse_config``, ``validate``), ``ome-manager check-config`` run in-process,
and the manager's load from the ConfigMap (``setup.load_config``).

Whatever the text, each must reach a clear answer: a ``Config``, provisioning off, or a
``ConfigError`` whose every error is a non-empty line naming the field at fault;
check-config prints ``ok``, or ``invalid tpuSliceProvisioning config:`` and the very errors
``parse_config`` gives, or one ``ome-manager check-config: error: ...`` line; never a traceback.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Iterator
from typing import Any, cast

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from ome.controllers.setup import CONFIG_KEY, CONFIG_MAP, StartupError, load_config
from ome.entrypoints import checkconfig
from ome.runtime.client import Client
from ome.tpuslice.config import (
    EXPECTED_OBJECT,
    INVALID_CONFIG,
    MAX_DEPTH,
    TOO_DEEP,
    ConfigError,
    parse_config,
    validate,
)
from ome.tpuslice.types import GUIDE_CONFIG_JSON, Config

from .strategies import (
    DEPTHS,
    FUZZ,
    KEYS,
    Path,
    json_values,
    leaf_paths,
    nested_text,
    replace_at,
)

GUIDE: dict[str, Any] = json.loads(GUIDE_CONFIG_JSON)
PREFIX = f"{INVALID_CONFIG}: "
USAGE = "ome-manager check-config: error: "


def outcome(text: str | None) -> tuple[str, tuple[str, ...]]:
    """``parse_config``'s verdict as plain data, checked for clarity on the way: ``("ok", ())``,
    ``("off", ())``, or ``("invalid", errors)``. Any other exception fails the test."""
    try:
        parsed = parse_config(text)
    except ConfigError as err:
        assert err.errors, "a ConfigError carries at least one error"
        for error in err.errors:
            assert isinstance(error, str) and error.strip(), err.errors
            assert "\n" not in error and "Traceback" not in error, error
        assert str(err) == PREFIX + "\n".join(err.errors)
        return "invalid", err.errors
    if parsed is None:
        assert text is None or not text.strip()
        return "off", ()
    assert isinstance(parsed, Config)
    return "ok", ()


# -- the pure parser ---------------------------------------------------------------------------


def _char_mutant(text: str, data: st.DataObject) -> str:
    """``text`` with a few characters deleted, inserted or swapped: a broken paste."""
    chars = list(text)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(chars)))
        what = data.draw(st.sampled_from(["delete", "insert"]))
        if what == "delete" and at < len(chars):
            del chars[at]
        else:
            chars.insert(at, data.draw(st.sampled_from(list('{}[]",:\\ 0-eE\x00é"'))))
    return "".join(chars)


@settings(FUZZ, max_examples=200)
@given(
    text=st.one_of(
        st.text(max_size=60),
        json_values().map(json.dumps),
        st.just(GUIDE_CONFIG_JSON),
    ),
    data=st.data(),
)
def test_any_text_parses_or_gets_clear_errors(text: str, data: st.DataObject) -> None:
    if data.draw(st.booleans()):
        text = _char_mutant(text, data)
    verdict, errors = outcome(text)
    if verdict == "invalid" and not text.strip().startswith("{"):
        assert errors == (EXPECTED_OBJECT,)


@st.composite
def one_change(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """The walkthrough's block with one field replaced, removed or given an unknown sibling; with
    what an error about it must name: the section changed, or the unknown top-level field as
    it is quoted."""
    path = draw(st.sampled_from(leaf_paths(GUIDE)))
    action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "sibling", "rename"]))
    if action == "rename":  # a map key: an accelerator's name, an annotation's key
        doc = json.loads(GUIDE_CONFIG_JSON)
        where = draw(st.sampled_from([doc["accelerators"], doc["slice"]["annotations"]]))
        old = draw(st.sampled_from(sorted(where)))
        new = draw(st.one_of(st.text(max_size=8), KEYS, st.sampled_from(["a\nb", "\x1b[2K", "\r"])))
        where[new] = where.pop(old)
        return ("accelerators" if where is doc["accelerators"] else "slice"), doc
    if action == "replace":
        return str(path[0]), replace_at(GUIDE, path, draw(json_values()))
    if action == "delete":
        doc = json.loads(GUIDE_CONFIG_JSON)
        parent: Any = doc
        for step in path[:-1]:
            parent = parent[step]
        del parent[path[-1]]
        return str(path[0]), doc
    doc = json.loads(GUIDE_CONFIG_JSON)
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    key = draw(st.one_of(KEYS, st.text(min_size=1, max_size=6)))
    if isinstance(parent, dict):
        if key in parent:
            return str(path[0]), doc
        parent[key] = draw(json_values())
    else:
        parent.append(draw(json_values()))
    if len(path) == 1:  # a stranger at the top: ``unknown field "<key>"``, JSON-escaped
        return json.dumps(key, ensure_ascii=False)[1:-1], doc
    return str(path[0]), doc


@settings(FUZZ, max_examples=300)
@given(change=one_change())
def test_a_changed_field_is_named_by_its_error(change: tuple[str, dict[str, Any]]) -> None:
    named, doc = change
    verdict, errors = outcome(json.dumps(doc))
    if verdict == "invalid":
        assert any(named in error for error in errors), (named, errors)


@FUZZ
@given(
    path=st.sampled_from(leaf_paths(GUIDE)), depth=DEPTHS, kind=st.sampled_from(["list", "dict"])
)
def test_deep_nesting_anywhere_is_too_deep_or_a_type_error(
    path: Path, depth: int, kind: str
) -> None:
    text = json.dumps(replace_at(GUIDE, path, "@DEEP@")).replace(
        '"@DEEP@"', nested_text(depth, kind)
    )
    verdict, errors = outcome(text)
    # ``path`` lies inside len(path) arrays and objects, the root included.
    if depth + len(path) > MAX_DEPTH:
        assert errors == (TOO_DEEP,)
    else:
        assert verdict == "invalid"
        assert any(str(path[0]) in error for error in errors), errors


HOSTILE_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e309", "-1e400", "9" * 5000, "-" + "1" * 4301]


@FUZZ
@given(path=st.sampled_from(leaf_paths(GUIDE)), literal=st.sampled_from(HOSTILE_NUMBERS))
def test_numbers_python_cannot_hold_are_clear_errors(path: Path, literal: str) -> None:
    text = json.dumps(replace_at(GUIDE, path, "@N@")).replace('"@N@"', literal)
    verdict, errors = outcome(text)
    assert verdict == "invalid"
    if "N" in literal or "I" in literal:
        assert errors == ("malformed JSON object: NaN is not a JSON value",) or errors[
            0
        ].startswith("malformed JSON object: ")
    else:
        assert any(str(path[0]) in error for error in errors), errors
        assert all(len(error) < 500 for error in errors), "a number too long to print is not"


@settings(FUZZ, max_examples=200)
@given(
    raw=st.dictionaries(st.one_of(KEYS, st.sampled_from(list(GUIDE))), json_values(), max_size=6)
)
def test_validate_never_raises_whatever_the_values(raw: dict[str, Any]) -> None:
    errors = validate(raw)
    assert isinstance(errors, list)
    assert all(isinstance(e, str) and e.strip() for e in errors)


# -- ome-manager check-config, in-process -------------------------------------------------------


def check(argv: list[str], stdin: str = "") -> tuple[int, list[str], list[str]]:
    """Run check-config; its exit code and the lines it printed to stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    rc = checkconfig.main(argv, stdin=io.StringIO(stdin), stdout=out, stderr=err)
    stdout, stderr = out.getvalue(), err.getvalue()
    assert "Traceback" not in stdout + stderr
    return rc, _lines(stdout), _lines(stderr)


def _lines(text: str) -> list[str]:
    """Lines as a terminal shows them: split at newlines only (``str.splitlines`` would also
    split at U+2028 and the like, which JSON quoting leaves in a value)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def assert_clear_verdict(rc: int, stdout: list[str], stderr: list[str]) -> None:
    """The three answers check-config may give, and nothing else."""
    if rc == 0:
        assert stdout in (["ok"], [checkconfig.OFF]) and stderr == []
    elif rc == 1:
        assert stdout[0] == f"{INVALID_CONFIG}:" and len(stdout) >= 2, stdout
        assert all(line.strip() for line in stdout[1:]), stdout
        assert stderr == []
    else:
        assert rc == 2, rc
        assert stdout == [] and len(stderr) == 1, (stdout, stderr)
        assert stderr[0].startswith(USAGE + "cannot read "), stderr


def expected_lines(verdict: tuple[str, tuple[str, ...]]) -> tuple[int, list[str]]:
    """What check-config must print for ``parse``'s verdict: it adds no rule of its own."""
    kind, errors = verdict
    if kind == "invalid":
        return 1, [f"{INVALID_CONFIG}:", *errors]
    return 0, ["ok" if kind == "ok" else checkconfig.OFF]


@settings(FUZZ, max_examples=150)
@given(
    text=st.one_of(
        st.text(max_size=60),
        json_values().map(json.dumps),
        one_change().map(lambda change: json.dumps(change[1])),
    )
)
def test_check_config_prints_exactly_what_parse_says(text: str) -> None:
    rc, stdout, stderr = check(["-"], text)
    assert_clear_verdict(rc, stdout, stderr)
    if "ome" not in text and "ConfigMap" not in text and "\\" not in text:  # the block as written
        expected = expected_lines(outcome(text))
        if expected == (1, [f"{INVALID_CONFIG}:", EXPECTED_OBJECT]):
            # no block at all: check-config says what the file holds instead
            prefix = checkconfig.not_an_object("")
            assert rc == 1 and len(stdout) == 2 and stdout[1].startswith(prefix), stdout
            assert len(stdout[1]) > len(prefix), stdout
        else:
            assert (rc, stdout) == expected


@st.composite
def values_files(draw: st.DrawFn) -> tuple[str, Any]:
    """A Helm values file whose ``ome.controller.tpuSliceProvisioning`` is a mutant of the
    guide's block (or any value), dumped as YAML in block or flow style."""
    block: Any = draw(
        st.one_of(one_change().map(lambda change: change[1]), json_values(), st.just(GUIDE))
    )
    values = {"ome": {"controller": {"tpuSliceProvisioning": block}}, "other": draw(json_values(4))}
    text = yaml.safe_dump(
        values, default_flow_style=draw(st.booleans()), allow_unicode=True, sort_keys=False
    )
    return text, block


@settings(FUZZ, max_examples=100)
@given(case=values_files())
def test_a_values_file_is_checked_as_its_json_block(case: tuple[str, Any]) -> None:
    text, block = case
    rc, stdout, stderr = check(["-"], text)
    assert_clear_verdict(rc, stdout, stderr)
    if block is None or block in ({}, ""):
        assert (rc, stdout) == (0, [checkconfig.OFF])
    elif isinstance(block, str):
        assert (rc, stdout) == expected_lines(outcome(block))
    else:
        assert (rc, stdout) == expected_lines(outcome(json.dumps(block, ensure_ascii=False)))


#: YAML that attacks the reader: aliases that multiply or loop, merge-key chains, deep flow
#: collections, tags PyYAML's safe loader refuses, dates that are none, integers past int().
HOSTILE_YAML = [
    "ome:\n  controller:\n    tpuSliceProvisioning: &a [*a]\n",
    "ome: &o\n  controller: *o\n",
    "a: &a [1]\n"
    + "".join(
        f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + "ome:\n  controller:\n    tpuSliceProvisioning: {x: *i}\n",
    "ome:\n  controller:\n    tpuSliceProvisioning: !!python/object:os.system {}\n",
    "ome:\n  controller:\n    tpuSliceProvisioning: !!binary aGVsbG8=\n",
    "ome:\n  controller:\n    tpuSliceProvisioning: {chipResource: 2024-13-45}\n",
    "ome:\n  controller:\n    tpuSliceProvisioning: {chipsPerHost: " + "9" * 5000 + "}\n",
    "ome:\n  controller:\n    tpuSliceProvisioning:\n      <<: {chipResource: x}\n",
    "ome:\n  controller:\n    tpuSliceProvisioning: " + "[" * 5000 + "]" * 5000 + "\n",
    "ome: " + "[" * 100_000 + "\n",
    "ome:\n  controller:\n    tpuSliceProvisioning: {? [a, b] : c}\n",
    "ome:\n  controller:\n    tpuSliceProvisioning: {1: 2, null: 3, true: 4, 2024-01-01: 5}\n",
    "ome: {controller: {tpuSliceProvisioning: .nan}}\n",
    "ome: {controller: {tpuSliceProvisioning: '" + GUIDE_CONFIG_JSON.replace("'", "''") + "'}}\n",
    "%YAML 1.1\n---\nome: 1\n---\nome: 2\n",
    "ome:\t\x00\n",
    "\ufeffome: {controller: {tpuSliceProvisioning: {}}}\n",
]


def _merge_chain(n: int) -> str:
    lines = ["m0: &m0 {k0: 0}"]
    for i in range(1, n):
        lines.append(f"m{i}: &m{i} {{<<: *m{i - 1}, k{i}: {i}}}")
    lines.append(f"ome: {{controller: {{tpuSliceProvisioning: {{<<: *m{n - 1}}}}}}}")
    return "\n".join(lines) + "\n"


HOSTILE_YAML.append(_merge_chain(2000))


@pytest.mark.parametrize("text", HOSTILE_YAML, ids=range(len(HOSTILE_YAML)))
def test_hostile_yaml_gets_one_verdict(text: str) -> None:
    rc, stdout, stderr = check(["-"], text)
    assert_clear_verdict(rc, stdout, stderr)


@st.composite
def yaml_soup(draw: st.DrawFn) -> str:
    """Text made of YAML's own tokens around an ``ome`` key: what a fuzzer of the reader
    needs to reach anchors, aliases, merges, flow and block collections at once."""
    tokens = st.sampled_from(
        [
            "ome:",
            "controller:",
            "tpuSliceProvisioning:",
            "\n",
            "  ",
            "- ",
            "[",
            "]",
            "{",
            "}",
            ", ",
            ": ",
            "&a ",
            "*a",
            "&b ",
            "*b",
            "<<: ",
            "? ",
            "!!str ",
            "!!map ",
            "'",
            '"',
            "#",
            "|",
            ">",
            "---\n",
            "...\n",
            "1",
            "-1",
            "1e309",
            "null",
            "~",
            "true",
            "x",
            "é",
            GUIDE_CONFIG_JSON,
        ]
    )
    return "".join(draw(st.lists(tokens, max_size=40)))


@settings(FUZZ, max_examples=200)
@given(text=yaml_soup())
def test_yaml_soup_gets_one_verdict(text: str) -> None:
    rc, stdout, stderr = check(["-"], text)
    assert_clear_verdict(rc, stdout, stderr)


@pytest.fixture(scope="module")
def scratch() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="ome-fuzz-") as directory:
        yield directory


@settings(FUZZ, max_examples=100)
@given(
    content=st.one_of(
        st.binary(max_size=80),
        st.sampled_from([b"\xff\xfe{}", b'{"chipResource": "\xc3"}', b"\x00" * 10, b""]),
        st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")),
    )
)
def test_any_file_content_gets_one_verdict(scratch: str, content: bytes) -> None:
    path = os.path.join(scratch, "block.json")
    with open(path, "wb") as f:
        f.write(content)
    rc, stdout, stderr = check([path])
    assert_clear_verdict(rc, stdout, stderr)
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        assert rc == 2 and stderr[0].startswith(f"{USAGE}cannot read {path}: ")


def test_an_unreadable_file_is_one_usage_line(scratch: str) -> None:
    for path in (os.path.join(scratch, "missing.json"), scratch, "/dev/null/x"):
        rc, stdout, stderr = check([path])
        assert rc == 2 and stdout == [] and len(stderr) == 1, (path, stderr)
        assert stderr[0].startswith(f"{USAGE}cannot read {path}: "), stderr


@settings(FUZZ, max_examples=100)
@given(
    argv=st.lists(
        st.one_of(
            st.sampled_from(["-", "--", "-h", "--help", "--x", "-x", ""]),
            # An argument from the OS never holds a NUL (exec takes C strings).
            st.text(st.characters(exclude_characters="\x00"), max_size=8),
        ),
        max_size=3,
    )
)
def test_any_arguments_end_in_an_exit_code(scratch: str, argv: list[str]) -> None:
    cwd = os.getcwd()
    os.chdir(scratch)  # relative FILE arguments name nothing there
    try:
        rc, _stdout, stderr = check(argv)
    finally:
        os.chdir(cwd)
    assert rc in (0, 1, 2)
    if rc == 2:
        assert stderr and stderr[-1].startswith(USAGE), stderr


# -- the manager's load from the ConfigMap ----------------------------------------------------


class _ConfigMaps:
    """The one call ``load_config`` makes: a live read of the ConfigMap."""

    def __init__(self, data: Any = None, status: int | None = None) -> None:
        self.data, self.status = data, status

    def live_get(self, resource: Any, name: str, namespace: str) -> dict[str, Any]:
        assert (name, namespace) == (CONFIG_MAP, "ome")
        if self.status is not None:
            raise ApiException(status=self.status, reason="Boom")
        return {"metadata": {"name": name}, "data": self.data}


@settings(FUZZ, max_examples=150)
@given(
    data=st.one_of(
        st.none(),
        st.dictionaries(st.sampled_from(["other", CONFIG_KEY]), st.text(max_size=40)),
        one_change().map(lambda change: {CONFIG_KEY: json.dumps(change[1])}),
        json_values().map(lambda v: {CONFIG_KEY: json.dumps(v)}),
    )
)
def test_the_manager_loads_the_configmap_or_says_why_not(data: Any) -> None:
    client = cast(Client, _ConfigMaps(data))
    text = (data or {}).get(CONFIG_KEY)
    verdict = outcome(text)
    if verdict[0] == "invalid":
        with pytest.raises(ConfigError) as raised:
            load_config(client, "ome")
        assert raised.value.errors == verdict[1]
        return
    config, why = load_config(client, "ome")
    if verdict[0] == "off":
        assert config is None and CONFIG_KEY in why and CONFIG_MAP in why
    else:
        assert isinstance(config, Config) and why == ""


def test_a_missing_configmap_turns_provisioning_off_and_other_failures_surface() -> None:
    config, why = load_config(cast(Client, _ConfigMaps(status=404)), "ome")
    assert config is None and CONFIG_MAP in why
    with pytest.raises(
        StartupError, match="reading ConfigMap ome/inferenceservice-config failed: 500"
    ):
        load_config(cast(Client, _ConfigMaps(status=500)), "ome")


# -- regressions: what the fuzzers found -----------------------------------------------------


@pytest.mark.parametrize("key", ["a\nb", "\r", "x\x00", "\x1b[2K"])
def test_a_map_key_with_a_line_break_keeps_every_error_on_one_line(key: str) -> None:
    """Found by ``test_a_changed_field_is_named_by_its_error``: a path holds a map key as
    written, so a newline in an accelerator's name or an annotation's key split its error in
    two, and check-config's "every error one per line" with it."""
    block = json.loads(GUIDE_CONFIG_JSON)
    block["accelerators"][key] = 5
    block["slice"]["annotations"][key] = 1
    verdict, errors = outcome(json.dumps(block))
    assert verdict == "invalid" and len(errors) >= 2, errors
    escaped = json.dumps(key)[1:-1]
    assert any(f"accelerators[{escaped}]" in error for error in errors), errors
    assert any(f"slice.annotations[{escaped}]" in error for error in errors), errors
    rc, stdout, stderr = check(["-"], json.dumps(block))
    assert (rc, stdout, stderr) == (1, [f"{INVALID_CONFIG}:", *errors], [])

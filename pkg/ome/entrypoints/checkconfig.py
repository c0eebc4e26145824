"""``ome-manager check-config FILE``: check a ``tpuSliceProvisioning`` block before deploying it.

It reads one file (or standard input): the JSON block itself, a Helm values file, or the
inferenceservice-config ConfigMap's manifest; and prints ``parse_config``'s verdict on the
block. It never talks to a cluster and adds no configuration rule of its own; its only
messages of its own say what it found when the file holds no block at all (``NOT_AN_OBJECT``)
or a ConfigMap entry that is no string. Whatever the input, it prints one verdict, quickly,
and never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import sys
from dataclasses import dataclass
from typing import Any, TextIO

import yaml

from ome.controllers.setup import CONFIG_KEY, CONFIG_MAP
from ome.tpuslice.config import (
    EXPECTED_OBJECT,
    INVALID_CONFIG,
    MAX_DEPTH,
    TOO_DEEP,
    ConfigError,
    parse_config,
    too_deep,
)

PROG = "ome-manager check-config"
VALUES_PATH = ("ome", "controller", "tpuSliceProvisioning")
OFF = "ok: " + ".".join(VALUES_PATH) + " is not set, so TPU slice provisioning is off"
#: A ConfigMap manifest is recognised by its ``kind``; the block is its ``data`` entry.
CONFIG_MAP_KIND = "ConfigMap"
OFF_CONFIG_MAP = (
    f"ok: the ConfigMap has no data.{CONFIG_KEY} entry, so TPU slice provisioning is off"
)


def not_an_object(got: str) -> str:
    """What check-config says, in place of ``parse_config``'s ``EXPECTED_OBJECT``, of a file that
    holds no block at all, with what it holds."""
    return (
        f"{EXPECTED_OBJECT} (the {CONFIG_KEY} block), a Helm values file or a "
        f"{CONFIG_MAP_KIND} manifest, got {got}"
    )


def not_a_string(got: str) -> str:
    """A ConfigMap's entry that is no string: ConfigMap data holds text, the JSON block."""
    return (
        f"{CONFIG_MAP_KIND} data.{CONFIG_KEY}: expected a string holding the JSON block, got {got}"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Check a tpuSliceProvisioning configuration as the manager reads it at start. FILE "
            "holds the JSON block itself, a Helm values file with the block under "
            + ".".join(VALUES_PATH)
            + f", or the {CONFIG_MAP} ConfigMap's manifest (YAML or JSON) with the block in "
            f"data.{CONFIG_KEY}. Prints ok, or every error one per line."
        ),
        epilog="Exit status: 0 valid, 1 invalid, 2 usage error (such as an unreadable FILE).",
    )
    parser.add_argument("file", metavar="FILE", help="the file to check, or - for standard input")
    return parser


def main(
    argv: list[str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Check ``FILE``; 0 when valid, 1 when invalid, 2 on a usage error.

    Choices where the spec is silent: the verdict (``ok``, or the errors) goes to standard
    output and usage errors to standard error; an unreadable file (missing, a directory, not
    UTF-8, on standard input too; YAML whose aliases multiply it, a "billion laughs") is a usage
    error. A values file whose block is missing or
    empty turns provisioning off, which is valid but rarely meant, so it prints ``ok: ...`` with
    the reason. A line the output cannot encode (half a surrogate pair, which JSON can escape)
    is printed with that character backslash-escaped."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    parser = _parser()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exit_:  # --help, or a usage error argparse already printed
        return exit_.code if isinstance(exit_.code, int) else 2
    shown = "standard input" if args.file == "-" else args.file
    try:
        text = stdin.read() if args.file == "-" else _read(args.file)
        # Standard input read with errors="surrogateescape" (a C or POSIX locale) holds the
        # bytes that are not UTF-8 as lone surrogates: decoding them again fails as a file does.
        text.encode("utf-8", "surrogateescape").decode("utf-8")
    except (OSError, UnicodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        _print(f"{PROG}: error: cannot read {shown}: {reason}", stderr)
        return 2
    written: str = text
    block: str | None = None
    off = OFF
    try:
        block, off = read_block(text)
        settings = None if block is None else parse_config(block)
    except ConfigError as err:
        errors = list(err.errors)
        if errors == [EXPECTED_OBJECT] and block is text:  # the file as written: no block
            errors = [not_an_object(what_it_holds(written))]
        _print(f"{INVALID_CONFIG}:", stdout)
        for error in errors:
            _print(error, stdout)
        return 1
    except _ExcessiveAliasingError as err:  # Helm cannot read it either
        _print(f"{PROG}: error: cannot read {shown}: {err}", stderr)
        return 2
    _print("ok" if settings is not None else off, stdout)
    return 0


def _print(line: str, stream: TextIO) -> None:
    encoding = getattr(stream, "encoding", None) or "utf-8"
    print(line.encode(encoding, "backslashreplace").decode(encoding), file=stream)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as file:
        return file.read()


def config_block(text: str) -> str | None:
    """The JSON text to check (``read_block``'s)."""
    return read_block(text)[0]


def read_block(text: str) -> tuple[str | None, str]:
    """The JSON text to check, and the ``ok`` line for a file that turns provisioning off:
    ``text`` itself; or the block of a Helm values file, re-encoded as JSON as the chart
    writes it (``None`` when the values file does not set it), a block given there as a
    string being taken as that JSON text; or a ConfigMap manifest's ``data`` entry (``None``
    when it has none; ``ConfigError`` when it is no string).

    A values file is YAML whose top level is a mapping with an ``ome`` key; that key is never a
    field of the block itself, so a JSON block (also YAML) is always checked as written, and
    its duplicate fields or syntax errors are reported as the manager would. A text that never
    spells ``ome``, not even through an escape, cannot be a values file, and a JSON object is
    recognised as the block without YAML, which is slow on big documents.

    YAML that is no values file, or cannot be read, is checked as written too; so is YAML
    nested deeper than a block may be (``MAX_DEPTH``) outside its block. A block nested deeper
    than that, in YAML or through aliases, raises ``ConfigError`` with ``TOO_DEEP``."""
    maybe_other = VALUES_PATH[0] in text or CONFIG_MAP_KIND in text or "\\" in text
    if not maybe_other or _is_json_block(text):
        return text, OFF
    try:
        values = yaml.load(text, Loader=_ValuesLoader)
    except _TooDeepError as deep:
        if deep.in_block:
            raise ConfigError([TOO_DEEP]) from None
        return text, OFF
    except (yaml.YAMLError, ValueError):
        return text, OFF
    if isinstance(values, dict) and values.get("kind") == CONFIG_MAP_KIND:
        data = values.get("data")
        entry = data.get(CONFIG_KEY) if isinstance(data, dict) else None
        if entry is None:
            return None, OFF_CONFIG_MAP
        if not isinstance(entry, str):
            raise ConfigError([not_a_string(_kind(entry))])
        return entry, OFF_CONFIG_MAP
    if not isinstance(values, dict) or VALUES_PATH[0] not in values:
        return text, OFF
    block: Any = values
    for key in VALUES_PATH:
        block = block.get(key) if isinstance(block, dict) else None
    if block is None or block in ({}, ""):
        return None, OFF
    if isinstance(block, str):
        return block, OFF
    return _block_json(block, budget=_VALUES_PER_CHARACTER * len(text) + 100), OFF


def what_it_holds(text: str) -> str:
    """What a file that is no JSON object holds, in a few words (``a list``, ``a Deployment
    manifest``), for ``not_an_object``."""
    if text.startswith("\ufeff"):  # JSON forbids it, and the manager reads JSON
        return "text that starts with a byte order mark"
    if too_deep(text):
        return "a document nested too deep"
    try:
        return _kind(json.loads(text))
    except (ValueError, RecursionError):
        pass
    try:
        documents = list(yaml.load_all(text, Loader=_ValuesLoader))
    except Exception:  # any YAML error, or hostile YAML: it is no YAML check-config reads
        return "text that is neither JSON nor YAML"
    if len(documents) != 1:
        return f"{len(documents)} YAML documents"
    if isinstance(documents[0], dict) and not isinstance(documents[0].get("kind"), str):
        return f"a YAML mapping without an {VALUES_PATH[0]} key (the block itself must be JSON)"
    return _kind(documents[0])


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        kind = value.get("kind")
        return f"a {kind} manifest" if isinstance(kind, str) and kind else "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float | _Literal):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return f"a {type(value).__name__}"


def _is_json_block(text: str) -> bool:
    """Whether ``text`` is a JSON object without an ``ome`` key, which YAML reads the same."""
    if not text.lstrip().startswith("{") or too_deep(text):
        return False
    try:
        value = json.loads(text, parse_int=len, parse_float=len)  # only the keys matter
    except (ValueError, RecursionError):
        return False
    return (
        isinstance(value, dict)
        and VALUES_PATH[0] not in value
        and value.get("kind") != CONFIG_MAP_KIND
    )


#: Text without aliases holds at most about one and a half values a character (``{a, b}``).
_VALUES_PER_CHARACTER = 4
_EXCESSIVE_ALIASING = (
    "document contains excessive aliasing"  # go-yaml's words; Helm reads values with it
)


def _block_json(block: Any, budget: int) -> str:
    """The block as JSON text, as the chart writes it: keys are strings, dates their ISO text,
    a set a mapping to nulls, binary its text, a ``_Literal`` as written.

    Aliases can nest a block deeper than its text does, and multiply it beyond any size: past
    ``MAX_DEPTH`` it raises ``ConfigError`` with ``TOO_DEEP``, and past ``budget`` values
    ``_ExcessiveAliasingError``."""
    left = budget

    def encode(value: Any, depth: int) -> str:
        nonlocal left
        left -= 1
        if left < 0:
            raise _ExcessiveAliasingError(_EXCESSIVE_ALIASING)
        if isinstance(value, dict | set | list | tuple):
            if depth >= MAX_DEPTH:  # the arrays and objects around ``value``
                raise ConfigError([TOO_DEEP])
            if isinstance(value, list | tuple):
                return "[" + ", ".join(encode(item, depth + 1) for item in value) + "]"
            items = value.items() if isinstance(value, dict) else dict.fromkeys(value).items()
            return (
                "{"
                + ", ".join(f"{_dumps(_key(k))}: {encode(v, depth + 1)}" for k, v in items)
                + "}"
            )
        if isinstance(value, _Literal):
            return value.text
        if isinstance(value, datetime.date):
            return _dumps(value.isoformat())
        if isinstance(value, bytes):
            return _dumps(value.decode("utf-8", "replace"))
        return _dumps(value)

    return encode(block, 0)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, _Literal):
        return key.text
    if isinstance(key, bool | None):
        return json.dumps(key)
    if isinstance(key, datetime.date):
        return key.isoformat()
    if isinstance(key, bytes):
        return key.decode("utf-8", "replace")
    return str(key)


@dataclass(frozen=True)
class _Literal:
    """A YAML integer with more digits than ``int()`` takes, kept as written so that the
    block's JSON holds it as the chart writes it, and ``parse_config`` reports it."""

    text: str


class _ExcessiveAliasingError(Exception):
    pass


class _TooDeepError(Exception):
    def __init__(self, in_block: bool) -> None:
        super().__init__("nesting too deep")
        self.in_block = in_block


class _ValuesLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` for values files, which may be hostile.

    PyYAML composes nodes recursively, and scans deeply nested flow collections in quadratic
    time, so it stops at the first array or mapping nested deeper than a block may be under
    ``VALUES_PATH`` (raising ``_TooDeepError``); ``_path`` holds the index of every node being
    composed (a key node for a mapping value, a position for an item, ``None`` for a key or the
    root). Merge keys (``<<: *defaults``) copy pairs, and a chain of them copies a number of
    pairs that grows with the square of its length, so past ``_VALUES_PER_CHARACTER`` pairs a
    character it raises ``_ExcessiveAliasingError``. It also keeps what ``SafeLoader`` raises
    ``ValueError`` on: an integer beyond ``int()``'s digit limit is a ``_Literal``, and a date
    that is no date a string, as Helm reads it."""

    _MAX_NODE_DEPTH = MAX_DEPTH + len(VALUES_PATH)

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._path: list[Any] = []
        self._pairs_left = _VALUES_PER_CHARACTER * len(stream) + 100

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if len(self._path) >= self._MAX_NODE_DEPTH and self.check_event(
            yaml.SequenceStartEvent, yaml.MappingStartEvent
        ):
            keys = self._path[1 : 1 + len(VALUES_PATH)]
            raise _TooDeepError(
                in_block=[getattr(key, "value", None) for key in keys] == list(VALUES_PATH)
            )
        self._path.append(index)
        try:
            return super().compose_node(parent, index)
        finally:
            self._path.pop()

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        super().flatten_mapping(node)
        self._pairs_left -= len(node.value)
        if self._pairs_left < 0:
            raise _ExcessiveAliasingError(_EXCESSIVE_ALIASING)

    def construct_int(self, node: yaml.ScalarNode) -> int | _Literal:
        try:
            return self.construct_yaml_int(node)
        except ValueError:  # a decimal integer of more digits than int() takes
            return _Literal(self.construct_scalar(node).replace("_", "").lstrip("+"))

    def construct_timestamp(self, node: yaml.ScalarNode) -> datetime.date | str:
        try:
            return self.construct_yaml_timestamp(node)
        except ValueError:  # 2024-13-45
            return self.construct_scalar(node)


_ValuesLoader.add_constructor("tag:yaml.org,2002:int", _ValuesLoader.construct_int)
_ValuesLoader.add_constructor("tag:yaml.org,2002:timestamp", _ValuesLoader.construct_timestamp)

"""``ome-manager check-config FILE``: check a ``tpuSliceProvisioning`` block before deploying it.

It reads one file (or standard input) and prints ``config.parse``'s verdict; it never talks to
a cluster and adds no configuration rule or message of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import sys
from typing import Any, TextIO

import yaml

from ome.tpuslice.config import INVALID_CONFIG, ConfigError, parse

PROG = "ome-manager check-config"
VALUES_PATH = ("ome", "controller", "tpuSliceProvisioning")
OFF = "ok: " + ".".join(VALUES_PATH) + " is not set, so TPU slice provisioning is off"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Check a tpuSliceProvisioning configuration as the manager reads it at start. FILE "
            "holds the JSON block itself, or a Helm values file with the block under "
            + ".".join(VALUES_PATH)
            + ". Prints ok, or every error one per line."
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
    UTF-8) is a usage error. A values file whose block is missing or empty turns provisioning
    off, which is valid but rarely meant, so it prints ``ok: ...`` with the reason."""
    stdin = sys.stdin if stdin is None else stdin
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    parser = _parser()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exit_:  # --help, or a usage error argparse already printed
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        text = stdin.read() if args.file == "-" else _read(args.file)
    except (OSError, UnicodeDecodeError) as err:
        shown = "standard input" if args.file == "-" else args.file
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        print(f"{PROG}: error: cannot read {shown}: {reason}", file=stderr)
        return 2
    block = config_block(text)
    if block is None:
        print(OFF, file=stdout)
        return 0
    try:
        settings = parse(block)
    except ConfigError as err:
        print(f"{INVALID_CONFIG}:", file=stdout)
        for error in err.errors:
            print(error, file=stdout)
        return 1
    print("ok" if settings is not None else OFF, file=stdout)
    return 0


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as file:
        return file.read()


def config_block(text: str) -> str | None:
    """The JSON text to check: ``text`` itself, or the block of a Helm values file, re-encoded
    as JSON as the chart writes it (``None`` when the values file does not set it); a block
    given there as a string is taken as that JSON text.

    A values file is YAML whose top level is a mapping with an ``ome`` key; that key is never a
    field of the block itself, so a JSON block (also YAML) is always checked as written, and
    its duplicate fields or syntax errors are reported as the manager would."""
    try:
        values = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if not isinstance(values, dict) or VALUES_PATH[0] not in values:
        return text
    block: Any = values
    for key in VALUES_PATH:
        block = block.get(key) if isinstance(block, dict) else None
    if block is None or block in ({}, ""):
        return None
    if isinstance(block, str):
        return block
    return json.dumps(_jsonable(block), ensure_ascii=False)


def _jsonable(value: Any) -> Any:
    """YAML values as JSON has them: keys are strings and dates are their ISO text."""
    if isinstance(value, dict):
        return {_key(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool | None):
        return json.dumps(key)
    return str(_jsonable(key))

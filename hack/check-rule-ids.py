#!/usr/bin/env python3
"""Check that every rule ID the repository cites resolves to a heading of docs/rules.md.

A rule ID is a section letter and a rule number, ``G3``; ``B6.3`` cites step 3 of B6. A
heading of docs/rules.md defines the ID it starts with (``### G3. Wanted slots``), and a
top-level numbered item under it (``3. ...``) defines its step. The check fails, listing
each one as ``path:line: ID``, on a citation of an ID no heading defines (or of a step its
rule does not have), and on an ID that two headings define.

What counts as a citation, so that nothing else that looks like one does:

- an upper-case letter and a number from 1 to 99 without a leading zero, with an optional
  ``.<step>``, standing alone: not inside a word, a number, a name or a path segment, and not
  next to ``-``, ``{`` or ``}``, nor followed by ``:<digit>`` (so ``E2E``, ``tpu7x``,
  ``2x2x1``, hex, ``Z07:00``, ``{N3}`` and ``R0`` are not); ``G3's`` and ``E3/E6`` are;
- ``P<n>`` is a percentile (``P99``), never a rule: no section of the rules is named P;
- in Python, only comments and string literals are prose: a name that looks like an ID is
  code, and a literal that holds nothing but an ID (an event reason in a test) is a value;
- in every other file, every line is prose.

It reads the files under the given paths, skipping hidden directories, ``__pycache__``,
``*.egg-info``, ``build`` and ``dist`` (what make and pip leave beside the sources), and files
that are not UTF-8 text. Standard library only, since ``make lint`` runs it as it is.
Hand-written: no linter knows this project's rule IDs.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
import tokenize
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

#: What `make lint` checks when no path is given: where code, tests and docs cite rules.
DEFAULT_PATHS = (
    "pkg",
    "stage",
    "test",
    "cmd",
    "hack",
    "charts",
    "config",
    "docs",
    "README.md",
)
RULES = "docs/rules.md"
SKIPPED_DIRS = {"__pycache__", "build", "dist"}

#: A citation: the ID (letter, number) and an optional step, standing alone.
CITATION = re.compile(
    r"(?<![\w.\-{}$#%@&\\])"
    r"(?P<id>(?!P)[A-Z][1-9][0-9]?)(?:\.(?P<step>[1-9][0-9]?))?"
    r"(?![\w\-{}]|\.\w|:\d)"
)
#: A heading that defines an ID: ``### G3. Wanted slots``.
HEADING = re.compile(r"^#{1,6}\s+(?P<id>[A-Z][1-9][0-9]?)\b")
ANY_HEADING = re.compile(r"^#{1,6}\s")
#: A numbered item at the start of a line: a step of the rule whose heading is above it.
STEP = re.compile(r"^(?P<n>[1-9][0-9]?)\.\s")

_STRING_PREFIX = re.compile(r"^[A-Za-z]*('''|\"\"\"|'|\")")
_PROSE_TOKENS = {tokenize.COMMENT, tokenize.STRING}
if hasattr(tokenize, "FSTRING_MIDDLE"):  # Python 3.12: an f-string's literal text
    _PROSE_TOKENS.add(tokenize.FSTRING_MIDDLE)


@dataclass(frozen=True)
class Citation:
    path: str
    line: int
    rule: str
    step: str | None

    @property
    def text(self) -> str:
        return f"{self.rule}.{self.step}" if self.step else self.rule


@dataclass(frozen=True)
class Rule:
    line: int
    steps: frozenset[str]


def rules(text: str) -> tuple[dict[str, Rule], list[str]]:
    """The IDs the headings of a rules page define, with their steps; and one error line per
    ID defined twice."""
    found: dict[str, Rule] = {}
    errors: list[str] = []
    current: str | None = None
    steps: dict[str, set[str]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        heading = HEADING.match(line)
        if heading:
            rule = heading["id"]
            if rule in found:
                errors.append(
                    f"{RULES}:{number}: {rule} is defined again (first at line {found[rule].line})"
                )
                current = None
                continue
            found[rule] = Rule(number, frozenset())
            steps[rule] = set()
            current = rule
        elif ANY_HEADING.match(line):
            current = None
        elif current is not None and (step := STEP.match(line)):
            steps[current].add(step["n"])
    return {r: Rule(v.line, frozenset(steps[r])) for r, v in found.items()}, errors


def _in_text(path: str, first_line: int, text: str) -> Iterator[Citation]:
    for offset, line in enumerate(text.split("\n")):
        for match in CITATION.finditer(line):
            yield Citation(path, first_line + offset, match["id"], match["step"])


def _only_an_id(token: str) -> bool:
    """Whether a string literal holds nothing but an ID: a value, not a citation."""
    prefix = _STRING_PREFIX.match(token)
    if prefix is None:
        return False
    quote = prefix.group(1)
    body = token[prefix.end() : len(token) - len(quote)]
    return CITATION.fullmatch(body.strip()) is not None


def _python(path: str, source: str) -> Iterator[Citation]:
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):  # not valid Python: read it as text
        yield from _in_text(path, 1, source)
        return
    for token in tokens:
        if token.type not in _PROSE_TOKENS:
            continue
        if token.type == tokenize.STRING and _only_an_id(token.string):
            continue
        yield from _in_text(path, token.start[0], token.string)


def citations(path: str, text: str) -> Iterator[Citation]:
    """The rule IDs a file cites, with their lines."""
    if path.endswith(".py"):
        yield from _python(path, text)
    else:
        yield from _in_text(path, 1, text)


def files(root: Path, paths: Sequence[str]) -> Iterator[Path]:
    """The files under ``paths`` (relative to ``root``), sorted, without what make and pip
    leave beside the sources."""
    for given in paths:
        top = root / given
        if top.is_file():
            yield top
            continue
        found: list[Path] = []
        for here, dirs, names in os.walk(top):
            dirs[:] = [
                d
                for d in dirs
                if not d.startswith(".") and d not in SKIPPED_DIRS and not d.endswith(".egg-info")
            ]
            found += [Path(here) / name for name in names]
        yield from sorted(found)


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    return None if "\0" in text else text


def check(root: Path, paths: Sequence[str]) -> tuple[list[str], int, int, int]:
    """Error lines, and the counts of citations, rules and files read."""
    rules_text = _read(root / RULES)
    if rules_text is None:
        return [f"{RULES}: not found"], 0, 0, 0
    known, errors = rules(rules_text)
    cited = read = 0
    for path in files(root, paths):
        text = _read(path)
        if text is None:
            continue
        read += 1
        relative = path.relative_to(root).as_posix()
        for citation in citations(relative, text):
            cited += 1
            rule = known.get(citation.rule)
            if rule is None or (citation.step is not None and citation.step not in rule.steps):
                errors.append(f"{citation.path}:{citation.line}: {citation.text}")
    return errors, cited, len(known), read


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="check-rule-ids.py",
        description=(
            "Fail on a rule ID (G3, B6.3) cited in code, tests or docs that does not resolve "
            f"to a heading of {RULES}: one line per citation, path:line: ID, and exit 1. "
            "Exit 0 with a one-line summary when every citation resolves."
        ),
    )
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help=f"files or directories to read, relative to ROOT (default: {' '.join(DEFAULT_PATHS)})",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help=f"the repository, whose {RULES} defines the IDs (default: this script's)",
    )
    args = parser.parse_args(argv)
    root = args.root.resolve()
    errors, cited, known, read = check(root, args.paths or DEFAULT_PATHS)
    if errors:
        print("\n".join(errors))
        some = "1 rule ID does not" if len(errors) == 1 else f"{len(errors)} rule IDs do not"
        print(f"check-rule-ids: {some} resolve to exactly one heading of {RULES}", file=sys.stderr)
        return 1
    print(
        f"check-rule-ids: {cited} citations in {read} files resolve to the {known} rules of {RULES}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

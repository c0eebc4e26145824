"""The Kubernetes JSONPath subset (``k8s.io/client-go/util/jsonpath``) used by printer columns.

Owns parsing and evaluating one path against plain JSON; it never mutates or copies objects and
never raises on missing data. Hand-written because Kubernetes' dialect (``{}`` wrapping,
``[?(@.a=="x")]`` filters without ``$``, escaped ``\\.`` in keys) is not what jsonpath-ng parses.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

# Characters that end a ``.field`` name (client-go's isTerminator).
_TERMINATORS = frozenset(" .,[]$@{}")
_SLICE_RE = re.compile(r"^(\s*-?\d*\s*)?(:\s*-?\d*\s*)?(:\s*-?\d*\s*)?$")
_FILTER_RE = re.compile(r"^([^!<>=]+)([!<>=]+)(.+?)$", re.DOTALL)
_INT_RE = re.compile(r"^[+-]?\d+$")
_FLOAT_RE = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")
_COMPARISONS = ("==", "!=", "<", ">", "<=", ">=")


@dataclass(frozen=True)
class _Field:
    name: str


@dataclass(frozen=True)
class _Wildcard:
    pass


@dataclass(frozen=True)
class _Recursive:
    pass


@dataclass(frozen=True)
class _Slice:
    start: int | None
    end: int | None
    step: int | None
    derived_end: bool  # ``[n]``: end is n+1


@dataclass(frozen=True)
class _Union:
    branches: tuple[tuple[_Step, ...], ...]


@dataclass(frozen=True)
class _Literal:
    value: Any


@dataclass(frozen=True)
class _Path:
    steps: tuple[_Step, ...]


_Operand = _Literal | _Path


@dataclass(frozen=True)
class _Filter:
    left: _Operand
    op: str  # one of _COMPARISONS, or "exists"
    right: _Operand | None


_Step = _Field | _Wildcard | _Recursive | _Slice | _Union | _Filter


def evaluate(path: str, obj: Any) -> list[Any]:
    """All values ``path`` selects in ``obj`` (``[]`` when nothing matches).

    Raises ``ValueError`` only for a malformed path.
    """
    values = [obj]
    for step in compile_path(path):
        values = _apply(step, values)
    return values


@functools.lru_cache(maxsize=512)
def compile_path(path: str) -> tuple[_Step, ...]:
    """Parse ``path`` (with or without ``{}``) into steps; ``ValueError`` if malformed."""
    text = path.strip()
    if text.startswith("{"):
        if not text.endswith("}"):
            raise ValueError(f"unclosed action in JSONPath {path!r}")
        text = text[1:-1].strip()
    elif text.endswith("}"):
        raise ValueError(f"unexpected '}}' in JSONPath {path!r}")
    try:
        return _Parser(text).steps(top=True)
    except ValueError as e:
        raise ValueError(f"invalid JSONPath {path!r}: {e}") from None


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def peek(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.text[i] if i < len(self.text) else ""

    def steps(self, top: bool = False) -> tuple[_Step, ...]:
        out: list[_Step] = []
        if self.peek() in ("$", "@"):
            self.pos += 1
        elif top and self.peek() and self.peek() not in ".[ ":
            out.append(_Field(self.name()))  # a bare first field: "status.phase"
        while self.pos < len(self.text):
            c = self.peek()
            if c == " ":
                self.pos += 1
            elif c == ".":
                self.pos += 1
                if self.peek() == ".":
                    self.pos += 1
                    out.append(_Recursive())
                    if self.peek() == "[":
                        continue
                if self.peek() == "*" and (self.peek(1) == "" or self.peek(1) in _TERMINATORS):
                    self.pos += 1
                    out.append(_Wildcard())
                    continue
                name = self.name()
                if name:
                    out.append(_Field(name))
                elif out and isinstance(out[-1], _Recursive):
                    raise ValueError("'..' must be followed by a field, '*' or '['")
            elif c == "[":
                out.append(self.bracket())
            else:
                raise ValueError(f"unrecognized character {c!r} at position {self.pos}")
        return tuple(out)

    def name(self) -> str:
        chars: list[str] = []
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == "\\" and self.pos + 1 < len(self.text):
                chars.append(self.text[self.pos + 1])
                self.pos += 2
                continue
            if c in _TERMINATORS:
                break
            chars.append(c)
            self.pos += 1
        return "".join(chars)

    def bracket(self) -> _Step:
        start = self.pos
        if self.text.startswith("[?(", self.pos):
            return self.filter()
        quote = ""
        i = self.pos + 1
        while i < len(self.text):
            c = self.text[i]
            if quote:
                if c == "\\":
                    i += 1
                elif c == quote:
                    quote = ""
            elif c in "'\"":
                quote = c
            elif c == "]":
                break
            i += 1
        else:
            raise ValueError(f"unterminated array at position {start}")
        self.pos = i + 1
        return _bracket_content(self.text[start + 1 : i])

    def filter(self) -> _Filter:
        start = self.pos
        i = self.pos + 3
        quote = ""
        while i < len(self.text):
            c = self.text[i]
            if quote:
                if c == "\\":
                    i += 1
                elif c == quote:
                    quote = ""
            elif c in "'\"":
                quote = c
            elif c == ")" and self.text.startswith(")]", i):
                break
            i += 1
        else:
            raise ValueError(f"unterminated filter at position {start}")
        self.pos = i + 2
        return _filter(self.text[start + 3 : i].strip())


def _split_commas(text: str) -> list[str]:
    parts: list[str] = []
    quote = ""
    current: list[str] = []
    for c in text:
        if quote:
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c == ",":
            parts.append("".join(current))
            current = []
            continue
        current.append(c)
    parts.append("".join(current))
    return parts


def _unquote(text: str) -> str | None:
    """The string a quoted literal spells, or None when ``text`` is not one quoted literal."""
    if len(text) < 2 or text[0] not in "'\"" or text[-1] != text[0]:
        return None
    body = text[1:-1]
    out: list[str] = []
    i = 0
    escapes = {"n": "\n", "t": "\t", "r": "\r"}
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            out.append(escapes.get(body[i + 1], body[i + 1]))
            i += 2
            continue
        if c == text[0]:
            return None
        out.append(c)
        i += 1
    return "".join(out)


def _bracket_content(text: str) -> _Step:
    content = text.strip()
    if content == "*":
        return _Slice(None, None, None, False)
    parts = _split_commas(content)
    if len(parts) > 1:
        return _Union(tuple((_bracket_content(p),) for p in parts))
    key = _unquote(content)
    if key is not None:
        return _Field(key)
    match = _SLICE_RE.match(content)
    if not content or match is None:
        raise ValueError(f"invalid array index {content!r}")
    raw = [g.strip() if g is not None else None for g in match.groups()]
    if raw[1] is None and raw[2] is None:
        if not raw[0]:
            raise ValueError(f"invalid array index {content!r}")
        index = int(raw[0])
        return _Slice(index, index + 1, None, True)

    def bound(group: str | None) -> int | None:
        if group is None:
            return None
        digits = group.lstrip(":").strip()
        return int(digits) if digits else None

    start = int(raw[0]) if raw[0] else None
    return _Slice(start, bound(raw[1]), bound(raw[2]), False)


def _operand(text: str) -> _Operand:
    text = text.strip()
    if not text:
        raise ValueError("empty filter operand")
    if text[0] in "@$.":
        return _Path(_Parser(text).steps())
    quoted = _unquote(text)
    if quoted is not None:
        return _Literal(quoted)
    if _INT_RE.match(text):
        return _Literal(int(text))
    if _FLOAT_RE.match(text):
        return _Literal(float(text))
    if text in ("true", "false"):
        return _Literal(text == "true")
    raise ValueError(f"unrecognized filter operand {text!r}")


def _filter(text: str) -> _Filter:
    match = _FILTER_RE.match(text)
    if match is None:
        return _Filter(_operand(text), "exists", None)
    left, op, right = match.groups()
    if op not in _COMPARISONS:
        raise ValueError(f"unrecognized filter operator {op}")
    return _Filter(_operand(left), op, _operand(right))


# ------------------------------------------------------------------------------ evaluation


def _apply(step: _Step, values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for value in values:
        out.extend(_apply_one(step, value))
    return out


def _apply_one(step: _Step, value: Any) -> list[Any]:
    if isinstance(step, _Field):
        if isinstance(value, dict) and step.name in value:
            return [value[step.name]]
        return []
    if isinstance(step, _Wildcard):
        if isinstance(value, dict):
            return list(value.values())
        if isinstance(value, list):
            return list(value)
        return []
    if isinstance(step, _Recursive):
        return _descendants(value)
    if isinstance(step, _Slice):
        return _slice(step, value) if isinstance(value, list) else []
    if isinstance(step, _Union):
        out: list[Any] = []
        for branch in step.branches:
            found = [value]
            for sub in branch:
                found = _apply(sub, found)
            out.extend(found)
        return out
    return _filter_items(step, value)


def _descendants(value: Any) -> list[Any]:
    """client-go's recursive descent: every container with children, and their children."""
    if isinstance(value, dict):
        children = list(value.values())
    elif isinstance(value, list):
        children = list(value)
    else:
        return []
    if not children:
        return []
    out = [value]
    for child in children:
        out.extend(_descendants(child))
    return out


def _slice(step: _Slice, items: list[Any]) -> list[Any]:
    """client-go's evalArray: out-of-range bounds select nothing rather than clamping."""
    n = len(items)
    start = step.start if step.start is not None else 0
    if start < 0:
        start += n
    end = step.end if step.end is not None else n
    if end < 0 or (end == 0 and step.derived_end):
        end += n
    if end == start:
        return []
    if not 0 <= start < n or not 0 <= end <= n or start > end:
        return []
    stride = step.step if step.step is not None else 1
    if stride <= 0:
        return []
    return items[start:end:stride]


def _resolve(operand: _Operand, item: Any) -> list[Any]:
    if isinstance(operand, _Literal):
        return [operand.value]
    found = [item]
    for sub in operand.steps:
        found = _apply(sub, found)
    return found


def _filter_items(step: _Filter, value: Any) -> list[Any]:
    if not isinstance(value, list):
        return []
    out: list[Any] = []
    for item in value:
        lefts = _resolve(step.left, item)
        if step.op == "exists":
            if lefts:
                out.append(item)
            continue
        assert step.right is not None
        rights = _resolve(step.right, item)
        if len(lefts) != 1 or len(rights) != 1:
            continue
        if _compare(lefts[0], step.op, rights[0]):
            out.append(item)
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compare(left: Any, op: str, right: Any) -> bool:
    """Go template comparison; values of different kinds never pass (Go reports an error)."""
    if isinstance(left, bool) and isinstance(right, bool):
        if op == "==":
            return left == right
        if op == "!=":
            return left != right
        return False
    if not (
        (_is_number(left) and _is_number(right))
        or (isinstance(left, str) and isinstance(right, str))
    ):
        return False
    if op == "==":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if op == "<":
        return bool(left < right)
    if op == ">":
        return bool(left > right)
    if op == "<=":
        return bool(left <= right)
    return bool(left >= right)

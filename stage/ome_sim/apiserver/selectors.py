"""Label and field selectors with kube-apiserver's parsing, matching and error wording.

Owns ``labels.Parse``, ``metav1.LabelSelector`` conversion, ``fields.ParseSelector`` and the
per-resource field sets; it never reads storage or decides which objects exist. Hand-written
because no Python library implements Kubernetes' selector grammar or its error messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ome.tpuslice.kubenames import label_value_problems, qualified_name_problems
from ome_sim.apiserver import errors
from ome_sim.apiserver.errors import FieldError

JSON = dict[str, Any]

# selection.Operator values, spelled as in k8s.io/apimachinery/pkg/selection.
IN = "in"
NOT_IN = "notin"
EQUALS = "="
DOUBLE_EQUALS = "=="
NOT_EQUALS = "!="
EXISTS = "exists"
DOES_NOT_EXIST = "!"
GREATER_THAN = "gt"
LESS_THAN = "lt"

_BINARY_OPERATORS = (IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, GREATER_THAN, LESS_THAN)
_ALL_OPERATORS = (*_BINARY_OPERATORS, EXISTS, DOES_NOT_EXIST)


# k8s.io/apimachinery/pkg/util/validation, shared with the product (one implementation), in
# kube-apiserver v1.37's wording.
def _qualified_name_errors(value: str) -> list[str]:
    return qualified_name_problems(value)


def _label_value_errors(value: str) -> list[str]:
    return label_value_problems(value)


class _SelectorSyntaxError(Exception):
    """A message that becomes a 400; ``requirement`` picks the kube-style prefix."""

    def __init__(self, message: str, requirement: bool) -> None:
        super().__init__(message)
        self.message = message
        self.requirement = requirement


def _int64(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``: optional sign, decimal digits, 64-bit range."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    value = int(text)
    if not -(2**63) <= value < 2**63:
        return None
    return value


@dataclass(frozen=True)
class Requirement:
    """One ``labels.Requirement``: ``key``, a selection operator, and its values (sorted)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        if self.operator in (IN, EQUALS, DOUBLE_EQUALS):
            return has and labels[self.key] in self.values
        if self.operator in (NOT_IN, NOT_EQUALS):
            return not has or labels[self.key] not in self.values
        if self.operator == EXISTS:
            return has
        if self.operator == DOES_NOT_EXIST:
            return not has
        if self.operator in (GREATER_THAN, LESS_THAN):
            if not has or len(self.values) != 1:
                return False
            actual = _int64(labels[self.key])
            wanted = _int64(self.values[0])
            if actual is None or wanted is None:
                return False
            return actual > wanted if self.operator == GREATER_THAN else actual < wanted
        return False

    def __str__(self) -> str:
        text = ("!" if self.operator == DOES_NOT_EXIST else "") + self.key
        if self.operator in (EXISTS, DOES_NOT_EXIST):
            return text
        symbol = {
            EQUALS: "=",
            DOUBLE_EQUALS: "==",
            NOT_EQUALS: "!=",
            IN: " in ",
            NOT_IN: " notin ",
            GREATER_THAN: ">",
            LESS_THAN: "<",
        }[self.operator]
        values = ",".join(sorted(self.values))
        if self.operator in (IN, NOT_IN):
            values = f"({values})"
        return text + symbol + values


def new_requirement(key: str, operator: str, values: list[str]) -> Requirement:
    """``labels.NewRequirement``: validates key, operator arity and values.

    Raises ``_SelectorSyntaxError`` (requirement-level) listing every problem, like the
    aggregate error Go returns.
    """
    problems: list[FieldError] = []
    key_errs = _qualified_name_errors(key)
    if key_errs:
        problems.append(FieldError.invalid("key", key, "; ".join(key_errs)))
    if operator in (IN, NOT_IN):
        if not values:
            problems.append(
                FieldError.invalid(
                    "values", values, "for 'in', 'notin' operators, values set can't be empty"
                )
            )
    elif operator in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS):
        if len(values) != 1:
            problems.append(
                FieldError.invalid(
                    "values", values, "exact-match compatibility requires one single value"
                )
            )
    elif operator in (EXISTS, DOES_NOT_EXIST):
        if values:
            problems.append(
                FieldError.invalid(
                    "values", values, "values set must be empty for exists and does not exist"
                )
            )
    elif operator in (GREATER_THAN, LESS_THAN):
        if len(values) != 1:
            problems.append(
                FieldError.invalid(
                    "values", values, "for 'Gt', 'Lt' operators, exactly one value is required"
                )
            )
        for i, value in enumerate(values):
            if _int64(value) is None:
                problems.append(
                    FieldError.invalid(
                        f"values[{i}]",
                        value,
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    )
                )
    else:
        problems.append(
            FieldError.not_supported(
                "operator",
                operator,
                list(_ALL_OPERATORS),
            )
        )
    for i, value in enumerate(values):
        value_errs = _label_value_errors(value)
        if value_errs:
            problems.append(FieldError.invalid(f"values[{i}][{key}]", value, "; ".join(value_errs)))
    if problems:
        if len(problems) == 1:
            message = str(problems[0])
        else:
            message = "[" + ", ".join(str(p) for p in problems) + "]"
        raise _SelectorSyntaxError(message, requirement=True)
    return Requirement(key, operator, tuple(sorted(values)))


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements, sorted by key as ``labels.Parse`` leaves them."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        """True when the selector selects everything."""
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        present: Mapping[str, str] = labels or {}
        return all(r.matches(present) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _selector(requirements: list[Requirement]) -> LabelSelector:
    return LabelSelector(tuple(sorted(requirements, key=lambda r: r.key)))


# ----------------------------------------------------------------------------- labels.Parse

_IDENTIFIER = "identifier"
_END = "end"
_SPECIAL_TOKENS = {
    ")": ")",
    ",": ",",
    "!": "!",
    "==": "==",
    "=": "=",
    ">": ">",
    "<": "<",
    "!=": "!=",
    "(": "(",
}
_KEYWORDS = {"in": IN, "notin": NOT_IN}
_SPECIAL_CHARS = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")


def _lex(text: str) -> list[tuple[str, str]]:
    """The ``labels`` lexer: (token kind, literal) pairs ending with an end token."""
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i >= n:
            tokens.append((_END, ""))
            return tokens
        if text[i] in _SPECIAL_CHARS:
            # Longest run of special characters that still spells a token.
            j, best = i, ""
            while j < n and text[j] in _SPECIAL_CHARS:
                candidate = text[i : j + 1]
                if candidate in _SPECIAL_TOKENS:
                    best = candidate
                elif best:
                    break
                j += 1
            if not best:
                raise _SelectorSyntaxError(
                    f"error expected: keyword found '{text[i:j]}'", requirement=False
                )
            tokens.append((_SPECIAL_TOKENS[best], best))
            i += len(best)
            continue
        j = i
        while j < n and text[j] not in _SPECIAL_CHARS and text[j] not in _WHITESPACE:
            j += 1
        word = text[i:j]
        tokens.append((_KEYWORDS.get(word, _IDENTIFIER), word))
        i = j


class _LabelParser:
    """``labels.Parser``: in the Values context the keywords ``in``/``notin`` are plain words."""

    def __init__(self, text: str) -> None:
        self.tokens = _lex(text)
        self.pos = 0

    def lookahead(self, values: bool = True) -> tuple[str, str]:
        kind, literal = self.tokens[self.pos]
        if values and kind in (IN, NOT_IN):
            kind = _IDENTIFIER
        return kind, literal

    def consume(self, values: bool = True) -> tuple[str, str]:
        token = self.lookahead(values)
        if self.pos < len(self.tokens) - 1:
            self.pos += 1
        return token

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            kind, literal = self.lookahead()
            if kind in (_IDENTIFIER, "!"):
                requirements.append(self.requirement())
                kind, literal = self.consume()
                if kind == _END:
                    return requirements
                if kind == ",":
                    kind2, literal2 = self.lookahead()
                    if kind2 not in (_IDENTIFIER, "!"):
                        raise _SelectorSyntaxError(
                            f"found '{literal2}', expected: identifier after ','", False
                        )
                    continue
                raise _SelectorSyntaxError(
                    f"found '{literal}', expected: ',' or 'end of string'", False
                )
            if kind == _END:
                return requirements
            raise _SelectorSyntaxError(
                f"found '{literal}', expected: !, identifier, or 'end of string'", False
            )

    def requirement(self) -> Requirement:
        operator = ""
        kind, literal = self.consume()
        if kind == "!":
            operator = DOES_NOT_EXIST
            kind, literal = self.consume()
        if kind != _IDENTIFIER:
            raise _SelectorSyntaxError(f"found '{literal}', expected: identifier", True)
        key = literal
        key_errs = _qualified_name_errors(key)
        if key_errs:
            raise _SelectorSyntaxError(
                str(FieldError.invalid("key", key, "; ".join(key_errs))), True
            )
        if self.lookahead()[0] in (_END, ",") and operator != DOES_NOT_EXIST:
            operator = EXISTS
        if operator in (EXISTS, DOES_NOT_EXIST):
            return new_requirement(key, operator, [])
        operator = self.operator()
        values = self.values() if operator in (IN, NOT_IN) else self.exact_value()
        return new_requirement(key, operator, sorted(set(values)))

    def operator(self) -> str:
        kind, literal = self.consume(values=False)
        operators = {
            IN: IN,
            NOT_IN: NOT_IN,
            "=": EQUALS,
            "==": DOUBLE_EQUALS,
            "!=": NOT_EQUALS,
            ">": GREATER_THAN,
            "<": LESS_THAN,
        }
        if kind not in operators:
            raise _SelectorSyntaxError(
                f"found '{literal}', expected: {', '.join(_BINARY_OPERATORS)}", True
            )
        return operators[kind]

    def values(self) -> list[str]:
        kind, literal = self.consume()
        if kind != "(":
            raise _SelectorSyntaxError(f"found '{literal}' expected: '('", True)
        kind, literal = self.lookahead()
        if kind in (_IDENTIFIER, ","):
            found = self.identifiers()
            if self.consume()[0] != ")":
                raise _SelectorSyntaxError(f"found '{literal}', expected: ')'", True)
            return found
        if kind == ")":
            self.consume()
            return [""]
        raise _SelectorSyntaxError(f"found '{literal}', expected: ',', ')' or identifier", True)

    def identifiers(self) -> list[str]:
        found: list[str] = []
        while True:
            kind, literal = self.consume()
            if kind == _IDENTIFIER:
                found.append(literal)
                kind2, literal2 = self.lookahead()
                if kind2 == ",":
                    continue
                if kind2 == ")":
                    return found
                raise _SelectorSyntaxError(f"found '{literal2}', expected: ',' or ')'", True)
            if kind == ",":
                if not found:
                    found.append("")  # "(,"
                kind2, _ = self.lookahead()
                if kind2 == ")":
                    found.append("")  # ",)"
                    return found
                if kind2 == ",":
                    self.consume()
                    found.append("")  # ",,"
                continue
            raise _SelectorSyntaxError(f"found '{literal}', expected: ',', or identifier", True)

    def exact_value(self) -> list[str]:
        kind, _ = self.lookahead()
        if kind in (_END, ","):
            return [""]
        kind, literal = self.consume()
        if kind == _IDENTIFIER:
            return [literal]
        raise _SelectorSyntaxError(f"found '{literal}', expected: identifier", True)


def parse_label_selector(text: str) -> LabelSelector:
    """``labels.Parse``: the ``labelSelector`` query parameter and ``kubectl -l`` syntax.

    Raises ``bad_request`` (400) on invalid syntax, as the list handler does.
    """
    try:
        requirements = _LabelParser(text).parse()
    except _SelectorSyntaxError as e:
        if e.requirement:
            raise errors.bad_request(f"unable to parse requirement: {e.message}") from None
        raise errors.bad_request(
            f'couldn\'t parse the selector string "{text}": {e.message}'
        ) from None
    return _selector(requirements)


_OPERATORS_FROM_METAV1 = {
    "In": IN,
    "NotIn": NOT_IN,
    "Exists": EXISTS,
    "DoesNotExist": DOES_NOT_EXIST,
}


def label_selector_from_dict(sel: JSON | None) -> LabelSelector:
    """``metav1.LabelSelectorAsSelector`` for ``matchLabels``/``matchExpressions``.

    ``None`` and ``{}`` select everything (how webhook namespace/object selectors treat an
    unset selector). Invalid operators, keys or values raise ``bad_request``.
    """
    if not sel:
        return LabelSelector()
    requirements: list[Requirement] = []
    try:
        for key, value in (sel.get("matchLabels") or {}).items():
            requirements.append(new_requirement(str(key), EQUALS, [str(value)]))
        for expr in sel.get("matchExpressions") or []:
            operator = expr.get("operator")
            if operator not in _OPERATORS_FROM_METAV1:
                raise _SelectorSyntaxError(
                    f'"{operator}" is not a valid label selector operator', False
                )
            values = [str(v) for v in expr.get("values") or []]
            requirements.append(
                new_requirement(str(expr.get("key", "")), _OPERATORS_FROM_METAV1[operator], values)
            )
    except _SelectorSyntaxError as e:
        raise errors.bad_request(e.message) from None
    return _selector(requirements)


# -------------------------------------------------------------------- fields.ParseSelector


@dataclass(frozen=True)
class FieldRequirement:
    """One term: ``op`` is ``=`` (for both ``=`` and ``==``) or ``!=``; ``value`` unescaped."""

    field: str
    op: str
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        actual = fields.get(self.field, "")
        return actual == self.value if self.op == EQUALS else actual != self.value

    def __str__(self) -> str:
        return f"{self.field}{self.op}{escape_field_value(self.value)}"


@dataclass(frozen=True)
class FieldSelector:
    """A conjunction of field terms, in the sorted order ``fields.ParseSelector`` gives."""

    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(r.matches(fields) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def escape_field_value(value: str) -> str:
    """``fields.EscapeValue``: backslash-escape ``\\``, ``,`` and ``=``."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def _unescape_field_value(value: str) -> str:
    """``fields.UnescapeValue``, raising ``bad_request`` with Go's messages."""
    if not any(c in value for c in "\\,="):
        return value
    out: list[str] = []
    in_slash = False
    for c in value:
        if in_slash:
            if c not in "\\,=":
                raise errors.bad_request(f"invalid field selector: invalid escape sequence: \\{c}")
            out.append(c)
            in_slash = False
        elif c == "\\":
            in_slash = True
        elif c in ",=":
            # Go formats the rune with %v, which prints its code point.
            raise errors.bad_request(
                f"invalid field selector: unescaped character in value: {ord(c)}"
            )
        else:
            out.append(c)
    if in_slash:
        raise errors.bad_request("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not backslash-escaped (the escape is kept)."""
    if not text:
        return []
    terms: list[str] = []
    start = 0
    in_slash = False
    for i, c in enumerate(text):
        if in_slash:
            in_slash = False
        elif c == "\\":
            in_slash = True
        elif c == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def parse_field_selector(text: str) -> FieldSelector:
    """``fields.ParseSelector``: ``k=v``, ``k==v``, ``k!=v`` terms joined by commas.

    The left side is taken verbatim (no trimming, no escapes) up to the first operator.
    """
    terms: list[FieldRequirement] = []
    for part in sorted(_split_terms(text)):
        if not part:
            continue
        for i in range(len(part)):
            rest = part[i:]
            op = next((o for o in ("!=", "==", "=") if rest.startswith(o)), None)
            if op is not None:
                lhs, rhs = part[:i], part[i + len(op) :]
                break
        else:
            raise errors.bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        terms.append(
            FieldRequirement(lhs, NOT_EQUALS if op == "!=" else EQUALS, _unescape_field_value(rhs))
        )
    return FieldSelector(tuple(terms))


# ---------------------------------------------------------------- per-resource field sets


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _text(obj: Any, *path: str) -> str:
    value = _get(obj, *path)
    return value if isinstance(value, str) else ""


def _flag(obj: Any, *path: str) -> str:
    return "true" if _get(obj, *path) is True else "false"


def _pod_ip(pod: JSON) -> str:
    ips = _get(pod, "status", "podIPs")
    if isinstance(ips, list) and ips and isinstance(ips[0], dict):
        return _text(ips[0], "ip")
    return _text(pod, "status", "podIP")


def _event_source(event: JSON) -> str:
    return _text(event, "source", "component") or _text(event, "reportingComponent")


_FieldGetter = Callable[[JSON], str]

#: Fields beyond ``metadata.*`` per (group, plural), each with how to read it from an object.
_SPECIFIC_FIELDS: dict[tuple[str, str], dict[str, _FieldGetter]] = {
    ("", "pods"): {
        "spec.nodeName": lambda o: _text(o, "spec", "nodeName"),
        "spec.restartPolicy": lambda o: _text(o, "spec", "restartPolicy"),
        "spec.schedulerName": lambda o: _text(o, "spec", "schedulerName"),
        "spec.serviceAccountName": lambda o: _text(o, "spec", "serviceAccountName"),
        "spec.hostNetwork": lambda o: _flag(o, "spec", "hostNetwork"),
        "status.phase": lambda o: _text(o, "status", "phase"),
        "status.podIP": _pod_ip,
        "status.nominatedNodeName": lambda o: _text(o, "status", "nominatedNodeName"),
    },
    ("", "nodes"): {
        "spec.unschedulable": lambda o: _flag(o, "spec", "unschedulable"),
    },
    ("", "events"): {
        "involvedObject.kind": lambda o: _text(o, "involvedObject", "kind"),
        "involvedObject.namespace": lambda o: _text(o, "involvedObject", "namespace"),
        "involvedObject.name": lambda o: _text(o, "involvedObject", "name"),
        "involvedObject.uid": lambda o: _text(o, "involvedObject", "uid"),
        "involvedObject.apiVersion": lambda o: _text(o, "involvedObject", "apiVersion"),
        "involvedObject.resourceVersion": lambda o: _text(o, "involvedObject", "resourceVersion"),
        "involvedObject.fieldPath": lambda o: _text(o, "involvedObject", "fieldPath"),
        "reason": lambda o: _text(o, "reason"),
        "reportingComponent": lambda o: _text(o, "reportingComponent"),
        "source": _event_source,
        "type": lambda o: _text(o, "type"),
    },
    ("", "secrets"): {
        "type": lambda o: _text(o, "type"),
    },
    ("", "namespaces"): {
        "status.phase": lambda o: _text(o, "status", "phase"),
    },
}

#: Built-in cluster-scoped resources: their field sets have no ``metadata.namespace``.
_CLUSTER_SCOPED = frozenset(
    {
        ("", "nodes"),
        ("", "namespaces"),
        ("", "persistentvolumes"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
        ("rbac.authorization.k8s.io", "clusterroles"),
        ("rbac.authorization.k8s.io", "clusterrolebindings"),
        ("storage.k8s.io", "storageclasses"),
        ("scheduling.k8s.io", "priorityclasses"),
    }
)


def object_fields(group: str, plural: str, obj: JSON) -> dict[str, str]:
    """The ``fields.Set`` kube-apiserver matches field selectors against for ``obj``."""
    result = {"metadata.name": _text(obj, "metadata", "name")}
    if (group, plural) not in _CLUSTER_SCOPED:
        result["metadata.namespace"] = _text(obj, "metadata", "namespace")
    for name, getter in _SPECIFIC_FIELDS.get((group, plural), {}).items():
        result[name] = getter(obj)
    return result


def supported_fields(group: str, plural: str, namespaced: bool) -> list[str]:
    """Field labels the resource accepts in a field selector."""
    names = ["metadata.name"] + (["metadata.namespace"] if namespaced else [])
    return names + list(_SPECIFIC_FIELDS.get((group, plural), {}))


def check_field_selector(group: str, plural: str, namespaced: bool, sel: FieldSelector) -> None:
    """Reject (400) a selector naming a field the resource does not expose."""
    allowed = set(supported_fields(group, plural, namespaced))
    for requirement in sel.requirements:
        if requirement.field not in allowed:
            raise errors.bad_request(f"field label not supported: {requirement.field}")

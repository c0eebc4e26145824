"""Kubernetes name rules (apimachinery v0.37 ``util/validation`` and ``api/validate/content``,
as kube-apiserver v1.37 applies them): qualified names (label keys) and label values.

Pure: returns Kubernetes' own problem texts, word for word, and never raises or does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# The formats below are apimachinery's constants, spelled as its messages print them.
_QNAME_CHAR = "[A-Za-z0-9]"
_QNAME_EXT_CHAR = "[-A-Za-z0-9_.]"
_QUALIFIED_NAME_FMT = f"({_QNAME_CHAR}{_QNAME_EXT_CHAR}*)?{_QNAME_CHAR}"
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_QUALIFIED_NAME_MAX = 63

_LABEL_VALUE_FMT = f"({_QUALIFIED_NAME_FMT})?"
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, "
    "'-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_MAX = 63

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + r"(\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MAX = 253

# Go anchors with ^...$, which (unlike Python's $) never matches before a trailing newline:
# fullmatch is the faithful equivalent.
_QUALIFIED_NAME_RE = re.compile(_QUALIFIED_NAME_FMT)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)


def _go_len(value: str) -> int:
    """Go's ``len``: bytes of the UTF-8 text (lone surrogates count as Go's U+FFFD would)."""
    return len(value.encode("utf-8", "surrogatepass"))


def _empty_error() -> str:
    return "must be non-empty"


def _max_len_error(length: int) -> str:
    """``validation.MaxLenError``, which object names (DNS subdomains) still use."""
    return f"must be no more than {length} characters"


def _max_bytes_error(length: int) -> str:
    """``content.MaxLenError`` (apimachinery v0.37), which label keys and values use, and
    the DNS subdomain prefix of a label key."""
    return f"must be no more than {length} bytes"


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """apimachinery's ``RegexError``, including its doubled space after each example."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def dns1123_subdomain_problems(
    value: str, too_long: Callable[[int], str] = _max_len_error
) -> list[str]:
    """``validation.IsDNS1123Subdomain``: empty when ``value`` is a lowercase RFC 1123
    subdomain. ``too_long`` words the length problem (``content.IsDNS1123Subdomain`` says
    bytes)."""
    problems = []
    if _go_len(value) > _DNS1123_SUBDOMAIN_MAX:
        problems.append(too_long(_DNS1123_SUBDOMAIN_MAX))
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        problems.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return problems


def qualified_name_problems(value: str) -> list[str]:
    """``validation.IsQualifiedName``: empty when ``value`` is ``[prefix/]name``, the prefix a
    DNS subdomain and the name at most 63 alphanumerics, ``-``, ``_`` or ``.``."""
    problems: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            problems.append("prefix part " + _empty_error())
        else:
            problems.extend(
                "prefix part " + p for p in dns1123_subdomain_problems(prefix, _max_bytes_error)
            )
    else:
        return [
            "a valid label key "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        problems.append("name part " + _empty_error())
    elif _go_len(name) > _QUALIFIED_NAME_MAX:
        problems.append("name part " + _max_bytes_error(_QUALIFIED_NAME_MAX))
    if not _QUALIFIED_NAME_RE.fullmatch(name):
        problems.append(
            "name part "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return problems


def label_value_problems(value: str) -> list[str]:
    """``validation.IsValidLabelValue``: empty when ``value`` is a label value (the empty string
    is one)."""
    problems = []
    if _go_len(value) > _LABEL_VALUE_MAX:
        problems.append(_max_bytes_error(_LABEL_VALUE_MAX))
    if not _LABEL_VALUE_RE.fullmatch(value):
        problems.append(
            _regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return problems

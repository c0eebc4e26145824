"""The ``tpuSliceProvisioning`` configuration (A1 to A5): decode, validate, build ``Config``.

Pure: it is handed the ConfigMap text and never reads it, never touches a client, and
``validate`` never raises. Every configuration message users read lives here, once.
"""

from __future__ import annotations

import json
import math
import re
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from itertools import accumulate
from types import MappingProxyType
from typing import Any, Literal, TypeAlias, cast

from ome.api.v1beta1 import LABEL_INSTANCE_INDEX, LABEL_MANAGED_BY, LABEL_POD_ORDINAL
from ome.durations import format_go_duration, parse_go_duration
from ome.tpuslice.kubenames import label_value_problems, qualified_name_problems
from ome.tpuslice.naming import OWNER_ANNOTATION, OWNER_UID_LABEL
from ome.tpuslice.shape import ShapeError, hosts, parse_topology, quote
from ome.tpuslice.types import GUIDE_CONFIG_JSON, Accelerator, Config, SliceSettings

INVALID_CONFIG = "invalid tpuSliceProvisioning config"
"""A2: every failure is wrapped as ``<INVALID_CONFIG>: <errors joined by newlines>``."""

EXPECTED_OBJECT = "expected a JSON object"

MAX_DEPTH = 100
"""A2: the deepest nesting of arrays and objects a
block may have (``{}`` is 1). The schema needs 4; the bound keeps Python's recursive JSON
decoder, and check-config's YAML reader, far from the interpreter's recursion limit whatever
its stack. Deeper is ``TOO_DEEP``, found before decoding, ahead of any other error."""

TOO_DEEP = "malformed JSON object: nesting too deep"

MAX_DIGITS = 4300
"""The most digits of an integer: Python's default limit for ``int()`` of a text and for
``str()`` of an int (``sys.int_info.default_max_str_digits``), so no message could print more.
A JSON number beyond it, or a float that overflows (``1e309``), is of no field's type."""

#: A4.11: the labels and the annotation the controller writes on every Slice itself (D3).
CONTROLLER_LABELS = (OWNER_UID_LABEL, LABEL_MANAGED_BY, LABEL_INSTANCE_INDEX, LABEL_POD_ORDINAL)
CONTROLLER_ANNOTATION = OWNER_ANNOTATION


#: What would break an error across lines, or move the cursor back over it: the control
#: characters, which JSON quoting escapes (so a quoted value never holds one).
_CONTROL = re.compile(r"[\x00-\x1f]")


def _one_line(error: str) -> str:
    """``error`` on one line, as A2's ``\\n``-joined message needs: a map key in a path
    (``accelerators[<name>]``, ``slice.annotations[<key>]``) is written as given, so a
    control character in it is escaped as JSON escapes it (``\\n``, ``\\u0000``)."""
    return _CONTROL.sub(lambda m: json.dumps(m.group())[1:-1], error)


class ConfigError(ValueError):
    """An invalid configuration: ``errors`` holds every problem, one line each, ``str()`` the
    full message."""

    def __init__(self, errors: Iterable[str]) -> None:
        self.errors: tuple[str, ...] = tuple(_one_line(error) for error in errors)
        super().__init__(f"{INVALID_CONFIG}: " + "\n".join(self.errors))


def parse_config(text: str | None) -> Config | None:
    """A1: ``None`` or whitespace-only text turns provisioning off (``None``); anything else
    must decode (A2) and validate (A4), else ``ConfigError`` with every error."""
    if text is None or not text.strip():
        return None
    raw = decode(text)
    errors = validate(raw)
    if errors:
        raise ConfigError(errors)
    return _build(raw)


# -- A2: decoding -----------------------------------------------------------------------------

_Scalar: TypeAlias = Literal["string", "integer"]


@dataclass(frozen=True)
class _Fields:
    fields: dict[str, _Kind]


@dataclass(frozen=True)
class _MapOf:
    values: _Kind


@dataclass(frozen=True)
class _ListOf:
    items: _Kind


_Kind: TypeAlias = "_Scalar | _Fields | _MapOf | _ListOf"

#: A3: the known schema. Field names are case-sensitive; anything else is an unknown field.
_SCHEMA = _Fields(
    {
        "chipResource": "string",
        "nodeLabels": _Fields({"accelerator": "string", "topology": "string", "slice": "string"}),
        "provisionOnly": _Fields({"key": "string", "value": "string"}),
        "accelerators": _MapOf(
            _Fields(
                {"sliceType": "string", "chipsPerHost": "integer", "topologies": _ListOf("string")}
            )
        ),
        "slice": _Fields(
            {
                "ownerKindLabel": "string",
                "ownerNameLabel": "string",
                "annotations": _MapOf("string"),
                "podAnnotations": _ListOf("string"),
                "readyStates": _ListOf("string"),
                "readyTimeout": "string",
            }
        ),
    }
)


class _JSONObject(dict[str, Any]):
    """A decoded JSON object that remembers the keys it saw more than once."""

    duplicates: tuple[str, ...] = ()

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, Any]]) -> _JSONObject:
        obj = cls()
        duplicates: list[str] = []
        for key, value in pairs:
            if key in obj and key not in duplicates:
                duplicates.append(key)
            obj[key] = value
        obj.duplicates = tuple(duplicates)
        return obj


def _reject_constant(name: str) -> Any:
    # Python's parser accepts NaN and Infinity; JSON (and Go) do not.
    raise ValueError(f"{name} is not a JSON value")


@dataclass(frozen=True)
class _Number:
    """A JSON number Python cannot hold as written: an integer of more than ``MAX_DIGITS``
    digits, or a float that overflows. It is of no field's type, so it gets a type error."""

    text: str


def _parse_int(text: str) -> int | _Number:
    if len(text.lstrip("-")) > MAX_DIGITS:
        return _Number(text)
    try:
        return int(text)
    except ValueError:  # an interpreter that lowered its digit limit
        return _Number(text)


def _parse_float(text: str) -> float | _Number:
    value = float(text)
    return value if math.isfinite(value) else _Number(text)


#: A JSON string (or an unterminated one, to the end), whose brackets are no nesting.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(set(range(256)) - set(_BRACKETS))
_STEPS = bytes.maketrans(_BRACKETS, b"\x01\xff\x01\xff")  # +1 and -1 as signed bytes


def too_deep(text: str) -> bool:
    """Whether ``text`` nests arrays and objects deeper than ``MAX_DEPTH``, counting the
    brackets outside JSON strings; it need not be valid JSON. Linear, and quick on 10 MB."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    brackets = _JSON_STRING.sub("", text).encode("utf-8", "surrogatepass")
    steps = array("b", brackets.translate(_STEPS, _NOT_BRACKETS))
    return max(accumulate(steps), default=0) > MAX_DEPTH


def _loads(text: str) -> Any:
    """``json.loads`` with ``decode``'s hooks. Python parses integers far quicker without a
    hook, so ``_parse_int`` runs only after ``int()`` refused one: a ``ValueError`` that is no
    syntax error (or ``NaN``, which the second pass refuses again)."""

    def loads(**hooks: Any) -> Any:
        return json.loads(
            text,
            object_pairs_hook=_JSONObject.from_pairs,
            parse_constant=_reject_constant,
            parse_float=_parse_float,
            **hooks,
        )

    try:
        return loads()
    except json.JSONDecodeError:
        raise
    except ValueError:
        return loads(parse_int=_parse_int)


def decode(text: str) -> dict[str, Any]:
    """A2: the text, trimmed, must be one JSON object of the known schema: no unknown or
    duplicate fields, no trailing content, every value of its field's type.

    Raises ``ConfigError`` with every problem found, not only the first (choices that
    A2 records): ``unknown field "<path>"``, ``duplicate field "<path>"``, and
    ``malformed JSON object: <path>: expected a string, got the number 5`` for a type error;
    syntax errors and trailing content carry Python's JSON parser detail. Paths are dotted
    for object fields and indexed for map entries and list items
    (``accelerators[tpu7x].topologies[0]``, ``slice.annotations[<key>]``). ``null`` is allowed
    anywhere: it reads as the field's zero value, as Go's decoder leaves it.

    Hostile text gets one clear error: nesting deeper than ``MAX_DEPTH`` is ``TOO_DEEP``;
    ``NaN`` and ``Infinity`` are ``malformed JSON object: NaN is not a JSON value``; a number
    Python cannot hold gets its field's type error, ``expected an integer, got the number
    1e309`` (``got a number`` beyond ``MAX_DIGITS`` characters, too long to print)."""
    trimmed = text.strip()
    if not trimmed.startswith("{"):
        raise ConfigError([EXPECTED_OBJECT])
    if too_deep(trimmed):
        raise ConfigError([TOO_DEEP])
    try:
        raw = _loads(trimmed)
    except RecursionError:  # only for a caller already deep in its own stack
        raise ConfigError([TOO_DEEP]) from None
    except ValueError as err:  # json.JSONDecodeError is a ValueError
        raise ConfigError([_malformed(str(err))]) from None
    problems: list[str] = []
    _check_schema(raw, _SCHEMA, "", problems)
    if problems:
        raise ConfigError(problems)
    return dict(raw)


def _malformed(detail: str) -> str:
    return f"malformed JSON object: {detail}"


def _field_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check_schema(value: Any, kind: _Kind, path: str, problems: list[str]) -> None:
    """Unknown fields, duplicate fields and type errors of ``value`` under ``path``, in
    document order."""
    if value is None:
        return
    if (error := _type_error(path, kind, value)) is not None:
        problems.append(_malformed(error))
        return
    if isinstance(kind, _ListOf):
        for i, item in enumerate(value):
            _check_schema(item, kind.items, f"{path}[{i}]", problems)
    elif isinstance(kind, _MapOf | _Fields):
        duplicates = set(getattr(value, "duplicates", ()))
        for key, item in value.items():
            child = f"{path}[{key}]" if isinstance(kind, _MapOf) else _field_path(path, key)
            if key in duplicates:
                problems.append(f"duplicate field {quote(child)}")
            if isinstance(kind, _MapOf):
                _check_schema(item, kind.values, child, problems)
            elif key in kind.fields:
                _check_schema(item, kind.fields[key], child, problems)
            else:
                problems.append(f"unknown field {quote(child)}")


#: An integer field holds at most ``MAX_DIGITS`` digits, so every message can print it.
_INT_BOUND = 10**MAX_DIGITS

_WANT = {"string": "a string", "integer": "an integer", "object": "an object", "array": "an array"}


def _type_error(path: str, kind: _Kind, value: Any) -> str | None:
    """The one text of a value of the wrong type, for ``decode`` (wrapped) and ``validate``."""
    if isinstance(kind, _ListOf):
        want, ok = "array", isinstance(value, list)
    elif isinstance(kind, _MapOf | _Fields):
        want, ok = "object", isinstance(value, dict)
    elif kind == "integer":
        want = "integer"
        ok = isinstance(value, int) and not isinstance(value, bool) and abs(value) < _INT_BOUND
    else:
        want, ok = "string", isinstance(value, str)
    return None if ok else f"{path}: expected {_WANT[want]}, got {_describe(value)}"


def _describe(value: Any) -> str:
    if isinstance(value, _Number):
        return f"the number {value.text}" if len(value.text) <= MAX_DIGITS else "a number"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        try:
            return f"the number {json.dumps(value)}"
        except ValueError:  # an int beyond Python's digit limit for str()
            return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


# -- A4: validation ---------------------------------------------------------------------------


def _zero(kind: _Kind) -> Any:
    """Go's zero value of ``kind``: what a missing or ``null`` field reads as."""
    if isinstance(kind, _ListOf):
        return []
    if isinstance(kind, _MapOf | _Fields):
        return {}
    return 0 if kind == "integer" else ""


class _Reader:
    """Reads fields for ``validate`` and collects its errors, in the order they are added.

    Missing and ``null`` read as Go's zero value; a value of the wrong type is reported once
    and reads as ``None``, which skips every check of that field (and of its children)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self._sections: dict[str, dict[str, Any] | None] = {}

    def _value(self, value: Any, path: str, kind: _Kind) -> Any:
        if value is None:
            return _zero(kind)
        if (error := _type_error(path, kind, value)) is not None:
            self.errors.append(error)
            return None
        if isinstance(value, dict):  # keys of a caller's dict need not be strings
            return {str(key): item for key, item in value.items()}
        return value

    def _child(self, parent: dict[str, Any] | None, key: str, path: str, kind: _Kind) -> Any:
        """``parent[key]`` read as ``kind``; ``None`` when ``parent`` was of the wrong type."""
        return None if parent is None else self._value(parent.get(key), path, kind)

    def section(self, raw: dict[str, Any], key: str) -> dict[str, Any] | None:
        """A top-level object, reported once however often it is read."""
        if key not in self._sections:
            self._sections[key] = self.entry(raw.get(key), key)
        return self._sections[key]

    def entry(self, value: Any, path: str) -> dict[str, Any] | None:
        """An object that is a map entry or a section."""
        result: dict[str, Any] | None = self._value(value, path, _Fields({}))
        return result

    def mapping(self, parent: dict[str, Any] | None, key: str, path: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._child(parent, key, path, _MapOf("string"))
        return result

    def text(self, parent: dict[str, Any] | None, key: str, path: str) -> str | None:
        result: str | None = self._child(parent, key, path, "string")
        return result

    def integer(self, parent: dict[str, Any] | None, key: str, path: str) -> int | None:
        result: int | None = self._child(parent, key, path, "integer")
        return result

    def texts(self, parent: dict[str, Any] | None, key: str, path: str) -> list[str | None] | None:
        """A list of strings; an item of the wrong type is reported and reads as ``None``."""
        items = self._child(parent, key, path, _ListOf("string"))
        if items is None:
            return None
        return [self._value(item, f"{path}[{i}]", "string") for i, item in enumerate(items)]

    def required(self, path: str, value: str | None) -> bool:
        """``<path>: required`` for an empty value; ``True`` when there is one to check."""
        if value == "":
            self.errors.append(f"{path}: required")
        return bool(value)

    def qualified_name(self, path: str, value: str | None) -> bool:
        """A4 QN check; ``True`` when ``value`` is a valid qualified name."""
        if value is None or not self.required(path, value):
            return False
        if problems := qualified_name_problems(value):
            self.errors.append(
                f"{path}: {quote(value)} is not a qualified name: {'; '.join(problems)}"
            )
            return False
        return True

    def label_value(self, path: str, value: str) -> None:
        if problems := label_value_problems(value):
            self.errors.append(
                f"{path}: {quote(value)} is not a label value: {'; '.join(problems)}"
            )

    def listed_twice(self, path: str, value: str, seen: set[str]) -> bool:
        """``"<s>" is listed twice`` for a value already in ``seen``, which it joins."""
        if value in seen:
            self.errors.append(f"{path}: {quote(value)} is listed twice")
            return True
        seen.add(value)
        return False


def validate(raw: dict[str, Any]) -> list[str]:
    """A4: every error of a decoded configuration, in A4's order. It never raises, whatever
    the values: a value of the wrong type gets ``decode``'s type error where A4 reads it, and
    that field's checks are skipped.

    Choices that A2 and A4 record: missing and ``null`` read as Go's zero value (a null
    string is ``required``, a null ``chipsPerHost`` is 0); ``"<v>"`` is JSON-escaped without
    Go's HTML escaping of ``<``, ``>``, ``&``, since it is read in logs and terminals; an
    accelerator named ``""`` is ``accelerators[]: required`` (no pool is selected by an empty
    value); an annotation key's path is ``slice.annotations[<key>]``, like an accelerator's;
    ``slice.readyTimeout: ""`` is unset, as Go's zero string is. A ``podAnnotations`` entry gets
    at most one error (not a qualified name, listed twice, or already set, in that order), a
    duplicated topology only ``listed twice``, and each controller-owned key is reported once.
    """
    if not isinstance(cast(object, raw), dict):
        return [EXPECTED_OBJECT]
    r = _Reader()

    # 1. chipResource
    r.qualified_name("chipResource", r.text(raw, "chipResource", "chipResource"))

    # 2. node labels and the provision-only key, each a distinct qualified name
    used: dict[str, str] = {}
    for section, key in (
        ("nodeLabels", "accelerator"),
        ("nodeLabels", "topology"),
        ("nodeLabels", "slice"),
        ("provisionOnly", "key"),
    ):
        path = f"{section}.{key}"
        value = r.text(r.section(raw, section), key, path)
        if value is not None and r.qualified_name(path, value):
            if value in used:
                r.errors.append(f"{path}: {quote(value)} is already used by {used[value]}")
            else:
                used[value] = path

    # 3. provisionOnly.value
    value = r.text(r.section(raw, "provisionOnly"), "value", "provisionOnly.value")
    if value is not None and r.required("provisionOnly.value", value):
        r.label_value("provisionOnly.value", value)

    # 4, 5. accelerators
    accelerators = r.mapping(raw, "accelerators", "accelerators")
    if accelerators == {}:
        r.errors.append("accelerators: at least one accelerator is required")
    for name in sorted(accelerators or {}):
        _validate_accelerator(r, name, accelerators[name] if accelerators else None)

    # 6. owner labels
    settings = r.section(raw, "slice")
    kind_label = r.text(settings, "ownerKindLabel", "slice.ownerKindLabel")
    name_label = r.text(settings, "ownerNameLabel", "slice.ownerNameLabel")
    kind_ok = r.qualified_name("slice.ownerKindLabel", kind_label)
    if (
        r.qualified_name("slice.ownerNameLabel", name_label)
        and kind_ok
        and name_label == kind_label
    ):
        r.errors.append(
            f"slice.ownerNameLabel: {quote(name_label or '')} is already used by "
            "slice.ownerKindLabel"
        )

    # 7. annotations: required (``{}`` for none), keys are qualified names
    annotations: dict[str, Any] = {}
    if settings is not None:
        if settings.get("annotations") is None:
            r.errors.append("slice.annotations: required; use {} for none")
        annotations = r.mapping(settings, "annotations", "slice.annotations") or {}
        for key in sorted(annotations):
            path = f"slice.annotations[{key}]"
            if r.qualified_name(path, key):
                r.text(annotations, key, path)  # a value must be a string

    # 8. podAnnotations
    pod_annotations = r.texts(settings, "podAnnotations", "slice.podAnnotations") or []
    seen: set[str] = set()
    for i, pod_key in enumerate(pod_annotations):
        path = f"slice.podAnnotations[{i}]"
        if not r.qualified_name(path, pod_key) or pod_key is None:
            continue
        if not r.listed_twice(path, pod_key, seen) and pod_key in annotations:
            r.errors.append(f"{path}: {quote(pod_key)} is already set by slice.annotations")

    # 9. readyStates
    states = r.texts(settings, "readyStates", "slice.readyStates")
    if states == []:
        r.errors.append("slice.readyStates: at least one state is required")
    seen = set()
    for i, state in enumerate(states or []):
        path = f"slice.readyStates[{i}]"
        if state == "":
            r.errors.append(f"{path}: must not be empty")
        elif state is not None:
            r.listed_twice(path, state, seen)

    # 10. readyTimeout: unset disables the timeout
    timeout = r.text(settings, "readyTimeout", "slice.readyTimeout")
    if timeout and not _is_positive_duration(timeout):
        r.errors.append(f"slice.readyTimeout: {quote(timeout)} must be a positive duration")

    # 11. what the controller writes on every Slice itself
    for label in dict.fromkeys((kind_label, name_label)):
        if label in CONTROLLER_LABELS:
            r.errors.append(f"slice label {label} is set by the controller")
    if CONTROLLER_ANNOTATION in annotations or CONTROLLER_ANNOTATION in pod_annotations:
        r.errors.append(f"slice annotation {CONTROLLER_ANNOTATION} is set by the controller")
    return [_one_line(error) for error in r.errors]


def _validate_accelerator(r: _Reader, name: str, value: Any) -> None:
    """A4.5 for one accelerator: its name, slice type, chips per host and topologies."""
    path = f"accelerators[{name}]"
    if r.required(path, name):
        r.label_value(path, name)
    entry = r.entry(value, path)
    r.required(f"{path}.sliceType", r.text(entry, "sliceType", f"{path}.sliceType"))
    chips_per_host = r.integer(entry, "chipsPerHost", f"{path}.chipsPerHost")
    if chips_per_host is not None and chips_per_host <= 0:
        r.errors.append(f"{path}.chipsPerHost: must be positive, got {chips_per_host}")
    topologies = r.texts(entry, "topologies", f"{path}.topologies")
    if topologies == []:
        r.errors.append(f"{path}.topologies: at least one topology is required")
    seen: set[str] = set()
    for i, text in enumerate(topologies or []):
        if text is None:
            continue
        item = f"{path}.topologies[{i}]"
        try:
            topology = parse_topology(text)
        except ShapeError as err:
            r.errors.append(f"{item}: {err}")
            continue
        if r.listed_twice(item, str(topology), seen):
            continue
        if chips_per_host is not None and chips_per_host > 0:
            try:
                hosts(topology, chips_per_host)
            except ShapeError as err:
                r.errors.append(f"{item}: {err}")


def _is_positive_duration(text: str) -> bool:
    try:
        return parse_go_duration(text) > timedelta(0)
    except ValueError:
        return False


def _build(raw: dict[str, Any]) -> Config:
    """The ``Config`` of a configuration that ``validate`` accepted."""
    node_labels = raw["nodeLabels"]
    provision_only = raw["provisionOnly"]
    settings = raw["slice"]
    accelerators = {
        name: Accelerator(
            name=name,
            slice_type=entry["sliceType"],
            chips_per_host=entry["chipsPerHost"],
            topologies=tuple(str(parse_topology(t)) for t in entry["topologies"]),
        )
        for name, entry in sorted(raw["accelerators"].items())
    }
    timeout = settings.get("readyTimeout")
    return Config(
        chip_resource=raw["chipResource"],
        accelerator_label=node_labels["accelerator"],
        topology_label=node_labels["topology"],
        slice_label=node_labels["slice"],
        provision_only_key=provision_only["key"],
        provision_only_value=provision_only["value"],
        accelerators=MappingProxyType(accelerators),
        slice=SliceSettings(
            owner_kind_label=settings["ownerKindLabel"],
            owner_name_label=settings["ownerNameLabel"],
            annotations=MappingProxyType(
                {key: value or "" for key, value in settings["annotations"].items()}
            ),
            pod_annotations=tuple(settings.get("podAnnotations") or ()),
            ready_states=tuple(settings["readyStates"]),
            ready_timeout=parse_go_duration(timeout) if timeout else None,
        ),
    )


# -- the block's JSON Schema, for the chart's values.schema.json ------------------------------

JSON_SCHEMA_DRAFT = "http://json-schema.org/draft-07/schema#"


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 07, as Helm reads a chart's values.schema.json) of a
    ``tpuSliceProvisioning`` block given as an object, derived from this module's own parser so
    that the two cannot drift: field names, nesting and types are ``_SCHEMA``'s (what ``decode``
    reads; any other field is unknown), and a field is ``required``, or must not be empty
    (``minLength``, ``minItems``, ``minProperties``), exactly when ``validate`` refuses the
    guide's block (``GUIDE_CONFIG_JSON``) without it, or with it empty. ``null`` is allowed
    where the parser takes it as Go's zero value without complaint: on the optional fields.

    What a schema cannot say (qualified names, topologies, durations, duplicates) stays with
    ``validate``; ``ome-manager check-config`` checks all of it."""
    example = json.loads(GUIDE_CONFIG_JSON)
    schema = _json_schema_of(_SCHEMA, example, ())
    return {"$schema": JSON_SCHEMA_DRAFT, **schema}


_REMOVE = object()


def _refused(example: dict[str, Any], path: tuple[str, ...], value: Any = _REMOVE) -> bool:
    """Whether ``validate`` refuses ``example`` with the field at ``path`` removed, or set to
    ``value``."""
    block = json.loads(json.dumps(example))
    parent = _at(block, path[:-1])
    if value is _REMOVE:
        parent.pop(path[-1], None)
    else:
        parent[path[-1]] = value
    return bool(validate(block))


#: The empty value of each JSON type, and the bound that refuses it.
_EMPTY = {"string": ("", "minLength"), "integer": (0, "minimum"), "array": ([], "minItems")}

_JSON_TYPES = {"string": "string", "integer": "integer"}


def _json_schema_of(
    kind: _Kind, example: dict[str, Any], path: tuple[str, ...] | None
) -> dict[str, Any]:
    """The schema of the value at ``path`` in ``example`` (``()``: the block itself; ``None``:
    a value the example does not hold, e.g. a list's item, which is then not probed)."""
    if isinstance(kind, _ListOf):
        return {"type": "array", "items": _json_schema_of(kind.items, example, None)}
    if isinstance(kind, _MapOf):
        first = next(iter(_at(example, path)), None) if path is not None else None
        entry = None if path is None or first is None else (*path, first)
        return {"type": "object", "additionalProperties": _probed(kind.values, example, entry)}
    if isinstance(kind, _Fields):
        present = _at(example, path) if path is not None else {}
        properties = {
            name: _probed(
                field,
                example,
                (*path, name) if path is not None and name in present else None,
                _REMOVE,
            )
            for name, field in kind.fields.items()
        }
        schema: dict[str, Any] = {
            "type": "object",
            "properties": properties,
            "additionalProperties": False,
        }
        required = [name for name, field in properties.items() if isinstance(field["type"], str)]
        if required:
            schema["required"] = required
        return schema
    return {"type": _JSON_TYPES[kind]}


def _probed(
    kind: _Kind, example: dict[str, Any], path: tuple[str, ...] | None, missing: Any = None
) -> dict[str, Any]:
    """The schema of the field or map entry at ``path`` (``None``: one the example lacks, which
    is optional by that proof): nullable unless ``validate`` refuses the example with it
    ``missing`` (removed, or ``null``); bounded when it also refuses it empty."""
    schema = _json_schema_of(kind, example, path)
    if path is None or not _refused(example, path, missing):
        schema["type"] = [schema["type"], "null"]
        return schema
    empty, bound = _EMPTY.get(schema["type"], (None, ""))
    if isinstance(kind, _MapOf):
        empty, bound = {}, "minProperties"
    if bound and _refused(example, path, empty):
        schema[bound] = 1
    return schema


def _at(example: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = example
    for key in path:
        value = value[key]
    return value


__all__ = [
    "CONTROLLER_ANNOTATION",
    "CONTROLLER_LABELS",
    "EXPECTED_OBJECT",
    "INVALID_CONFIG",
    "JSON_SCHEMA_DRAFT",
    "MAX_DEPTH",
    "MAX_DIGITS",
    "TOO_DEEP",
    "ConfigError",
    "decode",
    "format_go_duration",
    "json_schema",
    "parse_config",
    "parse_go_duration",
    "too_deep",
    "validate",
]

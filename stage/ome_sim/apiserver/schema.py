"""CRD structural schemas as apiextensions-apiserver applies them: pruning, defaulting, validation.

It owns only schema semantics and kube's error wording; it never stores, names or admits objects.
Pruning and defaulting are hand-written (no library knows kube's structural rules); keyword
validation is delegated to ``jsonschema`` after translating OpenAPI v3 to a Draft 4 schema.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import re
from collections.abc import Iterable, Iterator
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from jsonschema import Draft4Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from ome_sim.apiserver.errors import FieldError

JSON = dict[str, Any]

# The ObjectMeta fields a CR's ``metadata`` keeps (root and embedded resources).
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
        "selfLink",
    }
)

OPENAPI_TYPES = ("array", "boolean", "integer", "number", "object", "string")

# Keywords copied unchanged from OpenAPI v3 into the Draft 4 schema jsonschema runs.
_PLAIN_KEYWORDS = (
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "required",
    "format",
)

_NODE = "x-kube-node"
_EMBEDDED = "x-kube-embedded"


def unknown_field_message(paths: Iterable[str]) -> str:
    """The ``fieldValidation=Strict`` error for pruned fields, as kube words it."""
    listed = ", ".join(f'unknown field "{p.lstrip(".")}"' for p in paths)
    return f"strict decoding error: {listed}"


class StructuralSchema:
    """One CRD version's ``schema.openAPIV3Schema``: prune, default and validate objects."""

    def __init__(self, openapi_schema: JSON) -> None:
        self.schema: JSON = openapi_schema if isinstance(openapi_schema, dict) else {}
        translated = _translate(self.schema, root=True)
        self._validator: Validator = _KubeValidator(translated, format_checker=_FORMATS)

    # -- pruning -------------------------------------------------------------------------

    def prune(self, obj: JSON) -> list[str]:
        """Drop, in place, fields the schema does not specify; return their paths, sorted.

        The root is treated as an embedded resource, as kube does: ``apiVersion`` and ``kind``
        stay, ``metadata`` keeps only ObjectMeta's fields. Paths read ``spec.foo``,
        ``spec.items[0].bar``, ``metadata.junk``.
        """
        pruned: list[str] = []
        _prune(obj, self.schema, "", pruned, embedded=True)
        return sorted(pruned)

    @staticmethod
    def unknown_field_message(paths: Iterable[str]) -> str:
        """Same as the module function, for callers holding a schema."""
        return unknown_field_message(paths)

    # -- defaulting ----------------------------------------------------------------------

    def apply_defaults(self, obj: JSON) -> None:
        """Fill ``default`` values in place, as structural defaulting does."""
        _default(obj, self.schema)

    # -- validation ----------------------------------------------------------------------

    def validate(self, obj: JSON) -> list[FieldError]:
        """Schema errors in kube's wording, sorted by field path. Root metadata is skipped."""
        found: dict[str, FieldError] = {}
        for err in self._validator.iter_errors(obj):
            field_error = self._field_error(err)
            found.setdefault(f"{field_error.field}\x00{field_error}", field_error)
        return [found[key] for key in sorted(found)]

    def _field_error(self, err: ValidationError) -> FieldError:
        path = _kube_path(err.absolute_path)
        keyword = str(err.validator)
        bound: Any = err.validator_value
        value: Any = err.instance
        schema: Any = err.schema if isinstance(err.schema, dict) else {}
        if keyword == "required":
            return FieldError.required(path)
        if keyword == _EMBEDDED:
            if bound == "required":
                return FieldError.required(path, "must not be empty")
            return FieldError.invalid(path, value, err.message)
        if keyword == "type":
            actual = json_type(value)
            expected = bound if isinstance(bound, str) else ",".join(bound)
            return FieldError.type_invalid(
                path, actual, f"{path} in body must be of type {expected}: {_quote(actual)}"
            )
        if keyword == "format":
            shown = value if isinstance(value, str) else json.dumps(value)
            return FieldError.type_invalid(
                path, value, f"{path} in body must be of type {bound}: {_quote(shown)}"
            )
        if keyword == "enum":
            allowed = [v if isinstance(v, str) else json.dumps(v) for v in bound]
            return FieldError.not_supported(path, value, allowed)
        if keyword in ("minimum", "maximum"):
            exclusive = bool(
                schema.get("exclusiveMinimum" if keyword == "minimum" else "exclusiveMaximum")
            )
            relation = "greater than" if keyword == "minimum" else "less than"
            if not exclusive:
                relation += " or equal to"
            return FieldError.invalid(
                path, value, f"{path} in body should be {relation} {_go_number(bound, value)}"
            )
        if keyword == "multipleOf":
            return FieldError.invalid(
                path, value, f"{path} in body should be a multiple of {_go_number(bound, value)}"
            )
        if keyword == "minLength":
            return FieldError.invalid(
                path, value, f"{path} in body should be at least {bound} chars long"
            )
        if keyword == "maxLength":
            return FieldError("FieldValueTooLong", path, f"may not be longer than {bound}", value)
        if keyword == "pattern":
            return FieldError.invalid(path, value, f"{path} in body should match '{bound}'")
        if keyword == "minItems":
            return FieldError.invalid(
                path, len(value), f"{path} in body should have at least {bound} items"
            )
        if keyword in ("maxItems", "maxProperties"):
            # field.TooMany renders "Too many: <actual>: must have at most <n> items"; errors.py
            # renders no value for TooMany, so the count leads the detail.
            count = len(value)
            return FieldError(
                "FieldValueTooMany", path, f"{count}: must have at most {bound} items", count
            )
        if keyword == "uniqueItems":
            return FieldError.invalid(path, "", f"{path} in body shouldn't contain duplicates")
        if keyword == "minProperties":
            return FieldError.invalid(
                path, len(value), f"{path} in body should have at least {bound} properties"
            )
        if keyword == "anyOf":
            return FieldError.invalid(
                path, value, f"{path} must validate at least one schema (anyOf)"
            )
        if keyword == "oneOf":
            valid = len([s for s in bound if self._validator.evolve(schema=s).is_valid(value)])
            found = "Found none valid" if valid == 0 else f"Found {valid} valid alternatives"
            return FieldError.invalid(
                path, value, f"{path} must validate one and only one schema (oneOf). {found}"
            )
        if keyword == "not":
            return FieldError.invalid(path, value, f"{path} must not validate the schema (not)")
        return FieldError.invalid(path, value, f"{path} in body {err.message}")


# -- schema checks on CRD creation ---------------------------------------------------------


def validate_crd_schema(schema: JSON, prefix: str) -> list[FieldError]:
    """The structural checks kube makes on ``openAPIV3Schema``; ``prefix`` is its field path,
    e.g. ``spec.versions[0].schema.openAPIV3Schema``."""
    node: Any = schema
    if not isinstance(node, dict):
        return [FieldError.required(prefix, "")]
    errs: list[FieldError] = []
    root_type = schema.get("type")
    if not root_type:
        errs.append(FieldError.required(f"{prefix}.type", "must not be empty at the root"))
    elif root_type != "object":
        errs.append(FieldError.invalid(f"{prefix}.type", root_type, "must be object at the root"))
    _check_node(schema, prefix, "", errs)
    return errs


def _check_node(node: JSON, path: str, context: str, errs: list[FieldError]) -> None:
    """``context`` is ``property``/``items`` for nodes that must carry a type, else root."""
    node_type = node.get("type")
    exempt = bool(
        node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
    )
    if node_type is not None and (not isinstance(node_type, str) or node_type not in OPENAPI_TYPES):
        errs.append(FieldError.not_supported(f"{path}.type", node_type, list(OPENAPI_TYPES)))
    elif not node_type and context and not exempt:
        what = "array items" if context == "items" else "object fields"
        errs.append(FieldError.required(f"{path}.type", f"must not be empty for specified {what}"))
    properties = node.get("properties")
    if properties and node_type and node_type != "object":
        errs.append(
            FieldError.invalid(
                f"{path}.type", node_type, "must be object if properties are specified"
            )
        )
    if node_type == "array" and not isinstance(node.get("items"), dict):
        errs.append(FieldError.required(f"{path}.items", "must be specified"))
    if isinstance(properties, dict):
        for name, sub in properties.items():
            if isinstance(sub, dict):
                _check_node(sub, f"{path}.properties[{name}]", "property", errs)
    items = node.get("items")
    if isinstance(items, dict):
        _check_node(items, f"{path}.items", "items", errs)
    additional = node.get("additionalProperties")
    if isinstance(additional, dict):
        _check_node(additional, f"{path}.additionalProperties", "property", errs)


# -- pruning and defaulting (hand-written: these are kube's structural algorithms) --------


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _is_embedded(schema: JSON | None) -> bool:
    return bool(schema and schema.get("x-kubernetes-embedded-resource"))


def _prune(x: Any, schema: JSON | None, path: str, out: list[str], embedded: bool = False) -> None:
    if schema is not None and schema.get("x-kubernetes-preserve-unknown-fields"):
        _skip_prune(x, schema, path, out, embedded or _is_embedded(schema))
        return
    if isinstance(x, dict):
        if schema is None:
            for key in list(x):
                out.append(_join(path, key))
                del x[key]
            return
        embedded = embedded or _is_embedded(schema)
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key in list(x):
            child = _join(path, key)
            if embedded and key in ("apiVersion", "kind"):
                continue
            if embedded and key == "metadata":
                _prune_metadata(x[key], child, out)
            elif key in properties:
                _prune(x[key], _as_schema(properties[key]), child, out)
            elif isinstance(additional, dict):
                _prune(x[key], additional, child, out)
            elif additional is not True:
                out.append(child)
                del x[key]
    elif isinstance(x, list):
        items = _as_schema(schema.get("items")) if schema is not None else None
        for index, item in enumerate(x):
            _prune(item, items, f"{path}[{index}]", out)


def _skip_prune(x: Any, schema: JSON | None, path: str, out: list[str], embedded: bool) -> None:
    """Below ``x-kubernetes-preserve-unknown-fields``: keep unknowns, prune specified fields."""
    if schema is None:
        return
    if isinstance(x, dict):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key in list(x):
            child = _join(path, key)
            if embedded and key in ("apiVersion", "kind"):
                continue
            if embedded and key == "metadata":
                _prune_metadata(x[key], child, out)
            elif key in properties:
                _prune(x[key], _as_schema(properties[key]), child, out)
            elif isinstance(additional, dict):
                _prune(x[key], additional, child, out)
    elif isinstance(x, list):
        items = _as_schema(schema.get("items"))
        for index, item in enumerate(x):
            _skip_prune(item, items, f"{path}[{index}]", out, _is_embedded(items))


def _prune_metadata(meta: Any, path: str, out: list[str]) -> None:
    if isinstance(meta, dict):
        for key in list(meta):
            if key not in OBJECT_META_FIELDS:
                out.append(_join(path, key))
                del meta[key]


def _as_schema(value: Any) -> JSON | None:
    return value if isinstance(value, dict) else None


def _defaultable(value: Any, schema: JSON) -> bool:
    return "default" in schema and value is None and not schema.get("nullable")


def _default(x: Any, schema: JSON | None) -> None:
    if schema is None:
        return
    if isinstance(x, dict):
        properties = schema.get("properties") or {}
        for key, prop in properties.items():
            if (
                isinstance(prop, dict)
                and "default" in prop
                and (key not in x or _defaultable(x[key], prop))
            ):
                x[key] = copy.deepcopy(prop["default"])
        additional = _as_schema(schema.get("additionalProperties"))
        for key in list(x):
            if key in properties:
                _default(x[key], _as_schema(properties[key]))
            elif additional is not None:
                if _defaultable(x[key], additional):
                    x[key] = copy.deepcopy(additional["default"])
                _default(x[key], additional)
    elif isinstance(x, list):
        items = _as_schema(schema.get("items"))
        if items is None:
            return
        for index in range(len(x)):
            if _defaultable(x[index], items):
                x[index] = copy.deepcopy(items["default"])
            _default(x[index], items)


# -- OpenAPI v3 -> Draft 4 translation -------------------------------------------------------


def _translate(node: JSON, root: bool = False) -> JSON:
    """Wrap every node in ``x-kube-node`` so null handling follows kube-openapi, not Draft 4:
    a null is checked only against ``type`` (unless nullable) and ``enum``."""
    inner: JSON = {}
    if node.get("x-kubernetes-int-or-string"):
        inner["type"] = ["integer", "string"]
    elif isinstance(node.get("type"), str) and node["type"] in OPENAPI_TYPES:
        inner["type"] = node["type"]
    elif node.get("x-kubernetes-embedded-resource"):
        inner["type"] = "object"
    for keyword in _PLAIN_KEYWORDS:
        if keyword in node:
            inner[keyword] = node[keyword]
    skip_metadata = root or bool(node.get("x-kubernetes-embedded-resource"))
    properties = node.get("properties")
    if isinstance(properties, dict):
        inner["properties"] = {
            name: _translate(sub)
            for name, sub in properties.items()
            if isinstance(sub, dict) and not (skip_metadata and name == "metadata")
        }
    if skip_metadata and isinstance(inner.get("required"), list):
        inner["required"] = [r for r in inner["required"] if r != "metadata"]
    if isinstance(node.get("additionalProperties"), dict):
        inner["additionalProperties"] = _translate(node["additionalProperties"])
    if isinstance(node.get("items"), dict):
        inner["items"] = _translate(node["items"])
    for keyword in ("allOf", "anyOf", "oneOf"):
        if isinstance(node.get(keyword), list):
            inner[keyword] = [_translate(sub) for sub in node[keyword] if isinstance(sub, dict)]
    if isinstance(node.get("not"), dict):
        inner["not"] = _translate(node["not"])
    if node.get("x-kubernetes-embedded-resource") and not root:
        inner[_EMBEDDED] = True
    return {_NODE: {"nullable": bool(node.get("nullable")), "schema": inner}}


def _node_keyword(
    validator: Any, spec: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    inner: JSON = spec["schema"]
    if instance is None:
        if "type" in inner and not spec["nullable"]:
            yield ValidationError("null", validator="type", validator_value=inner["type"])
        if "enum" in inner:
            yield from validator.descend(None, {"enum": inner["enum"]})
        return
    yield from validator.descend(instance, inner)


def _embedded_keyword(
    validator: Any, enabled: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """``validateEmbeddedResource``: apiVersion and kind are required non-empty strings."""
    if not enabled or not isinstance(instance, dict):
        return
    for key in ("apiVersion", "kind"):
        if key not in instance:
            yield ValidationError("must not be empty", path=(key,), validator_value="required")
            continue
        value = instance[key]
        if not isinstance(value, str):
            yield ValidationError(
                "must be a string", path=(key,), validator_value="invalid", instance=value
            )
        elif not value:
            yield ValidationError(
                "must not be empty", path=(key,), validator_value="invalid", instance=value
            )


def _required_keyword(
    validator: Any, required: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """Like Draft 4's, but the error's path names the missing field, as kube's does."""
    if not isinstance(instance, dict) or not isinstance(required, list):
        return
    for name in required:
        if name not in instance:
            yield ValidationError(f"{name} is required", path=(name,))


def _is_integer(checker: Any, instance: Any) -> bool:
    """kube-openapi accepts a float with no fraction (``2.0``) where an integer is wanted."""
    if isinstance(instance, bool):
        return False
    return isinstance(instance, int) or (isinstance(instance, float) and instance.is_integer())


_KubeValidator = validators.create(
    meta_schema=Draft4Validator.META_SCHEMA,
    validators={
        **Draft4Validator.VALIDATORS,
        _NODE: _node_keyword,
        _EMBEDDED: _embedded_keyword,
        "required": _required_keyword,
    },
    type_checker=Draft4Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)


# -- formats -----------------------------------------------------------------------------------

_FORMATS = FormatChecker(formats=())

_DATE_TIME = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?$"
)


@_FORMATS.checks("date-time")
def _check_date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    match = _DATE_TIME.match(value)
    if match is None:
        return False
    day, hour, minute, second, _zone = match.groups()
    try:
        date.fromisoformat(day)
        datetime(2000, 1, 1, int(hour), int(minute), int(second or 0))
    except ValueError:
        return False
    return True


@_FORMATS.checks("date")
def _check_date(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        return False
    try:
        date.fromisoformat(value)
    except ValueError:
        return False
    return True


@_FORMATS.checks("byte")
def _check_byte(value: object) -> bool:
    if not isinstance(value, str):
        return True
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


@_FORMATS.checks("int32")
def _check_int32(value: object) -> bool:
    return not isinstance(value, int) or isinstance(value, bool) or -(2**31) <= value < 2**31


@_FORMATS.checks("int64")
def _check_int64(value: object) -> bool:
    return not isinstance(value, int) or isinstance(value, bool) or -(2**63) <= value < 2**63


# -- rendering helpers -------------------------------------------------------------------------


def json_type(value: Any) -> str:
    """The JSON type name kube-openapi reports for a decoded value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _kube_path(parts: Iterable[Any]) -> str:
    """kube-openapi's names: ``spec.runners[0].name``; map keys join with a dot."""
    path = ""
    for part in parts:
        path = f"{path}[{part}]" if isinstance(part, int) else _join(path, str(part))
    return path


def _quote(text: str) -> str:
    """Go's ``%q`` for printable text."""
    return json.dumps(text, ensure_ascii=False)


def _go_number(bound: Any, value: Any) -> str:
    """Go's ``%v``: integers as integers when both sides are integral, floats like ``%g``."""
    if isinstance(bound, bool) or not isinstance(bound, int | float):
        return str(bound)
    if isinstance(value, int) and not isinstance(value, bool) and float(bound).is_integer():
        return str(int(bound))
    number = Decimal(repr(float(bound))).normalize()
    sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)
    point = len(digits) + exponent - 1
    if point < -4 or point >= 6:
        mantissa = "".join(str(d) for d in digits)
        if len(mantissa) > 1:
            mantissa = f"{mantissa[0]}.{mantissa[1:]}"
        return f"{'-' if sign else ''}{mantissa}e{'-' if point < 0 else '+'}{abs(point):02d}"
    return format(number, "f")

"""CRD structural schemas: pruning, defaulting and validation with kube's rendered messages."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ome_sim.apiserver.schema import (
    StructuralSchema,
    unknown_field_message,
    validate_crd_schema,
)

JSON = dict[str, Any]


def crd_schema(spec: JSON, **extra: Any) -> JSON:
    """A root schema whose ``spec`` is ``spec``."""
    return {"type": "object", "properties": {"spec": spec, **extra}}


def spec_obj(spec: Any) -> JSON:
    return {"apiVersion": "ome.io/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": spec}


def messages(schema: JSON, spec: Any) -> list[str]:
    return [str(e) for e in StructuralSchema(schema).validate(spec_obj(spec))]


# -- pruning -----------------------------------------------------------------------------------


def test_prune_drops_unknown_spec_field_and_reports_it() -> None:
    schema = StructuralSchema(
        crd_schema({"type": "object", "properties": {"replicas": {"type": "integer"}}})
    )
    obj = spec_obj({"replicas": 2, "bogus": True, "other": {"x": 1}})
    assert schema.prune(obj) == ["spec.bogus", "spec.other"]
    assert obj["spec"] == {"replicas": 2}
    assert obj["apiVersion"] == "ome.io/v1"
    assert obj["kind"] == "Thing"


def test_prune_nested_in_arrays_and_additional_properties() -> None:
    schema = StructuralSchema(
        crd_schema(
            {
                "type": "object",
                "properties": {
                    "runners": {
                        "type": "array",
                        "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                    },
                    "pools": {
                        "type": "object",
                        "additionalProperties": {
                            "type": "object",
                            "properties": {"size": {"type": "integer"}},
                        },
                    },
                },
            }
        )
    )
    obj = spec_obj(
        {
            "runners": [{"name": "a", "junk": 1}, {"name": "b"}],
            "pools": {"east": {"size": 3, "zone": "x"}, "west": {"size": 1}},
        }
    )
    assert schema.prune(obj) == ["spec.pools.east.zone", "spec.runners[0].junk"]
    assert obj["spec"] == {
        "runners": [{"name": "a"}, {"name": "b"}],
        "pools": {"east": {"size": 3}, "west": {"size": 1}},
    }


def test_preserve_unknown_fields_keeps_unknowns_but_prunes_specified_children() -> None:
    schema = StructuralSchema(
        crd_schema(
            {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {
                    "strict": {"type": "object", "properties": {"a": {"type": "string"}}}
                },
            }
        )
    )
    obj = spec_obj({"free": {"anything": [1, 2]}, "strict": {"a": "x", "b": "y"}})
    assert schema.prune(obj) == ["spec.strict.b"]
    assert obj["spec"] == {"free": {"anything": [1, 2]}, "strict": {"a": "x"}}


def test_prune_metadata_keeps_only_object_meta_fields() -> None:
    schema = StructuralSchema(crd_schema({"type": "object"}))
    obj = spec_obj({})
    obj["metadata"] = {
        "name": "t",
        "labels": {"a": "b"},
        "annotations": {"c": "d"},
        "finalizers": ["f"],
        "color": "blue",
    }
    assert schema.prune(obj) == ["metadata.color"]
    assert obj["metadata"] == {
        "name": "t",
        "labels": {"a": "b"},
        "annotations": {"c": "d"},
        "finalizers": ["f"],
    }


def test_prune_embedded_resource_keeps_type_meta_and_prunes_its_metadata() -> None:
    schema = StructuralSchema(
        crd_schema(
            {
                "type": "object",
                "properties": {
                    "template": {
                        "type": "object",
                        "x-kubernetes-embedded-resource": True,
                        "properties": {"spec": {"type": "object"}},
                    }
                },
            }
        )
    )
    obj = spec_obj(
        {
            "template": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"labels": {"a": "b"}, "junk": 1},
                "spec": {},
                "extra": 1,
            }
        }
    )
    assert schema.prune(obj) == ["spec.template.extra", "spec.template.metadata.junk"]
    assert obj["spec"]["template"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": {"a": "b"}},
        "spec": {},
    }


def test_unknown_field_message_is_kubes_strict_decoding_error() -> None:
    text = 'strict decoding error: unknown field "spec.foo", unknown field "spec.bar"'
    assert unknown_field_message(["spec.foo", "spec.bar"]) == text
    assert StructuralSchema({"type": "object"}).unknown_field_message([".spec.foo"]) == (
        'strict decoding error: unknown field "spec.foo"'
    )


def test_strict_message_for_pruned_paths() -> None:
    schema = StructuralSchema(crd_schema({"type": "object", "properties": {}}))
    obj = spec_obj({"b": 1, "a": 2})
    assert schema.unknown_field_message(schema.prune(obj)) == (
        'strict decoding error: unknown field "spec.a", unknown field "spec.b"'
    )


# -- defaulting --------------------------------------------------------------------------------


DEFAULTED = crd_schema(
    {
        "type": "object",
        "properties": {
            "replicas": {"type": "integer", "default": 1},
            "policy": {
                "type": "object",
                "properties": {"mode": {"type": "string", "default": "Auto"}},
            },
            "tuning": {
                "type": "object",
                "default": {},
                "properties": {"level": {"type": "integer", "default": 3}},
            },
            "runners": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"weight": {"type": "integer", "default": 10}},
                },
            },
            "pools": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "properties": {"size": {"type": "integer", "default": 2}},
                },
            },
        },
    }
)


def test_defaults_fill_absent_fields_and_recurse_into_defaulted_parents() -> None:
    obj = spec_obj({"runners": [{}, {"weight": 5}], "pools": {"a": {}, "b": {"size": 7}}})
    StructuralSchema(DEFAULTED).apply_defaults(obj)
    assert obj["spec"] == {
        "replicas": 1,
        "tuning": {"level": 3},
        "runners": [{"weight": 10}, {"weight": 5}],
        "pools": {"a": {"size": 2}, "b": {"size": 7}},
    }


def test_defaults_do_not_create_absent_parent_objects() -> None:
    obj = spec_obj({"replicas": 4})
    StructuralSchema(DEFAULTED).apply_defaults(obj)
    assert "policy" not in obj["spec"]
    assert obj["spec"]["replicas"] == 4


def test_defaults_apply_inside_present_objects() -> None:
    obj = spec_obj({"policy": {}})
    StructuralSchema(DEFAULTED).apply_defaults(obj)
    assert obj["spec"]["policy"] == {"mode": "Auto"}


def test_default_replaces_null_unless_nullable() -> None:
    schema = crd_schema(
        {
            "type": "object",
            "properties": {
                "a": {"type": "string", "default": "x"},
                "b": {"type": "string", "default": "y", "nullable": True},
            },
        }
    )
    obj = spec_obj({"a": None, "b": None})
    StructuralSchema(schema).apply_defaults(obj)
    assert obj["spec"] == {"a": "x", "b": None}


def test_default_values_are_copies() -> None:
    schema = StructuralSchema(DEFAULTED)
    first, second = spec_obj({}), spec_obj({})
    schema.apply_defaults(first)
    schema.apply_defaults(second)
    first["spec"]["tuning"]["level"] = 99
    assert second["spec"]["tuning"]["level"] == 3


# -- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prop", "value", "expected"),
    [
        (
            {"type": "integer"},
            "3",
            'spec.f: Invalid value: "string": spec.f in body must be of type integer: "string"',
        ),
        (
            {"type": "string"},
            5,
            'spec.f: Invalid value: "integer": spec.f in body must be of type string: "integer"',
        ),
        (
            {"type": "integer"},
            1.5,
            'spec.f: Invalid value: "number": spec.f in body must be of type integer: "number"',
        ),
        (
            {"type": "object"},
            [],
            'spec.f: Invalid value: "array": spec.f in body must be of type object: "array"',
        ),
        (
            {"type": "boolean"},
            "true",
            'spec.f: Invalid value: "string": spec.f in body must be of type boolean: "string"',
        ),
        (
            {"type": "string", "enum": ["Fast", "Slow"]},
            "Medium",
            'spec.f: Unsupported value: "Medium": supported values: "Fast", "Slow"',
        ),
        (
            {"type": "integer", "enum": [1, 2]},
            3,
            'spec.f: Unsupported value: 3: supported values: "1", "2"',
        ),
        (
            {"type": "integer", "minimum": 1},
            0,
            "spec.f: Invalid value: 0: spec.f in body should be greater than or equal to 1",
        ),
        (
            {"type": "integer", "minimum": 1, "exclusiveMinimum": True},
            1,
            "spec.f: Invalid value: 1: spec.f in body should be greater than 1",
        ),
        (
            {"type": "integer", "maximum": 10},
            11,
            "spec.f: Invalid value: 11: spec.f in body should be less than or equal to 10",
        ),
        (
            {"type": "number", "maximum": 2.5, "exclusiveMaximum": True},
            2.5,
            "spec.f: Invalid value: 2.5: spec.f in body should be less than 2.5",
        ),
        (
            {"type": "number", "minimum": 1000000},
            0.5,
            "spec.f: Invalid value: 0.5: spec.f in body should be greater than or equal to 1e+06",
        ),
        (
            {"type": "integer", "multipleOf": 5},
            7,
            "spec.f: Invalid value: 7: spec.f in body should be a multiple of 5",
        ),
        (
            {"type": "string", "minLength": 3},
            "ab",
            'spec.f: Invalid value: "ab": spec.f in body should be at least 3 chars long',
        ),
        (
            {"type": "string", "maxLength": 3},
            "abcd",
            "spec.f: Too long: may not be longer than 3",
        ),
        (
            {"type": "string", "pattern": "^[a-z]+$"},
            "Abc",
            "spec.f: Invalid value: \"Abc\": spec.f in body should match '^[a-z]+$'",
        ),
        (
            {"type": "array", "items": {"type": "string"}, "minItems": 1},
            [],
            "spec.f: Invalid value: 0: spec.f in body should have at least 1 items",
        ),
        (
            {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            ["a", "b", "c"],
            "spec.f: Too many: 3: must have at most 2 items",
        ),
        (
            {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            ["a", "a"],
            'spec.f: Invalid value: "": spec.f in body shouldn\'t contain duplicates',
        ),
        (
            {"type": "object", "minProperties": 1},
            {},
            "spec.f: Invalid value: 0: spec.f in body should have at least 1 properties",
        ),
        (
            {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}},
            {"a": "x", "b": "y"},
            "spec.f: Too many: 2: must have at most 1 items",
        ),
        (
            {"type": "string", "format": "date-time"},
            "yesterday",
            'spec.f: Invalid value: "yesterday": spec.f in body must be of type date-time: '
            '"yesterday"',
        ),
        (
            {"type": "string", "format": "byte"},
            "not base64!",
            'spec.f: Invalid value: "not base64!": spec.f in body must be of type byte: '
            '"not base64!"',
        ),
        (
            {"type": "integer", "format": "int32"},
            2**31,
            'spec.f: Invalid value: 2147483648: spec.f in body must be of type int32: "2147483648"',
        ),
        (
            {"type": "string"},
            None,
            'spec.f: Invalid value: "null": spec.f in body must be of type string: "null"',
        ),
        (
            {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            True,
            "spec.f: Invalid value: true: spec.f must validate at least one schema (anyOf)",
        ),
        (
            {"oneOf": [{"type": "integer"}, {"type": "number"}]},
            3,
            "spec.f: Invalid value: 3: spec.f must validate one and only one schema (oneOf). "
            "Found 2 valid alternatives",
        ),
        (
            {"type": "string", "not": {"enum": ["forbidden"]}},
            "forbidden",
            'spec.f: Invalid value: "forbidden": spec.f must not validate the schema (not)',
        ),
        (
            {"type": "integer", "allOf": [{"minimum": 2}, {"maximum": 5}]},
            9,
            "spec.f: Invalid value: 9: spec.f in body should be less than or equal to 5",
        ),
    ],
)
def test_validation_keyword_messages(prop: JSON, value: Any, expected: str) -> None:
    schema = crd_schema({"type": "object", "properties": {"f": prop}})
    assert messages(schema, {"f": value}) == [expected]


@pytest.mark.parametrize(
    ("prop", "value"),
    [
        ({"type": "integer"}, 2.0),
        ({"type": "number"}, 2),
        ({"type": "string", "format": "date-time"}, "2024-05-01T10:00:00Z"),
        ({"type": "string", "format": "date-time"}, "2024-05-01T10:00:00.123+02:00"),
        ({"type": "string", "format": "byte"}, "aGVsbG8="),
        ({"type": "integer", "format": "int64"}, 2**40),
        ({"type": "number", "format": "double"}, 1.25),
        ({"type": "number", "format": "float"}, 3),
        ({"type": "string", "nullable": True}, None),
        ({"type": "string", "pattern": "b"}, "abc"),
    ],
)
def test_valid_values_pass(prop: JSON, value: Any) -> None:
    schema = crd_schema({"type": "object", "properties": {"f": prop}})
    assert messages(schema, {"f": value}) == []


def test_required_field_renders_required_value() -> None:
    schema = crd_schema(
        {"type": "object", "required": ["topology"], "properties": {"topology": {"type": "object"}}}
    )
    assert messages(schema, {}) == ["spec.topology: Required value"]


def test_required_at_root_and_metadata_not_schema_validated() -> None:
    schema = {
        "type": "object",
        "required": ["spec", "metadata"],
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 1}},
            },
            "spec": {"type": "object"},
        },
    }
    obj = {"apiVersion": "ome.io/v1", "kind": "Thing", "metadata": {"name": "long-name"}}
    assert [str(e) for e in StructuralSchema(schema).validate(obj)] == ["spec: Required value"]


def test_int_or_string_accepts_both_and_rejects_others() -> None:
    schema = crd_schema(
        {"type": "object", "properties": {"port": {"x-kubernetes-int-or-string": True}}}
    )
    assert messages(schema, {"port": 8080}) == []
    assert messages(schema, {"port": "http"}) == []
    assert messages(schema, {"port": True}) == [
        'spec.port: Invalid value: "boolean": spec.port in body must be of type '
        'integer,string: "boolean"'
    ]


def test_nullable_with_enum_still_checks_enum() -> None:
    schema = crd_schema(
        {"type": "object", "properties": {"f": {"type": "string", "nullable": True, "enum": ["a"]}}}
    )
    assert messages(schema, {"f": None}) == [
        'spec.f: Unsupported value: null: supported values: "a"'
    ]


def test_nested_paths_use_index_and_dotted_map_keys() -> None:
    schema = crd_schema(
        {
            "type": "object",
            "properties": {
                "runners": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}},
                    },
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        }
    )
    assert messages(schema, {"runners": [{"name": "a"}, {}], "labels": {"app": 1}}) == [
        'spec.labels.app: Invalid value: "integer": spec.labels.app in body must be of type '
        'string: "integer"',
        "spec.runners[1].name: Required value",
    ]


def test_errors_are_sorted_by_field_path() -> None:
    schema = crd_schema(
        {
            "type": "object",
            "required": ["z", "a"],
            "properties": {
                "z": {"type": "string"},
                "a": {"type": "string"},
                "m": {"type": "integer", "minimum": 3},
            },
        }
    )
    assert [e.field for e in StructuralSchema(schema).validate(spec_obj({"m": 1}))] == [
        "spec.a",
        "spec.m",
        "spec.z",
    ]


def test_embedded_resource_requires_api_version_and_kind() -> None:
    schema = crd_schema(
        {
            "type": "object",
            "properties": {
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "x-kubernetes-preserve-unknown-fields": True,
                }
            },
        }
    )
    assert messages(schema, {"template": {"metadata": {"name": "x"}}}) == [
        "spec.template.apiVersion: Required value: must not be empty",
        "spec.template.kind: Required value: must not be empty",
    ]
    assert messages(schema, {"template": {"apiVersion": "v1", "kind": ""}}) == [
        'spec.template.kind: Invalid value: "": must not be empty'
    ]
    good = {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "x": 1}}
    assert messages(schema, good) == []


def test_prune_default_validate_pipeline_on_a_realistic_crd() -> None:
    schema = StructuralSchema(
        crd_schema(
            {
                "type": "object",
                "required": ["model"],
                "properties": {
                    "model": {"type": "string", "minLength": 1},
                    "replicas": {"type": "integer", "minimum": 0, "default": 1},
                },
            },
            status={"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        )
    )
    obj = spec_obj({"model": "llama", "typo": 1})
    obj["status"] = {"anything": "goes"}
    original = copy.deepcopy(obj)
    assert schema.prune(obj) == ["spec.typo"]
    schema.apply_defaults(obj)
    assert schema.validate(obj) == []
    assert obj["spec"] == {"model": "llama", "replicas": 1}
    assert obj["status"] == original["status"]


# -- CRD schema checks ---------------------------------------------------------------------------

PREFIX = "spec.versions[0].schema.openAPIV3Schema"


def crd_errors(schema: JSON) -> list[str]:
    return [str(e) for e in validate_crd_schema(schema, prefix=PREFIX)]


def test_crd_schema_root_must_be_object() -> None:
    assert crd_errors({"type": "string"}) == [
        f'{PREFIX}.type: Invalid value: "string": must be object at the root'
    ]
    assert crd_errors({"properties": {}}) == [
        f"{PREFIX}.type: Required value: must not be empty at the root"
    ]


def test_crd_schema_property_and_item_types() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {"properties": {"a": {"type": "strng"}}},
            "list": {"type": "array", "items": {"properties": {}}},
            "free": {"x-kubernetes-preserve-unknown-fields": True},
            "port": {"x-kubernetes-int-or-string": True},
            "bare": {"type": "array"},
            "str": {"type": "string", "properties": {"x": {"type": "string"}}},
        },
    }
    assert crd_errors(schema) == [
        f"{PREFIX}.properties[spec].type: Required value: must not be empty for specified "
        "object fields",
        f'{PREFIX}.properties[spec].properties[a].type: Unsupported value: "strng": supported '
        'values: "array", "boolean", "integer", "number", "object", "string"',
        f"{PREFIX}.properties[list].items.type: Required value: must not be empty for "
        "specified array items",
        f"{PREFIX}.properties[bare].items: Required value: must be specified",
        f'{PREFIX}.properties[str].type: Invalid value: "string": must be object if '
        "properties are specified",
    ]


def test_crd_schema_valid_structural_schema_has_no_errors() -> None:
    schema = crd_schema(
        {
            "type": "object",
            "properties": {
                "runners": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        }
    )
    assert crd_errors(schema) == []

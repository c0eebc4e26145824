"""The tpuSliceProvisioning configuration (A1 to A5) and ``ome-manager check-config``:
every message verbatim, in A4's order, and properties over arbitrary values."""

from __future__ import annotations

import copy
import io
import json
import random
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

from ome.entrypoints import checkconfig
from ome.tpuslice.config import (
    EXPECTED_OBJECT,
    ConfigError,
    decode,
    format_go_duration,
    parse_config,
    parse_go_duration,
    validate,
)
from ome.tpuslice.kubenames import label_value_problems, qualified_name_problems
from ome.tpuslice.shape import Topology, hosts
from ome.tpuslice.types import GUIDE_CONFIG_JSON, Accelerator


def _decoder_says(text: str) -> str:
    """What this Python's JSON decoder says of ``text``."""
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        return str(e)
    raise AssertionError(f"{text!r} decodes")


# Kubernetes' own problem texts (apimachinery util/validation), spelled out independently.
QN_REGEX = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
QN_EMPTY = "name part must be non-empty"
QN_LONG = "name part must be no more than 63 bytes"
QN_PREFIX_EMPTY = "prefix part must be non-empty"
QN_PREFIX_REGEX = (
    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
    "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
    "'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
QN_PREFIX_LONG = "prefix part must be no more than 253 bytes"
QN_SLASHES = (
    "a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS "
    "subdomain prefix and '/' (e.g. 'example.com/MyName')"
)
LV_REGEX = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
LV_LONG = "must be no more than 63 bytes"

GUIDE_VALUES_YAML = """\
ome:
  controller:
    tpuSliceProvisioning:
      chipResource: google.com/tpu
      nodeLabels:
        accelerator: cloud.google.com/gke-tpu-accelerator
        topology: cloud.google.com/gke-tpu-topology
        slice: cloud.google.com/gke-tpu-slice
      provisionOnly:
        key: cloud.google.com/gke-accelerator-topology-mode
        value: PROVISION_ONLY
      accelerators:
        tpu7x:
          sliceType: tpu7x
          chipsPerHost: 4
          topologies: ["2x2x1", "2x2x2"]
      slice:
        ownerKindLabel: cloud.google.com/slice-owner-kind
        ownerNameLabel: cloud.google.com/slice-owner-name
        annotations:
          cloud.google.com/managed-by: slice-scheduler
          slice.gke.io/retry-on-failure: "true"
        readyStates: [ACTIVE, ACTIVE_DEGRADED]
        readyTimeout: 10m
"""

_DELETE = object()


def guide() -> dict[str, Any]:
    """A fresh copy of the walkthrough's Step 1 block, decoded."""
    raw: dict[str, Any] = json.loads(GUIDE_CONFIG_JSON)
    return raw


def path_keys(path: str) -> list[str | int]:
    """``slice.readyStates[1]`` -> ``["slice", "readyStates", 1]``; ``accelerators[tpu7x]`` ->
    ``["accelerators", "tpu7x"]``."""
    keys: list[str | int] = []
    for match in re.finditer(r"\[([^\]]*)\]|([^.\[]+)", path):
        index, name = match.groups()
        if name is not None:
            keys.append(name)
        else:
            keys.append(int(index) if index.isdigit() else index)
    return keys


def mutated(changes: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    raw = copy.deepcopy(guide() if base is None else base)
    for path, value in changes.items():
        *parents, last = path_keys(path)
        target: Any = raw
        for key in parents:
            target = target[key]
        if value is _DELETE:
            del target[last]
        else:
            target[last] = value
    return raw


def quoted(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def qn_error(path: str, value: str, *problems: str) -> str:
    return f"{path}: {quoted(value)} is not a qualified name: {'; '.join(problems)}"


def lv_error(path: str, value: str, *problems: str) -> str:
    return f"{path}: {quoted(value)} is not a label value: {'; '.join(problems)}"


# -- A1, A3: the walkthrough's block, and provisioning off ----------------------------------------


def test_guide_block_parses_to_its_config() -> None:
    config = parse_config(GUIDE_CONFIG_JSON)
    assert config is not None
    assert config.chip_resource == "google.com/tpu"
    assert config.accelerator_label == "cloud.google.com/gke-tpu-accelerator"
    assert config.topology_label == "cloud.google.com/gke-tpu-topology"
    assert config.slice_label == "cloud.google.com/gke-tpu-slice"
    assert config.provision_only_key == "cloud.google.com/gke-accelerator-topology-mode"
    assert config.provision_only_value == "PROVISION_ONLY"
    assert dict(config.accelerators) == {
        "tpu7x": Accelerator("tpu7x", "tpu7x", 4, ("2x2x1", "2x2x2")),
    }
    settings = config.slice
    assert settings.owner_kind_label == "cloud.google.com/slice-owner-kind"
    assert settings.owner_name_label == "cloud.google.com/slice-owner-name"
    assert dict(settings.annotations) == {
        "cloud.google.com/managed-by": "slice-scheduler",
        "slice.gke.io/retry-on-failure": "true",
    }
    assert settings.pod_annotations == ()
    assert settings.ready_states == ("ACTIVE", "ACTIVE_DEGRADED")
    assert settings.ready_timeout == timedelta(minutes=10)
    assert format_go_duration(settings.ready_timeout) == "10m0s"


def test_optional_fields_default_to_no_pod_annotations_and_no_timeout() -> None:
    raw = mutated({"slice.readyTimeout": _DELETE, "slice.podAnnotations": ["example.com/team"]})
    config = parse_config(json.dumps(raw))
    assert config is not None
    assert config.slice.ready_timeout is None
    assert config.slice.pod_annotations == ("example.com/team",)
    no_timeout = parse_config(json.dumps(mutated({"slice.readyTimeout": ""})))
    assert no_timeout is not None and no_timeout.slice.ready_timeout is None


@pytest.mark.parametrize("text", [None, "", "   ", "\n\t \n"])
def test_missing_or_whitespace_config_turns_provisioning_off(text: str | None) -> None:
    assert parse_config(text) is None


def test_config_error_wraps_every_error_in_one_message() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(json.dumps(mutated({"chipResource": "", "slice.readyStates": []})))
    assert e.value.errors == (
        "chipResource: required",
        "slice.readyStates: at least one state is required",
    )
    assert str(e.value) == (
        "invalid tpuSliceProvisioning config: chipResource: required\n"
        "slice.readyStates: at least one state is required"
    )
    assert isinstance(e.value, ValueError)


# -- A2: decoding ----------------------------------------------------------------------------

TRAILING = GUIDE_CONFIG_JSON + " {}"


@pytest.mark.parametrize(
    ("text", "errors"),
    [
        ("[]", ["expected a JSON object"]),
        ("null", ["expected a JSON object"]),
        ('  "chipResource"', ["expected a JSON object"]),
        ("x{}", ["expected a JSON object"]),
        # The decoder's own words, which differ by Python: 3.13 names a trailing comma
        # ("Illegal trailing comma before end of object: line 1 column 21 (char 20)").
        (
            '{"chipResource": "x",}',
            ["malformed JSON object: " + _decoder_says('{"chipResource": "x",}')],
        ),
        ('{"a" 1}', ["malformed JSON object: Expecting ':' delimiter: line 1 column 6 (char 5)"]),
        (
            TRAILING,
            [
                f"malformed JSON object: Extra data: line 1 column {len(GUIDE_CONFIG_JSON) + 2} "
                f"(char {len(GUIDE_CONFIG_JSON) + 1})"
            ],
        ),
        ('{"chipResource": NaN}', ["malformed JSON object: NaN is not a JSON value"]),
        ('{"x": 1}', ['unknown field "x"']),
        ('{"ChipResource": "google.com/tpu"}', ['unknown field "ChipResource"']),
        ('{"nodeLabels": {"Slice": "a"}}', ['unknown field "nodeLabels.Slice"']),
        ('{"slice": {"foo": 1}}', ['unknown field "slice.foo"']),
        (
            '{"provisionOnly": {"key": "k", "values": "v"}}',
            ['unknown field "provisionOnly.values"'],
        ),
        (
            '{"accelerators": {"tpu7x": {"chips": 4}}}',
            ['unknown field "accelerators[tpu7x].chips"'],
        ),
        ('{"chipResource": "a", "chipResource": "b"}', ['duplicate field "chipResource"']),
        (
            '{"slice": {"readyStates": [], "readyStates": []}}',
            ['duplicate field "slice.readyStates"'],
        ),
        (
            '{"slice": {"annotations": {"a": "1", "a": "2"}}}',
            ['duplicate field "slice.annotations[a]"'],
        ),
        (
            '{"chipResource": 5}',
            ["malformed JSON object: chipResource: expected a string, got the number 5"],
        ),
        (
            '{"nodeLabels": "x"}',
            ["malformed JSON object: nodeLabels: expected an object, got a string"],
        ),
        (
            '{"accelerators": {"tpu7x": {"chipsPerHost": "4"}}}',
            [
                "malformed JSON object: accelerators[tpu7x].chipsPerHost: expected an integer, got a string"
            ],
        ),
        (
            '{"accelerators": {"tpu7x": {"chipsPerHost": 4.0}}}',
            [
                "malformed JSON object: accelerators[tpu7x].chipsPerHost: expected an integer, got the number 4.0"
            ],
        ),
        (
            '{"accelerators": {"tpu7x": {"topologies": ["2x2x1", 4]}}}',
            [
                "malformed JSON object: accelerators[tpu7x].topologies[1]: expected a string, got the number 4"
            ],
        ),
        (
            '{"accelerators": []}',
            ["malformed JSON object: accelerators: expected an object, got an array"],
        ),
        (
            '{"slice": {"annotations": {"a": true}}}',
            ["malformed JSON object: slice.annotations[a]: expected a string, got a boolean"],
        ),
        (
            '{"slice": {"readyStates": "ACTIVE"}}',
            ["malformed JSON object: slice.readyStates: expected an array, got a string"],
        ),
        (
            '{"slice": {"readyTimeout": 600}}',
            ["malformed JSON object: slice.readyTimeout: expected a string, got the number 600"],
        ),
        (
            '{"x": 1, "slice": {"y": 2, "readyStates": {}}, "x": 3}',
            [
                'duplicate field "x"',
                'unknown field "x"',
                'unknown field "slice.y"',
                "malformed JSON object: slice.readyStates: expected an array, got an object",
            ],
        ),
    ],
)
def test_decoding_rejects_what_is_not_the_schema(text: str, errors: list[str]) -> None:
    with pytest.raises(ConfigError) as e:
        decode(text)
    assert list(e.value.errors) == errors
    with pytest.raises(ConfigError) as via_parse:
        parse_config(text)
    assert str(via_parse.value) == "invalid tpuSliceProvisioning config: " + "\n".join(errors)


def test_decoding_allows_null_as_the_zero_value() -> None:
    raw = decode('{"slice": {"annotations": null, "readyTimeout": null}, "chipResource": null}')
    assert raw == {"slice": {"annotations": None, "readyTimeout": None}, "chipResource": None}
    assert "slice.annotations: required; use {} for none" in validate(raw)
    assert "chipResource: required" in validate(raw)


# -- A4: validation, one message per row -----------------------------------------------------

ACC = "accelerators[tpu7x]"
OWNER_KIND = "cloud.google.com/slice-owner-kind"


@pytest.mark.parametrize(
    ("changes", "errors"),
    [
        # 1. chipResource
        ({"chipResource": ""}, ["chipResource: required"]),
        ({"chipResource": None}, ["chipResource: required"]),
        ({"chipResource": _DELETE}, ["chipResource: required"]),
        ({"chipResource": "tpu chips"}, [qn_error("chipResource", "tpu chips", QN_REGEX)]),
        ({"chipResource": "x" * 64}, [qn_error("chipResource", "x" * 64, QN_LONG)]),
        (
            {"chipResource": "x" * 63 + "-"},
            [qn_error("chipResource", "x" * 63 + "-", QN_LONG, QN_REGEX)],
        ),
        (
            {"chipResource": "Google.com/tpu"},
            [qn_error("chipResource", "Google.com/tpu", QN_PREFIX_REGEX)],
        ),
        ({"chipResource": "/tpu"}, [qn_error("chipResource", "/tpu", QN_PREFIX_EMPTY)]),
        (
            {"chipResource": "google.com/"},
            [qn_error("chipResource", "google.com/", QN_EMPTY, QN_REGEX)],
        ),
        ({"chipResource": "a/b/c"}, [qn_error("chipResource", "a/b/c", QN_SLASHES)]),
        (
            {"chipResource": "a" * 254 + "/tpu"},
            [qn_error("chipResource", "a" * 254 + "/tpu", QN_PREFIX_LONG)],
        ),
        ({"chipResource": 'tpu"\n'}, [qn_error("chipResource", 'tpu"\n', QN_REGEX)]),
        # 2. node labels and the provision-only key
        ({"nodeLabels.accelerator": ""}, ["nodeLabels.accelerator: required"]),
        ({"nodeLabels.topology": _DELETE}, ["nodeLabels.topology: required"]),
        (
            {"nodeLabels.slice": "gke tpu slice"},
            [qn_error("nodeLabels.slice", "gke tpu slice", QN_REGEX)],
        ),
        ({"provisionOnly.key": ""}, ["provisionOnly.key: required"]),
        (
            {"nodeLabels": _DELETE},
            [
                "nodeLabels.accelerator: required",
                "nodeLabels.topology: required",
                "nodeLabels.slice: required",
            ],
        ),
        (
            {"nodeLabels.topology": "cloud.google.com/gke-tpu-accelerator"},
            [
                'nodeLabels.topology: "cloud.google.com/gke-tpu-accelerator" is already used by nodeLabels.accelerator'
            ],
        ),
        (
            {"provisionOnly.key": "cloud.google.com/gke-tpu-slice"},
            [
                'provisionOnly.key: "cloud.google.com/gke-tpu-slice" is already used by nodeLabels.slice'
            ],
        ),
        # 3. provisionOnly.value
        ({"provisionOnly.value": ""}, ["provisionOnly.value: required"]),
        (
            {"provisionOnly.value": "PROVISION ONLY"},
            [lv_error("provisionOnly.value", "PROVISION ONLY", LV_REGEX)],
        ),
        ({"provisionOnly.value": "P" * 64}, [lv_error("provisionOnly.value", "P" * 64, LV_LONG)]),
        (
            {"provisionOnly.value": "P" * 63 + "_"},
            [lv_error("provisionOnly.value", "P" * 63 + "_", LV_LONG, LV_REGEX)],
        ),
        # 4. accelerators
        ({"accelerators": {}}, ["accelerators: at least one accelerator is required"]),
        ({"accelerators": None}, ["accelerators: at least one accelerator is required"]),
        ({"accelerators": _DELETE}, ["accelerators: at least one accelerator is required"]),
        # 5. each accelerator
        (
            {
                "accelerators": {
                    "tpu 7x": {"sliceType": "tpu7x", "chipsPerHost": 4, "topologies": ["2x2x1"]}
                }
            },
            [lv_error("accelerators[tpu 7x]", "tpu 7x", LV_REGEX)],
        ),
        (
            {
                "accelerators": {
                    "": {"sliceType": "tpu7x", "chipsPerHost": 4, "topologies": ["2x2x1"]}
                }
            },
            ["accelerators[]: required"],
        ),
        ({f"{ACC}.sliceType": ""}, [f"{ACC}.sliceType: required"]),
        ({f"{ACC}.chipsPerHost": 0}, [f"{ACC}.chipsPerHost: must be positive, got 0"]),
        ({f"{ACC}.chipsPerHost": -4}, [f"{ACC}.chipsPerHost: must be positive, got -4"]),
        ({f"{ACC}.chipsPerHost": _DELETE}, [f"{ACC}.chipsPerHost: must be positive, got 0"]),
        ({f"{ACC}.topologies": []}, [f"{ACC}.topologies: at least one topology is required"]),
        ({f"{ACC}.topologies": None}, [f"{ACC}.topologies: at least one topology is required"]),
        (
            {f"{ACC}.topologies": ["2x2x1x1"]},
            [f"{ACC}.topologies[0]: topology \"2x2x1x1\": want 2 or 3 dimensions separated by 'x'"],
        ),
        (
            {f"{ACC}.topologies": ["2x2x1", "2X2"]},
            [f"{ACC}.topologies[1]: topology \"2X2\": want 2 or 3 dimensions separated by 'x'"],
        ),
        (
            {f"{ACC}.topologies": ["2x02x1"]},
            [
                f'{ACC}.topologies[0]: topology "2x02x1": dimension "02" is not a positive integer without leading zeros'
            ],
        ),
        (  # B1's "<s>" is JSON-escaped: a quote in a configured topology stays unambiguous
            {f"{ACC}.topologies": ['2"x1']},
            [
                f'{ACC}.topologies[0]: topology "2\\"x1": dimension "2\\"" is not a positive '
                "integer without leading zeros"
            ],
        ),
        (
            {f"{ACC}.topologies": ["2x2x1", "2x2x1"]},
            [f'{ACC}.topologies[1]: "2x2x1" is listed twice'],
        ),
        (
            {f"{ACC}.topologies": ["2x3", "2x2x1"]},
            [f"{ACC}.topologies[0]: topology 2x3 is 6 chips, not a whole number of 4-chip hosts"],
        ),
        (
            {f"{ACC}.chipsPerHost": 8},
            [f"{ACC}.topologies[0]: topology 2x2x1 is 4 chips, not a whole number of 8-chip hosts"],
        ),
        # 6. owner labels
        ({"slice.ownerKindLabel": ""}, ["slice.ownerKindLabel: required"]),
        (
            {"slice.ownerNameLabel": "owner name"},
            [qn_error("slice.ownerNameLabel", "owner name", QN_REGEX)],
        ),
        (
            {"slice.ownerNameLabel": OWNER_KIND},
            [f"slice.ownerNameLabel: {quoted(OWNER_KIND)} is already used by slice.ownerKindLabel"],
        ),
        # 7. annotations
        ({"slice.annotations": _DELETE}, ["slice.annotations: required; use {} for none"]),
        ({"slice.annotations": None}, ["slice.annotations: required; use {} for none"]),
        ({"slice.annotations": {}}, []),
        (
            {"slice.annotations": {"z z": "1", "a/b/c": "2", "ok.io/fine": "3"}},
            [
                qn_error("slice.annotations[a/b/c]", "a/b/c", QN_SLASHES),
                qn_error("slice.annotations[z z]", "z z", QN_REGEX),
            ],
        ),
        # 8. podAnnotations
        ({"slice.podAnnotations": []}, []),
        ({"slice.podAnnotations": [""]}, ["slice.podAnnotations[0]: required"]),
        (
            {"slice.podAnnotations": ["team name"]},
            [qn_error("slice.podAnnotations[0]", "team name", QN_REGEX)],
        ),
        (
            {"slice.podAnnotations": ["example.com/team", "example.com/team"]},
            ['slice.podAnnotations[1]: "example.com/team" is listed twice'],
        ),
        (
            {"slice.podAnnotations": ["cloud.google.com/managed-by"]},
            [
                'slice.podAnnotations[0]: "cloud.google.com/managed-by" is already set by slice.annotations'
            ],
        ),
        # 9. readyStates
        ({"slice.readyStates": []}, ["slice.readyStates: at least one state is required"]),
        ({"slice.readyStates": _DELETE}, ["slice.readyStates: at least one state is required"]),
        ({"slice.readyStates": ["ACTIVE", ""]}, ["slice.readyStates[1]: must not be empty"]),
        (
            {"slice.readyStates": ["ACTIVE", "ACTIVE"]},
            ['slice.readyStates[1]: "ACTIVE" is listed twice'],
        ),
        # 10. readyTimeout
        ({"slice.readyTimeout": _DELETE}, []),
        ({"slice.readyTimeout": ""}, []),
        ({"slice.readyTimeout": "1h30m"}, []),
        ({"slice.readyTimeout": "0s"}, ['slice.readyTimeout: "0s" must be a positive duration']),
        ({"slice.readyTimeout": "0"}, ['slice.readyTimeout: "0" must be a positive duration']),
        (
            {"slice.readyTimeout": "-10m"},
            ['slice.readyTimeout: "-10m" must be a positive duration'],
        ),
        ({"slice.readyTimeout": "600"}, ['slice.readyTimeout: "600" must be a positive duration']),
        (
            {"slice.readyTimeout": "10 minutes"},
            ['slice.readyTimeout: "10 minutes" must be a positive duration'],
        ),
        # 11. what the controller writes itself
        (
            {"slice.ownerKindLabel": "ome.io/slice-owner-uid"},
            ["slice label ome.io/slice-owner-uid is set by the controller"],
        ),
        (
            {"slice.ownerNameLabel": "ome.io/managed-by"},
            ["slice label ome.io/managed-by is set by the controller"],
        ),
        (
            {"slice.ownerKindLabel": "ome.io/instance-index"},
            ["slice label ome.io/instance-index is set by the controller"],
        ),
        (
            {"slice.ownerNameLabel": "ome.io/pod-ordinal"},
            ["slice label ome.io/pod-ordinal is set by the controller"],
        ),
        (
            {"slice.annotations[ome.io/slice-owner]": "x"},
            ["slice annotation ome.io/slice-owner is set by the controller"],
        ),
        (
            {"slice.podAnnotations": ["ome.io/slice-owner"]},
            ["slice annotation ome.io/slice-owner is set by the controller"],
        ),
    ],
)
def test_each_invalid_field_says_what_is_wrong(changes: dict[str, Any], errors: list[str]) -> None:
    raw = mutated(changes)
    assert validate(raw) == errors
    if errors:
        with pytest.raises(ConfigError) as e:
            parse_config(json.dumps(raw))
        assert list(e.value.errors) == errors
    else:
        assert parse_config(json.dumps(raw)) is not None


def test_all_errors_come_back_together_in_a4_order() -> None:
    raw = mutated(
        {
            "slice.readyTimeout": "soon",
            "slice.ownerNameLabel": "ome.io/managed-by",
            "slice.readyStates": [],
            "slice.podAnnotations": ["bad key"],
            "slice.annotations": None,
            "slice.ownerKindLabel": "",
            "accelerators.b": {"sliceType": "", "chipsPerHost": 0, "topologies": []},
            "accelerators.a": {"sliceType": "a", "chipsPerHost": 3, "topologies": ["2x2"]},
            "provisionOnly.value": "",
            "provisionOnly.key": "cloud.google.com/gke-tpu-accelerator",
            "nodeLabels.topology": "",
            "chipResource": "a/b/c",
        }
    )
    assert validate(raw) == [
        qn_error("chipResource", "a/b/c", QN_SLASHES),
        "nodeLabels.topology: required",
        'provisionOnly.key: "cloud.google.com/gke-tpu-accelerator" is already used by nodeLabels.accelerator',
        "provisionOnly.value: required",
        "accelerators[a].topologies[0]: topology 2x2 is 4 chips, not a whole number of 3-chip hosts",
        "accelerators[b].sliceType: required",
        "accelerators[b].chipsPerHost: must be positive, got 0",
        "accelerators[b].topologies: at least one topology is required",
        "slice.ownerKindLabel: required",
        "slice.annotations: required; use {} for none",
        qn_error("slice.podAnnotations[0]", "bad key", QN_REGEX),
        "slice.readyStates: at least one state is required",
        'slice.readyTimeout: "soon" must be a positive duration',
        "slice label ome.io/managed-by is set by the controller",
    ]


OVERFLOWS = "chip count overflows a 64-bit integer"


@pytest.mark.parametrize(
    ("chips_per_host", "topologies", "errors"),
    [
        pytest.param(
            4,
            ["2x2x1", "9999999999x9999999999x9999999999"],
            [f'{ACC}.topologies[1]: topology "9999999999x9999999999x9999999999": {OVERFLOWS}'],
            id="the Go upstream's example",
        ),
        pytest.param(
            4,
            ["4294967296x2147483648"],
            [f'{ACC}.topologies[0]: topology "4294967296x2147483648": {OVERFLOWS}'],
            id="2**63 chips, a whole number of hosts",
        ),
        pytest.param(
            3,
            ["2x2x1", "9223372036854775808x1"],
            [
                f"{ACC}.topologies[0]: topology 2x2x1 is 4 chips, not a whole number of 3-chip hosts",
                f'{ACC}.topologies[1]: topology "9223372036854775808x1": {OVERFLOWS}',
            ],
            id="a parse error skips the host check",
        ),
        pytest.param(
            4,
            ["2x2x1", "1x" + "9" * 5000, "1x" + "9" * 5000],
            [
                f'{ACC}.topologies[1]: topology "1x{"9" * 5000}": {OVERFLOWS}',
                f'{ACC}.topologies[2]: topology "1x{"9" * 5000}": {OVERFLOWS}',
            ],
            id="a parse error skips listed twice, beyond int()'s digit limit",
        ),
        pytest.param(
            4,
            ["2x2x1", "9223372036854775807x1"],
            [
                f"{ACC}.topologies[1]: topology 9223372036854775807x1 is 9223372036854775807 "
                "chips, not a whole number of 4-chip hosts"
            ],
            id="int64 max chips is checked for hosts",
        ),
        pytest.param(4, ["2x2x1", "2305843009213693951x4"], [], id="2**63-4 chips is accepted"),
    ],
)
def test_a_listed_topology_whose_chip_count_overflows_int64_is_a_parse_error(
    monkeypatch: pytest.MonkeyPatch, chips_per_host: int, topologies: list[str], errors: list[str]
) -> None:
    checked: list[int] = []

    def counting_hosts(topology: Topology, cph: int) -> int:
        checked.append(topology.chips)
        return hosts(topology, cph)

    monkeypatch.setattr("ome.tpuslice.config.hosts", counting_hosts)
    raw = mutated({f"{ACC}.chipsPerHost": chips_per_host, f"{ACC}.topologies": topologies})
    assert validate(raw) == errors
    assert all(chips <= 2**63 - 1 for chips in checked)
    if errors:
        with pytest.raises(ConfigError) as e:
            parse_config(json.dumps(raw))
        assert list(e.value.errors) == errors
    else:
        config = parse_config(json.dumps(raw))
        assert config is not None
        assert config.accelerators["tpu7x"].topologies == tuple(topologies)


def test_empty_object_lists_every_required_field() -> None:
    assert validate({}) == [
        "chipResource: required",
        "nodeLabels.accelerator: required",
        "nodeLabels.topology: required",
        "nodeLabels.slice: required",
        "provisionOnly.key: required",
        "provisionOnly.value: required",
        "accelerators: at least one accelerator is required",
        "slice.ownerKindLabel: required",
        "slice.ownerNameLabel: required",
        "slice.annotations: required; use {} for none",
        "slice.readyStates: at least one state is required",
    ]


def test_a_wrongly_typed_section_is_reported_once_and_its_fields_skipped() -> None:
    raw = mutated({"provisionOnly": ["k", "v"], "slice": 5})
    assert validate(raw) == [
        "provisionOnly: expected an object, got an array",
        "slice: expected an object, got the number 5",
    ]


# -- Kubernetes names --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["MyName", "my.name", "123-abc", "example.com/MyName", "google.com/tpu", "a", "x" * 63]
)
def test_kubernetes_accepts_these_qualified_names(name: str) -> None:
    assert qualified_name_problems(name) == []


@pytest.mark.parametrize("value", ["", "MyValue", "my_value", "12345", "PROVISION_ONLY", "v" * 63])
def test_kubernetes_accepts_these_label_values(value: str) -> None:
    assert label_value_problems(value) == []


def test_name_lengths_count_bytes_as_go_does() -> None:
    assert qualified_name_problems("é" * 32) == [QN_LONG, QN_REGEX]
    assert label_value_problems("é" * 31) == [LV_REGEX]


# -- Go durations ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected", "canonical"),
    [
        ("10m", timedelta(minutes=10), "10m0s"),
        ("1.5h", timedelta(minutes=90), "1h30m0s"),
        ("90s", timedelta(seconds=90), "1m30s"),
        ("1h30m", timedelta(minutes=90), "1h30m0s"),
        ("500ms", timedelta(milliseconds=500), "500ms"),
        ("2m3.5s", timedelta(minutes=2, seconds=3.5), "2m3.5s"),
        ("11m3s", timedelta(minutes=11, seconds=3), "11m3s"),
        ("1h", timedelta(hours=1), "1h0m0s"),
        ("1.5s", timedelta(seconds=1.5), "1.5s"),
        ("0", timedelta(0), "0s"),
        ("+0s", timedelta(0), "0s"),
        ("-1m30s", -timedelta(seconds=90), "-1m30s"),
        ("1500us", timedelta(microseconds=1500), "1.5ms"),
        ("7\u00b5s", timedelta(microseconds=7), "7\u00b5s"),
        ("7\u03bcs", timedelta(microseconds=7), "7\u00b5s"),
        ("1001ns", timedelta(microseconds=2), "2\u00b5s"),
        (".5m", timedelta(seconds=30), "30s"),
        ("1.h", timedelta(hours=1), "1h0m0s"),
        (
            "1h1m1.000001s",
            timedelta(hours=1, minutes=1, seconds=1, microseconds=1),
            "1h1m1.000001s",
        ),
    ],
)
def test_go_durations_parse_and_print_as_go_does(
    text: str, expected: timedelta, canonical: str
) -> None:
    assert parse_go_duration(text) == expected
    assert format_go_duration(expected) == canonical


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'time: invalid duration ""'),
        ("-", 'time: invalid duration "-"'),
        ("10", 'time: missing unit in duration "10"'),
        ("1.5.5s", 'time: missing unit in duration "1.5.5s"'),
        ("10x", 'time: unknown unit "x" in duration "10x"'),
        ("10 m", 'time: unknown unit " m" in duration "10 m"'),
        (".s", 'time: invalid duration ".s"'),
        ("m", 'time: invalid duration "m"'),
        ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
        ("3000000h", 'time: invalid duration "3000000h"'),
    ],
)
def test_bad_go_durations_give_gos_message(text: str, message: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_go_duration(text)
    assert str(e.value) == message


def test_go_duration_bounds_are_int64_nanoseconds() -> None:
    assert parse_go_duration("-9223372036854775808ns") == -timedelta(microseconds=9223372036854776)
    assert format_go_duration(parse_go_duration("2562047h47m16.854775s")) == "2562047h47m16.854775s"


@given(st.integers(min_value=-(2**63 // 1000), max_value=(2**63 - 1) // 1000))
def test_go_canonical_durations_round_trip(micros: int) -> None:
    d = timedelta(microseconds=micros)
    text = format_go_duration(d)
    assert parse_go_duration(text) == d
    assert format_go_duration(parse_go_duration(text)) == text


# -- properties --------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=12,
)

FIELDS = [
    "chipResource",
    "nodeLabels",
    "nodeLabels.accelerator",
    "nodeLabels.topology",
    "nodeLabels.slice",
    "provisionOnly",
    "provisionOnly.key",
    "provisionOnly.value",
    "accelerators",
    "accelerators[tpu7x]",
    "accelerators[tpu7x].sliceType",
    "accelerators[tpu7x].chipsPerHost",
    "accelerators[tpu7x].topologies",
    "accelerators[tpu7x].topologies[0]",
    "slice",
    "slice.ownerKindLabel",
    "slice.ownerNameLabel",
    "slice.annotations",
    "slice.annotations[cloud.google.com/managed-by]",
    "slice.podAnnotations",
    "slice.readyStates",
    "slice.readyStates[0]",
    "slice.readyTimeout",
]


@given(st.sampled_from(FIELDS), json_values)
def test_validate_never_raises_whatever_a_field_holds(field: str, value: Any) -> None:
    errors = validate(mutated({field: value}))
    assert isinstance(errors, list) and all(isinstance(e, str) for e in errors)


@given(st.dictionaries(st.text(), json_values, max_size=6) | json_values)
def test_validate_never_raises_on_any_document(raw: Any) -> None:
    errors = validate(raw)
    assert isinstance(errors, list) and all(isinstance(e, str) for e in errors)


@given(st.text(max_size=40))
def test_decode_never_fails_but_with_config_error(text: str) -> None:
    try:
        decode("{" + text)
    except ConfigError as e:
        assert e.errors and all(isinstance(m, str) for m in e.errors)


STRING_FIELDS = [
    "chipResource",
    "nodeLabels.accelerator",
    "nodeLabels.topology",
    "nodeLabels.slice",
    "provisionOnly.key",
    "provisionOnly.value",
    "accelerators[tpu7x].sliceType",
    "accelerators[tpu7x].topologies[0]",
    "slice.ownerKindLabel",
    "slice.ownerNameLabel",
    "slice.annotations[cloud.google.com/managed-by]",
    "slice.readyStates[0]",
    "slice.readyTimeout",
]
NOT_STRINGS = (
    st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.lists(st.none(), max_size=2)
    | st.dictionaries(st.text(max_size=3), st.none(), max_size=2)
)


@given(st.sampled_from(STRING_FIELDS), NOT_STRINGS)
def test_a_string_field_of_another_type_gets_exactly_its_type_error(field: str, value: Any) -> None:
    errors = validate(mutated({field: value}))
    assert len(errors) == 1
    assert errors[0].startswith(f"{field}: expected a string, got ")


QN_FIELDS = [
    "chipResource",
    "nodeLabels.accelerator",
    "nodeLabels.topology",
    "nodeLabels.slice",
    "provisionOnly.key",
    "slice.ownerKindLabel",
    "slice.ownerNameLabel",
]
LABEL_TEXT = st.text(alphabet="abcAZ019-_./ é", max_size=70) | st.text(max_size=10)


def _values_of(raw: dict[str, Any], fields: list[str]) -> set[Any]:
    values = set()
    for field in fields:
        target: Any = raw
        for key in path_keys(field):
            target = target[key]
        values.add(target)
    return values


@given(st.sampled_from(QN_FIELDS), LABEL_TEXT)
def test_a_qualified_name_field_gets_exactly_its_own_errors(field: str, value: str) -> None:
    raw = mutated({field: value})
    group = (
        QN_FIELDS[1:5]
        if field in QN_FIELDS[1:5]
        else QN_FIELDS[5:]
        if field != "chipResource"
        else []
    )
    assume(value not in _values_of(raw, [f for f in group if f != field]))
    assume(not value.startswith("ome.io/"))
    problems = qualified_name_problems(value)
    if value == "":
        expected = [f"{field}: required"]
    elif problems:
        expected = [qn_error(field, value, *problems)]
    else:
        expected = []
    assert validate(raw) == expected


@given(LABEL_TEXT)
def test_the_provision_only_value_gets_exactly_its_own_errors(value: str) -> None:
    problems = label_value_problems(value)
    expected = (
        ["provisionOnly.value: required"]
        if value == ""
        else [lv_error("provisionOnly.value", value, *problems)]
        if problems
        else []
    )
    assert validate(mutated({"provisionOnly.value": value})) == expected


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_chips_per_host_gets_exactly_its_own_errors(chips_per_host: int) -> None:
    if chips_per_host <= 0:
        expected = [f"{ACC}.chipsPerHost: must be positive, got {chips_per_host}"]
    else:
        expected = [
            f"{ACC}.topologies[{i}]: topology {topo} is {chips} chips, not a whole number of "
            f"{chips_per_host}-chip hosts"
            for i, (topo, chips) in enumerate((("2x2x1", 4), ("2x2x2", 8)))
            if chips % chips_per_host
        ]
    assert validate(mutated({f"{ACC}.chipsPerHost": chips_per_host})) == expected


@given(st.text(alphabet="0123456789.hmsuµn+- ", max_size=12))
def test_the_ready_timeout_gets_exactly_its_own_error(text: str) -> None:
    try:
        positive = parse_go_duration(text) > timedelta(0)
    except ValueError:
        positive = False
    expected = (
        []
        if text == "" or positive
        else [f"slice.readyTimeout: {quoted(text)} must be a positive duration"]
    )
    assert validate(mutated({"slice.readyTimeout": text})) == expected


@given(st.lists(st.sampled_from(["ACTIVE", "ACTIVE_DEGRADED", "", "FAILED"]), max_size=5))
def test_ready_states_get_exactly_their_own_errors(states: list[str]) -> None:
    expected = [] if states else ["slice.readyStates: at least one state is required"]
    seen: set[str] = set()
    for i, state in enumerate(states):
        if state == "":
            expected.append(f"slice.readyStates[{i}]: must not be empty")
        elif state in seen:
            expected.append(f'slice.readyStates[{i}]: "{state}" is listed twice')
        seen.add(state)
    assert validate(mutated({"slice.readyStates": states})) == expected


# -- ome-manager check-config ----------------------------------------------------------------


def run_check(argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = checkconfig.main(argv, stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_check_config_accepts_the_guide_block(tmp_path: Path) -> None:
    path = tmp_path / "block.json"
    path.write_text(GUIDE_CONFIG_JSON)
    assert run_check([str(path)]) == (0, "ok\n", "")


def test_check_config_reads_a_helm_values_file(tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(GUIDE_VALUES_YAML)
    assert run_check([str(path)]) == (0, "ok\n", "")


def test_check_config_reads_standard_input_for_dash() -> None:
    assert run_check(["-"], stdin=GUIDE_VALUES_YAML) == (0, "ok\n", "")
    assert run_check(["-"], stdin=GUIDE_CONFIG_JSON) == (0, "ok\n", "")


def test_check_config_prints_every_error_one_per_line(tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(
        GUIDE_VALUES_YAML.replace("chipsPerHost: 4", "chipsPerHost: 0").replace(
            "readyTimeout: 10m", "readyTimeout: 0s"
        )
    )
    code, out, err = run_check([str(path)])
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        "invalid tpuSliceProvisioning config:",
        "accelerators[tpu7x].chipsPerHost: must be positive, got 0",
        'slice.readyTimeout: "0s" must be a positive duration',
    ]


def test_check_config_reports_decoding_errors_of_a_values_file() -> None:
    values = GUIDE_VALUES_YAML.replace('retry-on-failure: "true"', "retry-on-failure: true")
    values = values.replace("      chipResource:", "      chipresource: x\n      chipResource:")
    assert run_check(["-"], stdin=values) == (
        1,
        "invalid tpuSliceProvisioning config:\n"
        'unknown field "chipresource"\n'
        "malformed JSON object: slice.annotations[slice.gke.io/retry-on-failure]: expected a "
        "string, got a boolean\n",
        "",
    )


def test_check_config_checks_a_json_block_strictly() -> None:
    block = GUIDE_CONFIG_JSON.replace(
        '"chipResource":"google.com/tpu"', '"chipResource":"a","chipResource":"b"'
    )
    assert run_check(["-"], stdin=block) == (
        1,
        'invalid tpuSliceProvisioning config:\nduplicate field "chipResource"\n',
        "",
    )


def test_check_config_takes_a_block_given_as_json_text_in_values() -> None:
    values = (
        "ome:\n  controller:\n    tpuSliceProvisioning: " + json.dumps(GUIDE_CONFIG_JSON) + "\n"
    )
    assert run_check(["-"], stdin=values) == (0, "ok\n", "")


def test_check_config_says_when_values_turn_provisioning_off() -> None:
    code, out, _ = run_check(["-"], stdin="ome:\n  controller:\n    other: 1\n")
    assert code == 0
    assert (
        out
        == "ok: ome.controller.tpuSliceProvisioning is not set, so TPU slice provisioning is off\n"
    )


def test_check_config_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    code, out, err = run_check([str(missing)])
    assert (code, out) == (2, "")
    assert (
        err
        == f"ome-manager check-config: error: cannot read {missing}: No such file or directory\n"
    )


def test_check_config_usage_and_help() -> None:
    code, out, err = run_check([])
    assert code == 2 and out == "" and "usage: ome-manager check-config" in err
    code, out, err = run_check(["--help"])
    assert code == 0 and out.startswith("usage: ome-manager check-config [-h] FILE") and err == ""


def test_manager_dispatches_check_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ome.entrypoints.manager import main

    path = tmp_path / "block.json"
    path.write_text(GUIDE_CONFIG_JSON)
    assert main(["check-config", str(path)]) == 0
    assert capsys.readouterr().out == "ok\n"


SAMPLE_CONFIG_MAP = (
    Path(__file__).resolve().parents[2] / "config/samples/inferenceservice-config.yaml"
)


def test_check_config_checks_the_block_of_the_sample_configmap(tmp_path: Path) -> None:
    assert run_check([str(SAMPLE_CONFIG_MAP)]) == (0, "ok\n", "")
    manifest = yaml.safe_load(SAMPLE_CONFIG_MAP.read_text())
    manifest["data"]["tpuSliceProvisioning"] = GUIDE_CONFIG_JSON.replace(
        '"chipsPerHost":4', '"chipsPerHost":0'
    )
    as_json = tmp_path / "configmap.json"  # as kubectl get -o json prints it
    as_json.write_text(json.dumps(manifest))
    assert run_check([str(as_json)]) == (
        1,
        "invalid tpuSliceProvisioning config:\n"
        "accelerators[tpu7x].chipsPerHost: must be positive, got 0\n",
        "",
    )


def test_check_config_says_when_the_configmap_turns_provisioning_off() -> None:
    empty = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: inferenceservice-config}\ndata: {}\n"
    assert run_check(["-"], stdin=empty) == (
        0,
        "ok: the ConfigMap has no data.tpuSliceProvisioning entry, so TPU slice provisioning "
        "is off\n",
        "",
    )
    not_text = "kind: ConfigMap\ndata:\n  tpuSliceProvisioning: {chipResource: google.com/tpu}\n"
    assert run_check(["-"], stdin=not_text) == (
        1,
        "invalid tpuSliceProvisioning config:\nConfigMap data.tpuSliceProvisioning: expected a "
        "string holding the JSON block, got a mapping\n",
        "",
    )


@pytest.mark.parametrize(
    ("text", "got"),
    [
        ("[1, 2]", "a list"),
        ("- a\n- b\n", "a list"),
        ('"tpu"', "a string"),
        ("42", "a number"),
        ("null", "null"),
        ("apiVersion: apps/v1\nkind: Deployment\n", "a Deployment manifest"),
        (
            "chipResource: google.com/tpu\n",
            "a YAML mapping without an ome key (the block itself must be JSON)",
        ),
        ("a: 1\n---\nb: 2\n", "2 YAML documents"),
        ("x: [", "text that is neither JSON nor YAML"),
    ],
)
def test_check_config_says_what_a_file_without_a_block_holds(text: str, got: str) -> None:
    assert run_check(["-"], stdin=text) == (
        1,
        "invalid tpuSliceProvisioning config:\nexpected a JSON object (the tpuSliceProvisioning "
        f"block), a Helm values file or a ConfigMap manifest, got {got}\n",
        "",
    )


# -- hostile input: one clear verdict, quickly, never a traceback ----------------------------

TOO_DEEP = "malformed JSON object: nesting too deep"
DEEP = 100_000
BIG_DIGITS = "1" + "0" * 5000  # 10**5000: beyond int()'s 4300-digit limit
TEN_MB = 10_000_000
PNG = "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"  # binary garbage, as text
VALUES_HEAD = "ome:\n  controller:\n    tpuSliceProvisioning:\n"
OFF_LINE = "ok: ome.controller.tpuSliceProvisioning is not set, so TPU slice provisioning is off"
QUICK = 2.0  # seconds, for any one check of any one input, 10 MB included


def guide_with(old: str, new: str) -> str:
    assert old in GUIDE_CONFIG_JSON
    return GUIDE_CONFIG_JSON.replace(old, new, 1)


def chips_per_host(literal: str) -> str:
    return guide_with('"chipsPerHost":4', f'"chipsPerHost":{literal}')


def wrong_chips_per_host(got: str) -> list[str]:
    return [f"malformed JSON object: {ACC}.chipsPerHost: expected an integer, got {got}"]


NUL_AT = GUIDE_CONFIG_JSON.index("google.com/tpu") + len("google.com/tpu")

#: (text, the errors, or None when it turns provisioning off, or [] when it is valid)
HOSTILE_BLOCKS = [
    pytest.param("[" * DEEP, ["expected a JSON object"], id="arrays nested 100000 deep"),
    pytest.param('{"a":' * DEEP, [TOO_DEEP], id="objects nested 100000 deep"),
    pytest.param('{"a":' * DEEP + "1" + "}" * DEEP, [TOO_DEEP], id="closed objects 100000 deep"),
    pytest.param(
        '{"a":' + "[" * DEEP + "]" * DEEP + "}", [TOO_DEEP], id="arrays deep in an object"
    ),
    pytest.param(
        guide_with('"annotations":{', '"annotations":{"x":' + "[" * DEEP + "]" * DEEP + ","),
        [TOO_DEEP],
        id="deep under slice.annotations of a valid block",
    ),
    pytest.param(
        '{"x":' + "[" * 99 + "]" * 99 + "}", ['unknown field "x"'], id="100 levels are allowed"
    ),
    pytest.param('{"x":' + "[" * 100 + "]" * 100 + "}", [TOO_DEEP], id="101 levels are too deep"),
    pytest.param(
        '{"x":"' + "[{" * DEEP + '"}', ['unknown field "x"'], id="brackets in a string do not nest"
    ),
    pytest.param(
        '{"x":"\\"' + "[" * DEEP + '"}', ['unknown field "x"'], id="nor after an escaped quote"
    ),
    pytest.param(
        chips_per_host("1e309"), wrong_chips_per_host("the number 1e309"), id="1e309 overflows"
    ),
    pytest.param(
        chips_per_host("-1e309"), wrong_chips_per_host("the number -1e309"), id="-1e309 overflows"
    ),
    pytest.param(
        chips_per_host(BIG_DIGITS), wrong_chips_per_host("a number"), id="10**5000 in digits"
    ),
    pytest.param(
        chips_per_host("-" + BIG_DIGITS), wrong_chips_per_host("a number"), id="-10**5000"
    ),
    pytest.param(
        guide_with('"google.com/tpu"', BIG_DIGITS),
        ["malformed JSON object: chipResource: expected a string, got a number"],
        id="10**5000 for a string",
    ),
    pytest.param(
        guide_with('"google.com/tpu"', "1e309"),
        ["malformed JSON object: chipResource: expected a string, got the number 1e309"],
        id="1e309 for a string",
    ),
    pytest.param(
        chips_per_host("NaN"), ["malformed JSON object: NaN is not a JSON value"], id="NaN"
    ),
    pytest.param(
        chips_per_host("Infinity"),
        ["malformed JSON object: Infinity is not a JSON value"],
        id="Infinity",
    ),
    pytest.param(
        chips_per_host("-Infinity"),
        ["malformed JSON object: -Infinity is not a JSON value"],
        id="-Infinity",
    ),
    pytest.param(
        "{\x00}",
        [
            "malformed JSON object: Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1)"
        ],
        id="a NUL byte",
    ),
    pytest.param("\x00", ["expected a JSON object"], id="only a NUL byte"),
    pytest.param(
        GUIDE_CONFIG_JSON[:NUL_AT] + "\x00" + GUIDE_CONFIG_JSON[NUL_AT:],
        [
            f"malformed JSON object: Invalid control character at: line 1 column {NUL_AT + 1} "
            f"(char {NUL_AT})"
        ],
        id="a NUL byte in a string",
    ),
    pytest.param(PNG, ["expected a JSON object"], id="binary garbage"),
    pytest.param(
        "{" + PNG,
        [
            "malformed JSON object: Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1)"
        ],
        id="binary garbage after a brace",
    ),
    pytest.param("\ufeff" + GUIDE_CONFIG_JSON, ["expected a JSON object"], id="a byte order mark"),
    pytest.param(
        guide_with('"slice-scheduler"', '"' + "s" * TEN_MB + '"'),
        [],
        id="10 MB: one huge annotation value",
    ),
    pytest.param(
        guide_with('{"accelerators"', '{"x":"' + "s" * TEN_MB + '","accelerators"'),
        ['unknown field "x"'],
        id="10 MB: one huge string in an unknown field",
    ),
    pytest.param(
        chips_per_host("[" + "4," * (TEN_MB // 2) + "4]"),
        wrong_chips_per_host("an array"),
        id="10 MB: a huge array",
    ),
    pytest.param(
        guide_with(
            '"annotations":{',
            '"annotations":{"x":[' + "[]," * 10**6 + '"' + "s" * (TEN_MB - 3 * 10**6) + '"],',
        ),
        ["malformed JSON object: slice.annotations[x]: expected a string, got an array"],
        id="10 MB: a million arrays and a long string",
    ),
    pytest.param("", None, id="empty"),
    pytest.param(" \n\t\r\n ", None, id="whitespace only"),
]


#: What check-config says a hostile text holds where ``parse_config`` says only "expected a JSON
#: object": it is no block, no values file and no ConfigMap manifest.
NEITHER = "text that is neither JSON nor YAML"
HOLDS = {
    "[" * DEEP: "a document nested too deep",
    "\x00": NEITHER,
    PNG: NEITHER,
    "\ufeff" + GUIDE_CONFIG_JSON: "text that starts with a byte order mark",
    "other: " + "[" * DEEP + "\n" + GUIDE_VALUES_YAML: "a document nested too deep",
}


def expected_check(errors: list[str] | None, text: str = "") -> tuple[int, str, str]:
    """What check-config prints for a block with these errors (``text``: the file)."""
    if errors is None:
        return 0, OFF_LINE + "\n", ""
    if not errors:
        return 0, "ok\n", ""
    if errors == [EXPECTED_OBJECT]:
        errors = [checkconfig.not_an_object(HOLDS[text])]
    return 1, "invalid tpuSliceProvisioning config:\n" + "".join(e + "\n" for e in errors), ""


def timed(check: Any, *args: Any) -> Any:
    """``check(*args)``, which must take less than ``QUICK`` of this thread's CPU time: its
    own work, the same on a machine busy with other tests (``make test`` runs them side by
    side) as on an idle one, where the wall clock would also count the time it waited."""
    start = time.thread_time()
    result = check(*args)
    assert time.thread_time() - start < QUICK
    return result


def parse_verdict(text: str) -> list[str] | None:
    try:
        return [] if parse_config(text) is not None else None
    except ConfigError as e:
        assert str(e) == "invalid tpuSliceProvisioning config: " + "\n".join(e.errors)
        return list(e.errors)


@pytest.mark.parametrize(("text", "errors"), HOSTILE_BLOCKS)
def test_hostile_block_gets_one_clear_verdict_from_parse(
    text: str, errors: list[str] | None
) -> None:
    assert timed(parse_verdict, text) == errors


@pytest.mark.parametrize(("text", "errors"), HOSTILE_BLOCKS)
def test_hostile_block_gets_the_same_verdict_from_check_config(
    tmp_path: Path, text: str, errors: list[str] | None
) -> None:
    expected = expected_check(errors, text)
    assert timed(run_check, ["-"], text) == expected
    path = tmp_path / "block.json"
    path.write_bytes(text.encode())
    assert timed(run_check, [str(path)]) == expected


def values_with(block: str) -> str:
    """A values file whose block is ``block``, in YAML flow style on one line."""
    return VALUES_HEAD.rstrip("\n") + " " + block + "\n"


def nested_keys(levels: int) -> str:
    """A values file whose block nests ``levels`` mappings in block style."""
    return VALUES_HEAD + "".join("  " * (3 + i) + "k:\n" for i in range(levels))


def alias_chain(links: int) -> str:
    """A values file whose block nests ``links + 1`` arrays through aliases, each line short."""
    anchors = "a0: &a0 []\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, links + 1))
    return anchors + VALUES_HEAD + f"      x: *a{links}\n"


HOSTILE_VALUES = [
    pytest.param(
        values_with('{"x": ' + "[" * DEEP + "]" * DEEP + "}"), [TOO_DEEP], id="deep flow block"
    ),
    pytest.param(values_with('{"x": ' + "[" * DEEP), [TOO_DEEP], id="deep flow block, unclosed"),
    pytest.param(
        GUIDE_VALUES_YAML.replace("slice-scheduler", "{x: " + "[" * DEEP + "]" * DEEP + "}"),
        [TOO_DEEP],
        id="deep under slice.annotations of the walkthrough's values",
    ),
    pytest.param(nested_keys(DEEP // 50), [TOO_DEEP], id="2000 nested keys in block style"),
    pytest.param(
        values_with("{x: " + "[" * 99 + "]" * 99 + "}"),
        ['unknown field "x"'],
        id="100 levels are allowed",
    ),
    pytest.param(
        values_with("{x: " + "[" * 100 + "]" * 100 + "}"), [TOO_DEEP], id="101 levels are too deep"
    ),
    pytest.param(nested_keys(100), ['unknown field "k"'], id="100 nested keys are allowed"),
    pytest.param(nested_keys(101), [TOO_DEEP], id="101 nested keys are too deep"),
    pytest.param(alias_chain(98), ['unknown field "x"'], id="100 levels through aliases"),
    pytest.param(alias_chain(1000), [TOO_DEEP], id="1001 levels through aliases"),
    pytest.param(
        # Not read as a values file, as a YAML syntax error is not: the text is checked as is.
        "other: " + "[" * DEEP + "\n" + GUIDE_VALUES_YAML,
        ["expected a JSON object"],
        id="deep outside the block",
    ),
    pytest.param(
        GUIDE_VALUES_YAML.replace("chipsPerHost: 4", "chipsPerHost: " + BIG_DIGITS),
        wrong_chips_per_host("a number"),
        id="10**5000 in digits",
    ),
    pytest.param(
        GUIDE_VALUES_YAML.replace("chipsPerHost: 4", "chipsPerHost: -1_" + BIG_DIGITS[1:]),
        wrong_chips_per_host("a number"),
        id="-10**5000 with an underscore",
    ),
    pytest.param(
        GUIDE_VALUES_YAML.replace("readyTimeout: 10m", "readyTimeout: 2024-13-45"),
        ['slice.readyTimeout: "2024-13-45" must be a positive duration'],
        id="a date that is no date is a string",
    ),
    pytest.param(
        GUIDE_VALUES_YAML.replace("readyTimeout: 10m", "readyTimeout: .inf"),
        ["malformed JSON object: Infinity is not a JSON value"],
        id=".inf",
    ),
    pytest.param(
        GUIDE_VALUES_YAML.replace("[ACTIVE, ACTIVE_DEGRADED]", "!!set {ACTIVE}"),
        ["malformed JSON object: slice.readyStates: expected an array, got an object"],
        id="a set is a mapping",
    ),
    pytest.param(
        GUIDE_VALUES_YAML.replace("google.com/tpu", "!!binary Z29vZ2xlLmNvbS90cHU="),
        [],
        id="binary is its text",
    ),
    pytest.param("\ufeff" + GUIDE_VALUES_YAML, [], id="a byte order mark"),
    pytest.param(VALUES_HEAD, None, id="an empty block"),
]


@pytest.mark.parametrize(("text", "errors"), HOSTILE_VALUES)
def test_hostile_values_file_gets_one_clear_verdict_from_check_config(
    tmp_path: Path, text: str, errors: list[str] | None
) -> None:
    expected = expected_check(errors, text)
    assert timed(run_check, ["-"], text) == expected
    path = tmp_path / "values.yaml"
    path.write_bytes(text.encode())
    assert timed(run_check, [str(path)]) == expected


def test_check_config_file_that_is_not_utf8_is_a_usage_error(tmp_path: Path) -> None:
    random_bytes = random.Random(20240601).randbytes(4096)
    bad_byte = GUIDE_CONFIG_JSON.encode().replace(b"google.com/tpu", b"google.com/tpu\xff")
    for name, data in (
        ("random", random_bytes),
        ("bad-byte", bad_byte),
        ("png", PNG.encode("latin-1")),
    ):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(UnicodeDecodeError) as e:
            data.decode()
        assert timed(run_check, [str(path)]) == (
            2,
            "",
            f"ome-manager check-config: error: cannot read {path}: {e.value}\n",
        )


def test_check_config_standard_input_that_is_not_utf8_is_a_usage_error() -> None:
    # Python reads undecodable standard input as lone surrogates (errors="surrogateescape")
    # when the locale is C or POSIX; as a file, those bytes would be a usage error.
    text = GUIDE_CONFIG_JSON.encode().replace(b"google.com/tpu", b"google.com/tpu\xff")
    stdin = text.decode(errors="surrogateescape")
    with pytest.raises(UnicodeDecodeError) as e:
        text.decode()
    assert run_check(["-"], stdin) == (
        2,
        "",
        f"ome-manager check-config: error: cannot read standard input: {e.value}\n",
    )


def test_check_config_prints_a_lone_surrogate_escape_as_written() -> None:
    # JSON can escape half a surrogate pair, which no UTF-8 output can print as it is.
    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(err_bytes, encoding="utf-8", write_through=True)
    code = checkconfig.main(["-"], stdin=io.StringIO('{"\\ud800": 1}'), stdout=out, stderr=err)
    assert (code, out_bytes.getvalue(), err_bytes.getvalue()) == (
        1,
        b'invalid tpuSliceProvisioning config:\nunknown field "\\ud800"\n',
        b"",
    )


@pytest.mark.parametrize(
    ("stdin", "code", "first_line"),
    [
        (b"[" * DEEP, 1, "invalid tpuSliceProvisioning config:"),
        (b'{"a":' * DEEP, 1, "invalid tpuSliceProvisioning config:"),
        (b"\xff\xfe{}", 2, "ome-manager check-config: error: cannot read standard input: "),
        (b'{"\\udcff": 1}', 1, "invalid tpuSliceProvisioning config:"),
    ],
    ids=["deep arrays", "deep objects", "not UTF-8", "a lone surrogate escape"],
)
def test_check_config_process_never_shows_a_traceback(
    stdin: bytes, code: int, first_line: str
) -> None:
    script = "import sys; from ome.entrypoints.checkconfig import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", script, "-"], input=stdin, capture_output=True, timeout=60
    )
    output = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode == code, output
    assert output.startswith(first_line), output
    assert "Traceback" not in output
    assert len(output.splitlines()) == (1 if code == 2 else 2), output


@pytest.mark.parametrize("sign", [1, -1])
def test_validate_refuses_an_integer_too_long_to_print(sign: int) -> None:
    huge = sign * 10**5000
    assert validate(mutated({f"{ACC}.chipsPerHost": huge})) == [
        f"{ACC}.chipsPerHost: expected an integer, got a number"
    ]
    assert validate(mutated({"chipResource": huge})) == [
        "chipResource: expected a string, got a number"
    ]
    longest = sign * (10**4300 - 1)  # 4300 digits: still an integer, checked as one
    digits = "9" * 4300
    assert validate(mutated({f"{ACC}.chipsPerHost": longest})) == (
        [f"{ACC}.chipsPerHost: must be positive, got -{digits}"]
        if sign < 0
        else [
            f"{ACC}.topologies[{i}]: topology {topology} is {chips} chips, not a whole number "
            f"of {digits}-chip hosts"
            for i, (topology, chips) in enumerate((("2x2x1", 4), ("2x2x2", 8)))
        ]
    )


LAUGHS = 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 10)
)
MERGE_CHAIN = "m0: &m0 {k0: 1}\n" + "".join(
    f"m{i}: &m{i} {{<<: *m{i - 1}, k{i}: 1}}\n" for i in range(1, 3000)
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            LAUGHS + VALUES_HEAD + "      x: *a9\n",
            (
                2,
                "",
                "ome-manager check-config: error: cannot read standard input: "
                "document contains excessive aliasing\n",
            ),
            id="a billion laughs in the block",
        ),
        pytest.param(
            MERGE_CHAIN + VALUES_HEAD + "      x: *m2999\n",
            (
                2,
                "",
                "ome-manager check-config: error: cannot read standard input: "
                "document contains excessive aliasing\n",
            ),
            id="a chain of 3000 merges",
        ),
        pytest.param(LAUGHS + GUIDE_VALUES_YAML, (0, "ok\n", ""), id="laughs beside the block"),
        pytest.param(
            "t: &t [2x2x1, 2x2x2]\nsettings: &s {chipResource: google.com/tpu}\n"
            + GUIDE_VALUES_YAML.replace('["2x2x1", "2x2x2"]', "*t").replace(
                "      chipResource: google.com/tpu\n", "      <<: *s\n"
            ),
            (0, "ok\n", ""),
            id="an alias and a merge key, as meant",
        ),
    ],
)
def test_check_config_refuses_a_values_file_whose_aliases_multiply_it(
    text: str, expected: tuple[int, str, str]
) -> None:
    assert timed(run_check, ["-"], text) == expected

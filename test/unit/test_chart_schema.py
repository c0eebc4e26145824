"""The chart's values.schema.json: generated, current, in step with values.yaml and with the
manager's parser, and what Helm refuses with it (the real helm of hack/helm.sh, as
test_chart.py runs it).

The refusals are the issue's acceptance: ``--set replicas=abc``, an unknown top-level key and
a ``tpuSliceProvisioning`` block without ``chipResource`` each fail ``helm template`` and
``helm install --dry-run=client`` with Helm's error naming the field.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from ome.entrypoints import chartschema
from ome.tpuslice import config
from ome.tpuslice.types import GUIDE_CONFIG_JSON
from test.unit.test_chart import CHART, RELEASE, ROOT, SAMPLE_VALUES, configmap, helm, render

SCHEMA_FILE = CHART / "values.schema.json"
GUIDE_BLOCK: dict[str, Any] = json.loads(GUIDE_CONFIG_JSON)

JSON = dict[str, Any]


def schema() -> JSON:
    loaded: JSON = json.loads(SCHEMA_FILE.read_text())
    return loaded


# -- the file --------------------------------------------------------------------------------


def test_the_file_is_what_the_generator_writes() -> None:
    assert SCHEMA_FILE.read_text() == chartschema.render(), (
        "charts/ome-resources/values.schema.json is stale: python -m ome.entrypoints.chartschema"
    )


def test_check_fails_on_a_stale_file_and_passes_on_a_current_one(tmp_path: Path) -> None:
    target = tmp_path / "values.schema.json"
    target.write_text(chartschema.render().replace('"minimum": 0', '"minimum": 5'))
    command = [sys.executable, "-m", "ome.entrypoints.chartschema"]
    stale = subprocess.run(
        [*command, "--check", str(target)], capture_output=True, text=True, check=False
    )
    assert stale.returncode == 1
    assert stale.stderr == f"stale: {target}; {chartschema.REGENERATE}\n"
    wrote = subprocess.run([*command, str(target)], capture_output=True, text=True, check=False)
    assert (wrote.returncode, wrote.stdout) == (0, f"wrote {target}\n")
    current = subprocess.run(
        [*command, "--check", str(target)], capture_output=True, text=True, check=False
    )
    assert (current.returncode, current.stderr) == (0, "")
    missing = subprocess.run(
        [*command, "--check", str(tmp_path / "nosuch.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 1
    assert missing.stderr.startswith(f"cannot read {tmp_path / 'nosuch.json'}: ")
    assert "Traceback" not in missing.stderr


def test_it_is_a_draft_07_schema_that_the_default_and_guide_values_meet() -> None:
    jsonschema.Draft7Validator.check_schema(schema())
    assert schema()["$schema"] == "http://json-schema.org/draft-07/schema#"
    validator = jsonschema.Draft7Validator(schema())
    for values in (CHART / "values.yaml", SAMPLE_VALUES):
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(values.read_text()))]
        assert errors == [], values


def _chart_owned(node: JSON, path: str = "") -> Iterator[tuple[str, JSON]]:
    """Every object of the schema that refuses unknown keys, with its dotted path."""
    if node.get("additionalProperties") is False:
        yield path, node
        for key, child in node.get("properties", {}).items():
            if key != "tpuSliceProvisioning":
                yield from _chart_owned(child, f"{path}.{key}" if path else key)


def test_the_schema_knows_exactly_the_keys_of_values_yaml() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    checked = []
    for path, node in _chart_owned(schema()):
        here = values
        for part in path.split(".") if path else ():
            here = here[part]
        if not here:  # {} by default: its keys are the schema's to say
            continue
        known = set(node["properties"]) - {"global"}
        assert set(here) == known, f"{path or 'the top level'}: values.yaml {sorted(here)}"
        checked.append(path)
    assert {
        "",
        "image",
        "serviceAccount",
        "webhook",
        "webhook.certManager",
        "metrics",
        "metrics.serviceMonitor",
    } <= set(checked)


def test_the_log_choices_are_the_managers() -> None:
    properties = schema()["properties"]
    assert properties["logLevel"]["enum"] == ["", "debug", "info", "warning", "error"]
    assert properties["logFormat"]["enum"] == ["", "auto", "json", "text"]


# -- the tpuSliceProvisioning block: the parser's schema --------------------------------------


def block_schema() -> JSON:
    node = schema()["properties"]["ome"]["properties"]["controller"]["properties"]
    then: JSON = node["tpuSliceProvisioning"]["then"]
    return then


def test_the_block_schema_is_the_parsers() -> None:
    derived = config.json_schema()
    assert derived.pop("$schema") == "http://json-schema.org/draft-07/schema#"
    assert block_schema() == derived


def _paths(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*path, key), child
            yield from _paths(child, (*path, key))


def _wrong(value: Any) -> Any:
    """A value of another JSON type than ``value``'s."""
    return 7 if isinstance(value, str | list | dict) else "seven"


def _mutations() -> Iterator[tuple[str, dict[str, Any]]]:
    """The walkthrough's block with each field (and map entry) removed, null, empty, of the wrong
    type, and each object given an unknown field."""
    for path, value in _paths(GUIDE_BLOCK):
        empty = {str: "", int: 0, list: [], dict: {}}[type(value)]
        for how, new in (("removed", None), ("null", None), ("empty", empty), ("wrong", 7)):
            block = copy.deepcopy(GUIDE_BLOCK)
            parent = block
            for key in path[:-1]:
                parent = parent[key]
            if how == "removed":
                del parent[path[-1]]
            else:
                parent[path[-1]] = _wrong(value) if how == "wrong" else new
            yield f"{'.'.join(path)} {how}", block
        if isinstance(value, dict):
            block = copy.deepcopy(GUIDE_BLOCK)
            target = block
            for key in path:
                target = target[key]
            target["unknownField"] = "x"
            yield f"{'.'.join(path)} unknown field", block
    yield "unknown top-level field", {**GUIDE_BLOCK, "chipResources": "google.com/tpu"}


def _parser_accepts(block: dict[str, Any]) -> bool:
    try:
        config.parse_config(json.dumps(block))
    except config.ConfigError:
        return False
    return True


def test_the_schema_and_the_parser_agree_on_every_structural_change() -> None:
    """Field by field, the schema accepts a block exactly when the manager's parser does (for
    the changes a schema can judge: presence, null, empty, type, unknown fields)."""
    validator = jsonschema.Draft7Validator(block_schema())
    assert validator.is_valid(GUIDE_BLOCK) and _parser_accepts(GUIDE_BLOCK)
    disagreements = []
    cases = list(_mutations())
    for name, block in cases:
        if validator.is_valid(block) != _parser_accepts(block):
            disagreements.append(f"{name}: schema {validator.is_valid(block)}")
    assert disagreements == []
    assert len(cases) > 60
    # both sides of the line occur: some changes are accepted, most refused
    verdicts = {_parser_accepts(block) for _, block in cases}
    assert verdicts == {True, False}


# -- what Helm refuses ------------------------------------------------------------------------


def _guide_block_without(field: str) -> str:
    block = {k: v for k, v in GUIDE_BLOCK.items() if k != field}
    return f"ome.controller.tpuSliceProvisioning={json.dumps(block)}"


REFUSED = [
    pytest.param(("--set", "replicas=abc"), "at '/replicas': got string, want integer", id="abc"),
    pytest.param(
        ("--set", "replica=3"), "at '': additional properties 'replica' not allowed", id="replica"
    ),
    pytest.param(
        ("--set-json", _guide_block_without("chipResource")),
        "at '/ome/controller/tpuSliceProvisioning': missing property 'chipResource'",
        id="no-chipResource",
    ),
    pytest.param(
        ("--set", "image.tga=x"), "at '/image': additional properties 'tga' not allowed", id="typo"
    ),
    pytest.param(
        ("--set", "logLevel=verbose"), "at '/logLevel': value must be one of", id="log-level"
    ),
    pytest.param(
        ("--set-json", 'ome.controller.tpuSliceProvisioning={"chipResource": 5}'),
        "at '/ome/controller/tpuSliceProvisioning/chipResource': got number, want string",
        id="block-type",
    ),
    pytest.param(
        ("--set", "metrics.port=70000"),
        "at '/metrics/port': maximum: got 70,000, want 65,535",
        id="metrics-port",
    ),
    pytest.param(
        ("--set", "metrics.secure=no"),
        "at '/metrics/secure': got string, want boolean",
        id="metrics-secure",
    ),
    pytest.param(
        ("--set", "metrics.serviceMonitor.interval=30sec"),
        "at '/metrics/serviceMonitor/interval': '30sec' does not match pattern",
        id="monitor-interval",
    ),
]


@pytest.mark.parametrize(("args", "error"), REFUSED)
@pytest.mark.parametrize("command", ["template", "install"])
def test_helm_refuses_a_bad_value_naming_the_field(
    command: str, args: tuple[str, ...], error: str
) -> None:
    extra = ("--dry-run=client",) if command == "install" else ()
    proc = helm(command, RELEASE, str(CHART), "--namespace", "ome", *extra, *args, check=False)
    assert proc.returncode != 0, proc.stdout
    assert "values don't meet the specifications of the schema" in proc.stderr
    assert error in proc.stderr, proc.stderr
    assert proc.stdout == "" or "kind:" not in proc.stdout


def test_helm_lint_refuses_a_values_file_with_an_unknown_key(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("replicas: 2\nnodeSelecter: {pool: system}\n")
    proc = helm("lint", "--strict", str(CHART), "-f", str(values), check=False)
    assert proc.returncode != 0
    assert "additional properties 'nodeSelecter' not allowed" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("--set-json", "ome.controller.tpuSliceProvisioning={}"),
        ("--set-json", 'ome.controller.tpuSliceProvisioning=""'),
        ("--set-json", "ome.controller.tpuSliceProvisioning=null"),
        ("--set-json", 'ome.controller.tpuSliceProvisioning="{\\"chipResource\\": 1}"'),
        ("--set", "replicas=0"),
        ("--set-json", "webhook=null"),
        ("--set-json", 'global={"imageRegistry": "example.com"}'),
    ],
    ids=["defaults", "empty-map", "empty-string", "null", "string", "zero", "null-map", "global"],
)
def test_helm_accepts_what_the_chart_takes(args: tuple[str, ...]) -> None:
    """Provisioning off in any of its spellings, a string block (the manager checks it at
    start), and a parent chart's globals pass the schema."""
    assert render(*args)


def test_the_guides_block_passes_and_reaches_the_configmap() -> None:
    cm = configmap(render(values=SAMPLE_VALUES))
    assert json.loads(cm["data"]["tpuSliceProvisioning"]) == GUIDE_BLOCK


def test_the_generator_has_help() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ome.entrypoints.chartschema", "--help"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0
    assert "--check" in proc.stdout

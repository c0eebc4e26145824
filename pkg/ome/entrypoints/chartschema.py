"""Builds the ome-resources chart's ``values.schema.json`` and writes or checks it.

Helm validates every install, upgrade, ``template`` and ``lint`` against that file, so a wrong
type (``--set replicas=abc``), an unknown top-level key (``--set replica=3``) or a
``tpuSliceProvisioning`` block the manager would refuse to start with is refused before
anything reaches the cluster, with Helm's error naming the field. The block's schema is
``ome.tpuslice.config.json_schema()``, derived from the parser the manager runs, and the log
flags' choices are ``ome-manager``'s own (its argument parser), so neither can drift; the
rest, the chart's own values, is written out here next to ``values.yaml``
(test/unit/test_chart_schema.py fails when the two disagree).

Usage: ``python -m ome.entrypoints.chartschema [--check] [FILE]`` (FILE defaults to
``charts/ome-resources/values.schema.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ome.entrypoints.manager import build_parser
from ome.tpuslice.config import JSON_SCHEMA_DRAFT, json_schema

DEFAULT_FILE = "charts/ome-resources/values.schema.json"
REGENERATE = "regenerate it with: python -m ome.entrypoints.chartschema"

JSON = dict[str, Any]


def _choices(flag: str) -> list[str]:
    """The choices ``ome-manager`` accepts for ``flag``."""
    for action in build_parser()._actions:
        if flag in action.option_strings and action.choices is not None:
            return [str(choice) for choice in action.choices]
    raise LookupError(f"ome-manager has no flag {flag} with choices")


def _object(properties: JSON, nullable: bool = False) -> JSON:
    """A chart-owned object: only these keys (a typo is an error, not a silent no-op); a
    nullable one may be set to null (no webhook settings, no controller settings)."""
    return {
        "type": ["object", "null"] if nullable else "object",
        "properties": properties,
        "additionalProperties": False,
    }


#: A Kubernetes object the chart passes through as it is (affinity, a securityContext): the
#: API server validates its fields; null removes the default (Helm's rule for maps).
_KUBE_OBJECT: JSON = {"type": ["object", "null"]}
_KUBE_LIST: JSON = {"type": ["array", "null"], "items": {"type": "object"}}
_STRING_MAP: JSON = {"type": ["object", "null"], "additionalProperties": {"type": "string"}}
#: A Prometheus duration (30m, 1h30m); the optional one may be empty (Prometheus' default).
_DURATION: JSON = {"type": "string", "pattern": "^([0-9]+(ms|s|m|h|d|w|y))+$"}
_OPTIONAL_DURATION: JSON = {"type": "string", "pattern": "^(([0-9]+(ms|s|m|h|d|w|y))+)?$"}


def _named_list(what: str) -> JSON:
    """A list of Kubernetes objects that each need a ``name`` (EnvVar, LocalObjectReference)."""
    return {
        "type": ["array", "null"],
        "items": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "minLength": 1, "description": what}},
        },
    }


def _log_flag(flag: str) -> JSON:
    return {"type": "string", "enum": ["", *_choices(flag)]}


def tpu_slice_provisioning() -> JSON:
    """``ome.controller.tpuSliceProvisioning``: unset, ``{}`` or ``""`` (provisioning off), a
    string (the block's JSON text, which the manager checks at start), or the block itself,
    which must then be one the manager's parser reads."""
    block = {key: value for key, value in json_schema().items() if key != "$schema"}
    return {
        "type": ["object", "string", "null"],
        "if": {"type": "object", "minProperties": 1},
        "then": block,
    }


def schema() -> JSON:
    """The chart's values.schema.json."""
    return {
        "$schema": JSON_SCHEMA_DRAFT,
        "title": "Values of the ome-resources chart",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            # A parent chart's global values, which Helm hands every subchart.
            "global": {"type": "object"},
            "image": _object(
                {
                    "repository": {"type": "string", "minLength": 1},
                    "tag": {"type": "string"},
                    "pullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]},
                }
            ),
            "replicas": {"type": "integer", "minimum": 0},
            "resources": {
                "type": ["object", "null"],
                "properties": {"requests": _KUBE_OBJECT, "limits": _KUBE_OBJECT},
                "additionalProperties": False,
            },
            "nodeSelector": _STRING_MAP,
            "tolerations": _KUBE_LIST,
            "podAnnotations": {
                "type": ["object", "null"],
                "additionalProperties": {"type": ["string", "number", "boolean"]},
            },
            "imagePullSecrets": _named_list("a Secret of the release's namespace"),
            "serviceAccount": _object(
                {
                    "create": {"type": "boolean"},
                    "name": {"type": "string"},
                    "annotations": _STRING_MAP,
                }
            ),
            "logLevel": _log_flag("--log-level"),
            "logFormat": _log_flag("--log-format"),
            "extraArgs": {"type": ["array", "null"], "items": {"type": "string"}},
            "env": _named_list("the variable's name"),
            "priorityClassName": {"type": ["string", "null"]},
            "affinity": _KUBE_OBJECT,
            "topologySpreadConstraints": _KUBE_LIST,
            "podSecurityContext": _KUBE_OBJECT,
            "securityContext": _KUBE_OBJECT,
            "webhook": _object(
                {
                    "certManager": _object(
                        {
                            "enabled": {"type": "boolean"},
                            "issuerRef": _object(
                                {
                                    "name": {"type": "string"},
                                    "kind": {"type": "string"},
                                    "group": {"type": "string"},
                                },
                                nullable=True,
                            ),
                        },
                        nullable=True,
                    )
                },
                nullable=True,
            ),
            "metrics": _object(
                {
                    "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                    "secure": {"type": "boolean"},
                    "serviceMonitor": _object(
                        {
                            "enabled": {"type": "boolean"},
                            "labels": _STRING_MAP,
                            "interval": _OPTIONAL_DURATION,
                            "scrapeTimeout": _OPTIONAL_DURATION,
                        }
                    ),
                    "prometheusRule": _object(
                        {
                            "enabled": {"type": "boolean"},
                            "labels": _STRING_MAP,
                            "capacityWaitSeconds": {"type": "integer", "minimum": 1},
                            "releaseDeferredFor": _DURATION,
                        }
                    ),
                    "dashboard": _object(
                        {
                            "enabled": {"type": "boolean"},
                            "label": {"type": "string", "minLength": 1},
                            "labelValue": {"type": "string"},
                            "annotations": _STRING_MAP,
                        }
                    ),
                }
            ),
            "ome": _object(
                {
                    "controller": _object(
                        {"tpuSliceProvisioning": tpu_slice_provisioning()}, nullable=True
                    )
                },
                nullable=True,
            ),
        },
    }


def render() -> str:
    """The schema as the file holds it: JSON, indented by 2, keys in the order built."""
    return json.dumps(schema(), indent=2) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ome.entrypoints.chartschema",
        description="Generate the ome-resources chart's values.schema.json.",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when FILE differs from what would be generated",
    )
    parser.add_argument(
        "file", nargs="?", default=DEFAULT_FILE, metavar="FILE", help=f"default: {DEFAULT_FILE}"
    )
    args = parser.parse_args(argv)
    target = Path(args.file)
    text = render()
    if args.check:
        try:
            current = target.read_text()
        except OSError as e:
            print(f"cannot read {target}: {e.strerror}; {REGENERATE}", file=sys.stderr)
            return 1
        if current != text:
            print(f"stale: {target}; {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    if not target.is_file() or target.read_text() != text:
        target.write_text(text)
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

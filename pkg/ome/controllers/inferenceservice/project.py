"""From an InferenceService and its runtime to InferenceReplica specs, as pure functions:
validate the component, merge the runtime's ``engineConfig`` under the component's own
values (the component wins), and build each runner's pod template. No I/O.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

COMPONENTS = ("engine", "decoder", "router")
DEFAULT_CONTAINER = "ome-container"


class SpecError(ValueError):
    """A component that cannot be deployed; ``str()`` is the condition message."""


def deep_merge(base: Any, override: Any) -> Any:
    """Maps merge key by key, the override winning; anything else the override replaces."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = copy.deepcopy(base)
        for key, value in override.items():
            out[key] = deep_merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(override)


def merge_component(engine_config: JSON | None, component: JSON) -> JSON:
    """The runtime's engineConfig under the component's values. Lists (tolerations,
    container args) are replaced whole by the component's, as Kubernetes merges specs."""
    merged: JSON = deep_merge(engine_config or {}, component)
    return merged


def validate_component(name: str, comp: JSON) -> None:
    def integer(path: str, value: Any, minimum: int) -> None:
        if value is None:
            return
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise SpecError(
                f"component {name}: {path} must be a whole number >= {minimum}, not {value!r}"
            )

    integer("minReplicas", comp.get("minReplicas"), 0)
    integer("maxReplicas", comp.get("maxReplicas"), 0)
    lo, hi = comp.get("minReplicas"), comp.get("maxReplicas")
    if isinstance(lo, int) and isinstance(hi, int) and hi and hi < lo:
        raise SpecError(f"component {name}: maxReplicas {hi} is less than minReplicas {lo}")
    worker = comp.get("worker")
    if worker is not None:
        integer("worker.size", worker.get("size"), 0)
    if not comp.get("runner") and not (comp.get("leader") or {}).get("runner"):
        raise SpecError(
            f"component {name}: no runner: set {name}.runner (or the runtime's engineConfig.runner)"
        )
    for part, runner in (
        ("runner", comp.get("runner")),
        ("leader.runner", (comp.get("leader") or {}).get("runner")),
        ("worker.runner", (comp.get("worker") or {}).get("runner")),
    ):
        if runner is not None and not (runner.get("image")):
            raise SpecError(
                f"component {name}: {part} has no image (set it here or in the runtime)"
            )


def _container(runner: JSON) -> JSON:
    container = copy.deepcopy(runner)
    container.setdefault("name", DEFAULT_CONTAINER)
    return container


def _template(comp: JSON, part: JSON | None, runner: JSON) -> JSON:
    """A runner's pod template: the component's labels, annotations, nodeSelector and
    tolerations, refined by the leader's or worker's own."""
    part = part or {}
    node_selector = {**(comp.get("nodeSelector") or {}), **(part.get("nodeSelector") or {})}
    tolerations = (
        part.get("tolerations") if part.get("tolerations") is not None else comp.get("tolerations")
    )
    spec: JSON = {"containers": [_container(runner)]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = copy.deepcopy(tolerations)
    metadata: JSON = {}
    if comp.get("labels"):
        metadata["labels"] = dict(comp["labels"])
    if comp.get("annotations"):
        metadata["annotations"] = dict(comp["annotations"])
    return {"metadata": metadata, "spec": spec}


@dataclass(frozen=True)
class ReplicaSpec:
    name: str
    spec: JSON
    labels: dict[str, str]


def replica_spec(isvc: JSON, component: str, merged: JSON) -> ReplicaSpec:
    """The InferenceReplica ``<isvc>-<component>`` for a validated, merged component."""
    validate_component(component, merged)
    runners: list[JSON] = []
    leader, worker = merged.get("leader"), merged.get("worker")
    if leader is not None or worker is not None:
        lead_runner = deep_merge(merged.get("runner") or {}, (leader or {}).get("runner") or {})
        runners.append(
            {"name": "leader", "size": 1, "template": _template(merged, leader, lead_runner)}
        )
        work_runner = deep_merge(merged.get("runner") or {}, (worker or {}).get("runner") or {})
        runners.append(
            {
                "name": "worker",
                "size": int((worker or {}).get("size") or 0),
                "template": _template(merged, worker, work_runner),
            }
        )
    else:
        runners.append(
            {"name": "default", "size": 1, "template": _template(merged, None, merged["runner"])}
        )
    replicas = merged.get("minReplicas")
    spec: JSON = {
        "component": component,
        "replicas": 1 if replicas is None else int(replicas),
        "runners": runners,
    }
    lifecycle = merged.get("lifecycle")
    if isinstance(lifecycle, dict):
        spec["lifecycle"] = copy.deepcopy(lifecycle)
    name = f"{isvc['metadata']['name']}-{component}"
    labels = {"ome.io/inferenceservice": isvc["metadata"]["name"], "component": component}
    return ReplicaSpec(name, spec, labels)

"""From an InferenceService and its runtime to InferenceReplica specs, as pure functions:
validate the component, merge the runtime's ``engineConfig`` under the component's own
values (the component wins), and build each runner's pod template and the replica's
``lifecycle``. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ome.api.v1beta1 import MAX_WORKERS
from ome.kube import JSON, json_copy

COMPONENTS = ("engine", "decoder", "router")
DEFAULT_CONTAINER = "ome-container"


class SpecError(ValueError):
    """A component that cannot be deployed; ``str()`` is the condition message."""


def deep_merge(base: Any, override: Any) -> Any:
    """Maps merge key by key, the override winning; anything else the override replaces."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = json_copy(base)
        for key, value in override.items():
            out[key] = deep_merge(base[key], value) if key in base else json_copy(value)
        return out
    return json_copy(override)


def merge_component(engine_config: JSON | None, component: JSON) -> JSON:
    """The runtime's engineConfig under the component's values. Lists (tolerations,
    container args) are replaced whole by the component's, as Kubernetes merges specs. Maps
    merge key by key, so ``lifecycle`` takes each deadline (``instanceReadyTimeout``,
    ``teardownTimeout``) from the component if it sets it, else from the runtime."""
    merged: JSON = deep_merge(engine_config or {}, component)
    return merged


_OBJECTS = ("runner", "leader", "worker", "labels", "annotations", "nodeSelector")


def validate_component(name: str, comp: JSON) -> None:
    """Raise ``SpecError`` for a component that cannot be deployed; the checks look at the
    runners as ``replica_spec`` builds them (the runner merged under leader and worker)."""
    if not isinstance(comp, dict):
        raise SpecError(f"component {name}: must be an object, not {type(comp).__name__}")
    for key in _OBJECTS:
        if comp.get(key) is not None and not isinstance(comp[key], dict):
            raise SpecError(f"component {name}: {key} must be an object")
    for part in ("leader", "worker"):
        runner = (comp.get(part) or {}).get("runner")
        if runner is not None and not isinstance(runner, dict):
            raise SpecError(f"component {name}: {part}.runner must be an object")
        # ``_template`` refines the component's nodeSelector and tolerations with these.
        selector = (comp.get(part) or {}).get("nodeSelector")
        if selector is not None and not isinstance(selector, dict):
            raise SpecError(f"component {name}: {part}.nodeSelector must be an object")
        tolerations = (comp.get(part) or {}).get("tolerations")
        if tolerations is not None and not isinstance(tolerations, list):
            raise SpecError(f"component {name}: {part}.tolerations must be a list")
    if comp.get("tolerations") is not None and not isinstance(comp["tolerations"], list):
        raise SpecError(f"component {name}: tolerations must be a list")

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
        size = worker.get("size")
        if isinstance(size, int) and size > MAX_WORKERS:
            raise SpecError(f"component {name}: worker.size {size} is more than {MAX_WORKERS}")
    if not any(
        (comp.get(part) or {}).get("runner") for part in ("leader", "worker")
    ) and not comp.get("runner"):
        raise SpecError(
            f"component {name}: no runner: set {name}.runner (or the runtime's engineConfig.runner)"
        )
    worker = comp.get("worker") or {}
    size = worker.get("size")
    for part, runner in _effective_runners(comp):
        own = (comp.get(part.split(".")[0]) or {}).get("runner")
        if part == "worker.runner" and not own and not (isinstance(size, int) and size > 0):
            continue  # no worker pods and no worker container: a leader alone
        if not runner.get("image"):
            # Name what the user wrote: the component's runner when the part has none.
            where = "runner" if not own and comp.get("runner") else part
            raise SpecError(
                f"component {name}: {where} has no image (set it here or in the runtime)"
            )


def _effective_runners(comp: JSON) -> list[tuple[str, JSON]]:
    """Each runner's container as built: ``runner`` alone, or merged under leader's and
    worker's own ``runner`` for a multi-host component."""
    if comp.get("leader") is None and comp.get("worker") is None:
        return [("runner", comp.get("runner") or {})]
    base = comp.get("runner") or {}
    return [
        (f"{part}.runner", deep_merge(base, (comp.get(part) or {}).get("runner") or {}))
        for part in ("leader", "worker")
    ]


def _container(runner: JSON) -> JSON:
    container = json_copy(runner)
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
        spec["tolerations"] = json_copy(tolerations)
    metadata: JSON = {}
    if comp.get("labels"):
        metadata["labels"] = dict(comp["labels"])
    if comp.get("annotations"):
        metadata["annotations"] = dict(comp["annotations"])
    return {"metadata": metadata, "spec": spec}


def _lifecycle(merged: JSON) -> JSON | None:
    """The replica's ``spec.lifecycle``: the merged component's ``lifecycle`` map (the
    component's fields over the runtime's, see ``merge_component``), copied as it is; ``None``
    (no ``lifecycle`` on the replica, so the controller keeps one an operator set there) when
    neither sets a map.

    The durations are passed through unparsed: an unreadable one (``"soon"``, ``"10"``) never
    refuses the component nor crashes the projection. The InferenceReplica's controller
    treats it as unset: no ready deadline (``instances.plan``) and the default teardown
    deadline (``InferenceReplicaReconciler._teardown``), never a reason to stall. A field the
    component sets, even unreadable, still wins over the runtime's."""
    lifecycle = merged.get("lifecycle")
    return json_copy(lifecycle) if isinstance(lifecycle, dict) else None


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
    effective = dict(_effective_runners(merged))
    if leader is not None or worker is not None:
        runners.append(
            {
                "name": "leader",
                "size": 1,
                "template": _template(merged, leader, effective["leader.runner"]),
            }
        )
        runners.append(
            {
                "name": "worker",
                "size": int((worker or {}).get("size") or 0),
                "template": _template(merged, worker, effective["worker.runner"]),
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
    lifecycle = _lifecycle(merged)
    if lifecycle is not None:
        spec["lifecycle"] = lifecycle
    name = f"{isvc['metadata']['name']}-{component}"
    labels = {"ome.io/inferenceservice": isvc["metadata"]["name"], "component": component}
    return ReplicaSpec(name, spec, labels)

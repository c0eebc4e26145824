"""The InferenceReplica admission decision (J2), as a pure function.

The webhook refuses only a write that *introduces* pods that cannot fill a provisionable
Slice. It reuses the controller's demand validation (``placement.demand``), never a copy, so the
webhook's reason and the controller's ``SliceDemandInvalid`` reason are the same text.

Reading the nodes is the caller's: ``decide`` asks for them through ``read_nodes`` only when
the early checks did not already admit, so a scale-only update reads none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ome.kube import JSON

from . import placement
from .types import Config

#: J2: what is logged when the nodes cannot be read and the write is admitted unchecked.
UNCHECKED_LOG = "Admitting InferenceReplica without checking its TPU slice demand"

#: Which of the given accelerator label values have provision-only nodes (B6.3), or None
#: when the read failed. It is asked only about the values the pods select, so that a live
#: read can be narrowed to them.
NodeRead = Callable[[frozenset[str]], set[str] | None]


def provision_only_accelerators(nodes: list[JSON], config: Config) -> set[str]:
    """What ``read_nodes`` returns, from a node list (B6.3)."""
    return {a for n in nodes if (a := placement.provision_only_accelerator(n, config)) is not None}


@dataclass(frozen=True)
class Decision:
    """Admit or deny; ``why`` names the rule that decided (for logs and tests), ``message``
    is the denial text, and ``log`` a line the caller must log (J2's unchecked admit)."""

    allowed: bool
    why: str
    message: str = ""
    log: str = ""


def _runners(obj: JSON | None) -> list[JSON]:
    spec = (obj or {}).get("spec")
    runners = spec.get("runners") if isinstance(spec, dict) else None
    return [r for r in runners if isinstance(r, dict)] if isinstance(runners, list) else []


def selected_accelerators(runners: list[JSON], config: Config) -> set[str]:
    """The accelerator label values the pods of an Instance of these runners select."""
    out = set()
    for spec in placement.instance_pod_specs(runners):
        selector = spec.get("nodeSelector")
        value = selector.get(config.accelerator_label) if isinstance(selector, dict) else None
        if isinstance(value, str):
            out.add(value)
    return out


def _error(runners: list[JSON], config: Config, provision_only: set[str] | None) -> str | None:
    """The demand error of an Instance of these runners, or None when it is valid."""
    try:
        placement.demand(placement.instance_pod_specs(runners), config, provision_only)
    except placement.DemandError as e:
        return str(e)
    return None


def decide(
    operation: str,
    new: JSON,
    old: JSON | None,
    config: Config | None,
    read_nodes: NodeRead,
) -> Decision:
    """J2, in order, for a CREATE or UPDATE of an InferenceReplica. ``config`` is None when
    provisioning is off: no configuration, or no Slice CRD (J1)."""
    if config is None:
        return Decision(True, "provisioning is off")
    runners = _runners(new)
    if operation == "UPDATE" and old is not None and runners == _runners(old):
        return Decision(True, "runners unchanged")
    if not placement.opted_in(runners):
        return Decision(True, "not opted in")
    asked = selected_accelerators(runners, config)
    if operation == "UPDATE" and old is not None:
        asked |= selected_accelerators(_runners(old), config)
    provision_only = read_nodes(frozenset(asked))
    error = _error(runners, config, provision_only)
    if error is None:
        return Decision(True, "demand valid")
    if provision_only is None:
        return Decision(True, "nodes unreadable", log=UNCHECKED_LOG)
    if operation == "UPDATE" and old is not None:
        old_runners = _runners(old)
        if (
            placement.opted_in(old_runners)
            and _error(old_runners, config, provision_only) is not None
        ):
            return Decision(True, "old object invalid too")
    meta = new.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    return Decision(False, "demand invalid", message=f"InferenceReplica {name}: {error}")

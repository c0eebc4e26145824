"""The demand of one Instance (B3 to B7, C1): opt-in, chips, shape, and the Slice
its pods need, with the exact texts users read when they cannot have one.

Pure: no I/O, no client types; pod specs and runners are plain JSON dicts, read and never changed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils import quantity as _quantity

from ome.api.v1beta1 import MAX_WORKERS
from ome.kube import JSON
from ome.tpuslice.shape import MAX_CHIPS, ShapeError, Topology, hosts, parse_topology, quote
from ome.tpuslice.types import Accelerator, Config

#: The prefix of every demand error (B6).
E = "pods cannot be placed on a provisioned slice"

#: C1: the pod-template annotation that opts an Instance in (ome.api.v1beta1 has the same
#: name; it is repeated here because the pure core imports nothing above it).
OPT_IN_ANNOTATION = "ome.io/tpu-slice-provisioning"

#: The library's parser is untyped; this is the one place its type is stated.
_parse_quantity: Callable[[str | int | float], object] = _quantity.parse_quantity


class DemandError(ValueError):
    """An Instance whose pods cannot be placed on a provisioned slice; ``str()`` is the full
    user message, starting with ``E``."""


def _map(value: object) -> JSON:
    return value if isinstance(value, dict) else {}


def _str_map(value: object) -> dict[str, str]:
    """A string map such as a nodeSelector. Non-string values never pass API validation; they
    are ignored rather than guessed at."""
    return {k: v for k, v in _map(value).items() if isinstance(v, str)}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


# -- B3: chips of a pod ----------------------------------------------------------------------


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes quantity (``4``, ``"4"``, ``"1500m"``, ``"2k"``) as a Decimal, through
    ``kubernetes.utils.quantity``; ValueError when it is not one."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not a quantity")
    parsed = _parse_quantity(value)
    if not isinstance(parsed, Decimal):  # pragma: no cover - the library always returns one
        raise ValueError(f"{value!r} is not a quantity")
    return parsed


def _chips(value: object, where: str) -> int:
    """A chip quantity rounded up (B3). B3's error names a quantity that is not one,
    or is negative: the API server rejects both, so we name it rather than guess a count."""
    try:
        quantity = parse_quantity(value)
        if quantity.is_finite() and 0 <= quantity <= MAX_CHIPS:
            return math.ceil(quantity)
    except ValueError:
        pass
    text = value if isinstance(value, str) else _shown(value)
    raise ShapeError(f"{where} {quote(text)} is not a non-negative quantity")


def _shown(value: object) -> str:
    """A quantity that is no string, as JSON writes it; an integer past Python's digit limit
    for ``str()`` (no JSON decoder hands one over, but a caller's own object may hold one) in
    short scientific form, ``1.000E+5000``."""
    try:
        return json.dumps(value, default=str)
    except (ValueError, RecursionError):
        return f"{Decimal(value):.3E}" if isinstance(value, int) else type(value).__name__


def pod_chips(pod_spec: JSON, chip_resource: str) -> int:
    """B3: the sum over ``spec.containers`` (init containers do not count) of each container's
    limit under ``chip_resource``, or its request when it has no limit, or 0; quantities
    round up. A quantity that does not parse raises ShapeError, e.g.
    ``container "c": google.com/tpu limit "x" is not a non-negative quantity``."""
    total = 0
    for i, item in enumerate(_list(pod_spec.get("containers"))):
        container = _map(item)
        resources = _map(container.get("resources"))
        name = container.get("name")
        label = f"container {quote(name)}" if isinstance(name, str) else f"container {i}"
        for kind in ("limits", "requests"):
            value = _map(resources.get(kind)).get(chip_resource)
            if value is not None:
                total += _chips(value, f"{label}: {chip_resource} {kind[:-1]}")
                break
    return total


# -- B4: exact fill --------------------------------------------------------------------------


def tile(topology: Topology, chips_per_host: int, pod_chips: list[int]) -> None:
    """B4: the pods fill ``topology`` exactly, or ShapeError with the first reason, checked in
    this order. Pods are numbered from 0, in the order given (B7's order); a negative count,
    which B3 never produces, is treated as requesting no chips."""
    host_count = hosts(topology, chips_per_host)
    if not pod_chips:
        raise ShapeError(
            f"topology {topology} needs {topology.chips} chips but no pod requests any"
        )
    n = pod_chips[0]
    for i, chips in enumerate(pod_chips):
        if chips <= 0:
            raise ShapeError(
                f"pod {i} requests no chips; every pod on a {topology} slice must request chips"
            )
        if chips != n:
            raise ShapeError(
                f"pods request {n} and {chips} chips; every pod on a slice must request the same "
                "count"
            )
    if n > chips_per_host:
        raise ShapeError(
            f"a pod requests {n} chips but a host has {chips_per_host}; a pod cannot span hosts"
        )
    if chips_per_host % n:
        raise ShapeError(f"{n} chips per pod do not divide a {chips_per_host}-chip host exactly")
    if len(pod_chips) * n != topology.chips:
        raise ShapeError(
            f"{_count(len(pod_chips), 'pod')} x {_count(n, 'chip')} do not fill topology "
            f"{topology}: it is {_count(topology.chips, 'chip')} on {_count(host_count, 'host')}, "
            f"which takes {_count(topology.chips // n, 'pod')}"
        )


def _count(n: int, noun: str) -> str:
    """``1 pod``, ``2 pods``: a count and its noun, singular for one."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# -- B5: the shape a pod selects --------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """The accelerator and topology a pod's nodeSelector names."""

    accelerator: str
    topology: Topology
    raw_topology: str


def pod_shape(pod_spec: JSON, config: Config) -> Shape | None:
    """B5: the shape of a pod from its nodeSelector; None when it names no topology. An empty
    accelerator value counts as none, since no accelerator is named."""
    selector = _str_map(pod_spec.get("nodeSelector"))
    raw = selector.get(config.topology_label)
    if raw is None:
        return None
    accelerator = selector.get(config.accelerator_label, "")
    if not accelerator:
        raise ShapeError(
            f"nodeSelector names topology {quote(raw)} under {config.topology_label} but no "
            f"accelerator under {config.accelerator_label}"
        )
    try:
        topology = parse_topology(raw)
    except ShapeError as err:
        raise ShapeError(f"nodeSelector {config.topology_label}: {err}") from None
    return Shape(accelerator, topology, raw)


# -- B6: the demand of one Instance -----------------------------------------------------------


@dataclass(frozen=True)
class Demand:
    """The Slice one Instance needs: every pod requests ``chips_per_pod`` and together they
    fill ``topology`` (``hosts`` hosts) of ``accelerator`` exactly."""

    accelerator: Accelerator
    topology: Topology
    hosts: int
    pods: int
    chips_per_pod: int


def demand(
    pod_specs: list[JSON],
    config: Config | None,
    provision_only_accelerators: set[str] | None,
) -> Demand | None:
    """B6, checked in order; None when the Instance needs no Slice, DemandError when its pods
    cannot have one.

    ``provision_only_accelerators`` holds the accelerator label values that have nodes with
    the provision-only label. None means the node read failed, which is not a demand error
    (B6.3): the checks go on as if the accelerator had provision-only nodes, so a bad shape is
    still reported. Within step 2, every pod's B5 error comes before a mismatch between pods,
    and a mismatch before a partial selection. A chip quantity that does not parse (B3) is
    reported at step 7 as ``<E>: pod <i>: <why>``.
    """
    if config is None:
        return None

    shapes: list[Shape | None] = []
    for i, spec in enumerate(pod_specs):
        try:
            shapes.append(pod_shape(spec, config))
        except ShapeError as err:
            raise DemandError(f"{E}: pod {i}: {err}") from None
    selected = [s for s in shapes if s is not None]
    if not selected:
        return None
    first = selected[0]
    for other in selected[1:]:
        if (other.accelerator, other.topology) != (first.accelerator, first.topology):
            raise DemandError(
                f"{E}: pods select {first.accelerator} {first.topology} and "
                f"{other.accelerator} {other.topology}; the pods of one instance share one slice"
            )
    if len(selected) < len(shapes):
        raise DemandError(
            f"{E}: {len(selected)} of {len(shapes)} pods select topology {first.topology}; "
            "the pods of one instance share one slice"
        )

    if (
        provision_only_accelerators is not None
        and first.accelerator not in provision_only_accelerators
    ):
        return None  # a static pool: pods schedule unconfined

    for i, spec in enumerate(pod_specs):
        chosen = _str_map(spec.get("nodeSelector")).get(config.slice_label)
        if chosen is not None:
            raise DemandError(
                f"{E}: pod {i} selects slice {quote(chosen)}; a provision-only pool's slice is "
                "provisioned for the pods"
            )

    accelerator = config.accelerators.get(first.accelerator)
    if accelerator is None:
        raise DemandError(
            f"{E}: accelerator {quote(first.accelerator)} has provision-only nodes but no "
            "provisioning configuration"
        )
    if str(first.topology) not in accelerator.topologies:
        raise DemandError(
            f"{E}: topology {first.topology} is not provisionable for accelerator "
            f"{quote(first.accelerator)}; provisionable: {', '.join(accelerator.topologies)}"
        )

    chips: list[int] = []
    for i, spec in enumerate(pod_specs):
        try:
            chips.append(pod_chips(spec, config.chip_resource))
        except ShapeError as err:
            raise DemandError(f"{E}: pod {i}: {err}") from None
    try:
        tile(first.topology, accelerator.chips_per_host, chips)
    except ShapeError as err:
        raise DemandError(f"{E}: {err}") from None
    return Demand(
        accelerator=accelerator,
        topology=first.topology,
        hosts=hosts(first.topology, accelerator.chips_per_host),
        pods=len(chips),
        chips_per_pod=chips[0],
    )


def provision_only_accelerator(node: JSON, config: Config) -> str | None:
    """B6.3: the accelerator label value of a node with the provision-only label, else None."""
    labels = _str_map(_map(node.get("metadata")).get("labels"))
    if labels.get(config.provision_only_key) != config.provision_only_value:
        return None
    return labels.get(config.accelerator_label) or None


def provision_only_selector(config: Config) -> str:
    """The label selector of the provision-only nodes, for a live node list."""
    return f"{config.provision_only_key}={config.provision_only_value}"


# -- B7, C1: runners ---------------------------------------------------------------------------


def _runner_name(runner: JSON) -> str:
    """A runner without a name is ``default``, as ``instances.pod_slots`` reads it."""
    name = runner.get("name", "default")
    return name if isinstance(name, str) else ""


def opted_in(runners: list[JSON]) -> bool:
    """C1: the first runner named ``default`` or ``leader`` decides; its template annotation
    ``ome.io/tpu-slice-provisioning`` must be exactly ``"true"``. Workers are ignored, and
    runners without a default or leader are not opted in."""
    for runner in runners:
        if _runner_name(runner) in ("default", "leader"):
            metadata = _map(_map(runner.get("template")).get("metadata"))
            return _str_map(metadata.get("annotations")).get(OPT_IN_ANNOTATION) == "true"
    return False


def instance_pod_specs(runners: list[JSON]) -> list[JSON]:
    """B7: one pod spec (``template.spec``) per pod of an Instance, in runner order: one for
    ``default`` and for ``leader``, ``size`` for ``worker`` (missing or negative size: none).
    Runner names the CRD does not allow make no pods, as in ``instances.pod_slots``. The
    specs are the runners' own objects, repeated for workers: read them, do not change them.
    A size above ``MAX_WORKERS`` (the CRD's maximum: only an object an older CRD let in)
    counts as ``MAX_WORKERS + 1`` pods, more than any Slice has hosts, so that its demand is
    refused for its pod count without a spec built per worker."""
    specs: list[JSON] = []
    for runner in runners:
        spec = _map(_map(runner.get("template")).get("spec"))
        name = _runner_name(runner)
        if name in ("default", "leader"):
            specs.append(spec)
        elif name == "worker":
            size = runner.get("size")
            count = size if isinstance(size, int) and not isinstance(size, bool) else 0
            specs.extend(spec for _ in range(min(max(count, 0), MAX_WORKERS + 1)))
    return specs

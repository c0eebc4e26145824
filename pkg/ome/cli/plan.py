"""``kubectl ome plan -f FILE``: what applying an InferenceService would do, decided before it
is applied, with the rules the controller and the webhook decide with after.

Per component (M6: the InferenceReplica the InferenceService controller would create, built
by its own ``plan_service``): the reason it would never be served (the service's Ready
condition, or the component's InvalidSpec), or the webhook's refusal of the replica's create
(J2, ``admission.decide``, so the text is the webhook's own); else the demand of each
Instance (B6: accelerator, topology, hosts, chips), the Slice each Instance would get (D1,
D2) and whether it fits now.

A Slice name ends in the hash of the replica's UID (D2), which the API server gives only on
create: the plan writes :data:`HASH` in its place.

Fitting counts the provision-only hosts of the Instance's accelerator that are in no Slice
and that every pod of the Instance could use (F1, as E6 judges it, with the replica's own
tolerations), as ``kubectl ome capacity`` counts them free. Instances take them in order,
component after component (they share one pool); the surge an update of the component would
add (M4: one more Slice, at ordinal 1 for a single-pod Instance, at the next free index for
a multi-pod one) is then shown against what is left; it does not change the verdict of a
create.

Pure: plain JSON in, rows out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from ome.controllers.inferenceservice.decide import ServiceObservation, plan_service
from ome.controllers.slices.model import Replica
from ome.controllers.slices.validation import validate
from ome.kube import JSON
from ome.tpuslice import admission, naming, placement
from ome.tpuslice.hosts import Host, instance_host_problems
from ome.tpuslice.types import Config

from .render import NONE, table

#: What stands for the owner hash (D2) of a replica whose UID is not known yet.
HASH = "<hash>"
#: The PLAN of a component whose Instances need no Slice (its note says why).
NO_SLICE = "no-slice"
#: What stands for the UID of an InferenceService not created yet.
UID = "<uid>"
#: The legend printed under the Slices whose names carry :data:`HASH`.
HASH_LEGEND = (
    f"{HASH}: not known yet: the first 8 hex characters of SHA-256 of "
    "<namespace>/<name>/<uid> of the InferenceReplica, whose UID the API server gives on create"
)


class Outcome(IntEnum):
    """A component's (and the plan's) outcome; the value is the exit status, and the worst
    component's is the plan's."""

    FITS = 0
    WAITS = 2
    REFUSED = 1

    @property
    def rank(self) -> int:
        return {Outcome.FITS: 0, Outcome.WAITS: 1, Outcome.REFUSED: 2}[self]

    @property
    def word(self) -> str:
        return {Outcome.FITS: "fits", Outcome.WAITS: "waits", Outcome.REFUSED: "refused"}[self]


@dataclass(frozen=True)
class SlicePlan:
    """One Slice an Instance would get: its slot (D1), its name with :data:`HASH`, the hosts it
    takes, the free hosts left before it, and whether they are enough."""

    instance: int
    ordinal: int
    name: str
    hosts: int
    free_before: int
    surge: bool = False

    @property
    def fits(self) -> bool:
        return self.free_before >= self.hosts


@dataclass(frozen=True)
class ComponentRow:
    """A component's plan. ``refusal``: why it would never run (its text, as the controller or
    the webhook says it), empty when none; ``demand``: each Instance's Slice, None when it
    needs none (``note`` says why); ``slices``: the Instances' Slices then the surge's."""

    component: str
    replica: str
    replicas: int
    refusal: str = ""
    demand: placement.Demand | None = None
    note: str = ""
    free: int = 0
    slices: tuple[SlicePlan, ...] = ()

    @property
    def verdict(self) -> Outcome:
        if self.refusal:
            return Outcome.REFUSED
        if all(s.fits for s in self.slices if not s.surge):
            return Outcome.FITS
        return Outcome.WAITS

    @property
    def surge(self) -> SlicePlan | None:
        return next((s for s in self.slices if s.surge), None)

    def cells(self) -> list[str]:
        d = self.demand
        needed = sum(s.hosts for s in self.slices if not s.surge)
        surge = self.surge
        return [
            self.component,
            self.replica,
            d.accelerator.name if d else NONE,
            str(d.topology) if d else NONE,
            str(d.hosts) if d else NONE,
            str(d.topology.chips) if d else NONE,
            str(self.replicas),
            str(needed) if d else NONE,
            str(self.free) if d else NONE,
            ("fits" if surge.fits else "waits") if surge else NONE,
            NO_SLICE if self.note else self.verdict.word,
        ]


@dataclass(frozen=True)
class Preview:
    """Every component's row, or ``refusal``: why the service would never be served at all
    (its Ready condition's reason and message)."""

    service: str
    refusal: str = ""
    components: tuple[ComponentRow, ...] = ()

    @property
    def verdict(self) -> Outcome:
        if self.refusal:
            return Outcome.REFUSED
        return max((c.verdict for c in self.components), key=lambda v: v.rank, default=Outcome.FITS)


def _free_hosts(nodes: Sequence[JSON], config: Config, replica: Replica, accelerator: str) -> int:
    """The provision-only hosts of ``accelerator`` in no Slice that every pod of the replica's
    Instances could use (F1 as E6 judges it)."""
    free = 0
    for node in nodes:
        if placement.provision_only_accelerator(node, config) != accelerator:
            continue
        host = Host.from_node(node, config.slice_label)
        if not host.slice_name and not instance_host_problems([host], replica.tolerations):
            free += 1
    return free


def slice_name(replica: str, instance: int, ordinal: int) -> str:
    """D2's name of slot (instance, ordinal) of ``replica``, its hash :data:`HASH`."""
    known = naming.slice_name(replica, naming.Slot(instance, ordinal), "0" * 8)
    return known[:-8] + HASH


def preview(
    service: JSON,
    model_found: bool,
    runtime_config: JSON | None,
    nodes: Sequence[JSON],
    config: Config,
) -> Preview:
    """The plan of applying ``service`` (its namespace set) as a new InferenceService, given
    whether its model resolves, its runtime's ``engineConfig`` (None: no runtime resolves),
    every node, and the manager's config."""
    meta = service.get("metadata") or {}
    name = str(meta.get("name", ""))
    # The service's UID is not known either; only the replica's ownerReference would carry it.
    service = {**service, "metadata": {**meta, "uid": meta.get("uid") or UID}}
    decided = plan_service(ServiceObservation(service, model_found, runtime_config, {}))
    if decided.stop is not None:
        return Preview(name, refusal=f"{decided.stop.reason}: {decided.stop.message}")
    provision_only = admission.provision_only_accelerators(list(nodes), config)
    taken: dict[str, int] = {}
    rows: list[ComponentRow] = []
    for c in decided.components:
        if c.invalid is not None:
            rows.append(
                ComponentRow(c.component, c.replica, 0, refusal=f"InvalidSpec: {c.invalid}")
            )
            continue
        body = c.create
        assert body is not None  # no replica exists yet: a valid component is a create
        count = int(body["spec"].get("replicas") or 0)
        answer = admission.decide("CREATE", body, None, config, lambda a: provision_only & a)
        if not answer.allowed:
            rows.append(ComponentRow(c.component, c.replica, count, refusal=answer.message))
            continue
        # Admitted, so the same demand check (B6) finds no error: a demand, or none.
        replica = Replica.from_json(body)
        checked = validate(replica, config, provision_only)
        if checked.demand is None:
            note = (
                "no slice: not opted in"
                if not replica.opted_in
                else "no slice: no pod selects a topology"
                if checked.no_topology
                else "no slice: not a provision-only pool"
            )
            rows.append(ComponentRow(c.component, c.replica, count, note=note))
            continue
        demand = checked.demand
        acc = demand.accelerator.name
        free = _free_hosts(nodes, config, replica, acc) - taken.get(acc, 0)
        left = free
        slices: list[SlicePlan] = []
        for index in range(count):
            slices.append(SlicePlan(index, 0, slice_name(c.replica, index, 0), demand.hosts, left))
            if left >= demand.hosts:  # an Instance that waits takes no host
                left -= demand.hosts
        surge_slot = (count, 0) if replica.multi_pod else (0, 1)
        if count:
            slices.append(
                SlicePlan(*surge_slot, slice_name(c.replica, *surge_slot), demand.hosts, left, True)
            )
        taken[acc] = taken.get(acc, 0) + (free - left)
        rows.append(
            ComponentRow(
                c.component, c.replica, count, demand=demand, free=free, slices=tuple(slices)
            )
        )
    return Preview(name, components=tuple(rows))


HEADER = (
    "COMPONENT",
    "REPLICA",
    "ACCELERATOR",
    "TOPOLOGY",
    "HOSTS",
    "CHIPS",
    "INSTANCES",
    "NEEDED",
    "FREE",
    "SURGE",
    "PLAN",
)
SLICES_HEADER = ("INSTANCE", "SLOT", "SLICE", "HOSTS", "FREE", "FITS")


def render(found: Preview) -> str:
    """The components' table; then each Instance's Slice (the surge marked), with the legend
    of :data:`HASH`; then each refusal, one line each (``<component>: <text>``)."""
    if found.refusal:
        return f"inferenceservice {found.service}: refused: {found.refusal}\n"
    out = table(HEADER, (c.cells() for c in found.components))
    planned = [(c, s) for c in found.components for s in c.slices]
    if planned:
        out += "\n" + table(
            SLICES_HEADER,
            (
                [
                    f"{c.replica}[{'surge' if s.surge else s.instance}]",
                    f"{s.instance},{s.ordinal}",
                    s.name,
                    str(s.hosts),
                    str(max(s.free_before, 0)),
                    "yes" if s.fits else "no",
                ]
                for c, s in planned
            ),
        )
        out += f"\n{HASH_LEGEND}\n"
    said = [
        f"{c.component}: refused: {c.refusal}\n" if c.refusal else f"{c.component}: {c.note}\n"
        for c in found.components
        if c.refusal or c.note
    ]
    if said:
        out += "\n" + "".join(said)
    return out

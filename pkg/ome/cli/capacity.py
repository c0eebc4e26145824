"""``kubectl ome capacity``: the provision-only pool, one row per accelerator and topology:
its hosts, whose Slices hold them and in which state, which are free and healthy, which are
cordoned, not ready or unreachable, the chips ready OME Slices hold with no running pod, and
the Instances that wait on capacity.

It judges with the controller's own rules: the provision-only hosts (B6.3), the Slice as it
says of itself (E1, E2), which Slices are OME's (D4, the owner-UID label, as K4 counts them),
host usability with the tolerations of the pods that would use the host (F1, E6), each
replica's demand (B6) and the holds its Instances record (E7).

A host in a Slice counts in the row of that Slice's topology (the host's topology label when
the Slice is not listed); a host in no Slice has no topology yet and counts in its
accelerator's row without one (TOPOLOGY ``<none>``), which every accelerator with
provision-only hosts has. An Instance that waits counts in the row of
its demand.

Pure: plain JSON in, rows out; ``now`` is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from ome.controllers.holds import hold_reason
from ome.controllers.slices import messages
from ome.controllers.slices.model import Pod, Replica
from ome.controllers.slices.validation import validate
from ome.kube import JSON, parse_time
from ome.provider import gke
from ome.tpuslice import placement
from ome.tpuslice.hosts import Host, instance_host_problems
from ome.tpuslice.shape import ShapeError, parse_topology
from ome.tpuslice.slices import SliceInfo
from ome.tpuslice.types import Config

from .render import NONE, human_duration, table

#: The state a host's OME Slice counts under when the Slice is terminating, or has no state
#: yet (K4's names for the same).
TERMINATING, PENDING = "terminating", "pending"


@dataclass(frozen=True)
class Waiter:
    """An Instance whose operation holds on capacity (E7): its replica, its index, and how
    long it has waited (from its hold's record; ``None`` when the record has no time)."""

    namespace: str
    replica: str
    instance: int
    waited: timedelta | None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.replica}[{self.instance}]"


@dataclass(frozen=True)
class CapacityRow:
    """One accelerator and topology (``""``: the hosts in no Slice). Each host list is
        sorted; ``ome`` is (state, hosts) per state of OME's Slices, by state; ``unusable`` names
        each cordoned, not ready or unreachable host with its reasons (a cell has no blank, so
    ``not-ready``)."""

    accelerator: str
    topology: str
    hosts: tuple[str, ...]
    ome: tuple[tuple[str, tuple[str, ...]], ...]
    foreign: tuple[str, ...]
    free: tuple[str, ...]
    cordoned: tuple[str, ...]
    not_ready: tuple[str, ...]
    unreachable: tuple[str, ...]
    idle_chips: int
    idle_slices: tuple[str, ...]
    waiting: tuple[Waiter, ...]

    @property
    def longest_wait(self) -> timedelta | None:
        waits = [w.waited for w in self.waiting if w.waited is not None]
        return max(waits) if waits else None

    def _unusable(self) -> list[str]:
        why: dict[str, list[str]] = {}
        for kind, names in (
            ("cordoned", self.cordoned),
            ("not-ready", self.not_ready),
            ("unreachable", self.unreachable),
        ):
            for name in names:
                why.setdefault(name, []).append(kind)
        return [f"{name}({','.join(kinds)})" for name, kinds in sorted(why.items())]

    def cells(self, wide: bool) -> list[str]:
        longest = self.longest_wait
        cells = [
            self.accelerator,
            self.topology or NONE,
            str(len(self.hosts)),
            ",".join(f"{state}={len(names)}" for state, names in self.ome) or "0",
            str(len(self.foreign)),
            str(len(self.free)),
            str(len(self.cordoned)),
            str(len(self.not_ready)),
            str(len(self.unreachable)),
            str(self.idle_chips),
            str(len(self.waiting)),
            human_duration(longest) if longest is not None else NONE,
        ]
        if wide:
            cells += [
                ",".join(f"{n}({state})" for state, names in self.ome for n in names) or NONE,
                ",".join(self.foreign) or NONE,
                ",".join(self.free) or NONE,
                ",".join(self._unusable()) or NONE,
                ",".join(self.idle_slices) or NONE,
                ",".join(w.ref for w in self.waiting) or NONE,
            ]
        return cells

    def document(self) -> JSON:
        longest = self.longest_wait
        return {
            "accelerator": self.accelerator,
            "topology": self.topology,
            "hosts": list(self.hosts),
            "omeSlices": [{"state": s, "hosts": list(names)} for s, names in self.ome],
            "foreign": list(self.foreign),
            "free": list(self.free),
            "cordoned": list(self.cordoned),
            "notReady": list(self.not_ready),
            "unreachable": list(self.unreachable),
            "idleChips": self.idle_chips,
            "idleSlices": list(self.idle_slices),
            "waiting": [
                {
                    "namespace": w.namespace,
                    "inferenceReplica": w.replica,
                    "instance": w.instance,
                    "waitedSeconds": int(w.waited.total_seconds()) if w.waited else None,
                }
                for w in self.waiting
            ],
            "longestWaitSeconds": int(longest.total_seconds()) if longest is not None else None,
        }


HEADER = (
    "ACCELERATOR",
    "TOPOLOGY",
    "HOSTS",
    "OME",
    "FOREIGN",
    "FREE",
    "CORDONED",
    "NOT-READY",
    "UNREACHABLE",
    "IDLE-CHIPS",
    "WAITING",
    "LONGEST-WAIT",
)
WIDE = (
    "OME-HOSTS",
    "FOREIGN-HOSTS",
    "FREE-HOSTS",
    "UNUSABLE-HOSTS",
    "IDLE-SLICES",
    "WAITING-INSTANCES",
)


def render(rows: Iterable[CapacityRow], wide: bool) -> str:
    header = list(HEADER) + (list(WIDE) if wide else [])
    return table(header, (r.cells(wide) for r in rows))


def _map(value: object) -> JSON:
    return value if isinstance(value, dict) else {}


def _canonical(topology: str) -> str:
    """B1's canonical form, or the text as it is when it does not parse."""
    try:
        return str(parse_topology(topology))
    except ShapeError:
        return topology


def state_of(found: SliceInfo) -> str:
    """The state an OME Slice's hosts count under: ``terminating`` while it is deleted, its
    own state (E1) otherwise, ``pending`` without one."""
    if found.terminating:
        return TERMINATING
    return found.state or PENDING


def waiters(replica: Replica, now: datetime) -> list[Waiter]:
    """E7: the Instances whose operation holds on ``CapacityProvisioning``, with the wait
    since the hold's record (kept while its reason stands)."""
    out: list[Waiter] = []
    for row in replica.rows:
        op, failure = _map(row.get("operation")), _map(row.get("lastFailure"))
        if op.get("waiting") != messages.CAPACITY or type(row.get("index")) is not int:
            continue
        since = parse_time(failure.get("time")) if hold_reason(failure) is not None else None
        out.append(
            Waiter(replica.namespace, replica.name, row["index"], now - since if since else None)
        )
    return out


@dataclass
class _Row:
    """A row while it is filled."""

    hosts: list[str]
    ome: dict[str, list[str]]
    foreign: list[str]
    free: list[str]
    cordoned: list[str]
    not_ready: list[str]
    unreachable: list[str]
    idle_chips: int
    idle_slices: list[str]
    waiting: list[Waiter]

    @staticmethod
    def empty() -> _Row:
        return _Row([], {}, [], [], [], [], [], 0, [], [])

    def done(self, accelerator: str, topology: str) -> CapacityRow:
        return CapacityRow(
            accelerator=accelerator,
            topology=topology,
            hosts=tuple(sorted(self.hosts)),
            ome=tuple((s, tuple(sorted(n))) for s, n in sorted(self.ome.items())),
            foreign=tuple(sorted(self.foreign)),
            free=tuple(sorted(self.free)),
            cordoned=tuple(sorted(self.cordoned)),
            not_ready=tuple(sorted(self.not_ready)),
            unreachable=tuple(sorted(self.unreachable)),
            idle_chips=self.idle_chips,
            idle_slices=tuple(sorted(self.idle_slices)),
            waiting=tuple(sorted(self.waiting, key=lambda w: (w.namespace, w.replica, w.instance))),
        )


def rows(
    nodes: Sequence[JSON],
    slices: Sequence[JSON],
    replicas: Sequence[JSON],
    pods: Sequence[JSON],
    config: Config,
    now: datetime,
    accelerator: str | None = None,
) -> list[CapacityRow]:
    """The rows, by accelerator and topology (the hosts in no Slice first), from every node
    (only the provision-only ones count), every Slice, every InferenceReplica and OME's pods;
    only ``accelerator``'s when one is given."""
    parsed = {s.name: s for s in (gke.parse(obj) for obj in slices)}
    opted = [r for r in (Replica.from_json(raw) for raw in replicas) if r.opted_in]
    pool: dict[str, list[JSON]] = {}
    for node in nodes:
        acc = placement.provision_only_accelerator(node, config)
        if acc and (accelerator is None or acc == accelerator):
            pool.setdefault(acc, []).append(node)
    provision_only = frozenset(
        a for a in (placement.provision_only_accelerator(n, config) for n in nodes) if a
    )
    # F1 as E6 judges it: a host is unusable when any pod that would run on it cannot use it;
    # with no replica demanding the accelerator, as a pod that tolerates nothing.
    tolerations: dict[str, list[tuple[JSON, ...]]] = {}
    demands: dict[str, tuple[str, str]] = {}
    for replica in opted:
        demand = validate(replica, config, provision_only).demand
        if demand is not None:
            demands[replica.key] = (demand.accelerator.name, str(demand.topology))
            tolerations.setdefault(demand.accelerator.name, []).extend(replica.tolerations)
    running: set[str] = set()
    for raw in pods:
        pod = Pod.from_json(raw, config.slice_label, config.chip_resource)
        if (
            pod.slice_name
            and not pod.terminating
            and _map(raw.get("status")).get("phase") == "Running"
        ):
            running.add(pod.slice_name)

    table_: dict[tuple[str, str], _Row] = {(acc, ""): _Row.empty() for acc in pool}
    idle_counted: set[str] = set()
    for acc, members in pool.items():
        for node in members:
            host = Host.from_node(node, config.slice_label)
            found = parsed.get(host.slice_name) if host.slice_name else None
            labelled = _map(_map(node.get("metadata")).get("labels")).get(config.topology_label)
            topology = ""
            if host.slice_name:
                topology = _canonical(
                    found.topology if found and found.topology else str(labelled or "")
                )
            row = table_.setdefault((acc, topology), _Row.empty())
            row.hosts.append(host.name)
            problems = instance_host_problems([host], tolerations.get(acc, []))
            for kind, names in (
                ("cordoned", row.cordoned),
                ("not ready", row.not_ready),
                ("unreachable", row.unreachable),
            ):
                if f"node {host.name} is {kind}" in problems:
                    names.append(host.name)
            if not host.slice_name:
                if not problems:
                    row.free.append(host.name)
            elif found is not None and found.owner_uid:
                row.ome.setdefault(state_of(found), []).append(host.name)
                if (
                    found.name not in idle_counted
                    and found.ready(config.slice.ready_states)
                    and found.name not in running
                ):
                    idle_counted.add(found.name)
                    row.idle_slices.append(found.name)
                    row.idle_chips += _chips(found.topology)
            else:
                row.foreign.append(host.name)
    for replica in opted:
        key = demands.get(replica.key)
        if key is None or (accelerator is not None and key[0] != accelerator):
            continue
        found_waiters = waiters(replica, now)
        if found_waiters:
            table_.setdefault(key, _Row.empty()).waiting.extend(found_waiters)
    return [table_[key].done(*key) for key in sorted(table_)]


def _chips(topology: str) -> int:
    """B1: the chips of a Slice's topology; 0 when it does not parse."""
    try:
        return parse_topology(topology).chips
    except ShapeError:
        return 0

"""Chip time (K6, K7): the chip-seconds OME's Slices hold, by phase, and the chips of ready
Slices that run nothing. The phase of a Slice is a pure function; the accounting only adds
time, never decides anything, and never calls the API (it reads the caches)."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ome.api.v1beta1 import LABEL_MANAGED_BY, MANAGED_BY_OMENATIVE
from ome.kube import JSON
from ome.runtime.informer import DeletedFinalStateUnknown, EventHandler, deleted_object
from ome.tpuslice.shape import ShapeError, parse_topology
from ome.tpuslice.slices import SliceInfo

from .metrics import LABELS
from .reconciler import BY_OWNER_UID, BY_UID, SliceReconcilers, uid_of

#: The index of OME's pods by the Slice their node selector confines them to.
BY_SLICE = "chip-time-slice"


class Phase(StrEnum):
    """Where a Slice's chips go (K6), in the order ``phase_of`` decides it."""

    TERMINATING = "terminating"
    ORPHANED = "orphaned"
    PROVISIONING = "provisioning"
    SERVING = "serving"
    IDLE = "idle"


def phase_of(s: SliceInfo, owned: bool, running: bool, ready_states: tuple[str, ...]) -> Phase:
    """K6: terminating; else orphaned when no replica has its owner UID (``owned`` false, as
    K4 judges it); else provisioning until it is ready (E2); else serving while a running
    pod of OME is confined to it (``running``), idle while none is."""
    if s.terminating:
        return Phase.TERMINATING
    if not owned:
        return Phase.ORPHANED
    if not s.ready(ready_states):
        return Phase.PROVISIONING
    return Phase.SERVING if running else Phase.IDLE


@functools.lru_cache(maxsize=1024)
def chips_of(topology: str) -> int:
    """B1: the chips of a Slice's topology; 0 when it does not parse (nothing to count).
    Cached: a pool has a handful of topologies, and parsing one was half of a collect's
    CPU at 2,000 Slices."""
    try:
        return parse_topology(topology).chips
    except ShapeError:
        return 0


@dataclass(frozen=True)
class Held:
    """What one of OME's Slices holds, as last observed: its shape (the metrics' labels),
    chips, phase, and whether it is idle for K7 (ready, with no running pod of OME, whoever
    owns it: an orphan that is ready and runs nothing is idle too)."""

    slice_type: str
    topology: str
    chips: int
    phase: Phase
    idle: bool


def held(s: SliceInfo, owned: bool, running: bool, ready_states: tuple[str, ...]) -> Held:
    """The pure observation of one Slice."""
    return Held(
        s.slice_type,
        s.topology,
        chips_of(s.topology),
        phase_of(s, owned, running, ready_states),
        s.ready(ready_states) and not running,
    )


#: How often a collect observes every Slice anew, rather than only adding the time since the
#: last accounting to the phases the events keep current.
REOBSERVE_AFTER = 60.0


class ChipTime:
    """The collector of ``ome_tpu_slice_chip_seconds_total{slice_type,topology,phase}`` (K6)
    and ``ome_tpu_slice_idle_chips{slice_type,topology}`` (K7), reported by the leader only.

    Time is integrated by accounting: each Slice's chips times the seconds since it was last
    accounted are added to the phase it was observed in then, and it is observed anew. Every
    collect accounts every Slice; ``touch`` accounts the Slices a cache event may have
    changed (a Slice, a pod of OME confined to one, a replica come or gone: all that a phase
    depends on), so a phase's time is right to the event, however rarely Prometheus scrapes.
    Written by hand: prometheus_client's counters count what a caller adds, and none
    integrates a changing quantity over time.

    A collect adds the time each held Slice has run in its phase since it was last
    accounted, without observing it again: the events keep ``_held`` current. Every
    ``REOBSERVE_AFTER`` seconds a collect observes every Slice anew, a net for an event
    missed; observing all of them on every scrape cost about 20 ms at 2,000 Slices.

    Invariants, under ``_lock`` (collects and informer threads overlap; the lock is taken
    before any informer's, never while one is held, so they cannot deadlock):

    - ``_held`` is empty unless this replica leads and accounting has started (``_accounting``);
    - each entry of ``_held`` is what its Slice held at ``since``, and every second of it up
      to ``since`` is in ``_totals``; the seconds after are added to that phase at the next
      accounting, which observes it anew;
    - ``_totals`` only grow; only time while leading is added: a replica that takes over
      starts at its first collect or event, and one that does not lead drops ``_held``.
    """

    def __init__(
        self,
        observe: Callable[[str], Held | None],
        observe_all: Callable[[], Mapping[str, Held]],
        leading: Callable[[], bool],
        shapes: Iterable[tuple[str, str]] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._observe, self._observe_all, self._leading = observe, observe_all, leading
        self._clock = clock
        self._shapes = tuple(shapes)
        self._lock = threading.Lock()
        self._accounting = False
        #: when every Slice was last observed (a collect's net for a missed event)
        self._observed_all = 0.0
        self._held: dict[str, tuple[Held, float]] = {}
        self._totals: dict[tuple[str, str, Phase], float] = {
            (t, topo, p): 0.0 for t, topo in self._shapes for p in Phase
        }

    def _hold(self, name: str, h: Held, now: float) -> None:
        """Hold ``h`` from ``now``; its phase's series shows from its first observation."""
        self._held[name] = (h, now)
        self._totals.setdefault((h.slice_type, h.topology, h.phase), 0.0)

    def _add(self, h: Held, since: float, now: float) -> None:
        key = (h.slice_type, h.topology, h.phase)
        self._totals[key] = self._totals.get(key, 0.0) + h.chips * max(0.0, now - since)

    def _account_all_locked(self, reobserve: bool = True) -> bool:
        """Account every Slice now, observing each anew unless ``reobserve`` is false and
        the last time they all were is less than ``REOBSERVE_AFTER`` ago; False (and
        nothing held) when this replica does not lead."""
        if not self._leading():
            self._accounting = False
            self._held.clear()
            return False
        now = self._clock()
        if self._accounting:
            for h, since in self._held.values():
                self._add(h, since, now)
        if self._accounting and not reobserve and now - self._observed_all < REOBSERVE_AFTER:
            self._held = {name: (h, now) for name, (h, _) in self._held.items()}
            return True
        self._held.clear()
        for name, h in self._observe_all().items():
            self._hold(name, h, now)
        self._accounting = True
        self._observed_all = now
        return True

    def touch(self, names: Iterable[str]) -> None:
        """Account the named Slices now (a cache event may have changed their phase)."""
        with self._lock:
            if not self._accounting or not self._leading():
                self._account_all_locked()  # starts once leading; else drops what it held
                return
            now = self._clock()
            for name in names:
                before = self._held.pop(name, None)
                if before is not None:
                    self._add(*before, now)
                found = self._observe(name)
                if found is not None:
                    self._hold(name, found, now)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        seconds = CounterMetricFamily(
            "ome_tpu_slice_chip_seconds",
            "Chip-seconds held by OME's TPU Slices, by phase",
            labels=[*LABELS, "phase"],
        )
        idle = GaugeMetricFamily(
            "ome_tpu_slice_idle_chips",
            "Chips on OME's ready TPU Slices with no running pod",
            labels=list(LABELS),
        )
        with self._lock:
            if self._account_all_locked(reobserve=False):
                for (slice_type, topology, phase), total in sorted(self._totals.items()):
                    seconds.add_metric([slice_type, topology, phase.value], total)
                chips = dict.fromkeys(self._shapes, 0)
                for h, _ in self._held.values():
                    if h.idle:
                        shape = (h.slice_type, h.topology)
                        chips[shape] = chips.get(shape, 0) + h.chips
                for (slice_type, topology), n in sorted(chips.items()):
                    idle.add_metric([slice_type, topology], n)
        yield seconds
        yield idle


def _slice_of_pod(slice_label: str) -> Callable[[JSON], list[str]]:
    def index(pod: JSON) -> list[str]:
        meta = pod.get("metadata") or {}
        if (meta.get("labels") or {}).get(LABEL_MANAGED_BY) != MANAGED_BY_OMENATIVE:
            return []
        name = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(slice_label)
        return [name] if isinstance(name, str) and name else []

    return index


def _running(pod: JSON) -> bool:
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and (
        (pod.get("status") or {}).get("phase") == "Running"
    )


def _name(obj: JSON | DeletedFinalStateUnknown) -> str:
    return str((deleted_object(obj).get("metadata") or {}).get("name") or "")


class CacheChipTime(ChipTime):
    """``ChipTime`` over the slice reconcilers' caches: the Slices with an owner-UID label
    (through their ``slice_view``), the replicas (indexed by UID here) and OME's pods
    (indexed here by the Slice their node selector confines them to), each of whose events
    touches the Slices it concerns. Series start at zero for every configured shape."""

    def __init__(
        self,
        reconcilers: SliceReconcilers,
        leading: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        config = reconcilers.config
        slices, pods, replicas = reconcilers.slices, reconcilers.pods, reconcilers.replicas
        self._slices, self._pods, self._replicas = slices, pods, replicas
        self._view, self._ready_states = reconcilers.slice_view, config.slice.ready_states
        index = _slice_of_pod(config.slice_label)
        pods.add_indexer(BY_SLICE, index)
        shapes = [(a.slice_type, t) for a in config.accelerators.values() for t in a.topologies]
        super().__init__(self._held_at, self._held_all, leading, shapes, clock)

        def slice_update(old: JSON, new: JSON) -> None:
            if self._reads(old) != self._reads(new):
                self.touch([_name(new)])

        def pod_update(old: JSON, new: JSON) -> None:
            was, now = index(old), index(new)
            if was != now or _running(old) != _running(new):
                self.touch({*was, *now})

        def pod_change(pod: JSON) -> None:
            names = index(pod)
            if names:
                self.touch(names)

        slices.add_handler(
            EventHandler(
                on_add=lambda o: self.touch([_name(o)]),
                on_update=slice_update,
                on_delete=lambda o: self.touch([_name(o)]),
            )
        )
        # Only a pod of OME confined to a Slice, and of it only where it is confined and
        # whether it runs, changes a phase: other updates (its readiness, a status write) and
        # every other pod touch nothing.
        pods.add_handler(
            EventHandler(
                on_add=pod_change,
                on_update=pod_update,
                on_delete=lambda o: pod_change(deleted_object(o)),
            )
        )
        replicas.add_handler(
            EventHandler(
                on_add=lambda o: self.touch(self._owned_by(o)),
                on_delete=lambda o: self.touch(self._owned_by(deleted_object(o))),
            )
        )

    def _reads(self, obj: JSON) -> tuple[object, ...]:
        """What a Slice's phase and chips depend on (``held``), but whether it is owned and
        run on, which the replicas' and the pods' events account."""
        s = self._view(obj)
        return (s.terminating, s.ready(self._ready_states), s.slice_type, s.topology, s.owner_uid)

    def _owned_by(self, replica: JSON) -> list[str]:
        return [
            _name(s)
            for uid in uid_of(replica)
            for s in self._slices.peek_by_index(BY_OWNER_UID, uid)
        ]

    def _held_of(self, s: SliceInfo) -> Held:
        owned = bool(self._replicas.peek_by_index(BY_UID, s.owner_uid))
        running = any(map(_running, self._pods.peek_by_index(BY_SLICE, s.name)))
        return held(s, owned, running, self._ready_states)

    def _held_at(self, name: str) -> Held | None:
        obj = self._slices.peek(name)
        s = self._view(obj) if obj is not None else None
        return self._held_of(s) if s is not None and s.owner_uid else None

    def _held_all(self) -> dict[str, Held]:
        return {
            s.name: self._held_of(s)
            for s in map(self._view, self._slices.peek_list())
            if s.owner_uid
        }

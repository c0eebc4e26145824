"""The soak's schedule: which fault or load step comes when, with its parameters, drawn from
one seed. Pure (no clock, no I/O), so a seed always gives the same sequence and a failing
run replays from its printed seed. What each step hits (which Slice, host or manager) is
resolved when it runs, by ``pick`` (a number in [0, 1)) into the sorted live candidates."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

#: Every fault kind, with what it does (the report and ``--help`` list them).
FAULTS: dict[str, str] = {
    "api-5xx": "the API server answers some of the manager's requests 500, 503 or 504",
    "api-429": "the API server answers some of the manager's requests 429 with Retry-After",
    "watch-dropped": "watch streams of one resource are closed or reset",
    "watch-expired": "the next watches of the manager are answered 410 Gone",
    "compaction": "the server's watch history is compacted (resumes get 410) and watches drop",
    "manager-killed": "kill -9 of a manager, restarted after a moment",
    "leader-paused": "SIGSTOP of the leader past its lease, then SIGCONT",
    "second-manager": "a second manager runs beside the first for a while",
    "slice-deleted": "an OME Slice deleted from outside",
    "slice-moved": "an active OME Slice moved to other hosts",
    "partitions-dropped": "an OME Slice loses its partitions for a while",
    "slice-stuck": "an OME Slice stays ACTIVATING for a while",
    "host-cordoned": "a TPU host cordoned for a while",
    "host-not-ready": "a TPU host NotReady for a while",
    "host-unreachable": "a TPU host unreachable (Ready Unknown) for a while",
    "foreign-pod": "a pod of another workload holds a host's chips for a while",
    "foreign-slice": "a Slice of someone else appears, sometimes at a name OME would give",
    "replica-finalizer-removed": "a service's InferenceReplica deleted and its finalizer "
    "removed by force at once (the service makes it anew; its Slices are left as orphans)",
}
#: Load steps on the opted-in services.
LOAD: dict[str, str] = {
    "create": "a new service, single-host (2x2x1) or multi-host (2x2x2)",
    "scale": "a service scaled to 1 or 2 Instances",
    "update": "a service's runner changed (a surge update)",
    "delete": "a service deleted",
}


@dataclass(frozen=True)
class Step:
    """One step at ``at`` seconds into the soak: a fault (``kind`` in FAULTS) or a load step
    (in LOAD), with its parameters."""

    at: float
    kind: str
    params: dict[str, Any] = field(default_factory=dict, compare=True, hash=False)

    @property
    def is_fault(self) -> bool:
        return self.kind in FAULTS

    def json(self) -> dict[str, Any]:
        return {"at": self.at, "kind": self.kind, "params": self.params}


def _fault_params(kind: str, rng: random.Random) -> dict[str, Any]:
    pick = round(rng.random(), 4)
    hold = round(rng.uniform(4.0, 20.0), 1)  # how long a reversible fault lasts
    if kind == "api-5xx":
        return {
            "code": rng.choice((500, 503, 504)),
            "verb": rng.choice(("", "get", "list", "create", "update", "patch", "delete")),
            "times": rng.randint(1, 6),
        }
    if kind == "api-429":
        return {"verb": rng.choice(("", "list", "create", "update")), "times": rng.randint(1, 6)}
    if kind == "watch-dropped":
        return {
            "resource": rng.choice(("pods", "slices", "nodes", "inferencereplicas", "")),
            "mode": rng.choice(("close", "reset")),
        }
    if kind == "watch-expired":
        return {"times": rng.randint(1, 3)}
    if kind == "manager-killed":
        return {"pick": pick, "restart_after": round(rng.uniform(0.0, 3.0), 1)}
    if kind == "leader-paused":
        return {"beyond_lease": round(rng.uniform(1.0, 4.0), 1)}
    if kind == "second-manager":
        return {"for": round(rng.uniform(8.0, 30.0), 1)}
    if kind in ("slice-deleted", "slice-moved", "replica-finalizer-removed"):
        return {"pick": pick}
    if kind in ("partitions-dropped", "slice-stuck", "host-cordoned", "host-not-ready"):
        return {"pick": pick, "for": hold}
    if kind == "host-unreachable":
        return {"pick": pick, "for": hold}
    if kind == "foreign-pod":
        return {"pick": pick, "for": hold}
    if kind == "foreign-slice":
        return {"pick": pick, "at_ome_name": rng.random() < 0.5}
    return {}


def _load_params(kind: str, rng: random.Random) -> dict[str, Any]:
    pick = round(rng.random(), 4)
    if kind == "create":
        return {"multi_host": rng.random() < 0.3}
    if kind == "scale":
        return {"pick": pick, "replicas": rng.randint(1, 2)}
    if kind == "update":
        return {"pick": pick, "value": f"v{rng.randint(1, 10**6)}"}
    return {"pick": pick}


def make_plan(
    seed: int,
    seconds: float,
    faults: tuple[str, ...] = tuple(FAULTS),
    fault_every: float = 2.0,
    load_every: float = 3.0,
    warmup: float = 8.0,
) -> list[Step]:
    """The soak's steps in time order: after ``warmup`` seconds, faults about every
    ``fault_every`` seconds (kinds drawn from ``faults``, each kind once first, in a shuffled
    order, so that every one runs in a short soak); load steps about every ``load_every``,
    the first four creating services at once."""
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown:
        raise ValueError(f"unknown fault kinds: {', '.join(unknown)}")
    rng = random.Random(seed)
    steps: list[Step] = []
    kinds = list(faults)
    rng.shuffle(kinds)
    t, n = warmup, 0
    while faults:
        t += rng.uniform(0.5, 1.5) * fault_every
        if t >= seconds:
            break
        kind = kinds[n] if n < len(kinds) else rng.choice(kinds)
        steps.append(Step(round(t, 2), kind, _fault_params(kind, rng)))
        n += 1
    t, n = 0.0, 0
    while True:
        t += rng.uniform(0.5, 1.5) * load_every if n >= 4 else 0.2
        if t >= seconds:
            break
        kind = "create" if n < 4 else rng.choices(list(LOAD), weights=(3, 2, 2, 2))[0]
        steps.append(Step(round(t, 2), kind, _load_params(kind, rng)))
        n += 1
    return sorted(steps, key=lambda s: (s.at, s.kind))

"""``ome-sim soak``: the stage, the plan carried out, the end checks and the report.

The embedded API server runs in this process, so that the invariant checker (``checker``)
sees every request as the server does; the provider and the managers are processes of their
own, so that they can be killed (SIGKILL) and paused (SIGSTOP) like real ones. Managers run
with leader election, on short leases, each in a slot that keeps its ports across restarts;
the webhook configuration points at slot ``a``, as a Service with one endpoint would.

After the plan: the faults are cleared and undone, the extra manager stopped, and the soak
waits (at most ``CONVERGE_S``) until every service is Ready, every OME Slice is wanted by
exactly one slot of a live replica, and no OME pod is pending. Then the foreign Slices are
compared with what they were made as, and a last probe (a Slice deleted from outside, a
release deferred by a foreign pod) checks the leader's metrics against the events and
releases the server saw.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from ome import user_agent
from ome.api.v1beta1 import INFERENCE_REPLICAS, INFERENCE_SERVICES, LABEL_MANAGED_BY
from ome.kube import JSON, Resource, json_copy
from ome.provider import gke
from ome.runtime.rest import LEASES, NAMESPACES, NODES, PODS, Rest
from ome.tpuslice import naming
from ome.tpuslice.types import GUIDE_CONFIG_JSON

from .. import system
from ..apiserver.faults import WRITE_VERBS, Fault
from ..apiserver.server import EmbeddedAPIServer, ServerThread
from ..gke.model import KNOB, SLICE_FINALIZER
from .checker import INVARIANTS, Checker
from .plan import FAULTS, Step, make_plan

AGENT = user_agent("ome-sim-soak")
NS = "soak"
FOREIGN_NS = "soak-foreign"
EVENTS = Resource("", "v1", "events")
SLICE_LABEL = json.loads(GUIDE_CONFIG_JSON)["nodeLabels"]["slice"]
READY_STATES = tuple(json.loads(GUIDE_CONFIG_JSON)["slice"]["readyStates"])
LEASE_S = 6
ELECTION = [
    "--leader-elect",
    *("--leader-elect-lease-duration", str(LEASE_S)),
    *("--leader-elect-renew-deadline", "4"),
    *("--leader-elect-retry-period", "1"),
]
HOSTS = 16
#: Hosts the services may ask for at once (Instances x hosts each): room is left for surges,
#: cordons, foreign pods and foreign Slices.
HOST_BUDGET = 9
MAX_SERVICES = 6
MAX_FOREIGN_SLICES = 3
CONVERGE_S = 120.0
#: A topology of more hosts (128) than the soak's pool has (16): GKE puts its finalizer on
#: such a Slice and leaves it waiting. (One it could place, such as 4x4x4 when all 16 hosts
#: are free at once, would be given every host and starve the soak's services.)
UNPLACEABLE = "8x8x8"


def say(message: str) -> None:
    print(f"soak: {message}", file=sys.stderr, flush=True)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Slot:
    """A manager's place: its ports survive its restarts (the webhook points at slot a's)."""

    name: str
    log: Path
    ports: dict[str, int] = field(default_factory=dict)
    proc: system.ManagerProcess | None = None
    restart_at: float | None = None
    paused_until: float | None = None
    wanted: bool = True
    starts: int = 0

    def running(self) -> bool:
        return self.proc is not None and self.proc.proc.poll() is None


@dataclass
class Undo:
    at: float
    what: str
    action: Callable[[], None]


class SoakError(RuntimeError):
    """The soak could not run (the stage would not start)."""


class Soak:
    """One soak run. Driven by the calling thread only (the server's loop calls into the
    checker, which has its own lock)."""

    def __init__(
        self,
        work: Path,
        seed: int,
        seconds: float,
        faults: tuple[str, ...] = tuple(FAULTS),
        sabotage: str = "",
    ) -> None:
        self.work = work
        self.seed = seed
        self.seconds = seconds
        self.plan = make_plan(seed, seconds, faults)
        self.sabotage = sabotage
        self.rng = random.Random(seed ^ 0x5EED)
        self.thread = ServerThread()
        self.server: EmbeddedAPIServer | None = None
        self.checker: Checker | None = None
        self.rest: Rest | None = None
        self.provider: Any = None
        self.slots = {
            "a": Slot("a", work / "manager-a.log"),
            "b": Slot("b", work / "manager-b.log", wanted=False),
        }
        self.webhooks: list[JSON] = []
        self.undo: list[Undo] = []
        self.faults_done: list[JSON] = []
        self.load_done: list[JSON] = []
        self.services: dict[str, bool] = {}  # name -> multi-host
        self.counter = 0
        self.started = 0.0
        self.foreign_slices: dict[str, JSON] = {}

    # -- the stage -------------------------------------------------------------------------

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        say("starting the embedded API server (in this process, with the invariant checker)")
        server = self.server = self.thread.start()
        self.checker = Checker(server.store, READY_STATES, SLICE_LABEL)
        self.checker.attach(server)
        kubeconfig = server.write_kubeconfig(self.work / "kubeconfig")
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)  # type: ignore[no-untyped-call]
        self.rest = Rest(client.ApiClient(cfg), user_agent=AGENT)
        self.webhooks = system.install(self.rest, Path("config"), GUIDE_CONFIG_JSON, say)
        for ns in (NS, FOREIGN_NS):
            self.rest.create(NAMESPACES, {"metadata": {"name": ns}})
        say(f"starting the provider with {HOSTS} provision-only tpu7x hosts")
        log = (self.work / "provider.log").open("w")
        self.provider = subprocess.Popen(
            [
                *(sys.executable, "-m", "ome_sim.cli", "provider", "--kubeconfig", str(kubeconfig)),
                *("--pool", f"tpu7x:provision-only:{HOSTS}"),
                *("--activation-delay", "1s", "--heartbeat-interval", "2s", "--scheduler", "on"),
            ],
            preexec_fn=system.die_with_parent,  # noqa: PLW1509 - only a C call, between fork and exec
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        _until(lambda: len(self._tpu_nodes()) >= HOSTS, 60, "the TPU nodes")
        self._start_slot(self.slots["a"])
        if self.slots["a"].proc is None:
            raise SoakError(f"the first manager did not start (its log: {self.slots['a'].log})")
        port = self.slots["a"].proc.wait_for_port("admission webhooks", 60)
        system.point_webhooks_at(self.rest, self.webhooks, port)
        _until(self._leader, 60, "a leader")

    def stop(self) -> None:
        for slot in self.slots.values():
            self._stop_slot(slot)
        if self.provider is not None:
            system.terminate(self.provider, 20)
        self.thread.stop()

    def _start_slot(self, slot: Slot) -> None:
        slot.starts += 1
        separator = None if slot.starts == 1 else f"restart {slot.starts - 1} of slot {slot.name}"
        env = {"OME_SIM_SABOTAGE": self.sabotage} if self.sabotage else {}
        slot.proc = system.start_manager(
            self.work / "kubeconfig",
            slot.log,
            ELECTION,
            slot.ports or None,
            separator,
            module="ome_sim.soak.sabotage" if self.sabotage else "ome.entrypoints.manager",
            env=env,
        )
        slot.restart_at = None
        try:
            for what in ("probes", "metrics", "admission webhooks"):
                slot.ports[what] = slot.proc.wait_for_port(what, 60)
        except system.StartError as e:  # it exited at start: restarted after a back-off
            say(f"manager {slot.name} did not start: {str(e).splitlines()[0]}")
            slot.proc = None
            slot.restart_at = time.monotonic() - self.started + 2.0

    def _stop_slot(self, slot: Slot) -> None:
        if slot.proc is not None:
            if slot.paused_until is not None:
                os.kill(slot.proc.pid, signal.SIGCONT)
                slot.paused_until = None
            slot.proc.stop(10)
            slot.proc = None

    def _supervise(self, now: float) -> None:
        """Resume paused managers when due; restart exited ones (at once, or when a kill's
        restart is due), as a Deployment's kubelet would."""
        for slot in self.slots.values():
            if slot.paused_until is not None and now >= slot.paused_until and slot.proc:
                os.kill(slot.proc.pid, signal.SIGCONT)
                slot.paused_until = None
            if not slot.wanted or slot.running() or slot.paused_until is not None:
                continue
            if slot.restart_at is None:
                slot.restart_at = now
            if now >= slot.restart_at:
                self._start_slot(slot)

    def _leader(self) -> Slot | None:
        assert self.rest is not None
        try:
            lease = self.rest.get(LEASES, "ome-controller-manager", system.NAMESPACE)
        except ApiException:
            return None
        holder = (lease.get("spec") or {}).get("holderIdentity")
        for slot in self.slots.values():
            if slot.running() and slot.proc is not None and slot.proc.identity == holder:
                return slot
        return None

    # -- reading ----------------------------------------------------------------------------

    def _list(self, res: Resource, namespace: str | None = None, **kw: Any) -> list[JSON]:
        assert self.rest is not None
        return list(self.rest.list(res, namespace, **kw)["items"])

    def _tpu_nodes(self) -> list[JSON]:
        return sorted(
            (
                n
                for n in self._list(NODES)
                if (n["metadata"].get("labels") or {}).get("cloud.google.com/gke-tpu-accelerator")
            ),
            key=lambda n: str(n["metadata"]["name"]),
        )

    def _ome_slices(self) -> list[JSON]:
        return sorted(
            self._list(gke.SLICES, label_selector=f"{LABEL_MANAGED_BY}=OMENative"),
            key=lambda s: str(s["metadata"]["name"]),
        )

    @staticmethod
    def _pick(items: list[Any], pick: float) -> Any:
        return items[min(int(pick * len(items)), len(items) - 1)] if items else None

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> None:
        self.started = time.monotonic()
        steps = list(self.plan)
        last_report = 0.0
        while True:
            now = time.monotonic() - self.started
            self._supervise(now)
            for undo in [u for u in self.undo if u.at <= now]:
                self.undo.remove(undo)
                self._safely(undo.what, undo.action)
            while steps and steps[0].at <= now:
                step = steps.pop(0)
                self._do(step, now)
            if now >= self.seconds and not steps:
                break
            if now - last_report >= 30:
                last_report = now
                checks, violations = self.checker.snapshot() if self.checker else ({}, [])
                say(
                    f"{now:.0f}s of {self.seconds:.0f}s: {len(self.faults_done)} faults, "
                    f"{sum(checks.values())} checks, {len(violations)} violations, "
                    f"{len(self.services)} services"
                )
            time.sleep(0.05)

    def _safely(self, what: str, action: Callable[[], None]) -> str:
        """Run a step's action; an API error is the step's outcome, not the soak's end."""
        try:
            action()
        except (ApiException, HTTPError, OSError, TimeoutError) as e:
            status = getattr(e, "status", None)
            return f"failed: {status or type(e).__name__} ({what})"
        return "done"

    def _do(self, step: Step, now: float) -> None:
        """Carry out one step; its outcome says what it hit, or why it was skipped."""
        record: JSON = {**step.json(), "ran_at": round(now, 2)}
        handler = getattr(self, "_" + step.kind.replace("-", "_"))
        outcome: list[str] = []

        def act() -> None:
            outcome.append(str(handler(step.params) or "done"))

        result = self._safely(step.kind, act)
        record["outcome"] = outcome[0] if outcome else result
        (self.faults_done if step.is_fault else self.load_done).append(record)
        say(f"{now:6.1f}s {step.kind}: {record['outcome']}")

    # -- load -------------------------------------------------------------------------------

    def _demand(self) -> int:
        total = 0
        for isvc in self._list(INFERENCE_SERVICES, NS):
            engine = isvc["spec"].get("engine") or {}
            hosts = 2 if engine.get("worker") else 1
            total += hosts * int(engine.get("minReplicas") or 1)
        return total

    def _create(self, params: JSON) -> str:
        multi = bool(params.get("multi_host"))
        if len(self.services) >= MAX_SERVICES or self._demand() + (2 if multi else 1) > HOST_BUDGET:
            return "skipped: at the soak's capacity budget"
        self.counter += 1
        name = f"svc-{self.counter:03d}"
        body = _sample(multi)
        body["metadata"] = {"name": name, "namespace": NS}
        assert self.rest is not None
        self.rest.create(INFERENCE_SERVICES, body, NS)
        self.services[name] = multi
        return f"created {name} ({'multi-host 2x2x2' if multi else 'single-host 2x2x1'})"

    def _service(self, pick: float) -> str | None:
        return self._pick(sorted(self.services), pick)  # type: ignore[no-any-return]

    def _scale(self, params: JSON) -> str:
        name = self._service(params["pick"])
        if name is None:
            return "skipped: no service"
        replicas = int(params["replicas"])
        hosts = 2 if self.services[name] else 1
        assert self.rest is not None
        current = self.rest.get(INFERENCE_SERVICES, name, NS)
        now = int((current["spec"].get("engine") or {}).get("minReplicas") or 1)
        if self._demand() + hosts * (replicas - now) > HOST_BUDGET:
            return f"skipped: {name} to {replicas} is over the capacity budget"
        patch = {"spec": {"engine": {"minReplicas": replicas, "maxReplicas": replicas}}}
        self.rest.patch(INFERENCE_SERVICES, name, patch, NS)
        return f"scaled {name} to {replicas}"

    def _update(self, params: JSON) -> str:
        name = self._service(params["pick"])
        if name is None:
            return "skipped: no service"
        patch = {"spec": {"engine": {"labels": {"soak.ome.io/rev": params["value"]}}}}
        assert self.rest is not None
        self.rest.patch(INFERENCE_SERVICES, name, patch, NS)
        return f"updated {name} (label soak.ome.io/rev={params['value']})"

    def _delete(self, params: JSON) -> str:
        name = self._service(params["pick"])
        if name is None:
            return "skipped: no service"
        assert self.rest is not None
        self.rest.delete(INFERENCE_SERVICES, name, NS)
        del self.services[name]
        return f"deleted {name}"

    # -- faults -----------------------------------------------------------------------------

    def _server_call(self, fn: Callable[[], Any]) -> Any:
        return self.thread.call(fn)

    def _api_5xx(self, params: JSON) -> str:
        assert self.server is not None
        fault = Fault(
            verb=params["verb"],
            code=params["code"],
            times=params["times"],
            user_agent="ome-manager",
        )
        self.server.faults.add(fault)
        what = params["verb"] or "requests"
        return f"{params['code']} on the manager's next {params['times']} {what}"

    def _api_429(self, params: JSON) -> str:
        assert self.server is not None
        self.server.faults.add(
            Fault(
                verb=params["verb"],
                code=429,
                retry_after=1,
                times=params["times"],
                user_agent="ome-manager",
            )
        )
        return f"429 on the manager's next {params['times']} {params['verb'] or 'requests'}"

    def _watch_dropped(self, params: JSON) -> str:
        server = self.server
        assert server is not None
        n = self._server_call(lambda: server.drop_watches(params["resource"], params["mode"]))
        return f"{params['mode']} {n} watches of {params['resource'] or 'every resource'}"

    def _watch_expired(self, params: JSON) -> str:
        assert self.server is not None
        self.server.faults.add(
            Fault(verb="watch", code=410, times=params["times"], user_agent="ome-manager")
        )
        return f"410 on the manager's next {params['times']} watches"

    def _compaction(self, params: JSON) -> str:
        server = self.server
        assert server is not None
        self._server_call(server.store.compact)
        n = self._server_call(lambda: server.drop_watches("", "close"))
        return f"compacted; closed {n} watches"

    def _manager_killed(self, params: JSON) -> str:
        running = [s for s in self.slots.values() if s.running() and s.paused_until is None]
        slot = self._pick(running, params["pick"])
        if slot is None or slot.proc is None:
            return "skipped: no manager running"
        os.kill(slot.proc.pid, signal.SIGKILL)
        slot.proc.proc.wait()
        slot.restart_at = time.monotonic() - self.started + float(params["restart_after"])
        after = params["restart_after"]
        return f"kill -9 of manager {slot.name} (pid {slot.proc.pid}); restart in {after}s"

    def _leader_paused(self, params: JSON) -> str:
        slot = self._leader()
        if slot is None or slot.proc is None or slot.paused_until is not None:
            return "skipped: no leader to pause"
        pause = LEASE_S + float(params["beyond_lease"])
        os.kill(slot.proc.pid, signal.SIGSTOP)
        slot.paused_until = time.monotonic() - self.started + pause
        return f"SIGSTOP of leader {slot.name} (pid {slot.proc.pid}) for {pause:.1f}s"

    def _second_manager(self, params: JSON) -> str:
        slot = self.slots["b"]
        if slot.wanted:
            return "skipped: the second manager runs already"
        slot.wanted = True
        self._start_slot(slot)

        def stop() -> None:
            slot.wanted = False
            self._stop_slot(slot)

        self._later(float(params["for"]), "stop the second manager", stop)
        return f"a second manager (pid {slot.proc.pid if slot.proc else '?'}) for {params['for']}s"

    def _later(self, after: float, what: str, action: Callable[[], None]) -> None:
        self.undo.append(Undo(time.monotonic() - self.started + after, what, action))

    def _annotate(self, res: Resource, name: str, key: str, value: str | None) -> None:
        assert self.rest is not None
        self.rest.patch(res, name, {"metadata": {"annotations": {key: value}}})

    def _live_slice(self, pick: float, active: bool | None = None) -> JSON | None:
        slices = [s for s in self._ome_slices() if not s["metadata"].get("deletionTimestamp")]
        if active is not None:
            slices = [s for s in slices if gke.parse(s).ready(READY_STATES) == active] or slices
        return self._pick(slices, pick)  # type: ignore[no-any-return]

    def _slice_deleted(self, params: JSON) -> str:
        obj = self._live_slice(params["pick"])
        if obj is None:
            return "skipped: no OME Slice"
        assert self.rest is not None
        self.rest.delete(gke.SLICES, obj["metadata"]["name"])
        return f"deleted Slice {obj['metadata']['name']} from outside"

    def _slice_moved(self, params: JSON) -> str:
        obj = self._live_slice(params["pick"], active=True)
        if obj is None:
            return "skipped: no OME Slice"
        name = obj["metadata"]["name"]
        self._annotate(gke.SLICES, name, KNOB["move"], f"soak-{self.rng.randint(0, 10**9)}")
        return f"moved Slice {name}"

    def _timed_knob(self, res: Resource, name: str, knob: str, seconds: float) -> None:
        self._annotate(res, name, KNOB[knob], "true")

        def undo() -> None:
            try:
                self._annotate(res, name, KNOB[knob], None)
            except ApiException as e:
                if e.status != 404:
                    raise

        self._later(seconds, f"{knob} off {name}", undo)

    def _partitions_dropped(self, params: JSON) -> str:
        obj = self._live_slice(params["pick"], active=True)
        if obj is None:
            return "skipped: no OME Slice"
        name = obj["metadata"]["name"]
        self._timed_knob(gke.SLICES, name, "drop-partitions", params["for"])
        return f"Slice {name} drops its partitions for {params['for']}s"

    def _slice_stuck(self, params: JSON) -> str:
        obj = self._live_slice(params["pick"], active=False)
        if obj is None:
            return "skipped: no OME Slice"
        name = obj["metadata"]["name"]
        self._timed_knob(gke.SLICES, name, "stick-activating", params["for"])
        return f"Slice {name} stays ACTIVATING for {params['for']}s"

    def _host(self, pick: float) -> str | None:
        nodes = self._tpu_nodes()
        busy = [n for n in nodes if (n["metadata"].get("labels") or {}).get(SLICE_LABEL)]
        node = self._pick(busy or nodes, pick)
        return str(node["metadata"]["name"]) if node else None

    def _host_cordoned(self, params: JSON) -> str:
        name = self._host(params["pick"])
        if name is None:
            return "skipped: no host"
        assert self.rest is not None
        rest = self.rest
        rest.patch(NODES, name, {"spec": {"unschedulable": True}})

        def uncordon() -> None:
            rest.patch(NODES, name, {"spec": {"unschedulable": None}})

        self._later(params["for"], f"uncordon {name}", uncordon)
        return f"cordoned {name} for {params['for']}s"

    def _host_not_ready(self, params: JSON) -> str:
        name = self._host(params["pick"])
        if name is None:
            return "skipped: no host"
        self._timed_knob(NODES, name, "not-ready", params["for"])
        return f"{name} NotReady for {params['for']}s"

    def _host_unreachable(self, params: JSON) -> str:
        name = self._host(params["pick"])
        if name is None:
            return "skipped: no host"
        self._timed_knob(NODES, name, "unreachable", params["for"])
        return f"{name} unreachable for {params['for']}s"

    def _foreign_pod(self, params: JSON) -> str:
        name = self._host(params["pick"])
        if name is None:
            return "skipped: no host"
        pod_name = f"holder-{self.rng.randint(0, 10**9)}"
        assert self.rest is not None
        rest = self.rest
        rest.create(PODS, _holder(pod_name, name), FOREIGN_NS)

        def undo() -> None:
            try:
                rest.delete(PODS, pod_name, FOREIGN_NS)
            except ApiException as e:
                if e.status != 404:
                    raise

        self._later(params["for"], f"delete pod {pod_name}", undo)
        return f"pod {FOREIGN_NS}/{pod_name} holds the chips of {name} for {params['for']}s"

    def _foreign_slice(self, params: JSON) -> str:
        if len(self.foreign_slices) >= MAX_FOREIGN_SLICES:
            return "skipped: enough foreign Slices"
        name = f"foreign-{self.rng.randint(0, 10**9)}"
        where = "a name of its own"
        if params.get("at_ome_name"):
            replicas = self._list(INFERENCE_REPLICAS, NS)
            replica = self._pick(
                sorted(replicas, key=lambda r: r["metadata"]["name"]), params["pick"]
            )
            if replica is not None and not replica["metadata"].get("deletionTimestamp"):
                meta = replica["metadata"]
                index = int(replica["spec"].get("replicas") or 1)  # the next scale-up's slot
                name = naming.slice_name(
                    meta["name"],
                    naming.Slot(index, 0),
                    naming.owner_hash(NS, meta["name"], meta["uid"]),
                )
                where = f"the name OME gives Instance {index} of {meta['name']}"
        body = {
            "apiVersion": gke.API_VERSION,
            "kind": gke.KIND,
            "metadata": {"name": name, "labels": {"team": "someone-else"}},
            "spec": {"type": "tpu7x", "topology": UNPLACEABLE, "partitionIds": []},
        }
        assert self.rest is not None and self.checker is not None
        self.checker.register_foreign(name, "")
        made = self.rest.create(gke.SLICES, body)
        self.checker.register_foreign(name, str(made["metadata"]["uid"]))
        rest = self.rest

        # What GKE does to any Slice (its finalizer) is the state OME must then leave alone.
        def finalized() -> JSON | None:
            obj: JSON = rest.get(gke.SLICES, name)
            return obj if SLICE_FINALIZER in (obj["metadata"].get("finalizers") or []) else None

        self.foreign_slices[name] = _until(finalized, 10, f"GKE's finalizer on Slice {name}")
        return f"foreign Slice {name} at {where}"

    def _replica_finalizer_removed(self, params: JSON) -> str:
        """A person gives up on a replica's teardown: the replica deleted and, at once, its
        finalizer removed by force. Its pods go with it (the garbage collector) and its
        Slices are left with an owner UID nobody has; the service makes a new replica."""
        name = self._service(params["pick"])
        if name is None:
            return "skipped: no service"
        replica = f"{name}-engine"
        assert self.rest is not None
        try:
            self.rest.delete(INFERENCE_REPLICAS, replica, NS)
            self.rest.patch(INFERENCE_REPLICAS, replica, {"metadata": {"finalizers": None}}, NS)
        except ApiException as e:
            if e.status != 404:
                raise
            return f"skipped: replica {replica} went before its finalizer was removed"
        return f"deleted replica {replica} with its finalizer removed by force"

    # -- the end ----------------------------------------------------------------------------

    def end_faults(self) -> None:
        """Clear and undo every fault; one manager (slot a) left running."""
        assert self.server is not None
        self.server.faults.clear()
        for undo in sorted(self.undo, key=lambda u: u.at):
            self._safely(undo.what, undo.action)
        self.undo.clear()
        slot_b = self.slots["b"]
        slot_b.wanted = False
        self._stop_slot(slot_b)
        self._supervise(float("inf"))
        for slot in self.slots.values():
            slot.restart_at = None
        self._supervise(time.monotonic() - self.started)

    def converge(self, timeout: float = CONVERGE_S) -> tuple[float | None, str]:
        """Seconds until converged, or None and what was still wrong at the deadline."""
        started = time.monotonic()
        why = "not checked"
        while time.monotonic() - started < timeout:
            self._supervise(time.monotonic() - self.started)
            try:
                why = self._not_converged()
            except (ApiException, HTTPError, OSError) as e:
                why = f"cannot read the cluster: {e}"
            if not why:
                return time.monotonic() - started, ""
            time.sleep(0.5)
        return None, why

    def _not_converged(self) -> str:
        """What still differs from converged: every service Ready and observed at its
        generation; every replica of a live service observed, with one Ready row per
        Instance and no operation; no replica of a deleted service; no leak; every OME pod
        Running and none going."""
        problems = []
        isvcs = {i["metadata"]["name"]: i for i in self._list(INFERENCE_SERVICES, NS)}
        for name in sorted(self.services):
            isvc = isvcs.get(name) or {}
            status = isvc.get("status") or {}
            conditions = status.get("conditions") or []
            if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                problems.append(f"service {name} is not Ready")
            elif status.get("observedGeneration") != (isvc.get("metadata") or {}).get("generation"):
                problems.append(f"service {name} is not observed at its generation yet")
        gone = sorted(set(isvcs) - set(self.services))
        if gone:
            problems.append(f"services still there: {', '.join(gone)}")
        for replica in self._list(INFERENCE_REPLICAS, NS):
            meta, status = replica["metadata"], replica.get("status") or {}
            if meta.get("deletionTimestamp") or not any(
                meta["name"].startswith(f"{s}-") for s in self.services
            ):
                problems.append(f"replica {meta['name']} of a deleted service is still there")
                continue
            if status.get("observedGeneration") != meta.get("generation"):
                problems.append(f"replica {meta['name']} is not observed at its generation")
                continue
            rows = status.get("instanceStatuses") or []
            unready = [
                str(r.get("index")) for r in rows if r.get("phase") != "Ready" or r.get("operation")
            ]
            if len(rows) != int(replica["spec"].get("replicas") or 0) or unready:
                want = replica["spec"].get("replicas")
                problems.append(
                    f"replica {meta['name']}: {len(rows)} rows for {want} Instances, not "
                    f"Ready or busy: {', '.join(unready) or '-'}"
                )
        problems += self.leaks()
        terminating = [
            s["metadata"]["name"]
            for s in self._ome_slices()
            if s["metadata"].get("deletionTimestamp")
        ]
        if terminating:
            problems.append(f"Slices still terminating: {', '.join(terminating)}")
        unsettled = [
            p["metadata"]["name"]
            for p in self._list(PODS, NS)
            if (p.get("status") or {}).get("phase") != "Running"
            or p["metadata"].get("deletionTimestamp")
        ]
        if unsettled:
            problems.append(f"pods not Running or going: {', '.join(sorted(unsettled))}")
        return "; ".join(problems)

    def leaks(self) -> list[str]:
        """Each live OME Slice must be wanted by exactly one slot of a live replica."""
        wanted: dict[str, str] = {}
        for replica in self._list(INFERENCE_REPLICAS, NS):
            meta = replica["metadata"]
            if meta.get("deletionTimestamp"):
                continue  # a replica going wants nothing
            hash8 = naming.owner_hash(NS, meta["name"], meta["uid"])
            runners = replica["spec"].get("runners") or []
            multi = any(r.get("name") in ("leader", "worker") for r in runners)
            for row in (replica.get("status") or {}).get("instanceStatuses") or []:
                ordinal = 0 if multi else int(row.get("activeOrdinal") or 0)
                slot = naming.Slot(int(row["index"]), ordinal)
                wanted[naming.slice_name(meta["name"], slot, hash8)] = (
                    f"{meta['name']} instance {slot.instance} ordinal {slot.ordinal}"
                )
        out = []
        for s in self._ome_slices():
            name = s["metadata"]["name"]
            if name not in wanted:
                state = gke.parse(s).state or "<none>"
                out.append(f"Slice {name} ({state}) is wanted by no slot")
        live = {s["metadata"]["name"] for s in self._ome_slices()}
        for name, where in sorted(wanted.items()):
            if name not in live:
                out.append(f"slot {where} has no Slice {name}")
        return out

    def state(self) -> list[str]:
        """What a failed convergence leaves to look at: each replica's Instances, its pods,
        and the OME Slices with their histories (the checker's)."""
        out = []
        for replica in self._list(INFERENCE_REPLICAS, NS):
            meta, status = replica["metadata"], replica.get("status") or {}
            rows = [
                {
                    k: r.get(k)
                    for k in ("index", "phase", "activeOrdinal", "operation", "podCount")
                    if r.get(k) is not None
                }
                for r in status.get("instanceStatuses") or []
            ]
            out.append(
                f"state: replica {meta['name']} replicas={replica['spec'].get('replicas')} "
                f"deleting={bool(meta.get('deletionTimestamp'))} rows={json.dumps(rows)}"
            )
        for pod in self._list(PODS):
            spec = pod.get("spec") or {}
            out.append(
                f"state: pod {pod['metadata']['namespace']}/{pod['metadata']['name']} "
                f"phase={(pod.get('status') or {}).get('phase')} node={spec.get('nodeName')} "
                f"slice={(spec.get('nodeSelector') or {}).get(SLICE_LABEL)}"
            )
        assert self.checker is not None
        for obj in self._ome_slices():
            name = obj["metadata"]["name"]
            info = gke.parse(obj)
            out.append(
                f"state: Slice {name} state={info.state} partitions={list(info.partitions)} "
                f"slot={info.slot} owner={info.owner_uid}"
            )
            for entry in self.checker.history(f"slices/{name}")[-12:]:
                out.append(f"state:   {json.dumps(entry, sort_keys=True)}")
        return out

    def tracebacks(self) -> list[str]:
        """A traceback in a manager's log is a bug (routine API errors get one line)."""
        out = []
        for slot in self.slots.values():
            if not slot.log.exists():
                continue
            for n, line in enumerate(slot.log.read_text(errors="replace").splitlines(), 1):
                if "Traceback (most recent call last)" in line:
                    out.append(f"a traceback in {slot.log.name}, line {n}: {line[:300]}")
        return out

    def foreign_unchanged(self) -> list[str]:
        out = []
        for name, made in sorted(self.foreign_slices.items()):
            assert self.rest is not None
            try:
                now = self.rest.get(gke.SLICES, name)
            except ApiException as e:
                out.append(f"foreign Slice {name}: {e.status} on read")
                continue
            if json.dumps(now, sort_keys=True) != json.dumps(made, sort_keys=True):
                out.append(f"foreign Slice {name} changed: was {made}, is {now}")
        return out

    def remove_foreign(self) -> None:
        assert self.rest is not None
        for name in list(self.foreign_slices):
            try:
                self.rest.delete(gke.SLICES, name)
            except ApiException as e:
                if e.status != 404:
                    raise
        self.foreign_slices.clear()

    # -- the metrics probe -----------------------------------------------------------------

    def metrics_probe(self) -> tuple[JSON, list[str]]:
        """Against the leader: a Slice deleted from outside (a loss) and a release deferred by
        a foreign pod; then its counters' increments must agree with what the server saw:
        ``lost_total`` rises by the SliceLost events' count and ``released_total`` by the
        Slice deletes it sent; ``release_deferred_total`` counts every deferred try, and the
        SliceReleaseDeferred Warning of a deferral that lasts is recorded when it starts and
        then about once a minute, so its count rises by at least one and by no more than the
        counter."""
        slot = self._leader()
        assert self.rest is not None and self.checker is not None
        if slot is None or slot.proc is None:
            return {}, ["no leader for the metrics probe"]
        identity = slot.proc.identity
        before = self._counters(slot), self._event_counts(), self.checker.slice_deletes[identity]
        problems: list[str] = []
        # Two services, one for each: the release deferred is of the last one, the loss of
        # another (a Slice of the service being deleted would be no loss).
        name = sorted(self.services)[-1] if self.services else None
        # A loss: a Slice of another Ready service deleted from outside; it is rebuilt.
        others = [
            s
            for s in self._ome_slices()
            if not s["metadata"].get("deletionTimestamp")
            and gke.parse(s).ready(READY_STATES)
            and not (name and str(s["metadata"]["name"]).startswith(f"{name}-"))
        ]
        if others:
            self.rest.delete(gke.SLICES, others[0]["metadata"]["name"])
        # A deferred release: a foreign pod on the hosts of a service that is then deleted.
        holder = None
        if name is not None:
            hosts = [
                n["metadata"]["name"]
                for n in self._tpu_nodes()
                if str((n["metadata"].get("labels") or {}).get(SLICE_LABEL, "")).startswith(
                    f"{name}-"
                )
            ]
            if hosts:
                holder = f"probe-holder-{self.seed}"
                self.rest.create(PODS, _holder(holder, hosts[0]), FOREIGN_NS)
                self.rest.delete(INFERENCE_SERVICES, name, NS)
                del self.services[name]
                _until(
                    lambda: self._counters(slot)["deferred"] > before[0]["deferred"],
                    60,
                    "a deferred release",
                )
                self.rest.delete(PODS, holder, FOREIGN_NS)
        took, why = self.converge()
        if took is None:
            problems.append(f"the probe did not converge: {why}")

        def agree() -> list[str]:
            counters, events = self._counters(slot), self._event_counts()
            deletes = self.checker.slice_deletes[identity] if self.checker else 0
            wrong = []
            got, seen = (
                counters["lost"] - before[0]["lost"],
                events["SliceLost"] - before[1]["SliceLost"],
            )
            if got != seen:
                wrong.append(
                    f"ome_tpu_slice_lost_total rose by {got:g}, SliceLost events by {seen:g}"
                )
            got = counters["deferred"] - before[0]["deferred"]
            seen = events["SliceReleaseDeferred"] - before[1]["SliceReleaseDeferred"]
            if seen > got or (holder is not None and seen < 1):
                wrong.append(
                    f"ome_tpu_slice_release_deferred_total rose by {got:g}, SliceReleaseDeferred "
                    f"events by {seen:g} (at least one, at most the counter's rise)"
                )
            got = counters["released"] - before[0]["released"]
            if got != deletes - before[2]:
                wrong.append(
                    f"ome_tpu_slice_released_total rose by {got:g}, the Slice deletes the "
                    f"server saw from the leader by {deletes - before[2]}"
                )
            return wrong

        deadline = time.monotonic() + 15  # events are written by a background thread
        wrong = agree()
        while wrong and time.monotonic() < deadline:
            time.sleep(0.5)
            wrong = agree()
        after = self._counters(slot)
        figures = {k: after[k] - before[0][k] for k in after}
        return figures, problems + wrong

    def _counters(self, slot: Slot) -> dict[str, float]:
        assert slot.proc is not None
        import urllib.request  # noqa: PLC0415 - only the probe reads metrics

        port = slot.ports["metrics"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        out = {"lost": 0.0, "deferred": 0.0, "released": 0.0}
        names = {
            "ome_tpu_slice_lost_total{": "lost",
            "ome_tpu_slice_release_deferred_total{": "deferred",
            "ome_tpu_slice_released_total{": "released",
        }
        for line in text.splitlines():
            for prefix, key in names.items():
                if line.startswith(prefix):
                    out[key] += float(line.rsplit(" ", 1)[1])
        return out

    def _event_counts(self) -> dict[str, float]:
        out = {"SliceLost": 0.0, "SliceReleaseDeferred": 0.0}
        for ev in self._list(EVENTS, NS):
            if ev.get("reason") in out:
                out[str(ev["reason"])] += float(ev.get("count") or 1)
        return out

    # -- the report ---------------------------------------------------------------------------

    def report(self, converged_s: float | None, problems: list[str], probe: JSON) -> JSON:
        assert self.checker is not None
        checked = self.checker.report()
        ran = [f for f in self.faults_done if _ran(f)]
        kinds = sorted({f["kind"] for f in ran})
        return {
            "seed": self.seed,
            "seconds": self.seconds,
            "sabotage": self.sabotage or None,
            "faults": self.faults_done,
            "faults_run": len(ran),
            "fault_kinds": kinds,
            "load": self.load_done,
            "checks": checked["checks"],
            "invariants": list(INVARIANTS),
            "violations": checked["violations"],
            "converged_s": converged_s,
            "end_problems": problems,
            "metrics_probe": probe,
            "manager_writes": self._manager_writes(),
            "check_log": checked["log"],
        }

    def _manager_writes(self) -> dict[str, int]:
        """The managers' writes the server counted, by verb and resource: what the soak cost
        the API server (events included)."""
        if self.server is None:
            return {}
        writes: dict[str, int] = {}
        for row in self.server.accounting.snapshot():
            if row["verb"] in WRITE_VERBS and str(row["userAgent"]).startswith("ome-manager"):
                key = f"{row['verb']} {row['resource']}"
                writes[key] = writes.get(key, 0) + int(row["count"])
        return dict(sorted(writes.items()))


def _ran(step: JSON) -> bool:
    """Whether a step did something: not skipped (nothing to hit), not refused by the API."""
    return not str(step["outcome"]).startswith(("skipped", "failed"))


def _holder(name: str, node: str) -> JSON:
    """A pod of another workload, bound to ``node``, holding its four chips."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "someone-else"}},
        "spec": {
            "nodeName": node,
            "tolerations": [
                {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [
                {
                    "name": "c",
                    "image": "registry.example/holder:1",
                    "resources": {
                        "requests": {"google.com/tpu": "4"},
                        "limits": {"google.com/tpu": "4"},
                    },
                }
            ],
        },
    }


def _sample(multi_host: bool) -> JSON:
    path = "config/samples/qwen3-tpu-multihost-isvc.yaml" if multi_host else system.GUIDE_SAMPLE
    docs = system.read_manifests(Path(path))
    return json_copy(next(d for d in docs if d.get("kind") == "InferenceService"))


def _until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
        except (ApiException, HTTPError, OSError):
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not there within {timeout:.0f}s")
        time.sleep(0.1)


def run(
    minutes: float,
    seed: int | None,
    out_dir: Path,
    faults: tuple[str, ...] = tuple(FAULTS),
    sabotage: str = "",
) -> int:
    """One soak; 0 when there was no violation and everything converged, else 1."""
    seed = seed if seed is not None else random.SystemRandom().randint(1, 2**31)
    say(f"seed {seed} (replay: ome-sim soak --seed {seed} --minutes {minutes:g})")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    soak = Soak(out_dir / f"stage-{stamp}", seed, minutes * 60, faults, sabotage)
    converged: float | None = None
    problems: list[str] = []
    probe: JSON = {}
    try:
        soak.start()
        soak.run()
        say("faults over: clearing and undoing them")
        soak.end_faults()
        problems += soak.foreign_unchanged()
        soak.remove_foreign()  # those at OME's names would hold their slots forever
        # After a violation the run fails anyway: a short look at convergence is enough.
        violated = bool(soak.checker and soak.checker.snapshot()[1])
        budget = 15.0 if violated else CONVERGE_S
        converged, why = soak.converge(budget)
        if converged is None:
            problems.append(f"not converged within {budget:.0f}s: {why}")
            problems += soak.state()
        else:
            probe, wrong = soak.metrics_probe()
            problems += wrong
    except (TimeoutError, SoakError, system.StartError, ApiException, HTTPError) as e:
        problems.append(f"the soak could not go on: {e}")
    finally:
        soak.stop()
    problems += soak.tracebacks()
    report = soak.report(converged, problems, probe)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{stamp}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    violations = report["violations"]
    for v in violations:
        print(f"VIOLATION [{v['invariant']}] at {v['at']:.1f}s: {v['message']}")
        for key, entries in v["history"].items():
            print(f"  history of {key}:")
            for entry in entries:
                print(f"    {json.dumps(entry, sort_keys=True)}")
    for problem in problems:
        print(f"FAILED: {problem}")
    checks = sum(report["checks"].values())
    took = f"converged in {converged:.0f}s" if converged is not None else "did not converge"
    ran = report["faults_run"]
    skipped = len(report["faults"]) - ran
    print(
        f"{ran} faults ({len(report['fault_kinds'])} kinds; {skipped} more found nothing to "
        f"hit), {checks} invariant checks, {len(violations)} violations, {took} (seed {seed}; "
        f"report {path})"
    )
    return 1 if violations or problems else 0

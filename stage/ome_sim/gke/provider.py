"""The simulated GKE provider: TPU node pools with heartbeats, the Slice scheduler, and
scheduler and kubelet stand-ins, driven by informers and carried out through the API.

It talks to any API server through the official client (``ome.runtime.rest``), so it runs
the same against the embedded server and a kind cluster. Work is event-driven: informer
events and timers put keys on one queue, and a single thread takes them, reads the caches,
asks ``decide`` what to do and writes the result. Nothing changes, nothing is written, but
for heartbeats.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import logging
import queue
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from cachetools import TTLCache
from kubernetes.client.exceptions import ApiException

from ome.durations import parse_go_duration
from ome.kube import Resource
from ome.runtime.informer import (
    DeletedFinalStateUnknown,
    EventHandler,
    Informer,
    deleted_object,
    object_key,
)
from ome.runtime.rest import BINDINGS, CRDS, LEASES, NODES, PODS, Rest
from ome.tpuslice.shape import ShapeError

from . import decide
from .kubeletapi import KubeletServer, LogStore
from .model import (
    ACTIVATING,
    ACTIVE,
    ACTIVE_DEGRADED,
    CREATION_FAILED,
    DEACTIVATING,
    FAILED,
    KNOB,
    MOVED_ANNOTATION,
    POOL_LABEL,
    SLICE_FINALIZER,
    SLICE_GROUP,
    SLICE_LABEL,
    SLICE_PLURAL,
    SLICE_VERSION,
    TOPOLOGY_LABEL,
    TPU_TAINT,
    Pool,
    condition,
    kubelet_endpoint_status,
    node_object,
    slice_state,
    system_node_names,
    system_node_object,
    truthy,
)
from .podrunner import PodRunner
from .serviceproxy import ServiceProxy

JSON = dict[str, Any]
log = logging.getLogger(__name__)

SLICES = Resource(SLICE_GROUP, SLICE_VERSION, SLICE_PLURAL, namespaced=False)
SERVICES = Resource("", "v1", "services")
NODE_LEASE_NAMESPACE = "kube-node-lease"
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
UNREACHABLE_TAINT = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}
#: How long a write the informers have not shown yet is trusted (client-go's expectations).
EXPECTATION_TTL = 30.0
RETRY_SECONDS = 1.0


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_duration(text: str) -> float:
    """Seconds from ``30s``, ``2m``, ``1m30s``, ``500ms`` (Go's syntax) or a bare number."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return parse_go_duration(text).total_seconds()


@dataclass
class Options:
    activation_delay: float = 2.0
    heartbeat_interval: float = 10.0
    status_interval: float = 60.0
    #: auto: schedule pods only when the cluster has no kube-scheduler (no Lease for it).
    scheduler: str = "auto"
    #: Untainted general-purpose nodes (``gke-default-pool-node-<i>``, no TPUs), for pods
    #: that tolerate no TPU taint, such as the manager's.
    system_nodes: int = 0
    #: Image repositories (without the tag) whose pods on our nodes run as processes
    #: (``podrunner``: the image's entrypoint is ``ome-manager``). Non-empty turns the
    #: kubelet API on too.
    run_images: tuple[str, ...] = ()
    #: Serve the kubelet API's container logs (``kubeletapi``) and advertise it on our
    #: nodes (InternalIP 127.0.0.1, daemonEndpoints), so that ``kubectl logs`` works.
    kubelet_api: bool = False
    #: Where pods' logs and kubeconfigs go; empty: a temporary directory, removed on stop.
    pod_dir: str = ""


def install_slice_crd(rest: Rest, timeout: float = 30.0) -> bool:
    """Create the fake Slice CRD unless present; wait until it is served. True if created."""
    text = (
        resources.files("ome_sim.gke").joinpath("crds/slices.accelerator.gke.io.yaml").read_text()
    )
    crd = yaml.safe_load(text)
    created = False
    try:
        rest.get(CRDS, crd["metadata"]["name"])
    except ApiException as e:
        if e.status != 404:
            raise
        rest.create(CRDS, crd)
        created = True
    deadline = time.monotonic() + timeout
    while True:
        try:
            rest.list(SLICES, limit=1)
            return created
        except ApiException as e:
            if e.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.1)  # a real API server serves a new CRD after a moment


class Provider:
    """Plays GKE for the pools it is given. ``start()`` returns once its caches are filled."""

    def __init__(self, rest: Rest, pools: list[Pool], options: Options | None = None) -> None:
        self.rest = rest
        self.pools = pools
        self.options = options or Options()
        self.slices = Informer(rest, SLICES)
        self.nodes = Informer(rest, NODES)
        self.pods = Informer(rest, PODS)
        self.scheduling = False
        #: Work done, by kind, for tests and logs: a quiet cluster leaves it unchanged but
        #: for heartbeats.
        self.work: Counter[str] = Counter()
        self._queue: queue.Queue[Hashable] = queue.Queue()
        self._pending: set[Hashable] = set()
        self._pending_lock = threading.Lock()
        self._timers: list[tuple[float, int, Hashable]] = []
        self._timer_lock = threading.Lock()
        self._seq = itertools.count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._activate_at: dict[str, float] = {}
        #: slice name -> node names it was just given (until the informer shows it)
        self._assigned: TTLCache[str, tuple[str, ...]] = TTLCache(
            maxsize=100_000, ttl=EXPECTATION_TTL
        )
        #: pod UID -> (node, requests) of binds the informer has not shown yet (by UID: a pod
        #: deleted and created again under its name is a new pod)
        self._bound: TTLCache[str, tuple[str, dict[str, Decimal]]] = TTLCache(
            maxsize=100_000, ttl=EXPECTATION_TTL
        )
        self._pods_by_node: dict[str, set[str]] = {}
        self._index_lock = threading.Lock()
        self._tpu_nodes = {n for p in pools for n in p.node_names()}
        self._system_nodes = set(system_node_names(self.options.system_nodes))
        self._our_nodes = self._tpu_nodes | self._system_nodes
        self.logs: LogStore | None = None
        self.kubelet_server: KubeletServer | None = None
        self.runner: PodRunner | None = None
        #: kube-proxy's stand-in and the Services it proxies, with run_images only
        self.services: Informer | None = None
        self.proxy: ServiceProxy | None = None
        self._pod_dir: Path | None = None
        self._own_pod_dir = False

    # -- lifecycle -----------------------------------------------------------------------

    def start(
        self, progress: Callable[[str], None] = lambda _msg: None, timeout: float = 60.0
    ) -> None:
        self.scheduling = self._want_scheduler()
        if self.options.kubelet_api or self.options.run_images:
            self._start_kubelet(progress)
        if self.options.system_nodes:
            progress(f"creating node pool default-pool: {self.options.system_nodes} nodes")
            self._ensure_system_nodes()
        for pool in self.pools:
            progress(
                f"creating node pool {pool.name}: {pool.size} {pool.tpu_type} {pool.mode} hosts"
            )
            self._ensure_nodes(pool)
        self.slices.add_handler(
            EventHandler(self._slice_added, self._slice_updated, self._slice_deleted)
        )
        self.nodes.add_handler(
            EventHandler(self._node_event, lambda _o, n: self._node_event(n), self._node_event)
        )
        self.pods.add_handler(EventHandler(self._pod_added, self._pod_updated, self._pod_deleted))
        informers = [self.nodes, self.pods, self.slices]
        if self.runner is not None:
            self.services = Informer(self.rest, SERVICES)
            self.proxy = ServiceProxy(self.services.list, self.pods.list)
            self.services.add_handler(
                EventHandler(
                    lambda _s: self._enqueue(("services",)),
                    lambda _o, _n: self._enqueue(("services",)),
                    lambda _s: self._enqueue(("services",)),
                )
            )
            informers.append(self.services)
        for informer in informers:
            informer.start()
        for informer in informers:
            if not informer.wait_for_sync(timeout):
                raise TimeoutError(
                    f"the provider's {informer.name} cache did not fill in {timeout:.0f}s"
                )
        self._thread = threading.Thread(target=self._loop, name="gke-provider", daemon=True)
        self._thread.start()
        self._after(0, ("heartbeat",))
        self._after(self.options.status_interval, ("node-status",))
        self._enqueue(("assign",))
        self._enqueue(("schedule",))
        progress(
            "provider running: slice scheduler, heartbeats, kubelet"
            + (", pod scheduler" if self.scheduling else " (the cluster's scheduler binds pods)")
        )

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(("stop",))
        if self._thread is not None:
            self._thread.join(10)
        if self.proxy is not None:
            self.proxy.stop()
        if self.services is not None:
            self.services.stop()
        if self.runner is not None:
            self.runner.stop()
        if self.kubelet_server is not None:
            self.kubelet_server.stop()
        for informer in (self.slices, self.nodes, self.pods):
            informer.stop()
        if self._own_pod_dir and self._pod_dir is not None:
            shutil.rmtree(self._pod_dir, ignore_errors=True)

    def _start_kubelet(self, progress: Callable[[str], None]) -> None:
        if self.options.pod_dir:
            self._pod_dir = Path(self.options.pod_dir)
            self._pod_dir.mkdir(parents=True, exist_ok=True)
        else:
            self._pod_dir = Path(tempfile.mkdtemp(prefix="ome-sim-pods-"))
            self._own_pod_dir = True
        self.logs = LogStore(self._pod_dir / "logs")
        self.kubelet_server = KubeletServer(self.logs)
        self.kubelet_server.start()
        progress(f"kubelet API (container logs) on https://127.0.0.1:{self.kubelet_server.port}")
        if self.options.run_images:
            self.runner = PodRunner(
                self.rest,
                self.logs,
                self.options.run_images,
                lambda key: self._enqueue(("pod", key)),
                self._pod_dir / "pods",
            )
            self.runner.start()  # its thread forks the processes and lives as long as we do
            progress(f"running pods of {', '.join(self.options.run_images)} as processes")

    def _ensure_system_nodes(self) -> None:
        now = now_rfc3339()
        for i, name in enumerate(system_node_names(self.options.system_nodes)):
            self._create_node(system_node_object(i, now))
            self._renew_lease(name)

    def _create_node(self, node: JSON) -> None:
        name = node["metadata"]["name"]
        if self.kubelet_server is not None:
            node["status"].update(kubelet_endpoint_status(node, self.kubelet_server.port))
        try:
            self.rest.create(NODES, node)
        except ApiException as e:
            if e.status != 409:
                raise
            if self.kubelet_server is not None:  # a node of an earlier run: this port now
                self.rest.patch(
                    NODES,
                    name,
                    {"status": kubelet_endpoint_status(node, self.kubelet_server.port)},
                    subresource="status",
                )

    def _want_scheduler(self) -> bool:
        if self.options.scheduler in ("on", "off"):
            return self.options.scheduler == "on"
        try:
            self.rest.get(LEASES, "kube-scheduler", "kube-system")
            return False
        except ApiException as e:
            if e.status == 404:
                return True
            raise

    def _ensure_nodes(self, pool: Pool) -> None:
        now = now_rfc3339()
        for i, name in enumerate(pool.node_names()):
            self._create_node(node_object(pool, i, now))
            self._renew_lease(name)

    # -- the queue -----------------------------------------------------------------------

    def _enqueue(self, item: Hashable) -> None:
        """Queue a key once: a key already waiting is not queued again."""
        with self._pending_lock:
            if item in self._pending:
                return
            self._pending.add(item)
        self._queue.put(item)

    def _after(self, delay: float, item: Hashable) -> None:
        with self._timer_lock:
            heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), item))
        self._queue.put(("tick",))

    def _due_timers(self) -> float | None:
        """Queue the timers that are due; return seconds until the next one."""
        with self._timer_lock:
            now = time.monotonic()
            while self._timers and self._timers[0][0] <= now:
                _, _, item = heapq.heappop(self._timers)
                self._enqueue(item)
            return self._timers[0][0] - now if self._timers else None

    def _loop(self) -> None:
        while not self._stop.is_set():
            wait = self._due_timers()
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                continue
            if item in (("tick",), ("stop",)):
                continue
            with self._pending_lock:
                self._pending.discard(item)
            try:
                self._process(item)
            except ApiException as e:
                log.info("provider: %s: %s %s; retrying", item, e.status, e.reason)
                self._after(RETRY_SECONDS, item)
            except Exception:
                log.exception("provider: %s failed; retrying", item)
                self._after(RETRY_SECONDS, item)

    def _process(self, item: Hashable) -> None:
        assert isinstance(item, tuple)
        kind = item[0]
        self.work[kind] += 1
        if kind == "slice":
            self._reconcile_slice(item[1])
        elif kind == "assign":
            self._assign()
        elif kind == "node":
            self._reconcile_node(item[1])
        elif kind == "pod":
            self._kubelet(item[1])
        elif kind == "schedule":
            self._schedule()
        elif kind == "services":
            if self.proxy is not None:
                self.proxy.sync()
        elif kind == "heartbeat":
            self._heartbeat()
            self._after(self.options.heartbeat_interval, ("heartbeat",))
        elif kind == "node-status":
            self._node_status_heartbeat()
            self._after(self.options.status_interval, ("node-status",))

    # -- informer handlers (on informer threads: only enqueue) ---------------------------

    def _slice_added(self, obj: JSON) -> None:
        self._enqueue(("slice", obj["metadata"]["name"]))

    def _slice_updated(self, old: JSON, new: JSON) -> None:
        self._enqueue(("slice", new["metadata"]["name"]))
        if (old.get("spec") or {}).get("partitionIds") != (new.get("spec") or {}).get(
            "partitionIds"
        ):
            self._enqueue(("assign",))

    def _slice_deleted(self, gone: JSON | DeletedFinalStateUnknown) -> None:
        obj = deleted_object(gone)
        self._enqueue(("slice", obj["metadata"]["name"]))
        self._enqueue(("assign",))

    def _node_event(self, changed: JSON | DeletedFinalStateUnknown) -> None:
        name = deleted_object(changed)["metadata"]["name"]
        self._enqueue(("node", name))
        self._enqueue(("assign",))
        if self.scheduling:
            self._enqueue(("schedule",))

    def _index_pod(self, pod: JSON, present: bool) -> None:
        key = object_key(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        with self._index_lock:
            for keys in self._pods_by_node.values():
                keys.discard(key)
            if present and node:
                self._pods_by_node.setdefault(node, set()).add(key)

    def _pod_added(self, pod: JSON) -> None:
        self._index_pod(pod, True)
        self._pod_changed(pod)

    def _pod_updated(self, old: JSON, pod: JSON) -> None:
        if (old.get("spec") or {}).get("nodeName") != (pod.get("spec") or {}).get("nodeName"):
            self._index_pod(pod, True)
        self._pod_changed(pod)

    def _pod_changed(self, pod: JSON) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if node in self._our_nodes:
            self._enqueue(("pod", object_key(pod)))
        elif not node and self.scheduling:
            self._enqueue(("schedule",))

    def _pod_deleted(self, gone: JSON | DeletedFinalStateUnknown) -> None:
        pod = deleted_object(gone)
        self._index_pod(pod, False)
        if self.runner is not None and pod["metadata"].get("uid"):
            self.runner.gone(pod["metadata"]["uid"])
        if self.scheduling:
            self._enqueue(("schedule",))

    # -- Slices --------------------------------------------------------------------------

    def _hosts_labelled(self, slice_name: str) -> list[JSON]:
        """Copies of our nodes labelled with the Slice's name (scanned without copying)."""
        return [
            copy.deepcopy(n)
            for n in self.nodes.peek_list()
            if n["metadata"]["name"] in self._our_nodes
            and (n["metadata"].get("labels") or {}).get(SLICE_LABEL) == slice_name
        ]

    def _hosts_of(self, partitions: list[str]) -> list[JSON]:
        """Copies of the nodes of these partitions, by name (scanned without copying)."""
        wanted = set(partitions)
        return sorted(
            (copy.deepcopy(n) for n in self.nodes.peek_list() if decide.partition_of(n) in wanted),
            key=lambda n: n["metadata"]["name"],
        )

    def _set_state(self, obj: JSON, state: str, status: str, message: str) -> None:
        ready = condition(obj, "Ready") or {}
        if (ready.get("reason"), ready.get("status"), ready.get("message")) == (
            state,
            status,
            message,
        ):
            return
        since = ready.get("lastTransitionTime") if ready.get("status") == status else None
        cond = {
            "type": "Ready",
            "status": status,
            "reason": state,
            "message": message,
            "lastTransitionTime": since or now_rfc3339(),
        }
        self.rest.patch(
            SLICES,
            obj["metadata"]["name"],
            {"status": {"conditions": [cond]}},
            subresource="status",
        )
        self.work["write"] += 1

    def _label(self, hosts: list[JSON], slice_name: str | None, topology: str = "") -> None:
        for node in hosts:
            labels = node["metadata"].get("labels") or {}
            if slice_name is None:
                if SLICE_LABEL not in labels and TOPOLOGY_LABEL not in labels:
                    continue
                patch: JSON = {SLICE_LABEL: None, TOPOLOGY_LABEL: None}
            else:
                if labels.get(SLICE_LABEL) == slice_name and labels.get(TOPOLOGY_LABEL) == topology:
                    continue
                patch = {SLICE_LABEL: slice_name, TOPOLOGY_LABEL: topology}
            self.rest.patch(NODES, node["metadata"]["name"], {"metadata": {"labels": patch}})
            self.work["write"] += 1

    def _reconcile_slice(self, name: str) -> None:
        obj = self.slices.get(name)
        if obj is None:
            # Gone (perhaps without our finalizer): its hosts go back to the pool.
            self._label(self._hosts_labelled(name), None)
            self._activate_at.pop(name, None)
            self._enqueue(("assign",))
            return
        meta = obj["metadata"]
        annotations = meta.get("annotations") or {}
        finalizers = list(meta.get("finalizers") or [])
        spec = obj.get("spec") or {}
        partitions = list(spec.get("partitionIds") or [])
        state = slice_state(obj)
        if meta.get("deletionTimestamp"):
            if SLICE_FINALIZER not in finalizers:
                return
            self._set_state(obj, DEACTIVATING, "False", "the slice's partition is being released")
            self._label(self._hosts_labelled(name), None)
            self.rest.patch(
                SLICES,
                name,
                {
                    "metadata": {
                        "finalizers": [f for f in finalizers if f != SLICE_FINALIZER],
                        "resourceVersion": meta["resourceVersion"],
                    }
                },
            )
            self.work["write"] += 1
            self._activate_at.pop(name, None)
            return
        if SLICE_FINALIZER not in finalizers:
            self.rest.patch(
                SLICES,
                name,
                {
                    "metadata": {
                        "finalizers": [*finalizers, SLICE_FINALIZER],
                        "resourceVersion": meta["resourceVersion"],
                    }
                },
            )
            self.work["write"] += 1
            return
        try:
            decide.slice_hosts_needed(obj)
        except ShapeError as e:
            self._set_state(obj, CREATION_FAILED, "False", str(e))
            return
        if truthy(annotations.get(KNOB["drop-partitions"])):
            if partitions:
                self.rest.patch(
                    SLICES,
                    name,
                    {
                        "metadata": {"resourceVersion": meta["resourceVersion"]},
                        "spec": {"partitionIds": []},
                    },
                )
                self.work["write"] += 1
            self._label(self._hosts_labelled(name), None)
            return
        if not partitions:
            if name not in self._assigned:
                self._label(self._hosts_labelled(name), None)
                self._enqueue(("assign",))
            return
        self._assigned.pop(name, None)  # the informer shows our assignment now
        hosts = self._hosts_of(partitions)
        move = annotations.get(KNOB["move"])
        if (
            move
            and annotations.get(MOVED_ANNOTATION) != move
            and state in (ACTIVE, ACTIVE_DEGRADED)
        ):
            self._move(obj, hosts, move)
            return
        if state in ("", CREATION_FAILED):
            self._set_state(obj, ACTIVATING, "False", "")  # GKE reports no message while activating
            self._schedule_activation(obj)
            return
        if state == ACTIVATING:
            if truthy(annotations.get(KNOB["fail"])):
                self._set_state(obj, FAILED, "False", "the slice failed to activate")
                return
            if truthy(annotations.get(KNOB["stick-activating"])):
                return
            due = self._activate_at.get(name)
            if due is None:
                self._schedule_activation(obj)
                return
            if time.monotonic() < due:
                self._after(due - time.monotonic(), ("slice", name))
                return
        desired, status, message = ACTIVE, "True", "the slice is active"
        if truthy(annotations.get(KNOB["fail"])):
            desired, status, message = FAILED, "False", "the slice failed"
        elif truthy(annotations.get(KNOB["degrade"])):
            desired, status, message = (
                ACTIVE_DEGRADED,
                "True",
                "some sub-blocks of the slice are degraded",
            )
        self._set_state(obj, desired, status, message)
        if desired != FAILED:
            self._label(hosts, name, str(spec.get("topology", "")))
        self._activate_at.pop(name, None)

    def _schedule_activation(self, obj: JSON) -> None:
        name = obj["metadata"]["name"]
        raw = (
            (obj["metadata"].get("annotations") or {}).get(KNOB["activation-delay"]) or ""
        ).strip()
        delay = self.options.activation_delay
        if raw:
            try:
                delay = parse_duration(raw)
            except ValueError as e:
                log.warning("slice %s: ignoring %s: %s", name, KNOB["activation-delay"], e)
        self._activate_at[name] = time.monotonic() + delay
        self._after(delay, ("slice", name))

    def _taken(self) -> set[str]:
        """Hosts held by a Slice: by its partitions, or by an assignment not yet seen."""
        by_partition = {
            decide.partition_of(n): n["metadata"]["name"] for n in self.nodes.peek_list()
        }
        taken = {
            by_partition[p]
            for s in self.slices.peek_list()
            for p in (s.get("spec") or {}).get("partitionIds") or []
            if p in by_partition
        }
        for nodes in self._assigned.values():
            taken.update(nodes)
        return taken

    def _assign(self) -> None:
        # Read-only scans (plan_assignments is pure): the cache's objects, not copies.
        slices = [s for s in self.slices.peek_list() if s["metadata"]["name"] not in self._assigned]
        live = [s for s in slices if SLICE_FINALIZER in (s["metadata"].get("finalizers") or [])]
        plan = decide.plan_assignments(live, self.nodes.peek_list(), self._taken())
        for a in plan:
            current = self.slices.get(a.slice_name)
            if current is None:
                continue
            self.rest.patch(
                SLICES,
                a.slice_name,
                {
                    "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                    "spec": {"partitionIds": list(a.partitions)},
                },
            )
            self.work["write"] += 1
            self._assigned[a.slice_name] = a.nodes
            log.info("slice %s: assigned hosts %s", a.slice_name, ", ".join(a.nodes))
        assigned = {a.slice_name for a in plan}
        for s in live:
            name = s["metadata"]["name"]
            if name in assigned or not decide.waiting(s) or slice_state(s):
                continue
            try:
                message = decide.waiting_message(s)
            except ShapeError:
                continue  # reported as SliceCreationFailed
            current = self.slices.get(name)
            if current is not None:
                self._set_waiting(current, message)

    def _set_waiting(self, obj: JSON, message: str) -> None:
        """A Slice that waits for capacity: GKE's Ready condition, status Unknown with the
        wait as its message and no reason, which is no state (``kubectl describe`` shows
        it, the controller reads "waiting for partition assignment"). The first state
        (ACTIVATING, status False) then starts a new transition."""
        ready = condition(obj, "Ready") or {}
        if ready.get("status") == "Unknown" and ready.get("message") == message:
            return
        cond = {
            "type": "Ready",
            "status": "Unknown",
            "message": message,
            "lastTransitionTime": now_rfc3339(),
        }
        patch = {"status": {"conditions": [cond]}}
        self.rest.patch(SLICES, obj["metadata"]["name"], patch, subresource="status")
        self.work["write"] += 1

    def _move(self, obj: JSON, hosts: list[JSON], token: str) -> None:
        name = obj["metadata"]["name"]
        need = len(hosts) or decide.slice_hosts_needed(obj)
        free = decide.free_hosts(self.nodes.peek_list(), self._taken()).get(
            str(obj["spec"]["type"]), []
        )
        if len(free) < need:
            log.warning(
                "slice %s: cannot move: %d free hosts, %d needed; retrying", name, len(free), need
            )
            self._after(5.0, ("slice", name))
            return
        target = free[:need]
        self._label(hosts, None)
        self.rest.patch(
            SLICES,
            name,
            {
                "metadata": {
                    "resourceVersion": obj["metadata"]["resourceVersion"],
                    "annotations": {MOVED_ANNOTATION: token},
                },
                "spec": {"partitionIds": [decide.partition_of(n) for n in target]},
            },
        )
        self.work["write"] += 1
        self._assigned[name] = tuple(n["metadata"]["name"] for n in target)
        self._label(target, name, str(obj["spec"].get("topology", "")))
        log.info("slice %s: moved to %s", name, ", ".join(n["metadata"]["name"] for n in target))

    # -- nodes ---------------------------------------------------------------------------

    def _desired_ready(self, node: JSON) -> tuple[str, str, str]:
        annotations = node["metadata"].get("annotations") or {}
        if truthy(annotations.get(KNOB["unreachable"])):
            return "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."
        if truthy(annotations.get(KNOB["not-ready"])):
            return "False", "KubeletNotReady", "container runtime is down (simulated)"
        return "True", "KubeletReady", "kubelet is posting ready status"

    def _reconcile_node(self, name: str) -> None:
        node = self.nodes.get(name)
        if node is None or name not in self._our_nodes:
            return
        status, reason, message = self._desired_ready(node)
        ready = condition(node, "Ready") or {}
        taints = [
            t
            for t in (node.get("spec") or {}).get("taints") or []
            if t.get("key") not in (NOT_READY_TAINT["key"], UNREACHABLE_TAINT["key"])
        ]
        if name in self._tpu_nodes and not any(t.get("key") == TPU_TAINT["key"] for t in taints):
            taints.append(dict(TPU_TAINT))
        if status == "False":
            taints.append(dict(NOT_READY_TAINT))
        elif status == "Unknown":
            taints.append(dict(UNREACHABLE_TAINT))
        if taints != ((node.get("spec") or {}).get("taints") or []):
            self.rest.patch(NODES, name, {"spec": {"taints": taints}})
            self.work["write"] += 1
        if (ready.get("status"), ready.get("reason")) != (status, reason):
            self._write_ready(node, status, reason, message, transition=True)
        with self._index_lock:
            keys = sorted(self._pods_by_node.get(name, set()))
        for key in keys:
            self._enqueue(("pod", key))

    def _write_ready(
        self, node: JSON, status: str, reason: str, message: str, transition: bool
    ) -> None:
        now = now_rfc3339()
        conditions = []
        for old in (node.get("status") or {}).get("conditions") or []:
            c = dict(old)
            if c.get("type") == "Ready":
                if transition or c.get("status") != status:
                    c["lastTransitionTime"] = now
                c.update(status=status, reason=reason, message=message)
            if status != "Unknown":
                c["lastHeartbeatTime"] = now
            conditions.append(c)
        self.rest.patch(
            NODES,
            node["metadata"]["name"],
            {"status": {"conditions": conditions}},
            subresource="status",
        )
        self.work["write"] += 1

    def _renew_lease(self, node_name: str) -> None:
        spec = {"holderIdentity": node_name, "leaseDurationSeconds": 40, "renewTime": now_micro()}
        try:
            self.rest.patch(LEASES, node_name, {"spec": spec}, namespace=NODE_LEASE_NAMESPACE)
        except ApiException as e:
            if e.status != 404:
                raise
            self.rest.create(
                LEASES,
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": node_name, "namespace": NODE_LEASE_NAMESPACE},
                    "spec": spec,
                },
                namespace=NODE_LEASE_NAMESPACE,
            )

    def _alive_nodes(self) -> list[JSON]:
        """Our nodes that still exist and whose kubelet is reachable."""
        return [
            n
            for n in self.nodes.list()
            if n["metadata"]["name"] in self._our_nodes
            and not truthy((n["metadata"].get("annotations") or {}).get(KNOB["unreachable"]))
        ]

    def _heartbeat(self) -> None:
        for node in self._alive_nodes():
            self._renew_lease(node["metadata"]["name"])

    def _node_status_heartbeat(self) -> None:
        for node in self._alive_nodes():
            status, reason, message = self._desired_ready(node)
            self._write_ready(node, status, reason, message, transition=False)

    # -- pods: kubelet and scheduler stand-ins -------------------------------------------

    def _kubelet(self, key: str) -> None:
        pod = self.pods.get(key)
        if pod is None:
            return
        node_name = (pod.get("spec") or {}).get("nodeName")
        node = self.nodes.get(node_name) if node_name else None
        if node is None or node_name not in self._our_nodes:
            return
        meta = pod["metadata"]
        if truthy((node["metadata"].get("annotations") or {}).get(KNOB["unreachable"])):
            return  # an unreachable kubelet reports nothing
        runner = self.runner if self.runner is not None and self.runner.matches(pod) else None
        if meta.get("deletionTimestamp"):
            if runner is not None and not runner.terminate(pod, key):
                return  # the runner says when its processes are gone
            try:
                self.rest.delete(
                    PODS, meta["name"], meta["namespace"], uid=meta["uid"], grace_period_seconds=0
                )
                self.work["write"] += 1
            except ApiException as e:
                if e.status not in (404, 409):
                    raise
            return
        if not decide.pod_active(pod):
            return
        if runner is not None:
            runner.sync(pod, key)
            runs = runner.statuses(meta["uid"])
            assert runs is not None
            status = decide.kubelet_status(pod, node, now_rfc3339(), runs[0], runs[1])
        else:
            status = decide.kubelet_status(pod, node, now_rfc3339())
        if decide.status_differs(pod.get("status") or {}, status):
            self.rest.patch(
                PODS,
                meta["name"],
                {"status": status},
                namespace=meta["namespace"],
                subresource="status",
            )
            self.work["write"] += 1

    def _schedule(self) -> None:
        if not self.scheduling:
            return
        # Read-only scans of every pod and node (the decisions are pure, and what is written
        # is built anew): the cache's objects, not copies.
        pods = self.pods.peek_list()
        bound_now = {p["metadata"]["uid"] for p in pods if (p.get("spec") or {}).get("nodeName")}
        alive = {p["metadata"]["uid"] for p in pods}
        used = decide.usage(pods)
        for uid, (node_name, requests) in list(self._bound.items()):
            if uid in bound_now or uid not in alive:
                self._bound.pop(uid, None)  # the informer shows the bind, or the pod is gone
                continue
            bucket = used.setdefault(node_name, {})
            for k, v in requests.items():
                bucket[k] = bucket.get(k, Decimal(0)) + v
        nodes = self.nodes.peek_list()
        pending = sorted(
            (p for p in pods if _schedulable(p) and p["metadata"]["uid"] not in self._bound),
            key=lambda p: (p["metadata"].get("creationTimestamp", ""), object_key(p)),
        )
        for pod in pending:
            meta = pod["metadata"]
            chosen, message = decide.choose_node(pod, nodes, used)
            if chosen is None:
                current = condition(pod, "PodScheduled") or {}
                if (current.get("status"), current.get("reason"), current.get("message")) != (
                    "False",
                    "Unschedulable",
                    message,
                ):
                    others = [
                        c
                        for c in (pod.get("status") or {}).get("conditions") or []
                        if c.get("type") != "PodScheduled"
                    ]
                    self.rest.patch(
                        PODS,
                        meta["name"],
                        {
                            "status": {
                                "conditions": [
                                    *others,
                                    decide.unschedulable_condition(message, now_rfc3339()),
                                ]
                            }
                        },
                        namespace=meta["namespace"],
                        subresource="status",
                    )
                    self.work["write"] += 1
                continue
            try:
                self.rest.create(
                    BINDINGS,
                    {
                        "apiVersion": "v1",
                        "kind": "Binding",
                        "metadata": {"name": meta["name"]},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": chosen},
                    },
                    namespace=meta["namespace"],
                )
                self.work["write"] += 1
            except ApiException as e:
                if e.status in (404, 409):
                    continue
                raise
            requests = decide.pod_requests(pod)
            self._bound[meta["uid"]] = (chosen, requests)
            bucket = used.setdefault(chosen, {})
            for k, v in requests.items():
                bucket[k] = bucket.get(k, Decimal(0)) + v


def _schedulable(pod: JSON) -> bool:
    spec, meta = pod.get("spec") or {}, pod["metadata"]
    return (
        not spec.get("nodeName")
        and not meta.get("deletionTimestamp")
        and not spec.get("schedulingGates")
        and spec.get("schedulerName", "default-scheduler") == "default-scheduler"
        and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
    )


__all__ = ["POOL_LABEL", "Options", "Provider", "install_slice_crd", "parse_duration"]

"""The InferenceService reconciler (OMENative): observes the service, its model and runtime
and its InferenceReplicas into a ``ServiceObservation``, has ``decide`` plan each component's
replica, its conditions and status, and writes them. A refused replica write becomes a
``ComponentReconcileError`` Warning ending with the API server's reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from kubernetes.client.exceptions import ApiException

from ome.api.v1beta1 import INFERENCE_REPLICAS, INFERENCE_SERVICES
from ome.kube import JSON, json_copy
from ome.runtime.client import Client
from ome.runtime.controller import Controller, Result
from ome.runtime.events import EventRecorder
from ome.runtime.expectations import Expectations, LatestWrites
from ome.runtime.informer import Informer
from ome.runtime.rest import status_of

from .decide import (
    Applied,
    ComponentPlan,
    ServiceObservation,
    ServicePlan,
    engine_config,
    named_holds,
    naming_due,
    plan_service,
    removal_confirmed,
    resolve,
    service_conditions,
    service_status,
)
from .project import COMPONENTS

log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


class InferenceServiceReconciler:
    def __init__(
        self,
        client: Client,
        services: Informer,
        replicas: Informer,
        runtimes: Informer,
        cluster_runtimes: Informer,
        models: Informer,
        cluster_models: Informer,
        recorder: EventRecorder,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.client = client
        self.services = services
        self.replicas = replicas
        self.runtimes, self.cluster_runtimes = runtimes, cluster_runtimes
        self.models, self.cluster_models = models, cluster_models
        self.recorder = recorder
        self.clock = clock
        #: our last status write per service, until the cache shows it (a pass before then
        #: would write the same status again, against the version it replaced: a 409)
        self._written: LatestWrites[JSON] = LatestWrites()
        #: replica creates the cache does not show yet, per service key: a pass before the
        #: replica informer catches up must not create the replica again
        self._creating = Expectations()
        self._controller: Controller | None = None

    def controller(self, workers: int = 2) -> Controller:
        c = self._controller = Controller(
            "inferenceservice", self.reconcile, workers=workers, look=self.look
        )
        c.watch(self.services)
        c.watch(self.replicas, keys=_owner_keys, changed=self.replica_changed)
        # A runtime or model appearing or changing can unblock any service that names it.
        everything = lambda _obj: [  # noqa: E731
            f"{s['metadata']['namespace']}/{s['metadata']['name']}"
            for s in self.services.peek_list()
        ]
        for informer in (self.runtimes, self.cluster_runtimes, self.models, self.cluster_models):
            c.watch(informer, keys=everything)
        return c

    def reconcile(self, key: str) -> Result | None:
        obs = self._observe(key)
        if obs is None:
            return None
        plan = plan_service(obs)
        applied = self._act(obs, plan)
        now = self.clock()
        conditions = service_conditions(obs, plan, applied, now)
        self._write_status(obs.service, service_status(obs.service, conditions, now))
        self._look_after(key, naming_due(obs.replicas.values(), now))
        if any(a.stale for a in applied):
            # The replica moved on since the cache's copy, in a change that may not wake us
            # (its rows: ``replica_news``): the update is tried again on the newer copy.
            return Result(requeue=True)
        return None

    # -- held Instances (M7) -------------------------------------------------------------

    def replica_changed(self, old: JSON, new: JSON) -> bool:
        """Whether a replica's update is news to its service: what ``replica_news`` compares,
        or the Instances its conditions name (a named hold reworded, or ended: its pods are
        created). A hold on its way to being named is no news yet: its service is looked at
        once it is due (``look``), and costs no pass if it ends before."""
        if replica_news(old, new):
            return True
        now = self.clock()
        holds = named_holds(new, now)
        if named_holds(old, now).named != holds.named:
            return True
        if holds.due is not None:
            for key in _owner_keys(new):
                self._look_after(key, holds.due)
        return False

    def look(self, key: str) -> float | None:
        """The service ``key`` once an Instance of its replicas was due to be named: due a
        pass now if one is named (M7), else looked at again when the next one is due."""
        isvc = self.services.peek(key)
        if isvc is None or isvc["metadata"].get("deletionTimestamp"):
            return None
        name = isvc["metadata"]["name"]
        replicas = [r for c in COMPONENTS if (r := self._replica(isvc, f"{name}-{c}")) is not None]
        return naming_due(replicas, self.clock(), named=True)

    def _look_after(self, key: str, due: float | None) -> None:
        if due is not None and self._controller is not None:
            self._controller.look_after(key, due)

    # -- observing -----------------------------------------------------------------------

    def _observe(self, key: str) -> ServiceObservation | None:
        """The service and what it names, from the caches; None for a service gone (its
        memories forgotten) or being deleted (its replicas go with it: they are owned)."""
        isvc = self.services.get(key)
        if isvc is None:
            self._written.forget(key)
            self._creating.forget(key)
            return None
        if isvc["metadata"].get("deletionTimestamp"):
            return None
        written = self._written.get(key, str(isvc["metadata"].get("resourceVersion", "")))
        if written is not None:
            isvc = json_copy(written)  # the cache has not caught up with our write
        ns, spec = isvc["metadata"]["namespace"], isvc.get("spec") or {}
        runtime = self._runtime(ns, spec.get("runtime") or {})
        replicas = {
            c: found
            for c in COMPONENTS
            if (found := self._replica(isvc, f"{isvc['metadata']['name']}-{c}")) is not None
        }
        return ServiceObservation(
            service=isvc,
            model_found=self._model(ns, spec.get("model") or {}) is not None,
            engine_config=engine_config(runtime),
            replicas=replicas,
        )

    def _replica(self, isvc: JSON, name: str) -> JSON | None:
        """The cached InferenceReplica ``name`` of this InferenceService, only if it is this
        one's: its controller ownerReference has this service's UID. A replica left by a
        deleted service of the same name (a cache that missed its deletion, or garbage not
        collected yet) is none of this service's, and never makes it Ready. It is the cache's
        own object: only read here, and copied before a write."""
        found = self.replicas.peek(f"{isvc['metadata']['namespace']}/{name}")
        if found is None:
            return None
        uid = isvc["metadata"].get("uid")
        for ref in found["metadata"].get("ownerReferences") or []:
            if ref.get("controller") and ref.get("kind") == "InferenceService":
                return found if ref.get("uid") == uid else None
        return None

    def _model(self, ns: str, ref: JSON) -> JSON | None:
        return resolve(
            ns, ref, "BaseModel", "ClusterBaseModel", self.models.peek, self.cluster_models.peek
        )

    def _runtime(self, ns: str, ref: JSON) -> JSON | None:
        """The cache's own runtime: only read (``merge_component`` copies what it takes)."""
        return resolve(
            ns,
            ref,
            "ServingRuntime",
            "ClusterServingRuntime",
            self.runtimes.peek,
            self.cluster_runtimes.peek,
        )

    # -- acting --------------------------------------------------------------------------

    def _act(self, obs: ServiceObservation, plan: ServicePlan) -> list[Applied]:
        """Each component in order (an invalid one's Warning, or its replica's write), then
        the deletes of removed components' replicas; how each component's write went."""
        isvc = obs.service
        applied: list[Applied] = []
        for component in plan.components:
            if component.invalid is not None:
                self.recorder.event(isvc, "Warning", "InvalidSpec", component.invalid)
                applied.append(Applied())
            else:
                applied.append(
                    self._apply_replica(isvc, component, obs.replicas.get(component.component))
                )
        ns = isvc["metadata"]["namespace"]
        if plan.delete:
            # Destructive: confirmed against the service as the server holds it now.
            live = self.client.live_get_or_none(INFERENCE_SERVICES, isvc["metadata"]["name"], ns)
            for name, uid in plan.delete:
                if removal_confirmed(live, str(isvc["metadata"].get("uid", "")), name):
                    self.client.delete(INFERENCE_REPLICAS, name, ns, uid=uid)
        return applied

    def _apply_replica(self, isvc: JSON, component: ComponentPlan, current: JSON | None) -> Applied:
        """Create or replace the replica as planned; a refused write is reported as a
        ComponentReconcileError Warning, and its message returned, with whether an update was
        refused because the cache's copy was stale (409)."""
        ns, name = isvc["metadata"]["namespace"], component.replica
        key = f"{ns}/{isvc['metadata']['name']}"
        if current is not None:
            self._creating.observe(key, {name: (current["metadata"].get("uid", ""), False)})
        elif not self._creating.reserve_create(key, name):
            return Applied()  # created a moment ago: the cache does not show it yet
        try:
            if component.create is not None:
                created = self.client.create(INFERENCE_REPLICAS, component.create, ns)
                self._creating.created(key, name, (created.get("metadata") or {}).get("uid", ""))
            elif component.update is not None:
                self.client.replace(INFERENCE_REPLICAS, component.update, ns)
        except ApiException as e:
            if current is None:
                self._creating.create_failed(key, name)
            if e.status == 409:
                # The cache lags: a create's replica comes with its event; an update's newer
                # copy may not wake us.
                return Applied(stale=current is not None)
            reason = status_of(e).get("message") or f"{e.status} {e.reason}"
            message = f"failed to reconcile component {name}: {reason}"
            self.recorder.event(isvc, "Warning", "ComponentReconcileError", message)
            if e.status in (400, 403, 404, 422) or (e.status or 0) < 500:
                return Applied(refused=message)
            raise
        except Exception:
            if current is None:
                self._creating.create_failed(key, name)  # whether it landed, a retry tells
            raise
        return Applied()

    def _write_status(self, isvc: JSON, status: JSON | None) -> None:
        """Write the decided status (None: unchanged, nothing to write), remembered until the
        cache shows it; a service gone or moved on meanwhile is left to its next pass."""
        if status is None:
            return
        body = json_copy(isvc)
        body["status"] = status
        meta = isvc["metadata"]
        try:
            stored = self.client.replace(
                INFERENCE_SERVICES, body, meta["namespace"], subresource="status"
            )
            self._written.wrote(
                f"{meta['namespace']}/{meta['name']}", str(meta.get("resourceVersion", "")), stored
            )
        except ApiException as e:
            if e.status == 404:
                log.debug("%s is gone: status not written", isvc["metadata"]["name"])
            elif e.status != 409:
                raise


def _owner_keys(replica: JSON) -> list[str]:
    ns = replica["metadata"].get("namespace", "")
    return [
        f"{ns}/{ref['name']}"
        for ref in replica["metadata"].get("ownerReferences") or []
        if ref.get("kind") == "InferenceService"
    ]


def _what_a_service_reads(replica: JSON) -> tuple[object, ...]:
    meta = replica.get("metadata") or {}
    status = replica.get("status") or {}
    return (
        meta.get("uid"),
        meta.get("ownerReferences"),
        meta.get("labels"),
        meta.get("deletionTimestamp"),
        replica.get("spec"),
        status.get("readyReplicas"),
        status.get("updateRevision"),
        status.get("currentRevision"),
    )


def replica_news(old: JSON, new: JSON) -> bool:
    """Whether a replica's update changes what its InferenceService's pass reads of it (its
    owner, labels, deletion, spec, ready count and revisions): the Instances' rows, which the
    replica's controller rewrites as its pods and Slices move, are no news to the service."""
    return _what_a_service_reads(old) != _what_a_service_reads(new)

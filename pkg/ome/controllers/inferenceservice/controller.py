"""The InferenceService reconciler (OMENative): resolves the model and runtime, projects one
InferenceReplica per component, and reports conditions. A refused replica write becomes a
``ComponentReconcileError`` Warning ending with the API server's reason.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from kubernetes.client.exceptions import ApiException

from ome.api.v1beta1 import (
    FINALIZER_IR_TEARDOWN,
    INFERENCE_REPLICAS,
    INFERENCE_SERVICES,
    controller_reference,
)
from ome.kube import JSON, json_copy
from ome.runtime.client import Client
from ome.runtime.controller import Controller, Result
from ome.runtime.events import EventRecorder
from ome.runtime.expectations import Expectations, LatestWrites
from ome.runtime.informer import Informer
from ome.runtime.rest import status_of

from .project import COMPONENTS, SpecError, merge_component, replica_spec

log = logging.getLogger(__name__)

OMENATIVE = "OMENative"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(ctype: str, status: str, reason: str, message: str, generation: int) -> JSON:
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


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
    ) -> None:
        self.client = client
        self.services = services
        self.replicas = replicas
        self.runtimes, self.cluster_runtimes = runtimes, cluster_runtimes
        self.models, self.cluster_models = models, cluster_models
        self.recorder = recorder
        #: our last status write per service, until the cache shows it (a pass before then
        #: would write the same status again, against the version it replaced: a 409)
        self._written: LatestWrites[JSON] = LatestWrites()
        #: replica creates the cache does not show yet, per service key: a pass before the
        #: replica informer catches up must not create the replica again
        self._creating = Expectations()

    def controller(self, workers: int = 2) -> Controller:
        c = Controller("inferenceservice", self.reconcile, workers=workers)
        c.watch(self.services)
        c.watch(self.replicas, keys=_owner_keys, changed=replica_news)
        # A runtime or model appearing or changing can unblock any service that names it.
        everything = lambda _obj: [  # noqa: E731
            f"{s['metadata']['namespace']}/{s['metadata']['name']}"
            for s in self.services.peek_list()
        ]
        for informer in (self.runtimes, self.cluster_runtimes, self.models, self.cluster_models):
            c.watch(informer, keys=everything)
        return c

    def reconcile(self, key: str) -> Result | None:
        isvc = self.services.get(key)
        if isvc is None:
            self._written.forget(key)
            self._creating.forget(key)
            return None
        if isvc["metadata"].get("deletionTimestamp"):
            return None  # its replicas go with it: they are owned
        written = self._written.get(key, str(isvc["metadata"].get("resourceVersion", "")))
        if written is not None:
            isvc = json_copy(written)  # the cache has not caught up with our write
        ns = isvc["metadata"]["namespace"]
        generation = int(isvc["metadata"].get("generation", 1))
        spec = isvc.get("spec") or {}
        conditions: list[JSON] = []
        mode = spec.get("deploymentMode") or OMENATIVE
        if mode != OMENATIVE:
            return self._status(
                isvc,
                [
                    condition(
                        "Ready",
                        "False",
                        "UnsupportedDeploymentMode",
                        f'deploymentMode "{mode}" is not supported: '
                        "this controller serves OMENative only",
                        generation,
                    )
                ],
            )
        model_name = (spec.get("model") or {}).get("name", "")
        if not self._model(ns, spec.get("model") or {}):
            return self._status(
                isvc,
                [
                    condition(
                        "Ready",
                        "False",
                        "ModelNotFound",
                        f'model "{model_name}" not found: '
                        f"no BaseModel in namespace {ns} and no ClusterBaseModel",
                        generation,
                    )
                ],
            )
        runtime_name = (spec.get("runtime") or {}).get("name", "")
        runtime = self._runtime(ns, spec.get("runtime") or {})
        if runtime is None:
            return self._status(
                isvc,
                [
                    condition(
                        "Ready",
                        "False",
                        "RuntimeNotFound",
                        f'runtime "{runtime_name}" not found: '
                        f"no ServingRuntime in namespace {ns} and no ClusterServingRuntime",
                        generation,
                    )
                ],
            )
        engine_config = (runtime.get("spec") or {}).get("engineConfig") or {}
        all_ready = True
        lagging = False  # a replica update refused on a stale version: look again soon
        present = [c for c in COMPONENTS if spec.get(c) is not None]
        if not present:
            return self._status(
                isvc,
                [
                    condition(
                        "Ready",
                        "False",
                        "NoComponents",
                        "the InferenceService has no engine, decoder or router",
                        generation,
                    )
                ],
            )
        for comp in present:
            ctype = f"{comp.capitalize()}Ready"
            merged = merge_component(engine_config, spec[comp])
            try:
                wanted = replica_spec(isvc, comp, merged)
            except SpecError as e:
                all_ready = False
                conditions.append(condition(ctype, "False", "InvalidSpec", str(e), generation))
                self.recorder.event(isvc, "Warning", "InvalidSpec", str(e))
                continue
            existing = self._replica(isvc, wanted.name)
            if existing is not None:
                # An autoscaler (or kubectl scale) may move replicas within [min, max].
                wanted.spec["replicas"] = clamp_replicas(
                    (existing.get("spec") or {}).get("replicas"), merged
                )
            error, stale = self._apply_replica(isvc, wanted.name, wanted.spec, wanted.labels)
            lagging |= stale
            if error is not None:
                all_ready = False
                conditions.append(
                    condition(ctype, "False", "ComponentReconcileError", error, generation)
                )
                continue
            replica = self._replica(isvc, wanted.name)
            status = (replica or {}).get("status") or {}
            ready = int(status.get("readyReplicas") or 0)
            desired = int(wanted.spec["replicas"])
            ok = (
                replica is not None
                and ready >= desired
                and status.get("updateRevision") == status.get("currentRevision")
            )
            all_ready &= ok
            conditions.append(
                condition(
                    ctype,
                    "True" if ok else "False",
                    "ComponentReady" if ok else "ComponentNotReady",
                    f"{ready} of {desired} instances ready",
                    generation,
                )
            )
        self._delete_removed(isvc, present)
        conditions.append(
            condition(
                "Ready",
                "True" if all_ready else "False",
                "AllComponentsReady" if all_ready else "ComponentsNotReady",
                "all components are ready" if all_ready else "some components are not ready",
                generation,
            )
        )
        result = self._status(isvc, conditions)
        if lagging and result is None:
            # The replica moved on since the cache's copy, in a change that may not wake us
            # (its rows: ``replica_news``): the update is tried again on the newer copy.
            return Result(requeue=True)
        return result

    # -- resolving -----------------------------------------------------------------------

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
        name, kind = ref.get("name", ""), ref.get("kind")
        if kind != "ClusterBaseModel":
            found = self.models.get(f"{ns}/{name}")
            if found is not None or kind == "BaseModel":
                return found
        return self.cluster_models.get(name)

    def _runtime(self, ns: str, ref: JSON) -> JSON | None:
        name, kind = ref.get("name", ""), ref.get("kind")
        if kind != "ClusterServingRuntime":
            found = self.runtimes.get(f"{ns}/{name}")
            if found is not None or kind == "ServingRuntime":
                return found
        return self.cluster_runtimes.get(name)

    # -- writing -------------------------------------------------------------------------

    def _apply_replica(
        self, isvc: JSON, name: str, spec: JSON, labels: dict[str, str]
    ) -> tuple[str | None, bool]:
        """Create or update the replica; a refused write is reported and its reason returned,
        with whether an update was refused because the cache's copy was stale (409)."""
        ns = isvc["metadata"]["namespace"]
        key = f"{ns}/{isvc['metadata']['name']}"
        current = self._replica(isvc, name)
        if current is not None:
            self._creating.observe(key, {name: (current["metadata"].get("uid", ""), False)})
        elif not self._creating.reserve_create(key, name):
            return None, False  # created a moment ago: the cache does not show it yet
        try:
            if current is None:
                created = self.client.create(
                    INFERENCE_REPLICAS,
                    {
                        "apiVersion": "ome.io/v1beta1",
                        "kind": "InferenceReplica",
                        "metadata": {
                            "name": name,
                            "namespace": ns,
                            "labels": labels,
                            "ownerReferences": [controller_reference(isvc, "InferenceService")],
                            # The replica's teardown finalizer from the start: the replica's
                            # controller would otherwise add it in a write of its own.
                            "finalizers": [FINALIZER_IR_TEARDOWN],
                        },
                        "spec": spec,
                    },
                    ns,
                )
                self._creating.created(key, name, (created.get("metadata") or {}).get("uid", ""))
            elif "lifecycle" not in spec and "lifecycle" in (current.get("spec") or {}):
                # Lifecycle is the replica's own setting (an operator's): keep it.
                spec["lifecycle"] = json_copy(current["spec"]["lifecycle"])
            if current is not None and (
                current.get("spec") != spec
                or any(
                    (current["metadata"].get("labels") or {}).get(k) != v for k, v in labels.items()
                )
            ):
                body = json_copy(current)
                body["spec"] = spec
                body["metadata"].setdefault("labels", {}).update(labels)
                self.client.replace(INFERENCE_REPLICAS, body, ns)
        except ApiException as e:
            if current is None:
                self._creating.create_failed(key, name)
            if e.status == 409:
                # The cache lags: a create's replica comes with its event; an update's newer
                # copy may not wake us.
                return None, current is not None
            reason = status_of(e).get("message") or f"{e.status} {e.reason}"
            message = f"failed to reconcile component {name}: {reason}"
            self.recorder.event(isvc, "Warning", "ComponentReconcileError", message)
            if e.status in (400, 403, 404, 422) or (e.status or 0) < 500:
                return message, False
            raise
        except Exception:
            if current is None:
                self._creating.create_failed(key, name)  # whether it landed, a retry tells
            raise
        return None, False

    def _delete_removed(self, isvc: JSON, present: list[str]) -> None:
        ns, name = isvc["metadata"]["namespace"], isvc["metadata"]["name"]
        for comp in COMPONENTS:
            if comp in present:
                continue
            replica = self._replica(isvc, f"{name}-{comp}")
            if replica is not None and not replica["metadata"].get("deletionTimestamp"):
                self.client.delete(
                    INFERENCE_REPLICAS, f"{name}-{comp}", ns, uid=replica["metadata"]["uid"]
                )

    def _status(self, isvc: JSON, conditions: list[JSON]) -> Result | None:
        old = isvc.get("status") or {}
        previous = {c.get("type"): c for c in old.get("conditions") or []}
        for c in conditions:
            before = previous.get(c["type"])
            same = before is not None and before.get("status") == c["status"]
            c["lastTransitionTime"] = (
                before.get("lastTransitionTime") if same and before else _now()
            )
        status = dict(
            old,
            conditions=sorted(conditions, key=lambda c: c["type"]),
            observedGeneration=isvc["metadata"].get("generation", 1),
        )
        if status == old:
            return None
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
        return None


def clamp_replicas(current: object, component: JSON) -> int:
    """The replica count to keep: the current one, held within minReplicas..maxReplicas.
    A maxReplicas of 0 (or unset) is no upper bound, as validation reads it."""
    given = component.get("minReplicas")
    low = given if isinstance(given, int) else 1
    high = component.get("maxReplicas")
    value = current if isinstance(current, int) and not isinstance(current, bool) else low
    value = max(value, low)
    if isinstance(high, int) and high > 0 and high >= low:
        value = min(value, high)
    return value


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

"""Wires the OMENative controllers into a manager: their shared informers, reconcilers and
event recorders. The one place that knows which controllers the manager runs."""

from __future__ import annotations

from ome.api.v1beta1 import (
    BASE_MODELS,
    CLUSTER_BASE_MODELS,
    CLUSTER_SERVING_RUNTIMES,
    INFERENCE_REPLICAS,
    INFERENCE_SERVICES,
    LABEL_MANAGED_BY,
    MANAGED_BY_OMENATIVE,
    SERVING_RUNTIMES,
)
from ome.runtime.manager import Manager
from ome.runtime.rest import PODS

from .inferencereplica.controller import Hooks, InferenceReplicaReconciler
from .inferenceservice.controller import InferenceServiceReconciler


def setup(manager: Manager, hooks: Hooks | None = None) -> InferenceReplicaReconciler:
    """Add the InferenceService and InferenceReplica controllers; returns the replica
    reconciler, whose ``hooks`` other features extend."""
    inf = manager.informers
    replicas = inf.informer(INFERENCE_REPLICAS)
    pods = inf.informer(PODS, label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY_OMENATIVE}")
    replica_reconciler = InferenceReplicaReconciler(
        manager.client, replicas, pods, manager.event_recorder("inferencereplica-controller"), hooks
    )
    manager.add_controller(replica_reconciler.controller())
    service_reconciler = InferenceServiceReconciler(
        manager.client,
        inf.informer(INFERENCE_SERVICES),
        replicas,
        inf.informer(SERVING_RUNTIMES),
        inf.informer(CLUSTER_SERVING_RUNTIMES),
        inf.informer(BASE_MODELS),
        inf.informer(CLUSTER_BASE_MODELS),
        manager.event_recorder("inferenceservice-controller"),
    )
    manager.add_controller(service_reconciler.controller())
    return replica_reconciler

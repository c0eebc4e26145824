"""Wires the OMENative controllers into a manager: their shared informers, reconcilers and
event recorders, and TPU slice provisioning when it is configured and the Slice CRD is
served. The one place that knows which controllers the manager runs."""

from __future__ import annotations

import logging

from kubernetes.client.exceptions import ApiException

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
from ome.provider import gke
from ome.runtime.client import Client
from ome.runtime.manager import Manager
from ome.runtime.rest import CONFIGMAPS, NODES, PODS
from ome.tpuslice import naming
from ome.tpuslice.config import parse as parse_config
from ome.tpuslice.types import Config

from .inferencereplica.controller import Hooks, InferenceReplicaReconciler
from .inferenceservice.controller import InferenceServiceReconciler
from .slices import admission
from .slices.metrics import SliceGauge, SliceMetrics
from .slices.provisioning import SliceProvisioning, slice_owner_keys

log = logging.getLogger(__name__)

CONFIG_MAP = "inferenceservice-config"
CONFIG_KEY = "tpuSliceProvisioning"


def load_config(client: Client, namespace: str) -> Config | None:
    """A1: the ConfigMap's ``tpuSliceProvisioning`` entry, read once at start. Missing
    means off; an invalid one raises ``ConfigError`` with every error."""
    try:
        cm = client.live_get(CONFIGMAPS, CONFIG_MAP, namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return parse_config((cm.get("data") or {}).get(CONFIG_KEY))


def _merge(a: Hooks, b: Hooks) -> Hooks:
    return Hooks(
        holds=[*a.holds, *b.holds],
        gates=[*a.gates, *b.gates],
        teardown=[*a.teardown, *b.teardown],
        pod_mutators=[*a.pod_mutators, *b.pod_mutators],
        after_pass=[*a.after_pass, *b.after_pass],
    )


def setup(manager: Manager, hooks: Hooks | None = None) -> InferenceReplicaReconciler:
    """Add the controllers; raises ``ConfigError`` for an invalid slice configuration."""
    inf = manager.informers
    hooks = hooks or Hooks()
    pods = inf.informer(PODS, label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY_OMENATIVE}")
    config = load_config(manager.client, manager.options.namespace)
    provisioning: SliceProvisioning | None = None
    if config is not None:
        if gke.crd_available(manager.client):
            provisioning = SliceProvisioning(
                manager.client,
                config,
                inf.informer(gke.SLICES),
                inf.informer(NODES),
                pods,
                manager.event_recorder("inferencereplica-controller"),
                SliceMetrics(config, manager.registry),
            )
            hooks = _merge(hooks, provisioning.hooks())
            replicas_cache = inf.informer(INFERENCE_REPLICAS)
            manager.registry.register(
                SliceGauge(
                    lambda: [
                        s
                        for s in provisioning.slices.list()
                        if (s["metadata"].get("labels") or {}).get(naming.OWNER_UID_LABEL)
                    ],
                    manager.is_leader,
                    lambda: {str(r["metadata"].get("uid")) for r in replicas_cache.list()},
                    config.slice.ready_states,
                )
            )
            log.info("TPU slice provisioning is on for %s", ", ".join(sorted(config.accelerators)))
        else:
            log.warning(gke.CRD_MISSING_LOG)
    if manager.webhooks_enabled:
        # J1: it checks demand only with a configuration and the Slice CRD; else it admits.
        manager.add_webhook(
            admission.PATH,
            admission.ReplicaAdmission(
                manager.short_client(), config if provisioning is not None else None
            ),
        )
    replicas = inf.informer(INFERENCE_REPLICAS)
    replica_reconciler = InferenceReplicaReconciler(
        manager.client, replicas, pods, manager.event_recorder("inferencereplica-controller"), hooks
    )
    replica_controller = replica_reconciler.controller()
    if provisioning is not None:
        # A Slice routes to its owner by the ome.io/slice-owner annotation; a node to the
        # owner of the Slice its slice label names.
        replica_controller.watch(provisioning.slices, keys=slice_owner_keys)
        replica_controller.watch(provisioning.nodes, keys=provisioning.node_owner_keys)
    manager.add_controller(replica_controller)
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

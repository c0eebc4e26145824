"""Wires the OMENative controllers into a manager: their shared informers, reconcilers and
event recorders, and TPU slice provisioning when it is configured and the Slice CRD is
served. The one place that knows which controllers the manager runs."""

from __future__ import annotations

import logging

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

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
from ome.runtime.client import Client, api_error, describe_error
from ome.runtime.expectations import Expectations
from ome.runtime.manager import Manager
from ome.runtime.rest import CONFIGMAPS, NODES, PODS
from ome.runtime.workqueue import PRIORITY_HIGH
from ome.tpuslice.config import parse_config
from ome.tpuslice.types import Config

from .inferencereplica.controller import (
    TEARDOWN_DEADLINE_EXCEEDED,
    Hooks,
    InferenceReplicaReconciler,
)
from .inferenceservice.controller import InferenceServiceReconciler
from .slices import admission, messages
from .slices.chiptime import CacheChipTime
from .slices.metrics import SliceGauge, SliceMetrics
from .slices.reconciler import SliceReconcilers, host_view, pod_view

log = logging.getLogger(__name__)

#: Warnings each recorded once for what OME did (SliceLost) or what is left to clean up by
#: hand (TeardownDeadlineExceeded): the spam filter never drops them. Every other reason has
#: a budget of its own, which the Warnings of lasting conditions refresh only once a minute.
NEVER_FILTERED = (messages.SLICE_LOST, TEARDOWN_DEADLINE_EXCEEDED)

CONFIG_MAP = "inferenceservice-config"
CONFIG_KEY = "tpuSliceProvisioning"


class StartupError(RuntimeError):
    """The manager cannot start: an API error its retries outlasted, said in one line."""


def load_config(client: Client, namespace: str) -> tuple[Config | None, str]:
    """A1: the ConfigMap's ``tpuSliceProvisioning`` entry, read once at start, and when it
    is missing, why (for the start-up line). Missing means off; an invalid one raises
    ``ConfigError`` with every error; a read that keeps failing, ``StartupError``."""
    try:
        cm = client.live_get(CONFIGMAPS, CONFIG_MAP, namespace)
    except ApiException as e:
        if e.status == 404:
            return None, messages.no_config_map(CONFIG_MAP, namespace)
        raise StartupError(
            f"reading ConfigMap {namespace}/{CONFIG_MAP} failed: {describe_error(e)}"
        ) from e
    except (HTTPError, OSError) as e:
        raise StartupError(
            f"reading ConfigMap {namespace}/{CONFIG_MAP} failed: {describe_error(e)}"
        ) from e
    parsed = parse_config((cm.get("data") or {}).get(CONFIG_KEY))
    return parsed, "" if parsed is not None else messages.no_config_entry(
        CONFIG_MAP, namespace, CONFIG_KEY
    )


def _serves(client: Client) -> bool:
    """L: whether the Slice CRD is served; a check that keeps failing is ``StartupError``."""
    try:
        return client.serves(gke.SLICES)
    except Exception as e:
        if not api_error(e):
            raise
        raise StartupError(
            f"checking for the {gke.CRD_NAME} CRD failed: {describe_error(e)}"
        ) from e


def setup_controllers(
    manager: Manager, hooks: Hooks | None = None, orphan_collection: bool = True
) -> InferenceReplicaReconciler:
    """Add the controllers; raises ``ConfigError`` for an invalid slice configuration and
    ``StartupError`` for a start-up read that keeps failing. ``orphan_collection``: whether
    Slices whose InferenceReplica is gone are released (G6), when slices are provisioned."""
    inf = manager.informers
    hooks = hooks or Hooks()
    replicas = inf.informer(INFERENCE_REPLICAS)
    recorder = manager.event_recorder("inferencereplica-controller", NEVER_FILTERED)
    pod_expectations = Expectations()
    config, why_off = load_config(manager.client, manager.options.namespace)
    slices: SliceReconcilers | None = None
    if config is None or not _serves(manager.client):
        pods = inf.informer(PODS, label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY_OMENATIVE}")
        if config is None:
            log.info(messages.provisioning_off(why_off))
        else:
            log.warning(messages.CRD_MISSING_LOG)
    else:
        # Every pod (the holders, G2), OME's whole and the others cut to what G2 reads: one
        # watch, each pod event decoded once.
        pods = inf.informer(PODS, transform=pod_view(config))
        slices = SliceReconcilers(
            manager.client,
            config,
            inf.informer(gke.SLICES),
            inf.informer(NODES, transform=host_view),
            pods,
            pods,
            replicas,
            recorder,
            SliceMetrics(config, manager.registry),
            pod_expectations,
        )
        hooks = Hooks(
            gates=[*hooks.gates, slices.slice_gate], teardown=[*hooks.teardown, slices.teardown]
        )
        informer = slices.slices
        # Each scrape reads every Slice and replica: from the caches themselves (peek_list),
        # since a copy of each (Informer.list) made a scrape cost 0.1 s at 5,000 services.
        manager.registry.register(
            SliceGauge(
                lambda: [s for s in map(slices.slice_view, informer.peek_list()) if s.owner_uid],
                manager.leads_with_synced_caches,
                lambda: {str(r["metadata"].get("uid")) for r in replicas.peek_list()},
                config.slice.ready_states,
            )
        )
        manager.registry.register(CacheChipTime(slices, manager.leads_with_synced_caches))
        log.info(
            messages.provisioning_on(
                {name: acc.topologies for name, acc in config.accelerators.items()},
                orphan_collection,
            )
        )
    if manager.webhooks_enabled:
        # J1: it checks demand only with a configuration and the Slice CRD; else it admits.
        manager.add_webhook(
            admission.PATH,
            admission.ReplicaAdmission(
                manager.short_client(), config if slices is not None else None
            ),
        )
    replica_reconciler = InferenceReplicaReconciler(
        manager.client, replicas, pods, recorder, hooks, expectations=pod_expectations
    )
    replica_controller = replica_reconciler.controller()
    if slices is not None:
        # The gate reads Slices and their hosts: a Slice routes to its owner (by the
        # ome.io/slice-owner annotation, and by its name), a node to the Slice's owner.
        # A Slice turning ready, a host of a ready Slice, a host lost and what goes go first
        # (workqueue priority): they unblock replicas already waiting, ahead of new replicas'
        # first passes and of the Slices still on their way. The slice controller is woken by
        # the same events: each is routed once, for both queues.
        slice_controller = slices.controller(gated=[replica_controller])
        # A deleting replica's teardown waits on what the slice controller watches (the
        # holders of its Slices' hosts going): that controller wakes it, first.
        slices.on_teardown(lambda key: replica_controller.enqueue(key, PRIORITY_HIGH))
        manager.add_controller(slice_controller)
        if orphan_collection:
            manager.add_controller(slices.orphan_controller())
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

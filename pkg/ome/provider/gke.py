"""GKE's Slice object through the API: find the CRD, create a Slice, release one.

The one module that knows the Slice's group, version and resource; building and reading the
object's fields is the pure core's (``ome.tpuslice.naming``). Deletes always carry a UID.
"""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from ome.runtime.client import Client
from ome.runtime.rest import JSON, Resource

SLICES = Resource("accelerator.gke.io", "v1beta1", "slices", namespaced=False)
CRD_NAME = "slices.accelerator.gke.io"

#: behaviour.md L: the exact line when the CRD is missing at start.
CRD_MISSING_LOG = (
    "The InferenceReplica controller won't provision TPU slices because the "
    "accelerator.gke.io/v1beta1 Slice CRD is not available; pods are created without slices "
    "until it is installed and the manager restarts."
)


def crd_available(client: Client) -> bool:
    """Whether the API server serves Slices (a list of one answers)."""
    try:
        client.rest.list(SLICES, limit=1)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def create(client: Client, body: JSON) -> JSON:
    return client.create(SLICES, body)


def live_get(client: Client, name: str) -> JSON | None:
    return client.live_get_or_none(SLICES, name)


def release(client: Client, name: str, uid: str) -> bool:
    """Delete our Slice, preconditioned on its UID. True when it is gone or going;
    a 409 (someone replaced it) leaves the replacement alone."""
    try:
        client.delete(SLICES, name, uid=uid)
    except ApiException as e:
        if e.status == 409:
            return False
        raise
    return True

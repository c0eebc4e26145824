"""The InferenceReplica validating webhook (J1, J2): observe (a live node read, only
when the decision asks for it), decide (``ome.tpuslice.admission``), answer.

It admits whatever it cannot check: another kind sent by a misconfigured webhook, an
operation other than CREATE or UPDATE, or a node read that fails (logged). The controller's
``SliceDemandInvalid`` check is the second line behind it.
"""

from __future__ import annotations

import logging
import re

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from ome.api.v1beta1 import GROUP
from ome.runtime.client import Client
from ome.runtime.rest import NODES
from ome.runtime.webhook import AdmissionRequest, AdmissionResponse
from ome.tpuslice import admission, placement
from ome.tpuslice.types import Config

log = logging.getLogger(__name__)

#: A Kubernetes label value (at most 63 characters, alphanumeric at both ends).
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")

#: Where the manager serves it; config/webhook names the same path.
PATH = "/validate-ome-io-v1beta1-inferencereplica"


class ReplicaAdmission:
    """``config`` is None when provisioning is off (no configuration or no Slice CRD: J1);
    then every write is admitted. ``client`` should retry briefly: the API server waits for
    the answer only ``timeoutSeconds``."""

    def __init__(self, client: Client, config: Config | None) -> None:
        self.client = client
        self.config = config

    def read_nodes(self, accelerators: frozenset[str]) -> set[str] | None:
        """J1: which of ``accelerators`` (the values the pods select) have provision-only
        nodes, read live; None when a read fails. One read per value, for one node of it
        (``limit=1``): the answer is whether there is one, and a list of every node on each
        replica write would cost the API server and the webhook a pool's worth of nodes."""
        assert self.config is not None
        found: set[str] = set()
        try:
            for value in sorted(accelerators):
                if not _LABEL_VALUE.fullmatch(value):
                    continue  # no node carries a value that is not a label value
                selector = (
                    f"{placement.provision_only_selector(self.config)},"
                    f"{self.config.accelerator_label}={value}"
                )
                nodes = self.client.live_list(NODES, label_selector=selector, limit=1)
                found |= admission.provision_only_accelerators(nodes, self.config)
        except ApiException as e:
            log.warning(
                "could not read nodes for InferenceReplica admission: %s %s", e.status, e.reason
            )
            return None
        except (HTTPError, OSError) as e:
            log.warning("could not read nodes for InferenceReplica admission: %s", e)
            return None
        return found

    def __call__(self, request: AdmissionRequest) -> AdmissionResponse:
        kind = request.kind
        if (kind.get("group"), kind.get("kind")) != (GROUP, "InferenceReplica"):
            what = f"{kind.get('kind') or 'an object'} ({kind.get('group') or 'core'})"
            return AdmissionResponse(
                True,
                warnings=(
                    f"admitted unchecked: this webhook validates InferenceReplicas, not {what}",
                ),
            )
        if request.operation not in ("CREATE", "UPDATE"):
            return AdmissionResponse(True)
        if not isinstance(request.object, dict):
            return AdmissionResponse(
                True, warnings=("admitted unchecked: the review carries no object",)
            )
        decision = admission.decide(
            request.operation, request.object, request.old_object, self.config, self.read_nodes
        )
        if decision.log:
            log.warning(decision.log, extra={"replica": f"{request.namespace}/{request.name}"})
        if decision.allowed:
            return AdmissionResponse(True)
        return AdmissionResponse(False, message=decision.message, code=403, reason="Forbidden")

"""The parsed ``tpuSliceProvisioning`` configuration as plain frozen values.

Produced by ``config.parse_config`` (A1 to A5); read by every other module of the core.
No I/O, no Kubernetes types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType


@dataclass(frozen=True)
class Accelerator:
    """One entry of ``accelerators``: keyed by the accelerator node-label value."""

    name: str  # the accelerator label value, e.g. "tpu7x"
    slice_type: str  # Slice spec.type, e.g. "tpu7x"
    chips_per_host: int
    topologies: tuple[str, ...]  # canonical topology strings, e.g. ("2x2x1", "2x2x2")


@dataclass(frozen=True)
class SliceSettings:
    owner_kind_label: str
    owner_name_label: str
    annotations: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    pod_annotations: tuple[str, ...] = ()
    ready_states: tuple[str, ...] = ("ACTIVE",)
    ready_timeout: timedelta | None = None


@dataclass(frozen=True)
class Config:
    chip_resource: str
    accelerator_label: str  # nodeLabels.accelerator
    topology_label: str  # nodeLabels.topology
    slice_label: str  # nodeLabels.slice
    provision_only_key: str
    provision_only_value: str
    accelerators: Mapping[str, Accelerator]
    slice: SliceSettings


#: The walkthrough's Step 1 values, for tests and samples.
GUIDE_CONFIG_JSON = (
    '{"accelerators":{"tpu7x":{"chipsPerHost":4,"sliceType":"tpu7x","topologies":["2x2x1","2x2x2"]}},'
    '"chipResource":"google.com/tpu","nodeLabels":{"accelerator":"cloud.google.com/gke-tpu-accelerator",'
    '"slice":"cloud.google.com/gke-tpu-slice","topology":"cloud.google.com/gke-tpu-topology"},'
    '"provisionOnly":{"key":"cloud.google.com/gke-accelerator-topology-mode","value":"PROVISION_ONLY"},'
    '"slice":{"annotations":{"cloud.google.com/managed-by":"slice-scheduler",'
    '"slice.gke.io/retry-on-failure":"true"},"ownerKindLabel":"cloud.google.com/slice-owner-kind",'
    '"ownerNameLabel":"cloud.google.com/slice-owner-name","readyStates":["ACTIVE","ACTIVE_DEGRADED"],'
    '"readyTimeout":"10m"}}'
)

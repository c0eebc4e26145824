"""Strategies for InferenceReplicas, their pods and nodes: near the walkthrough's objects, with any
field a user can write replaced by random JSON, and objects of no shape at all.

``schema_valid`` keeps only what the CRD's structural schema admits (checked by the embedded
API server's own schema code), which is all a controller can ever read from its cache.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, cast

import yaml
from hypothesis import strategies as st

from ome_sim.apiserver.schema import StructuralSchema

from .strategies import INTS, JSON, KEYS, TEXT, json_objects, json_values, mutants

ROOT = Path(__file__).resolve().parents[2]

OPT_IN = "ome.io/tpu-slice-provisioning"
ACC = "cloud.google.com/gke-tpu-accelerator"
TOPO = "cloud.google.com/gke-tpu-topology"
SLICE = "cloud.google.com/gke-tpu-slice"
TPU = "google.com/tpu"
PROVISION_ONLY = "cloud.google.com/gke-accelerator-topology-mode"

#: B7 materialises one pod spec per worker pod, so a worker size is kept small here (see
#: ``test_known_issues.py`` for what a huge one does).
SIZES = st.one_of(st.integers(0, 4), st.sampled_from([0, 1, 2, 3, 7, 16]))

#: Go durations at and past every bound: int64 nanoseconds, Python's digit limit, units.
DURATIONS = [
    "10m",
    "0s",
    "-1s",
    "soon",
    "",
    "1h" * 50,
    "2562047h47m16.854775807s",
    "2562047h47m16.854775808s",
    "-2562047h",
    "9" * 5000 + "s",
    "." + "9" * 5000 + "s",
    "1.5µs",
    "1e3s",
    "+0",
]

QUANTITIES = st.one_of(
    st.integers(-8, 16),
    INTS,
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
    st.sampled_from(["4", "2", "1500m", "8k", "1Ki", "4ki", "1e3", "-0", "0.5", "1e999999999k"]),
    json_values(4),
)


@functools.cache
def crd_schema(plural: str) -> StructuralSchema:
    """The structural schema of OME's CRD ``ome.io_<plural>.yaml``, as the API server uses it."""
    crd = yaml.safe_load((ROOT / f"config/crd/ome.io_{plural}.yaml").read_text())
    return StructuralSchema(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def schema_valid(obj: JSON, plural: str = "inferencereplicas") -> bool:
    """Whether the API server would store ``obj`` as one of ``plural`` (InferenceReplicas)."""
    return not crd_schema(plural).validate(obj)


def _str_map(keys: st.SearchStrategy[str], values: st.SearchStrategy[str]) -> Any:
    return st.dictionaries(keys, values, max_size=4)


@st.composite
def pod_specs(draw: st.DrawFn) -> JSON:
    """A runner's ``template.spec`` (free-form to the schema): the walkthrough's shape, its values
    anything."""
    selector = draw(
        st.one_of(
            _str_map(st.sampled_from([ACC, TOPO, SLICE]), TEXT),
            st.fixed_dictionaries(
                {ACC: st.sampled_from(["tpu7x", "", "tpu-v5p"]), TOPO: TEXT},
                optional={SLICE: TEXT},
            ),
            json_values(4),
        )
    )
    resources = draw(
        st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "limits": st.one_of(st.fixed_dictionaries({TPU: QUANTITIES}), json_values(3)),
                    "requests": st.one_of(st.fixed_dictionaries({TPU: QUANTITIES}), json_values(3)),
                },
            ),
            json_values(3),
        )
    )
    container = draw(
        st.one_of(
            st.fixed_dictionaries(
                {"resources": st.just(resources)},
                optional={"name": st.one_of(TEXT, json_values(2)), "image": TEXT},
            ),
            json_values(3),
        )
    )
    spec: JSON = {
        "nodeSelector": selector,
        "containers": draw(st.one_of(st.lists(st.just(container), max_size=3), json_values(3))),
    }
    if draw(st.booleans()):
        spec["tolerations"] = draw(
            st.one_of(
                st.lists(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "key": TEXT,
                            "operator": st.sampled_from(["Exists", "Equal", "Lt", "", "x"]),
                            "value": TEXT,
                            "effect": st.sampled_from(["NoSchedule", "NoExecute", ""]),
                        },
                    ),
                    max_size=3,
                ),
                json_values(3),
            )
        )
    if draw(st.booleans()):
        spec[draw(KEYS)] = draw(json_values(4))
    return spec


@st.composite
def runners(draw: st.DrawFn) -> JSON:
    """One ``spec.runners`` item that the schema admits."""
    out: JSON = {"name": draw(st.sampled_from(["default", "leader", "worker"]))}
    if draw(st.booleans()):
        out["size"] = draw(SIZES)
    annotations = draw(_str_map(st.one_of(st.just(OPT_IN), KEYS), TEXT))
    if draw(st.booleans()):
        annotations[OPT_IN] = draw(st.sampled_from(["true", "True", "false", ""]))
    template: JSON = {"metadata": {"annotations": annotations}}
    if draw(st.booleans()):
        template["metadata"]["labels"] = draw(_str_map(KEYS, TEXT))
    template["spec"] = draw(pod_specs())
    out["template"] = template
    return out


@st.composite
def replicas(draw: st.DrawFn) -> JSON:
    """An InferenceReplica the API server stores: metadata as it sets it, a schema-valid spec
    of random runners."""
    obj: JSON = {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceReplica",
        "metadata": {
            "name": draw(st.sampled_from(["qwen3-tpu-engine", "a", "x" * 63, "a.b.c"])),
            "namespace": draw(st.sampled_from(["qwen3-tpu", "default"])),
            "uid": draw(st.sampled_from(["6a1f2b3c-0000-4000-8000-000000000001", "u2"])),
            "resourceVersion": "7",
            "generation": draw(st.integers(1, 5)),
            "labels": {"ome.io/inferenceservice": "qwen3-tpu"},
        },
        "spec": {
            "component": draw(st.sampled_from(["engine", "decoder", "router", ""])),
            "replicas": draw(st.integers(0, 4)),
            "runners": draw(st.lists(runners(), min_size=1, max_size=3)),
        },
    }
    if draw(st.booleans()):
        obj["spec"]["lifecycle"] = {
            "instanceReadyTimeout": draw(st.one_of(st.sampled_from(DURATIONS), TEXT))
        }
    if draw(st.booleans()):
        obj["metadata"]["deletionTimestamp"] = "2025-03-01T11:59:00Z"
    return obj


def any_replicas() -> st.SearchStrategy[JSON]:
    """Replicas of any shape: schema-valid ones, their mutants, and random objects."""
    return st.one_of(
        replicas(),
        replicas().flatmap(lambda r: mutants(r)),
        st.dictionaries(
            st.one_of(KEYS, st.sampled_from(["spec", "metadata", "status"])), json_values()
        ),
    )


@st.composite
def nodes(draw: st.DrawFn) -> JSON:
    """A Node of the pool, or one of no shape."""
    labels = {
        ACC: draw(st.sampled_from(["tpu7x", "tpu-v5p", ""])),
        PROVISION_ONLY: draw(st.sampled_from(["PROVISION_ONLY", "STATIC"])),
    }
    if draw(st.booleans()):
        labels[SLICE] = draw(TEXT)
    node: JSON = {
        "metadata": {"name": draw(TEXT), "labels": labels},
        "spec": {"unschedulable": draw(st.one_of(st.booleans(), json_values(2)))},
        "status": {
            "conditions": [
                {"type": "Ready", "status": draw(st.sampled_from(["True", "False", "Unknown", ""]))}
            ]
        },
    }
    return cast(JSON, draw(st.one_of(st.just(node), mutants(node), json_objects())))

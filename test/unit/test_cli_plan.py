"""``kubectl ome plan``'s pure part from plain values: the demand of each component, the
refusals (the service's, the component's InvalidSpec, the webhook's own text), the Slice
names with the hash not known yet, which hosts count as free, Instances taking them in order
across components, the surge, the verdict (the exit status) and the rendered plan."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ome.cli import plan
from ome.controllers.inferenceservice.decide import engine_config, resolve
from ome.tpuslice import admission, config, naming
from ome.tpuslice.types import GUIDE_CONFIG_JSON

JSON = dict[str, Any]
CONFIG = config.parse_config(GUIDE_CONFIG_JSON)
assert CONFIG is not None

ACC = "cloud.google.com/gke-tpu-accelerator"
SLICE = "cloud.google.com/gke-tpu-slice"
TOPO = "cloud.google.com/gke-tpu-topology"
MODE = "cloud.google.com/gke-accelerator-topology-mode"
TOLERATION = [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
ENGINE_CONFIG = {"runner": {"name": "ome-container", "image": "registry.example/sglang-tpu:v1"}}


def node(
    name: str,
    *,
    slice_name: str = "",
    provision_only: bool = True,
    ready: str = "True",
    cordoned: bool = False,
) -> JSON:
    labels = {ACC: "tpu7x"}
    if provision_only:
        labels[MODE] = "PROVISION_ONLY"
    if slice_name:
        labels[SLICE] = slice_name
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": cordoned},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def pool(n: int) -> list[JSON]:
    return [node(f"h{i}") for i in range(n)]


def component(
    replicas: int = 1, topology: str = "2x2x1", chips: int = 4, opted: bool = True, **more: Any
) -> JSON:
    comp: JSON = {
        "minReplicas": replicas,
        "nodeSelector": {ACC: "tpu7x", TOPO: topology},
        "tolerations": copy.deepcopy(TOLERATION),
        "runner": {
            "resources": {
                "requests": {"google.com/tpu": chips},
                "limits": {"google.com/tpu": chips},
            }
        },
    }
    if opted:
        comp["annotations"] = {"ome.io/tpu-slice-provisioning": "true"}
    comp.update(more)
    return comp


def service(**components: JSON) -> JSON:
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "svc", "namespace": "team"},
        "spec": {
            "model": {"name": "m"},
            "runtime": {"name": "r"},
            **(components or {"engine": component()}),
        },
    }


def planned(
    svc: JSON | None = None, nodes: list[JSON] | None = None, model: bool = True
) -> plan.Preview:
    assert CONFIG is not None
    return plan.preview(
        svc or service(), model, ENGINE_CONFIG, pool(4) if nodes is None else nodes, CONFIG
    )


def test_a_fitting_component_its_demand_slices_and_surge() -> None:
    found = planned()
    (row,) = found.components
    assert found.verdict is plan.Outcome.FITS and int(found.verdict) == 0
    assert row.demand is not None
    assert (row.demand.accelerator.name, str(row.demand.topology), row.demand.hosts) == (
        "tpu7x",
        "2x2x1",
        1,
    )
    assert [(s.instance, s.ordinal, s.name, s.free_before, s.surge) for s in row.slices] == [
        (0, 0, "svc-engine-0-0-<hash>", 4, False),
        (0, 1, "svc-engine-0-1-<hash>", 3, True),
    ]
    assert plan.render(found) == (
        "COMPONENT   REPLICA      ACCELERATOR   TOPOLOGY   HOSTS   CHIPS   INSTANCES   NEEDED   "
        "FREE   SURGE   PLAN\n"
        "engine      svc-engine   tpu7x         2x2x1      1       4       1           1        "
        "4      fits    fits\n"
        "\n"
        "INSTANCE            SLOT   SLICE                   HOSTS   FREE   FITS\n"
        "svc-engine[0]       0,0    svc-engine-0-0-<hash>   1       4      yes\n"
        "svc-engine[surge]   0,1    svc-engine-0-1-<hash>   1       3      yes\n"
        "\n"
        f"{plan.HASH_LEGEND}\n"
    )


def test_more_instances_than_free_hosts_wait_and_exit_2() -> None:
    found = planned(service(engine=component(replicas=3)), pool(2))
    (row,) = found.components
    assert [s.fits for s in row.slices] == [True, True, False, False]
    assert found.verdict is plan.Outcome.WAITS and int(found.verdict) == 2
    assert row.cells()[7:] == ["3", "2", "waits", "waits"]


def test_a_multi_host_instance_surges_to_a_new_index() -> None:
    engine = component(replicas=2, topology="2x2x2", leader={}, worker={"size": 1})
    (row,) = planned(service(engine=engine)).components
    assert row.demand is not None and (row.demand.hosts, row.demand.topology.chips) == (2, 8)
    assert [(s.instance, s.ordinal, s.hosts, s.fits, s.surge) for s in row.slices] == [
        (0, 0, 2, True, False),
        (1, 0, 2, True, False),
        (2, 0, 2, False, True),
    ]
    assert row.verdict is plan.Outcome.FITS  # the surge is shown, it does not make a create wait


def test_components_share_the_pool_in_order() -> None:
    found = planned(service(engine=component(replicas=2), decoder=component(replicas=2)), pool(3))
    engine, decoder = found.components
    assert [s.free_before for s in engine.slices] == [3, 2, 1]
    assert [s.free_before for s in decoder.slices] == [1, 0, 0]
    assert (engine.verdict, decoder.verdict, found.verdict) == (
        plan.Outcome.FITS,
        plan.Outcome.WAITS,
        plan.Outcome.WAITS,
    )


def test_only_free_healthy_hosts_count_as_the_pods_tolerations_judge_them() -> None:
    nodes = [
        node("free"),
        node("sliced", slice_name="someone-else"),
        node("cordoned", cordoned=True),
        node("broken", ready="False"),
        node("unreachable", ready="Unknown"),
        node("static", provision_only=False),
    ]
    (row,) = planned(nodes=nodes).components
    assert row.free == 1
    tolerant = component()
    tolerant["tolerations"].append(
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
    )
    (row,) = planned(service(engine=tolerant), nodes).components
    assert row.free == 2


def test_the_webhooks_refusal_is_its_own_text() -> None:
    svc = service(engine=component(chips=2))
    found = planned(svc)
    (row,) = found.components
    assert CONFIG is not None
    body = {
        "metadata": {"name": "svc-engine", "namespace": "team"},
        "spec": {
            "runners": [
                {
                    "name": "default",
                    "template": {
                        "metadata": {"annotations": {"ome.io/tpu-slice-provisioning": "true"}},
                        "spec": {
                            "nodeSelector": {ACC: "tpu7x", TOPO: "2x2x1"},
                            "containers": [{"resources": {"limits": {"google.com/tpu": 2}}}],
                        },
                    },
                }
            ]
        },
    }
    webhook = admission.decide("CREATE", body, None, CONFIG, lambda asked: {"tpu7x"} & asked)
    assert not webhook.allowed
    assert row.refusal == webhook.message
    assert webhook.message == (
        "InferenceReplica team/svc-engine: pods cannot be placed on a provisioned slice: "
        "1 pod x 2 chips do not fill topology 2x2x1: it is 4 chips on 1 host, which takes 2 pods"
    )
    assert found.verdict is plan.Outcome.REFUSED and int(found.verdict) == 1
    assert plan.render(found).endswith(f"\nengine: refused: {webhook.message}\n")


def test_a_refusal_outranks_a_wait() -> None:
    found = planned(service(engine=component(replicas=9), decoder=component(chips=2)))
    assert [c.verdict for c in found.components] == [plan.Outcome.WAITS, plan.Outcome.REFUSED]
    assert found.verdict is plan.Outcome.REFUSED


def test_an_invalid_component_and_an_unserved_service_are_refused() -> None:
    bad = planned(service(engine=component(minReplicas=-1)))
    (row,) = bad.components
    assert row.refusal == (
        "InvalidSpec: component engine: minReplicas must be a whole number >= 0, not -1"
    )
    gone = planned(model=False)
    assert gone.refusal == (
        'ModelNotFound: model "m" not found: no BaseModel in namespace team and no ClusterBaseModel'
    )
    assert gone.verdict is plan.Outcome.REFUSED
    assert plan.render(gone) == f"inferenceservice svc: refused: {gone.refusal}\n"


@pytest.mark.parametrize(
    ("engine", "nodes", "note"),
    [
        (component(opted=False), None, "no slice: not opted in"),
        (component(), [node("s", provision_only=False)], "no slice: not a provision-only pool"),
    ],
)
def test_a_component_that_needs_no_slice_fits(
    engine: JSON, nodes: list[JSON] | None, note: str
) -> None:
    found = planned(service(engine=engine), nodes)
    (row,) = found.components
    assert (row.note, row.slices, found.verdict) == (note, (), plan.Outcome.FITS)
    assert row.cells()[-1] == plan.NO_SLICE
    assert plan.render(found).endswith(f"\nengine: {note}\n")


def test_no_topology_is_said() -> None:
    engine = component()
    del engine["nodeSelector"][TOPO]
    (row,) = planned(service(engine=engine)).components
    assert row.note == "no slice: no pod selects a topology"


def test_a_long_name_is_cut_as_d2_cuts_it() -> None:
    name = "a" * 60
    known = naming.slice_name(name, naming.Slot(3, 0), "0123abcd")
    assert plan.slice_name(name, 3, 0) == known[:-8] + plan.HASH
    assert len(known) == naming.MAX_NAME


def test_a_reference_resolves_as_the_controller_resolves_it() -> None:
    ns = {"team/own": {"n": 1}}
    cluster = {"own": {"c": 1}, "shared": {"c": 2}}

    def look(ref: JSON) -> JSON | None:
        return resolve("team", ref, "ServingRuntime", "ClusterServingRuntime", ns.get, cluster.get)

    assert look({"name": "own"}) == {"n": 1}  # the namespace's first
    assert look({"name": "shared"}) == {"c": 2}  # else the cluster's
    assert look({"name": "own", "kind": "ClusterServingRuntime"}) == {"c": 1}
    assert look({"name": "shared", "kind": "ServingRuntime"}) is None
    assert look({"name": "none"}) is None
    assert engine_config(None) is None and engine_config({"spec": {}}) == {}

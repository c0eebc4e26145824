"""Fuzzing InferenceService and InferenceReplica specs through every pure door they take: the
admission decision (``tpuslice.admission.decide``) and the webhook's handler
(``controllers.slices.admission.ReplicaAdmission``), the InferenceService projection, the
InferenceReplica's Instance plan, and the slice reconcilers' model and passes.

Each must answer: admit, or deny with ``InferenceReplica <ns>/<name>: pods cannot be placed
on a provisioned slice: <why>``; a ``SpecError`` that names the component; a plan; a verdict
whose error is a demand error. Never an exception of another type, never a change to its
input.
"""

from __future__ import annotations

import copy
import functools
import json
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from ome.controllers.holds import Hold
from ome.controllers.inferencereplica import instances
from ome.controllers.inferenceservice import project
from ome.controllers.slices import validation
from ome.controllers.slices.admission import ReplicaAdmission
from ome.controllers.slices.model import Pod, Replica, slots_of, wanted_slots
from ome.durations import parse_go_duration
from ome.runtime.client import Client
from ome.runtime.webhook import AdmissionResponse, BadReviewError, parse_review
from ome.tpuslice import admission, placement
from ome.tpuslice.shape import ShapeError

from .replicas import DURATIONS, OPT_IN, any_replicas, nodes, pod_specs, replicas, schema_valid
from .strategies import (
    DEPTHS,
    FUZZ,
    GUIDE_CONFIG,
    JSON,
    KEYS,
    TEXT,
    in_thread,
    json_objects,
    json_values,
    mutants,
    nested,
)

CONFIG = GUIDE_CONFIG
NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
DENIAL = "pods cannot be placed on a provisioned slice: "


# -- the admission decision ----------------------------------------------------------------


READS = st.sampled_from([frozenset({"tpu7x"}), frozenset(), None, frozenset({"tpu7x", "x"})])


def check_decision(decision: admission.Decision, new: JSON) -> None:
    assert isinstance(decision, admission.Decision)
    assert decision.why
    if decision.allowed:
        assert decision.message == ""
        return
    raw = new.get("metadata")
    meta = raw if isinstance(raw, dict) else {}
    assert decision.why == "demand invalid"
    assert decision.message.startswith(
        f"InferenceReplica {meta.get('namespace', '')}/{meta.get('name', '')}: {DENIAL}"
    ), decision.message
    assert len(decision.message) > len(DENIAL) + 20


@settings(FUZZ, max_examples=80)
@given(
    operation=st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", ""]),
    new=any_replicas(),
    old=st.one_of(st.none(), any_replicas()),
    reads=READS,
    configured=st.booleans(),
)
def test_the_decision_admits_or_denies_with_a_reason(
    operation: str, new: JSON, old: JSON | None, reads: frozenset[str] | None, configured: bool
) -> None:
    before = copy.deepcopy((new, old))
    decision = admission.decide(
        operation,
        new,
        old,
        CONFIG if configured else None,
        lambda _: None if reads is None else set(reads),
    )
    check_decision(decision, new)
    assert (new, old) == before, "the decision never changes its inputs"


@settings(FUZZ, max_examples=40)
@given(depth=DEPTHS, where=st.sampled_from(["spec", "nodeSelector", "containers", "annotations"]))
def test_deeply_nested_replicas_are_decided(depth: int, where: str) -> None:
    """Nesting as deep as a JSON decoder hands over (and deeper) in every field the decision
    reads, with the same deep object before and after an update."""
    depth = min(depth, 900)  # what the webhook's own decoder hands over (see the HTTP sweep)

    def replica() -> JSON:
        deep = nested(depth)  # built anew: copying it would overflow this test's own stack
        runner: JSON = {
            "name": "default",
            "template": {"metadata": {"annotations": {OPT_IN: "true"}}, "spec": {}},
        }
        spec = runner["template"]["spec"]
        if where == "spec":
            runner["template"]["spec"] = {"x": deep}
        elif where == "nodeSelector":
            spec["nodeSelector"] = {"cloud.google.com/gke-tpu-topology": deep}
        elif where == "containers":
            spec["containers"] = [{"resources": {"limits": {"google.com/tpu": deep}}}]
        else:
            runner["template"]["metadata"]["annotations"]["x"] = deep
        return {"metadata": {"name": "r", "namespace": "n"}, "spec": {"runners": [runner]}}

    new = replica()
    for op, previous in (("CREATE", None), ("UPDATE", replica())):
        decision = in_thread(
            functools.partial(admission.decide, op, new, previous, CONFIG, lambda _: {"tpu7x"})
        )
        check_decision(decision, new)


class _Nodes:
    """The one call the webhook makes: a live node list, answered or failing as drawn."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls = 0

    def live_list(self, resource: Any, label_selector: str = "", limit: int = 0) -> list[JSON]:
        self.calls += 1
        if isinstance(self.answer, BaseException):
            raise self.answer
        return cast(list[JSON], self.answer)


@st.composite
def requests(draw: st.DrawFn) -> JSON:
    """The ``request`` of an AdmissionReview as kube-apiserver sends it, or mangled."""
    request: JSON = {
        "uid": draw(st.sampled_from(["u-1", "ü", "x" * 300])),
        "kind": draw(
            st.one_of(
                st.just({"group": "ome.io", "version": "v1beta1", "kind": "InferenceReplica"}),
                st.fixed_dictionaries({"group": TEXT, "kind": TEXT}),
                json_objects(3),
            )
        ),
        "operation": draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", "create"])),
        "namespace": "qwen3-tpu",
        "name": "qwen3-tpu-engine",
        "object": draw(st.one_of(st.none(), any_replicas())),
        "oldObject": draw(st.one_of(st.none(), any_replicas())),
    }
    return request


@settings(FUZZ, max_examples=60)
@given(
    request=requests(),
    answer=st.one_of(
        st.lists(nodes(), max_size=3),
        st.sampled_from(
            [
                ApiException(status=503, reason="Unavailable"),
                OSError("connection reset"),
                TimeoutError(),
            ]
        ),
    ),
    configured=st.booleans(),
)
def test_the_webhook_handler_answers_every_request(
    request: JSON, answer: Any, configured: bool
) -> None:
    try:
        parsed = parse_review(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        )
    except BadReviewError as e:
        assert str(e)
        return
    handler = ReplicaAdmission(cast(Client, _Nodes(answer)), CONFIG if configured else None)
    response = handler(parsed)
    assert isinstance(response, AdmissionResponse)
    if not response.allowed:
        assert response.code == 403 and response.reason == "Forbidden"
        assert DENIAL in response.message
    for warning in response.warnings:
        assert warning.startswith("admitted unchecked: ")


# -- B7, C1 and B6 on their own ------------------------------------------------------------------


@settings(FUZZ, max_examples=100)
@given(
    specs=st.lists(st.one_of(pod_specs(), json_objects()), max_size=4),
    reads=READS,
)
def test_demand_is_a_demand_or_a_demand_error(
    specs: list[JSON], reads: frozenset[str] | None
) -> None:
    try:
        found = placement.demand(specs, CONFIG, None if reads is None else set(reads))
    except placement.DemandError as e:
        assert str(e).startswith(placement.E + ": ") and len(str(e)) > len(placement.E) + 5
        return
    if found is not None:
        assert found.pods == len(specs) and found.pods * found.chips_per_pod == found.topology.chips


@settings(FUZZ, max_examples=100)
@given(
    value=st.one_of(
        json_values(), st.floats(), st.sampled_from([10**4000, -(10**4000), 2**63, -1, 0.5, -0.0])
    )
)
def test_a_chip_quantity_that_is_none_is_named(value: Any) -> None:
    spec = {"containers": [{"name": "c", "resources": {"limits": {"google.com/tpu": value}}}]}
    try:
        chips = placement.pod_chips(spec, "google.com/tpu")
    except ShapeError as e:
        assert str(e).startswith('container "c": google.com/tpu limit ') and str(e).endswith(
            "is not a non-negative quantity"
        )
        return
    if value is not None:
        assert chips >= 0


@settings(FUZZ, max_examples=150)
@given(
    text=st.one_of(
        st.sampled_from(DURATIONS), TEXT, st.text(alphabet="0123456789.hmsuµn+-", max_size=30)
    )
)
def test_a_lifecycle_duration_parses_or_is_a_go_error(text: str) -> None:
    """``spec.lifecycle``'s durations: read with Go's ``time.ParseDuration`` rules."""
    try:
        parsed = parse_go_duration(text)
    except ValueError as e:
        assert str(e).startswith("time: ") and str(e).endswith('"')
        return
    assert abs(parsed) <= timedelta(microseconds=2**63 // 1000 + 1)


# -- the InferenceService projection -------------------------------------------------------------


@st.composite
def components(draw: st.DrawFn) -> JSON:
    """An InferenceService component (or a runtime's engineConfig): known keys, any values."""
    runner = draw(
        st.one_of(
            st.fixed_dictionaries(
                {"image": TEXT}, optional={"name": TEXT, "resources": json_values(3)}
            ),
            json_values(3),
        )
    )
    comp: JSON = {}
    for key in draw(
        st.lists(
            st.sampled_from(
                [
                    "runner",
                    "leader",
                    "worker",
                    "labels",
                    "annotations",
                    "nodeSelector",
                    "tolerations",
                    "minReplicas",
                    "maxReplicas",
                    "lifecycle",
                ]
            ),
            unique=True,
            max_size=6,
        )
    ):
        if key == "runner":
            comp[key] = runner
        elif key in ("leader", "worker"):
            comp[key] = draw(
                st.one_of(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "runner": st.one_of(st.just(runner), json_values(2)),
                            "size": st.one_of(st.integers(-2, 5), json_values(1)),
                            "nodeSelector": json_values(2),
                        },
                    ),
                    json_values(2),
                )
            )
        elif key in ("minReplicas", "maxReplicas"):
            comp[key] = draw(st.one_of(st.integers(-2, 10), json_values(1)))
        else:
            comp[key] = draw(json_values(3))
    return comp


@settings(FUZZ, max_examples=150)
@given(
    engine_config=st.one_of(st.none(), components()),
    component=st.one_of(components(), json_values()),
    name=st.sampled_from(project.COMPONENTS),
)
def test_the_projection_builds_a_storable_replica_or_names_the_problem(
    engine_config: JSON | None, component: Any, name: str
) -> None:
    isvc = {"metadata": {"name": "qwen3-tpu", "namespace": "qwen3-tpu", "uid": "u"}}
    before = copy.deepcopy((engine_config, component))
    try:
        merged = project.merge_component(engine_config, component)
        wanted = project.replica_spec(isvc, name, merged)
    except project.SpecError as e:
        assert str(e).startswith(f"component {name}: ") and len(str(e)) > len(name) + 12
        return
    finally:
        assert (engine_config, component) == before, "the projection never changes its inputs"
    assert wanted.name == f"qwen3-tpu-{name}"
    stored = schema_valid(
        {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "spec": {name: component}},
        "inferenceservices",
    ) and schema_valid(
        {
            "apiVersion": "ome.io/v1beta1",
            "kind": "ServingRuntime",
            "spec": {"engineConfig": engine_config or {}},
        },
        "servingruntimes",
    )
    if not stored:
        return  # the API server would never have handed it over
    replica = {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceReplica",
        "metadata": {"name": wanted.name},
        "spec": wanted.spec,
    }
    assert schema_valid(replica), "the API server would refuse the projection of what it stored"


@settings(FUZZ, max_examples=15)
@given(depth=DEPTHS, where=st.sampled_from(["runner", "engine_config", "lifecycle"]))
def test_a_deeply_nested_component_is_projected_or_refused(depth: int, where: str) -> None:
    """A component nested as deep as the client decodes (``json.loads``; the informer's copy
    takes whatever that gives): the projection merges and copies it on a worker's stack."""
    deep = nested(depth, kind="dict")
    component: JSON = {"runner": {"image": "img"}}
    engine_config: JSON = {}
    if where == "runner":
        component["runner"]["env"] = deep
    elif where == "engine_config":
        engine_config = {"runner": {"image": "img", "env": deep}}
        component["runner"]["env"] = {"k": deep}
    else:
        component["lifecycle"] = deep
    isvc: JSON = {
        "metadata": {"name": "s", "namespace": "n", "uid": "u"},
        "spec": {"engine": component, "runtime": engine_config},
    }
    try:
        in_thread(lambda: json.loads(json.dumps(isvc)))
    except RecursionError:
        return  # the client could not decode it: no controller is ever handed it
    try:
        in_thread(
            lambda: project.replica_spec(
                isvc, "engine", project.merge_component(engine_config, component)
            )
        )
    except project.SpecError as e:
        assert str(e).startswith("component engine: ")


# -- the Instance plan ---------------------------------------------------------------------------


@st.composite
def pods_of(draw: st.DrawFn, replica: JSON, made: list[JSON]) -> list[JSON]:
    """The pods the cache shows: those the last plan made, with a status drawn for each."""
    out = []
    for original in made:
        pod = copy.deepcopy(original)
        pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}"
        pod["status"] = draw(
            st.one_of(
                st.fixed_dictionaries(
                    {
                        "phase": st.sampled_from(["Pending", "Running", "Failed", "Succeeded", ""]),
                        "conditions": st.lists(
                            st.fixed_dictionaries(
                                {
                                    "type": st.sampled_from(["Ready", "PodScheduled"]),
                                    "status": st.sampled_from(["True", "False"]),
                                }
                            ),
                            max_size=2,
                        ),
                    },
                    optional={
                        "containerStatuses": st.lists(
                            st.fixed_dictionaries(
                                {
                                    "name": TEXT,
                                    "state": st.fixed_dictionaries(
                                        {},
                                        optional={
                                            "terminated": st.fixed_dictionaries(
                                                {"exitCode": st.integers(-1, 255)},
                                                optional={"reason": TEXT, "message": TEXT},
                                            )
                                        },
                                    ),
                                }
                            ),
                            max_size=2,
                        )
                    },
                ),
                st.just({}),
            )
        )
        if draw(st.integers(0, 9)) == 0:
            pod["metadata"]["deletionTimestamp"] = "2025-03-01T11:59:00Z"
        if draw(st.integers(0, 9)) != 0:  # now and then the cache misses one
            out.append(pod)
    return out


@settings(FUZZ, max_examples=60)
@given(replica=replicas(), data=st.data())
def test_the_instance_plan_plans_every_stored_replica(replica: JSON, data: st.DataObject) -> None:
    """Three passes of the InferenceReplica's plan on a replica the API server stores: the
    rows each pass writes are what the next one reads, the pods it creates what it sees."""
    assume(schema_valid(replica))
    made: list[JSON] = []
    for _ in range(3):
        before = copy.deepcopy(replica)
        observed = instances.Observed(
            replica=replica, pods=data.draw(pods_of(replica, made)), now=NOW
        )
        out = instances.settle(
            instances.plan(observed),
            {
                i: Hold("CapacityProvisioning", "waiting")
                for i in data.draw(st.sets(st.integers(0, 4), max_size=2))
            },
        )
        assert replica == before, "the plan never changes what it observed"
        indexes = [int(r["index"]) for r in out.rows]
        assert indexes == sorted(set(indexes))
        assert len([r for r in out.rows if r.get("phase") != "Deleting"]) >= int(
            replica["spec"].get("replicas") or 0
        )
        names = [p["metadata"]["name"] for p in out.create]
        runner_names = [r["name"] for r in replica["spec"]["runners"]]
        if len(runner_names) == len(set(runner_names)):
            # Two runners of one name (the schema allows it) make the same pods twice: a
            # finding of this fuzzer, reported, not a crash; the API server refuses the copy.
            assert len(names) == len(set(names))
        made = [
            p for p in made if p["metadata"]["name"] not in {n for n, _ in out.delete}
        ] + out.create
        replica = copy.deepcopy(replica)
        replica["status"] = {"instanceStatuses": json.loads(json.dumps(out.rows))}
        assert schema_valid(replica), "the rows the plan writes are storable"
        assert instances.suspects(instances.Observed(replica=replica, pods=[], now=NOW)) is not None


# -- the slice reconcilers' model ------------------------------------------------------------


@settings(FUZZ, max_examples=60)
@given(obj=st.one_of(any_replicas(), replicas().flatmap(lambda r: mutants(r, json_values(6)))))
def test_a_replica_of_any_shape_is_read(obj: JSON) -> None:
    before = copy.deepcopy(obj)
    replica = Replica.from_json(obj)
    assert obj == before
    assert all(
        isinstance(v, str)
        for v in (replica.namespace, replica.name, replica.uid, replica.component)
    )
    assert replica.replicas >= 0 and replica.generation >= 0
    assert len(replica.tolerations) == len(replica.pod_specs)
    wanted = wanted_slots(replica)
    assert all(s.instance >= 0 and s.ordinal in (0, 1) for s in wanted)
    if replica.deleting:
        assert not wanted
    verdict = validation.validate(replica, CONFIG, None)
    assert not verdict.error or verdict.error.startswith(placement.E + ": ")


@settings(FUZZ, max_examples=100)
@given(
    pod=st.one_of(
        json_objects(),
        st.builds(
            lambda spec, labels: {"metadata": {"name": "p", "labels": labels}, "spec": spec},
            pod_specs(),
            st.dictionaries(KEYS, json_values(2)),
        ),
    )
)
def test_a_pod_of_any_shape_is_read(pod: JSON) -> None:
    read = Pod.from_json(pod, "cloud.google.com/gke-tpu-slice", "google.com/tpu")
    assert read.chips >= 0
    assert read.instance is None or read.instance >= 0


@settings(FUZZ, max_examples=50)
@given(
    obj=any_replicas(),
    pending=st.dictionaries(st.integers(0, 8), st.lists(json_values(3), max_size=2), max_size=3),
)
def test_slots_of_any_pending_pods(obj: JSON, pending: dict[int, list[Any]]) -> None:
    replica = Replica.from_json(obj)
    pending_pods = {
        i: [p if isinstance(p, dict) else {} for p in pods] for i, pods in pending.items()
    }
    slots = slots_of(replica, pending_pods)
    assert set(slots) == set(pending)


# -- regressions: what the fuzzers found -----------------------------------------------------


def test_a_duration_past_pythons_digit_limit_is_gos_invalid_duration() -> None:
    """Found by ``test_a_lifecycle_duration_parses_or_is_a_go_error``: 5000 digits made
    ``int()`` refuse the text with Python's own message (``Exceeds the limit (4300 digits)
    ...``), which ``ome-manager --webhook-cert-validity`` printed as its error."""
    text = "9" * 5000 + "s"
    try:
        parse_go_duration(text)
    except ValueError as e:
        assert str(e) == f'time: invalid duration "{text}"'
    else:
        raise AssertionError("a duration past int64 parsed")
    assert parse_go_duration("0" * 5000 + "1s") == timedelta(seconds=1)  # zeros are no digits


def test_a_leader_or_worker_selector_of_the_wrong_type_is_a_spec_error() -> None:
    """Found by ``test_the_projection_builds_a_storable_replica_or_names_the_problem``:
    ``leader.nodeSelector: 1`` raised TypeError from ``_template`` instead of a SpecError."""
    isvc = {"metadata": {"name": "s", "namespace": "n", "uid": "u"}}
    for part, key, value, what in (
        ("leader", "nodeSelector", 1, "an object"),
        ("worker", "nodeSelector", ["a"], "an object"),
        ("leader", "tolerations", {"key": "x"}, "a list"),
    ):
        component = {"runner": {"image": "img"}, part: {"runner": {"image": "img"}, key: value}}
        try:
            project.replica_spec(isvc, "engine", project.merge_component({}, component))
        except project.SpecError as e:
            assert str(e) == f"component engine: {part}.{key} must be {what}"
        else:
            raise AssertionError(f"{part}.{key}: {value!r} was projected")


def test_a_chip_quantity_past_the_digit_limit_is_named() -> None:
    """Found by ``test_a_chip_quantity_that_is_none_is_named``: naming the quantity in the
    error raised ValueError (``json.dumps`` of an int of 5001 digits) instead of ShapeError."""
    for value, shown in ((10**5000, "1.000E+5000"), (-(10**5000), "-1.000E+5000")):
        spec = {"containers": [{"name": "c", "resources": {"limits": {"google.com/tpu": value}}}]}
        try:
            placement.pod_chips(spec, "google.com/tpu")
        except ShapeError as e:
            assert str(e) == (
                f'container "c": google.com/tpu limit "{shown}" is not a non-negative quantity'
            )
        else:
            raise AssertionError("a quantity past MAX_CHIPS was counted")

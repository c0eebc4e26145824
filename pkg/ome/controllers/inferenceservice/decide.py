"""What an InferenceService pass decides, from what it observed: whether the service can be
served at all, the InferenceReplica to create or update per component (``project`` builds
its spec), the replicas of removed components to delete, the conditions and the status.
Pure: no I/O, no client and no clock (the time is given); the controller acts on the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from ome.api.v1beta1 import DEPLOYMENT_MODE_OMENATIVE, FINALIZER_IR_TEARDOWN, controller_reference
from ome.controllers.conditions import WantedCondition, set_conditions
from ome.controllers.holds import hold_reason
from ome.kube import JSON, json_copy, parse_time

from .project import COMPONENTS, SpecError, merge_component, replica_spec


def resolve(
    namespace: str,
    ref: JSON,
    kind: str,
    cluster_kind: str,
    namespaced: Callable[[str], JSON | None],
    cluster: Callable[[str], JSON | None],
) -> JSON | None:
    """The object a model or runtime reference names (M6): of ``kind`` in the service's
    namespace (``namespaced`` looks up ``<namespace>/<name>``), else of ``cluster_kind``
    (``cluster`` looks up ``<name>``); a reference that names its kind is looked up only
    there. None when nothing resolves. The lookups are the caller's: caches or live reads."""
    name, wanted = ref.get("name", ""), ref.get("kind")
    if wanted != cluster_kind:
        found = namespaced(f"{namespace}/{name}")
        if found is not None or wanted == kind:
            return found
    return cluster(name)


def engine_config(runtime: JSON | None) -> JSON | None:
    """A resolved runtime's ``engineConfig`` (``{}`` without one); None with no runtime."""
    return None if runtime is None else (runtime.get("spec") or {}).get("engineConfig") or {}


@dataclass(frozen=True, eq=False)
class ServiceObservation:
    """What a pass looks at: the InferenceService (as our last status write left it, while
    the cache lags behind that write), whether its model resolves, its runtime's
    ``engineConfig`` (None: no runtime resolves), and its own InferenceReplicas by component
    (those whose controller ownerReference has the service's UID: one of a deleted service
    of the same name is none of its). The replicas are the cache's objects: only read."""

    service: JSON
    model_found: bool
    engine_config: JSON | None
    replicas: Mapping[str, JSON]


@dataclass(frozen=True, eq=False)
class ComponentPlan:
    """One component's InferenceReplica ``replica``: ``invalid``, why the component cannot be
    deployed (an InvalidSpec); else the replica count it is to have (``desired``) and the body
    to create (no replica yet) or to replace (the replica differs), at most one of them."""

    component: str
    replica: str
    invalid: str | None = None
    desired: int = 0
    create: JSON | None = None
    update: JSON | None = None


@dataclass(frozen=True)
class ServicePlan:
    """``stop``: the Ready condition of a service that cannot be served (the only condition,
    nothing else written); else what each present component's replica needs, in order, and
    the (name, UID) of each removed component's replica to delete."""

    stop: WantedCondition | None = None
    components: tuple[ComponentPlan, ...] = ()
    delete: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Applied:
    """How a component's replica write went: ``refused``, the ComponentReconcileError
    message of a write the API server refused; ``stale`` when an update was refused because
    the cache's copy was old (409): the replica may have moved on in a change that does not
    wake the service, so the pass looks again soon."""

    refused: str | None = None
    stale: bool = False


def plan_service(obs: ServiceObservation) -> ServicePlan:
    """The deployment mode, then the model, then the runtime, then the components: the first
    that fails stops the pass with its Ready condition."""
    isvc = obs.service
    ns = isvc["metadata"]["namespace"]
    spec = isvc.get("spec") or {}
    mode = spec.get("deploymentMode") or DEPLOYMENT_MODE_OMENATIVE
    if mode != DEPLOYMENT_MODE_OMENATIVE:
        return _stop(
            "UnsupportedDeploymentMode",
            f'deploymentMode "{mode}" is not supported: this controller serves OMENative only',
        )
    if not obs.model_found:
        model_name = (spec.get("model") or {}).get("name", "")
        return _stop(
            "ModelNotFound",
            f'model "{model_name}" not found: '
            f"no BaseModel in namespace {ns} and no ClusterBaseModel",
        )
    if obs.engine_config is None:
        runtime_name = (spec.get("runtime") or {}).get("name", "")
        return _stop(
            "RuntimeNotFound",
            f'runtime "{runtime_name}" not found: '
            f"no ServingRuntime in namespace {ns} and no ClusterServingRuntime",
        )
    present = [c for c in COMPONENTS if spec.get(c) is not None]
    if not present:
        return _stop("NoComponents", "the InferenceService has no engine, decoder or router")
    name = isvc["metadata"]["name"]
    removed = [(c, obs.replicas.get(c)) for c in COMPONENTS if c not in present]
    return ServicePlan(
        components=tuple(
            plan_component(isvc, c, obs.engine_config, obs.replicas.get(c)) for c in present
        ),
        delete=tuple(
            (f"{name}-{c}", r["metadata"]["uid"])
            for c, r in removed
            if r is not None and not r["metadata"].get("deletionTimestamp")
        ),
    )


def removal_confirmed(live: JSON | None, service_uid: str, replica: str) -> bool:
    """Whether the service as the API server holds it now (``live``) still wants ``replica``
    gone: it is the same service (its UID), not being deleted (its replicas then go with it,
    as they are owned), and no component it has is the one ``replica`` serves. A plan drawn
    from a cached copy is so confirmed before its delete, since a component added back
    meanwhile would otherwise lose its running replica."""
    if live is None:
        return False
    meta = live.get("metadata") or {}
    if meta.get("uid") != service_uid or meta.get("deletionTimestamp"):
        return False
    spec = live.get("spec") or {}
    wanted = {f"{meta.get('name')}-{c}" for c in COMPONENTS if spec.get(c) is not None}
    return replica not in wanted


def _stop(reason: str, message: str) -> ServicePlan:
    return ServicePlan(stop=WantedCondition("Ready", False, reason, message))


def plan_component(
    isvc: JSON, component: str, engine_config: JSON, current: JSON | None
) -> ComponentPlan:
    """The replica ``component`` is to have, against the ``current`` one: an autoscaler (or
    ``kubectl scale``) may move its replica count within [min, max], and its ``lifecycle``,
    when the service sets none, is the replica's own setting (an operator's): both are kept.
    A new replica carries its teardown finalizer from the start (its controller would
    otherwise add it in a write of its own)."""
    name = f"{isvc['metadata']['name']}-{component}"
    merged = merge_component(engine_config, (isvc.get("spec") or {})[component])
    try:
        wanted = replica_spec(isvc, component, merged)
    except SpecError as e:
        return ComponentPlan(component, name, invalid=str(e))
    spec, labels = wanted.spec, wanted.labels
    if current is None:
        ns = isvc["metadata"]["namespace"]
        body = {
            "apiVersion": "ome.io/v1beta1",
            "kind": "InferenceReplica",
            "metadata": {
                "name": wanted.name,
                "namespace": ns,
                "labels": labels,
                "ownerReferences": [controller_reference(isvc, "InferenceService")],
                "finalizers": [FINALIZER_IR_TEARDOWN],
            },
            "spec": spec,
        }
        return ComponentPlan(component, wanted.name, desired=int(spec["replicas"]), create=body)
    current_spec = current.get("spec") or {}
    spec["replicas"] = clamp_replicas(current_spec.get("replicas"), merged)
    if "lifecycle" not in spec and "lifecycle" in current_spec:
        spec["lifecycle"] = json_copy(current_spec["lifecycle"])
    current_labels = current["metadata"].get("labels") or {}
    update = None
    if current.get("spec") != spec or any(current_labels.get(k) != v for k, v in labels.items()):
        update = json_copy(current)
        update["spec"] = spec
        update["metadata"].setdefault("labels", {}).update(labels)
    return ComponentPlan(component, wanted.name, desired=int(spec["replicas"]), update=update)


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


#: M7: how long an Instance's operation has been held before its component's condition names
#: it, from the operation's ``startedAt`` (which every rewording of the hold keeps; the record's
#: ``time`` restarts with each). Every new Instance on a provision-only pool is held while its
#: Slice is provisioned: seconds, and at 2,000 services created at once up to the ~46 s it
#: takes them all to be Ready (docs/performance.md). Named at once, each such routine hold
#: would cost its service two status writes more (named, then dropped) and a pass per
#: rewording; a minute is past that, and a hold that lasts it is one a user wants explained.
#: Read at call time (tests set it smaller).
NAME_HELD_AFTER = timedelta(seconds=60)


@dataclass(frozen=True)
class NamedHolds:
    """M7: of a replica's Instances, those held long enough to be named, as (index, the hold's
    own reason) by index, and ``due``: the seconds until another one is, by time alone (the
    earliest held one not named yet; None when there is none)."""

    named: tuple[tuple[int, str], ...] = ()
    due: float | None = None


def named_holds(replica: JSON | None, now: datetime) -> NamedHolds:
    """M7: the Instances of ``replica`` (its rows) whose operation waits on a hold (E7) that
    it records as its ``lastFailure``, named once the operation has been held
    ``NAME_HELD_AFTER`` since it started; an operation whose start is unreadable is named at
    once. The replica is only read."""
    rows = ((replica or {}).get("status") or {}).get("instanceStatuses") or []
    named: list[tuple[int, str]] = []
    due: float | None = None
    after = NAME_HELD_AFTER
    for row in rows:
        op = row.get("operation") or {}
        token = op.get("waiting")
        failure = row.get("lastFailure")
        if not token or not isinstance(failure, dict) or failure.get("reason") != token:
            continue
        reason = hold_reason(failure)
        if reason is None:
            continue
        index = row.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            continue
        started = parse_time(op.get("startedAt"))
        left = None if started is None else (started + after - now).total_seconds()
        if left is None or left <= 0:
            named.append((index, reason))
        elif due is None or left < due:
            due = left
    return NamedHolds(tuple(sorted(named)), due)


def naming_due(replicas: Iterable[JSON], now: datetime, named: bool = False) -> float | None:
    """M7: the seconds until the conditions of the service that owns ``replicas`` change by
    time alone, an Instance held long enough to be named (None: none is on its way). With
    ``named``, 0 when an Instance is named already: a look whose time has come, which cannot
    tell whether the service's conditions name it yet, so the service's pass decides."""
    holds = [named_holds(r, now) for r in replicas]
    if named and any(h.named for h in holds):
        return 0.0
    return min((h.due for h in holds if h.due is not None), default=None)


def component_message(ready: int, desired: int, named: Sequence[tuple[int, str]]) -> str:
    """M7: a ``<Component>Ready`` condition's message: ``<ready> of <desired> instances
    ready``, then, with Instances named (``named_holds``), the first of them (the lowest
    index) and its hold's reason, and how many more are named: ``; instance <i> is withheld
    until its capacity is ready: <reason>[; 1 more instance is withheld | ; <n> more
    instances are withheld]``. The one place these words are."""
    message = f"{ready} of {desired} instances ready"
    if not named:
        return message
    index, reason = min(named)
    message += f"; instance {index} is withheld until its capacity is ready: {reason}"
    more = len(named) - 1
    if more == 1:
        message += "; 1 more instance is withheld"
    elif more > 1:
        message += f"; {more} more instances are withheld"
    return message


def service_conditions(
    obs: ServiceObservation, plan: ServicePlan, applied: Sequence[Applied], now: datetime
) -> list[WantedCondition]:
    """``<Component>Ready`` for each component (``applied``: how its write went, in the
    plan's order), then ``Ready``: a component is ready when its replica has as many ready
    instances as it is to have, all at its update revision. A component's message names its
    Instances held long enough by ``now`` (M7)."""
    if plan.stop is not None:
        return [plan.stop]
    out: list[WantedCondition] = []
    for c, result in zip(plan.components, applied, strict=True):
        ctype = f"{c.component.capitalize()}Ready"
        if c.invalid is not None:
            out.append(WantedCondition(ctype, False, "InvalidSpec", c.invalid))
            continue
        if result.refused is not None:
            out.append(WantedCondition(ctype, False, "ComponentReconcileError", result.refused))
            continue
        replica = obs.replicas.get(c.component)
        status = (replica or {}).get("status") or {}
        ready = int(status.get("readyReplicas") or 0)
        ok = (
            replica is not None
            and ready >= c.desired
            and status.get("updateRevision") == status.get("currentRevision")
        )
        reason = "ComponentReady" if ok else "ComponentNotReady"
        message = component_message(ready, c.desired, named_holds(replica, now).named)
        out.append(WantedCondition(ctype, ok, reason, message))
    all_ready = all(c.ok for c in out)
    out.append(
        WantedCondition(
            "Ready",
            all_ready,
            "AllComponentsReady" if all_ready else "ComponentsNotReady",
            "all components are ready" if all_ready else "some components are not ready",
        )
    )
    return out


def service_status(isvc: JSON, conditions: Sequence[WantedCondition], now: datetime) -> JSON | None:
    """The service's status with ``conditions`` (every condition it has: one no longer
    decided goes), observed at its generation; None when that is the status it has."""
    old = isvc.get("status") or {}
    generation = isvc["metadata"].get("generation", 1)
    status = dict(
        old,
        conditions=set_conditions(
            old.get("conditions") or [], conditions, int(generation), now, replace_all=True
        ),
        observedGeneration=generation,
    )
    return None if status == old else status

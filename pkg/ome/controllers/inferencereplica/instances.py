"""The Instance lifecycle of an InferenceReplica (M1 to M4), as pure decisions.

``plan`` takes what the reconciler observed (the replica's spec, its status rows, its pods)
and returns plain data: the pods to create and delete and the new status rows. Pods an
operation is about to create wait in ``Plan.pending`` until ``settle`` is told which
Instances are held (E7, E8), as data. No I/O, no client types and no callables: the
reconciler asks its gates, settles the plan and carries it out.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from ome.api.v1beta1 import (
    LABEL_COMPONENT,
    LABEL_INCARNATION,
    LABEL_INFERENCE_REPLICA,
    LABEL_INFERENCE_SERVICE,
    LABEL_INSTANCE_INDEX,
    LABEL_MANAGED_BY,
    LABEL_POD_ORDINAL,
    LABEL_REVISION_HASH,
    LABEL_RUNNER,
    MANAGED_BY_OMENATIVE,
    MAX_WORKERS,
    controller_reference,
)
from ome.controllers.holds import HELD_LOOK_AGAIN, Hold, hold_failure_message, hold_reason
from ome.durations import parse_go_duration
from ome.kube import JSON, json_copy, parse_time, rfc3339

RUNNERS = ("default", "leader", "worker")

#: The Update step after a surge pod failed: its surge pods are deleted, then made again.
RETRY_SURGE = "RetrySurge"


# -- revisions and pods ----------------------------------------------------------------------


def revision_hash(runners: list[JSON]) -> str:
    """M3: the hash covers the runners' pod templates (and sizes); any change rolls."""
    canonical = json.dumps(runners, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]


def multi_pod(runners: list[JSON]) -> bool:
    return any(r.get("name") in ("leader", "worker") for r in runners)


@dataclass(frozen=True)
class PodSlot:
    """One pod an Instance wants: its runner, ordinal within the runner, and template."""

    runner: str
    ordinal: int
    template: JSON


def pod_slots(runners: list[JSON], active_ordinal: int = 0) -> list[PodSlot]:
    """B7/M2: ``default`` is one pod (at the active ordinal); ``leader`` one; ``worker``
    ``size`` pods, ordinals 0..size-1, at most ``MAX_WORKERS`` (the CRD's maximum; a larger
    size, which only an older CRD let in, is not planned pod by pod)."""
    slots: list[PodSlot] = []
    for runner in runners:
        name = runner.get("name", "default")
        template = runner.get("template") or {}
        if name == "default":
            slots.append(PodSlot("default", active_ordinal, template))
        elif name == "leader":
            slots.append(PodSlot("leader", 0, template))
        elif name == "worker":
            slots.extend(
                PodSlot("worker", i, template)
                for i in range(min(int(runner.get("size") or 0), MAX_WORKERS))
            )
    return slots


def pod_name(replica: str, index: int, runner: str, ordinal: int) -> str:
    return f"{replica}-{index}-{runner}-{ordinal}"


def build_pod(replica: JSON, index: int, slot: PodSlot, revision: str, incarnation: int) -> JSON:
    """A pod of an Instance: the runner's template, named and labelled as M2 says, and
    owned by the replica."""
    meta = replica["metadata"]
    template = json_copy(slot.template)
    tmeta = template.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    labels.update(
        {
            LABEL_INFERENCE_SERVICE: (meta.get("labels") or {}).get(LABEL_INFERENCE_SERVICE, ""),
            LABEL_COMPONENT: str((replica.get("spec") or {}).get("component", "")),
            LABEL_MANAGED_BY: MANAGED_BY_OMENATIVE,
            LABEL_INFERENCE_REPLICA: meta["name"],
            LABEL_INSTANCE_INDEX: str(index),
            LABEL_RUNNER: slot.runner,
            LABEL_REVISION_HASH: revision,
            LABEL_POD_ORDINAL: str(slot.ordinal),
            LABEL_INCARNATION: str(incarnation),
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(meta["name"], index, slot.runner, slot.ordinal),
            "namespace": meta["namespace"],
            "labels": {k: v for k, v in labels.items() if v != ""},
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [controller_reference(replica, "InferenceReplica")],
        },
        "spec": template.get("spec") or {},
    }


# -- observed pods ---------------------------------------------------------------------------


def pod_ready(pod: JSON) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def pod_failed(pod: JSON) -> bool:
    return (pod.get("status") or {}).get("phase") == "Failed"


def failure_of(pod: JSON, now: datetime) -> JSON:
    """M1 ``lastFailure`` from a failed pod: its first terminated container, if any."""
    status = pod.get("status") or {}
    container, reason, exit_code, message = "", status.get("reason") or "PodFailed", None, ""
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            container = cs.get("name", "")
            reason = term.get("reason") or reason
            exit_code = term.get("exitCode")
            message = term.get("message") or ""
            break
    return {
        "podName": pod["metadata"]["name"],
        "containerName": container,
        "reason": reason,
        "exitCode": exit_code,
        "message": message or status.get("message") or f"pod {pod['metadata']['name']} failed",
        "time": rfc3339(now),
    }


def index_of(pod: JSON) -> int | None:
    raw = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_INSTANCE_INDEX)
    return int(raw) if raw is not None and raw.isdigit() else None


def terminating(pod: JSON) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def running_revision(pods: list[JSON], revision: str) -> str:
    """The revision the pods actually run: ``revision`` when all carry it, else an older
    one of theirs (so a Ready Instance at it rolls to ``revision``)."""
    labels = {
        ((p.get("metadata") or {}).get("labels") or {}).get(LABEL_REVISION_HASH, "") for p in pods
    }
    older = sorted(str(r) for r in labels if r != revision)
    return older[0] if older else revision


# -- the plan --------------------------------------------------------------------------------


@dataclass
class Pending:
    """An operation's pods that are ready to be created at ``index``, unless a hold parks the
    operation (E7, E8): what ``settle`` finishes. ``there`` are the pods already at ``index``
    (a terminating one still holds its name), ``step`` the step the operation moves to."""

    index: int
    row: JSON
    op: JSON
    pods: list[JSON]
    there: list[JSON]
    step: str
    timeout: timedelta | None
    now: datetime


@dataclass
class Plan:
    """What the reconciler must do: create and delete pods (deletes carry the UID they were
    decided on), then write ``rows`` as ``status.instanceStatuses``. Until ``settle`` runs,
    ``pending`` holds the pods each Instance is about to get, by index."""

    create: list[JSON] = field(default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)  # (name, uid)
    rows: list[JSON] = field(default_factory=list)
    requeue_after: float | None = None
    pending: dict[int, Pending] = field(default_factory=dict)

    def wake_in(self, seconds: float) -> None:
        seconds = max(seconds, 0.05)
        self.requeue_after = (
            seconds if self.requeue_after is None else min(self.requeue_after, seconds)
        )

    def about_to_create(self) -> dict[int, list[JSON]]:
        """The pods each Instance is about to get, by index: what gates are asked about."""
        return {index: list(p.pods) for index, p in sorted(self.pending.items())}


@dataclass(frozen=True)
class Observed:
    """Everything ``plan`` looks at, as plain values."""

    replica: JSON
    pods: list[JSON]  # this replica's pods, from the cache
    now: datetime
    #: pods we created that the cache does not show yet
    expected_new: frozenset[str] = frozenset()
    confirmed_gone: frozenset[str] = frozenset()  # live reads found these pods absent
    #: pods we deleted that the cache still shows alive: read as terminating
    going: frozenset[str] = frozenset()
    #: ``revision_hash`` of the replica's runners, when the caller has it already
    revision: str | None = None


def _operation(
    kind: str, revision: str, now: datetime, deadline: datetime | None, seq: int
) -> JSON:
    return {
        "id": f"{kind.lower()}-{seq}",
        "type": kind,
        "step": "CreatePods",
        "startedAt": rfc3339(now),
        "lastProgressAt": rfc3339(now),
        "deadline": rfc3339(deadline) if deadline else None,
        "retryCount": 0,
        "targetRevision": revision,
        "reason": "",
        "waiting": None,
        "capacityRefusedAt": None,
        "surgeIndex": None,
    }


def _new_row(index: int, revision: str, now: datetime, timeout: timedelta | None) -> JSON:
    return {
        "index": index,
        "incarnation": 0,
        "phase": "Creating",
        "runningRevision": "",
        "targetRevision": revision,
        "podCount": 0,
        "servingPodCount": 0,
        "availablePodCount": 0,
        "readySince": None,
        "activeOrdinal": 0,
        "operation": _operation("Create", revision, now, now + timeout if timeout else None, 0),
        "lastFailure": None,
    }


def plan(obs: Observed) -> Plan:
    """Decide every Instance of the replica: create, hold, update (surge), restart, scale."""
    if obs.going:
        obs = replace(obs, pods=[_going(p) if _name(p) in obs.going else p for p in obs.pods])
    replica = obs.replica
    spec = replica.get("spec") or {}
    runners = list(spec.get("runners") or [])
    revision = obs.revision or revision_hash(runners)
    desired = max(0, int(spec.get("replicas") or 0))
    timeout_text = (spec.get("lifecycle") or {}).get("instanceReadyTimeout")
    try:
        timeout = parse_go_duration(timeout_text) if timeout_text else None
    except ValueError:
        timeout = None  # an unreadable timeout is no timeout: never a reason to stall
    multi = multi_pod(runners)

    by_index: dict[int, list[JSON]] = {}
    for pod in obs.pods:
        idx = index_of(pod)
        if idx is not None:
            by_index.setdefault(idx, []).append(pod)
    rows = {
        int(r["index"]): json_copy(r)
        for r in (replica.get("status") or {}).get("instanceStatuses") or []
    }
    out = Plan()

    # Scale: keep the lowest ``desired`` indexes; add missing ones at the lowest free index.
    surge_targets = {
        int(r["operation"]["surgeIndex"])
        for r in rows.values()
        if r.get("operation") and r["operation"].get("surgeIndex") is not None
    }
    live = sorted(rows)
    keep = live[:desired]
    for index in live[desired:]:  # scale down, highest first: they all go
        row = rows.pop(index)
        doomed = by_index.get(index, []) + _surge_pods(row, by_index)
        _delete(out, doomed)
        if doomed:
            row["phase"] = "Deleting"
            if (row.get("operation") or {}).get("type") != "Delete":
                row["operation"] = _operation("Delete", revision, obs.now, None, _seq(row))
            out.rows.append(row)
    taken = set(keep) | surge_targets
    candidate = 0
    while len(keep) < desired:
        while candidate in taken:
            candidate += 1
        rows[candidate] = _new_row(candidate, revision, obs.now, timeout)
        keep.append(candidate)
        taken.add(candidate)
    # Pods at indexes no row owns (and no surge targets): strays from an older state.
    owned = set(keep) | surge_targets | {r["index"] for r in out.rows}
    for index, pods in by_index.items():
        if index not in owned:
            _delete(out, pods)
    # A multi-pod surge goes to an index nothing uses: no row (Deleting ones too), no pods
    # (strays and terminating ones too).
    taken |= owned | set(by_index)

    for index in sorted(keep):
        row = rows[index]
        if (row.get("operation") or {}).get("type") == "Delete":
            # Scaled down, then up again before its pods were gone: start it afresh.
            row = rows[index] = _new_row(index, revision, obs.now, timeout)
        _plan_instance(obs, out, row, by_index, runners, revision, timeout, multi, taken)
        out.rows.append(row)
    out.rows.sort(key=lambda r: int(r["index"]))
    return out


def _name(pod: JSON) -> str:
    return str((pod.get("metadata") or {}).get("name", ""))


def _going(pod: JSON) -> JSON:
    """A pod we deleted, as the cache will show it: terminating."""
    copied = copy.copy(pod)
    copied["metadata"] = {**(pod.get("metadata") or {}), "deletionTimestamp": "deleted"}
    return copied


def settle(out: Plan, holds: Mapping[int, Hold]) -> Plan:
    """Finish ``out`` once the gates have answered: each Instance held (E7) parks its
    operation, with its deadline parked (E8) and the hold as its last failure; every other
    pending Instance gets its pods, and its deadline runs from now. Returns ``out``."""
    for index, p in sorted(out.pending.items()):
        hold = holds.get(index)
        if hold is not None:
            due = _park(p.row, p.op, hold, p.pods[0]["metadata"]["name"], p.now)
            if due is not None:
                out.wake_in(due)  # a new wording kept back is due then
            if hold.routine is None or not hold.routine(hold.message):
                if due is None:
                    out.wake_in(HELD_LOOK_AGAIN)
            elif hold.look_again is not None:
                out.wake_in(hold.look_again)  # a deadline no event announces
            # else the capacity is on its way, and its every event wakes the replica
            continue
        _unpark(p.row, p.op, p.now, p.timeout)
        created = _creatable(out, p.pods, p.there)
        out.create.extend(created)
        if p.op.get("type") in ("Create", "Restart"):
            # The row counts the pods this pass creates, as the next pass will: one status
            # write, not a second one once the cache shows them.
            p.row["podCount"] = int(p.row.get("podCount") or 0) + len(created)
        p.op["step"] = p.step
        _deadline(out, p.row, p.op, p.now)
    out.pending = {}
    return out


def _seq(row: JSON) -> int:
    op = row.get("operation") or {}
    raw = str(op.get("id", "x-0")).rsplit("-", 1)[-1]
    return (int(raw) if raw.isdigit() else 0) + 1


def _delete(out: Plan, pods: Iterable[JSON]) -> None:
    """Delete ``pods`` by UID; one already terminating is not deleted again."""
    out.delete.extend(
        (p["metadata"]["name"], p["metadata"]["uid"]) for p in pods if not terminating(p)
    )


def _creatable(out: Plan, wanted: list[JSON], there: Iterable[JSON]) -> list[JSON]:
    """``wanted`` but those whose name a terminating pod still holds: those wait (and we
    look back soon)."""
    going = {p["metadata"]["name"] for p in there if terminating(p)}
    if going & {p["metadata"]["name"] for p in wanted}:
        out.wake_in(1.0)
    return [p for p in wanted if p["metadata"]["name"] not in going]


def _surge_pods(row: JSON, by_index: Mapping[int, list[JSON]]) -> list[JSON]:
    op = row.get("operation") or {}
    surge = op.get("surgeIndex")
    return list(by_index.get(int(surge), [])) if surge is not None else []


def _counts(row: JSON, pods: Iterable[JSON]) -> None:
    pods = list(pods)
    row["podCount"] = len(pods)
    ready = sum(1 for p in pods if pod_ready(p))
    row["servingPodCount"] = ready
    row["availablePodCount"] = ready


def _plan_instance(
    obs: Observed,
    out: Plan,
    row: JSON,
    by_index: Mapping[int, list[JSON]],
    runners: list[JSON],
    revision: str,
    timeout: timedelta | None,
    multi: bool,
    taken: set[int],
) -> None:
    index = int(row["index"])
    replica, now = obs.replica, obs.now
    pods = [p for p in by_index.get(index, []) if not p["metadata"].get("deletionTimestamp")]
    mine = {p["metadata"]["name"]: p for p in pods}
    op = row.get("operation")

    # A pod failed, or vanished from an Instance that had it: rebuild the Instance.
    lost = _lost_pod(obs, row, index, pods, runners, multi)
    if lost is not None:
        failure, doomed = lost
        row["incarnation"] = int(row.get("incarnation", 0)) + 1
        row["lastFailure"] = failure
        row["phase"] = "Restarting"
        row["readySince"] = None
        row["operation"] = _operation(
            "Restart", revision, now, now + timeout if timeout else None, _seq(row)
        )
        _delete(out, doomed + _surge_pods(row, by_index))
        _counts(row, [])
        out.wake_in(0.5)
        return

    running = row.get("runningRevision") or ""
    if row.get("phase") == "Ready" and running != revision and op is None:
        row["phase"] = "Updating"
        op = row["operation"] = _operation(
            "Update", revision, now, now + timeout if timeout else None, _seq(row)
        )
        if multi:
            surge = 0
            while surge in taken:
                surge += 1
            taken.add(surge)
            op["surgeIndex"] = surge
    row["targetRevision"] = revision

    if op is not None and op.get("type") == "Update":
        # The runners changed between single-pod and multi-pod mid-update: the surge moves
        # to a new index (multi-pod) or back beside the serving pods (single-pod).
        if multi and op.get("surgeIndex") is None:
            surge = 0
            while surge in taken:
                surge += 1
            taken.add(surge)
            op["surgeIndex"] = surge
        elif not multi and op.get("surgeIndex") is not None:
            op["surgeIndex"] = None
        _plan_update(obs, out, row, op, by_index, runners, revision, timeout, multi)
        return

    # Create or Restart: the pods of the Instance's active ordinal at the target revision.
    wanted = [
        build_pod(replica, index, slot, revision, int(row.get("incarnation", 0)))
        for slot in pod_slots(runners, int(row.get("activeOrdinal", 0)))
    ]
    missing = [p for p in wanted if p["metadata"]["name"] not in mine]
    present = [mine[p["metadata"]["name"]] for p in wanted if p["metadata"]["name"] in mine]
    stale = [p for name, p in mine.items() if name not in {w["metadata"]["name"] for w in wanted}]
    _delete(out, stale)
    _counts(row, present)
    # Pods we created that the cache does not show yet count too, as ``settle`` counted them.
    row["podCount"] += sum(1 for p in missing if p["metadata"]["name"] in obs.expected_new)
    if op is None:
        # No operation: the Instance was Ready. While a pod is unready it waits, with no new
        # operation (a pod confirmed gone rebuilds it, above); it is Ready again, since now,
        # when all are there and Ready. A pod only the cache misses (a live read found it)
        # does not flip a Ready Instance: readySince must not reset on cache lag.
        settled = not missing or row.get("phase") == "Ready"
        if settled and all(pod_ready(p) for p in present):
            if row.get("phase") != "Ready":
                row["phase"] = "Ready"
                row["readySince"] = rfc3339(now)
        else:
            row["phase"] = "Creating"
            row["readySince"] = None
        return
    if missing:
        _create_missing(obs, out, row, op, index, missing, by_index, timeout, "WaitReady")
        return
    _unpark(row, op, now, timeout)
    if all(pod_ready(p) for p in present):
        row["phase"] = "Ready"
        row["readySince"] = rfc3339(now)
        # The pods may predate a template change: the Instance runs what they run, and a
        # later pass rolls it to the new revision (Update).
        row["runningRevision"] = running_revision(present, revision)
        row["operation"] = None
        return
    op["step"] = "WaitReady"
    _deadline(out, row, op, now)


def _plan_update(
    obs: Observed,
    out: Plan,
    row: JSON,
    op: JSON,
    by_index: Mapping[int, list[JSON]],
    runners: list[JSON],
    revision: str,
    timeout: timedelta | None,
    multi: bool,
) -> None:
    """M4: bring the new pods up beside the old ones, then retire the old ones."""
    index, now, replica = int(row["index"]), obs.now, obs.replica
    incarnation = int(row.get("incarnation", 0))
    if multi:
        target_index = int(op["surgeIndex"])
        ordinal = 0
    else:
        target_index = index
        ordinal = 1 - int(row.get("activeOrdinal", 0))
    wanted = [
        build_pod(replica, target_index, slot, revision, incarnation)
        for slot in pod_slots(runners, ordinal)
    ]
    current = {
        p["metadata"]["name"]: p for p in by_index.get(target_index, []) if not terminating(p)
    }
    missing = [p for p in wanted if p["metadata"]["name"] not in current]
    present = [current[p["metadata"]["name"]] for p in wanted if p["metadata"]["name"] in current]
    old = [
        p
        for p in by_index.get(index, [])
        if p["metadata"]["name"] not in {w["metadata"]["name"] for w in wanted}
    ]
    # A surge pod failed: the surge pods go (the old ones serve on) and the surge is retried.
    # Until the pods we deleted (or created and not yet seen) are gone, none is counted again.
    failed = [p for p in present if pod_failed(p)]
    if op.get("step") == RETRY_SURGE:
        unseen = [p for p in missing if p["metadata"]["name"] in obs.expected_new]
        if present or unseen:
            _delete(out, present)
            out.wake_in(1.0)
            _deadline(out, row, op, now)
            return
    elif failed:
        row["lastFailure"] = failure_of(failed[0], now)
        op["retryCount"] = int(op.get("retryCount") or 0) + 1
        op["step"] = RETRY_SURGE
        op["lastProgressAt"] = rfc3339(now)
        _delete(out, present)
        out.wake_in(1.0)
        _deadline(out, row, op, now)
        return
    if missing:
        _create_missing(obs, out, row, op, target_index, missing, by_index, timeout, "SurgePods")
        return
    _unpark(row, op, now, timeout)
    if not all(pod_ready(p) for p in present):
        op["step"] = "WaitReady"
        _deadline(out, row, op, now)
        return
    # The new pods serve: the old ones go, and the Instance moves to them.
    _delete(out, old)
    if multi:
        row["index"] = target_index
    else:
        row["activeOrdinal"] = ordinal
    row["phase"] = "Ready"
    row["runningRevision"] = running_revision(present, revision)
    row["readySince"] = rfc3339(now)
    row["operation"] = None
    _counts(row, present)


def _had_pods(row: JSON) -> bool:
    """Whether the Instance has had all its pods (or is waiting on them), so a pod it lacks is
    lost. A row without an operation was Ready, whether or not its pods are Ready now."""
    op = row.get("operation")
    if op is None or row.get("phase") in ("Ready", "Updating"):
        return True
    return bool(op.get("step") == "WaitReady")


def _create_missing(
    obs: Observed,
    out: Plan,
    row: JSON,
    op: JSON,
    index: int,
    missing: list[JSON],
    by_index: Mapping[int, list[JSON]],
    timeout: timedelta | None,
    step: str,
) -> None:
    """An operation's missing pods at ``index`` wait in ``out.pending`` for ``settle``, which
    creates them unless a hold parks the operation (E7/E8). Pods we just created (the cache
    does not show them yet) are not asked about again: with none left, the operation goes on."""
    pending = [p for p in missing if p["metadata"]["name"] not in obs.expected_new]
    there = by_index.get(index, [])
    if pending:
        out.pending[index] = Pending(index, row, op, pending, there, step, timeout, obs.now)
        return
    _unpark(row, op, obs.now, timeout)
    op["step"] = step
    _deadline(out, row, op, obs.now)


def _lost_pod(
    obs: Observed,
    row: JSON,
    index: int,
    pods: list[JSON],
    runners: list[JSON],
    multi: bool,
) -> tuple[JSON, list[JSON]] | None:
    """A failed pod, or a pod the Instance had that is now confirmed gone. Not a failed pod
    of an earlier incarnation the cache still shows, nor a single-pod surge pod (the update
    retries those)."""
    active = int(row.get("activeOrdinal", 0))
    surge: set[str] = set()
    if not multi and (row.get("operation") or {}).get("type") == "Update":
        surge = {
            pod_name(obs.replica["metadata"]["name"], index, s.runner, s.ordinal)
            for s in pod_slots(runners, 1 - active)
        }
    incarnation = int(row.get("incarnation", 0))
    for pod in pods:
        if (
            pod_failed(pod)
            and pod["metadata"]["name"] not in surge
            and _incarnation_of(pod, incarnation) >= incarnation
        ):
            return failure_of(pod, obs.now), pods
    if not _had_pods(row):
        return None
    wanted = {
        pod_name(obs.replica["metadata"]["name"], index, s.runner, s.ordinal)
        for s in pod_slots(runners, active)
    }
    names = {p["metadata"]["name"] for p in pods}
    for name in sorted(wanted - names):
        if name in obs.confirmed_gone:
            failure = {
                "podName": name,
                "containerName": "",
                "reason": "PodDeleted",
                "exitCode": None,
                "message": f"pod {name} of instance {index} was deleted",
                "time": rfc3339(obs.now),
            }
            return failure, pods
    return None


def _incarnation_of(pod: JSON, default: int) -> int:
    raw = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_INCARNATION)
    return int(raw) if raw is not None and str(raw).isdigit() else default


def suspects(obs: Observed) -> list[str]:
    """Pods a Ready or starting Instance should have that the cache does not show (and we
    did not just create): the reconciler confirms each with a live read."""
    replica = obs.replica
    runners = list((replica.get("spec") or {}).get("runners") or [])
    names = {p["metadata"]["name"] for p in obs.pods if not p["metadata"].get("deletionTimestamp")}
    out: list[str] = []
    for row in (replica.get("status") or {}).get("instanceStatuses") or []:
        if not _had_pods(row):
            continue
        for slot in pod_slots(runners, int(row.get("activeOrdinal", 0))):
            name = pod_name(
                replica["metadata"]["name"], int(row["index"]), slot.runner, slot.ordinal
            )
            if name not in names and name not in obs.expected_new:
                out.append(name)
    return sorted(out)


#: E7: how long a hold's record stands before another wording of the same hold replaces it.
#: A new Slice goes through its states (no partitions, partitions and no state, ACTIVATING,
#: hosts not visible yet) within seconds; recording each would be a status write apiece. So
#: while the same pod is held on the same token, the record changes at most this often, and
#: the pass it is due in is the one the plan wakes for: a wait that lasts reads true within
#: this long, a wait of a few seconds costs one write.
HOLD_REWORD_AFTER = timedelta(seconds=5)
#: E7: the same between two routine wordings of a hold (``Hold.routine``): the record says
#: the capacity is on its way either way, and at 2,000 services at once the Slices take long
#: enough on the way for each of their states to cost a status write at 5 s.
HOLD_ROUTINE_REWORD_AFTER = timedelta(seconds=30)


def _record_stands(hold: Hold, recorded: str | None) -> timedelta:
    """How long the record of ``recorded`` (the reason a hold of the same token wrote) stands
    before ``hold``'s new wording replaces it."""
    routine = hold.routine
    if routine is None or recorded is None or not routine(recorded):
        return HOLD_REWORD_AFTER
    return HOLD_ROUTINE_REWORD_AFTER if routine(hold.message) else HOLD_REWORD_AFTER


def _park(row: JSON, op: JSON, hold: Hold, pod: str, now: datetime) -> float | None:
    """E7/E8: the operation waits on the token, its deadline parked (null). Returns the
    seconds until a new wording of the same hold is due (``HOLD_REWORD_AFTER``, or
    ``HOLD_ROUTINE_REWORD_AFTER`` between routine wordings), when it was kept back; None
    when the record is up to date."""
    op["waiting"] = hold.token
    op["deadline"] = None
    message = hold_failure_message(hold.token, pod, hold.message)
    previous = row.get("lastFailure") or {}
    same_hold = previous.get("reason") == hold.token and previous.get("podName") == pod
    if same_hold and previous.get("message") != message:
        since = parse_time(previous.get("time"))
        stands = _record_stands(hold, hold_reason(previous))
        if since is not None and timedelta(0) <= now - since < stands:
            return (stands - (now - since)).total_seconds()
    keep_time = previous.get("reason") == hold.token and previous.get("message") == message
    row["lastFailure"] = {
        "podName": pod,
        "containerName": "",
        "reason": hold.token,
        "exitCode": None,
        "message": message,
        "time": previous.get("time") if keep_time else rfc3339(now),
    }
    return None


def _unpark(row: JSON, op: JSON, now: datetime, timeout: timedelta | None) -> None:
    """A hold ends: the deadline runs from now (the wait never counts against readiness), and
    the hold's own record leaves ``lastFailure``: it said why the pods waited, which is no
    longer so."""
    if op.get("waiting"):
        if (row.get("lastFailure") or {}).get("reason") == op["waiting"]:
            row["lastFailure"] = None
        op["waiting"] = None
        op["deadline"] = rfc3339(now + timeout) if timeout else None
        op["lastProgressAt"] = rfc3339(now)


def _deadline(out: Plan, row: JSON, op: JSON, now: datetime) -> None:
    deadline = parse_time(op.get("deadline"))
    if deadline is None or op.get("reason") == "InstanceReadyTimeout":
        return
    left = (deadline - now).total_seconds()
    if left > 0:
        out.wake_in(left)
        return
    row["phase"] = "Failed"
    op["reason"] = "InstanceReadyTimeout"
    row["lastFailure"] = {
        "podName": "",
        "containerName": "",
        "reason": "InstanceReadyTimeout",
        "exitCode": None,
        "message": f"instance {row['index']} was not ready by its deadline {op.get('deadline')}",
        "time": rfc3339(now),
    }

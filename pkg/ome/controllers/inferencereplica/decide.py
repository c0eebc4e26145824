"""What an InferenceReplica pass decides around its Instances' plan (``instances``): which
Instances it rebuilt, whether an Instance rebuilt too often waits and for how long, the
ControllerRevision its runners need, and the replica's status and Ready condition. Pure: no
I/O, no client and no clock (the times are given); the controller keeps the rebuild times
and acts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from ome.api.v1beta1 import LABEL_INFERENCE_REPLICA, LABEL_REVISION_HASH, controller_reference
from ome.backoff import capped_exponential
from ome.controllers.conditions import WantedCondition, set_conditions
from ome.controllers.holds import Hold
from ome.durations import format_go_duration
from ome.kube import JSON, json_copy

from .instances import index_of

#: The waiting token of an Instance rebuilt too often: its pods wait before the next rebuild.
REBUILD_BACKOFF = "RebuildBackoff"
#: More than this many rebuilds of an Instance within ``REBUILD_WINDOW`` hold the next one.
REBUILDS_ALLOWED = 3
REBUILD_WINDOW = timedelta(minutes=1)
#: The first hold of a rebuild, in seconds, doubling with each further rebuild up to the cap.
REBUILD_INITIAL, REBUILD_CAP = 10.0, 300.0


# -- rebuild backoff -------------------------------------------------------------------------


def rebuilt(previous: Iterable[JSON], rows: Iterable[JSON]) -> list[int]:
    """The indexes of the Instances the plan rebuilt: the rows (``rows``, the planned ones)
    whose incarnation moved on from the replica's status (``previous``). A new Instance is no
    rebuild."""
    before = {r.get("index"): r.get("incarnation", 0) for r in previous}
    return [
        int(row["index"])
        for row in rows
        if row.get("incarnation", 0) != before.get(row.get("index"), row.get("incarnation", 0))
    ]


def recent(times: Iterable[datetime], now: datetime, window: timedelta) -> list[datetime]:
    """The rebuild ``times`` still within ``window`` of ``now``, in their order."""
    return [t for t in times if now - t < window]


def rebuild_hold(
    index: int,
    times: Sequence[datetime],
    now: datetime,
    allowed: int = REBUILDS_ALLOWED,
    window: timedelta = REBUILD_WINDOW,
) -> tuple[Hold, float] | None:
    """Whether Instance ``index``'s next rebuild waits, given its rebuilds within the last
    ``window`` (``times``, oldest first): more than ``allowed`` of them hold it for
    ``REBUILD_INITIAL`` seconds after the last, doubling with each further rebuild, up to
    ``REBUILD_CAP``, as the kubelet spaces a crashing container's restarts. The hold, and the
    seconds it has left; None to go."""
    excess = len(times) - allowed
    if excess <= 0:
        return None
    wait = capped_exponential(excess, REBUILD_INITIAL, REBUILD_CAP)
    left = (times[-1] + timedelta(seconds=wait) - now).total_seconds()
    if left <= 0:
        return None
    text = (
        f"instance {index} was rebuilt {len(times)} times in the last "
        f"{format_go_duration(window)}; its next rebuild waits "
        f"{format_go_duration(timedelta(seconds=wait))}"
    )
    return Hold(REBUILD_BACKOFF, text), left


# -- what the pass writes --------------------------------------------------------------------


def confine(pods: Iterable[JSON], node_selectors: Mapping[int, Mapping[str, str]]) -> None:
    """Add to each planned pod's node selector what the gates gave its Instance (e.g. the
    Slice its pods are confined to). The pods are the plan's own, built anew this pass."""
    for pod in pods:
        at = index_of(pod)
        extra = node_selectors.get(at, {}) if at is not None else {}
        if extra:
            pod["spec"].setdefault("nodeSelector", {}).update(extra)


def revision_recorded(replica: JSON, revision: str) -> bool:
    """Whether the ControllerRevision of the runners at ``revision`` is known to exist: the
    replica's status names it its update revision (it was made before that status)."""
    return bool((replica.get("status") or {}).get("updateRevision") == revision)


def revision_body(replica: JSON, revision: str, existing: Sequence[JSON]) -> JSON | None:
    """The ControllerRevision to create for the runners at ``revision``, numbered after the
    replica's ``existing`` ones; None when one of them is it already."""
    meta = replica["metadata"]
    name = f"{meta['name']}-{revision}"
    if any(r["metadata"]["name"] == name for r in existing):
        return None
    number = max((int(r.get("revision", 0)) for r in existing), default=0) + 1
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {LABEL_INFERENCE_REPLICA: meta["name"], LABEL_REVISION_HASH: revision},
            "ownerReferences": [controller_reference(replica, "InferenceReplica")],
        },
        "revision": number,
        "data": {"runners": replica["spec"].get("runners") or []},
    }


def replica_status(replica: JSON, rows: list[JSON], revision: str, now: datetime) -> JSON | None:
    """The replica's status with the planned ``rows``: its counts (Deleting Instances serve
    no more; available is ready), the revisions, and Ready when as many Instances as it is to
    have are Ready, all at ``revision``. None when that is the status it has."""
    meta, spec = replica["metadata"], replica.get("spec") or {}
    old = replica.get("status") or {}
    serving = [r for r in rows if r.get("phase") != "Deleting"]
    ready = [r for r in serving if r.get("phase") == "Ready"]
    desired = int(spec.get("replicas") or 0)
    generation = meta.get("generation", 1)
    status = json_copy(old)
    status.update(
        {
            "observedGeneration": generation,
            "replicas": len(serving),
            "readyReplicas": len(ready),
            "availableReplicas": len(ready),
            "updatedReplicas": sum(1 for r in ready if r.get("runningRevision") == revision),
            "selector": f"{LABEL_INFERENCE_REPLICA}={meta['name']}",
            "currentRevision": current_revision(ready, revision, old),
            "updateRevision": revision,
            "instanceStatuses": rows,
        }
    )
    ok = len(ready) >= desired and all(r.get("runningRevision") == revision for r in ready)
    condition = WantedCondition(
        "Ready",
        ok,
        "InstancesReady" if ok else "InstancesNotReady",
        f"{len(ready)} of {desired} instances ready",
    )
    status["conditions"] = set_conditions(
        old.get("conditions") or [], [condition], int(generation), now
    )
    return None if status == old else status


def current_revision(ready: list[JSON], revision: str, old: JSON) -> str:
    """The revision the replica runs: ``revision`` once every Ready Instance runs it; until
    then the one it ran (or, the first time, the one its first Ready Instance runs)."""
    if ready and all(r.get("runningRevision") == revision for r in ready):
        return revision
    return str(
        old.get("currentRevision") or (ready[0].get("runningRevision") if ready else revision)
    )

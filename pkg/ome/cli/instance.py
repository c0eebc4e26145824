"""``kubectl ome instance status`` (M5): one Instance's row of
``status.instanceStatuses`` and its pods, as FIELD/VALUE rows an operator reads at a glance.

Pure: plain JSON in, rows out; ``now`` is given. A field of the wrong type reads as absent,
so a malformed row prints, never raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ome.api.v1beta1 import LABEL_INSTANCE_INDEX
from ome.kube import JSON, parse_time

from .render import cut, human_duration, table

#: M5: the waiting tokens the plugin knows; CapacityProvisioning (E7) among them, unlike the
#: upstream CLI, which prints Unknown. SliceDemandInvalid is this controller's own token for
#: pods that cannot fill a provisionable Slice (B6), so it is known too.
KNOWN_WAITING = (
    "QuotaExceeded",
    "NodeUnknown",
    "SourceUnrouted",
    "Unschedulable",
    "PodGroupTerminating",
    "Paused",
    "CapacityProvisioning",
    "SliceDemandInvalid",
)
UNKNOWN = "Unknown"
#: M5: the table cuts values at this many columns; ``-o wide`` prints them uncut.
WIDTH = 64

WAITING_UNKNOWN = "OperationWaitingUnknown"
DEADLINE_PASSED = "OperationDeadlinePassed"
POD_FAILED = "PodFailed"

#: A field: ``(key, value)``, printed ``key=value`` (just ``value`` when the key is empty).
Field = tuple[str, str]


@dataclass(frozen=True)
class Row:
    """One FIELD/VALUE row: its name and its fields."""

    name: str
    fields: tuple[Field, ...]

    def value(self) -> str:
        return " ".join(f"{k}={v}" if k else v for k, v in self.fields)


@dataclass(frozen=True)
class StatusView:
    """What ``instance status`` prints: ``rows`` for the table and wide outputs, ``document``
    for json and yaml (the row as stored, with the pods)."""

    rows: tuple[Row, ...]
    document: JSON = field(repr=False)

    def table(self, wide: bool = False) -> str:
        """The FIELD/VALUE table: each row's value cut at ``WIDTH`` columns, or with ``wide``
        one field per row, uncut."""
        if wide:
            lines = [(r.name, f"{k}={v}" if k else v) for r in self.rows for k, v in r.fields]
        else:
            lines = [(r.name, cut(r.value(), WIDTH)) for r in self.rows]
        return table(("FIELD", "VALUE"), lines)


def _map(value: object) -> JSON:
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str:
    """A stored scalar as printed: ``-`` when absent or empty."""
    if value is None or value == "" or isinstance(value, (dict, list)):
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def waiting_token(op: JSON) -> str:
    """M5: the operation's waiting token as printed: ``-`` when it waits on nothing,
    ``Unknown`` when the token is not one the plugin knows."""
    token = op.get("waiting")
    if not token:
        return "-"
    return token if token in KNOWN_WAITING else UNKNOWN


def _since(value: object, now: datetime) -> str:
    """How long ago a stored time was, in kubectl's age form; ``-`` when absent."""
    t = parse_time(value)
    return human_duration(now - t) if t is not None else "-"


def _until(value: object, now: datetime) -> str:
    """How long until a stored time (``-5s`` once passed); ``-`` when absent (parked)."""
    t = parse_time(value)
    if t is None:
        return "-"
    return human_duration(t - now) if t >= now else f"-{human_duration(now - t)}"


def _state(row: JSON, op: JSON, failure: JSON) -> str:
    phase = _text(row.get("phase"))
    if phase == "Failed":
        reason = op.get("reason") or failure.get("reason")
        return f"Failed: {reason}" if reason else "Failed"
    token = waiting_token(op)
    if token != "-":
        return f"{phase}, waiting on {token}"
    if op:
        return f"{phase}: {_text(op.get('type'))} at step {_text(op.get('step'))}"
    return phase


def _pod_row(pod: JSON, slice_label: str) -> Row:
    meta, spec, status = _map(pod.get("metadata")), _map(pod.get("spec")), _map(pod.get("status"))
    phase = _text(status.get("phase"))
    if meta.get("deletionTimestamp"):
        phase = "Terminating"
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    ready = sum(1 for c in status.get("containerStatuses") or [] if _map(c).get("ready") is True)
    slice_name = _map(spec.get("nodeSelector")).get(slice_label)
    return Row(
        "pod",
        (
            ("", _text(meta.get("name"))),
            ("phase", phase),
            ("ready", f"{ready}/{len(containers)}"),
            ("node", _text(spec.get("nodeName"))),
            ("slice", _text(slice_name)),
        ),
    )


def _pod_failure(pod: JSON) -> str | None:
    status = _map(pod.get("status"))
    if status.get("phase") != "Failed":
        return None
    name = _text(_map(pod.get("metadata")).get("name"))
    reason = status.get("reason") or status.get("message")
    return f"pod {name} failed: {reason}" if reason else f"pod {name} failed"


def instance_pods(pods: list[JSON], row: JSON) -> list[JSON]:
    """The Instance's pods: those labelled with its index, or with its surge's (M4)."""
    indexes = {_int(row.get("index")), _int(_map(row.get("operation")).get("surgeIndex"))}
    wanted = {str(i) for i in indexes if i is not None}

    def index_of(pod: JSON) -> str:
        labels = _map(_map(pod.get("metadata")).get("labels"))
        value = labels.get(LABEL_INSTANCE_INDEX)
        return value if isinstance(value, str) else ""

    chosen = [p for p in pods if index_of(p) in wanted]
    return sorted(chosen, key=lambda p: str(_map(p.get("metadata")).get("name")))


def status(
    service: str,
    namespace: str,
    component: str,
    replica: str,
    row: JSON,
    pods: list[JSON],
    now: datetime,
    slice_label: str,
) -> StatusView:
    """M5's rows for one Instance ``row`` of InferenceReplica ``replica``, with its ``pods``;
    a pod row names the Slice the pod is confined to by ``slice_label`` (E3)."""
    op, failure = _map(row.get("operation")), _map(row.get("lastFailure"))
    mine = instance_pods(pods, row)
    rows = [
        Row("state", (("", _state(row, op, failure)),)),
        Row(
            "instance",
            (
                ("", replica),
                ("inc", _text(row.get("incarnation"))),
                ("phase", _text(row.get("phase"))),
            ),
        ),
        Row(
            "revisions",
            (
                ("running", _text(row.get("runningRevision"))),
                ("target", _text(row.get("targetRevision"))),
            ),
        ),
    ]
    if op:
        rows += [
            Row(
                "operation",
                (
                    ("", _text(op.get("type"))),
                    ("id", _text(op.get("id"))),
                    ("step", _text(op.get("step"))),
                    ("retry", _text(op.get("retryCount"))),
                ),
            ),
            Row(
                "op timing",
                (
                    ("start", _since(op.get("startedAt"), now)),
                    ("progress", _since(op.get("lastProgressAt"), now)),
                    ("deadline", _until(op.get("deadline"), now)),
                ),
            ),
            Row(
                "op hold",
                (
                    ("waiting", waiting_token(op)),
                    ("refused", _since(op.get("capacityRefusedAt"), now)),
                ),
            ),
        ]
    else:
        rows += [Row("operation", (("", "-"),))]
    if failure:
        rows += [
            Row(
                "failure",
                (
                    ("pod", _text(failure.get("podName"))),
                    ("container", _text(failure.get("containerName"))),
                    ("reason", _text(failure.get("reason"))),
                    ("exit", _text(failure.get("exitCode"))),
                    ("message", _text(failure.get("message"))),
                ),
            ),
            Row("fail time", (("", _text(failure.get("time"))),)),
        ]
    else:
        rows += [Row("failure", (("", "-"),))]
    rows += [_pod_row(p, slice_label) for p in mine]
    rows += [Row("issue", (("", text),)) for text in issues(row, op, mine, now)]
    document = {
        "inferenceService": service,
        "namespace": namespace,
        "component": component,
        "inferenceReplica": replica,
        "instance": row,
        "pods": mine,
    }
    return StatusView(tuple(rows), document)


def issues(row: JSON, op: JSON, pods: list[JSON], now: datetime) -> list[str]:
    """The issue rows: what an operator should look at, one line each."""
    found = []
    token = op.get("waiting")
    if token and token not in KNOWN_WAITING:
        found.append(
            f"{WAITING_UNKNOWN}: the operation waits on {token!r}, a token this plugin does "
            "not know; lastFailure says why"
        )
    deadline = parse_time(op.get("deadline"))
    if deadline is not None and deadline < now and row.get("phase") != "Ready":
        found.append(
            f"{DEADLINE_PASSED}: operation {_text(op.get('id'))} passed its deadline "
            f"{human_duration(now - deadline)} ago"
        )
    for pod in pods:
        failed = _pod_failure(pod)
        if failed:
            found.append(f"{POD_FAILED}: {failed}")
    return found

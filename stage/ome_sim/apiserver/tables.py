"""Server-side printing: ``meta.k8s.io/v1`` ``Table`` responses for ``kubectl get``.

Owns column definitions and cells as kube-apiserver's printers and the CRD table convertor give
them; it never mutates the objects it prints or decides which objects a request sees.
Hand-written because the printers live in Go (``pkg/printers/internalversion``) only.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ome_sim.apiserver import errors, jsonpath
from ome_sim.apiserver.resources import ResourceType

JSON = dict[str, Any]

NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
CREATION_TIMESTAMP_DESCRIPTION = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)

_RFC3339_RE = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$", re.IGNORECASE
)
_INCLUDE_OBJECT = ("None", "Metadata", "Object")


# ------------------------------------------------------------------------------- durations


def human_duration(seconds: float) -> str:
    """``k8s.io/apimachinery/pkg/util/duration.HumanDuration`` (2-3 significant figures)."""
    nanos = round(seconds * 1_000_000_000)
    whole_seconds = int(nanos / 1_000_000_000)  # Go truncates toward zero
    if whole_seconds < -1:
        return "<invalid>"
    if whole_seconds < 0:
        return "0s"
    if whole_seconds < 60 * 2:
        return f"{whole_seconds}s"
    minutes = nanos // 60_000_000_000
    if minutes < 10:
        s = (nanos // 1_000_000_000) % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = nanos // 3_600_000_000_000
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        years = hours // 24 // 365
        return f"{years}y" if dy == 0 else f"{years}y{dy}d"
    return f"{hours // 24 // 365}y"


def parse_time(value: Any) -> datetime | None:
    """An RFC3339 timestamp as a UTC datetime; None when absent or malformed."""
    if not isinstance(value, str) or not _RFC3339_RE.match(value):
        return None
    text = value.upper().replace("Z", "+00:00")
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed.astimezone(UTC)


def _utc(now: datetime) -> datetime:
    return now if now.tzinfo is not None else now.replace(tzinfo=UTC)


def _age(value: Any, now: datetime) -> str:
    """``translateTimestampSince``: ``<unknown>`` for an unset time."""
    when = parse_time(value)
    if when is None:
        return "<unknown>"
    return human_duration((_utc(now) - when).total_seconds())


def _rfc3339(value: Any) -> str:
    """``Time.UTC().Format(time.RFC3339)``; the zero time when unset."""
    when = parse_time(value)
    if when is None:
        return "0001-01-01T00:00:00Z"
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------- helpers


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _text(obj: Any, *path: str) -> str:
    value = _get(obj, *path)
    return value if isinstance(value, str) else ""


def _list(obj: Any, *path: str) -> list[Any]:
    value = _get(obj, *path)
    return value if isinstance(value, list) else []


def _dicts(obj: Any, *path: str) -> list[JSON]:
    return [item for item in _list(obj, *path) if isinstance(item, dict)]


def _int(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return 0


def _name(obj: JSON) -> str:
    return _text(obj, "metadata", "name")


def _created(obj: JSON, now: datetime) -> str:
    return _age(_get(obj, "metadata", "creationTimestamp"), now)


def _column(
    name: str, description: str, type_: str = "string", fmt: str = "", priority: int = 0
) -> JSON:
    return {
        "name": name,
        "type": type_,
        "format": fmt,
        "description": description,
        "priority": priority,
    }


_NAME = _column("Name", NAME_DESCRIPTION, fmt="name")
_AGE = _column("Age", CREATION_TIMESTAMP_DESCRIPTION)


# --------------------------------------------------------------------------------- printers

_RowFn = Callable[[JSON, datetime], tuple[list[Any], list[JSON]]]


def _pod_row(pod: JSON, now: datetime) -> tuple[list[Any], list[JSON]]:
    """kubectl's ``printPod``, with the wide columns the server always includes."""
    spec = _get(pod, "spec") or {}
    status = _get(pod, "status") or {}
    conditions = _dicts(status, "conditions")
    phase = _text(status, "phase")
    reason = _text(status, "reason") or phase
    restarts = 0
    restartable_restarts = 0
    total = len(_list(spec, "containers"))
    ready = 0
    last_restart: datetime | None = None
    last_restartable_restart: datetime | None = None

    def later(current: datetime | None, container: JSON) -> datetime | None:
        finished = parse_time(_get(container, "lastState", "terminated", "finishedAt"))
        if finished is not None and (current is None or finished > current):
            return finished
        return current

    gated = any(
        c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated" for c in conditions
    )
    if gated or (_list(spec, "schedulingGates") and phase in ("", "Pending")):
        reason = "SchedulingGated"

    row_conditions: list[JSON] = []
    if phase == "Succeeded":
        row_conditions = [
            {
                "type": "Completed",
                "status": "True",
                "reason": "Succeeded",
                "message": "The pod has completed successfully.",
            }
        ]
    elif phase == "Failed":
        row_conditions = [
            {
                "type": "Completed",
                "status": "True",
                "reason": "Failed",
                "message": "The pod failed.",
            }
        ]

    init_specs = {c.get("name"): c for c in _dicts(spec, "initContainers")}
    restartable = {n for n, c in init_specs.items() if c.get("restartPolicy") == "Always"}
    total += len(restartable)

    init_statuses = _dicts(status, "initContainerStatuses")
    initializing = False
    for i, container in enumerate(init_statuses):
        restarts += _int(container.get("restartCount"))
        last_restart = later(last_restart, container)
        is_restartable = container.get("name") in restartable
        if is_restartable:
            restartable_restarts += _int(container.get("restartCount"))
            last_restartable_restart = later(last_restartable_restart, container)
        terminated = _get(container, "state", "terminated")
        waiting = _get(container, "state", "waiting")
        if isinstance(terminated, dict) and _int(terminated.get("exitCode")) == 0:
            continue
        if is_restartable and container.get("started") is True:
            if container.get("ready") is True:
                ready += 1
            continue
        if isinstance(terminated, dict):
            if not terminated.get("reason"):
                if _int(terminated.get("signal")):
                    reason = f"Init:Signal:{_int(terminated.get('signal'))}"
                else:
                    reason = f"Init:ExitCode:{_int(terminated.get('exitCode'))}"
            else:
                reason = f"Init:{terminated['reason']}"
        elif (
            isinstance(waiting, dict)
            and waiting.get("reason")
            and waiting.get("reason") != "PodInitializing"
        ):
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break

    initialized = any(
        c.get("type") == "Initialized" and c.get("status") == "True" for c in conditions
    )
    if not initializing or initialized:
        restarts = restartable_restarts
        last_restart = last_restartable_restart
        has_running = False
        for container in reversed(_dicts(status, "containerStatuses")):
            restarts += _int(container.get("restartCount"))
            last_restart = later(last_restart, container)
            state = container.get("state") if isinstance(container.get("state"), dict) else {}
            waiting = _get(state, "waiting")
            terminated = _get(state, "terminated")
            if isinstance(waiting, dict) and waiting.get("reason"):
                reason = str(waiting["reason"])
            elif isinstance(terminated, dict) and terminated.get("reason"):
                reason = str(terminated["reason"])
            elif isinstance(terminated, dict):
                if _int(terminated.get("signal")):
                    reason = f"Signal:{_int(terminated.get('signal'))}"
                else:
                    reason = f"ExitCode:{_int(terminated.get('exitCode'))}"
            elif container.get("ready") is True and isinstance(_get(state, "running"), dict):
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            pod_ready = any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
            )
            reason = "Running" if pod_ready else "NotReady"

    if _get(pod, "metadata", "deletionTimestamp") is not None:
        if _text(status, "reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"

    restarts_text = str(restarts)
    if restarts != 0 and last_restart is not None:
        age = human_duration((_utc(now) - last_restart).total_seconds())
        restarts_text = f"{restarts} ({age} ago)"

    pod_ip = ""
    ips = _dicts(status, "podIPs")
    if ips:
        pod_ip = _text(ips[0], "ip")
    pod_ip = pod_ip or _text(status, "podIP") or "<none>"

    gates = _dicts(spec, "readinessGates")
    readiness_gates = "<none>"
    if gates:
        true_conditions = 0
        for gate in gates:
            for condition in conditions:
                if condition.get("type") == gate.get("conditionType"):
                    if condition.get("status") == "True":
                        true_conditions += 1
                    break
        readiness_gates = f"{true_conditions}/{len(gates)}"

    cells: list[Any] = [
        _name(pod),
        f"{ready}/{total}",
        reason,
        restarts_text,
        _created(pod, now),
        pod_ip,
        _text(spec, "nodeName") or "<none>",
        _text(status, "nominatedNodeName") or "<none>",
        readiness_gates,
    ]
    return cells, row_conditions


def _node_row(node: JSON, now: datetime) -> tuple[list[Any], list[JSON]]:
    conditions = {
        c.get("type"): c for c in _dicts(node, "status", "conditions") if isinstance(c, dict)
    }
    status: list[str] = []
    if "Ready" in conditions:
        status.append("Ready" if conditions["Ready"].get("status") == "True" else "NotReady")
    if not status:
        status.append("Unknown")
    if _get(node, "spec", "unschedulable") is True:
        status.append("SchedulingDisabled")

    roles: set[str] = set()
    labels = _get(node, "metadata", "labels") or {}
    for key, value in labels.items():
        if key.startswith("node-role.kubernetes.io/"):
            role = key.removeprefix("node-role.kubernetes.io/")
            if role:
                roles.add(role)
        elif key == "kubernetes.io/role" and value:
            roles.add(str(value))

    def address(kind: str) -> str:
        for item in _dicts(node, "status", "addresses"):
            if item.get("type") == kind:
                return str(item.get("address", ""))
        return "<none>"

    info = _get(node, "status", "nodeInfo") or {}
    cells: list[Any] = [
        _name(node),
        ",".join(status),
        ",".join(sorted(roles)) or "<none>",
        _created(node, now),
        _text(info, "kubeletVersion"),
        address("InternalIP"),
        address("ExternalIP"),
        _text(info, "osImage") or "<unknown>",
        _text(info, "kernelVersion") or "<unknown>",
        _text(info, "containerRuntimeVersion") or "<unknown>",
    ]
    return cells, []


def _event_row(event: JSON, now: datetime) -> tuple[list[Any], list[JSON]]:
    first = _get(event, "firstTimestamp")
    first_seen = _age(first if parse_time(first) else _get(event, "eventTime"), now)
    last = _get(event, "lastTimestamp")
    last_seen = _age(last, now) if parse_time(last) else first_seen
    count = _int(_get(event, "count"))
    series = _get(event, "series")
    if isinstance(series, dict):
        last_seen = _age(series.get("lastObservedTime"), now)
        count = _int(series.get("count"))
    elif count == 0:
        count = 1  # singleton events carry no count in the events.k8s.io API

    kind = _text(event, "involvedObject", "kind").lower()
    involved_name = _text(event, "involvedObject", "name")
    target = f"{kind}/{involved_name}" if involved_name else kind
    component = _text(event, "source", "component") or _text(event, "reportingComponent")
    host = _text(event, "source", "host") or _text(event, "reportingInstance")
    source = f"{component}, {host}" if host else component
    cells: list[Any] = [
        last_seen,
        _text(event, "type"),
        _text(event, "reason"),
        target,
        _text(event, "involvedObject", "fieldPath"),
        source,
        _text(event, "message").strip(),
        first_seen,
        count,
        _name(event),
    ]
    return cells, []


def _namespace_row(ns: JSON, now: datetime) -> tuple[list[Any], list[JSON]]:
    return [_name(ns), _text(ns, "status", "phase"), _created(ns, now)], []


def _configmap_row(cm: JSON, now: datetime) -> tuple[list[Any], list[JSON]]:
    data = _get(cm, "data") or {}
    binary = _get(cm, "binaryData") or {}
    return [_name(cm), len(data) + len(binary), _created(cm, now)], []


def _secret_row(secret: JSON, now: datetime) -> tuple[list[Any], list[JSON]]:
    keys = set(_get(secret, "data") or {}) | set(_get(secret, "stringData") or {})
    return [_name(secret), _text(secret, "type"), len(keys), _created(secret, now)], []


def _service_row(svc: JSON, now: datetime) -> tuple[list[Any], list[JSON]]:
    spec = _get(svc, "spec") or {}
    svc_type = _text(spec, "type") or "ClusterIP"
    cluster_ips = [ip for ip in _list(spec, "clusterIPs") if isinstance(ip, str)]
    cluster_ip = (cluster_ips[0] if cluster_ips else _text(spec, "clusterIP")) or "<none>"
    external_ips = [ip for ip in _list(spec, "externalIPs") if isinstance(ip, str)]
    if svc_type in ("ClusterIP", "NodePort"):
        external = ",".join(external_ips) or "<none>"
    elif svc_type == "LoadBalancer":
        lb: set[str] = set()
        for ingress in _dicts(svc, "status", "loadBalancer", "ingress"):
            if ingress.get("ip"):
                lb.add(str(ingress["ip"]))
            elif ingress.get("hostname"):
                lb.add(str(ingress["hostname"]))
        found = sorted(lb) + external_ips
        external = ",".join(found) or "<pending>"
    elif svc_type == "ExternalName":
        external = _text(spec, "externalName")
    else:
        external = "<unknown>"
    ports: list[str] = []
    for port in _dicts(spec, "ports"):
        protocol = port.get("protocol") or "TCP"
        node_port = _int(port.get("nodePort"))
        if node_port > 0:
            ports.append(f"{_int(port.get('port'))}:{node_port}/{protocol}")
        else:
            ports.append(f"{_int(port.get('port'))}/{protocol}")
    selector = _get(spec, "selector") or {}
    selector_text = ",".join(f"{k}={selector[k]}" for k in sorted(selector)) or "<none>"
    cells: list[Any] = [
        _name(svc),
        svc_type,
        cluster_ip,
        external,
        ",".join(ports) or "<none>",
        _created(svc, now),
        selector_text,
    ]
    return cells, []


def _lease_row(lease: JSON, now: datetime) -> tuple[list[Any], list[JSON]]:
    return [_name(lease), _text(lease, "spec", "holderIdentity"), _created(lease, now)], []


def _controller_revision_row(rev: JSON, now: datetime) -> tuple[list[Any], list[JSON]]:
    controller = "<none>"
    for ref in _dicts(rev, "metadata", "ownerReferences"):
        if ref.get("controller") is True:
            api_version = _text(ref, "apiVersion")
            group = api_version.rpartition("/")[0]
            kind = _text(ref, "kind")
            group_kind = f"{kind}.{group}" if group else kind
            name = _text(ref, "name")
            controller = f"{group_kind.lower()}/{name}" if group_kind else name
            break
    return [_name(rev), controller, _int(_get(rev, "revision")), _created(rev, now)], []


def _crd_row(crd: JSON, now: datetime) -> tuple[list[Any], list[JSON]]:
    return [_name(crd), _rfc3339(_get(crd, "metadata", "creationTimestamp"))], []


def _webhook_row(config: JSON, now: datetime) -> tuple[list[Any], list[JSON]]:
    return [_name(config), len(_list(config, "webhooks")), _created(config, now)], []


def _default_row(obj: JSON, now: datetime) -> tuple[list[Any], list[JSON]]:
    return [_name(obj), _created(obj, now)], []


_PRINTERS: dict[tuple[str, str], tuple[list[JSON], _RowFn]] = {
    ("", "pods"): (
        [
            _NAME,
            _column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
            _column("Status", "The aggregate status of the containers in this pod."),
            _column(
                "Restarts",
                "The number of times the containers in this pod have been restarted and when "
                "the last container in this pod has restarted.",
            ),
            _AGE,
            _column(
                "IP",
                "podIP address allocated to the pod. Routable at least within the cluster. "
                "Empty if not yet allocated.",
                priority=1,
            ),
            _column(
                "Node",
                "NodeName indicates in which node this pod is scheduled.",
                priority=1,
            ),
            _column(
                "Nominated Node",
                "nominatedNodeName is set only when this pod preempts other pods on the node.",
                priority=1,
            ),
            _column(
                "Readiness Gates",
                "If specified, all readiness gates will be evaluated for pod readiness.",
                priority=1,
            ),
        ],
        _pod_row,
    ),
    ("", "nodes"): (
        [
            _NAME,
            _column("Status", "The status of the node"),
            _column("Roles", "The roles of the node"),
            _AGE,
            _column("Version", "Kubelet Version reported by the node."),
            _column("Internal-IP", "List of addresses reachable to the node.", priority=1),
            _column("External-IP", "List of addresses reachable to the node.", priority=1),
            _column("OS-Image", "OS Image reported by the node.", priority=1),
            _column("Kernel-Version", "Kernel Version reported by the node.", priority=1),
            _column(
                "Container-Runtime", "ContainerRuntime Version reported by the node.", priority=1
            ),
        ],
        _node_row,
    ),
    ("", "events"): (
        [
            _column("Last Seen", "The time at which the most recent occurrence was recorded."),
            _column("Type", "Type of this event (Normal, Warning)."),
            _column("Reason", "Short, machine understandable string for the transition."),
            _column("Object", "The object that this event is about."),
            _column("Subobject", "The field of the object the event is about.", priority=1),
            _column("Source", "The component reporting this event.", priority=1),
            _column("Message", "A human-readable description of the status of this operation."),
            _column("First Seen", "The time at which the event was first recorded.", priority=1),
            _column("Count", "The number of times this event has occurred.", priority=1),
            _column("Name", NAME_DESCRIPTION, fmt="name", priority=1),
        ],
        _event_row,
    ),
    ("", "namespaces"): (
        [_NAME, _column("Status", "The status of the namespace"), _AGE],
        _namespace_row,
    ),
    ("", "configmaps"): (
        [_NAME, _column("Data", "Data contains the configuration data."), _AGE],
        _configmap_row,
    ),
    ("", "secrets"): (
        [
            _NAME,
            _column("Type", "Used to facilitate programmatic handling of secret data."),
            _column("Data", "Data contains the secret data."),
            _AGE,
        ],
        _secret_row,
    ),
    ("", "services"): (
        [
            _NAME,
            _column("Type", "type determines how the Service is exposed."),
            _column("Cluster-IP", "clusterIP is the IP address of the service."),
            _column("External-IP", "externalIPs of the service."),
            _column("Port(s)", "The list of ports that are exposed by this service."),
            _AGE,
            _column(
                "Selector",
                "Route service traffic to pods with label keys and values matching this selector.",
                priority=1,
            ),
        ],
        _service_row,
    ),
    ("coordination.k8s.io", "leases"): (
        [_NAME, _column("Holder", "holderIdentity contains the identity of the holder."), _AGE],
        _lease_row,
    ),
    ("apps", "controllerrevisions"): (
        [
            _NAME,
            _column("Controller", "Controller of the object"),
            _column("Revision", "Revision indicates the revision of the state represented."),
            _AGE,
        ],
        _controller_revision_row,
    ),
    ("apiextensions.k8s.io", "customresourcedefinitions"): (
        [_NAME, _column("Created At", CREATION_TIMESTAMP_DESCRIPTION, type_="date")],
        _crd_row,
    ),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): (
        [
            _NAME,
            _column(
                "Webhooks",
                "Webhooks indicates the number of webhooks registered in this configuration",
                type_="integer",
            ),
            _AGE,
        ],
        _webhook_row,
    ),
}

_DEFAULT_PRINTER: tuple[list[JSON], _RowFn] = ([_NAME, _AGE], _default_row)


# ----------------------------------------------------------------------- custom resources

_DEFAULT_CRD_COLUMNS: list[JSON] = [
    {
        "name": "Age",
        "type": "date",
        "description": CREATION_TIMESTAMP_DESCRIPTION,
        "jsonPath": ".metadata.creationTimestamp",
    }
]


def _crd_columns(rt: ResourceType, version: str) -> list[JSON]:
    """The CRD's printer columns, or the single Age column the server adds when it has none."""
    return rt.printer_columns.get(version) or _DEFAULT_CRD_COLUMNS


def _crd_definitions(rt: ResourceType, version: str) -> list[JSON]:
    definitions = [dict(_NAME)]
    for col in _crd_columns(rt, version):
        path = str(col.get("jsonPath", ""))
        definitions.append(
            _column(
                str(col.get("name", "")),
                str(col.get("description") or "")
                or f"Custom resource definition column (in JSONPath format): {path}",
                type_=str(col.get("type", "string")),
                fmt=str(col.get("format") or ""),
                priority=_int(col.get("priority")),
            )
        )
    return definitions


def _go_float(value: float) -> str:
    """Go's ``%v`` for a float64: shortest digits, exponent only beyond 1e21."""
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text:
        mantissa, exp = text.split("e")
        sign = "-" if exp.startswith("-") else "+"
        digits = exp.lstrip("+-").rjust(2, "0")
        return f"{mantissa}e{sign}{digits}"
    return text


def _string_cell(value: Any) -> str | None:
    """jsonpath ``PrintResults`` of one value: text for scalars, compact JSON for containers."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _typed_cell(column_type: str, value: Any, now: datetime) -> Any:
    """The CRD table convertor's ``cellForJSONValue``."""
    if value is None:
        return None
    if column_type == "string":
        return _string_cell(value)
    if column_type == "integer":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return int(value) if math.isfinite(value) else None
    if column_type == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return value
    if column_type == "boolean":
        return value if isinstance(value, bool) else None
    if column_type == "date":
        if not isinstance(value, str):
            return None
        if value in ("", "null"):
            return "<unknown>"
        when = parse_time(value)
        if when is None:
            return "<invalid>"
        return human_duration((_utc(now) - when).total_seconds())
    return None


def _crd_row_fn(rt: ResourceType, version: str) -> _RowFn:
    columns = _crd_columns(rt, version)
    compiled: list[tuple[str, bool, str]] = []
    for col in columns:
        path = str(col.get("jsonPath", ""))
        try:
            jsonpath.compile_path(path)
            valid = True
        except ValueError:
            valid = False  # the server reports a broken column as empty cells
        compiled.append((path, valid, str(col.get("type", "string"))))

    def row(obj: JSON, now: datetime) -> tuple[list[Any], list[JSON]]:
        cells: list[Any] = [_name(obj)]
        for path, valid, column_type in compiled:
            if not valid:
                cells.append(None)
                continue
            results = jsonpath.evaluate(path, obj)
            # Like the CRD table convertor, only the first result is printed.
            cells.append(_typed_cell(column_type, results[0], now) if results else None)
        return cells, []

    return row


# ---------------------------------------------------------------------------------- tables


def _printer(rt: ResourceType, version: str) -> tuple[list[JSON], _RowFn]:
    if rt.custom:
        return _crd_definitions(rt, version), _crd_row_fn(rt, version)
    return _PRINTERS.get(rt.key, _DEFAULT_PRINTER)


def column_definitions(rt: ResourceType, version: str) -> list[JSON]:
    """The ``metav1.TableColumnDefinition`` list for ``rt`` served at ``version``."""
    return [dict(c) for c in _printer(rt, version)[0]]


def render_table(
    rt: ResourceType,
    version: str,
    objects: list[JSON],
    now: datetime,
    include_object: str = "Metadata",
    with_columns: bool = True,
    list_metadata: JSON | None = None,
) -> JSON:
    """A ``meta.k8s.io/v1`` Table of ``objects`` (one row each, in order).

    ``include_object`` is the ``includeObject`` parameter (``None``, ``Metadata``, ``Object``;
    empty means ``Metadata``); ``with_columns=False`` is ``noHeaders``.
    """
    mode = include_object or "Metadata"
    if mode not in _INCLUDE_OBJECT:
        raise errors.bad_request(f'unrecognized includeObject value: "{include_object}"')
    definitions, row_fn = _printer(rt, version)
    rows: list[JSON] = []
    for obj in objects:
        cells, conditions = row_fn(obj, now)
        row: JSON = {"cells": cells}
        if conditions:
            row["conditions"] = conditions
        if mode == "Object":
            row["object"] = obj
        elif mode == "Metadata":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata") or {},
            }
        rows.append(row)
    table: JSON = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata or {},
    }
    if with_columns:
        table["columnDefinitions"] = [dict(c) for c in definitions]
    table["rows"] = rows
    return table

"""Decoding of the Kubernetes protobuf envelope for the built-in objects kubectl's typed
``create`` generators send (``kubectl create namespace|configmap|secret|service``).

kubectl 1.32 posts those as ``application/vnd.kubernetes.protobuf`` and does not fall back to
JSON on 415, so a server that cannot read them breaks ``kubectl create namespace``. Written
by hand because no maintained Python package ships the generated Kubernetes protobuf types
(and the ``protobuf`` runtime alone cannot decode without them); the wire format is small and
only the handful of messages below is needed. Never used to encode: the server answers JSON.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from . import errors

JSON = dict[str, Any]
MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

# A field spec: (json name, kind, repeated). Kinds: "string", "bytes", "int", "bool",
# "time", a message schema (dict), or ("map", value kind).
Spec = tuple[str, Any, bool]
Schema = dict[int, Spec]

_TYPE_META: Schema = {1: ("apiVersion", "string", False), 2: ("kind", "string", False)}
_UNKNOWN: Schema = {
    1: ("typeMeta", _TYPE_META, False),
    2: ("raw", "bytes", False),
    3: ("contentEncoding", "string", False),
    4: ("contentType", "string", False),
}
_OWNER_REF: Schema = {
    1: ("kind", "string", False),
    3: ("name", "string", False),
    4: ("uid", "string", False),
    5: ("apiVersion", "string", False),
    6: ("controller", "bool", False),
    7: ("blockOwnerDeletion", "bool", False),
}
_OBJECT_META: Schema = {
    1: ("name", "string", False),
    2: ("generateName", "string", False),
    3: ("namespace", "string", False),
    5: ("uid", "string", False),
    6: ("resourceVersion", "string", False),
    7: ("generation", "int", False),
    8: ("creationTimestamp", "time", False),
    9: ("deletionTimestamp", "time", False),
    10: ("deletionGracePeriodSeconds", "int", False),
    11: ("labels", ("map", "string"), False),
    12: ("annotations", ("map", "string"), False),
    13: ("ownerReferences", _OWNER_REF, True),
    14: ("finalizers", "string", True),
}
_NAMESPACE: Schema = {
    1: ("metadata", _OBJECT_META, False),
    2: ("spec", {1: ("finalizers", "string", True)}, False),
    3: ("status", {1: ("phase", "string", False)}, False),
}
_CONFIGMAP: Schema = {
    1: ("metadata", _OBJECT_META, False),
    2: ("data", ("map", "string"), False),
    3: ("binaryData", ("map", "bytes"), False),
    4: ("immutable", "bool", False),
}
_SECRET: Schema = {
    1: ("metadata", _OBJECT_META, False),
    2: ("data", ("map", "bytes"), False),
    3: ("type", "string", False),
    4: ("stringData", ("map", "string"), False),
    5: ("immutable", "bool", False),
}
_INT_OR_STRING: Schema = {
    1: ("type", "int", False),
    2: ("intVal", "int", False),
    3: ("strVal", "string", False),
}
_SERVICE_PORT: Schema = {
    1: ("name", "string", False),
    2: ("protocol", "string", False),
    3: ("port", "int", False),
    4: ("targetPort", _INT_OR_STRING, False),
    5: ("nodePort", "int", False),
    6: ("appProtocol", "string", False),
}
_SERVICE: Schema = {
    1: ("metadata", _OBJECT_META, False),
    2: (
        "spec",
        {
            1: ("ports", _SERVICE_PORT, True),
            2: ("selector", ("map", "string"), False),
            3: ("clusterIP", "string", False),
            4: ("type", "string", False),
            5: ("externalIPs", "string", True),
            7: ("sessionAffinity", "string", False),
            10: ("externalName", "string", False),
            11: ("externalTrafficPolicy", "string", False),
        },
        False,
    ),
}

SCHEMAS: dict[tuple[str, str], Schema] = {
    ("v1", "Namespace"): _NAMESPACE,
    ("v1", "ConfigMap"): _CONFIGMAP,
    ("v1", "Secret"): _SECRET,
    ("v1", "Service"): _SERVICE,
}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) for each field; value is an int or bytes."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field")
            value, pos = data[pos : pos + length], pos + length
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _scalar(kind: str, value: Any) -> Any:
    if kind == "string":
        return bytes(value).decode()
    if kind == "bytes":
        return base64.b64encode(bytes(value)).decode()
    if kind == "int":
        return _signed(int(value))
    if kind == "bool":
        return bool(value)
    raise ValueError(f"unknown kind {kind}")


def _time(value: bytes) -> str | None:
    seconds = 0
    for number, _, v in _fields(value):
        if number == 1:
            seconds = _signed(int(v))
    if seconds == 0:
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _decode(schema: Schema, data: bytes) -> JSON:
    """A message as the JSON kube would have printed: zero values left out (omitempty)."""
    out: JSON = {}
    for number, _, value in _fields(data):
        spec = schema.get(number)
        if spec is None:
            continue  # a field this decoder does not know: dropped, as pruning would
        name, kind, repeated = spec
        decoded: Any
        if isinstance(kind, dict):
            decoded = _decode(kind, value)
            if name == "targetPort":
                decoded = decoded.get("strVal") or decoded.get("intVal", 0)
        elif isinstance(kind, tuple):
            key, val = "", b""
            for n, _, v in _fields(value):
                if n == 1:
                    key = bytes(v).decode()
                elif n == 2:
                    val = v
            out.setdefault(name, {})[key] = _scalar(kind[1], val)
            continue
        elif kind == "time":
            decoded = _time(value)
        else:
            decoded = _scalar(kind, value)
        if repeated:
            out.setdefault(name, []).append(decoded)
        elif decoded not in ("", 0, False, None, {}):
            out[name] = decoded
    return out


def decode(body: bytes) -> JSON:
    """An object from a protobuf request body; 415 for types this server cannot read."""
    if not body.startswith(MAGIC):
        raise errors.bad_request("provided protobuf is missing the k8s\\x00 prefix")
    try:
        unknown = _decode(_UNKNOWN, body[len(MAGIC) :])
        type_meta = unknown.get("typeMeta") or {}
        api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
        schema = SCHEMAS.get((api_version, kind))
        if schema is None:
            raise _unsupported(f"{api_version}, Kind={kind}")
        obj = _decode(schema, base64.b64decode(unknown.get("raw", "")))
    except ValueError as e:
        raise errors.bad_request(f"error decoding protobuf request body: {e}") from None
    return {"apiVersion": api_version, "kind": kind, **obj}


def _unsupported(what: str) -> errors.APIError:
    return errors.APIError(
        415,
        "UnsupportedMediaType",
        f"the embedded API server cannot decode protobuf for {what}: send application/json",
        {},
    )

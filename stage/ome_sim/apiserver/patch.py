"""The three patch types kube-apiserver accepts: JSON merge, JSON (RFC 6902) and strategic merge.

It owns only computing a patched object; it never mutates its inputs, stores or validates objects.
All three are hand-written: ``jsonpatch`` is not a dependency, and no library knows kube's
strategic-merge directives or the merge-key table the built-in types declare in their Go tags.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from ome_sim.apiserver import errors

JSON = dict[str, Any]

# What kube answers when a patch operation cannot apply (NewGenericServerResponse(422, ...)).
REJECTED = "the server rejected our request due to an error in our request"

UNSUPPORTED_PATCH = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)


def _rejected(detail: str) -> errors.APIError:
    """422 Invalid; kubectl shows the fixed message, the specific reason is the cause."""
    return errors.APIError(422, "Invalid", REJECTED, {"causes": [{"message": detail}]})


def _go_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "number"


# -- RFC 7386 JSON merge patch -----------------------------------------------------------------


def apply_merge_patch(target: JSON, patch: Any) -> JSON:
    """RFC 7386 on a copy of ``target``: objects merge, null deletes, anything else replaces.

    A patch that is not an object would replace the whole object, which kube cannot decode.
    """
    if not isinstance(patch, dict):
        raise errors.bad_request("Invalid JSON Patch")
    merged = _merge(target, patch)
    assert isinstance(merged, dict)
    return merged


def _merge(target: Any, patch: Any) -> Any:
    """evanphx/json-patch's ``MergePatch``, which kube-apiserver runs: a patch value that
    lands where there is no object to merge into has its nulls pruned, inside lists too
    (``{"a": [{"b": null}]}`` stores ``{"a": [{}]}``), except when it replaces an object."""
    if not isinstance(target, dict):
        return _prune_nulls(copy.deepcopy(patch))
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def _prune_nulls(value: Any) -> Any:
    """Drop null members of objects, at any depth; null list elements stay."""
    if isinstance(value, dict):
        return {k: _prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune_nulls(v) for v in value]
    return value


# -- RFC 6902 JSON patch -----------------------------------------------------------------------

_INDEX = re.compile(r"^(0|[1-9][0-9]*)$")
_MISSING = object()


def apply_json_patch(target: JSON, ops: Any) -> JSON:
    """RFC 6902 on a copy of ``target``; all operations apply or none do.

    A malformed document is 400 BadRequest; an operation that cannot apply is 422 Invalid.
    """
    if not isinstance(ops, list):
        raise errors.bad_request(
            f"json: cannot unmarshal {_go_type(ops) if ops is not None else 'object'} into Go "
            "value of type jsonpatch.Patch"
        )
    doc: Any = copy.deepcopy(target)
    for op in ops:
        doc = _apply_op(doc, _decode_op(op))
    if not isinstance(doc, dict):
        raise _rejected(f"json: cannot unmarshal {_go_type(doc)} into Go value of type object")
    return doc


@dataclass(frozen=True)
class _Op:
    op: str
    path: list[str]
    raw_path: str
    value: Any = None
    source: list[str] = field(default_factory=list)
    raw_from: str = ""


def _decode_op(op: Any) -> _Op:
    if not isinstance(op, dict):
        raise errors.bad_request(
            f"json: cannot unmarshal {_go_type(op)} into Go value of type jsonpatch.Operation"
        )
    kind = op.get("op")
    if kind not in ("add", "remove", "replace", "move", "copy", "test"):
        raise errors.bad_request(f"Unexpected kind: {kind if isinstance(kind, str) else 'unknown'}")
    raw_path = op.get("path")
    if not isinstance(raw_path, str):
        raise errors.bad_request(f"{kind} operation missing path")
    if kind in ("add", "replace", "test") and "value" not in op:
        raise errors.bad_request(f"{kind} operation missing value")
    source = op.get("from")
    raw_from = source if isinstance(source, str) else ""
    if kind in ("move", "copy") and not isinstance(source, str):
        raise errors.bad_request(f"{kind} operation missing from")
    return _Op(kind, _pointer(raw_path), raw_path, op.get("value"), _pointer(raw_from), raw_from)


def _pointer(text: str) -> list[str]:
    if text == "":
        return []
    if not text.startswith("/"):
        raise errors.bad_request(f"JSON pointer must be empty or start with a /: {text!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in text[1:].split("/")]


def _apply_op(doc: Any, op: _Op) -> Any:
    if op.op == "add":
        return _add(doc, op.path, copy.deepcopy(op.value), op.raw_path, "add")
    if op.op == "remove":
        if _get(doc, op.path) is _MISSING or not op.path:
            raise _rejected(
                f'remove operation does not apply: doc is missing path: "{op.raw_path}": '
                "missing value"
            )
        return _remove(doc, op.path)
    if op.op == "replace":
        if _get(doc, op.path) is _MISSING:
            raise _rejected(
                f"replace operation does not apply: doc is missing key: {op.raw_path}: "
                "missing value"
            )
        if not op.path:
            return copy.deepcopy(op.value)
        doc = _remove(doc, op.path)
        return _add(doc, op.path, copy.deepcopy(op.value), op.raw_path, "replace")
    if op.op in ("move", "copy"):
        value = _get(doc, op.source)
        if value is _MISSING:
            raise _rejected(
                f"{op.op} operation does not apply: doc is missing from path: {op.raw_from}: "
                "missing value"
            )
        if op.op == "move":
            if op.path[: len(op.source)] == op.source and op.path != op.source:
                raise _rejected(
                    f"move operation does not apply: cannot move {op.raw_from} into its own "
                    f"child {op.raw_path}"
                )
            doc = _remove(doc, op.source)
        else:
            value = copy.deepcopy(value)
        return _add(doc, op.path, value, op.raw_path, op.op)
    # test
    current = _get(doc, op.path)
    if current is _MISSING or not _json_equal(current, op.value):
        raise _rejected(f"testing value {op.raw_path} failed: test failed")
    return doc


def _get(doc: Any, path: list[str]) -> Any:
    node = doc
    for part in path:
        if isinstance(node, dict):
            if part not in node:
                return _MISSING
            node = node[part]
        elif isinstance(node, list):
            if not _INDEX.match(part) or int(part) >= len(node):
                return _MISSING
            node = node[int(part)]
        else:
            return _MISSING
    return node


def _add(doc: Any, path: list[str], value: Any, raw: str, verb: str) -> Any:
    if not path:
        return value
    parent = _get(doc, path[:-1])
    last = path[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif _INDEX.match(last) and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise _rejected(f"Unable to access invalid index: {last}: invalid index referenced")
    else:
        raise _rejected(
            f'{verb} operation does not apply: doc is missing path: "{raw}": missing value'
        )
    return doc


def _remove(doc: Any, path: list[str]) -> Any:
    parent = _get(doc, path[:-1])
    last = path[-1]
    if isinstance(parent, dict):
        del parent[last]
    elif isinstance(parent, list):
        del parent[int(last)]
    return doc


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON sees it: ``true`` is not ``1``; ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and bool(a == b)


# -- strategic merge patch ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Meta:
    """A field's patch metadata, as the Go struct tags declare it.

    ``strategy`` is ``merge`` for merged lists (``key`` is the merge key; empty for a list of
    scalars) or ``replace`` for a map replaced whole. ``fields`` describes the map's fields or
    the list element's fields.
    """

    strategy: str = ""
    key: str = ""
    fields: dict[str, _Meta] = field(default_factory=dict)

    def child(self, name: str) -> _Meta:
        return self.fields.get(name, _NONE)


_NONE = _Meta()


def _by(key: str, **fields: _Meta) -> _Meta:
    return _Meta("merge", key, fields)


def _obj(**fields: _Meta) -> _Meta:
    return _Meta("", "", fields)


_SCALARS = _Meta("merge")
_ATOMIC = _Meta("replace")
_CONDITIONS = _by("type")

_OBJECT_META = _obj(ownerReferences=_by("uid"), finalizers=_SCALARS)

_CONTAINER = _by(
    "name",
    env=_by("name"),
    ports=_by("containerPort"),
    volumeMounts=_by("mountPath"),
    volumeDevices=_by("devicePath"),
)

_POD_SPEC = _obj(
    containers=_CONTAINER,
    initContainers=_CONTAINER,
    ephemeralContainers=_CONTAINER,
    volumes=_by("name"),
    imagePullSecrets=_by("name"),
    hostAliases=_by("ip"),
    schedulingGates=_by("name"),
    resourceClaims=_by("name"),
    topologySpreadConstraints=_by("topologyKey"),
)

_KINDS: dict[str, _Meta] = {
    "Pod": _obj(
        metadata=_OBJECT_META,
        spec=_POD_SPEC,
        status=_obj(conditions=_CONDITIONS, podIPs=_by("ip"), hostIPs=_by("ip")),
    ),
    "Node": _obj(
        metadata=_OBJECT_META,
        spec=_obj(podCIDRs=_SCALARS),
        status=_obj(conditions=_CONDITIONS, addresses=_by("type")),
    ),
    "Namespace": _obj(metadata=_OBJECT_META, status=_obj(conditions=_CONDITIONS)),
    "ConfigMap": _obj(metadata=_OBJECT_META),
    "Secret": _obj(metadata=_OBJECT_META),
    "Service": _obj(
        metadata=_OBJECT_META,
        spec=_obj(ports=_by("port")),
        status=_obj(conditions=_CONDITIONS),
    ),
    "Event": _obj(metadata=_OBJECT_META),
    "Lease": _obj(metadata=_OBJECT_META),
    "ControllerRevision": _obj(metadata=_OBJECT_META, data=_ATOMIC),
    "CustomResourceDefinition": _obj(metadata=_OBJECT_META),
    "ValidatingWebhookConfiguration": _obj(metadata=_OBJECT_META, webhooks=_by("name")),
}

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_PREFIX = "$deleteFromPrimitiveList/"
_ORDER_PREFIX = "$setElementOrder/"


def apply_strategic_merge_patch(target: JSON, patch: JSON, kind: str) -> JSON:
    """Kubernetes strategic merge patch of a built-in ``kind``, on a copy of ``target``."""
    meta = _KINDS.get(kind)
    if meta is None:
        raise errors.APIError(415, "UnsupportedMediaType", UNSUPPORTED_PATCH)
    body: Any = patch
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise errors.bad_request(
            f"json: cannot unmarshal {_go_type(body)} into Go value of type "
            "map[string]interface {}"
        )
    return _merge_map(copy.deepcopy(target), copy.deepcopy(body), meta)


def _merge_map(original: JSON, patch: JSON, meta: _Meta) -> JSON:
    """``mergeMap``: both arguments are owned (already copied) and may be changed."""
    directive = patch.pop(_DIRECTIVE, None)
    if directive == "replace":
        return _merge_map({}, patch, meta)
    if directive == "delete":
        return {}
    if directive not in (None, "merge"):
        raise errors.bad_request(f"unknown patch type: {directive} in map: {patch}")
    _retain_keys(original, patch)
    _set_element_orders(original, patch, meta)
    for key, value in patch.items():
        if key.startswith(_ORDER_PREFIX):
            continue
        if key.startswith(_DELETE_PREFIX):
            name = key[len(_DELETE_PREFIX) :]
            if not isinstance(value, list):
                raise errors.bad_request("invalid patch format of primitive list")
            current = original.get(name)
            if isinstance(current, list):
                original[name] = [v for v in current if not _contains(value, v)]
            continue
        if value is None:
            original.pop(key, None)
            continue
        original[key] = _merge_value(original.get(key, _MISSING), value, meta.child(key))
    return original


def _merge_value(original: Any, patch: Any, meta: _Meta) -> Any:
    if isinstance(patch, dict):
        if meta.strategy == "replace":
            return _merge_map({}, patch, _NONE)
        base = original if isinstance(original, dict) else {}
        return _merge_map(base, patch, meta)
    if isinstance(patch, list):
        base_list = original if isinstance(original, list) else []
        if meta.strategy == "merge":
            return _merge_list(base_list, patch, meta)
        return [
            _merge_value(_MISSING, item, meta) if isinstance(item, dict) else item
            for item in patch
            if not (isinstance(item, dict) and _DIRECTIVE in item)
        ]
    return patch


def _retain_keys(original: JSON, patch: JSON) -> None:
    """``$retainKeys``: keys of ``original`` not listed are dropped."""
    if _RETAIN_KEYS not in patch:
        return
    keep = patch.pop(_RETAIN_KEYS)
    if not isinstance(keep, list):
        raise errors.bad_request("invalid patch format of retainKeys")
    for key, value in patch.items():
        if value is None or key.startswith((_DELETE_PREFIX, _ORDER_PREFIX)):
            continue
        if key not in keep:
            raise errors.bad_request("invalid patch format of retainKeys")
    for key in list(original):
        if key not in keep:
            del original[key]


def _set_element_orders(original: JSON, patch: JSON, meta: _Meta) -> None:
    """``$setElementOrder/<field>``: merge the list, then order it as the directive says."""
    for directive in [k for k in patch if k.startswith(_ORDER_PREFIX)]:
        order = patch[directive]
        name = directive[len(_ORDER_PREFIX) :]
        if not isinstance(order, list):
            raise errors.bad_request("invalid patch format of setElementOrder list")
        field_meta = meta.child(name)
        current = original.get(name)
        current_list = current if isinstance(current, list) else None
        patch_list = patch.get(name)
        if patch_list is not None and not isinstance(patch_list, list):
            continue
        if current_list is None and patch_list is None:
            continue
        if patch_list is None:
            merged = list(current_list or [])
        else:
            merged = _merge_value(current_list or [], patch_list, field_meta)
            del patch[name]
        key = field_meta.key
        listed = [m for m in merged if _index(order, m, key) >= 0]
        rest = [m for m in merged if _index(order, m, key) < 0]
        listed.sort(key=lambda m: _index(order, m, key))
        original[name] = _merge_sorted(rest, listed, current_list or [], key)


def _merge_list(original: list[Any], patch: list[Any], meta: _Meta) -> list[Any]:
    """``mergeSlice``: scalars union, maps merge by key; order follows the patch."""
    if not original and not patch:
        return original
    key = meta.key
    if not key and not any(isinstance(p, dict) for p in patch + original):
        merged: list[Any] = []
        for item in original + patch:
            if not _contains(merged, item):
                merged.append(item)
    else:
        if not key:
            raise errors.bad_request("cannot merge lists without merge key")
        original, patch = _special_elements(original, patch, key)
        merged = list(original)
        for item in patch:
            if not isinstance(item, dict):
                raise errors.bad_request(f"invalid list element for merge key {key}: {item}")
            if key not in item:
                raise errors.bad_request(f"map: {item} does not contain declared merge key: {key}")
            at = _index(merged, item, key)
            if at >= 0:
                merged[at] = _merge_map(merged[at], item, meta)
            else:
                merged.append(_merge_map({}, item, meta))
    in_patch = [m for m in merged if _index(patch, m, key) >= 0]
    server_only = [m for m in merged if _index(patch, m, key) < 0]
    in_patch.sort(key=lambda m: _index(patch, m, key))
    return _merge_sorted(server_only, in_patch, original, key)


def _special_elements(
    original: list[Any], patch: list[Any], key: str
) -> tuple[list[Any], list[Any]]:
    """``$patch: delete`` removes the element by key; ``$patch: replace`` replaces the list."""
    plain: list[Any] = []
    replace = False
    for item in patch:
        if not isinstance(item, dict) or _DIRECTIVE not in item:
            plain.append(item)
            continue
        directive = item[_DIRECTIVE]
        if directive == "delete":
            if key not in item:
                raise errors.bad_request(f"map: {item} does not contain declared merge key: {key}")
            original = [o for o in original if not _same_key(o, item, key)]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            rest = {k: v for k, v in item.items() if k != _DIRECTIVE}
            if rest:
                plain.append(rest)
        else:
            raise errors.bad_request(f"unknown patch type: {directive} in map: {item}")
    if replace:
        return [_merge_map({}, p, _NONE) if isinstance(p, dict) else p for p in plain], []
    return original, plain


def _merge_sorted(left: list[Any], right: list[Any], server: list[Any], key: str) -> list[Any]:
    """kube's ``mergeSortedSlice``: server-only items (left) keep their place relative to
    the live list; patched items (right) keep the patch's order."""
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j])
            j += 1
        elif j >= len(right):
            out.append(left[i])
            i += 1
        else:
            li, ri = _index(server, left[i], key), _index(server, right[j], key)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def _same_key(a: Any, b: Any, key: str) -> bool:
    return isinstance(a, dict) and isinstance(b, dict) and key in a and _json_equal(a[key], b[key])


def _index(items: list[Any], item: Any, key: str) -> int:
    for at, candidate in enumerate(items):
        if key:
            if _same_key(candidate, item, key):
                return at
        elif _json_equal(candidate, item):
            return at
    return -1


def _contains(items: list[Any], item: Any) -> bool:
    return any(_json_equal(candidate, item) for candidate in items)

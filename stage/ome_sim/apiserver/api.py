"""REST semantics of the embedded API server: get, list, create, update, patch, delete.

Owns what kube-apiserver's generic registry does between decoding a request and writing to
storage: metadata stamping, optimistic concurrency, preconditions, status and scale
subresources, graceful and finalizer-held deletion, CRD schemas, and admission webhooks.
It never speaks HTTP: the HTTP layer decodes requests and encodes what this returns.
"""

from __future__ import annotations

import base64
import json
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ome.kube import json_copy

from . import errors
from .admission import AdmissionAttributes, WebhookDispatcher
from .errors import APIError, FieldError
from .patch import apply_json_patch, apply_merge_patch, apply_strategic_merge_patch
from .registry import Registry, crd_resource_type
from .resources import ResourceType
from .schema import StructuralSchema
from .selectors import (
    DOUBLE_EQUALS,
    EQUALS,
    IN,
    FieldSelector,
    LabelSelector,
    check_field_selector,
    object_fields,
    parse_field_selector,
    parse_label_selector,
)
from .store import Store
from .strategies import (
    GENERATE_ALPHABET,
    crd_status,
    default_webhooks,
    fold_string_data,
    has_spec_change,
    omit_empty_crd_fields,
    prepare_for_create,
    validate_metadata,
    validate_name,
    validate_object,
)

JSON = dict[str, Any]

CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
NAMESPACES = ("", "namespaces")
VWC_KEY = ("admissionregistration.k8s.io", "validatingwebhookconfigurations")

#: Types whose delete answers with the deleted object rather than a Success Status.
RETURNS_DELETED_OBJECT = {("", "pods"), ("", "namespaces"), ("", "nodes"), CRD_KEY}

#: Metadata fields a client may never set; the server owns them.
_SERVER_META = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
    "managedFields",
)

_UPDATE_RETRIES = 5


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class WriteOptions:
    dry_run: bool = False
    field_validation: str = "Warn"  # Strict | Warn | Ignore
    user_agent: str = ""
    options: JSON | None = None
    #: Filled in by the write: texts sent back as ``Warning`` headers.
    warnings: list[str] = field(default_factory=list)


@dataclass
class ListOptions:
    label_selector: str = ""
    field_selector: str = ""
    limit: int = 0
    continue_token: str = ""
    resource_version: str = ""
    resource_version_match: str = ""


@dataclass
class Selection:
    """Parsed selectors of a list or watch, plus the namespace it is confined to."""

    labels: LabelSelector
    fields: FieldSelector
    namespace: str | None

    def matches(self, rt: ResourceType, obj: JSON) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace", "") != self.namespace:
            return False
        if not self.labels.matches(meta.get("labels") or {}):
            return False
        return self.fields.empty or self.fields.matches(object_fields(rt.group, rt.plural, obj))


class APIServer:
    """The API's behaviour over a ``Store``; every method runs on the server's loop."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        dispatcher: WebhookDispatcher,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.registry = registry
        self.dispatcher = dispatcher
        self.clock = clock
        self._schemas: dict[tuple[str, str, str], StructuralSchema] = {}
        self._rand = random.Random()

    # -- helpers ---------------------------------------------------------------------------

    def present(self, rt: ResourceType, version: str, obj: JSON) -> JSON:
        """An object as a client of ``version`` sees it (stored once, served in every
        version: conversion strategy None only rewrites apiVersion)."""
        obj["apiVersion"] = rt.api_version(version)
        obj["kind"] = rt.kind
        return obj

    def schema(self, rt: ResourceType, version: str) -> StructuralSchema | None:
        if not rt.custom:
            return None
        key = (rt.group, rt.plural, version)
        cached = self._schemas.get(key)
        if cached is None:
            cached = StructuralSchema(rt.schemas.get(version) or {"type": "object"})
            self._schemas[key] = cached
        return cached

    def _okey(self, rt: ResourceType, namespace: str, name: str) -> tuple[str, str]:
        return (namespace if rt.namespaced else "", name)

    def _must_get(self, rt: ResourceType, namespace: str, name: str) -> JSON:
        obj = self.store.get(rt.key, self._okey(rt, namespace, name))
        if obj is None:
            raise errors.not_found(rt.plural, rt.group, name)
        return obj

    def _now(self) -> str:
        return rfc3339(self.clock())

    def _check_body(self, rt: ResourceType, version: str, body: Any) -> JSON:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        api_version = body.get("apiVersion")
        kind = body.get("kind")
        if api_version and api_version != rt.api_version(version):
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version(version)})"
            )
        if kind and kind != rt.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        for path in MICRO_TIMES.get(rt.key, ()):
            value: Any = body
            for part in path:
                value = value.get(part) if isinstance(value, dict) else None
            problem = micro_time_problem(value) if isinstance(value, str) else None
            if problem:
                raise errors.bad_request(
                    f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: ' + problem
                )
        meta = body.get("metadata", {})
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be a JSON object")
        body["metadata"] = meta
        body["apiVersion"], body["kind"] = rt.api_version(rt.storage_version), rt.kind
        if rt.key == CRD_KEY:
            omit_empty_crd_fields(body)
        return body

    def _check_namespace(self, rt: ResourceType, namespace: str, body: JSON) -> None:
        meta = body["metadata"]
        if not rt.namespaced:
            meta.pop("namespace", None)
            return
        given = meta.get("namespace")
        if given and given != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        meta["namespace"] = namespace

    def _namespace_open(self, rt: ResourceType, namespace: str, name: str) -> None:
        if not rt.namespaced:
            return
        ns = self.store.peek(NAMESPACES, ("", namespace))
        if ns is None:
            raise errors.not_found("namespaces", "", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise errors.namespace_terminating(rt.plural, rt.group, name, namespace)

    def _crd_terminating(self, rt: ResourceType) -> None:
        if rt.crd_name:
            crd = self.store.peek(CRD_KEY, ("", rt.crd_name))
            if crd is not None and crd["metadata"].get("deletionTimestamp"):
                raise errors.method_not_allowed(
                    "create not allowed while custom resource definition is terminating"
                )

    def _schema_checks(
        self, rt: ResourceType, version: str, obj: JSON, opts: WriteOptions, name: str
    ) -> None:
        """Prune, default and validate a custom resource as apiextensions-apiserver does."""
        schema = self.schema(rt, version)
        if schema is None:
            return
        pruned = schema.prune(obj)
        if pruned:
            if opts.field_validation == "Strict":
                raise errors.bad_request(schema.unknown_field_message(pruned))
            if opts.field_validation == "Warn":
                opts.warnings += [f'unknown field "{p.lstrip(".")}"' for p in pruned]
        schema.apply_defaults(obj)
        errs = schema.validate(obj)
        if errs:
            raise errors.invalid(rt.kind, rt.group, name, errs)

    def _validate(self, rt: ResourceType, obj: JSON, old: JSON | None, name: str) -> None:
        errs: list[FieldError] = []
        if old is None:
            errs += validate_name(rt, obj["metadata"].get("name", ""))
        errs += validate_metadata(rt, obj["metadata"])
        errs += validate_object(rt, obj, old)
        if errs:
            raise errors.invalid(rt.kind, rt.group, name, errs)

    async def _admit(
        self,
        rt: ResourceType,
        version: str,
        operation: str,
        subresource: str,
        name: str,
        namespace: str,
        obj: JSON | None,
        old: JSON | None,
        opts: WriteOptions,
    ) -> None:
        configs = [json_copy(c) for c in self.store.items(VWC_KEY)]
        if not configs:
            return
        ns_labels: dict[str, str] | None = None
        if rt.key == NAMESPACES:
            source = obj or old or {}
            ns_labels = dict((source.get("metadata") or {}).get("labels") or {})
        elif rt.namespaced:
            ns = self.store.peek(NAMESPACES, ("", namespace))
            ns_labels = dict(((ns or {}).get("metadata") or {}).get("labels") or {})
        attrs = AdmissionAttributes(
            operation=operation,
            group=rt.group,
            version=version,
            kind=rt.kind,
            resource=rt.plural,
            subresource=subresource,
            name=name,
            namespace=namespace if rt.namespaced else "",
            namespaced=rt.namespaced,
            object=self.present(rt, version, json_copy(obj)) if obj is not None else None,
            old_object=self.present(rt, version, json_copy(old)) if old is not None else None,
            dry_run=opts.dry_run,
            options=opts.options,
            user_agent=opts.user_agent,
        )
        opts.warnings += await self.dispatcher.validate(configs, attrs, ns_labels)

    # -- reads -----------------------------------------------------------------------------

    def get(self, rt: ResourceType, version: str, namespace: str, name: str) -> JSON:
        return self.present(rt, version, self._must_get(rt, namespace, name))

    def selection(self, rt: ResourceType, namespace: str | None, opts: ListOptions) -> Selection:
        labels = parse_label_selector(opts.label_selector)
        fields = parse_field_selector(opts.field_selector)
        check_field_selector(rt.group, rt.plural, rt.namespaced, fields)
        return Selection(labels, fields, namespace if rt.namespaced else None)

    def check_resource_version(self, text: str, match: str = "") -> int:
        """A requested resourceVersion: 400 when not a number, 504 when in the future."""
        if not text:
            return 0
        try:
            rv = int(text)
        except ValueError:
            raise errors.bad_request(f'invalid resource version "{text}"') from None
        if rv > self.store.rv:
            raise errors.timeout(f"Too large resource version: {rv}, current: {self.store.rv}")
        if match == "Exact" and rv not in (self.store.rv, 0):
            raise errors.expired(f"too old resource version: {rv} ({self.store.rv})")
        return rv

    def list_objects(
        self, rt: ResourceType, version: str, namespace: str | None, opts: ListOptions
    ) -> JSON:
        sel = self.selection(rt, namespace, opts)
        self.check_resource_version(opts.resource_version, opts.resource_version_match)
        start: tuple[str, str] | None = None
        list_rv = self.store.rv
        if opts.continue_token:
            list_rv, start = self._decode_continue(opts.continue_token)
        items: list[JSON] = []
        cont = ""
        remaining = 0
        # As kube-apiserver: the count of what is left only without selectors (with one it is
        # unknown, and a page ends at the first match past the limit, not after a full scan).
        counted = sel.labels.empty and sel.fields.empty
        for obj in self._scan(rt, sel, start):
            if not sel.matches(rt, obj):
                continue
            if opts.limit and len(items) >= opts.limit:
                remaining += 1
                if not counted:
                    break
                continue
            items.append(self.present(rt, version, json_copy(obj)))
        if remaining:
            last = items[-1]["metadata"]
            cont = self._encode_continue(list_rv, (last.get("namespace", ""), last["name"]))
        metadata: JSON = {"resourceVersion": str(list_rv)}
        if cont:
            metadata["continue"] = cont
            if counted:
                metadata["remainingItemCount"] = remaining
        return {
            "kind": f"{rt.kind}List",
            "apiVersion": rt.api_version(version),
            "metadata": metadata,
            "items": items,
        }

    def _scan(
        self, rt: ResourceType, sel: Selection, after: tuple[str, str] | None = None
    ) -> Iterator[JSON]:
        """The stored objects a selection can match, in key order and past ``after`` (a
        continue token's last key): through the store's indexes when it has an equality
        label requirement or (pods) a ``spec.nodeName`` term, else all of the type. Every
        one is still matched by the caller."""
        labels = [
            (r.key, r.values[0])
            for r in sel.labels.requirements
            if r.operator in (EQUALS, DOUBLE_EQUALS) or (r.operator == IN and len(r.values) == 1)
        ]
        node = next(
            (
                f.value
                for f in sel.fields.requirements
                if rt.key == ("", "pods")
                and f.field == "spec.nodeName"
                and f.op == EQUALS
                and f.value  # unbound pods (spec.nodeName=) are not indexed
            ),
            None,
        )
        keys = self.store.candidates(rt.key, labels, node) if labels or node else None
        if keys is None:
            return self.store.items(rt.key, sel.namespace, after)
        return self.store.items_among(rt.key, keys, sel.namespace, after)

    def _encode_continue(self, rv: int, key: tuple[str, str]) -> str:
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": list(key)})
        return base64.urlsafe_b64encode(raw.encode()).decode()

    def _decode_continue(self, token: str) -> tuple[int, tuple[str, str]]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            rv, start = int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
        except (ValueError, KeyError, IndexError, TypeError):
            raise errors.bad_request(f"continue key is not valid: {token!r}") from None
        if self.store.too_old(rv):
            raise errors.expired(
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter."
            )
        return rv, start

    # -- create ----------------------------------------------------------------------------

    async def create(
        self, rt: ResourceType, version: str, namespace: str, body: Any, opts: WriteOptions
    ) -> JSON:
        obj = self._check_body(rt, version, body)
        self._check_namespace(rt, namespace, obj)
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        for key in _SERVER_META:
            meta.pop(key, None)
        generated = not meta.get("name") and bool(meta.get("generateName"))
        if generated:
            meta["name"] = meta["generateName"] + "".join(
                self._rand.choice(GENERATE_ALPHABET) for _ in range(5)
            )
        name = meta.get("name", "")
        self._namespace_open(rt, namespace, name)
        self._crd_terminating(rt)
        prepare_for_create(rt, obj)
        if rt.key == VWC_KEY:
            default_webhooks(obj)
        self._schema_checks(rt, version, obj, opts, name)
        self._validate(rt, obj, None, name)
        await self._admit(rt, version, "CREATE", "", name, namespace, obj, None, opts)
        # The loop may have run other requests while the webhooks answered: check again.
        self._namespace_open(rt, namespace, name)
        okey = self._okey(rt, namespace, name)
        if self.store.peek(rt.key, okey) is not None:
            if generated:
                raise APIError(
                    409,
                    "AlreadyExists",
                    f'{errors.qualified(rt.plural, rt.group)} "{name}" already exists, the '
                    "server was not able to generate a unique name for the object",
                    {"name": name, "kind": rt.plural, "group": rt.group}
                    if rt.group
                    else {"name": name, "kind": rt.plural},
                )
            raise errors.already_exists(rt.plural, rt.group, name)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self._now()
        if rt.has_generation:
            meta["generation"] = 1
        if rt.key == CRD_KEY:
            obj["status"] = crd_status(obj, self._now())
        if opts.dry_run:
            obj["metadata"]["resourceVersion"] = ""
            return self.present(rt, version, obj)
        stored = self.store.put(rt.key, okey, obj)
        if rt.key == CRD_KEY:
            self._install_crd(stored)
        return self.present(rt, version, stored)

    def _install_crd(self, crd: JSON) -> None:
        rt = crd_resource_type(crd)
        self.registry.install(rt)
        for key in [k for k in self._schemas if k[:2] == rt.key]:
            del self._schemas[key]

    # -- update and patch ------------------------------------------------------------------

    async def update(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        body: Any,
        subresource: str,
        opts: WriteOptions,
    ) -> JSON:
        new = self._check_body(rt, version, body)
        self._check_namespace(rt, namespace, new)
        given_name = new["metadata"].get("name")
        if given_name and given_name != name:
            raise errors.bad_request(
                f"the name of the object ({given_name}) does not match the name on the URL ({name})"
            )
        new["metadata"]["name"] = name
        given_rv = new["metadata"].get("resourceVersion", "")
        if not given_rv and not rt.allow_unconditional_update:
            raise errors.invalid(
                rt.kind,
                rt.group,
                name,
                [
                    FieldError.invalid(
                        "metadata.resourceVersion", "0x0", "must be specified for an update"
                    )
                ],
            )

        def mutate(_current: JSON) -> JSON:
            return json_copy(new)

        return await self._guaranteed_update(
            rt, version, namespace, name, subresource, opts, mutate, given_rv
        )

    async def patch(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        content_type: str,
        patch_body: Any,
        subresource: str,
        opts: WriteOptions,
    ) -> JSON:
        if content_type == "application/strategic-merge-patch+json" and rt.custom:
            raise errors.unsupported_media_type(content_type)

        def mutate(current: JSON) -> JSON:
            served = self.present(rt, version, json_copy(current))
            if content_type == "application/json-patch+json":
                patched = apply_json_patch(served, patch_body)
            elif content_type == "application/merge-patch+json":
                patched = apply_merge_patch(served, patch_body)
            else:
                patched = apply_strategic_merge_patch(served, patch_body, rt.kind)
            checked = self._check_body(rt, version, patched)
            self._check_namespace(rt, namespace, checked)
            patched_name = checked["metadata"].get("name")
            if patched_name != name:
                raise errors.bad_request(
                    f"the name of the object ({patched_name}) does not match the name on the "
                    f"URL ({name})"
                )
            return checked

        precondition = ""
        if isinstance(patch_body, dict):
            precondition = str((patch_body.get("metadata") or {}).get("resourceVersion") or "")
        return await self._guaranteed_update(
            rt, version, namespace, name, subresource, opts, mutate, precondition
        )

    async def _guaranteed_update(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        subresource: str,
        opts: WriteOptions,
        mutate: Callable[[JSON], JSON],
        precondition_rv: str,
    ) -> JSON:
        """Read, mutate, admit, write; retried when the object changed during admission,
        as kube's GuaranteedUpdate is, unless the client pinned a resourceVersion."""
        okey = self._okey(rt, namespace, name)
        for _ in range(_UPDATE_RETRIES):
            old = self._must_get(rt, namespace, name)
            old_rv = old["metadata"]["resourceVersion"]
            if precondition_rv and precondition_rv != old_rv:
                raise errors.conflict(rt.plural, rt.group, name, errors.STALE)
            new = mutate(json_copy(old))
            new = self._merge_for_update(rt, version, old, new, subresource, opts, name)
            if _same(old, new):
                return self.present(rt, version, old)
            self._validate(rt, new, old, name)
            await self._admit(rt, version, "UPDATE", subresource, name, namespace, new, old, opts)
            current = self.store.peek(rt.key, okey)
            if current is None:
                raise errors.not_found(rt.plural, rt.group, name)
            if current["metadata"]["resourceVersion"] != old_rv:
                if precondition_rv:
                    raise errors.conflict(rt.plural, rt.group, name, errors.STALE)
                continue
            if opts.dry_run:
                return self.present(rt, version, new)
            return self.present(rt, version, self._commit_update(rt, okey, new))
        raise errors.conflict(rt.plural, rt.group, name, errors.STALE)

    def _merge_for_update(
        self,
        rt: ResourceType,
        version: str,
        old: JSON,
        new: JSON,
        subresource: str,
        opts: WriteOptions,
        name: str,
    ) -> JSON:
        """Apply what the server owns: immutable metadata, status/spec split, generation."""
        if subresource == "status":
            merged = json_copy(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            new = merged
        elif rt.status:
            if "status" in old:
                new["status"] = json_copy(old["status"])
            else:
                new.pop("status", None)
        meta, old_meta = new["metadata"], old["metadata"]
        given_uid = meta.get("uid")
        if given_uid and given_uid != old_meta["uid"]:
            raise errors.conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: UID in precondition: {given_uid}, UID in object meta: "
                f"{old_meta['uid']}",
            )
        for key in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
        ):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta.pop("managedFields", None)
        meta.pop("selfLink", None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise errors.invalid(
                    rt.kind,
                    rt.group,
                    name,
                    [
                        FieldError.forbidden(
                            "metadata.finalizers",
                            "no new finalizers can be added if the object is being deleted, "
                            f"found new finalizers {json.dumps(sorted(added))}",
                        )
                    ],
                )
        if rt.key == ("", "secrets"):
            fold_string_data(new)
        if rt.key == VWC_KEY:
            default_webhooks(new)
        if rt.key == NAMESPACES:
            # spec.finalizers changes only through the finalize subresource.
            fins = (old.get("spec") or {}).get("finalizers")
            spec = new.setdefault("spec", {})
            if fins is None:
                spec.pop("finalizers", None)
            else:
                spec["finalizers"] = json_copy(fins)
        if subresource != "status" or rt.custom:
            self._schema_checks(rt, version, new, opts, name)
        if rt.has_generation:
            meta["generation"] = old_meta.get("generation", 1) + (
                1 if has_spec_change(old, new) else 0
            )
        if rt.key == CRD_KEY:
            new["status"] = crd_status(new, self._now())
        return new

    def _commit_update(self, rt: ResourceType, okey: tuple[str, str], new: JSON) -> JSON:
        meta = new["metadata"]
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
            and not (rt.key == NAMESPACES and (new.get("spec") or {}).get("finalizers"))
        ):
            # The last finalizer is gone: the object goes, as kube's store does it.
            if rt.key == NAMESPACES:
                # Finalized, then deleted by the namespace controller: two writes.
                self.store.put(rt.key, okey, new)
                final = self.store.remove(rt.key, okey)
                assert final is not None
                return final
            # kube-apiserver does not write the update that empties the finalizers: it
            # deletes the stored object (one DELETED event, which still shows the last
            # finalizers) and answers the update with the object as updated, at the
            # resourceVersion it had.
            current = self.store.peek(rt.key, okey)
            final = self.store.remove(rt.key, okey)
            assert final is not None and current is not None
            self._after_remove(rt, final)
            answer = json_copy(new)
            answer["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            return answer
        stored = self.store.put(rt.key, okey, new)
        if rt.key == CRD_KEY:
            self._install_crd(stored)
        return stored

    def _after_remove(self, rt: ResourceType, final: JSON) -> None:
        if rt.key == CRD_KEY:
            gone = crd_resource_type(final)
            self.registry.uninstall(gone.key)
            self.store.drop_type(gone.key)

    async def mutate(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        fn: Callable[[JSON], JSON],
        opts: WriteOptions,
    ) -> JSON:
        """An update computed from the current object, retried like any patch (the
        control plane's own writes use it)."""
        return await self._guaranteed_update(
            rt, rt.storage_version, namespace, name, "", opts, fn, ""
        )

    # -- finalize (namespaces) -------------------------------------------------------------

    def finalize_namespace(self, name: str, finalizers: list[str]) -> JSON:
        rt = self.registry.by_key(*NAMESPACES)
        assert rt is not None
        old = self._must_get(rt, "", name)
        new = json_copy(old)
        new.setdefault("spec", {})["finalizers"] = finalizers
        return self._commit_update(rt, ("", name), new)

    # -- delete ----------------------------------------------------------------------------

    async def delete(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        options: JSON,
        opts: WriteOptions,
    ) -> tuple[JSON, bool]:
        """Returns the object (or a Success Status) and whether it is gone already."""
        okey = self._okey(rt, namespace, name)
        obj = self._must_get(rt, namespace, name)
        meta = obj["metadata"]
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise errors.precondition_failed(
                rt.kind,
                name,
                f"the UID in the precondition ({pre['uid']}) does not match the UID in record "
                f"({meta['uid']}). The object might have been deleted and then recreated",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise errors.precondition_failed(
                rt.kind,
                name,
                f"the ResourceVersion in the precondition ({pre['resourceVersion']}) does not "
                f"match the ResourceVersion in record ({meta['resourceVersion']}). The object "
                "might have been modified",
            )
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is not None:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise errors.invalid(
                "DeleteOptions",
                "",
                "",
                [
                    FieldError.not_supported(
                        "propagationPolicy", policy, ["Foreground", "Background", "Orphan"]
                    )
                ],
            )
        await self._admit(rt, version, "DELETE", "", name, namespace, None, obj, opts)
        current = self.store.peek(rt.key, okey)
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            raise errors.not_found(rt.plural, rt.group, name)
        obj = json_copy(current)
        meta = obj["metadata"]
        if opts.dry_run:
            return self.present(rt, version, obj), False
        changed = False
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        if policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if policy in ("Orphan", "Foreground") and finalizers != (meta.get("finalizers") or []):
            if meta.get("deletionTimestamp"):
                pass  # kube does not change the policy of an object already being deleted
            else:
                meta["finalizers"] = finalizers
                changed = True
        grace = self._grace(rt, obj, options)
        hold = bool(meta.get("finalizers")) or grace > 0
        if rt.key == NAMESPACES:
            hold = True
            if obj.get("status", {}).get("phase") != "Terminating":
                obj.setdefault("status", {})["phase"] = "Terminating"
                changed = True
        if rt.key == CRD_KEY and not meta.get("deletionTimestamp"):
            changed = True
        if not hold:
            final = self.store.remove(rt.key, okey)
            assert final is not None
            self._after_remove(rt, final)
            return self._deleted_response(rt, version, final), True
        now = self.clock()
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = rfc3339(now + timedelta(seconds=grace))
            meta["deletionGracePeriodSeconds"] = grace
            changed = True
        elif grace < (meta.get("deletionGracePeriodSeconds") or 0):
            # A shorter grace period replaces a longer one, as for pods in kube.
            meta["deletionTimestamp"] = rfc3339(now + timedelta(seconds=grace))
            meta["deletionGracePeriodSeconds"] = grace
            changed = True
            if grace == 0 and not meta.get("finalizers"):
                final = self.store.remove(rt.key, okey)
                assert final is not None
                return self._deleted_response(rt, version, final), True
        if rt.key == CRD_KEY:
            obj["status"] = crd_status(obj, self._now())
        if changed:
            obj = self.store.put(rt.key, okey, obj)
        return self.present(rt, version, obj), False

    def _grace(self, rt: ResourceType, obj: JSON, options: JSON) -> int:
        if rt.key != ("", "pods"):
            return 0
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        return max(0, int(grace))

    def _deleted_response(self, rt: ResourceType, version: str, final: JSON) -> JSON:
        if rt.key in RETURNS_DELETED_OBJECT or rt.custom:
            return self.present(rt, version, final)
        details: JSON = {
            "name": final["metadata"]["name"],
            "kind": rt.plural,
            "uid": final["metadata"]["uid"],
        }
        if rt.group:
            details["group"] = rt.group
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }

    async def delete_collection(
        self,
        rt: ResourceType,
        version: str,
        namespace: str | None,
        list_opts: ListOptions,
        options: JSON,
        opts: WriteOptions,
    ) -> JSON:
        listed = self.list_objects(
            rt,
            version,
            namespace,
            ListOptions(
                label_selector=list_opts.label_selector, field_selector=list_opts.field_selector
            ),
        )
        for item in listed["items"]:
            meta = item["metadata"]
            try:
                await self.delete(
                    rt, version, meta.get("namespace", ""), meta["name"], options, opts
                )
            except APIError as e:
                if e.code != 404:
                    raise
        return listed

    # -- subresources ----------------------------------------------------------------------

    async def bind(self, rt: ResourceType, namespace: str, name: str, body: Any) -> JSON:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        target = (body.get("target") or {}).get("name")
        if not target:
            raise errors.invalid("Binding", "", name, [FieldError.required("target.name")])
        okey = self._okey(rt, namespace, name)
        pod = self._must_get(rt, namespace, name)
        if pod["metadata"].get("deletionTimestamp"):
            raise errors.conflict(
                "pods", "", name, "pod is being deleted, cannot be assigned to a host"
            )
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            raise errors.conflict(
                "pods", "", name, f'pod {name} is already assigned to node "{node_name}"'
            )
        if (pod.get("spec") or {}).get("schedulingGates"):
            raise errors.conflict(
                "pods", "", name, "pod has scheduling gates, cannot be assigned to a host"
            )
        pod["spec"]["nodeName"] = target
        conditions = [
            c
            for c in (pod.get("status") or {}).get("conditions") or []
            if c.get("type") != "PodScheduled"
        ]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": self._now(),
            }
        )
        pod.setdefault("status", {})["conditions"] = conditions
        self.store.put(rt.key, okey, pod)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def get_scale(self, rt: ResourceType, namespace: str, name: str) -> JSON:
        obj = self._must_get(rt, namespace, name)
        return self._scale_of(rt, obj)

    def _scale_of(self, rt: ResourceType, obj: JSON) -> JSON:
        assert rt.scale is not None
        meta = obj["metadata"]
        status: JSON = {"replicas": _get_path(obj, rt.scale.status_replicas_path) or 0}
        if rt.scale.label_selector_path:
            selector = _get_path(obj, rt.scale.label_selector_path)
            if selector is not None:
                status["selector"] = selector
        scale_meta = {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        }
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": scale_meta,
            "spec": {"replicas": _get_path(obj, rt.scale.spec_replicas_path) or 0},
            "status": status,
        }

    async def update_scale(
        self,
        rt: ResourceType,
        version: str,
        namespace: str,
        name: str,
        scale_of: Callable[[JSON], Any],
        precondition_rv: str,
        opts: WriteOptions,
    ) -> JSON:
        """Write ``spec.replicas`` through the scale subresource; ``scale_of`` turns the
        current Scale into the requested one (a PUT body, or the current one patched)."""
        assert rt.scale is not None
        scale_path = rt.scale.spec_replicas_path

        def mutate(current: JSON) -> JSON:
            wanted = scale_of(self._scale_of(rt, current))
            if not isinstance(wanted, dict):
                raise errors.bad_request("the body of the request must be a Scale object")
            replicas = (wanted.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise errors.invalid(
                    "Scale",
                    "autoscaling",
                    name,
                    [
                        FieldError.invalid(
                            "spec.replicas", replicas, "must be greater than or equal to 0"
                        )
                    ],
                )
            _set_path(current, scale_path, replicas)
            return current

        await self._guaranteed_update(
            rt, version, namespace, name, "scale", opts, mutate, precondition_rv
        )
        return self.get_scale(rt, namespace, name)


def _same(old: JSON, new: JSON) -> bool:
    a, b = json_copy(old), json_copy(new)
    for o in (a, b):
        o["metadata"].pop("resourceVersion", None)
    return bool(a == b)


def _get_path(obj: JSON, path: str) -> Any:
    cur: Any = obj
    for part in path.strip(".").split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _set_path(obj: JSON, path: str, value: Any) -> None:
    parts = path.strip(".").split(".")
    cur = obj
    for part in parts[:-1]:
        cur = cur.setdefault(part, {})
    cur[parts[-1]] = value


# -- metav1.MicroTime ------------------------------------------------------------------------

#: The MicroTime fields of the served built-in types (where in the object).
MICRO_TIMES: dict[tuple[str, str], tuple[tuple[str, ...], ...]] = {
    ("coordination.k8s.io", "leases"): (("spec", "acquireTime"), ("spec", "renewTime")),
    ("", "events"): (("eventTime",), ("series", "lastObservedTime")),
}
_MICRO_LAYOUT = "2006-01-02T15:04:05.000000Z07:00"
# Go's time.Parse walks the layout element by element: (element, digits; 0 for a literal).
_MICRO_ELEMENTS = (
    ("2006", 4),
    ("-", 0),
    ("01", 2),
    ("-", 0),
    ("02", 2),
    ("T", 0),
    ("15", -2),  # one or two digits
    (":", 0),
    ("04", 2),
    (":", 0),
    ("05", 2),
)


def micro_time_problem(value: str) -> str | None:
    """Why metav1.MicroTime's decoder (``time.Parse`` of RFC 3339 with exactly six fractional
    digits) refuses ``value``, in Go's words; None if it takes it."""

    def cannot(rest: str, elem: str) -> str:
        return f'parsing time "{value}" as "{_MICRO_LAYOUT}": cannot parse "{rest}" as "{elem}"'

    rest = value
    for elem, digits in _MICRO_ELEMENTS:
        if digits == 0:
            if not rest.startswith(elem):
                return cannot(rest, elem)
            rest = rest[len(elem) :]
            continue
        n = abs(digits)
        if digits < 0 and not (len(rest) >= 2 and rest[:2].isdigit()):
            n = 1
        if len(rest) < n or not rest[:n].isascii() or not rest[:n].isdigit():
            return cannot(rest, elem)
        rest = rest[n:]
    if len(rest) < 7 or rest[0] not in ".," or not rest[1:7].isdigit():
        return cannot(rest, ".000000")
    rest = rest[7:]
    if rest.startswith("Z"):
        rest = rest[1:]
    elif (
        len(rest) >= 6
        and rest[0] in "+-"
        and rest[1:3].isdigit()
        and rest[3] == ":"
        and rest[4:6].isdigit()
    ):
        rest = rest[6:]
    else:
        return cannot(rest, "Z07:00")
    if rest:
        return f'parsing time "{value}": extra text: "{rest}"'
    return None

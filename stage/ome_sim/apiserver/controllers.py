"""The controllers a real control plane runs behind the API: the garbage collector
(ownerReferences, orphan and foreground deletion), the namespace controller and the CRD
instance cleanup. They act only through ``APIServer`` calls, so watchers and webhooks see
their writes as they would see kube-controller-manager's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from .api import CRD_KEY, NAMESPACES, APIServer, WriteOptions
from .errors import APIError
from .registry import crd_resource_type
from .store import Change, ObjKey, TypeKey

JSON = dict[str, Any]
log = logging.getLogger(__name__)

GC_AGENT = "kube-controller-manager/v1.32.0 (garbage-collector)"
NS_AGENT = "kube-controller-manager/v1.32.0 (namespace-controller)"
CRD_AGENT = "kube-apiserver/v1.32.0 (crd-finalizer)"
RETRY_SECONDS = 0.5


class Controllers:
    """One loop: changes mark work, the loop drains it. Work is idempotent, so a mark made
    twice, or made for something already done, costs only a look."""

    def __init__(self, api: APIServer) -> None:
        self.api = api
        #: owner uid -> dependents that reference it
        self._dependents: dict[str, set[tuple[TypeKey, ObjKey]]] = {}
        self._deleted_owners: set[str] = set()
        self._check: set[tuple[TypeKey, ObjKey]] = set()
        self._owners_deleting: set[tuple[TypeKey, ObjKey]] = set()
        self._namespaces: set[str] = set()
        self._crds: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        api.store.listeners.append(self.on_change)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # -- marking ---------------------------------------------------------------------------

    def on_change(self, change: Change) -> None:
        obj, old = change.obj, change.old
        meta = obj["metadata"]
        okey = (meta.get("namespace", ""), meta["name"])
        uid = meta.get("uid", "")
        old_refs = {
            r.get("uid") for r in ((old or {}).get("metadata") or {}).get("ownerReferences") or []
        }
        new_refs = (
            set()
            if change.type == "DELETED"
            else {r.get("uid") for r in meta.get("ownerReferences") or []}
        )
        for ref in old_refs - new_refs:
            deps = self._dependents.get(str(ref))
            if deps is not None:
                deps.discard((change.tkey, okey))
                if not deps:
                    del self._dependents[str(ref)]
        for ref in new_refs - old_refs:
            self._dependents.setdefault(str(ref), set()).add((change.tkey, okey))
        if change.type == "DELETED":
            self._deleted_owners.add(uid)
            # A dependent gone may unblock a foreground owner or a terminating namespace.
            for ref in old_refs:
                located = self.api.store.by_uid(str(ref))
                if located is not None:
                    self._owners_deleting.add(located)
            if meta.get("namespace"):
                self._namespaces.add(meta["namespace"])
            if change.tkey[0] and (crd := self._crd_of(change.tkey)):
                self._crds.add(crd)
        else:
            if new_refs:
                self._check.add((change.tkey, okey))
            fins = meta.get("finalizers") or []
            if meta.get("deletionTimestamp"):
                if "orphan" in fins or "foregroundDeletion" in fins:
                    self._owners_deleting.add((change.tkey, okey))
                if change.tkey == NAMESPACES:
                    self._namespaces.add(meta["name"])
                if change.tkey == CRD_KEY:
                    self._crds.add(meta["name"])
        self._wake.set()

    def _crd_of(self, tkey: TypeKey) -> str | None:
        rt = self.api.registry.by_key(*tkey)
        return rt.crd_name if rt is not None else None

    # -- the loop --------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                retry = await self._drain()
            except Exception:
                log.exception("embedded control plane pass failed")
                retry = True
            if retry:
                asyncio.get_running_loop().call_later(RETRY_SECONDS, self._wake.set)

    async def _drain(self) -> bool:
        retry = False
        deleted, self._deleted_owners = self._deleted_owners, set()
        for uid in deleted:
            for dep in sorted(self._dependents.get(uid, set())):
                retry |= not await self._collect(*dep)
        check, self._check = self._check, set()
        for dep in sorted(check):
            retry |= not await self._collect(*dep)
        owners, self._owners_deleting = self._owners_deleting, set()
        for owner in sorted(owners):
            retry |= not await self._finish_owner(*owner)
        namespaces, self._namespaces = self._namespaces, set()
        for ns in sorted(namespaces):
            retry |= not await self._finish_namespace(ns)
        crds, self._crds = self._crds, set()
        for crd in sorted(crds):
            retry |= not await self._finish_crd(crd)
        return retry

    async def _write(self, coro: Any) -> bool:
        try:
            await coro
        except APIError as e:
            if e.code in (404, 409):
                return e.code == 404
            log.warning("embedded control plane write refused: %s", e.message)
            return False
        return True

    # -- garbage collector -----------------------------------------------------------------

    async def _collect(self, tkey: TypeKey, okey: ObjKey) -> bool:
        """Delete a dependent whose owners are all gone; drop references to gone owners."""
        store = self.api.store
        obj = store.peek(tkey, okey)
        rt = self.api.registry.by_key(*tkey)
        if obj is None or rt is None:
            return True
        refs = obj["metadata"].get("ownerReferences") or []
        alive = [r for r in refs if store.by_uid(str(r.get("uid"))) is not None]
        if len(alive) == len(refs):
            return True
        opts = WriteOptions(user_agent=GC_AGENT)
        if not alive:
            if obj["metadata"].get("deletionTimestamp"):
                return True
            return await self._write(
                self.api.delete(
                    rt,
                    rt.storage_version,
                    okey[0],
                    okey[1],
                    {"propagationPolicy": "Background"},
                    opts,
                )
            )
        alive_uids = {r.get("uid") for r in alive}

        def drop_dangling(current: JSON) -> JSON:
            current["metadata"]["ownerReferences"] = [
                r
                for r in current["metadata"].get("ownerReferences") or []
                if r.get("uid") in alive_uids
            ]
            return current

        return await self._write(self.api.mutate(rt, okey[0], okey[1], drop_dangling, opts))

    async def _finish_owner(self, tkey: TypeKey, okey: ObjKey) -> bool:
        """Orphan: strip our reference from dependents. Foreground: delete dependents first.
        Then remove the finalizer, which lets the owner go."""
        store = self.api.store
        owner = store.peek(tkey, okey)
        rt = self.api.registry.by_key(*tkey)
        if owner is None or rt is None or not owner["metadata"].get("deletionTimestamp"):
            return True
        uid = owner["metadata"]["uid"]
        fins = owner["metadata"].get("finalizers") or []
        deps = sorted(self._dependents.get(uid, set()))
        opts = WriteOptions(user_agent=GC_AGENT)
        ok = True
        if "orphan" in fins:
            for dtkey, dokey in deps:
                drt = self.api.registry.by_key(*dtkey)
                if drt is None:
                    continue

                def strip(current: JSON) -> JSON:
                    current["metadata"]["ownerReferences"] = [
                        r
                        for r in current["metadata"].get("ownerReferences") or []
                        if r.get("uid") != uid
                    ]
                    return current

                ok &= await self._write(self.api.mutate(drt, dokey[0], dokey[1], strip, opts))
            done = "orphan"
        elif "foregroundDeletion" in fins:
            for dtkey, dokey in deps:
                drt = self.api.registry.by_key(*dtkey)
                dep = store.peek(dtkey, dokey)
                if drt is None or dep is None or dep["metadata"].get("deletionTimestamp"):
                    continue
                ok &= await self._write(
                    self.api.delete(
                        drt,
                        drt.storage_version,
                        dokey[0],
                        dokey[1],
                        {"propagationPolicy": "Foreground"},
                        opts,
                    )
                )
            if self._dependents.get(uid):
                return ok  # wait for the dependents' DELETED events
            done = "foregroundDeletion"
        else:
            return True
        if not ok:
            return False

        def remove(current: JSON) -> JSON:
            current["metadata"]["finalizers"] = [
                f for f in current["metadata"].get("finalizers") or [] if f != done
            ]
            return current

        return await self._write(self.api.mutate(rt, okey[0], okey[1], remove, opts))

    # -- namespace controller --------------------------------------------------------------

    async def _finish_namespace(self, name: str) -> bool:
        ns = self.api.store.peek(NAMESPACES, ("", name))
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return True
        opts = WriteOptions(user_agent=NS_AGENT)
        remaining = 0
        ok = True
        for rt in self.api.registry.all():
            if not rt.namespaced:
                continue
            for obj in list(self.api.store.items(rt.key, name)):
                remaining += 1
                if obj["metadata"].get("deletionTimestamp"):
                    continue
                ok &= await self._write(
                    self.api.delete(
                        rt,
                        rt.storage_version,
                        name,
                        obj["metadata"]["name"],
                        {"propagationPolicy": "Background"},
                        opts,
                    )
                )
        if remaining:
            return ok
        if (ns.get("spec") or {}).get("finalizers"):
            self.api.finalize_namespace(name, [])
        return True

    # -- CRD cleanup -----------------------------------------------------------------------

    async def _finish_crd(self, name: str) -> bool:
        crd = self.api.store.peek(CRD_KEY, ("", name))
        if crd is None or not crd["metadata"].get("deletionTimestamp"):
            return True
        rt = self.api.registry.by_key(*crd_resource_type(crd).key)
        opts = WriteOptions(user_agent=CRD_AGENT)
        ok = True
        if rt is not None:
            objs = list(self.api.store.items(rt.key))
            for obj in objs:
                if obj["metadata"].get("deletionTimestamp"):
                    continue
                meta = obj["metadata"]
                ok &= await self._write(
                    self.api.delete(
                        rt,
                        rt.storage_version,
                        meta.get("namespace", ""),
                        meta["name"],
                        {"propagationPolicy": "Background"},
                        opts,
                    )
                )
            if objs:
                return ok
        crd_rt = self.api.registry.by_key(*CRD_KEY)
        assert crd_rt is not None

        def release(current: JSON) -> JSON:
            current["metadata"]["finalizers"] = [
                f
                for f in current["metadata"].get("finalizers") or []
                if f != "customresourcecleanup.apiextensions.k8s.io"
            ]
            return current

        return await self._write(self.api.mutate(crd_rt, "", name, release, opts))

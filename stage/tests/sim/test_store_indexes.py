"""The embedded store's indexes (by label and by a pod's node), which lists with an equality
label selector or a ``spec.nodeName`` field selector scan: after any sequence of writes and
deletes, an index names exactly the objects a full scan would match."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ome_sim.apiserver.store import Store

PODS = ("", "pods")
NAMES = st.sampled_from(["a", "b", "c", "d"])
LABELS = st.dictionaries(st.sampled_from(["app", "tier"]), st.sampled_from(["x", "y", ""]))
NODES = st.sampled_from(["", "n1", "n2"])
WRITE = st.tuples(st.just("put"), NAMES, LABELS, NODES)
DELETE = st.tuples(st.just("remove"), NAMES, st.just({}), st.just(""))


def pod(name: str, labels: dict[str, str], node: str) -> dict[str, Any]:
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels}, "spec": spec}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(WRITE, DELETE), max_size=20), LABELS, NODES)
def test_an_index_names_what_a_scan_matches(
    ops: list[tuple[str, str, dict[str, str], str]], wanted: dict[str, str], node: str
) -> None:
    store = Store()
    for op, name, labels, on in ops:
        if op == "put":
            store.put(PODS, ("ns", name), pod(name, labels, on))
        else:
            store.remove(PODS, ("ns", name))
    keys = store.candidates(PODS, sorted(wanted.items()), node or None)
    scanned = {
        ("ns", o["metadata"]["name"])
        for o in store.items(PODS)
        if all((o["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
        and (not node or (o.get("spec") or {}).get("nodeName") == node)
    }
    if not wanted and not node:
        assert keys is None
    else:
        assert keys == scanned
        assert [o["metadata"]["name"] for o in store.items_among(PODS, keys)] == sorted(
            n for _, n in scanned
        )

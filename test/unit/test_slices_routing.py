"""Which replica a Slice's events wake (the slice controllers' key mapping): by the owner
annotation OME writes, and by name, since a name carries its replica's hash (D2) and a
foreign Slice at one of our names has no annotation of ours."""

from __future__ import annotations

from ome.controllers.slices.reconciler import annotated_owner_keys, owners_by_name
from ome.tpuslice.naming import Slot, owner_hash, slice_name
from test.unit.slicekit import JSON, NAME, NAMESPACE, UID


def replica(name: str = NAME, uid: str = UID, namespace: str = NAMESPACE) -> JSON:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid}}


def a_slice(name: str, annotations: dict[str, str] | None = None) -> JSON:
    return {"metadata": {"name": name, "annotations": annotations or {}}}


OURS = slice_name(NAME, Slot(2, 1), owner_hash(NAMESPACE, NAME, UID))


def test_a_foreign_slice_at_one_of_our_names_wakes_the_replica_that_gives_the_name() -> None:
    foreign = a_slice(OURS, {"team": "other"})
    assert annotated_owner_keys(foreign) == []
    assert owners_by_name(foreign, [replica()]) == [f"{NAMESPACE}/{NAME}"]


def test_a_name_another_replica_would_give_wakes_only_that_one() -> None:
    other = replica("other-engine", "uid-2")
    assert owners_by_name(a_slice(OURS), [replica(), other]) == [f"{NAMESPACE}/{NAME}"]
    # A replica of the same name but another UID (deleted and re-created) has another hash.
    assert owners_by_name(a_slice(OURS), [replica(uid="uid-3")]) == []


def test_a_name_no_replica_gives_wakes_none() -> None:
    for name in ("team-slice", f"{NAME}-2-1-0000000g", f"{NAME}-x-1-{OURS[-8:]}", ""):
        assert owners_by_name(a_slice(name), [replica()]) == []
    assert owners_by_name({"metadata": {}}, [replica()]) == []


def test_the_owner_annotation_names_its_replica_key() -> None:
    assert annotated_owner_keys(a_slice(OURS, {"ome.io/slice-owner": "ns/name"})) == ["ns/name"]
    for bad in ("name", "a/b/c", ""):
        assert annotated_owner_keys(a_slice(OURS, {"ome.io/slice-owner": bad})) == []

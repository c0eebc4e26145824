"""G6, the pure part of orphan collection: which cached Slices are orphans, when each falls
due (two sightings at least the grace apart), whose annotation a single read may trust, and
the decision again on live values. Tables for the cases, properties against a model."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ome.controllers.slices import orphans, releases
from test.unit.slicekit import NAME, NAMESPACE, NOW, UID, n, pod, sl

GRACE = orphans.ORPHAN_GRACE
OTHER = "6a1f2b3c-0000-4000-8000-0000000000ff"


# -- candidates ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("found", "owner_cached", "candidate"),
    [
        (sl(), False, True),
        (sl(), True, False),
        (sl(terminating=True), False, False),
        (sl(owner=""), False, False),  # no owner-UID label: foreign, never ours (D4)
        (sl(owner_name=""), False, True),  # no annotation: still ours by its label
    ],
    ids=["owner gone", "owner cached", "terminating", "no label", "no annotation"],
)
def test_a_candidate_is_ours_not_going_and_without_a_cached_owner(
    found: object, owner_cached: bool, candidate: bool
) -> None:
    assert orphans.is_candidate(found, owner_cached) is candidate  # type: ignore[arg-type]


# -- two sightings -------------------------------------------------------------------------------


def test_a_first_sighting_is_remembered_and_due_only_after_the_grace() -> None:
    found = sl()
    first = orphans.orphan_pass([found], {}, NOW, GRACE)
    assert first.due == ()
    assert first.sightings == {found.uid: NOW}
    assert first.look_again == GRACE.total_seconds()

    early = orphans.orphan_pass([found], first.sightings, NOW + GRACE / 2, GRACE)
    assert early.due == () and early.sightings == {found.uid: NOW}
    assert early.look_again == pytest.approx((GRACE / 2).total_seconds())

    late = orphans.orphan_pass([found], first.sightings, NOW + GRACE, GRACE)
    assert late.due == (found,) and late.look_again is None


def test_a_slice_no_longer_a_candidate_loses_its_sighting() -> None:
    found = sl()
    again = orphans.orphan_pass([], {found.uid: NOW}, NOW + GRACE, GRACE)
    assert again == orphans.OrphanPlan((), {}, None)


def test_a_slice_made_anew_at_the_name_is_sighted_anew() -> None:
    """A sighting belongs to a Slice's UID: another Slice at the same name starts over."""
    old, new = sl(uid="uid-old"), sl(uid="uid-new")
    plan = orphans.orphan_pass([new], {old.uid: NOW - GRACE * 3}, NOW, GRACE)
    assert plan.due == () and plan.sightings == {new.uid: NOW}


def test_a_sighting_in_the_future_counts_from_now() -> None:
    """After the clock stepped back, a remembered sighting later than now is not trusted."""
    found = sl()
    plan = orphans.orphan_pass([found], {found.uid: NOW + timedelta(hours=1)}, NOW, GRACE)
    assert plan.due == () and plan.sightings == {found.uid: NOW}


@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.none() | st.integers(-40, 40)),
        max_size=6,
        unique_by=lambda t: t[0],
    ),
    st.integers(0, 30),
)
def test_due_exactly_when_first_seen_at_least_the_grace_ago(
    slots: list[tuple[int, int | None]], grace_s: int
) -> None:
    """Against a model: a Slice is due iff its (trusted) first sighting lies at least the
    grace before now; every candidate keeps a sighting, none other does; the next look is
    the earliest of those not due yet."""
    grace = timedelta(seconds=grace_s)
    found = [sl(n(i)) for i, _ in slots]
    seen = {
        f.uid: NOW + timedelta(seconds=offset)
        for f, (_, offset) in zip(found, slots, strict=True)
        if offset is not None
    }
    seen["uid-of-a-slice-gone"] = NOW - timedelta(days=1)
    plan = orphans.orphan_pass(found, seen, NOW, grace)
    firsts = {}
    for f in found:
        at = seen.get(f.uid)
        firsts[f.uid] = NOW if at is None or at > NOW else at
    assert dict(plan.sightings) == firsts
    assert {s.uid for s in plan.due} == {u for u, t in firsts.items() if NOW - t >= grace}
    waits = [(t + grace - NOW).total_seconds() for t in firsts.values() if NOW - t < grace]
    assert plan.look_again == (min(waits) if waits else None)
    assert [s.name for s in plan.due] == sorted(s.name for s in plan.due)


# -- whom to ask ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("found", "trusted"),
    [
        (sl(), True),  # D2: the name ends with the hash of the annotation and the label
        (sl(owner_name=""), False),
        (sl(owner_name=NAMESPACE), False),
        (sl(owner_name=f"{NAMESPACE}/another-engine"), False),
        (sl(owner=OTHER), False),  # the label was changed: the hash no longer matches
        (sl(f"{NAME}-0-0-deadbeef"), False),
    ],
    ids=["as written", "none", "no name", "another name", "another uid", "another hash"],
)
def test_the_annotation_is_trusted_only_when_the_name_vouches_for_it(
    found: object, trusted: bool
) -> None:
    assert orphans.names_its_owner(found) is trusted  # type: ignore[arg-type]


def test_the_owner_exists_only_with_its_very_uid() -> None:
    assert orphans.owner_exists(sl(), [OTHER, UID])
    assert not orphans.owner_exists(sl(), [OTHER])
    assert not orphans.owner_exists(sl(owner=""), [""])


# -- the decision again, on live values ----------------------------------------------------------


CACHED = sl()
HOLDER = pod("indexer-0", namespace="tpu-batch")
OWN = pod("qwen3-tpu-engine-0-default-0", slice_name=CACHED.name)


@pytest.mark.parametrize(
    ("live", "owner_found", "host_pods", "expected"),
    [
        (None, False, [], None),
        (replace(CACHED, uid="uid-another"), False, [], None),
        (replace(CACHED, terminating=True), False, [], None),
        (replace(CACHED, owner_uid=OTHER), False, [], None),
        (replace(CACHED, owner_uid=""), False, [], None),
        (CACHED, True, [], None),
        (CACHED, False, [OWN], releases.InUse(CACHED, (OWN.ref,))),
        (CACHED, False, [replace(OWN, terminating=True)], releases.InUse(CACHED, (OWN.ref,))),
        (
            CACHED,
            False,
            [replace(OWN, terminal=True)],
            releases.Delete(CACHED, CACHED.resource_version),
        ),
        (CACHED, False, [HOLDER], releases.Defer(CACHED, (HOLDER.ref,))),
        (CACHED, False, [replace(HOLDER, chips=0)], releases.Delete(CACHED, "41")),
        (CACHED, False, [], releases.Delete(CACHED, "41")),
    ],
    ids=[
        "gone",
        "replaced",
        "terminating",
        "owner label changed",
        "owner label removed",
        "owner exists",
        "its pod runs on it",
        "its pod in its grace period",
        "its pod finished",
        "a holder",
        "a chipless pod",
        "free",
    ],
)
def test_confirm_on_live_values(
    live: object, owner_found: bool, host_pods: list[object], expected: object
) -> None:
    assert orphans.confirm(CACHED, live, owner_found, host_pods) == expected  # type: ignore[arg-type]


@given(
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.lists(st.tuples(st.booleans(), st.booleans(), st.integers(0, 8)), max_size=4),
)
def test_confirm_never_deletes_under_a_pod_or_an_owner(
    gone: bool, owner_found: bool, terminating: bool, pods: list[tuple[bool, bool, int]]
) -> None:
    """Whatever the live values, a delete is planned only for the very Slice the cache showed,
    not going, whose owner is gone, with no unfinished pod confined to it and no holder; and
    it carries the resourceVersion read."""
    live = None if gone else replace(CACHED, terminating=terminating)
    host_pods = [
        pod(f"p{i}", slice_name=CACHED.name if confined else "", terminal=done, chips=chips)
        for i, (confined, done, chips) in enumerate(pods)
    ]
    step = orphans.confirm(CACHED, live, owner_found, host_pods)
    busy = any(p.slice_name == CACHED.name and not p.terminal for p in host_pods)
    held = releases.holders(CACHED.name, host_pods)
    if live is None or terminating or owner_found:
        assert step is None
    elif busy:
        assert isinstance(step, releases.InUse)
    elif held:
        assert step == releases.Defer(live, tuple(held))
    else:
        assert step == releases.Delete(live, live.resource_version)

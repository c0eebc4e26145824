"""Loss detection (H1 to H4): which pods are candidates (``losses.candidates``), what
a lost Slice takes, checked in H3's order (``losses.judge``), which Slices the caches suspect
(``losses.suspects``), and the SliceLost text users read."""

from __future__ import annotations

from datetime import timedelta
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ome.controllers.slices import messages
from ome.controllers.slices.losses import Loss, candidates, judge, suspects
from ome.controllers.slices.model import Pod, Replica
from ome.tpuslice.hosts import Host
from ome.tpuslice.slices import SliceInfo
from test.unit import slicekit
from test.unit.slicekit import NAME, NAMESPACE, NOW, UID, N, n

#: D2's hash of the same replica name under another UID.
OTHER_UID_HASH = "baae88d9"
#: D2's hash of qwen3-tpu/qwen3-tpu-other/6a1f2b3c-0000-4000-8000-000000000002.
OTHER_REPLICA_HASH = "eb58b976"
STARTED = NOW - timedelta(hours=1)


def replica(multi: bool = True) -> Replica:
    """The replica as loss reads it: its identity, its runners' names, one Ready row."""
    runners = (
        [{"name": "leader", "template": {}}, {"name": "worker", "size": 1, "template": {}}]
        if multi
        else [{"name": "default", "template": {}}]
    )
    return Replica.from_json(
        {
            "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": UID},
            "spec": {"component": "engine", "runners": runners},
            "status": {"instanceStatuses": [{"index": 0, "phase": "Ready"}]},
        }
    )


#: This file's pods are pod 0 of Instance 0 of our replica, started an hour ago.
pod = partial(slicekit.pod, created=STARTED, replica=NAME, instance=0, ordinal=0)
#: This file's Slices: a 2x2x2 Slice at slot (0, 0), created two hours ago, without version
#: or owner annotation.
sl = partial(slicekit.sl, created=NOW - timedelta(hours=2), topology="2x2x2", rv="", owner_name="")


LEADER = pod(f"{NAME}-0-leader-0", N, node="node-a")
WORKER = pod(f"{NAME}-0-worker-0", N, node="node-b")
UNBOUND = pod(f"{NAME}-0-worker-1", N, node="")
ON_SLICE = {"node-a": Host("node-a", N), "node-b": Host("node-b", N)}


# -- H1: candidates ---------------------------------------------------------------------------


def test_candidates_are_live_unfinished_pods_naming_a_slice_this_replica_gives() -> None:
    pods = [
        pod("b", n(0)),
        pod("a", n(0)),
        pod("c", n(3)),
        pod("s", n(2, 1)),
        pod("other-replica", f"qwen3-tpu-other-0-0-{OTHER_REPLICA_HASH}"),
        pod("other-hash", f"{NAME}-0-0-{OTHER_UID_HASH}"),
        pod("foreign", "gke-tpu-slice-7"),
        pod("unconfined", ""),
        pod("deleting", n(0), terminating=True),
        pod("finished", n(3), terminal=True),
    ]
    got = candidates(replica(), pods)
    assert {k: [p.name for p in v] for k, v in got.items()} == {
        n(0): ["a", "b"],
        n(2, 1): ["s"],
        n(3): ["c"],
    }
    assert list(got) == sorted(got)


def test_no_candidates_without_pods_that_name_our_slices() -> None:
    assert candidates(replica(), []) == {}
    assert candidates(replica(), [pod("x", f"{NAME}-0-0-{OTHER_UID_HASH}")]) == {}


# -- H3: judge ------------------------------------------------------------------------------------


def test_a_deleted_or_terminating_slice_is_lost_before_ownership_is_checked() -> None:
    pods = [LEADER, WORKER, UNBOUND]
    for found in (sl(owner="someone-else", terminating=True), sl(terminating=True)):
        assert judge(N, found, pods, ON_SLICE, UID) == Loss(N, "was deleted", tuple(pods), found)
    assert judge(N, None, pods, ON_SLICE, UID) == Loss(N, "was deleted", tuple(pods), None)
    # A foreign Slice that is not being deleted, and is older than the pods, is left alone,
    # whatever else is true of it.
    foreign = sl(owner="someone-else", partitions=(), created=NOW - timedelta(days=1))
    assert judge(N, foreign, pods, {}, UID) is None


def test_a_slice_re_created_from_outside_is_lost_whoever_owns_it_now() -> None:
    """H3: "was deleted" covers a Slice "re-created from outside, which makes it
    younger than its pods", ours or not (a foreign one at our name is exactly that)."""
    pods = [LEADER, WORKER, UNBOUND]
    for owner in (UID, "someone-else"):
        young = sl(owner=owner, created=NOW + timedelta(days=1))
        assert judge(N, young, pods, ON_SLICE, UID) == Loss(N, "was deleted", tuple(pods), young)


@pytest.mark.parametrize(
    ("found", "pods", "nodes", "loss"),
    [
        pytest.param(
            sl(created=NOW - timedelta(minutes=30)),
            [
                pod("old", N, created=NOW - timedelta(hours=1)),
                pod("new", N, created=NOW - timedelta(minutes=10)),
                pod("unknown", N, created=None),
            ],
            ON_SLICE,
            ("was deleted", ["old"]),
            id="re-created younger than some pods: only those",
        ),
        pytest.param(
            sl(created=STARTED),
            [LEADER],
            ON_SLICE,
            None,
            id="created with the pods is not younger",
        ),
        pytest.param(
            sl(partitions=()),
            [UNBOUND],
            {},
            None,
            id="no bound pod: nothing, even without partitions",
        ),
        pytest.param(
            sl(partitions=()),
            [LEADER, UNBOUND, WORKER],
            ON_SLICE,
            ("lost its partitions", [LEADER.name, WORKER.name]),
            id="lost its partitions: the bound pods",
        ),
        pytest.param(
            sl(),
            [LEADER, UNBOUND, WORKER],
            {"node-a": Host("node-a", N), "node-b": Host("node-b", "another-slice")},
            ("moved off node node-b", [LEADER.name, WORKER.name]),
            id="a node labelled for another slice: every bound pod",
        ),
        pytest.param(
            sl(),
            [WORKER, LEADER],
            {"node-a": Host("node-a", ""), "node-b": Host("node-b", N)},
            ("moved off node node-a", [WORKER.name, LEADER.name]),
            id="a node without the slice label",
        ),
        pytest.param(
            sl(),
            [LEADER, WORKER, UNBOUND],
            {"node-b": None},
            ("moved off nodes node-a, node-b", [LEADER.name, WORKER.name]),
            id="nodes gone",
        ),
        pytest.param(
            sl(),
            [LEADER, pod("second", N, node="node-a")],
            {"node-a": Host("node-a", "")},
            ("moved off node node-a", [LEADER.name, "second"]),
            id="a node named once",
        ),
        pytest.param(sl(), [LEADER, WORKER, UNBOUND], ON_SLICE, None, id="all well"),
        pytest.param(sl(), [], ON_SLICE, None, id="no pods"),
    ],
)
def test_a_lost_slice_takes_the_pods_h3_says_in_order(
    found: SliceInfo,
    pods: list[Pod],
    nodes: dict[str, Host | None],
    loss: tuple[str, list[str]] | None,
) -> None:
    got = judge(N, found, pods, nodes, UID)
    if loss is None:
        assert got is None
    else:
        assert got is not None
        assert (got.name, got.why, [p.name for p in got.pods], got.found) == (
            N,
            loss[0],
            loss[1],
            found,
        )


def test_an_absent_slice_takes_nothing_without_pods() -> None:
    assert judge(N, None, [], {}, UID) is None


# -- H2: suspects --------------------------------------------------------------------------------


def test_the_caches_suspect_exactly_the_slices_judge_calls_lost() -> None:
    pods = [
        pod("gone-0", n(0)),
        pod("ok-1", n(1), node="node-1"),
        pod("moved-2", n(2), node="node-2"),
        pod("foreign-3", n(3)),
        pod("unbound-4", n(4), node=""),
    ]
    slices = {
        n(1): sl(n(1)),
        n(2): sl(n(2)),
        n(3): sl(n(3), owner="someone-else"),
        n(4): sl(n(4), partitions=()),
    }
    nodes: dict[str, Host | None] = {"node-1": Host("node-1", n(1)), "node-2": Host("node-2", n(1))}
    assert suspects(replica(), pods, slices, nodes) == [n(0), n(2)]


# -- H4: the SliceLost text ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("why", "pods", "text"),
    [
        pytest.param(
            "was deleted",
            ["qwen3-tpu-engine-0-default-0"],
            "TPU slice qwen3-tpu-engine-0-0-8f3a21c7 was deleted while pods "
            "qwen3-tpu-engine-0-default-0 ran on it; they are deleted so that their Instance "
            "is rebuilt",
            id="the walkthrough's event",
        ),
        pytest.param(
            "moved off nodes a, b",
            ["p0", "p1"],
            "TPU slice qwen3-tpu-engine-0-0-8f3a21c7 moved off nodes a, b while pods p0, p1 ran "
            "on it; they are deleted so that their Instance is rebuilt",
            id="pods joined",
        ),
    ],
)
def test_the_slice_lost_warning_names_the_slice_why_and_the_pods(
    why: str, pods: list[str], text: str
) -> None:
    assert messages.lost("qwen3-tpu-engine-0-0-8f3a21c7", why, pods) == text


# -- properties ----------------------------------------------------------------------------------

NODES = ["node-a", "node-b", ""]


@st.composite
def pod_lists(draw: st.DrawFn) -> list[Pod]:
    names = draw(st.lists(st.sampled_from(["p0", "p1", "p2", "p3"]), unique=True, max_size=4))
    return [
        pod(
            name,
            N,
            node=draw(st.sampled_from(NODES)),
            created=draw(
                st.one_of(st.none(), st.integers(0, 7200).map(lambda s: NOW - timedelta(seconds=s)))
            ),
        )
        for name in names
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.none(),
        st.builds(
            lambda owner, partitions, terminating, ago: sl(
                owner=owner,
                partitions=partitions,
                terminating=terminating,
                created=None if ago is None else NOW - timedelta(seconds=ago),
            ),
            st.sampled_from([UID, "someone-else"]),
            st.sampled_from([(), ("p1",)]),
            st.booleans(),
            st.one_of(st.none(), st.integers(0, 7200)),
        ),
    ),
    pod_lists(),
    st.dictionaries(
        st.sampled_from(NODES[:2]),
        st.one_of(st.none(), st.sampled_from([N, "", "another"]).map(lambda s: Host("h", s))),
    ),
)
def test_judge_only_ever_returns_pods_it_was_given(
    found: SliceInfo | None, pods: list[Pod], nodes: dict[str, Host | None]
) -> None:
    got = judge(N, found, pods, nodes, UID)
    if got is None:
        return
    assert got.name == N and got.found == found
    assert got.pods and all(p in pods for p in got.pods)
    assert [p for p in pods if p in got.pods] == list(got.pods), "in the order given"
    if found is None or found.terminating:
        assert got.pods == tuple(pods) and got.why == "was deleted"
    elif not found.owned_by(UID):
        # Someone else's Slice takes pods only when it is younger than them (re-created).
        assert got.why == "was deleted"
        assert all(p.created is not None and found.created is not None for p in got.pods)
        assert all(p.created < found.created for p in got.pods)  # type: ignore[operator]
    else:
        assert got.why == "was deleted" or all(p.node for p in got.pods)

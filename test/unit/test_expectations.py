"""What a controller wrote that its cache does not show yet (``ome.runtime.expectations``):
creates and deletes in flight per owner key, met by what the cache shows, expiring after a ttl,
and the read-your-own-write of an object's last update. Every invariant of the docstrings, with
an injected clock; the test-and-set under many threads at once."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import pytest

from ome.runtime.expectations import DEFAULT_TTL, Expectations, LatestWrites
from test.unit import slicekit

#: The owner key of the walkthrough's replica, and of another.
KEY = f"{slicekit.NAMESPACE}/{slicekit.NAME}"
OTHER_KEY = f"{slicekit.NAMESPACE}/qwen3-tpu-decoder"
#: The name of the walkthrough's replica's first Slice, and a UID of that Slice.
NAME = slicekit.N
UID = "slice-uid-1"
NOTHING: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def exp(clock: Clock) -> Expectations:
    return Expectations(ttl=300.0, clock=clock)


def creating(*names: str) -> tuple[frozenset[str], frozenset[str]]:
    return frozenset(names), frozenset()


def deleting(*names: str) -> tuple[frozenset[str], frozenset[str]]:
    return frozenset(), frozenset(names)


def test_the_default_ttl_is_client_gos() -> None:
    assert DEFAULT_TTL == 300.0
    assert Expectations().ttl == DEFAULT_TTL


# -- creates ---------------------------------------------------------------------------------------


def test_a_reserved_create_blocks_a_second_reserve(exp: Expectations) -> None:
    assert exp.reserve_create(KEY, NAME)
    assert not exp.reserve_create(KEY, NAME)
    assert exp.pending(KEY) == creating(NAME)


def test_reserves_of_other_names_or_keys_are_apart(exp: Expectations) -> None:
    assert exp.reserve_create(KEY, NAME)
    assert exp.reserve_create(KEY, "other-name")
    assert exp.reserve_create(OTHER_KEY, NAME)
    assert exp.pending(KEY) == creating(NAME, "other-name")
    assert exp.pending(OTHER_KEY) == creating(NAME)


@pytest.mark.parametrize(
    "cached",
    [
        pytest.param({NAME: (UID, False)}, id="our object"),
        pytest.param({NAME: ("someone-else", False)}, id="another object"),
        pytest.param({NAME: (UID, True)}, id="terminating"),
        pytest.param({}, id="nothing"),
    ],
)
def test_an_in_flight_create_is_not_met_by_the_cache(
    exp: Expectations, cached: dict[str, tuple[str, bool]]
) -> None:
    # The cache may show an object at the name that is not ours, or ours may be seen before the
    # create returns: neither ends the create, which is still out.
    assert exp.reserve_create(KEY, NAME)
    assert exp.observe(KEY, cached) == creating(NAME)
    assert not exp.reserve_create(KEY, NAME)


def test_a_created_object_is_expected_until_the_cache_shows_it(exp: Expectations) -> None:
    assert exp.reserve_create(KEY, NAME)
    exp.created(KEY, NAME, UID)
    assert not exp.reserve_create(KEY, NAME)
    assert exp.observe(KEY, {}) == creating(NAME)
    assert exp.observe(KEY, {"other-name": (UID, False)}) == creating(NAME)
    assert not exp.reserve_create(KEY, NAME)
    assert exp.observe(KEY, {NAME: (UID, False)}) == NOTHING
    assert exp.pending(KEY) == NOTHING
    assert exp.reserve_create(KEY, NAME)


def test_a_created_object_is_met_by_any_object_at_its_name(exp: Expectations) -> None:
    assert exp.reserve_create(KEY, NAME)
    exp.created(KEY, NAME, UID)
    assert exp.observe(KEY, {NAME: ("another-uid", True)}) == NOTHING


def test_a_failed_create_is_not_waited_for(exp: Expectations) -> None:
    assert exp.reserve_create(KEY, NAME)
    exp.create_failed(KEY, NAME)
    assert exp.pending(KEY) == NOTHING
    assert exp.observe(KEY, {}) == NOTHING
    assert exp.reserve_create(KEY, NAME)


def test_a_failed_create_of_nothing_reserved_changes_nothing(exp: Expectations) -> None:
    exp.create_failed(KEY, NAME)
    assert exp.reserve_create(KEY, "other-name")
    exp.create_failed(KEY, NAME)
    assert exp.pending(KEY) == creating("other-name")


def test_observing_one_key_meets_only_its_own_expectations(exp: Expectations) -> None:
    for key in (KEY, OTHER_KEY):
        assert exp.reserve_create(key, NAME)
        exp.created(key, NAME, UID)
    assert exp.observe(KEY, {NAME: (UID, False)}) == NOTHING
    assert exp.pending(OTHER_KEY) == creating(NAME)


def test_observe_reports_what_is_still_expected(exp: Expectations) -> None:
    for name in ("a", "b", "c"):
        assert exp.reserve_create(KEY, name)
    exp.created(KEY, "a", "uid-a")
    exp.created(KEY, "b", "uid-b")
    assert exp.reserve_delete(KEY, "d", "uid-d")
    assert exp.reserve_delete(KEY, "e", "uid-e")
    cached = {"a": ("uid-a", False), "c": ("uid-c", False), "d": ("uid-d", False)}
    assert exp.observe(KEY, cached) == (frozenset({"b", "c"}), frozenset({"d"}))
    assert exp.pending(KEY) == (frozenset({"b", "c"}), frozenset({"d"}))


# -- deletes ---------------------------------------------------------------------------------------


def test_a_reserved_delete_blocks_a_second_reserve_of_the_same_object(exp: Expectations) -> None:
    assert exp.reserve_delete(KEY, NAME, UID)
    assert not exp.reserve_delete(KEY, NAME, UID)
    assert exp.pending(KEY) == deleting(NAME)


def test_a_new_object_at_the_name_can_be_deleted_again(exp: Expectations) -> None:
    assert exp.reserve_delete(KEY, NAME, UID)
    assert exp.reserve_delete(KEY, NAME, "slice-uid-2")
    assert not exp.reserve_delete(KEY, NAME, "slice-uid-2")
    # the expectation is now of the second object
    assert exp.observe(KEY, {NAME: (UID, False)}) == NOTHING


@pytest.mark.parametrize(
    ("cached", "met"),
    [
        pytest.param({NAME: (UID, False)}, False, id="still there"),
        pytest.param({NAME: (UID, False), "other": ("x", False)}, False, id="among others"),
        pytest.param({}, True, id="gone"),
        pytest.param({"other": (UID, False)}, True, id="gone, others there"),
        pytest.param({NAME: ("slice-uid-2", False)}, True, id="another object at the name"),
        pytest.param({NAME: (UID, True)}, True, id="terminating"),
    ],
)
def test_a_delete_is_met_when_the_cache_shows_no_object_another_or_ours_terminating(
    exp: Expectations, cached: dict[str, tuple[str, bool]], met: bool
) -> None:
    assert exp.reserve_delete(KEY, NAME, UID)
    expected = NOTHING if met else deleting(NAME)
    assert exp.observe(KEY, cached) == expected
    assert exp.pending(KEY) == expected
    assert exp.reserve_delete(KEY, NAME, UID) is met


def test_a_failed_delete_is_not_waited_for(exp: Expectations) -> None:
    assert exp.reserve_delete(KEY, NAME, UID)
    exp.delete_failed(KEY, NAME)
    assert exp.pending(KEY) == NOTHING
    assert exp.reserve_delete(KEY, NAME, UID)


def test_creates_and_deletes_of_one_name_are_apart(exp: Expectations) -> None:
    assert exp.reserve_delete(KEY, NAME, UID)
    assert exp.reserve_create(KEY, NAME)
    assert exp.pending(KEY) == (frozenset({NAME}), frozenset({NAME}))
    exp.create_failed(KEY, NAME)
    assert exp.pending(KEY) == deleting(NAME)
    exp.delete_failed(KEY, NAME)
    assert exp.pending(KEY) == NOTHING


# -- ttl -------------------------------------------------------------------------------------------


def test_a_reserved_create_stops_blocking_after_the_ttl(exp: Expectations, clock: Clock) -> None:
    assert exp.reserve_create(KEY, NAME)
    clock.advance(300.0)
    assert not exp.reserve_create(KEY, NAME)  # at the ttl, still expected
    assert exp.observe(KEY, {}) == creating(NAME)
    clock.advance(0.001)
    assert exp.observe(KEY, {}) == NOTHING
    assert exp.reserve_create(KEY, NAME)


def test_a_created_object_is_expected_for_a_ttl_from_its_acceptance(
    exp: Expectations, clock: Clock
) -> None:
    assert exp.reserve_create(KEY, NAME)
    clock.advance(200.0)
    exp.created(KEY, NAME, UID)
    clock.advance(250.0)  # 450s after the reserve, 250s after the create was accepted
    assert exp.observe(KEY, {}) == creating(NAME)
    assert not exp.reserve_create(KEY, NAME)
    clock.advance(50.001)
    assert exp.reserve_create(KEY, NAME)


def test_a_reserved_delete_stops_blocking_after_the_ttl(exp: Expectations, clock: Clock) -> None:
    assert exp.reserve_delete(KEY, NAME, UID)
    clock.advance(300.0)
    assert exp.observe(KEY, {NAME: (UID, False)}) == deleting(NAME)
    assert not exp.reserve_delete(KEY, NAME, UID)
    clock.advance(0.001)
    assert exp.observe(KEY, {NAME: (UID, False)}) == NOTHING
    assert exp.reserve_delete(KEY, NAME, UID)


def test_expiry_drops_only_the_old_names_of_a_key(exp: Expectations, clock: Clock) -> None:
    assert exp.reserve_create(KEY, "old")
    assert exp.reserve_delete(KEY, "old-delete", UID)
    clock.advance(200.0)
    assert exp.reserve_create(KEY, "new")
    assert exp.reserve_delete(KEY, "new-delete", UID)
    clock.advance(100.001)
    cached = {"old-delete": (UID, False), "new-delete": (UID, False)}
    assert exp.observe(KEY, cached) == (frozenset({"new"}), frozenset({"new-delete"}))
    assert not exp.reserve_create(KEY, "new")
    assert exp.reserve_create(KEY, "old")


def test_pending_does_not_show_an_expired_expectation(exp: Expectations, clock: Clock) -> None:
    # "_creates[key][name] exists from reserve_create until ... the entry is older than ttl":
    # an expired create is no longer expected, whether or not anything observed the key since.
    assert exp.reserve_create(KEY, NAME)
    assert exp.reserve_delete(KEY, "gone", UID)
    clock.advance(300.001)
    assert exp.pending(KEY) == NOTHING


# -- forget, tidiness ------------------------------------------------------------------------------


def test_forget_drops_every_expectation_of_a_key(exp: Expectations) -> None:
    assert exp.reserve_create(KEY, NAME)
    exp.created(KEY, "accepted", UID)
    assert exp.reserve_delete(KEY, "old", UID)
    assert exp.reserve_create(OTHER_KEY, NAME)
    exp.forget(KEY)
    assert exp.pending(KEY) == NOTHING
    assert exp.observe(KEY, {}) == NOTHING
    assert exp.reserve_create(KEY, NAME)
    assert exp.reserve_delete(KEY, "old", UID)
    assert exp.pending(OTHER_KEY) == creating(NAME)
    exp.forget("never-seen")


def test_a_key_without_expectations_is_not_kept(exp: Expectations, clock: Clock) -> None:
    def keys() -> set[str]:
        return set(exp._creates) | set(exp._deletes)

    assert exp.observe(KEY, {}) == NOTHING
    assert exp.pending(KEY) == NOTHING
    assert keys() == set()

    assert exp.reserve_create(KEY, NAME)
    exp.create_failed(KEY, NAME)
    assert exp.pending(KEY) == NOTHING and keys() == set()

    assert exp.reserve_create(KEY, NAME)
    exp.created(KEY, NAME, UID)
    assert exp.observe(KEY, {NAME: (UID, False)}) == NOTHING
    assert exp.pending(KEY) == NOTHING and keys() == set()

    assert exp.reserve_delete(KEY, NAME, UID)
    exp.delete_failed(KEY, NAME)
    assert exp.pending(KEY) == NOTHING and keys() == set()

    assert exp.reserve_delete(KEY, NAME, UID)
    assert exp.observe(KEY, {}) == NOTHING
    assert exp.pending(KEY) == NOTHING and keys() == set()

    assert exp.reserve_create(KEY, NAME)
    assert exp.reserve_delete(KEY, NAME, UID)
    clock.advance(300.001)
    assert exp.observe(KEY, {NAME: (UID, False)}) == NOTHING
    assert exp.pending(KEY) == NOTHING and keys() == set()

    assert exp.reserve_create(KEY, NAME)
    exp.forget(KEY)
    assert keys() == set()


# -- many workers at once --------------------------------------------------------------------------

THREADS = 16
NAMES = [slicekit.n(i) for i in range(500)]


def race(claim: Callable[[str], bool], items: list[str] = NAMES) -> dict[str, int]:
    """Every thread claims every item, all starting together; how many claims each item won."""
    barrier = threading.Barrier(THREADS)
    wins: list[list[str]] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            # each thread walks the items from its own starting point, so they collide
            start = i * len(items) // THREADS
            for item in items[start:] + items[:start]:
                if claim(item):
                    wins[i].append(item)
        except BaseException as err:  # reported below, in the test's thread
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    counts = dict.fromkeys(items, 0)
    for won in wins:
        for item in won:
            counts[item] += 1
    return counts


def test_many_workers_reserving_the_same_creates_win_each_exactly_once() -> None:
    exp = Expectations()
    assert race(lambda name: exp.reserve_create(KEY, name)) == dict.fromkeys(NAMES, 1)
    assert exp.pending(KEY) == creating(*NAMES)


def test_many_workers_reserving_the_same_deletes_win_each_exactly_once() -> None:
    exp = Expectations()
    assert race(lambda name: exp.reserve_delete(KEY, name, UID)) == dict.fromkeys(NAMES, 1)
    assert exp.pending(KEY) == deleting(*NAMES)


def test_many_workers_reserving_across_keys_win_each_key_and_name_once() -> None:
    exp = Expectations()
    keys = [f"ns/replica-{k}" for k in range(4)]
    items = [f"{key} {name}" for name in NAMES[:125] for key in keys]

    def claim(item: str) -> bool:
        key, name = item.split(" ")
        return exp.reserve_create(key, name)

    assert race(claim, items) == dict.fromkeys(items, 1)
    for key in keys:
        assert exp.pending(key) == creating(*NAMES[:125])


# -- LatestWrites ----------------------------------------------------------------------------------


@pytest.fixture
def writes(clock: Clock) -> LatestWrites[dict[str, str]]:
    return LatestWrites(ttl=60.0, clock=clock)


STORED = {"metadata": "resourceVersion 8"}


def test_a_write_is_read_back_while_the_cache_shows_the_version_it_replaced(
    writes: LatestWrites[dict[str, str]],
) -> None:
    writes.wrote(KEY, "7", STORED)
    assert writes.get(KEY, "7") is STORED
    assert writes.get(KEY, "7") is STORED  # reading does not consume it
    assert writes.get(OTHER_KEY, "7") is None


def test_once_the_cache_moves_on_the_write_is_dropped(
    writes: LatestWrites[dict[str, str]],
) -> None:
    writes.wrote(KEY, "7", STORED)
    assert writes.get(KEY, "8") is None
    assert writes.get(KEY, "7") is None  # gone for good, not just hidden


def test_an_unknown_key_has_no_write(writes: LatestWrites[dict[str, str]]) -> None:
    assert writes.get(KEY, "7") is None
    assert writes.get(KEY, "") is None


def test_the_last_write_wins(writes: LatestWrites[dict[str, str]]) -> None:
    writes.wrote(KEY, "7", {"v": "8"})
    writes.wrote(KEY, "8", {"v": "9"})
    assert writes.get(KEY, "8") == {"v": "9"}


def test_a_cache_behind_by_several_of_our_writes_is_shown_the_last(
    writes: LatestWrites[dict[str, str]],
) -> None:
    """Three writes, 7 -> 8 -> 9 -> 10, while the cache still shows 8: the pass plans from
    what the last write stored, not from 8 (which the first write stored and the second
    replaced). The soak caught a single-pod update planned from 8: it took the old pod it had
    just deleted for a lost one and deleted the new pod on a healthy Slice."""
    writes.wrote(KEY, "7", {"v": "8"})
    writes.wrote(KEY, "8", {"v": "9"})
    writes.wrote(KEY, "9", {"v": "10"})
    for cached in ("8", "7", "9"):
        assert writes.get(KEY, cached) == {"v": "10"}, cached
    assert writes.get(KEY, "10") is None  # caught up: the cache's own from now on
    assert writes.get(KEY, "9") is None


def test_a_write_after_the_cache_moved_on_starts_a_new_chain(
    writes: LatestWrites[dict[str, str]],
) -> None:
    writes.wrote(KEY, "7", {"v": "8"})
    assert writes.get(KEY, "12") is None  # someone else's newer version
    writes.wrote(KEY, "12", {"v": "13"})
    assert writes.get(KEY, "7") is None  # not ours to answer any more: 7 is not what 13 replaced
    writes.wrote(KEY, "12", {"v": "13"})
    assert writes.get(KEY, "12") == {"v": "13"}


def test_an_expired_write_does_not_lend_its_versions_to_the_next(
    writes: LatestWrites[dict[str, str]], clock: Clock
) -> None:
    writes.wrote(KEY, "7", {"v": "8"})
    clock.advance(60.001)
    writes.wrote(KEY, "20", {"v": "21"})
    assert writes.get(KEY, "20") == {"v": "21"}
    assert writes.get(KEY, "7") is None


def test_a_write_expires_after_the_ttl(writes: LatestWrites[dict[str, str]], clock: Clock) -> None:
    writes.wrote(KEY, "7", STORED)
    clock.advance(60.0)
    assert writes.get(KEY, "7") is STORED  # at the ttl, still shown
    clock.advance(0.001)
    assert writes.get(KEY, "7") is None
    writes.wrote(KEY, "7", STORED)
    assert writes.get(KEY, "7") is STORED  # a new write is shown again


def test_a_rewrite_starts_a_new_ttl(writes: LatestWrites[dict[str, str]], clock: Clock) -> None:
    writes.wrote(KEY, "7", STORED)
    clock.advance(50.0)
    writes.wrote(KEY, "7", STORED)
    clock.advance(50.0)
    assert writes.get(KEY, "7") is STORED


def test_forget_drops_a_write(writes: LatestWrites[dict[str, str]]) -> None:
    writes.wrote(KEY, "7", STORED)
    writes.wrote(OTHER_KEY, "3", STORED)
    writes.forget(KEY)
    writes.forget("never-written")
    assert writes.get(KEY, "7") is None
    assert writes.get(OTHER_KEY, "3") is STORED


def test_the_default_write_ttl_is_a_minute() -> None:
    assert LatestWrites[str]().ttl == 60.0

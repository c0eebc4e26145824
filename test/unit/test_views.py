"""Views parsed once per object version (``ByVersion``): the same version is parsed once,
a new version again, and an object without a version every time."""

from __future__ import annotations

import threading
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ome.runtime.views import ByVersion


def obj(uid: str | None, rv: str | None, value: int = 0) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if uid is not None:
        meta["uid"] = uid
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"metadata": meta, "value": value}


class Counting:
    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, o: dict[str, Any]) -> tuple[int]:
        with self.lock:
            self.calls += 1
        return (o["value"],)


def test_a_version_is_parsed_once_and_a_new_version_again() -> None:
    parse = Counting()
    view = ByVersion(parse)
    first = view(obj("u", "1", 5))
    assert view(obj("u", "1", 5)) is first and parse.calls == 1
    assert view(obj("u", "2", 6)) == (6,) and parse.calls == 2
    assert view(obj("other", "1", 7)) == (7,) and parse.calls == 3


def test_a_view_of_the_same_version_with_other_arguments_is_parsed_anew() -> None:
    """A view that depends on something besides the object (a demand verdict on the
    accelerators with provision-only nodes): remembered per version and those arguments."""
    calls: list[tuple[int, frozenset[str]]] = []

    def parse(o: dict[str, Any], known: frozenset[str]) -> tuple[int, bool]:
        calls.append((o["value"], known))
        return (o["value"], "tpu" in known)

    view = ByVersion(parse)
    assert view(obj("u", "1", 5), frozenset()) == (5, False)
    assert view(obj("u", "1", 5), frozenset({"tpu"})) == (5, True)
    assert view(obj("u", "1", 5), frozenset()) == (5, False)
    assert view(obj("u", "1", 5), frozenset({"tpu"})) == (5, True)
    assert calls == [(5, frozenset()), (5, frozenset({"tpu"}))]
    assert view(obj("", "", 6), frozenset()) == (6, False) and len(calls) == 3


def test_an_object_without_uid_or_version_is_parsed_every_time() -> None:
    parse = Counting()
    view = ByVersion(parse)
    for o in (obj(None, "1", 1), obj("u", None, 2), obj("", "", 3), {"metadata": None, "value": 4}):
        view(o)
        view(o)
    assert parse.calls == 8


def test_it_keeps_at_most_its_size() -> None:
    view = ByVersion(Counting(), size=3)
    for i in range(10):
        view(obj("u", str(i), i))
    assert len(view) == 3


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 5)), max_size=40))
def test_a_view_is_what_parsing_gives(seq: list[tuple[str, int]]) -> None:
    """Whatever the order of versions seen: the view of a version is its own parse (the
    content of a version never changes, as the API server guarantees)."""
    view = ByVersion(Counting(), size=4)
    for uid, rv in seq:
        value = hash((uid, rv)) % 1000
        assert view(obj(uid, str(rv), value)) == (value,)


def test_workers_sharing_it_get_the_same_views() -> None:
    parse = Counting()
    view = ByVersion(parse)
    seen: list[tuple[int]] = []
    lock = threading.Lock()

    def work() -> None:
        for i in range(200):
            v = view(obj("u", str(i % 20), i % 20))
            with lock:
                seen.append(v)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 800 and all(v[0] in range(20) for v in seen)
    assert 20 <= parse.calls <= 80  # each version at most once per thread racing on it

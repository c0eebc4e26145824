"""The runtime's reflector and informer against the embedded API server: handlers in order,
resume after a dropped watch, re-list after 410 Gone, backoff after errors, prompt stop."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ome.runtime.informer import (
    Backoff,
    DeletedFinalStateUnknown,
    EventHandler,
    Informer,
    deleted_object,
)
from ome.runtime.rest import CONFIGMAPS, Rest
from ome_sim.apiserver.faults import Fault
from test.cluster import Cluster
from test.helpers import eventually
from test.manifests import configmap


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def handler(self) -> EventHandler:
        return EventHandler(
            on_add=lambda o: self._rec("add", o),
            on_update=lambda _old, new: self._rec("update", new),
            on_delete=self._deleted,
        )

    def _deleted(self, gone: dict | DeletedFinalStateUnknown) -> None:
        self._rec(
            "delete-unknown" if isinstance(gone, DeletedFinalStateUnknown) else "delete",
            deleted_object(gone),
        )

    def _rec(self, kind: str, obj: dict) -> None:
        with self.lock:
            self.events.append((kind, obj["metadata"]["name"]))

    def seen(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.events)


@pytest.fixture
def rest(cluster: Cluster) -> Rest:
    return Rest(cluster.api)


@pytest.fixture
def informer(rest: Rest) -> Iterator[tuple[Informer, Recorder]]:
    inf = Informer(rest, CONFIGMAPS, namespace="default", backoff=Backoff(initial=0.05, cap=0.2))
    rec = Recorder()
    inf.add_handler(rec.handler())
    inf.start()
    assert inf.wait_for_sync(10)
    yield inf, rec
    inf.stop()


def test_handlers_hear_adds_updates_and_deletes_in_order(
    informer: tuple[Informer, Recorder], rest: Rest
) -> None:
    inf, rec = informer
    rest.create(CONFIGMAPS, configmap("a"), "default")
    rest.patch(CONFIGMAPS, "a", {"data": {"k": "2"}}, "default")
    rest.delete(CONFIGMAPS, "a", "default")
    eventually(lambda: rec.seen() == [("add", "a"), ("update", "a"), ("delete", "a")])
    assert inf.get("default/a") is None


def test_readers_cannot_change_the_cache(informer: tuple[Informer, Recorder], rest: Rest) -> None:
    inf, _ = informer
    rest.create(CONFIGMAPS, configmap("a"), "default")
    got = eventually(lambda: inf.get("default/a"))
    got["data"]["k"] = "changed"
    inf.list()[0]["metadata"]["name"] = "changed"
    assert inf.get("default/a")["data"]["k"] == "v"
    assert inf.keys() == ["default/a"]


def test_peek_list_shows_the_cache_itself_for_scans_that_only_read(
    informer: tuple[Informer, Recorder], rest: Rest
) -> None:
    inf, _ = informer
    rest.create(CONFIGMAPS, configmap("a"), "default")
    rest.create(CONFIGMAPS, configmap("b"), "default")
    eventually(lambda: len(inf.keys()) == 2)
    peeked = inf.peek_list()
    assert sorted(o["metadata"]["name"] for o in peeked) == ["a", "b"]
    assert inf.peek_list()[0] is inf.peek_list()[0], "no copies: the cached objects themselves"


def test_a_dropped_watch_resumes_without_a_relist(
    informer: tuple[Informer, Recorder], rest: Rest, cluster: Cluster
) -> None:
    _, rec = informer
    lists = cluster.server.accounting.total("list", "configmaps")
    cluster.thread.call(lambda: cluster.server.drop_watches("configmaps"))
    rest.create(CONFIGMAPS, configmap("after-drop"), "default")
    eventually(lambda: ("add", "after-drop") in rec.seen())
    assert cluster.server.accounting.total("list", "configmaps") == lists


def test_a_410_relists_and_reports_what_vanished_meanwhile(
    informer: tuple[Informer, Recorder], rest: Rest, cluster: Cluster
) -> None:
    inf, rec = informer
    rest.create(CONFIGMAPS, configmap("stays"), "default")
    rest.create(CONFIGMAPS, configmap("goes"), "default")
    eventually(lambda: len(inf.keys()) == 2)
    lists = cluster.server.accounting.total("list", "configmaps")
    # The next watch answers 410 after a pause, and the object goes during that pause,
    # while nobody watches: only the re-list can tell the informer.
    cluster.server.faults.add(
        Fault(verb="watch", resource="configmaps", code=410, latency=0.5, times=1)
    )
    cluster.thread.call(lambda: cluster.server.drop_watches("configmaps"))
    rest.delete(CONFIGMAPS, "goes", "default")
    # Found by the re-list: a tombstone, since the object's last state is unknown.
    eventually(lambda: ("delete-unknown", "goes") in rec.seen())
    assert sorted(inf.keys()) == ["default/stays"]
    assert cluster.server.accounting.total("list", "configmaps") == lists + 1


def test_watches_that_keep_answering_410_back_off_before_each_relist(
    informer: tuple[Informer, Recorder],
    rest: Rest,
    cluster: Cluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every watch answers 410 (an ERROR event) until the informer has re-listed eight times:
    each re-list waits for the backoff (0.05 s doubling to 0.2 s here, jitter only adding),
    so the eight take over a second, where without it they would take milliseconds; and it
    logs no warning (an expired watch is routine). A change made meanwhile reaches the cache
    through a re-list."""
    _, rec = informer
    # The watch works (an event came through it), so that ending it is no short watch.
    rest.create(CONFIGMAPS, configmap("before"), "default")
    eventually(lambda: ("add", "before") in rec.seen(), timeout=5)
    acc = cluster.server.accounting
    lists = acc.total("list", "configmaps")
    caplog.set_level("INFO", logger="ome.runtime.informer")
    cluster.server.faults.add(Fault(verb="watch", resource="configmaps", code=410, times=None))
    start = time.monotonic()
    cluster.thread.call(lambda: cluster.server.drop_watches("configmaps"))
    rest.create(CONFIGMAPS, configmap("meanwhile"), "default")
    eventually(lambda: ("add", "meanwhile") in rec.seen(), timeout=5)
    eventually(lambda: acc.total("list", "configmaps") - lists >= 8, timeout=10)
    took = time.monotonic() - start
    cluster.server.faults.clear()
    # Their backoffs add up to 0.05 + 0.1 + 6 x 0.2 = 1.35 s at the least.
    assert took >= 1.0, f"eight lists in {took:.2f} s"
    assert [r for r in caplog.records if r.levelname != "DEBUG"] == []


def test_a_watch_that_keeps_failing_relists_so_the_cache_stays_fresh(
    informer: tuple[Informer, Recorder],
    rest: Rest,
    cluster: Cluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every watch is dropped (no answer) while lists still work: from the second failure in
    a row, each retry re-lists, so a change made during the outage reaches the cache within
    the backoff's cap plus a list; the failures are logged once per doubling, not each."""
    _, rec = informer
    caplog.set_level("INFO", logger="ome.runtime.informer")
    acc = cluster.server.accounting
    lists, watches = acc.total("list", "configmaps"), acc.total("watch", "configmaps")
    cluster.server.faults.add(Fault(verb="watch", resource="configmaps", drop=True, times=None))
    cluster.thread.call(lambda: cluster.server.drop_watches("configmaps"))
    try:
        for name in ("first", "second"):
            rest.create(CONFIGMAPS, configmap(name), "default")
            eventually(lambda: ("add", name) in rec.seen(), timeout=5)  # noqa: B023
        eventually(lambda: acc.total("watch", "configmaps") - watches >= 10, timeout=10)
        failed = acc.total("watch", "configmaps") - watches
        relisted = acc.total("list", "configmaps") - lists
    finally:
        cluster.server.faults.clear()
    # Every failed watch but the first was followed by a re-list (one may be in flight).
    assert relisted >= failed - 2, (failed, relisted)
    # The streak is logged as its retries back off: on its 1st, 2nd, 4th, 8th ... failure.
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert 3 <= len(warned) <= failed.bit_length() + 1, warned
    assert all("in a row" in w for w in warned)


def test_list_errors_back_off_and_then_sync(rest: Rest, cluster: Cluster) -> None:
    cluster.server.faults.add(Fault(verb="list", resource="configmaps", code=500, times=3))
    inf = Informer(rest, CONFIGMAPS, namespace="default", backoff=Backoff(initial=0.2, cap=1.0))
    start = time.monotonic()
    inf.start()
    try:
        assert inf.wait_for_sync(20)
        # 0.2 + 0.4 + 0.8 at the least (jitter only adds)
        assert time.monotonic() - start >= 1.4
        assert cluster.server.accounting.total("list", "configmaps") == 4
    finally:
        inf.stop()


def test_stop_is_prompt_while_the_watch_is_idle(rest: Rest, cluster: Cluster) -> None:
    inf = Informer(rest, CONFIGMAPS, namespace="default")
    inf.start()
    assert inf.wait_for_sync(10)
    # The watch is open (the server has its request) and silent.
    eventually(lambda: cluster.server.accounting.total("watch", "configmaps") >= 1, timeout=10)
    start = time.monotonic()
    inf.stop()
    assert time.monotonic() - start < 2


def test_backoff_grows_to_its_cap_and_resets_after_a_healthy_stretch() -> None:
    now = [0.0]
    b = Backoff(initial=1.0, cap=8.0, reset_after=60.0, clock=lambda: now[0])
    delays = []
    for _ in range(6):
        delays.append(b.next())
        now[0] += 1
    bases = [1, 2, 4, 8, 8, 8]
    # Jittered up to +100%, but never past the cap: a wait is never longer than 8 s.
    assert all(base <= d <= min(2 * base, 8) for d, base in zip(delays, bases, strict=True))
    assert delays[3:] == [8.0, 8.0, 8.0]
    now[0] += 120
    assert 1.0 <= b.next() <= 2.0


def test_indexers_by_label_node_name_and_any_function(rest: Rest, cluster: Cluster) -> None:
    from ome.runtime.informer import InformerFactory, index_by_label, index_by_node_name
    from ome.runtime.rest import PODS
    from test.manifests import pod

    factory = InformerFactory(rest)
    pods = factory.informer(PODS, namespace="default")
    assert factory.informer(PODS, namespace="default") is pods, (
        "one informer per resource and selector"
    )
    assert factory.informer(PODS, namespace="default", label_selector="a=b") is not pods
    pods.add_indexer("app", index_by_label("app"))
    pods.add_indexer("node", index_by_node_name)
    pods.add_indexer("first-letter", lambda o: [o["metadata"]["name"][0]])
    factory.start()
    try:
        assert factory.wait_for_sync(10)
        rest.create(PODS, pod("web-1", labels={"app": "web"}, nodeName="n1"), "default")
        rest.create(PODS, pod("web-2", labels={"app": "web"}), "default")
        rest.create(PODS, pod("db-1", labels={"app": "db"}, nodeName="n1"), "default")
        eventually(lambda: len(pods.keys()) == 3)
        assert [p["metadata"]["name"] for p in pods.by_index("app", "web")] == ["web-1", "web-2"]
        assert pods.index_keys("node", "n1") == ["default/db-1", "default/web-1"]
        assert pods.index_keys("first-letter", "d") == ["default/db-1"]
        rest.patch(PODS, "web-2", {"metadata": {"labels": {"app": "db"}}}, "default")
        eventually(lambda: pods.index_keys("app", "db") == ["default/db-1", "default/web-2"])
        assert pods.index_keys("app", "web") == ["default/web-1"]
        rest.delete(PODS, "db-1", "default", grace_period_seconds=0)  # no kubelet here
        eventually(lambda: pods.index_keys("node", "n1") == ["default/web-1"])
    finally:
        factory.stop()

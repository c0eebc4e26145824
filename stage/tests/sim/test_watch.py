"""Watch as kube-apiserver serves it: initial state, resume, selectors, bookmarks,
timeouts and 410 Gone, through raw streams, the official client's Watch and its informer."""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from kubernetes.informer.informer import SharedInformer
from test.cluster import Cluster
from test.manifests import configmap, pod

from ome_sim.apiserver import EmbeddedAPIServer
from ome_sim.apiserver.api import WriteOptions
from ome_sim.apiserver.store import Watcher

JSON = dict[str, Any]


def stream(cluster: Cluster, path: str, timeout: float = 10) -> Iterator[dict[str, Any]]:
    """Raw watch events, one JSON object per line, until the server ends the stream."""
    with cluster.urlopen(path, timeout=timeout) as resp:
        assert resp.status == 200
        for line in resp:
            if line.strip():
                yield json.loads(line)


#: What kube-controller-manager keeps in every namespace (the embedded server has none).
CONTROL_PLANE_CONFIGMAPS = {"kube-root-ca.crt"}


def ours(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of the test's own objects: not of those the control plane keeps."""
    return [
        e for e in events if e["object"]["metadata"].get("name") not in CONTROL_PLANE_CONFIGMAPS
    ]


@pytest.mark.conformance
def test_watch_without_resource_version_starts_with_the_current_state(cluster: Cluster) -> None:
    core = cluster.core()
    core.create_namespaced_config_map("default", configmap("a"))
    core.create_namespaced_config_map("default", configmap("b"))
    events = ours(
        list(stream(cluster, "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1"))
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]


@pytest.mark.conformance
def test_watch_resumes_after_a_resource_version(cluster: Cluster) -> None:
    core = cluster.core()
    listed = core.list_namespaced_config_map("default")
    core.create_namespaced_config_map("default", configmap("a"))
    core.patch_namespaced_config_map("a", "default", {"data": {"k": "2"}})
    core.delete_namespaced_config_map("a", "default")
    rv = listed.metadata.resource_version
    events = list(
        stream(
            cluster,
            f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=1",
        )
    )
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3


def test_watch_from_a_compacted_resource_version_gets_410_gone(cluster: Cluster) -> None:
    core = cluster.core()
    old = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", configmap("a"))
    cluster.server.store.compact()  # as etcd compaction would
    events = list(
        stream(cluster, f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={old}")
    )
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"
    w = watch.Watch()
    with pytest.raises(ApiException) as e:
        for _ in w.stream(core.list_namespaced_config_map, "default", resource_version=old):
            pass
    assert e.value.status == 410


def test_official_informer_recovers_from_410_by_relisting(cluster: Cluster) -> None:
    core = cluster.core()
    seen: dict[str, threading.Event] = {"a": threading.Event(), "b": threading.Event()}

    def on_add(obj: Any) -> None:
        if obj.metadata.name in seen:
            seen[obj.metadata.name].set()

    informer = SharedInformer(core.list_namespaced_config_map, namespace="default")
    informer.add_event_handler("ADDED", on_add)
    informer.start()
    try:
        core.create_namespaced_config_map("default", configmap("a"))
        assert seen["a"].wait(10)
        # History compacted and the watch dropped: the resume gets 410, the informer re-lists.
        cluster.server.store.compact()
        cluster.thread.call(lambda: cluster.server.drop_watches("configmaps"))
        core.create_namespaced_config_map("default", configmap("b"))
        assert seen["b"].wait(15)
        assert {"a", "b"} <= {o.metadata.name for o in informer.cache.list()}
    finally:
        informer.stop()


@pytest.mark.conformance
def test_objects_leaving_a_label_selection_are_deleted_events(cluster: Cluster) -> None:
    core = cluster.core()
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", configmap("a", labels={"tier": "web"}))
    core.patch_namespaced_config_map("a", "default", {"metadata": {"labels": {"tier": "db"}}})
    core.patch_namespaced_config_map("a", "default", {"metadata": {"labels": {"tier": "web"}}})
    core.create_namespaced_config_map("default", configmap("b", labels={"tier": "db"}))
    events = list(
        stream(
            cluster,
            f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}"
            "&labelSelector=tier%3Dweb&timeoutSeconds=1",
        )
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("DELETED", "a"),
        ("ADDED", "a"),
    ]


def test_bookmarks_carry_the_current_resource_version(cluster: Cluster) -> None:
    """Not a conformance check: kube-apiserver sends a bookmark about once a minute (none
    in an 8 s watch); the embedded server every ``bookmark_interval`` and at the deadline."""
    core = cluster.core()
    core.create_namespaced_config_map("default", configmap("a"))
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map(
        "kube-system", configmap("elsewhere", namespace="kube-system")
    )
    events = list(
        stream(
            cluster,
            f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}"
            "&allowWatchBookmarks=true&timeoutSeconds=2",
        )
    )
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks, "a bookmark is sent at least before the watch times out"
    assert all(e["type"] == "BOOKMARK" for e in events)
    assert int(bookmarks[-1]["object"]["metadata"]["resourceVersion"]) > int(rv)
    assert bookmarks[-1]["object"]["kind"] == "ConfigMap"


@pytest.mark.conformance
def test_no_bookmarks_unless_asked(cluster: Cluster) -> None:
    events = list(
        stream(
            cluster,
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=1&timeoutSeconds=2",
        )
    )
    assert not [e for e in events if e["type"] == "BOOKMARK"]


@pytest.mark.conformance
def test_watch_ends_at_timeout_seconds(cluster: Cluster) -> None:
    import time

    start = time.monotonic()
    list(stream(cluster, "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1"))
    assert 0.9 <= time.monotonic() - start < 5


@pytest.mark.conformance
def test_send_initial_events_ends_with_an_annotated_bookmark(cluster: Cluster) -> None:
    cluster.core().create_namespaced_config_map("default", configmap("a"))
    events = ours(
        list(
            stream(
                cluster,
                "/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true"
                "&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
            )
        )
    )
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


@pytest.mark.conformance
def test_field_selector_watch_on_node_name(cluster: Cluster) -> None:
    core = cluster.core()
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("p"))
    core.create_namespaced_binding(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "p"},
            "target": {"kind": "Node", "name": "n1"},
        },
        _preload_content=False,
    )
    events = list(
        stream(
            cluster,
            f"/api/v1/pods?watch=1&resourceVersion={rv}&fieldSelector=spec.nodeName%3Dn1&timeoutSeconds=1",
        )
    )
    assert [(e["type"], e["object"]["spec"]["nodeName"]) for e in events] == [("ADDED", "n1")]


@pytest.mark.conformance
def test_watch_of_one_object_by_name(cluster: Cluster) -> None:
    core = cluster.core()
    core.create_namespaced_config_map("default", configmap("a"))
    core.create_namespaced_config_map("default", configmap("b"))
    events = list(
        stream(
            cluster,
            "/api/v1/namespaces/default/configmaps?watch=1&fieldSelector=metadata.name%3Db&timeoutSeconds=1",
        )
    )
    assert [e["object"]["metadata"]["name"] for e in events] == ["b"]


# -- bookmarks never run ahead of the events queued for the watcher ---------------------------

CONFIGMAPS = ("", "configmaps")
Seen = tuple[str, str, int]  # (type, name, resourceVersion) of one delivered event
Writes = Callable[[EmbeddedAPIServer], Awaitable[None]]


def churn(n: int = 120, labels: Callable[[int], dict[str, str]] | None = None) -> Writes:
    """``n`` creates, then updates of every third and deletes of every fifth configmap in
    ``default``, then a write to ``kube-system`` that no ``default`` watch matches: one burst,
    run on the server's loop, so every event is queued before the watch can send any."""

    async def writes(server: EmbeddedAPIServer) -> None:
        api, opts = server.api, WriteOptions()
        rt = server.registry.by_key(*CONFIGMAPS)
        assert rt is not None
        names = [f"burst-{i}" for i in range(n)]
        for i, name in enumerate(names):
            body = configmap(name, labels=labels(i)) if labels else configmap(name)
            await api.create(rt, "v1", "default", body, opts)
        for name in names[::3]:
            body = api.get(rt, "v1", "default", name)
            body["data"] = {"k": "updated"}
            await api.update(rt, "v1", "default", name, body, "", opts)
        for name in names[::5]:
            await api.delete(rt, "v1", "default", name, {}, opts)
        await api.create(rt, "v1", "kube-system", configmap("elsewhere", "kube-system"), opts)

    return writes


@dataclass
class Due:
    """Runs ``writes`` on the server's loop the first time a configmaps watch's ``kind``
    ("bookmark" or "deadline") comes due, before the server writes anything for it: the
    writes' events are then queued for that watcher, not yet sent, as its bookmark is made.
    ``done`` is set once they are all committed, ``watcher`` is the watch they hit."""

    server: EmbeddedAPIServer
    kind: str
    writes: Writes
    watcher: Watcher | None = None
    done: threading.Event = field(default_factory=threading.Event)

    async def __call__(self, kind: str, watcher: Watcher) -> None:
        if kind == self.kind and watcher.tkey == CONFIGMAPS and self.watcher is None:
            self.watcher = watcher
            await self.writes(self.server)
            self.done.set()


def writes_when_due(cluster: Cluster, kind: str, writes: Writes) -> Due:
    due = Due(cluster.server, kind, writes)
    cluster.thread.call(lambda: setattr(cluster.server, "on_watch_due", due))
    return due


def history(
    cluster: Cluster, since: int, selected: Callable[[JSON], bool] = lambda _: True
) -> list[Seen]:
    """Every configmap change in ``default`` after ``since``, as the store committed it."""
    return cluster.thread.call(
        lambda: [
            (c.type, c.obj["metadata"]["name"], c.rv)
            for c in cluster.server.store.history
            if c.tkey == CONFIGMAPS
            and c.rv > since
            and c.obj["metadata"]["namespace"] == "default"
            and selected(c.obj)
        ]
    )


def create(cluster: Cluster, name: str) -> None:
    status, body, _ = cluster.request(
        "POST", "/api/v1/namespaces/default/configmaps", configmap(name)
    )
    assert status == 201, body


def rv_of(event: dict[str, Any]) -> int:
    return int(event["object"]["metadata"]["resourceVersion"])


def delivered(events: list[dict[str, Any]]) -> list[Seen]:
    return [
        (e["type"], e["object"]["metadata"]["name"], rv_of(e))
        for e in events
        if e["type"] != "BOOKMARK"
    ]


def assert_in_resource_version_order(events: list[dict[str, Any]]) -> None:
    """Events and bookmarks alike: nothing after a bookmark is older than it."""
    highest = 0
    for i, e in enumerate(events):
        rv = rv_of(e)
        assert rv >= highest, (
            f"event {i} ({e['type']} at {rv}) comes after a resourceVersion of {highest}: "
            f"the stream starts {[(x['type'], rv_of(x)) for x in events[: i + 2]][-6:]}"
        )
        highest = rv


def assert_resuming_misses_nothing(
    cluster: Cluster, path: str, before: list[Seen], bookmark: int, expected: list[Seen]
) -> None:
    """A client that saw ``before`` and then the bookmark resumes from the bookmark's
    resourceVersion: together the two watches hold every change, none twice."""
    resumed = delivered(
        list(stream(cluster, f"{path}&resourceVersion={bookmark}&timeoutSeconds=1"))
    )
    lost = [c for c in expected if c not in before + resumed]
    assert not lost, (
        f"a client resuming from the BOOKMARK at {bookmark} never sees {len(lost)} of "
        f"{len(expected)} changes: {lost[:5]}..."
    )
    assert before + resumed == expected


def test_a_watch_that_times_out_delivers_every_event_before_its_bookmark_in_order(
    cluster: Cluster,
) -> None:
    since = cluster.thread.call(lambda: cluster.server.store.rv)
    create(cluster, "before")
    due = writes_when_due(cluster, "deadline", churn())
    path = "/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true"
    events = list(stream(cluster, f"{path}&resourceVersion={since}&timeoutSeconds=1"))
    assert due.done.is_set()
    current = cluster.thread.call(lambda: cluster.server.store.rv)
    expected = history(cluster, since)
    assert len(expected) == 1 + 120 + 40 + 24

    assert events[-1]["type"] == "BOOKMARK", "a watch with bookmarks ends with one"
    bookmark = rv_of(events[-1])
    sent = delivered(events)
    unsent = [c for c in expected if c not in sent and c[2] <= bookmark]
    assert not unsent, (
        f"{len(unsent)} of {len(expected)} events were never sent, yet the final BOOKMARK "
        f"says {bookmark}: {unsent[:5]}..."
    )
    assert sent == expected, "every event of every write, in resourceVersion order"
    assert_in_resource_version_order(events)
    # Nothing is pending once every event is out: the bookmark may then take the current
    # resourceVersion, past the kube-system write this watch does not match.
    assert sent[-1][2] < bookmark == current

    create(cluster, "after")
    assert_resuming_misses_nothing(cluster, path, sent, bookmark, history(cluster, since))


def test_a_periodic_bookmark_comes_after_every_event_queued_before_it(cluster: Cluster) -> None:
    since = cluster.thread.call(lambda: cluster.server.store.rv)
    create(cluster, "before")
    due = writes_when_due(cluster, "bookmark", churn())
    path = "/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true"
    # The fixture's bookmark interval is 0.5s: the first periodic bookmark fires the burst.
    events = list(stream(cluster, f"{path}&resourceVersion={since}&timeoutSeconds=2"))
    assert due.done.is_set()
    expected = history(cluster, since)

    assert_in_resource_version_order(events)
    assert delivered(events) == expected
    first = next(i for i, e in enumerate(events) if e["type"] == "BOOKMARK")
    bookmark = rv_of(events[first])
    before = delivered(events[:first])
    assert before == expected, "the burst was queued before the first periodic bookmark"
    assert bookmark >= before[-1][2]
    # A client whose connection drops just after that bookmark resumes from it.
    create(cluster, "after")
    assert_resuming_misses_nothing(cluster, path, before, bookmark, history(cluster, since))


def test_a_filtered_watch_bookmark_passes_other_objects_only_after_its_own_events(
    cluster: Cluster,
) -> None:
    since = cluster.thread.call(lambda: cluster.server.store.rv)
    due = writes_when_due(
        cluster, "deadline", churn(labels=lambda i: {"tier": "web" if i % 2 else "db"})
    )
    path = (
        "/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true"
        "&labelSelector=tier%3Dweb"
    )
    events = list(stream(cluster, f"{path}&resourceVersion={since}&timeoutSeconds=1"))
    assert due.done.is_set()
    current = cluster.thread.call(lambda: cluster.server.store.rv)

    def web(obj: JSON) -> bool:
        return bool(obj["metadata"].get("labels", {}).get("tier") == "web")

    expected = history(cluster, since, web)
    assert len(expected) == 60 + 20 + 12
    assert events[-1]["type"] == "BOOKMARK"
    bookmark = rv_of(events[-1])
    sent = delivered(events)
    assert sent == expected, "every matching event, in resourceVersion order"
    assert_in_resource_version_order(events)
    # Half the burst and its last write match nothing here; once the watch's own events are
    # out, its bookmark still moves on to the current resourceVersion, as kube-apiserver's does.
    assert sent[-1][2] < bookmark == current
    assert_resuming_misses_nothing(cluster, path, sent, bookmark, history(cluster, since, web))


def test_a_change_landing_while_a_timed_out_watch_catches_up_is_left_past_its_bookmark(
    cluster: Cluster,
) -> None:
    since = cluster.thread.call(lambda: cluster.server.store.rv)
    create(cluster, "before")
    big = "x" * (512 * 1024)

    async def burst(server: EmbeddedAPIServer) -> None:
        rt = server.registry.by_key(*CONFIGMAPS)
        assert rt is not None
        for i in range(64):
            body = configmap(f"big-{i}") | {"data": {"k": big}}
            await server.api.create(rt, "v1", "default", body, WriteOptions())

    due = writes_when_due(cluster, "deadline", burst)
    path = "/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true"
    url = f"{cluster.url}{path}&resourceVersion={since}&timeoutSeconds=1"
    with cluster.urlopen(url, timeout=30) as resp:
        events = [json.loads(resp.readline())]  # "before": the watch is subscribed
        assert due.done.wait(10)
        # 32 MiB of events outgrow the socket buffers of a client that reads nothing: the
        # server is still sending them when this write lands in the watcher's queue.
        create(cluster, "landed")
        assert cluster.thread.call(lambda: due.watcher in cluster.server._watches), (
            "the watch is still sending the burst queued before its deadline as this lands"
        )
        events += [json.loads(line) for line in resp if line.strip()]
    expected = history(cluster, since)
    landed = expected[-1]
    assert landed[1] == "landed"

    assert events[-1]["type"] == "BOOKMARK"
    bookmark = rv_of(events[-1])
    sent = delivered(events)
    assert sent == expected[:-1], "the burst, queued before the deadline, is all sent"
    assert_in_resource_version_order(events)
    # "landed" is still queued as the bookmark is made: the bookmark stays below it, at the
    # last event sent, and the resumed watch delivers it.
    assert bookmark == sent[-1][2] < landed[2]
    assert_resuming_misses_nothing(cluster, path, sent, bookmark, expected)

"""Watch as kube-apiserver serves it: initial state, resume, selectors, bookmarks,
timeouts and 410 Gone, through raw streams, the official client's Watch and its informer."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from kubernetes.informer.informer import SharedInformer

from test.conftest import Cluster
from test.sim.manifests import configmap, pod


def stream(cluster: Cluster, path: str, timeout: float = 10) -> Iterator[dict[str, Any]]:
    """Raw watch events, one JSON object per line, until the server ends the stream."""
    with urllib.request.urlopen(cluster.url + path, timeout=timeout) as resp:
        assert resp.status == 200
        for line in resp:
            if line.strip():
                yield json.loads(line)


def test_watch_without_resource_version_starts_with_the_current_state(cluster: Cluster) -> None:
    core = cluster.core()
    core.create_namespaced_config_map("default", configmap("a"))
    core.create_namespaced_config_map("default", configmap("b"))
    events = list(
        stream(cluster, "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1")
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]


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


def test_no_bookmarks_unless_asked(cluster: Cluster) -> None:
    events = list(
        stream(
            cluster,
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=1&timeoutSeconds=2",
        )
    )
    assert not [e for e in events if e["type"] == "BOOKMARK"]


def test_watch_ends_at_timeout_seconds(cluster: Cluster) -> None:
    import time

    start = time.monotonic()
    list(stream(cluster, "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1"))
    assert 0.9 <= time.monotonic() - start < 5


def test_send_initial_events_ends_with_an_annotated_bookmark(cluster: Cluster) -> None:
    cluster.core().create_namespaced_config_map("default", configmap("a"))
    events = list(
        stream(
            cluster,
            "/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true"
            "&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
        )
    )
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


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

"""A namespace being deleted refuses new content (403, cause NamespaceTerminating), as
kube-apiserver does. The manager lets such a create be: no PodCreateFailed event (it could
not be written there either) and no error line, since the replica goes with its namespace."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from kubernetes.client.exceptions import ApiException

from ome.api.v1beta1 import INFERENCE_REPLICAS
from ome.controllers.inferencereplica.controller import InferenceReplicaReconciler
from ome.kube import JSON
from ome.runtime.client import Client, namespace_terminating
from ome.runtime.informer import Informer
from ome.runtime.rest import CONFIGMAPS, NAMESPACES, PODS, Rest
from test.cluster import Cluster
from test.helpers import eventually
from test.manifests import configmap

NS = "going"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def event(self, _obj: JSON, type_: str, reason: str, message: str) -> None:
        self.events.append((reason, message))


@pytest.fixture
def terminating(cluster: Cluster) -> Iterator[Rest]:
    rest = Rest(cluster.api)
    rest.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    held = configmap("held", namespace=NS)
    held["metadata"]["finalizers"] = ["example.com/hold"]
    rest.create(CONFIGMAPS, held, NS)
    rest.delete(NAMESPACES, NS)
    eventually(lambda: rest.get(NAMESPACES, NS).get("status", {}).get("phase") == "Terminating")
    yield rest
    rest.patch(CONFIGMAPS, "held", {"metadata": {"finalizers": None}}, NS)


def test_the_server_names_the_cause_as_kube_apiserver_does(terminating: Rest) -> None:
    with pytest.raises(ApiException) as e:
        terminating.create(CONFIGMAPS, configmap("late", namespace=NS), NS)
    body = json.loads(e.value.body)
    assert (e.value.status, body["reason"]) == (403, "Forbidden")
    assert body["message"] == (
        f'configmaps "late" is forbidden: unable to create new content in namespace {NS} '
        "because it is being terminated"
    )
    assert body["details"]["causes"] == [
        {
            "reason": "NamespaceTerminating",
            "message": f"namespace {NS} is being terminated",
            "field": "metadata.namespace",
        }
    ]
    assert namespace_terminating(e.value)


def test_a_pod_create_refused_so_is_neither_an_event_nor_an_error(
    terminating: Rest, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    reconciler = InferenceReplicaReconciler(
        Client(terminating),
        Informer(terminating, INFERENCE_REPLICAS),
        Informer(terminating, PODS),
        recorder,  # type: ignore[arg-type]
    )
    replica = {"metadata": {"name": "r", "namespace": NS, "uid": "u1"}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "r-0", "namespace": NS},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    with caplog.at_level(logging.DEBUG):
        assert reconciler._create_pod(f"{NS}/r", replica, pod) is True  # settled: no retry
    assert recorder.events == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []

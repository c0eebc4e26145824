"""The provider's pod runner and kubelet API without a real control plane: the pure
decisions (images, arguments, env, ports, probes), the LogStore and the containerLogs
endpoint over HTTPS, and the untainted system nodes and kubelet endpoint on the embedded
server. Running a pod for real needs a TokenRequest: test/e2e/test_kubelet_kube.py."""

from __future__ import annotations

import itertools
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test.cluster import Cluster
from test.helpers import eventually

from ome.runtime.rest import NODES, PODS, Rest
from ome_sim.gke.kubeletapi import KubeletServer, LogStore, parse_log_request, tail
from ome_sim.gke.model import TPU_TAINT, kubelet_endpoint_status, parse_pools
from ome_sim.gke.podrunner import (
    MAX_GRACE,
    _Container,
    command_line,
    containers_to_run,
    exit_code_of,
    expand,
    grace_seconds,
    image_repository,
    map_ports,
    probe_of,
    resolve_env,
    rewrite_args,
    should_restart,
    token_kubeconfig,
)
from ome_sim.gke.provider import Options, Provider, install_slice_crd

JSON = dict[str, Any]
IMAGE = "ghcr.io/moirai-internal/ome-manager"


def manager_pod() -> JSON:
    return {
        "metadata": {"name": "mgr-0", "namespace": "ome", "uid": "u-1", "labels": {"a": "b"}},
        "spec": {
            "nodeName": "gke-default-pool-node-0",
            "serviceAccountName": "ome-controller-manager",
            "containers": [
                {
                    "name": "manager",
                    "image": f"{IMAGE}:v0.1.0",
                    "args": [
                        "--leader-elect",
                        "--metrics-bind-address=:8080",
                        "--health-probe-bind-address=0.0.0.0:8081",
                        "--webhook-bind-address=:9443",
                        "--other=:8080",
                    ],
                    "env": [
                        {"name": "A", "value": "x"},
                        {"name": "B", "value": "$(A)-y-$(NOPE)-$$"},
                        {
                            "name": "POD_NAMESPACE",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                        },
                        {
                            "name": "POD_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        },
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {
                            "name": "SA",
                            "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}},
                        },
                        {
                            "name": "LABEL",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['a']"}},
                        },
                        {
                            "name": "SECRET",
                            "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}},
                        },
                    ],
                    "ports": [
                        {"name": "webhook-server", "containerPort": 9443},
                        {"name": "metrics", "containerPort": 8080},
                        {"name": "health", "containerPort": 8081},
                    ],
                    "readinessProbe": {"httpGet": {"path": "/readyz", "port": "health"}},
                    "livenessProbe": {
                        "httpGet": {"path": "healthz", "port": 8081},
                        "initialDelaySeconds": 15,
                        "periodSeconds": 20,
                    },
                },
                {"name": "sidecar", "image": "busybox:1.36"},
            ],
        },
    }


# -- pure decisions --------------------------------------------------------------------------


def test_image_repository_drops_the_tag_or_digest_but_not_a_registry_port() -> None:
    assert image_repository(f"{IMAGE}:v1") == IMAGE
    assert image_repository(f"{IMAGE}@sha256:abc") == IMAGE
    assert image_repository("localhost:5000/ome-manager") == "localhost:5000/ome-manager"
    assert image_repository("localhost:5000/ome-manager:v2") == "localhost:5000/ome-manager"
    assert containers_to_run(manager_pod(), [IMAGE]) == ["manager"]
    assert containers_to_run(manager_pod(), ["other"]) == []


def test_ports_are_mapped_for_the_run_containers_only() -> None:
    counter = itertools.count(40000)
    mapped = map_ports(manager_pod(), ["manager"], lambda: next(counter))
    assert mapped == {9443: 40000, 8080: 40001, 8081: 40002}


def test_bind_addresses_of_declared_ports_are_rewritten_to_loopback() -> None:
    mapped = {8080: 41000, 8081: 41001}
    args = [
        "--metrics-bind-address=:8080",
        "--health-probe-bind-address=0.0.0.0:8081",
        "--webhook-bind-address=:9443",  # not declared here: as is
        "--metrics-bind-address",
        ":8080",
        "--other=:8080",  # not a bind address
        "--webhook-bind-address=0",
    ]
    assert rewrite_args(args, mapped) == [
        "--metrics-bind-address=127.0.0.1:41000",
        "--health-probe-bind-address=127.0.0.1:41001",
        "--webhook-bind-address=:9443",
        "--metrics-bind-address",
        "127.0.0.1:41000",
        "--other=:8080",
        "--webhook-bind-address=0",
    ]


def test_env_literals_var_expansion_and_field_refs() -> None:
    pod = manager_pod()
    env = resolve_env(pod["spec"]["containers"][0], pod)
    assert env == {
        "A": "x",
        "B": "x-y-$(NOPE)-$",
        "POD_NAMESPACE": "ome",
        "POD_NAME": "mgr-0",
        "NODE": "gke-default-pool-node-0",
        "SA": "ome-controller-manager",
        "LABEL": "b",
    }
    assert expand("$(A)$$(A)", {"A": "1"}) == "1$(A)"


def test_the_command_line_is_the_installed_manager_with_the_webhook_host() -> None:
    pod = manager_pod()
    container = pod["spec"]["containers"][0]
    argv = command_line(container, {}, {8080: 1, 8081: 2, 9443: 3}, python="py")
    assert argv == [
        "py",
        "-m",
        "ome.entrypoints.manager",
        "--leader-elect",
        "--metrics-bind-address=127.0.0.1:1",
        "--health-probe-bind-address=127.0.0.1:2",
        "--webhook-bind-address=127.0.0.1:3",
        "--other=:8080",
    ]
    with_command = {**container, "command": ["/ome-manager", "--log-format=json"], "args": []}
    assert command_line(with_command, {}, {}, python="py") == [
        "py",
        "-m",
        "ome.entrypoints.manager",
        "--log-format=json",
    ]
    other = {"command": ["sh", "-c", "echo $(X)"], "args": ["a"]}
    assert command_line(other, {"X": "1"}, {}) == ["sh", "-c", "echo 1", "a"]


def test_probes_go_to_the_mapped_port_with_kubernetes_defaults() -> None:
    container = manager_pod()["spec"]["containers"][0]
    mapped = {8081: 42000}
    ready = probe_of(container["readinessProbe"], container, mapped)
    assert ready is not None
    assert ready.url == "http://127.0.0.1:42000/readyz"
    assert (ready.period, ready.initial_delay, ready.failure_threshold, ready.timeout) == (
        10.0,
        0.0,
        3,
        1.0,
    )
    live = probe_of(container["livenessProbe"], container, mapped)
    assert live is not None and live.url == "http://127.0.0.1:42000/healthz"
    assert (live.period, live.initial_delay) == (20.0, 15.0)
    assert probe_of({"exec": {"command": ["true"]}}, container, mapped) is None
    assert probe_of(container["readinessProbe"], container, {}) is None


def test_restart_policy_exit_codes_and_grace() -> None:
    assert should_restart("Always", 0) and should_restart("OnFailure", 1)
    assert not should_restart("OnFailure", 0) and not should_restart("Never", 1)
    assert exit_code_of(-9) == 137 and exit_code_of(2) == 2
    pod = manager_pod()
    assert grace_seconds(pod) == 30.0
    pod["spec"]["terminationGracePeriodSeconds"] = 600
    assert grace_seconds(pod) == MAX_GRACE
    pod["metadata"]["deletionGracePeriodSeconds"] = 5
    assert grace_seconds(pod) == 5.0


def test_token_kubeconfig_names_the_server_ca_and_namespace() -> None:
    cfg = token_kubeconfig("https://127.0.0.1:6443", b"PEM", "tok", "ome")
    assert cfg["clusters"][0]["cluster"] == {
        "server": "https://127.0.0.1:6443",
        "certificate-authority-data": "UEVN",
    }
    assert cfg["users"][0]["user"] == {"token": "tok"}
    assert cfg["contexts"][0]["context"]["namespace"] == "ome"
    insecure = token_kubeconfig("http://x", None, "t", "ns")
    assert insecure["clusters"][0]["cluster"]["insecure-skip-tls-verify"] is True


def test_kubelet_endpoint_status_points_at_loopback() -> None:
    node = {
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "192.0.2.1"},
                {"type": "Hostname", "address": "n"},
            ]
        }
    }
    assert kubelet_endpoint_status(node, 10250) == {
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": "n"},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
    }


# -- LogStore and the containerLogs endpoint --------------------------------------------------


def test_log_requests_parse_and_tail() -> None:
    q = parse_log_request("/containerLogs/ome/p%2D1/manager?tailLines=5&follow=true&previous=1")
    assert q is not None
    assert (q.namespace, q.pod, q.container, q.tail_lines, q.follow, q.previous) == (
        "ome",
        "p-1",
        "manager",
        5,
        True,
        True,
    )
    assert parse_log_request("/pods") is None
    assert tail(b"a\nb\nc\n", 2) == b"b\nc\n"
    assert tail(b"a\nb\nc", 0) == b""
    assert tail(b"a\nb\n", -1) == b"a\nb\n"


def test_log_store_keeps_the_current_and_the_previous_run(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    store.register("ome", "mgr-0", "u-1")
    first = store.new_run("u-1", "manager")
    first.write_text("one\n")
    second = store.new_run("u-1", "manager")
    third = store.new_run("u-1", "manager")
    assert not first.exists() and second.exists() and third.exists()
    previous = store.run("u-1", "manager", previous=True)
    assert previous is not None and previous.path == second and previous.ended.is_set()
    current = store.run("u-1", "manager")
    assert current is not None and current.path == third and not current.ended.is_set()
    store.forget("u-1")
    assert store.uid_of("ome", "mgr-0") is None and not (tmp_path / "u-1").exists()


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[KubeletServer]:
    server = KubeletServer(LogStore(tmp_path))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def get(server: KubeletServer, path: str, timeout: float = 10.0) -> tuple[int, str]:
    context = ssl._create_unverified_context()
    url = f"https://127.0.0.1:{server.port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()


def test_container_logs_with_tail_previous_and_limit(kubelet: KubeletServer) -> None:
    store = kubelet.logs
    assert get(kubelet, "/containerLogs/ome/unknown/manager") == (200, "")
    store.register("ome", "mgr-0", "u-1")
    assert get(kubelet, "/containerLogs/ome/mgr-0/manager?previous=true") == (
        400,
        'previous terminated container "manager" in pod "mgr-0" not found',
    )
    store.new_run("u-1", "manager").write_text("a\nb\n")
    store.new_run("u-1", "manager").write_text("c\nd\ne\n")
    assert get(kubelet, "/containerLogs/ome/mgr-0/manager") == (200, "c\nd\ne\n")
    assert get(kubelet, "/containerLogs/ome/mgr-0/manager?tailLines=1") == (200, "e\n")
    assert get(kubelet, "/containerLogs/ome/mgr-0/manager?previous=true") == (200, "a\nb\n")
    assert get(kubelet, "/containerLogs/ome/mgr-0/manager?limitBytes=3") == (200, "c\nd")
    assert get(kubelet, "/containerLogs/ome/mgr-0/manager?tailLines=x")[0] == 400
    assert get(kubelet, "/healthz") == (200, "ok")
    assert get(kubelet, "/other")[0] == 404


def test_follow_streams_until_the_run_ends(kubelet: KubeletServer) -> None:
    store = kubelet.logs
    store.register("ome", "mgr-0", "u-1")
    path = store.new_run("u-1", "manager")
    path.write_text("first\n")
    got: list[tuple[int, str]] = []
    reader = threading.Thread(
        target=lambda: got.append(get(kubelet, "/containerLogs/ome/mgr-0/manager?follow=true"))
    )
    reader.start()
    with path.open("a") as f:
        f.write("second\n")
    time.sleep(0.05)  # not a wait for a condition: lets the follower see two writes apart
    with path.open("a") as f:
        f.write("third\n")
    store.end_run("u-1", "manager")
    reader.join(10)
    assert got == [(200, "first\nsecond\nthird\n")]


# -- the provider: system nodes and the kubelet endpoint on the embedded server ---------------


def start_provider(cluster: Cluster, **options: Any) -> Provider:
    rest = Rest(cluster.api)
    install_slice_crd(rest)
    opts = Options(
        activation_delay=0.2,
        heartbeat_interval=0.5,
        status_interval=1.0,
        scheduler="on",
        **options,
    )
    provider = Provider(rest, parse_pools(["tpu7x:provision-only:1"]), opts)
    provider.start()
    return provider


def test_system_nodes_are_untainted_and_take_pods_without_tolerations(cluster: Cluster) -> None:
    provider = start_provider(cluster, system_nodes=1)
    try:
        rest = provider.rest
        node = rest.get(NODES, "gke-default-pool-node-0")
        assert not (node.get("spec") or {}).get("taints")
        assert "google.com/tpu" not in node["status"]["capacity"]
        assert node["metadata"]["labels"]["cloud.google.com/gke-nodepool"] == "default-pool"
        assert "daemonEndpoints" not in node["status"]  # no kubelet API: as before
        tpu = rest.get(NODES, "gke-tpu-pool-node-0")
        assert tpu["spec"]["taints"] == [TPU_TAINT]
        rest.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "plain", "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
            namespace="default",
        )

        def running() -> bool:
            pod = rest.get(PODS, "plain", "default")
            return (pod.get("status") or {}).get("phase") == "Running"

        eventually(running, 10)
        assert rest.get(PODS, "plain", "default")["spec"]["nodeName"] == "gke-default-pool-node-0"
        assert not (rest.get(NODES, "gke-default-pool-node-0").get("spec") or {}).get("taints")
    finally:
        provider.stop()


def test_nodes_advertise_the_kubelet_api_when_it_is_on(cluster: Cluster) -> None:
    provider = start_provider(cluster, system_nodes=1, kubelet_api=True)
    try:
        assert provider.kubelet_server is not None
        port = provider.kubelet_server.port
        for name in ("gke-default-pool-node-0", "gke-tpu-pool-node-0"):
            status = provider.rest.get(NODES, name)["status"]
            assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": port}}
            assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]
        assert get(provider.kubelet_server, "/containerLogs/default/none/c") == (200, "")
    finally:
        provider.stop()


def test_a_container_backing_off_reports_crash_loop_back_off() -> None:
    pod = manager_pod()
    c = _Container("manager", pod["spec"]["containers"][0])
    assert c.status(pod)["state"] == {"waiting": {"reason": "ContainerCreating"}}
    c.restart_count, c.backoff_delay = 2, 20.0
    c.last_terminated = {"exitCode": 1, "reason": "Error"}
    status = c.status(pod)
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert (
        "back-off 20s restarting failed container=manager pod=mgr-0_ome(u-1)"
        in (status["state"]["waiting"]["message"])
    )
    assert status["lastState"] == {"terminated": {"exitCode": 1, "reason": "Error"}}
    assert (status["ready"], status["started"], status["restartCount"]) == (False, False, 2)

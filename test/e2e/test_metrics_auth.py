"""The manager's metrics as controller-runtime serves them, on the real control plane
(``make e2e-kube``, the manager in its Deployment's pod): HTTPS behind the metrics Service,
each scrape's bearer token authenticated by a TokenReview and authorized by a
SubjectAccessReview (``get`` on ``/metrics``).

- A ServiceAccount bound to the ``ome-metrics-reader`` ClusterRole reads them.
- One without that binding gets 403, no token 401.
- Through the API server's service proxy, the API server itself refuses a user without
  ``get`` on ``services/proxy`` (403). A user allowed through reaches the manager without a
  token, since kube-apiserver removes the Authorization header once it has authenticated
  it, and the manager answers 401. The chart's README tells users to scrape in-cluster or
  through ``kubectl port-forward`` for that reason.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest

from test.e2e.conftest import Environment
from test.helpers import eventually, scrape_https

RUNNING = "ome"
SERVICE = "ome-controller-manager-metrics-service"
READER_ROLE = "ome-metrics-reader"
NAMESPACE = "ome-metrics-e2e"  # the test's ServiceAccounts
BINDING = "ome-metrics-e2e-reader"


def _cleanup(env: Environment) -> None:
    env.kubectl("delete", "clusterrolebinding", BINDING, "--ignore-not-found", timeout=60)
    env.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", timeout=120)


@pytest.fixture(scope="module")
def tokens(kube: Environment) -> Iterator[dict[str, str]]:
    """Tokens of two ServiceAccounts: ``reader``, bound to the metrics-reader ClusterRole,
    and ``stranger``, bound to nothing."""
    pods = kube.kubectl(
        "get", "pods", "-n", RUNNING, "-l", "control-plane=ome-controller-manager", "-o", "name"
    ).stdout.split()
    if not pods:
        pytest.skip(
            "the manager runs beside the cluster (ome-sim --manager process), with plain "
            "metrics; make e2e-kube runs it as the chart's pod"
        )
    kube.kubectl("get", "service", SERVICE, "-n", RUNNING)  # the chart made it
    _cleanup(kube)
    kube.kubectl("create", "namespace", NAMESPACE)
    try:
        for name in ("reader", "stranger"):
            kube.kubectl("create", "serviceaccount", name, "-n", NAMESPACE)
        kube.kubectl(
            "create", "clusterrolebinding", BINDING, f"--clusterrole={READER_ROLE}",
            f"--serviceaccount={NAMESPACE}:reader",
        )  # fmt: skip
        yield {
            name: kube.kubectl("create", "token", name, "-n", NAMESPACE).stdout.strip()
            for name in ("reader", "stranger")
        }
    finally:
        _cleanup(kube)


def scrape(address: str, token: str | None) -> tuple[int, str]:
    return scrape_https(f"https://{address}/metrics", token)


def service_address(env: Environment) -> str:
    service = json.loads(env.kubectl("get", "service", SERVICE, "-n", RUNNING, "-o", "json").stdout)
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == "https"]
    return f"{service['spec']['clusterIP']}:{port['port']}"


def test_the_metrics_service_has_the_managers_pod_behind_it(
    kube: Environment, tokens: object
) -> None:
    pods = json.loads(
        kube.kubectl(
            "get", "pods", "-n", RUNNING, "-l", "control-plane=ome-controller-manager",
            "-o", "json",
        ).stdout
    )["items"]  # fmt: skip
    ips = {p["status"].get("podIP") for p in pods if p["status"].get("podIP")}

    def endpoints() -> set[tuple[str, int]]:
        slices = json.loads(
            kube.kubectl(
                "get", "endpointslices", "-n", RUNNING,
                "-l", f"kubernetes.io/service-name={SERVICE}", "-o", "json",
            ).stdout
        )["items"]  # fmt: skip
        return {
            (address, port["port"])
            for s in slices
            for e in s.get("endpoints") or []
            if (e.get("conditions") or {}).get("ready")
            for address in e["addresses"]
            for port in s.get("ports") or []
        }

    eventually(lambda: endpoints() and {ip for ip, _ in endpoints()} <= ips, timeout=60)
    assert {port for _, port in endpoints()} == {8443}


def test_a_metrics_reader_token_reads_the_metrics_and_others_are_refused(
    kube: Environment, tokens: dict[str, str]
) -> None:
    address = service_address(kube)
    eventually(lambda: scrape(address, tokens["reader"])[0] == 200, timeout=60)
    status, body = scrape(address, tokens["reader"])
    assert status == 200
    assert "ome_tpu_slice_created_total" in body
    status, body = scrape(address, tokens["stranger"])
    assert status == 403, body
    assert f"system:serviceaccount:{NAMESPACE}:stranger" in body
    assert "ome_tpu_slice" not in body
    assert scrape(address, None) == (401, "Unauthorized\n")
    assert scrape(address, "not-a-token")[0] == 401
    # Plain HTTP gets nothing.
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read()


def test_the_api_servers_service_proxy_passes_no_token_on(
    kube: Environment, tokens: dict[str, str]
) -> None:
    proxied = f"/api/v1/namespaces/{RUNNING}/services/https:{SERVICE}:https/proxy/metrics"
    reader = f"--as=system:serviceaccount:{NAMESPACE}:reader"
    refused = kube.kubectl("get", "--raw", proxied, reader, check=False)
    assert refused.returncode != 0
    assert 'cannot get resource "services/proxy"' in refused.stderr, refused.stderr
    # The cluster's admin is let through by the API server, which drops the credentials it
    # authenticated: the manager sees a request without a token.
    through = kube.kubectl("get", "--raw", proxied, check=False)
    assert through.returncode != 0
    # A 401, as kubectl words it: the manager's, since the same credentials read the
    # Service itself.
    assert "the server has asked for the client to provide credentials" in through.stderr, (
        through.stderr
    )
    kube.kubectl("get", "--raw", f"/api/v1/namespaces/{RUNNING}/services/{SERVICE}")

"""The manager's metrics in the chart: the Service in front of its metrics port, the
ServiceMonitor that scrapes that Service, and the RBAC of the secure endpoint (the manager's
TokenReviews and SubjectAccessReviews, the scrapers' get on /metrics), rendered by the real
helm (test_chart.py's); config/'s counterparts are checked against the chart there and in
test_rbac.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from test.unit.test_chart import NAMESPACE, RELEASE, deployment, one, render

JSON = dict[str, Any]

SERVICE = "ome-controller-manager-metrics-service"
MONITOR = "ome-controller-manager-metrics-monitor"
TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def selects(selector: JSON, labels: JSON) -> bool:
    """Whether a matchLabels selector selects an object with ``labels``."""
    return bool(selector) and selector.items() <= labels.items()


def manager_container(docs: list[JSON]) -> JSON:
    (container,) = deployment(docs)["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


@pytest.mark.parametrize(
    ("release", "namespace", "args"),
    [
        (RELEASE, NAMESPACE, ()),
        ("other", "monitoring-test", ()),
        (RELEASE, NAMESPACE, ("--set", "metrics.secure=false", "--set", "metrics.port=9090")),
    ],
    ids=["guide", "other-release", "insecure"],
)
def test_the_service_monitor_selects_the_metrics_service_and_names_its_port(
    release: str, namespace: str, args: tuple[str, ...]
) -> None:
    docs = render(
        "--set",
        "metrics.serviceMonitor.enabled=true",
        *args,
        release=release,
        namespace=namespace,
    )
    service = one(docs, "Service", SERVICE)
    monitor = one(docs, "ServiceMonitor", MONITOR)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == namespace
    spec = monitor["spec"]
    # it selects the metrics Service of this release, and no other Service the chart renders
    assert selects(spec["selector"]["matchLabels"], service["metadata"]["labels"])
    assert spec["selector"]["matchLabels"]["app.kubernetes.io/instance"] == release
    others = [d for d in docs if d["kind"] == "Service" and d is not service]
    assert others
    for other in others:
        assert not selects(spec["selector"]["matchLabels"], other["metadata"]["labels"])
    assert spec["namespaceSelector"] == {"matchNames": [service["metadata"]["namespace"]]}
    (endpoint,) = spec["endpoints"]
    assert endpoint["port"] in [p["name"] for p in service["spec"]["ports"]]
    assert endpoint["path"] == "/metrics"


def test_the_metrics_service_sends_scrapes_to_the_managers_metrics_port() -> None:
    docs = render("--set", "metrics.port=9100")
    service = one(docs, "Service", SERVICE)
    assert service["metadata"]["namespace"] == NAMESPACE
    assert {
        k: v for k, v in service["metadata"]["labels"].items() if not k.startswith("helm.sh/")
    } == {
        "control-plane": "ome-controller-manager",
        "app.kubernetes.io/name": "ome-manager",
        "app.kubernetes.io/component": "metrics",
        "app.kubernetes.io/managed-by": "Helm",
        "app.kubernetes.io/instance": RELEASE,
    }
    deploy = deployment(docs)
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    assert selects(service["spec"]["selector"], deploy["spec"]["template"]["metadata"]["labels"])
    (port,) = service["spec"]["ports"]
    assert port == {"name": "https", "port": 9100, "targetPort": "metrics", "protocol": "TCP"}
    container = manager_container(docs)
    (target,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    assert target == {"name": "metrics", "containerPort": 9100, "protocol": "TCP"}
    assert "--metrics-bind-address=:9100" in container["args"]


def test_a_secure_scrape_is_https_with_the_service_account_token() -> None:
    docs = render("--set", "metrics.serviceMonitor.enabled=true")
    (endpoint,) = one(docs, "ServiceMonitor", MONITOR)["spec"]["endpoints"]
    assert endpoint == {
        "port": "https",
        "path": "/metrics",
        "scheme": "https",
        "bearerTokenFile": TOKEN_FILE,
        # the manager's certificate is self-signed
        "tlsConfig": {"insecureSkipVerify": True},
    }
    assert not any(a.startswith("--metrics-secure") for a in manager_container(docs)["args"])


def test_an_insecure_scrape_is_plain_http_without_a_token() -> None:
    docs = render(
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.secure=false",
        "--set",
        "metrics.serviceMonitor.interval=1m",
        "--set",
        "metrics.serviceMonitor.scrapeTimeout=30s",
    )
    (endpoint,) = one(docs, "ServiceMonitor", MONITOR)["spec"]["endpoints"]
    assert endpoint == {
        "port": "http",
        "path": "/metrics",
        "scheme": "http",
        "interval": "1m",
        "scrapeTimeout": "30s",
    }
    assert "--metrics-secure=false" in manager_container(docs)["args"]
    names = {d["metadata"]["name"] for d in docs if d["kind"].startswith("ClusterRole")}
    assert names == {"ome-manager-role", "ome-manager-rolebinding"}


def test_the_metrics_reader_grants_exactly_get_on_metrics() -> None:
    reader = one(render(), "ClusterRole", "ome-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert "namespace" not in reader["metadata"]


@pytest.mark.parametrize("account", [None, "team-sa"])
def test_the_manager_may_review_tokens_and_access_and_nothing_more(account: str | None) -> None:
    args = ("--set", f"serviceAccount.name={account}") if account else ()
    docs = render(*args, namespace="ome-elsewhere")
    role = one(docs, "ClusterRole", "ome-metrics-auth-role")
    assert role["rules"] == [
        {
            "apiGroups": ["authentication.k8s.io"],
            "resources": ["tokenreviews"],
            "verbs": ["create"],
        },
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["subjectaccessreviews"],
            "verbs": ["create"],
        },
    ]
    binding = one(docs, "ClusterRoleBinding", "ome-metrics-auth-rolebinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "ome-metrics-auth-role",
    }
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": deployment(docs)["spec"]["template"]["spec"]["serviceAccountName"],
            "namespace": "ome-elsewhere",
        }
    ]
    assert binding["subjects"][0]["name"] == (account or "ome-controller-manager")


def test_the_service_monitor_is_off_by_default() -> None:
    assert [d for d in render() if d["kind"] == "ServiceMonitor"] == []

"""Each of the chart's operating values, rendered by the real helm where it belongs.

A table: each row sets one value (``helm template --set ...``) and reads the place it must
show up in (the Deployment's pod spec or container, the ServiceAccount, the bindings, the
webhook configuration); the same place read without the value must hold the default, so a
row whose value landed nowhere fails (a row may set others first, e.g. a ServiceMonitor's
labels need the ServiceMonitor). Then the objects that exist only with some values (the
PodDisruptionBudget, the ResourceQuota, cert-manager's Certificate and Issuer), and
``helm lint --strict`` with every value set at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from test.unit.test_chart import CHART, NAMESPACE, deployment, helm, one, render

JSON = dict[str, Any]
Docs = list[JSON]

ISSUER = {"name": "ome-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
ENV = [
    {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://collector.observability:4317"},
    {"name": "OTEL_EXPORTER_OTLP_PROTOCOL", "value": "grpc"},
]
AFFINITY = {
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"control-plane": "ome-controller-manager"}},
                },
            }
        ]
    }
}
SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"control-plane": "ome-controller-manager"}},
    }
]
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "fsGroup": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
CHART_ARGS = [
    "--leader-elect",
    "--metrics-bind-address=:8443",
    "--health-probe-bind-address=:8081",
    "--webhook-bind-address=:9443",
    "--webhook-secret-name=ome-webhook-server-cert",
    "--webhook-config-name=ome-inferencereplica-webhook",
    "--webhook-service-name=ome-webhook-service",
]


def pod(docs: Docs) -> JSON:
    spec: JSON = deployment(docs)["spec"]["template"]["spec"]
    return spec


def container(docs: Docs) -> JSON:
    (manager,) = pod(docs)["containers"]
    assert isinstance(manager, dict)
    return manager


def service_account(docs: Docs) -> JSON | None:
    found = [d for d in docs if d["kind"] == "ServiceAccount"]
    assert len(found) <= 1
    return found[0] if found else None


def bound_accounts(docs: Docs) -> set[str]:
    """Every ServiceAccount the RoleBindings and the ClusterRoleBinding bind."""
    return {
        subject["name"]
        for d in docs
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
        for subject in d["subjects"]
    }


def webhook_annotations(docs: Docs) -> JSON:
    hook = one(docs, "ValidatingWebhookConfiguration")
    annotations: JSON = hook["metadata"].get("annotations", {})
    return annotations


def kinds(docs: Docs, *wanted: str) -> list[tuple[str, str]]:
    return sorted((d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in wanted)


METRICS_SERVICE = "ome-controller-manager-metrics-service"
SERVICE_MONITOR = "ome-controller-manager-metrics-monitor"
#: The metrics endpoint's RBAC (metrics.secure): the scrapers' ClusterRole, and the manager's
#: TokenReviews and SubjectAccessReviews.
METRICS_RBAC = [
    ("ClusterRole", "ome-metrics-auth-role"),
    ("ClusterRole", "ome-metrics-reader"),
    ("ClusterRoleBinding", "ome-metrics-auth-rolebinding"),
]
MONITOR_ON = ("--set", "metrics.serviceMonitor.enabled=true")


def metrics_service(docs: Docs) -> JSON:
    return one(docs, "Service", METRICS_SERVICE)


def monitor_endpoint(docs: Docs) -> JSON:
    (endpoint,) = one(docs, "ServiceMonitor", SERVICE_MONITOR)["spec"]["endpoints"]
    assert isinstance(endpoint, dict)
    return endpoint


def added_labels(obj: JSON) -> JSON:
    """An object's labels less the chart's own (app.kubernetes.io/*, helm.sh/chart)."""
    return {
        k: v
        for k, v in obj["metadata"]["labels"].items()
        if not k.startswith(("app.kubernetes.io/", "helm.sh/"))
    }


@dataclass(frozen=True)
class Row:
    """One value: the helm arguments that set it, where it shows up, what is there then, and
    what is there without it."""

    value: str
    args: tuple[str, ...]
    where: Callable[[Docs], Any]
    rendered: Any
    default: Any
    #: Set in both renders, before the value: what the value's place needs to exist.
    given: tuple[str, ...] = ()


def _json(value: Any) -> str:
    return json.dumps(value)


ROWS = [
    Row(
        "extraArgs",
        ("--set-json", '["--webhook-host=ome.example.com", "--leader-elect-retry-period=3"]'),
        lambda d: container(d)["args"],
        [*CHART_ARGS, "--webhook-host=ome.example.com", "--leader-elect-retry-period=3"],
        CHART_ARGS,
    ),
    Row(
        "env",
        ("--set-json", _json(ENV)),
        lambda d: [e["name"] for e in container(d)["env"]],
        ["POD_NAMESPACE", "POD_NAME", *(e["name"] for e in ENV)],
        ["POD_NAMESPACE", "POD_NAME"],
    ),
    Row(
        "logLevel",
        ("--set", "debug"),
        lambda d: [a for a in container(d)["args"] if a.startswith("--log-")],
        ["--log-level=debug"],
        [],
    ),
    Row(
        "logFormat",
        ("--set", "json"),
        lambda d: [a for a in container(d)["args"] if a.startswith("--log-")],
        ["--log-format=json"],
        [],
    ),
    Row(
        "imagePullSecrets",
        ("--set-json", '[{"name": "ghcr-pull"}]'),
        lambda d: pod(d).get("imagePullSecrets"),
        [{"name": "ghcr-pull"}],
        None,
    ),
    Row(
        "serviceAccount.annotations",
        ("--set-json", '{"iam.gke.io/gcp-service-account": "ome@p.iam.gserviceaccount.com"}'),
        lambda d: (service_account(d) or {})["metadata"].get("annotations"),
        {"iam.gke.io/gcp-service-account": "ome@p.iam.gserviceaccount.com"},
        None,
    ),
    Row(
        "serviceAccount.name",
        ("--set", "ome-manager-sa"),
        lambda d: (
            (service_account(d) or {})["metadata"]["name"],
            pod(d)["serviceAccountName"],
            bound_accounts(d),
        ),
        ("ome-manager-sa", "ome-manager-sa", {"ome-manager-sa"}),
        ("ome-controller-manager", "ome-controller-manager", {"ome-controller-manager"}),
    ),
    Row(
        "priorityClassName",
        ("--set", "ome-high"),
        lambda d: (pod(d).get("priorityClassName"), kinds(d, "ResourceQuota")),
        ("ome-high", []),
        ("system-cluster-critical", [("ResourceQuota", "ome-critical-pods")]),
    ),
    Row(
        "affinity",
        ("--set-json", _json(AFFINITY)),
        lambda d: pod(d).get("affinity"),
        AFFINITY,
        None,
    ),
    Row(
        "topologySpreadConstraints",
        ("--set-json", _json(SPREAD)),
        lambda d: pod(d).get("topologySpreadConstraints"),
        SPREAD,
        None,
    ),
    Row(
        "podSecurityContext",
        ("--set-json", '{"fsGroup": 2000, "runAsUser": null}'),
        lambda d: pod(d).get("securityContext"),
        {k: v for k, v in {**POD_SECURITY, "fsGroup": 2000}.items() if k != "runAsUser"},
        POD_SECURITY,
    ),
    Row(
        "securityContext",
        ("--set-json", '{"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}'),
        lambda d: container(d).get("securityContext"),
        {**CONTAINER_SECURITY, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}},
        CONTAINER_SECURITY,
    ),
    Row(
        "replicas",
        ("--set", "3"),
        lambda d: (
            deployment(d)["spec"]["replicas"],
            kinds(d, "PodDisruptionBudget"),
            one(d, "ResourceQuota")["spec"]["hard"],
        ),
        (3, [("PodDisruptionBudget", "ome-controller-manager")], {"pods": "8"}),
        (1, [], {"pods": "4"}),
    ),
    Row(
        "webhook.certManager.enabled",
        ("--set", "true"),
        lambda d: (
            kinds(d, "Certificate", "Issuer", "Secret"),
            webhook_annotations(d),
            [a for a in container(d)["args"] if a.startswith("--webhook-")],
        ),
        (
            [("Certificate", "ome-serving-cert"), ("Issuer", "ome-selfsigned-issuer")],
            {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/ome-serving-cert"},
            [
                "--webhook-bind-address=:9443",
                "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs",
                "--webhook-service-name=ome-webhook-service",
            ],
        ),
        (
            [("Secret", "ome-webhook-server-cert")],
            {},
            [a for a in CHART_ARGS if a.startswith("--webhook-")],
        ),
    ),
    Row(
        "metrics.port",
        ("--set", "8444"),
        lambda d: (
            [a for a in container(d)["args"] if a.startswith("--metrics-")],
            [p["containerPort"] for p in container(d)["ports"] if p["name"] == "metrics"],
            [(p["port"], p["targetPort"]) for p in metrics_service(d)["spec"]["ports"]],
        ),
        (["--metrics-bind-address=:8444"], [8444], [(8444, "metrics")]),
        (["--metrics-bind-address=:8443"], [8443], [(8443, "metrics")]),
    ),
    Row(
        "metrics.secure",
        ("--set", "false"),
        lambda d: (
            [a for a in container(d)["args"] if a.startswith("--metrics-")],
            [p["name"] for p in metrics_service(d)["spec"]["ports"]],
            kinds(d, "ClusterRole", "ClusterRoleBinding"),
        ),
        (
            ["--metrics-bind-address=:8443", "--metrics-secure=false"],
            ["http"],
            [
                ("ClusterRole", "ome-manager-role"),
                ("ClusterRoleBinding", "ome-manager-rolebinding"),
            ],
        ),
        (
            ["--metrics-bind-address=:8443"],
            ["https"],
            sorted(
                [
                    ("ClusterRole", "ome-manager-role"),
                    ("ClusterRoleBinding", "ome-manager-rolebinding"),
                    *METRICS_RBAC,
                ]
            ),
        ),
    ),
    Row(
        "metrics.serviceMonitor.enabled",
        ("--set", "true"),
        lambda d: kinds(d, "ServiceMonitor"),
        [("ServiceMonitor", SERVICE_MONITOR)],
        [],
    ),
    Row(
        "metrics.serviceMonitor.labels",
        ("--set-json", '{"release": "kube-prometheus-stack"}'),
        lambda d: added_labels(one(d, "ServiceMonitor", SERVICE_MONITOR)),
        {"release": "kube-prometheus-stack"},
        {},
        given=MONITOR_ON,
    ),
    Row(
        "metrics.serviceMonitor.interval",
        ("--set", "15s"),
        lambda d: monitor_endpoint(d).get("interval"),
        "15s",
        None,
        given=MONITOR_ON,
    ),
    Row(
        "metrics.serviceMonitor.scrapeTimeout",
        ("--set", "10s"),
        lambda d: monitor_endpoint(d).get("scrapeTimeout"),
        "10s",
        None,
        given=MONITOR_ON,
    ),
]


def _set(row: Row) -> tuple[str, str]:
    how, value = row.args
    return how, f"{row.value}={value}"


@pytest.mark.parametrize("row", ROWS, ids=[r.value for r in ROWS])
def test_each_value_shows_up_where_it_belongs(row: Row) -> None:
    assert row.where(render(*row.given)) == row.default
    assert row.where(render(*row.given, *_set(row))) == row.rendered


#: Values whose place is checked by another test: test_chart.py's
#: test_values_show_up_where_they_should and its ConfigMap tests, the tests below,
#: test_alerts.py (metrics.prometheusRule) and test_dashboard.py (metrics.dashboard).
TESTED_ELSEWHERE = {
    "metrics.prometheusRule",
    "metrics.dashboard",
    "image",
    "nodeSelector",
    "tolerations",
    "resources",
    "podAnnotations",
    "ome",
    "serviceAccount.create",
    "webhook.certManager.issuerRef",
}


def _names(values: JSON, prefix: str = "") -> list[str]:
    """values.yaml's values, the chart's own groups (serviceAccount, webhook, metrics) opened."""
    names = []
    for key, value in values.items():
        if key in ("serviceAccount", "webhook", "certManager", "metrics", "serviceMonitor"):
            names += _names(value, f"{prefix}{key}.")
        else:
            names.append(f"{prefix}{key}")
    return names


def test_every_value_of_values_yaml_is_in_the_table_or_tested_elsewhere() -> None:
    names = _names(yaml.safe_load((CHART / "values.yaml").read_text()))
    tabled = [row.value for row in ROWS]
    assert sorted(set(names) - set(tabled) - TESTED_ELSEWHERE) == []
    assert set(tabled) <= set(names)


# -- objects that exist only with some values -------------------------------------------------


def test_service_account_create_false_uses_the_named_existing_account() -> None:
    docs = render("--set", "serviceAccount.create=false", "--set", "serviceAccount.name=team-sa")
    assert service_account(docs) is None
    assert pod(docs)["serviceAccountName"] == "team-sa"
    assert bound_accounts(docs) == {"team-sa"}
    docs = render("--set", "serviceAccount.create=false")
    assert service_account(docs) is None
    assert pod(docs)["serviceAccountName"] == "ome-controller-manager"


@pytest.mark.parametrize("replicas", [0, 1, 2, 5])
def test_the_pdb_exists_only_with_more_than_one_replica_and_selects_the_managers_pods(
    replicas: int,
) -> None:
    docs = render("--set", f"replicas={replicas}")
    pdbs = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    if replicas <= 1:
        assert pdbs == []
        return
    (pdb,) = pdbs
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["metadata"]["namespace"] == NAMESPACE
    labels = deployment(docs)["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize(
    ("priority_class", "quota"),
    [
        ("system-cluster-critical", True),
        ("system-node-critical", True),
        ("ome-high", False),
        ("", False),
    ],
)
def test_the_resource_quota_admits_exactly_the_priority_class_on_gke(
    priority_class: str, quota: bool
) -> None:
    docs = render("--set", f"priorityClassName={priority_class}", "--set", "replicas=2")
    assert pod(docs).get("priorityClassName") == (priority_class or None)
    quotas = [d for d in docs if d["kind"] == "ResourceQuota"]
    assert bool(quotas) == quota
    if quota:
        (rq,) = quotas
        assert rq["metadata"]["namespace"] == NAMESPACE
        # the manager's pods, through a rollout with maxSurge 1 and pods still terminating
        assert rq["spec"]["hard"] == {"pods": "6"}
        assert rq["spec"]["scopeSelector"] == {
            "matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": [priority_class]}
            ]
        }


def test_cert_manager_certifies_the_webhook_service_into_the_mounted_secret() -> None:
    docs = render("--set", "webhook.certManager.enabled=true", namespace="ome-system")
    cert = one(docs, "Certificate", "ome-serving-cert")
    issuer = one(docs, "Issuer", "ome-selfsigned-issuer")
    assert cert["apiVersion"] == issuer["apiVersion"] == "cert-manager.io/v1"
    assert issuer["spec"] == {"selfSigned": {}}
    assert cert["metadata"]["namespace"] == issuer["metadata"]["namespace"] == "ome-system"
    assert cert["spec"]["issuerRef"] == {
        "name": "ome-selfsigned-issuer",
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    service = one(docs, "Service", "ome-webhook-service")
    assert cert["spec"]["dnsNames"] == [
        "ome-webhook-service.ome-system.svc",
        "ome-webhook-service.ome-system.svc.cluster.local",
    ]
    hook = one(docs, "ValidatingWebhookConfiguration")
    assert hook["webhooks"][0]["clientConfig"]["service"]["name"] == service["metadata"]["name"]
    assert webhook_annotations(docs) == {
        "cert-manager.io/inject-ca-from": "ome-system/ome-serving-cert"
    }
    # the manager serves the Secret cert-manager fills, mounted where --webhook-cert-dir says
    (volume,) = [v for v in pod(docs)["volumes"] if v["name"] == "webhook-certs"]
    assert volume["secret"]["secretName"] == cert["spec"]["secretName"]
    (mount,) = [m for m in container(docs)["volumeMounts"] if m["name"] == "webhook-certs"]
    assert f"--webhook-cert-dir={mount['mountPath']}" in container(docs)["args"]
    assert not any(
        a.startswith(("--webhook-secret-name", "--webhook-config-name"))
        for a in container(docs)["args"]
    )


def test_cert_manager_with_an_issuer_ref_renders_no_issuer() -> None:
    docs = render(
        "--set",
        "webhook.certManager.enabled=true",
        "--set-json",
        f"webhook.certManager.issuerRef={_json(ISSUER)}",
    )
    assert kinds(docs, "Issuer") == []
    assert one(docs, "Certificate")["spec"]["issuerRef"] == ISSUER
    docs = render(
        "--set",
        "webhook.certManager.enabled=true",
        "--set",
        "webhook.certManager.issuerRef.name=team-issuer",
    )
    assert one(docs, "Certificate")["spec"]["issuerRef"] == {
        "name": "team-issuer",
        "kind": "Issuer",
        "group": "cert-manager.io",
    }


# -- everything at once -----------------------------------------------------------------------


EVERY_VALUE: JSON = {
    "replicas": 3,
    "imagePullSecrets": [{"name": "ghcr-pull"}],
    "serviceAccount": {
        "create": True,
        "name": "ome-manager-sa",
        "annotations": {"iam.gke.io/gcp-service-account": "ome@p.iam.gserviceaccount.com"},
    },
    "logLevel": "debug",
    "logFormat": "json",
    "extraArgs": ["--leader-elect-retry-period=3"],
    "env": ENV,
    "priorityClassName": "system-cluster-critical",
    "affinity": AFFINITY,
    "topologySpreadConstraints": SPREAD,
    "podSecurityContext": {"fsGroup": 2000},
    "securityContext": {"readOnlyRootFilesystem": True},
    "webhook": {"certManager": {"enabled": True, "issuerRef": ISSUER}},
    "metrics": {
        "port": 8444,
        "secure": True,
        "serviceMonitor": {
            "enabled": True,
            "labels": {"release": "kube-prometheus-stack"},
            "interval": "15s",
            "scrapeTimeout": "10s",
        },
    },
}


def test_helm_lint_strict_and_template_pass_with_every_value_set(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(EVERY_VALUE))
    out = helm("lint", "--strict", str(CHART), "-f", str(values), check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout
    docs = render(values=values)
    assert kinds(
        docs, "PodDisruptionBudget", "ResourceQuota", "Certificate", "Issuer", "ServiceMonitor"
    ) == [
        ("Certificate", "ome-serving-cert"),
        ("PodDisruptionBudget", "ome-controller-manager"),
        ("ResourceQuota", "ome-critical-pods"),
        ("ServiceMonitor", SERVICE_MONITOR),
    ]
    assert kinds(docs, "ClusterRole", "ClusterRoleBinding") == sorted(
        [
            ("ClusterRole", "ome-manager-role"),
            ("ClusterRoleBinding", "ome-manager-rolebinding"),
            *METRICS_RBAC,
        ]
    )
    assert monitor_endpoint(docs)["port"] == "https"
    assert "--metrics-bind-address=:8444" in container(docs)["args"]
    assert pod(docs)["serviceAccountName"] == "ome-manager-sa"
    assert container(docs)["args"][-3:] == [
        "--log-level=debug",
        "--log-format=json",
        "--leader-elect-retry-period=3",
    ]

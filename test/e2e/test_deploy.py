"""The Helm chart (charts/ome-resources) on a real control plane, next to a running OME.

The environment's OME is either the Helm release ``ome`` in namespace ``ome`` (``ome-sim run
--control-plane kube``, whose manager runs as the Deployment's pod, or hack/kind-e2e.sh's),
or was installed from config/ by ome-sim's own installer (plain creates; ``--manager
process``), with the manager running outside the cluster as ServiceAccount
``ome/ome-controller-manager`` and its ValidatingWebhookConfiguration pointed at
``clientConfig.url`` ``https://127.0.0.1:<port>`` instead of the Service. These tests must
leave it as it is, so:

1. A server-side dry run (``kubectl apply --dry-run=server``, which persists nothing) of the
   chart as the walkthrough installs it (``helm template ome ... --namespace ome -f
   config/samples/values.yaml``, with its CRDs) and of ``kubectl kustomize config/default``:
   kube-apiserver validates and admits every object. The webhook configuration is the one
   exception to ``apply``: merged into the live one, which has a ``url``, the chart's
   ``service`` makes both, which the server rightly refuses ("exactly one of url or service
   is required"); so it is dry-run as the whole object it is (``kubectl replace``).
   Every live object of that OME keeps its resourceVersion.

2. Helm refuses to install the walkthrough's release over that OME: its objects carry no Helm
   ownership metadata (label ``app.kubernetes.io/managed-by: Helm``, annotations
   ``meta.helm.sh/release-name`` and ``-namespace``), and Helm stops at the first one with
   "invalid ownership metadata" before it creates anything (no release record either; checked
   here with ``--dry-run=server``, which goes through the same check). Taking them over
   (``--take-ownership``) is not done: it would rewrite the webhook configuration's
   clientConfig (the route to the out-of-cluster manager), and ``helm uninstall`` would then
   delete the ClusterRole and bindings the running manager works with. So the real install
   goes elsewhere:

3. A real ``helm upgrade --install`` of release ``ome-helm-e2e`` into its own namespace
   ``ome-helm-e2e`` (made by the test), with the walkthrough's values and ``--skip-crds`` (the CRDs
   exist; Helm would skip them anyway, and never deletes them). Names in the namespace are
   config/'s; the cluster-scoped ones start with the release's name
   (``ome-helm-e2e-manager-role``, ``-manager-rolebinding``, ``-inferencereplica-webhook``),
   so nothing collides with the running OME's. The ConfigMap then holds the walkthrough's JSON as
   the walkthrough prints it, the release's ServiceAccount has the Roles in its namespace only, an
   upgrade that changes readyTimeout rolls the Deployment (checksum/config), and ``helm
   uninstall`` plus the namespace's deletion leave nothing behind. The Deployment's pod never
   runs (no kubelet on this control plane; nothing else schedules it), and while the release
   exists its webhook configuration also sees InferenceReplica writes: it cannot be reached,
   and fails open (``failurePolicy: Ignore``), so they go through, as the manager's own.

Skipped where the server enforces no RBAC (the embedded one, which is no kube-apiserver):
``make e2e-kube`` runs these.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ome.tpuslice.types import GUIDE_CONFIG_JSON
from test.e2e.conftest import ROOT, Environment
from test.helpers import eventually
from test.unit.test_chart import CHART, SAMPLE_VALUES, helm_binary

RUNNING = "ome"  # the environment's OME: its namespace, and the walkthrough's release name
RELEASE = "ome-helm-e2e"  # the test's own release, in a namespace of the same name
NAMESPACE = RELEASE

JSON = dict[str, object]


def helm(
    env: Environment, *args: str, check: bool = True, timeout: int = 90
) -> subprocess.CompletedProcess[str]:
    return env.tool(
        helm_binary(), "--kubeconfig", str(env.kubeconfig), *args, check=check, timeout=timeout
    )


def documents(text: str) -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def dry_run(env: Environment, text: str) -> list[str]:
    """Server-side dry run of every object of ``text``: ``kubectl apply``, but a webhook
    configuration that exists is replaced (see the module's docstring); kubectl's lines."""
    docs = documents(text)
    hooks = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    rest = [d for d in docs if d["kind"] != "ValidatingWebhookConfiguration"]
    out = env.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(rest), timeout=120
    )
    lines = out.stdout.splitlines()
    for hook in hooks:
        name = str(_metadata(hook)["name"])
        exists = env.kubectl("get", "validatingwebhookconfiguration", name, check=False)
        verb = "replace" if exists.returncode == 0 else "create"
        out = env.kubectl(verb, "--dry-run=server", "-f", "-", input=yaml.safe_dump(hook))
        lines += out.stdout.splitlines()
    assert all(line.endswith("(server dry run)") for line in lines), lines
    assert len(lines) == len(docs), lines
    return lines


def _metadata(doc: dict[str, object]) -> dict[str, object]:
    meta = doc["metadata"]
    assert isinstance(meta, dict)
    return meta


def snapshot(env: Environment, docs: list[dict[str, object]]) -> dict[str, str]:
    """The resourceVersion of each of ``docs`` that exists live (kind/namespace/name)."""
    seen: dict[str, str] = {}
    for doc in docs:
        meta = _metadata(doc)
        kind, name = str(doc["kind"]), str(meta["name"])
        where = ["-n", str(meta["namespace"])] if "namespace" in meta else []
        out = env.kubectl(
            "get", kind, name, *where, "-o", "jsonpath={.metadata.resourceVersion}", check=False
        )
        if out.returncode == 0:
            seen[f"{kind}/{meta.get('namespace', '')}/{name}"] = out.stdout
    return seen


def guide_chart(*args: str) -> str:
    """The chart as the walkthrough installs it (release ome, namespace ome, its values file)."""
    return subprocess.run(
        [
            helm_binary(),
            "template",
            RUNNING,
            str(CHART),
            "--namespace",
            RUNNING,
            "-f",
            str(SAMPLE_VALUES),
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def entry(env: Environment) -> str:
    """The walkthrough's check, in the release's namespace: the ConfigMap's tpuSliceProvisioning."""
    return env.kubectl(
        "get",
        "configmap",
        "inferenceservice-config",
        "-n",
        NAMESPACE,
        "-o",
        "jsonpath={.data.tpuSliceProvisioning}",
    ).stdout


def kustomized(env: Environment) -> str:
    return env.kubectl("kustomize", str(ROOT / "config" / "default")).stdout


def test_the_server_accepts_the_chart_and_config_default_in_a_dry_run(kube: Environment) -> None:
    chart = guide_chart("--include-crds")
    config = kustomized(kube)
    running = documents(config)
    before = snapshot(kube, running)
    assert before, "the environment's OME is not installed"
    lines = dry_run(kube, chart)
    assert any(line.startswith("deployment.apps/ome-controller-manager") for line in lines)
    dry_run(kube, config)
    assert snapshot(kube, running) == before  # a dry run persists nothing


#: cert-manager, whose CRDs the chart's Certificate and Issuer are written for (cert-manager.io/v1).
CERT_MANAGER = "github.com/cert-manager/cert-manager@v1.21.2"
CERT_MANAGER_CRDS = ("cert-manager.io_certificates.yaml", "cert-manager.io_issuers.yaml")


def module_dir(module: str, tmp_path: Path) -> Path:
    """A Go module's files, fetched through the Go module proxy as make e2e-kube's builds
    are (``go mod download``), for the CRDs a project ships in its repository."""
    go = shutil.which("go")
    assert go is not None, f"needs go on the PATH to fetch {module} (make e2e-kube has it)"
    out = subprocess.run(
        [go, "mod", "download", "-json", module],
        cwd=tmp_path,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, f"go mod download {module}: {out.stderr}{out.stdout}"
    return Path(json.loads(out.stdout)["Dir"])


def install_crds(env: Environment, crds: list[Path]) -> None:
    """Apply the CRD files and wait until the server serves them (the caller deletes them:
    ``kubectl delete -f`` each, in a finally)."""
    names = []
    for crd in crds:
        out = env.kubectl("apply", "--server-side", "-o", "name", "-f", str(crd), timeout=60)
        names += out.stdout.split()
    env.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names, timeout=90)


def cert_manager_crds(tmp_path: Path) -> list[Path]:
    """The Certificate and Issuer CRDs from cert-manager's Go module, as its release ships
    them (deploy/crds)."""
    crds = module_dir(CERT_MANAGER, tmp_path) / "deploy" / "crds"
    return [crds / name for name in CERT_MANAGER_CRDS]


#: The prometheus-operator, whose CRDs the chart's ServiceMonitor and PrometheusRule are
#: written for (monitoring.coreos.com/v1); v0.94.1 is the newest the module proxy serves.
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.94.1"
MONITORING_CRDS = (
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
)
METRICS_SERVICE = "ome-controller-manager-metrics-service"


def monitoring_crds(tmp_path: Path) -> list[Path]:
    """The ServiceMonitor and PrometheusRule CRDs, as the operator's repository ships them
    (example/prometheus-operator-crd)."""
    crds = module_dir(PROMETHEUS_OPERATOR, tmp_path) / "example" / "prometheus-operator-crd"
    return [crds / name for name in MONITORING_CRDS]


def test_the_service_monitor_is_admitted_and_selects_the_metrics_service(
    kube: Environment, tmp_path: Path
) -> None:
    """metrics.serviceMonitor.enabled: the ServiceMonitor is created against the
    prometheus-operator's own CRD, and its selector and namespaceSelector find exactly the
    running manager's metrics Service, on a port that Service has. The PrometheusRule of
    metrics.prometheusRule.enabled is admitted too (a server-side dry run). Skipped where
    the manager runs beside the cluster (``ome-sim run --manager process``): there is no
    metrics Service for a ServiceMonitor to find."""
    probe = kube.kubectl("get", "service", METRICS_SERVICE, "-n", RUNNING, check=False)
    if probe.returncode != 0:
        pytest.skip(
            "the manager runs beside the cluster here, with no metrics Service "
            "(make e2e-kube runs this with the manager as its Deployment's pod)"
        )
    crds = monitoring_crds(tmp_path)
    try:
        install_crds(kube, crds)
        rendered = documents(
            guide_chart(
                "--set", "metrics.serviceMonitor.enabled=true",
                "--set", "metrics.serviceMonitor.labels.release=prometheus",
                "--set", "metrics.prometheusRule.enabled=true",
            )
        )  # fmt: skip
        (monitor,) = [d for d in rendered if d["kind"] == "ServiceMonitor"]
        (rule,) = [d for d in rendered if d["kind"] == "PrometheusRule"]
        created = kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(monitor)).stdout
        assert created.split()[0] == (
            "servicemonitor.monitoring.coreos.com/ome-controller-manager-metrics-monitor"
        ), created
        live = json.loads(
            kube.kubectl(
                "get", "servicemonitor", "ome-controller-manager-metrics-monitor",
                "-n", RUNNING, "-o", "json",
            ).stdout
        )  # fmt: skip
        spec = live["spec"]
        selector = ",".join(f"{k}={v}" for k, v in spec["selector"]["matchLabels"].items())
        found = [
            service
            for namespace in spec["namespaceSelector"]["matchNames"]
            for service in json.loads(
                kube.kubectl(
                    "get", "services", "-n", namespace, "-l", selector, "-o", "json"
                ).stdout
            )["items"]
        ]
        assert [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in found] == [
            (RUNNING, METRICS_SERVICE)
        ]
        ports = {p["name"] for p in found[0]["spec"]["ports"]}
        assert [e["port"] for e in spec["endpoints"]] == ["https"]
        assert "https" in ports
        assert live["metadata"]["labels"]["release"] == "prometheus"
        lines = dry_run(kube, yaml.safe_dump(rule))
        assert lines == [
            "prometheusrule.monitoring.coreos.com/ome-tpu-slice-alerts created (server dry run)"
        ]
    finally:
        kube.kubectl(
            "delete", "servicemonitor", "ome-controller-manager-metrics-monitor", "-n", RUNNING,
            "--ignore-not-found", check=False, timeout=60,
        )  # fmt: skip
        for crd in crds:
            kube.kubectl("delete", "--ignore-not-found", "-f", str(crd), timeout=90)


def test_the_cert_manager_objects_are_admitted_by_the_server(
    kube: Environment, tmp_path: Path
) -> None:
    """webhook.certManager.enabled: the Certificate, the self-signed Issuer and the webhook
    configuration with its inject-ca-from annotation pass a server-side dry run against
    cert-manager's own CRDs; so does a Certificate issued by a ClusterIssuer of the user's."""
    crds = cert_manager_crds(tmp_path)
    try:
        install_crds(kube, crds)
        kinds = ("Certificate", "Issuer", "ValidatingWebhookConfiguration")
        rendered = documents(guide_chart("--set", "webhook.certManager.enabled=true"))
        picked = [d for d in rendered if d["kind"] in kinds]
        hook = next(d for d in picked if d["kind"] == "ValidatingWebhookConfiguration")
        annotations = _metadata(hook)["annotations"]
        assert isinstance(annotations, dict)
        assert annotations["cert-manager.io/inject-ca-from"] == f"{RUNNING}/ome-serving-cert"
        lines = dry_run(kube, yaml.safe_dump_all(picked))
        assert {line.split()[0] for line in lines} == {
            "certificate.cert-manager.io/ome-serving-cert",
            "issuer.cert-manager.io/ome-selfsigned-issuer",
            f"validatingwebhookconfiguration.admissionregistration.k8s.io/{RUNNING}-inferencereplica-webhook",
        }, lines
        issued = documents(
            guide_chart(
                "--set", "webhook.certManager.enabled=true",
                "--set", "webhook.certManager.issuerRef.name=corp-ca",
                "--set", "webhook.certManager.issuerRef.kind=ClusterIssuer",
            )
        )  # fmt: skip
        assert not [d for d in issued if d["kind"] == "Issuer"]
        certificate = [d for d in issued if d["kind"] == "Certificate"]
        spec = certificate[0]["spec"]
        assert isinstance(spec, dict)
        assert spec["issuerRef"] == {
            "name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"
        }  # fmt: skip
        lines = dry_run(kube, yaml.safe_dump_all(certificate))
        assert lines == ["certificate.cert-manager.io/ome-serving-cert created (server dry run)"]
    finally:
        for crd in crds:
            kube.kubectl("delete", "--ignore-not-found", "-f", str(crd), timeout=90)


def test_helm_refuses_to_take_over_the_running_ome(kube: Environment) -> None:
    if helm(kube, "status", RUNNING, "--namespace", RUNNING, check=False).returncode == 0:
        pytest.skip(
            "the running OME is the Helm release ome (ome-sim run --manager pod, the default "
            "on the real control plane): test_step1.py upgrades it as the walkthrough does"
        )
    running = documents(kustomized(kube))
    before = snapshot(kube, running)
    out = helm(
        kube,
        "upgrade",
        "--install",
        RUNNING,
        str(CHART),
        "--namespace",
        RUNNING,
        "--skip-crds",
        "-f",
        str(SAMPLE_VALUES),
        "--dry-run=server",
        check=False,
    )
    assert out.returncode != 0, out.stdout
    assert "exists and cannot be imported into the current release" in out.stderr, out.stderr
    assert "invalid ownership metadata" in out.stderr, out.stderr
    records = kube.kubectl("get", "secrets", "-n", RUNNING, "-l", "owner=helm", "-o", "name")
    assert records.stdout.strip() == ""  # no release record
    assert snapshot(kube, running) == before


def _cleanup(env: Environment) -> None:
    """Whatever a run of the test (this one, or one that was interrupted) left behind."""
    if helm(env, "status", RELEASE, "--namespace", NAMESPACE, check=False).returncode == 0:
        helm(env, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", timeout=120)
    env.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", timeout=120)


@pytest.fixture
def own_namespace(kube: Environment) -> Iterator[Environment]:
    _cleanup(kube)
    kube.kubectl("create", "namespace", NAMESPACE)
    try:
        yield kube
    finally:
        _cleanup(kube)


def install(env: Environment, values: Path) -> None:
    helm(
        env,
        "upgrade",
        "--install",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--skip-crds",
        "-f",
        str(values),
    )


def pod_checksum(env: Environment) -> str:
    return env.kubectl(
        "get",
        "deployment",
        "ome-controller-manager",
        "-n",
        NAMESPACE,
        "-o",
        "jsonpath={.spec.template.metadata.annotations.checksum/config}",
    ).stdout


def test_a_real_install_in_its_own_namespace(own_namespace: Environment, tmp_path: Path) -> None:
    env = own_namespace
    running = documents(kustomized(env))
    before = snapshot(env, running)

    install(env, SAMPLE_VALUES)
    status = json.loads(helm(env, "status", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"

    # The walkthrough's check, in the release's namespace: the JSON it prints.
    printed = entry(env)
    assert printed == GUIDE_CONFIG_JSON

    # The docs' `kubectl logs -l` selector finds the Deployment's pods.
    deploys = env.kubectl(
        "get",
        "deployment",
        "-n",
        NAMESPACE,
        "-l",
        "control-plane=ome-controller-manager",
        "-o",
        "name",
    ).stdout.split()
    assert deploys == ["deployment.apps/ome-controller-manager"]
    eventually(
        lambda: (
            env.kubectl(
                "get",
                "pods",
                "-n",
                NAMESPACE,
                "-l",
                "control-plane=ome-controller-manager",
                "-o",
                "name",
            ).stdout.strip()
            != ""
        ),
        timeout=30,
        interval=0.5,
    )

    # Cluster-scoped names carry the release's name; the release's ServiceAccount has the
    # Roles in its own namespace, and not in the running OME's.
    for kind, name in (
        ("clusterrole", f"{RELEASE}-manager-role"),
        ("clusterrolebinding", f"{RELEASE}-manager-rolebinding"),
        ("validatingwebhookconfiguration", f"{RELEASE}-inferencereplica-webhook"),
    ):
        env.kubectl("get", kind, name)
    hook = json.loads(
        env.kubectl(
            "get",
            "validatingwebhookconfiguration",
            f"{RELEASE}-inferencereplica-webhook",
            "-o",
            "json",
        ).stdout
    )
    assert hook["webhooks"][0]["clientConfig"]["service"]["namespace"] == NAMESPACE
    sa = f"--as=system:serviceaccount:{NAMESPACE}:ome-controller-manager"

    def can_i(*args: str) -> str:
        out = env.kubectl("auth", "can-i", *args, sa, check=False)
        assert out.returncode in (0, 1), out.stderr
        return out.stdout.strip()

    assert can_i("get", "configmaps/inferenceservice-config", "-n", NAMESPACE) == "yes"
    assert (
        can_i("update", "leases.coordination.k8s.io/ome-controller-manager", "-n", NAMESPACE)
        == "yes"
    )
    assert can_i("create", "slices.accelerator.gke.io") == "yes"
    assert can_i("get", "configmaps/inferenceservice-config", "-n", RUNNING) == "no"
    assert (
        can_i("update", f"validatingwebhookconfigurations/{RELEASE}-inferencereplica-webhook")
        == "yes"
    )
    assert can_i("update", "validatingwebhookconfigurations/ome-inferencereplica-webhook") == "no"

    # An upgrade that changes the ConfigMap rolls the Deployment (checksum/config).
    first = pod_checksum(env)
    slower = tmp_path / "values.yaml"
    slower.write_text(SAMPLE_VALUES.read_text().replace("readyTimeout: 10m", "readyTimeout: 20m"))
    install(env, slower)
    assert pod_checksum(env) != first
    printed = entry(env)
    assert json.loads(printed)["slice"]["readyTimeout"] == "20m"
    eventually(
        lambda: (
            len(env.kubectl("get", "replicasets", "-n", NAMESPACE, "-o", "name").stdout.split())
            == 2
        ),
        timeout=30,
        interval=0.5,
    )

    # The running OME is as it was.
    assert snapshot(env, running) == before

    helm(env, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", timeout=120)
    for kind, name in (
        ("clusterrole", f"{RELEASE}-manager-role"),
        ("clusterrolebinding", f"{RELEASE}-manager-rolebinding"),
        ("validatingwebhookconfiguration", f"{RELEASE}-inferencereplica-webhook"),
    ):
        assert env.kubectl("get", kind, name, check=False).returncode != 0, (kind, name)
    left = env.kubectl(
        "get",
        "deployments,services,configmaps,secrets,roles,rolebindings,serviceaccounts",
        "-n",
        NAMESPACE,
        "-l",
        f"app.kubernetes.io/instance={RELEASE}",
        "-o",
        "name",
    ).stdout.split()
    assert left == []
    assert snapshot(env, running) == before

"""The Helm chart charts/ome-resources renders what config/ (kustomize) says, templated.

config/ is the source of truth: with the walkthrough's release name and namespace (``ome``) and the
chart's default values, every object of config/default but the Namespace is rendered as it
is there, apart from the Helm labels and the pods' ``checksum/config`` annotation; the CRDs in
the chart's crds/ are byte for byte config/crd's. The walkthrough's Step 1 values file
(config/samples/values.yaml) gives the ConfigMap the walkthrough's JSON, and the values show up
where they should.

helm is the pinned one of hack/helm.sh (which installs it when it is missing); a machine
where that fails fails these tests, with the script's own words: they are never skipped.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ome import __version__
from ome.entrypoints.checkconfig import config_block
from ome.tpuslice.types import GUIDE_CONFIG_JSON

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "ome-resources"
CONFIG = ROOT / "config"
SAMPLE_VALUES = CONFIG / "samples" / "values.yaml"
RELEASE = "ome"  # the walkthrough's: helm upgrade --install ome ... --namespace ome
NAMESPACE = "ome"
#: What _helpers.tpl adds to config/'s labels.
HELM_LABELS = {
    "helm.sh/chart": f"ome-resources-{__version__}",
    "app.kubernetes.io/managed-by": "Helm",
    "app.kubernetes.io/instance": RELEASE,
}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration"}
#: What the chart adds to config/default's objects with its default values (values.yaml's
#: priorityClassName says why): the manager pods' priority class, and the ResourceQuota GKE
#: needs to admit pods of that class in the namespace. config/ has neither.
PRIORITY_CLASS = "system-cluster-critical"
CHART_ONLY = {("ResourceQuota", "ome-critical-pods")}
#: What the chart renders only with some values, which config/ has no counterpart of: the
#: ServiceMonitor, the PrometheusRule and the Grafana dashboard (metrics.*.enabled).
CHART_ONLY_METRICS = {
    ("ServiceMonitor", "ome-controller-manager-metrics-monitor"),
    ("PrometheusRule", "ome-tpu-slice-alerts"),
    ("ConfigMap", "ome-tpu-slice-dashboard"),
}
METRICS_ON = (
    "--set",
    "metrics.serviceMonitor.enabled=true",
    "--set",
    "metrics.prometheusRule.enabled=true",
    "--set",
    "metrics.dashboard.enabled=true",
)
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

JSON = dict[str, Any]


@functools.cache
def _run_helm_sh() -> tuple[str | None, str]:
    """hack/helm.sh, run once from the repository's root: the helm binary's path, or why
    there is none."""
    try:
        proc = subprocess.run(
            ["bash", str(ROOT / "hack" / "helm.sh")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"hack/helm.sh could not run: {e}"
    path = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0 or not path or not Path(path).is_file():
        return None, (
            f"hack/helm.sh failed (exit {proc.returncode}), so there is no helm to check the "
            f"chart with:\n{proc.stderr.strip()}\n{proc.stdout.strip()}"
        )
    return path, ""


def helm_binary() -> str:
    """The path hack/helm.sh prints; the calling test fails with the script's output when
    it cannot (never skips)."""
    path, why = _run_helm_sh()
    if path is None:
        pytest.fail(why, pytrace=False)
    return path


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [helm_binary(), *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}{proc.stdout}")
    return proc


def template_text(
    *args: str, release: str = RELEASE, namespace: str = NAMESPACE, values: Path | None = None
) -> str:
    """``helm template`` of the chart (from the repository's root), as it prints it."""
    extra = ["-f", str(values)] if values is not None else []
    return helm("template", release, str(CHART), "--namespace", namespace, *extra, *args).stdout


def render(
    *args: str, release: str = RELEASE, namespace: str = NAMESPACE, values: Path | None = None
) -> list[JSON]:
    text = template_text(*args, release=release, namespace=namespace, values=values)
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def one(docs: list[JSON], kind: str, name: str | None = None) -> JSON:
    found = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''} rendered"
    return found[0]


def configmap(docs: list[JSON]) -> JSON:
    return one(docs, "ConfigMap", "inferenceservice-config")


def deployment(docs: list[JSON]) -> JSON:
    return one(docs, "Deployment", "ome-controller-manager")


def checksum(docs: list[JSON]) -> str:
    value = deployment(docs)["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    assert isinstance(value, str)
    return value


def _kustomization(directory: Path) -> JSON:
    for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
        if (directory / name).is_file():
            doc = yaml.safe_load((directory / name).read_text())
            assert isinstance(doc, dict)
            return doc
    raise AssertionError(f"{directory} has no kustomization")


def kustomize(directory: Path) -> Iterator[JSON]:
    """The objects of a kustomization, in order: what ``kubectl kustomize`` prints for this
    tree, which has resources only (no patches, no transformers)."""
    for resource in _kustomization(directory)["resources"]:
        path = (directory / resource).resolve()
        if path.is_dir():
            yield from kustomize(path)
        else:
            yield from (d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))


def config_objects() -> list[JSON]:
    return list(kustomize(CONFIG / "default"))


def without_helm_metadata(obj: JSON) -> JSON:
    """``obj`` less what the chart adds to config/'s: the Helm labels (on the object and on
    a pod template) and the pods' checksum/config annotation."""
    obj = json.loads(json.dumps(obj))
    metas = [obj["metadata"]]
    template = obj.get("spec", {}).get("template") if obj["kind"] == "Deployment" else None
    if template is not None:
        metas.append(template["metadata"])
        template["metadata"].get("annotations", {}).pop("checksum/config", None)
    for meta in metas:
        labels = meta.get("labels", {})
        for key, value in HELM_LABELS.items():
            assert labels.pop(key, None) == value, f"{obj['kind']} lacks label {key}={value}"
    return obj


def key(obj: JSON) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def as_configs(obj: JSON, theirs: JSON) -> JSON:
    """``obj`` less the Helm metadata and, on the Deployment, the chart's priorityClassName
    when config/'s (``theirs``) has none: the chart's one default config/ lacks."""
    obj = without_helm_metadata(obj)
    spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Deployment" else {}
    if spec and "priorityClassName" not in theirs["spec"]["template"]["spec"]:
        assert spec.pop("priorityClassName", None) == PRIORITY_CLASS
    return obj


# -- lint, CRDs, the objects of config/ -------------------------------------------------------


@pytest.mark.parametrize("values", [None, SAMPLE_VALUES], ids=["defaults", "guide-values"])
def test_helm_lint_passes(values: Path | None) -> None:
    extra = ["-f", str(values)] if values is not None else []
    out = helm("lint", "--strict", str(CHART), *extra, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout


def test_chart_yaml_names_the_guides_chart_and_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "ome-resources"
    assert chart["version"] == __version__
    assert chart["appVersion"] == __version__
    assert chart["description"]


def test_the_charts_crds_are_config_crds_byte_for_byte() -> None:
    ours = sorted(p.name for p in (CHART / "crds").iterdir())
    theirs = sorted(p.name for p in (CONFIG / "crd").glob("ome.io_*.yaml"))
    assert ours == theirs
    for name in theirs:
        assert (CHART / "crds" / name).read_bytes() == (CONFIG / "crd" / name).read_bytes(), (
            f"charts/ome-resources/crds/{name} differs from config/crd/{name}: copy it again"
        )


def test_the_templates_render_no_crd_and_no_namespace() -> None:
    kinds = {d["kind"] for d in render()}
    assert "CustomResourceDefinition" not in kinds  # crds/ only: installed first, untemplated
    assert "Namespace" not in kinds  # the release's namespace (helm --namespace)


def test_with_default_values_it_renders_config_default_apart_from_helm_metadata() -> None:
    theirs = {
        key(d): d
        for d in config_objects()
        if d["kind"] not in ("CustomResourceDefinition", "Namespace")
    }
    ours = {key(d): d for d in render()}
    assert sorted(ours) == sorted([*theirs, *CHART_ONLY])
    for k, want in theirs.items():
        assert as_configs(ours[k], want) == want, f"{k[0]} {k[1]} differs from config/'s"


def test_the_crds_of_config_default_are_the_charts() -> None:
    theirs = {
        d["metadata"]["name"]: d
        for d in config_objects()
        if d["kind"] == "CustomResourceDefinition"
    }
    ours = {
        d["metadata"]["name"]: d
        for p in sorted((CHART / "crds").iterdir())
        for d in yaml.safe_load_all(p.read_text())
        if isinstance(d, dict)
    }
    assert ours == theirs


def test_rbac_rules_and_names_are_config_rbacs() -> None:
    theirs = {
        key(d): d
        for p in sorted((CONFIG / "rbac").glob("*.yaml"))
        for d in yaml.safe_load_all(p.read_text())
        if isinstance(d, dict) and d.get("kind") in RBAC_KINDS
    }
    ours = {key(d): d for d in render() if d["kind"] in RBAC_KINDS}
    assert sorted(ours) == sorted(theirs)
    for k, want in theirs.items():
        got = ours[k]
        assert got.get("rules") == want.get("rules"), f"{k}: rules differ"
        assert got.get("roleRef") == want.get("roleRef"), f"{k}: roleRef differs"
        assert got.get("subjects") == want.get("subjects"), f"{k}: subjects differ"
        assert got["metadata"].get("namespace") == want["metadata"].get("namespace")


def test_the_deployment_is_config_managers_apart_from_helm_metadata() -> None:
    theirs = one(
        list(yaml.safe_load_all((CONFIG / "manager" / "manager.yaml").read_text())), "Deployment"
    )
    ours = deployment(render())
    spec, want = ours["spec"]["template"]["spec"], theirs["spec"]["template"]["spec"]
    for field in (
        "containers",
        "volumes",
        "securityContext",
        "serviceAccountName",
        "terminationGracePeriodSeconds",
    ):
        assert spec[field] == want[field], f"pod spec {field} differs"
    (container,) = spec["containers"]
    (wanted,) = want["containers"]
    for field in (
        "image",
        "args",
        "env",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
        "volumeMounts",
        "imagePullPolicy",
    ):
        assert container[field] == wanted[field], f"container {field} differs"
    assert ours["spec"]["strategy"] == theirs["spec"]["strategy"]
    assert as_configs(ours, theirs) == theirs


# -- the ConfigMap and checksum/config --------------------------------------------------------


def test_the_guides_values_give_the_configmap_the_guides_json_byte_for_byte() -> None:
    data = configmap(render(values=SAMPLE_VALUES))["data"]
    assert data["tpuSliceProvisioning"] == GUIDE_CONFIG_JSON
    assert list(data) == ["tpuSliceProvisioning"]


def test_the_guides_values_file_is_the_block_check_config_reads() -> None:
    block = config_block(SAMPLE_VALUES.read_text())
    assert block is not None
    assert json.loads(block) == json.loads(GUIDE_CONFIG_JSON)


def test_the_values_file_is_what_the_sample_configmap_holds() -> None:
    sample = yaml.safe_load((CONFIG / "samples" / "inferenceservice-config.yaml").read_text())
    ours = configmap(render(values=SAMPLE_VALUES))
    assert ours["data"] == sample["data"]


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("--set-json", "ome.controller.tpuSliceProvisioning={}"),
        ("--set-json", 'ome.controller.tpuSliceProvisioning=""'),
        ("--set-json", "ome.controller.tpuSliceProvisioning=null"),
        ("--set-json", "ome.controller=null"),
        ("--set-json", "ome=null"),
    ],
    ids=["unset", "empty-map", "empty-string", "null", "no-controller", "no-ome"],
)
def test_without_the_value_there_is_no_tpu_slice_provisioning_key(args: tuple[str, ...]) -> None:
    cm = configmap(render(*args))
    assert "tpuSliceProvisioning" not in (cm.get("data") or {})


def test_the_default_values_leave_the_key_absent() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert "tpuSliceProvisioning" not in (values["ome"]["controller"] or {})


def test_a_string_value_is_written_as_the_json_text_it_is() -> None:
    text = '{"chipResource": "google.com/tpu"}'
    cm = configmap(render("--set-json", f"ome.controller.tpuSliceProvisioning={json.dumps(text)}"))
    assert cm["data"]["tpuSliceProvisioning"] == text


def test_json_that_needs_escaping_in_yaml_survives() -> None:
    block = json.loads(GUIDE_CONFIG_JSON)
    block["slice"]["annotations"]["example.com/a"] = 'it\'s "quoted"\nand: \\ #not a comment'
    cm = configmap(render("--set-json", f"ome.controller.tpuSliceProvisioning={json.dumps(block)}"))
    assert json.loads(cm["data"]["tpuSliceProvisioning"]) == block


def test_checksum_config_is_the_sha256_of_the_rendered_configmap() -> None:
    text = template_text(values=SAMPLE_VALUES)
    match = re.search(
        r"^---\n# Source: ome-resources/templates/configmap.yaml\n(.*?)(?=^---\n|\Z)",
        text,
        re.MULTILINE | re.DOTALL,
    )
    assert match, text
    docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    assert checksum(docs) == hashlib.sha256(match.group(1).encode()).hexdigest()


def test_checksum_config_changes_when_the_configmap_does_and_only_then(tmp_path: Path) -> None:
    guide = checksum(render(values=SAMPLE_VALUES))
    assert checksum(render(values=SAMPLE_VALUES)) == guide  # the same values, the same sum
    slower = tmp_path / "slower.yaml"
    slower.write_text(SAMPLE_VALUES.read_text().replace("readyTimeout: 10m", "readyTimeout: 20m"))
    assert slower.read_text() != SAMPLE_VALUES.read_text()
    assert checksum(render(values=slower)) != guide
    assert checksum(render()) not in (guide, checksum(render(values=slower)))
    unrelated = [
        ("--set", "replicas=3"),
        ("--set", "podAnnotations.example\\.com/team=serving"),
        ("--set", "image.tag=1.3.1"),
        ("--set", "nodeSelector.pool=system"),
        ("--set", "resources.limits.memory=1Gi"),
    ]
    for args in unrelated:
        assert checksum(render(*args, values=SAMPLE_VALUES)) == guide, args


# -- namespaces, labels, selectors, names -----------------------------------------------------


def _namespace_fields(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "namespace":
                yield f"{path}.{k}", v
            yield from _namespace_fields(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _namespace_fields(v, f"{path}[{i}]")


@pytest.mark.parametrize("namespace", ["ome", "ome-elsewhere"])
def test_everything_namespaced_is_in_the_releases_namespace(namespace: str) -> None:
    docs = render(namespace=namespace, values=SAMPLE_VALUES)
    for doc in docs:
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], key(doc)
        else:
            assert doc["metadata"].get("namespace") == namespace, key(doc)
        # RoleBinding subjects, the webhook's clientConfig.service: every namespace named.
        for where, value in _namespace_fields(doc):
            assert value == namespace, f"{key(doc)} {where} is {value}"
    hook = one(docs, "ValidatingWebhookConfiguration")
    assert hook["webhooks"][0]["clientConfig"]["service"]["namespace"] == namespace
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert [s["namespace"] for s in binding["subjects"]] == [namespace]


def test_the_deployment_and_its_pods_carry_control_plane_and_the_service_selects_them() -> None:
    docs = render(values=SAMPLE_VALUES)
    deploy = deployment(docs)
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert deploy["metadata"]["labels"]["control-plane"] == "ome-controller-manager"
    assert pod_labels["control-plane"] == "ome-controller-manager"
    assert pod_labels["app.kubernetes.io/name"] == "ome-manager"
    # the selector is config/'s, without Helm labels: a selector cannot change later
    assert deploy["spec"]["selector"] == {
        "matchLabels": {"control-plane": "ome-controller-manager"}
    }
    selector = deploy["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    service = one(docs, "Service", "ome-webhook-service")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    hook = one(docs, "ValidatingWebhookConfiguration")
    assert hook["webhooks"][0]["clientConfig"]["service"]["name"] == "ome-webhook-service"
    assert (
        service["spec"]["ports"][0]["port"]
        == hook["webhooks"][0]["clientConfig"]["service"]["port"]
    )


@pytest.mark.parametrize("args", [(), METRICS_ON], ids=["guide-values", "metrics-objects"])
def test_every_object_keeps_configs_labels_and_gets_the_helm_ones(args: tuple[str, ...]) -> None:
    theirs = {key(d): d["metadata"].get("labels", {}) for d in config_objects()}
    docs = render(*args, values=SAMPLE_VALUES)
    if args:
        assert {key(d) for d in docs} >= CHART_ONLY_METRICS
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert theirs.get(key(doc), {}).items() <= labels.items(), key(doc)
        assert key(doc) in theirs or key(doc) in CHART_ONLY | CHART_ONLY_METRICS, key(doc)
        assert HELM_LABELS.items() <= labels.items(), key(doc)


def test_cluster_scoped_names_follow_the_release_and_stay_consistent() -> None:
    docs = render(release="other", namespace="other-ns")
    role = one(docs, "ClusterRole", "other-manager-role")
    binding = one(docs, "ClusterRoleBinding", "other-manager-rolebinding")
    hook = one(docs, "ValidatingWebhookConfiguration")
    assert binding["roleRef"]["name"] == "other-manager-role"
    # the metrics endpoint's: the scrapers' ClusterRole, and the manager's token reviews
    assert sorted(key(d) for d in docs if d["kind"] in CLUSTER_SCOPED) == [
        ("ClusterRole", "other-manager-role"),
        ("ClusterRole", "other-metrics-auth-role"),
        ("ClusterRole", "other-metrics-reader"),
        ("ClusterRoleBinding", "other-manager-rolebinding"),
        ("ClusterRoleBinding", "other-metrics-auth-rolebinding"),
        ("ValidatingWebhookConfiguration", "other-inferencereplica-webhook"),
    ]
    auth = one(docs, "ClusterRoleBinding", "other-metrics-auth-rolebinding")
    assert auth["roleRef"]["name"] == "other-metrics-auth-role"
    assert hook["metadata"]["name"] == "other-inferencereplica-webhook"
    (webhook_rule,) = [
        r for r in role["rules"] if "validatingwebhookconfigurations" in r["resources"]
    ]
    assert webhook_rule["resourceNames"] == ["other-inferencereplica-webhook"]
    args = deployment(docs)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--webhook-config-name=other-inferencereplica-webhook" in args
    # names in the namespace are config/'s whatever the release
    names = {key(d) for d in docs if d["kind"] not in CLUSTER_SCOPED}
    assert names == {key(d) for d in render() if d["kind"] not in CLUSTER_SCOPED}


# -- values -----------------------------------------------------------------------------------


def test_values_show_up_where_they_should(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "image": {
                    "repository": "registry.example.com/ome/manager",
                    "tag": "1.3.0-rc1",
                    "pullPolicy": "Always",
                },
                "replicas": 3,
                "nodeSelector": {"cloud.google.com/gke-nodepool": "system"},
                "tolerations": [
                    {
                        "key": "dedicated",
                        "operator": "Equal",
                        "value": "ome",
                        "effect": "NoSchedule",
                    }
                ],
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                "podAnnotations": {"example.com/team": "serving", "example.com/n": 1},
            }
        )
    )
    deploy = deployment(render(values=values))
    pod = deploy["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "registry.example.com/ome/manager:1.3.0-rc1"
    assert container["imagePullPolicy"] == "Always"
    assert deploy["spec"]["replicas"] == 3
    assert pod["spec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "system"}
    assert pod["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "ome", "effect": "NoSchedule"}
    ]
    # Helm merges a map value into the default: the default's limits stay
    assert container["resources"] == {
        "requests": {"cpu": "250m", "memory": "256Mi"},
        "limits": {"memory": "512Mi"},
    }
    annotations = pod["metadata"]["annotations"]
    assert annotations["example.com/team"] == "serving"
    assert annotations["example.com/n"] == "1"  # annotations are strings
    assert annotations["kubectl.kubernetes.io/default-container"] == "manager"
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/config"])


def test_a_default_resource_goes_when_set_to_null() -> None:
    (container,) = deployment(render("--set-json", "resources.limits=null"))["spec"]["template"][
        "spec"
    ]["containers"]
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"}}
    (container,) = deployment(render("--set-json", "resources=null"))["spec"]["template"]["spec"][
        "containers"
    ]
    assert "resources" not in container


def test_the_image_tag_defaults_to_the_app_version() -> None:
    (container,) = deployment(render())["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"ghcr.io/moirai-internal/ome-manager:{__version__}"


def test_pod_annotations_cannot_override_the_charts_own() -> None:
    guide = checksum(render(values=SAMPLE_VALUES))
    pod = deployment(
        render(
            "--set",
            "podAnnotations.checksum/config=forged",
            "--set",
            "podAnnotations.kubectl\\.kubernetes\\.io/default-container=other",
            values=SAMPLE_VALUES,
        )
    )["spec"]["template"]
    assert pod["metadata"]["annotations"]["checksum/config"] == guide
    assert pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == "manager"


#: Kubernetes objects with defaults, which the README documents as a whole.
WHOLE_VALUES = ("resources", "podSecurityContext", "securityContext")


def _leaves(values: JSON, prefix: str = "") -> Iterator[str]:
    for k, v in values.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and v and path not in WHOLE_VALUES:
            yield from _leaves(v, path + ".")
        else:
            yield path


def _values_section() -> str:
    """The README's "Values" section: its table, not the other sections' tables."""
    readme = (CHART / "README.md").read_text()
    start = readme.index("\n## Values\n")
    end = readme.find("\n## ", start + 1)
    return readme[start : end if end != -1 else len(readme)]


def test_the_readme_lists_every_value_and_the_install_command() -> None:
    readme = (CHART / "README.md").read_text()
    rows = set(re.findall(r"^\| `([^`]+)` \|", _values_section(), re.MULTILINE))
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    expected = set(_leaves(values)) - {"ome.controller"} | {"ome.controller.tpuSliceProvisioning"}
    assert expected <= rows, f"README.md lacks {sorted(expected - rows)}"
    assert rows <= expected, f"README.md lists unknown values {sorted(rows - expected)}"
    assert (
        "helm upgrade --install ome oci://ghcr.io/moirai-internal/charts/ome-resources \\\n"
        f"  --namespace ome --version {__version__} -f values.yaml"
    ) in readme


def _readme_rows() -> dict[str, str]:
    """The README's values table: each value's name to its Default cell, less the backticks."""
    return {
        name: default.strip().strip("`")
        for name, default in re.findall(
            r"^\| `([^`]+)` \| ([^|]+) \|", _values_section(), re.MULTILINE
        )
    }


def test_the_readmes_defaults_are_values_yamls() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    rows = _readme_rows()
    assert rows.pop("ome.controller.tpuSliceProvisioning") == "unset"
    for name, default in rows.items():
        value: Any = values
        for part in name.split("."):
            value = value[part]
        assert yaml.safe_load(default) == value, f"README.md says {name} is {default}"

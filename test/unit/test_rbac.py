"""config/rbac grants ome-manager exactly what its code uses: the audit below, one entry per
resource with the modules that need each verb, must equal what the rules grant, so a verb
added to the code without a grant (or a grant the code no longer needs) fails here.

One ClusterRole there is not the manager's: ome-metrics-reader, get on /metrics, which
scrapers of the manager's secure metrics endpoint are bound to (nothing in config/ binds it).
"""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

RBAC = Path(__file__).resolve().parents[2] / "config" / "rbac"
NAMESPACE = "ome"
SERVICE_ACCOUNT = "ome-controller-manager"
SLICES = "slices.accelerator.gke.io"
#: The scrapers' ClusterRole (metrics_reader_role.yaml), not the manager's.
METRICS_READER = "ome-metrics-reader"

#: The audit of pkg/ome: resource (``plural[.group][/subresource]``) -> the verbs the manager
#: sends. Informers (runtime/informer.py, created in controllers/setup.py) list and watch;
#: ``Client.live_*`` reads get or list; ``replace`` is update.
AUDIT: dict[str, set[str]] = {
    # list, watch: InferenceService informer (controllers/setup.py setup).
    "inferenceservices.ome.io": {"list", "watch"},
    # update: InferenceServiceReconciler._write_status (replace, subresource="status").
    "inferenceservices.ome.io/status": {"update"},
    # list, watch: the replica informer (setup); get: slices/act.py SliceActor._sweep (live);
    # create, update, delete: InferenceServiceReconciler._apply_replica, _act;
    # patch: InferenceReplicaReconciler._add_finalizer and _teardown (the teardown finalizer).
    "inferencereplicas.ome.io": {"create", "delete", "get", "list", "patch", "update", "watch"},
    # update: InferenceReplicaReconciler._write_status (replace, subresource="status").
    "inferencereplicas.ome.io/status": {"update"},
    # list, watch: informers the InferenceService controller resolves runtimes and models from.
    "servingruntimes.ome.io": {"list", "watch"},
    "clusterservingruntimes.ome.io": {"list", "watch"},
    "basemodels.ome.io": {"list", "watch"},
    "clusterbasemodels.ome.io": {"list", "watch"},
    # list, watch: the OME pod and holder informers (setup), live lists in
    # InferenceReplicaReconciler._teardown and SliceActor._host_pods/_replica_pods; get:
    # InferenceReplicaReconciler._confirm_gone; create: ._create_pod; delete: ._delete_pod
    # and SliceActor._loss.
    "pods": {"create", "delete", "get", "list", "watch"},
    # list, watch: the node informer (setup); list: SliceActor._hosts and
    # slices/admission.py ReplicaAdmission.read_nodes (live); get: SliceActor._loss (live).
    "nodes": {"get", "list", "watch"},
    # list, create: InferenceReplicaReconciler._ensure_revision (a live list, no informer).
    "controllerrevisions.apps": {"create", "list"},
    # create, patch: runtime/events.py EventRecorder._write (core/v1, the object's namespace).
    "events": {"create", "patch"},
    # list, watch: the Slice informer (setup); list: Client.serves at start and
    # SliceActor.teardown (live); get: SliceActor._slice; create: ._create; delete: ._release.
    SLICES: {"create", "delete", "get", "list", "watch"},
    # list, watch: runtime/webhookcerts.py SecretCerts' informer (by a metadata.name field
    # selector); get, update: SecretCerts._inject_ca_bundle (a live read, then a PUT).
    "validatingwebhookconfigurations.admissionregistration.k8s.io": {
        "get",
        "list",
        "update",
        "watch",
    },
    # list, watch: SecretCerts' informer (by name); get, update, create:
    # SecretCerts._sync_secret (the self-managed certificate Secret).
    "secrets": {"create", "get", "list", "update", "watch"},
    # get: controllers/setup.py load_config (one live get at start, no informer).
    "configmaps": {"get"},
    # get, create, update: runtime/leader.py LeaderElector._call (GET, POST, PUT).
    "leases.coordination.k8s.io": {"create", "get", "update"},
    # create: runtime/metricsauth.py DelegatingAuth, the secure metrics endpoint
    # (--metrics-secure): a TokenReview per scrape's bearer token (_authenticate), a
    # SubjectAccessReview of get on /metrics for its user (_authorize). Cluster-scoped.
    "tokenreviews.authentication.k8s.io": {"create"},
    "subjectaccessreviews.authorization.k8s.io": {"create"},
}

#: (resource, verb) -> the only object names it is granted on. Everything absent here is
#: granted unrestricted: create cannot be narrowed by name, nor can a list or watch of
#: many objects (one with a ``metadata.name`` field selector can, and is here).
BY_NAME: dict[tuple[str, str], set[str]] = {
    ("validatingwebhookconfigurations.admissionregistration.k8s.io", "get"): {
        "ome-inferencereplica-webhook"
    },
    ("validatingwebhookconfigurations.admissionregistration.k8s.io", "update"): {
        "ome-inferencereplica-webhook"
    },
    ("validatingwebhookconfigurations.admissionregistration.k8s.io", "list"): {
        "ome-inferencereplica-webhook"
    },
    ("validatingwebhookconfigurations.admissionregistration.k8s.io", "watch"): {
        "ome-inferencereplica-webhook"
    },
    ("secrets", "list"): {"ome-webhook-server-cert"},
    ("secrets", "watch"): {"ome-webhook-server-cert"},
    ("secrets", "get"): {"ome-webhook-server-cert"},
    ("secrets", "update"): {"ome-webhook-server-cert"},
    ("configmaps", "get"): {"inferenceservice-config"},
    ("leases.coordination.k8s.io", "get"): {"ome-controller-manager"},
    ("leases.coordination.k8s.io", "update"): {"ome-controller-manager"},
}

#: Touched only in the manager's own namespace: granted by Roles in ome, never cluster-wide.
OWN_NAMESPACE_ONLY = {"secrets", "configmaps", "leases.coordination.k8s.io"}

#: The product's spec, whatever the code does.
REQUIRED = {
    SLICES: {"create", "delete", "get", "list", "watch"},
    "pods": {"create", "delete", "get", "list", "watch"},
    "nodes": {"get", "list", "watch"},
}


def documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(RBAC.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def of_kind(*kinds: str) -> list[dict[str, Any]]:
    return [d for d in documents() if d["kind"] in kinds]


def manager_roles(*kinds: str) -> list[dict[str, Any]]:
    """The roles of ``kinds`` that grant the manager, i.e. all but the scrapers'."""
    return [d for d in of_kind(*kinds) if d["metadata"]["name"] != METRICS_READER]


def resource_key(group: str, resource: str) -> str:
    plural, _, sub = resource.partition("/")
    return f"{plural}{'.' + group if group else ''}{'/' + sub if sub else ''}"


def grants(docs: list[dict[str, Any]]) -> dict[tuple[str, str], list[set[str] | None]]:
    """(resource, verb) -> the resourceNames of each rule granting it (None: any name)."""
    out: dict[tuple[str, str], list[set[str] | None]] = defaultdict(list)
    for doc in docs:
        for rule in doc.get("rules") or []:
            names = set(rule["resourceNames"]) if rule.get("resourceNames") else None
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out[(resource_key(group, resource), verb)].append(names)
    return out


def test_the_audit_equals_what_the_rules_grant() -> None:
    granted: dict[str, set[str]] = defaultdict(set)
    for resource, verb in grants(manager_roles("ClusterRole", "Role")):
        granted[resource].add(verb)
    assert dict(granted) == AUDIT


def test_the_spec_s_verbs_on_slices_pods_and_nodes() -> None:
    for resource, verbs in REQUIRED.items():
        assert AUDIT[resource] == verbs, resource


def test_the_cluster_role_never_updates_nor_patches_slices() -> None:
    (role,) = (d for d in of_kind("ClusterRole") if d["metadata"]["name"] == "ome-manager-role")
    on_slices = {verb for (res, verb) in grants([role]) if res == SLICES}
    assert on_slices == REQUIRED[SLICES]
    assert not on_slices & {"update", "patch", "deletecollection", "*"}
    for doc in of_kind("Role"):  # a Role cannot grant a cluster-scoped kind, nor may it try
        assert not {verb for (res, verb) in grants([doc]) if res == SLICES}


def test_no_rule_uses_a_wildcard() -> None:
    for doc in manager_roles("ClusterRole", "Role"):
        for rule in doc["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert not any("*" in value for value in rule.get(field) or []), (doc, rule)
            assert "nonResourceURLs" not in rule


def test_grants_by_name_stay_by_name() -> None:
    for (resource, verb), rules in grants(manager_roles("ClusterRole", "Role")).items():
        wanted = BY_NAME.get((resource, verb))
        if wanted is None:
            assert rules == [None], f"{verb} {resource}"
        else:
            assert rules == [wanted], f"{verb} {resource}"


def test_own_namespace_resources_are_granted_in_ome_only() -> None:
    cluster = {res for (res, _verb) in grants(manager_roles("ClusterRole"))}
    assert not cluster & OWN_NAMESPACE_ONLY
    for doc in of_kind("Role", "RoleBinding"):
        assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]
    leases = [d for d in of_kind("Role") if d["metadata"]["name"] == "ome-leader-election-role"]
    assert {res for (res, _verb) in grants(leases)} == {"leases.coordination.k8s.io"}


def test_the_bindings_name_the_service_account_in_ome() -> None:
    (account,) = of_kind("ServiceAccount")
    assert account["metadata"] == {**account["metadata"], "name": SERVICE_ACCOUNT}
    assert account["metadata"]["namespace"] == NAMESPACE
    roles = {(d["kind"], d["metadata"]["name"]) for d in manager_roles("ClusterRole", "Role")}
    bindings = of_kind("ClusterRoleBinding", "RoleBinding")
    assert {(d["kind"], d["metadata"]["name"]) for d in bindings} == {
        ("ClusterRoleBinding", "ome-manager-rolebinding"),
        ("ClusterRoleBinding", "ome-metrics-auth-rolebinding"),
        ("RoleBinding", "ome-manager-rolebinding"),
        ("RoleBinding", "ome-leader-election-rolebinding"),
    }
    bound = set()
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
        ]
        ref = binding["roleRef"]
        assert ref["apiGroup"] == "rbac.authorization.k8s.io"
        # A RoleBinding may bind a Role; a ClusterRoleBinding only a ClusterRole.
        assert ref["kind"] == ("ClusterRole" if binding["kind"] == "ClusterRoleBinding" else "Role")
        bound.add((ref["kind"], ref["name"]))
    assert bound == roles


def test_the_metrics_reader_grants_exactly_get_on_metrics_and_is_bound_by_nobody() -> None:
    (reader,) = (d for d in of_kind("ClusterRole") if d["metadata"]["name"] == METRICS_READER)
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    bound = {d["roleRef"]["name"] for d in of_kind("ClusterRoleBinding", "RoleBinding")}
    assert METRICS_READER not in bound  # the scraper's to bind, never the manager's


def test_the_metrics_reviews_are_the_metrics_auth_roles_alone() -> None:
    reviews = {"tokenreviews.authentication.k8s.io", "subjectaccessreviews.authorization.k8s.io"}
    for doc in manager_roles("ClusterRole", "Role"):
        granted = {res for (res, _verb) in grants([doc])}
        if doc["metadata"]["name"] == "ome-metrics-auth-role":
            assert doc["kind"] == "ClusterRole"
            assert {(res, verb) for (res, verb) in grants([doc])} == {
                (res, "create") for res in reviews
            }
        else:
            assert not granted & reviews, doc["metadata"]["name"]


def test_every_file_starts_with_a_comment_and_is_in_the_kustomization() -> None:
    files = sorted(p.name for p in RBAC.glob("*.yaml"))
    for name in files:
        assert (RBAC / name).read_text().startswith("# "), name
    kustomization = yaml.safe_load((RBAC / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == [f for f in files if f != "kustomization.yaml"]


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_kustomize_builds_every_object() -> None:
    built = subprocess.run(
        ["kubectl", "kustomize", str(RBAC)], capture_output=True, text=True, timeout=60
    )
    assert built.returncode == 0, built.stderr
    objects = [d for d in yaml.safe_load_all(built.stdout) if d]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in objects) == sorted(
        (d["kind"], d["metadata"]["name"]) for d in documents()
    )

"""The manager's least privilege on a real control plane (config/rbac): kube-apiserver answers
``kubectl auth can-i`` for its ServiceAccount as the audit in test/unit/test_rbac.py says, and
a verb taken away shows up as one clear 403 line in the manager's log, and comes back when
the verb does. Skipped where the server enforces no RBAC (the embedded one)."""

from __future__ import annotations

import json

import pytest

from test.e2e.conftest import ROOT, Environment, guide_sample
from test.helpers import eventually
from test.unit.test_rbac import AUDIT, BY_NAME, NAMESPACE, SERVICE_ACCOUNT, SLICES

AS = f"--as=system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
#: Resources only the ome-only Role grants.
IN_OME = {"secrets", "configmaps", "leases.coordination.k8s.io"}
CLUSTER_SCOPED = {
    SLICES,
    "nodes",
    "clusterservingruntimes.ome.io",
    "clusterbasemodels.ome.io",
    "validatingwebhookconfigurations.admissionregistration.k8s.io",
    "tokenreviews.authentication.k8s.io",
    "subjectaccessreviews.authorization.k8s.io",
}
VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")


def can_i(env: Environment, verb: str, resource: str) -> str:
    """``yes`` or ``no``, as kubectl prints it, for the manager's ServiceAccount."""
    base, _, sub = resource.partition("/")
    args = ["auth", "can-i", verb, base, AS]
    if sub:
        args.append(f"--subresource={sub}")
    names = BY_NAME.get((base, verb))
    if names:
        args[3] = f"{base}/{sorted(names)[0]}"
    if base in IN_OME:
        args += ["-n", NAMESPACE]
    elif base not in CLUSTER_SCOPED:
        args += ["-n", "some-user-namespace"]
    out = env.kubectl(*args, check=False)
    assert out.returncode in (0, 1), out.stderr
    return out.stdout.strip()


def test_can_i_says_yes_to_each_verb_the_manager_uses_and_no_to_the_rest(kube: Environment) -> None:
    wrong = []
    for resource, verbs in AUDIT.items():
        for verb in VERBS:
            want = "yes" if verb in verbs else "no"
            got = can_i(kube, verb, resource)
            if got != want:
                wrong.append(f"can-i {verb} {resource}: {got}, want {want}")
    assert wrong == []


def test_never_update_nor_patch_on_slices(kube: Environment) -> None:
    for verb in ("update", "patch", "deletecollection"):
        out = kube.kubectl("auth", "can-i", verb, SLICES, AS, check=False)
        assert out.stdout.strip() == "no", (verb, out.stdout)


def test_named_grants_stop_at_their_names_and_namespace(kube: Environment) -> None:
    for args in (
        ["get", "secrets/some-other-secret", "-n", NAMESPACE],
        ["get", "secrets/ome-webhook-server-cert", "-n", "kube-system"],
        ["create", "secrets", "-n", "kube-system"],
        ["list", "secrets", "-n", NAMESPACE],  # the watch is of the one Secret, by name
        ["watch", "secrets", "-n", NAMESPACE],
        ["list", "validatingwebhookconfigurations"],
        ["update", "leases.coordination.k8s.io/someone-elses-lease", "-n", NAMESPACE],
        ["get", "configmaps/inferenceservice-config", "-n", "default"],
    ):
        out = kube.kubectl("auth", "can-i", *args, AS, check=False)
        assert out.stdout.strip() == "no", (args, out.stdout)


ISVC = "rbac-probe"
NS = "rbac-probe"


def _cluster_role(env: Environment) -> dict:
    return json.loads(env.kubectl("get", "clusterrole", "ome-manager-role", "-o", "json").stdout)


def test_a_verb_taken_away_is_one_clear_403_line_in_the_managers_log(kube: Environment) -> None:
    if kube.manager_log_text() is None:
        pytest.skip("the manager's log is not reachable here (set OME_E2E_MANAGER_LOG)")
    role = _cluster_role(kube)
    rules = role["rules"]
    index = next(i for i, r in enumerate(rules) if "slices" in r.get("resources", []))
    assert "create" in rules[index]["verbs"]
    rules[index]["verbs"] = [v for v in rules[index]["verbs"] if v != "create"]
    del role["metadata"]["resourceVersion"]
    kube.kubectl("replace", "-f", "-", input=json.dumps(role))
    before = len((kube.manager_log_text() or "").splitlines())
    probe = guide_sample(NS)
    try:
        kube.kubectl("apply", "-f", "-", input=probe)

        wanted = (
            f'User "system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}" cannot create '
            'resource "slices" in API group "accelerator.gke.io"'
        )

        def forbidden() -> list[str]:
            """The manager's log lines, since the verb went, that name the 403."""
            hits = []
            for line in (kube.manager_log_text() or "").splitlines()[before:]:
                try:
                    message = str(json.loads(line).get("message", ""))
                except ValueError:
                    message = line
                if "403 Forbidden" in message and wanted in message:
                    hits.append(message)
            return hits

        hits = eventually(forbidden, timeout=60)
        assert all("Traceback" not in line and "\n" not in line for line in hits), hits
        ready = kube.kubectl(
            "get",
            "inferenceservice",
            ISVC,
            "-n",
            NS,
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
        ).stdout
        assert ready != "True"
    finally:
        kube.kubectl("apply", "-f", str(ROOT / "config" / "rbac" / "role.yaml"))
    # With the verb back, the manager gets on by itself.
    kube.kubectl(
        "wait",
        "--for=condition=Ready",
        f"inferenceservice/{ISVC}",
        "-n",
        NS,
        "--timeout=3m",
        timeout=200,
    )
    kube.kubectl("delete", "namespace", NS, "--timeout=2m", timeout=150)


def test_the_managers_log_has_no_traceback(environment: Environment) -> None:
    """A traceback means a bug; every API error, 403 included, is one line. (Last in this
    module, after the 403s above; on the embedded server too.)"""
    text = environment.manager_log_text()
    if text is None:
        pytest.skip("the manager's log is not reachable here (set OME_E2E_MANAGER_LOG)")
    assert "Traceback" not in text

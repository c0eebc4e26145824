"""Tests for validating admission webhooks: a real HTTPS webhook server, called as kube would.

The webhook server runs on its own event loop in a background thread (port 0, certificates from
``ome.runtime.certs``); each test drives a fresh ``WebhookDispatcher`` with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time
from collections.abc import Mapping

import pytest
from aiohttp import web
from test.webhooks import (
    JSON,
    WebhookServer,
    allow,
    bundle,
    config,
    deny,
    respond,
    webhook,
)

from ome.runtime.certs import KeyPair, generate_ca
from ome_sim.apiserver.admission import AdmissionAttributes, WebhookDispatcher
from ome_sim.apiserver.errors import APIError


def pod(name: str = "web", labels: dict[str, str] | None = None) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }


POD_CREATE = AdmissionAttributes(
    operation="CREATE",
    group="",
    version="v1",
    kind="Pod",
    resource="pods",
    subresource="",
    name="web",
    namespace="default",
    namespaced=True,
    object=pod(),
    old_object=None,
    dry_run=False,
    options={"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
)

NAMESPACE_CREATE = AdmissionAttributes(
    operation="CREATE",
    group="",
    version="v1",
    kind="Namespace",
    resource="namespaces",
    subresource="",
    name="team-a",
    namespace="",
    namespaced=False,
    object={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
    old_object=None,
    dry_run=False,
    options=None,
)

NODE_UPDATE = AdmissionAttributes(
    operation="UPDATE",
    group="",
    version="v1",
    kind="Node",
    resource="nodes",
    subresource="",
    name="n1",
    namespace="",
    namespaced=False,
    object={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}},
    old_object={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}},
    dry_run=False,
    options=None,
)


def validate(
    configurations: list[JSON],
    attrs: AdmissionAttributes = POD_CREATE,
    namespace_labels: Mapping[str, str] | None = None,
) -> list[str]:
    async def go() -> list[str]:
        dispatcher = WebhookDispatcher()
        try:
            return await asyncio.wait_for(
                dispatcher.validate(configurations, attrs, namespace_labels), 15
            )
        finally:
            await dispatcher.close()

    return asyncio.run(go())


def rejected(
    configurations: list[JSON],
    attrs: AdmissionAttributes = POD_CREATE,
    namespace_labels: Mapping[str, str] | None = None,
) -> APIError:
    with pytest.raises(APIError) as caught:
        validate(configurations, attrs, namespace_labels)
    return caught.value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- allow, deny, warnings ---------------------------------------------------------------------


def test_allowed_request_reaches_the_webhook_as_an_admission_review(
    server: WebhookServer, ca: KeyPair
) -> None:
    url = f"https://127.0.0.1:{server.port}/allow"
    assert validate([config("c", webhook("allow.example.com", url, ca))]) == []

    [(path, review, headers)] = server.calls
    assert path == "/allow"
    assert headers["Content-Type"] == "application/json"
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    request = review["request"]
    assert len(request["uid"]) == 36
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert request["requestKind"] == request["kind"]
    assert request["requestResource"] == request["resource"]
    assert "subResource" not in request
    assert request["name"] == "web"
    assert request["namespace"] == "default"
    assert request["operation"] == "CREATE"
    assert request["userInfo"] == {
        "username": "system:admin",
        "groups": ["system:masters", "system:authenticated"],
    }
    assert request["object"] == pod()
    assert request["oldObject"] is None
    assert request["dryRun"] is False
    assert request["options"] == {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}


def test_each_call_has_its_own_uid(server: WebhookServer, ca: KeyPair) -> None:
    url = f"https://127.0.0.1:{server.port}/allow"
    hooks = [webhook("a.example.com", url, ca), webhook("b.example.com", url, ca)]
    validate([config("c", *hooks)])
    validate([config("c", *hooks)])
    uids = {review["request"]["uid"] for _, review, _ in server.calls}
    assert len(uids) == 4


def test_denial_with_message_is_forbidden_with_kube_wording(
    server: WebhookServer, ca: KeyPair
) -> None:
    server.responders["/deny"] = deny({"message": "pods must have an owner"})
    url = f"https://127.0.0.1:{server.port}/deny"
    err = rejected([config("c", webhook("deny.example.com", url, ca))])
    assert err.code == 403
    assert err.message == (
        'admission webhook "deny.example.com" denied the request: pods must have an owner'
    )
    assert err.status()["message"] == err.message
    assert err.status()["code"] == 403


def test_denial_keeps_an_error_code_reason_and_details(server: WebhookServer, ca: KeyPair) -> None:
    details = {"causes": [{"field": "spec.replicas", "message": "too many"}]}
    server.responders["/deny"] = deny(
        {"code": 422, "reason": "Invalid", "message": "bad spec", "details": details}
    )
    url = f"https://127.0.0.1:{server.port}/deny"
    err = rejected([config("c", webhook("deny.example.com", url, ca))])
    assert (err.code, err.reason) == (422, "Invalid")
    assert err.message == 'admission webhook "deny.example.com" denied the request: bad spec'
    assert err.details == details


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (None, 403, 'admission webhook "deny.example.com" denied the request without explanation'),
        ({}, 403, 'admission webhook "deny.example.com" denied the request without explanation'),
        (
            {"code": 200, "reason": "NotAllowed"},
            403,
            'admission webhook "deny.example.com" denied the request: NotAllowed',
        ),
    ],
)
def test_denial_without_message(
    server: WebhookServer, ca: KeyPair, status: JSON | None, code: int, message: str
) -> None:
    server.responders["/deny"] = deny(status)
    url = f"https://127.0.0.1:{server.port}/deny"
    err = rejected([config("c", webhook("deny.example.com", url, ca))])
    assert (err.code, err.message) == (code, message)
    assert err.reason == (status or {}).get("reason", "")


def test_warnings_of_all_webhooks_in_configuration_name_order(
    server: WebhookServer, ca: KeyPair
) -> None:
    for path, texts in {"/a1": ["a1 first"], "/a2": ["a2 one", "a2 two"], "/b": ["b"]}.items():
        server.responders[path] = allow(texts)
    base = f"https://127.0.0.1:{server.port}"
    configurations = [
        config("b-config", webhook("b.example.com", f"{base}/b", ca)),
        config(
            "a-config",
            webhook("a1.example.com", f"{base}/a1", ca),
            webhook("a2.example.com", f"{base}/a2", ca),
        ),
    ]
    assert validate(configurations) == ["a1 first", "a2 one", "a2 two", "b"]


def test_denial_carries_the_warnings_gathered_as_a_header(
    server: WebhookServer, ca: KeyPair
) -> None:
    server.responders["/warn"] = allow(['mind the "quotes"'])
    server.responders["/deny"] = deny({"message": "no"}, warnings=["denied for a reason"])
    base = f"https://127.0.0.1:{server.port}"
    err = rejected(
        [
            config("a", webhook("warn.example.com", f"{base}/warn", ca)),
            config("b", webhook("deny.example.com", f"{base}/deny", ca)),
        ]
    )
    assert err.headers["Warning"] == ('299 - "mind the \\"quotes\\"", 299 - "denied for a reason"')


def test_first_rejection_in_order_wins_and_every_matching_webhook_is_asked(
    server: WebhookServer, ca: KeyPair
) -> None:
    server.responders["/first"] = deny({"message": "first"})
    server.responders["/second"] = deny({"message": "second"})
    base = f"https://127.0.0.1:{server.port}"
    err = rejected(
        [
            config("z", webhook("second.example.com", f"{base}/second", ca)),
            config("a", webhook("first.example.com", f"{base}/first", ca)),
        ]
    )
    assert err.message.endswith(": first")
    assert sorted(server.paths()) == ["/first", "/second"]


# --- matching ----------------------------------------------------------------------------------


def rule(
    operations: list[str] | None = None,
    resources: list[str] | None = None,
    groups: list[str] | None = None,
    versions: list[str] | None = None,
    scope: str | None = None,
) -> JSON:
    r: JSON = {
        "operations": operations or ["*"],
        "apiGroups": groups or ["*"],
        "apiVersions": versions or ["*"],
        "resources": resources or ["*"],
    }
    if scope:
        r["scope"] = scope
    return r


POD_STATUS_UPDATE = dataclasses.replace(
    POD_CREATE, operation="UPDATE", subresource="status", old_object=pod()
)
DEPLOYMENT_CREATE = dataclasses.replace(
    POD_CREATE, group="apps", kind="Deployment", resource="deployments"
)


@pytest.mark.parametrize(
    ("case", "r", "attrs", "called"),
    [
        ("operation listed", rule(operations=["CREATE"]), POD_CREATE, True),
        ("operation not listed", rule(operations=["UPDATE", "DELETE"]), POD_CREATE, False),
        ("operation *", rule(operations=["*"], resources=["*/*"]), POD_STATUS_UPDATE, True),
        ("resource listed", rule(resources=["pods"]), POD_CREATE, True),
        ("other resource", rule(resources=["services"]), POD_CREATE, False),
        ("resource, not its subresource", rule(resources=["pods"]), POD_STATUS_UPDATE, False),
        ("subresource listed", rule(resources=["pods/status"]), POD_STATUS_UPDATE, True),
        ("subresource, not resource", rule(resources=["pods/status"]), POD_CREATE, False),
        ("other subresource", rule(resources=["pods/log"]), POD_STATUS_UPDATE, False),
        ("* has no subresources", rule(resources=["*"]), POD_STATUS_UPDATE, False),
        ("* has all resources", rule(resources=["*"]), DEPLOYMENT_CREATE, True),
        ("*/* has subresources", rule(resources=["*/*"]), POD_STATUS_UPDATE, True),
        ("*/* has resources", rule(resources=["*/*"]), POD_CREATE, True),
        ("*/status", rule(resources=["*/status"]), POD_STATUS_UPDATE, True),
        ("*/status is no resource", rule(resources=["*/status"]), POD_CREATE, False),
        ("pods/*", rule(resources=["pods/*"]), POD_STATUS_UPDATE, True),
        ("group listed", rule(groups=["apps"]), DEPLOYMENT_CREATE, True),
        ("core group only", rule(groups=[""]), DEPLOYMENT_CREATE, False),
        ("version not listed", rule(versions=["v2"]), POD_CREATE, False),
        ("scope Namespaced", rule(scope="Namespaced"), POD_CREATE, True),
        ("scope Cluster, namespaced", rule(scope="Cluster"), POD_CREATE, False),
        ("scope Cluster, cluster", rule(scope="Cluster"), NODE_UPDATE, True),
        ("scope Namespaced, cluster", rule(scope="Namespaced"), NODE_UPDATE, False),
        ("Namespace is Cluster", rule(scope="Cluster"), NAMESPACE_CREATE, True),
        ("Namespace not Namespaced", rule(scope="Namespaced"), NAMESPACE_CREATE, False),
        ("scope *", rule(scope="*"), NODE_UPDATE, True),
    ],
)
def test_rule_matching(
    server: WebhookServer, ca: KeyPair, case: str, r: JSON, attrs: AdmissionAttributes, called: bool
) -> None:
    url = f"https://127.0.0.1:{server.port}/rule"
    server.responders["/rule"] = deny({"message": case})
    hook = webhook("rule.example.com", url, ca, rules=[r])
    if called:
        assert rejected([config("c", hook)], attrs, {}).message.endswith(case)
    else:
        assert validate([config("c", hook)], attrs, {}) == []
        assert server.calls == []


def test_webhook_without_rules_is_never_called(server: WebhookServer, ca: KeyPair) -> None:
    url = f"https://127.0.0.1:{server.port}/deny"
    server.responders["/deny"] = deny()
    assert validate([config("c", webhook("x.example.com", url, ca, rules=[]))]) == []
    assert server.calls == []


def test_subresource_is_sent(server: WebhookServer, ca: KeyPair) -> None:
    url = f"https://127.0.0.1:{server.port}/allow"
    validate(
        [config("c", webhook("s.example.com", url, ca, rules=[rule(resources=["*/*"])]))],
        POD_STATUS_UPDATE,
    )
    request = server.calls[0][1]["request"]
    assert request["subResource"] == "status"
    assert request["requestSubResource"] == "status"
    assert request["oldObject"] == pod()


def test_namespace_object_is_named_as_its_own_namespace_once_it_exists(
    server: WebhookServer, ca: KeyPair
) -> None:
    url = f"https://127.0.0.1:{server.port}/allow"
    hook = webhook("ns.example.com", url, ca, rules=[rule()])
    deleted = dataclasses.replace(
        NAMESPACE_CREATE, operation="DELETE", object=None, old_object=NAMESPACE_CREATE.object
    )
    validate([config("c", hook)], NAMESPACE_CREATE)
    validate([config("c", hook)], deleted, {})
    created, deleting = (review["request"] for _, review, _ in server.calls)
    assert "namespace" not in created
    assert deleting["namespace"] == "team-a"


TEAM = {"matchLabels": {"team": "a"}}


@pytest.mark.parametrize(
    ("attrs", "namespace_labels", "called"),
    [
        (POD_CREATE, {"team": "a", "env": "prod"}, True),
        (POD_CREATE, {"team": "b"}, False),
        (POD_CREATE, {}, False),
        # cluster-scoped objects other than Namespaces are never exempted
        (NODE_UPDATE, None, True),
        # a Namespace being created is selected by its own new labels
        (NAMESPACE_CREATE, None, False),
        (
            dataclasses.replace(
                NAMESPACE_CREATE,
                object={"kind": "Namespace", "metadata": {"name": "a", "labels": {"team": "a"}}},
            ),
            None,
            True,
        ),
        # a Namespace being deleted: by the labels the caller passes
        (
            dataclasses.replace(
                NAMESPACE_CREATE,
                operation="DELETE",
                object=None,
                old_object={"kind": "Namespace", "metadata": {"name": "team-a"}},
            ),
            {"team": "a"},
            True,
        ),
    ],
)
def test_namespace_selector(
    server: WebhookServer,
    ca: KeyPair,
    attrs: AdmissionAttributes,
    namespace_labels: dict[str, str] | None,
    called: bool,
) -> None:
    url = f"https://127.0.0.1:{server.port}/ns"
    hook = webhook("ns.example.com", url, ca, rules=[rule()], namespaceSelector=TEAM)
    validate([config("c", hook)], attrs, namespace_labels)
    assert server.paths() == (["/ns"] if called else [])


def test_namespace_selector_with_expressions(server: WebhookServer, ca: KeyPair) -> None:
    url = f"https://127.0.0.1:{server.port}/ns"
    selector = {"matchExpressions": [{"key": "skip-webhooks", "operator": "DoesNotExist"}]}
    hook = webhook("ns.example.com", url, ca, namespaceSelector=selector)
    validate([config("c", hook)], POD_CREATE, {"skip-webhooks": "yes"})
    assert server.calls == []
    validate([config("c", hook)], POD_CREATE, {"team": "a"})
    assert server.paths() == ["/ns"]


def test_namespace_selector_on_a_missing_namespace_is_not_found(ca: KeyPair) -> None:
    hook = webhook("ns.example.com", "https://127.0.0.1:1/ns", ca, namespaceSelector=TEAM)
    err = rejected([config("c", hook)], POD_CREATE, None)
    assert (err.code, err.message) == (404, 'namespaces "default" not found')


@pytest.mark.parametrize(
    ("new_labels", "old_labels", "called"),
    [
        ({"app": "web"}, None, True),
        ({"app": "db"}, None, False),
        ({"app": "db"}, {"app": "web"}, True),  # the old object matches
        ({"app": "web"}, {"app": "db"}, True),
        ({}, {}, False),
    ],
)
def test_object_selector_matches_new_or_old_object(
    server: WebhookServer,
    ca: KeyPair,
    new_labels: dict[str, str],
    old_labels: dict[str, str] | None,
    called: bool,
) -> None:
    attrs = dataclasses.replace(
        POD_CREATE,
        operation="UPDATE" if old_labels is not None else "CREATE",
        object=pod(labels=new_labels),
        old_object=None if old_labels is None else pod(labels=old_labels),
    )
    url = f"https://127.0.0.1:{server.port}/obj"
    hook = webhook("obj.example.com", url, ca, objectSelector={"matchLabels": {"app": "web"}})
    validate([config("c", hook)], attrs, {})
    assert server.paths() == (["/obj"] if called else [])


def test_object_selector_on_delete_uses_the_old_object(server: WebhookServer, ca: KeyPair) -> None:
    attrs = dataclasses.replace(
        POD_CREATE, operation="DELETE", object=None, old_object=pod(labels={"app": "web"})
    )
    url = f"https://127.0.0.1:{server.port}/obj"
    hook = webhook(
        "obj.example.com",
        url,
        ca,
        rules=[rule(operations=["DELETE"])],
        objectSelector={"matchLabels": {"app": "web"}},
    )
    validate([config("c", hook)], attrs, {})
    [(_, review, _)] = server.calls
    assert review["request"]["operation"] == "DELETE"
    assert review["request"]["object"] is None
    assert review["request"]["oldObject"]["metadata"]["labels"] == {"app": "web"}


def test_match_conditions_cannot_be_evaluated_so_the_webhook_is_called(
    server: WebhookServer, ca: KeyPair
) -> None:
    url = f"https://127.0.0.1:{server.port}/cel"
    conditions = [{"name": "never", "expression": "false"}]
    validate([config("c", webhook("cel.example.com", url, ca, matchConditions=conditions))])
    assert server.paths() == ["/cel"]


# --- call failures -----------------------------------------------------------------------------


def test_untrusted_certificate_fails_closed(server: WebhookServer) -> None:
    url = f"https://127.0.0.1:{server.port}/allow"
    hook = webhook("tls.example.com", url, generate_ca("someone-else"))
    err = rejected([config("c", hook)])
    cause = (
        'failed calling webhook "tls.example.com": failed to call webhook: '
        f'Post "{url}?timeout=10s": tls: failed to verify certificate: '
        "x509: certificate signed by unknown authority"
    )
    assert (err.code, err.reason) == (500, "InternalError")
    assert err.message == f"Internal error occurred: {cause}"
    assert err.details == {"causes": [{"message": cause}]}
    assert server.calls == []


def test_untrusted_certificate_with_ignore_policy_is_allowed(server: WebhookServer) -> None:
    url = f"https://127.0.0.1:{server.port}/deny"
    server.responders["/deny"] = deny()
    hook = webhook("tls.example.com", url, generate_ca("someone-else"), failurePolicy="Ignore")
    assert validate([config("c", hook)]) == []


def test_connection_refused(ca: KeyPair) -> None:
    port = free_port()
    url = f"https://127.0.0.1:{port}/x"
    err = rejected([config("c", webhook("down.example.com", url, ca, failurePolicy="Fail"))])
    assert err.code == 500
    assert err.message.endswith(
        f'Post "{url}?timeout=10s": dial tcp 127.0.0.1:{port}: connect: connection refused'
    )


def test_timeout_is_a_deadline_exceeded(server: WebhookServer, ca: KeyPair) -> None:
    async def never(_: JSON) -> web.StreamResponse:
        return await server.hang()

    server.responders["/slow"] = never
    url = f"https://127.0.0.1:{server.port}/slow"
    hook = webhook("slow.example.com", url, ca, timeoutSeconds=1)
    started = time.monotonic()
    err = rejected([config("c", hook)])
    assert server.received.is_set()
    assert time.monotonic() - started < 10
    assert err.code == 500
    assert err.message == (
        'Internal error occurred: failed calling webhook "slow.example.com": '
        f'failed to call webhook: Post "{url}?timeout=1s": context deadline exceeded'
    )


def test_timeout_with_ignore_policy_is_allowed(server: WebhookServer, ca: KeyPair) -> None:
    async def never(_: JSON) -> web.StreamResponse:
        return await server.hang()

    server.responders["/slow"] = never
    url = f"https://127.0.0.1:{server.port}/slow"
    hook = webhook("slow.example.com", url, ca, timeoutSeconds=1, failurePolicy="Ignore")
    assert validate([config("c", hook)]) == []
    assert server.received.is_set()


def test_non_200_answer_is_a_call_failure(server: WebhookServer, ca: KeyPair) -> None:
    async def broken(_: JSON) -> web.StreamResponse:
        return web.Response(status=500, text="boom")

    server.responders["/broken"] = broken
    url = f"https://127.0.0.1:{server.port}/broken"
    err = rejected([config("c", webhook("broken.example.com", url, ca))])
    assert err.message == (
        'Internal error occurred: failed calling webhook "broken.example.com": '
        'failed to call webhook: an error on the server ("boom") has prevented the request '
        "from succeeding"
    )


def test_response_with_another_uid_is_a_call_failure(server: WebhookServer, ca: KeyPair) -> None:
    server.responders["/uid"] = respond({"allowed": True, "uid": "not-the-uid"})
    url = f"https://127.0.0.1:{server.port}/uid"
    err = rejected([config("c", webhook("uid.example.com", url, ca))])
    uid = server.calls[0][1]["request"]["uid"]
    assert err.message == (
        'Internal error occurred: failed calling webhook "uid.example.com": '
        f'received invalid webhook response: expected response.uid="{uid}", got "not-the-uid"'
    )


def test_response_that_is_not_json_is_a_call_failure(server: WebhookServer, ca: KeyPair) -> None:
    async def garbage(_: JSON) -> web.StreamResponse:
        return web.Response(text="<html>hi</html>")

    server.responders["/garbage"] = garbage
    url = f"https://127.0.0.1:{server.port}/garbage"
    err = rejected([config("c", webhook("garbage.example.com", url, ca))])
    assert err.code == 500
    assert 'failed calling webhook "garbage.example.com": failed to call webhook: ' in err.message
    assert "json parse error" in err.message


def test_response_without_response_field_is_a_call_failure(
    server: WebhookServer, ca: KeyPair
) -> None:
    async def empty(_: JSON) -> web.StreamResponse:
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})

    server.responders["/empty"] = empty
    url = f"https://127.0.0.1:{server.port}/empty"
    hook = webhook("empty.example.com", url, ca)
    err = rejected([config("c", hook)])
    assert err.message.endswith("received invalid webhook response: webhook response was absent")
    assert validate([config("c", {**hook, "failurePolicy": "Ignore"})]) == []


# --- service references ------------------------------------------------------------------------


def service_hook(server: WebhookServer, ca: KeyPair, name: str, path: str) -> JSON:
    ref = {"namespace": "webhooks", "name": name, "path": path, "port": server.port}
    return webhook("svc.example.com", "", ca, clientConfig={"service": ref, "caBundle": bundle(ca)})


def test_service_reference_is_called_on_loopback_under_its_service_name(
    server: WebhookServer, ca: KeyPair
) -> None:
    server.responders["/validate"] = deny({"message": "seen"})
    err = rejected([config("c", service_hook(server, ca, "hook", "/validate"))])
    assert err.message.endswith("denied the request: seen")
    [(path, _, headers)] = server.calls
    assert path == "/validate"
    assert headers["Host"] == f"hook.webhooks.svc:{server.port}"


def test_service_reference_verifies_the_service_host_name(
    server: WebhookServer, ca: KeyPair
) -> None:
    # The certificate is for hook.webhooks.svc and 127.0.0.1, not for other.webhooks.svc.
    err = rejected([config("c", service_hook(server, ca, "other", "/validate"))])
    assert err.code == 500
    assert err.message == (
        'Internal error occurred: failed calling webhook "svc.example.com": failed to call '
        f'webhook: Post "https://other.webhooks.svc:{server.port}/validate?timeout=10s": '
        "tls: failed to verify certificate: x509: certificate is not valid for "
        "other.webhooks.svc"
    )
    assert server.calls == []


# --- dry run -----------------------------------------------------------------------------------


def test_dry_run_with_side_effects_is_a_bad_request(server: WebhookServer, ca: KeyPair) -> None:
    url = f"https://127.0.0.1:{server.port}/allow"
    hook = webhook("effects.example.com", url, ca, sideEffects="Some")
    err = rejected([config("c", hook)], dataclasses.replace(POD_CREATE, dry_run=True))
    assert (err.code, err.reason) == (400, "BadRequest")
    assert err.message == 'admission webhook "effects.example.com" does not support dry run'
    assert server.calls == []
    # Not a call failure: the failure policy does not excuse it.
    hook["failurePolicy"] = "Ignore"
    assert rejected([config("c", hook)], dataclasses.replace(POD_CREATE, dry_run=True)).code == 400


@pytest.mark.parametrize("side_effects", ["None", "NoneOnDryRun"])
def test_dry_run_reaches_webhooks_without_side_effects(
    server: WebhookServer, ca: KeyPair, side_effects: str
) -> None:
    url = f"https://127.0.0.1:{server.port}/allow"
    hook = webhook("pure.example.com", url, ca, sideEffects=side_effects)
    assert validate([config("c", hook)], dataclasses.replace(POD_CREATE, dry_run=True)) == []
    assert server.calls[0][1]["request"]["dryRun"] is True


def test_side_effects_do_not_matter_without_dry_run(server: WebhookServer, ca: KeyPair) -> None:
    url = f"https://127.0.0.1:{server.port}/allow"
    validate([config("c", webhook("effects.example.com", url, ca, sideEffects="Some"))])
    assert server.paths() == ["/allow"]

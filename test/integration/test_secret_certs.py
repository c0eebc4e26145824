"""SecretCerts against the embedded API server: replicas share one CA and serving certificate
through a Secret, fill an empty one, rotate near expiry or for a missing name, settle races
(409) on the other replica's result, and keep a webhook configuration's caBundle current."""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography import x509

from ome.runtime.certs import KeyPair, generate_ca, issue_serving_cert
from ome.runtime.client import Client, RetryPolicy
from ome.runtime.informer import InformerFactory
from ome.runtime.rest import SECRETS, VALIDATING_WEBHOOK_CONFIGURATIONS, Rest
from ome.runtime.webhookcerts import SecretCerts
from ome_sim.apiserver.faults import Fault
from test.cluster import Cluster
from test.helpers import eventually

NS = "default"
SECRET = "webhook-certs"
VWC = "ome-webhooks"
NAMES = ["hooks.default.svc"]


@pytest.fixture
def client(cluster: Cluster) -> Client:
    return Client(Rest(cluster.api), RetryPolicy(attempts=2, initial=0.01, cap=0.02))


@pytest.fixture
def make(client: Client) -> Iterator[Any]:
    made: list[SecretCerts] = []

    def build(**kwargs: Any) -> SecretCerts:
        kwargs.setdefault("dns_names", NAMES)
        certs = SecretCerts(client, NS, SECRET, **kwargs)
        made.append(certs)
        return certs

    yield build
    for certs in made:
        certs.stop()


def stored(client: Client) -> dict[str, bytes]:
    data = client.live_get(SECRETS, SECRET, NS).get("data") or {}
    return {k: base64.b64decode(v) for k, v in data.items()}


def certs_in(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem)


def names_of(pem: bytes) -> list[str]:
    cert = x509.load_pem_x509_certificate(pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [
        *sans.get_values_for_type(x509.DNSName),
        *map(str, sans.get_values_for_type(x509.IPAddress)),
    ]


def verifies(serving_pem: bytes, bundle_pem: bytes) -> bool:
    """True when some CA of the bundle signed the serving certificate."""
    cert = x509.load_pem_x509_certificate(serving_pem)
    for ca in certs_in(bundle_pem):
        try:
            cert.verify_directly_issued_by(ca)
        except Exception:
            continue
        return True
    return False


def put_secret(client: Client, data: dict[str, bytes] | None) -> None:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NS},
        "type": "Opaque",
    }
    if data is not None:
        body["data"] = {k: base64.b64encode(v).decode() for k, v in data.items()}
    client.create(SECRETS, body, NS)


def webhook_config(*names: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": VWC},
        "webhooks": [
            {
                "name": name,
                "clientConfig": {"service": {"name": "hooks", "namespace": NS, "path": "/v"}},
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": ["example.com"],
                        "apiVersions": ["v1"],
                        "resources": ["gadgets"],
                    }
                ],
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }
            for name in names
        ],
    }


def bundles(client: Client) -> list[str | None]:
    config = client.live_get(VALIDATING_WEBHOOK_CONFIGURATIONS, VWC)
    return [h["clientConfig"].get("caBundle") for h in config["webhooks"]]


def test_two_replicas_end_with_the_same_ca_and_certificate(make: Any, client: Client) -> None:
    first, second = make(), make()
    assert first.ready() == f"the Secret {NS}/{SECRET} has not been read yet"
    pair = first.ensure()
    assert second.ensure() == pair
    assert first.current() == second.current() == pair
    data = stored(client)
    assert sorted(data) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert (data["tls.crt"], data["tls.key"]) == (pair.cert_pem, pair.key_pem)
    assert verifies(pair.cert_pem, data["ca.crt"])
    assert names_of(pair.cert_pem) == NAMES
    secret = client.live_get(SECRETS, SECRET, NS)
    assert secret["type"] == "Opaque"
    assert first.ready() is None and second.ready() is None


def test_a_replica_that_loses_the_create_race_uses_the_winners(
    make: Any, client: Client, cluster: Cluster
) -> None:
    accounting = cluster.server.accounting
    held, answered = threading.Event(), threading.Event()
    cluster.server.faults.add(
        Fault(verb="create", resource="secrets", hold=held, answered=answered)
    )
    loser, winner = make(), make()
    results: list[KeyPair] = []
    thread = threading.Thread(target=lambda: results.append(loser.ensure()))
    thread.start()
    try:
        eventually(lambda: accounting.total("create", "secrets") == 1)  # the loser's, held
        theirs = winner.ensure()
    finally:
        held.set()
    thread.join(30)
    assert answered.is_set() and results == [theirs]
    assert stored(client)["tls.crt"] == theirs.cert_pem
    assert accounting.total("create", "secrets") == 2


def test_a_restarted_replica_reuses_the_stored_ca_and_certificate(
    make: Any, client: Client, cluster: Cluster
) -> None:
    first = make(check_interval=0.05)
    first.start()
    pair = eventually(first.current)
    data = stored(client)
    first.stop()
    writes = cluster.server.accounting.total("update", "secrets")
    restarted = make()
    assert restarted.ensure() == pair
    assert stored(client) == data
    assert cluster.server.accounting.total("update", "secrets") == writes


def test_an_empty_secret_made_by_someone_else_is_filled(make: Any, client: Client) -> None:
    put_secret(client, None)
    uid = client.live_get(SECRETS, SECRET, NS)["metadata"]["uid"]
    pair = make().ensure()
    secret = client.live_get(SECRETS, SECRET, NS)
    assert secret["metadata"]["uid"] == uid  # updated, not replaced
    assert base64.b64decode(secret["data"]["tls.crt"]) == pair.cert_pem


def test_other_keys_of_the_secret_are_kept(make: Any, client: Client) -> None:
    put_secret(client, {"note": b"kept"})
    make().ensure()
    assert stored(client)["note"] == b"kept"


def test_a_certificate_near_expiry_is_rotated_under_the_same_ca(make: Any, client: Client) -> None:
    # Rotation is due a whole validity before expiry: every pass after the first rotates.
    short = timedelta(seconds=30)
    certs = make(validity=short, rotate_before=short)
    first = certs.ensure()
    ca_before = {k: v for k, v in stored(client).items() if k.startswith("ca.")}
    second = certs.ensure()
    assert second != first and certs.current() == second
    data = stored(client)
    assert {k: v for k, v in data.items() if k.startswith("ca.")} == ca_before
    assert data["tls.crt"] == second.cert_pem
    assert verifies(second.cert_pem, data["ca.crt"])
    expiry = x509.load_pem_x509_certificate(second.cert_pem).not_valid_after_utc
    assert expiry <= datetime.now(UTC) + short


def test_a_certificate_not_yet_near_expiry_is_kept(make: Any) -> None:
    certs = make(validity=timedelta(hours=1), rotate_before=timedelta(minutes=10))
    assert certs.ensure() == certs.ensure()


def test_a_ca_that_would_not_outlive_the_new_certificate_is_replaced_and_kept_in_the_bundle(
    make: Any, client: Client
) -> None:
    old_ca = generate_ca("old", timedelta(hours=2))
    old = issue_serving_cert(old_ca, NAMES, valid_for=timedelta(hours=2))
    put_secret(
        client,
        {
            "ca.crt": old_ca.cert_pem,
            "ca.key": old_ca.key_pem,
            "tls.crt": old.cert_pem,
            "tls.key": old.key_pem,
        },
    )
    # The stored certificate expires within rotate_before (a third of a day).
    pair = make(validity=timedelta(days=1)).ensure()
    assert pair.cert_pem != old.cert_pem
    data = stored(client)
    new_ca, kept = certs_in(data["ca.crt"])
    assert kept == x509.load_pem_x509_certificate(old_ca.cert_pem)
    assert new_ca.not_valid_after_utc > datetime.now(UTC) + timedelta(days=1)
    assert data["ca.key"] != old_ca.key_pem
    # Both the new certificate and the old (still served by replicas yet to re-read) verify.
    assert verifies(pair.cert_pem, data["ca.crt"]) and verifies(old.cert_pem, data["ca.crt"])
    x509.load_pem_x509_certificate(pair.cert_pem).verify_directly_issued_by(new_ca)


def test_a_certificate_missing_a_wanted_name_is_reissued(make: Any, client: Client) -> None:
    narrow = make()
    first = narrow.ensure()
    wide = make(dns_names=[*NAMES, "hooks.default.svc.cluster.local"], ip_addresses=["10.0.0.7"])
    second = wide.ensure()
    assert second != first
    assert names_of(second.cert_pem) == [*NAMES, "hooks.default.svc.cluster.local", "10.0.0.7"]
    data = stored(client)
    assert len(certs_in(data["ca.crt"])) == 1  # the same CA, alone
    assert verifies(second.cert_pem, data["ca.crt"])
    # The narrower replica finds its names covered and takes the new certificate as it is.
    assert narrow.ensure() == second


def test_replicas_that_want_different_names_do_not_reissue_in_turn(make: Any) -> None:
    a = make(dns_names=["a.default.svc"])
    b = make(dns_names=["b.default.svc"])
    a.ensure()
    pair = b.ensure()
    assert sorted(names_of(pair.cert_pem)) == ["a.default.svc", "b.default.svc"]
    assert a.ensure() == pair and b.ensure() == pair


def test_an_invalid_serving_certificate_is_reissued_under_the_stored_ca(
    make: Any, client: Client
) -> None:
    ca = generate_ca("kept", timedelta(days=3650))
    put_secret(
        client, {"ca.crt": ca.cert_pem, "ca.key": ca.key_pem, "tls.crt": b"junk", "tls.key": b""}
    )
    pair = make().ensure()
    data = stored(client)
    assert data["ca.crt"] == ca.cert_pem and data["ca.key"] == ca.key_pem
    assert verifies(pair.cert_pem, ca.cert_pem)


def test_a_certificate_signed_by_another_ca_is_reissued(make: Any, client: Client) -> None:
    ca, stranger = generate_ca("ours", timedelta(days=3650)), generate_ca("theirs")
    foreign = issue_serving_cert(stranger, NAMES)
    put_secret(
        client,
        {
            "ca.crt": ca.cert_pem,
            "ca.key": ca.key_pem,
            "tls.crt": foreign.cert_pem,
            "tls.key": foreign.key_pem,
        },
    )
    pair = make().ensure()
    assert pair != foreign and verifies(pair.cert_pem, ca.cert_pem)


def test_a_conflict_on_update_ends_with_both_replicas_on_the_winners_certificate(
    make: Any, client: Client, cluster: Cluster
) -> None:
    make().ensure()  # a certificate for NAMES only
    wanted = [*NAMES, "hooks.default.svc.cluster.local"]
    loser, winner = make(dns_names=wanted), make(dns_names=wanted)
    accounting = cluster.server.accounting
    held, answered = threading.Event(), threading.Event()
    cluster.server.faults.add(
        Fault(verb="update", resource="secrets", hold=held, answered=answered)
    )
    results: list[KeyPair] = []
    thread = threading.Thread(target=lambda: results.append(loser.ensure()))
    thread.start()
    try:
        # The loser read the Secret and its update is in flight, held by the server.
        eventually(lambda: accounting.total("update", "secrets") == 1)
        theirs = winner.ensure()
    finally:
        held.set()
    thread.join(30)
    assert answered.is_set()
    assert results == [theirs]
    assert loser.current() == winner.current() == theirs
    assert stored(client)["tls.crt"] == theirs.cert_pem
    assert accounting.total("update", "secrets") == 2  # the loser did not write again


def test_the_ca_bundle_is_injected_into_every_webhook_and_updated_on_change(
    make: Any, client: Client, cluster: Cluster
) -> None:
    client.create(
        VALIDATING_WEBHOOK_CONFIGURATIONS, webhook_config("a.example.com", "b.example.com")
    )
    assert bundles(client) == [None, None]
    certs = make(webhook_config_name=VWC)
    certs.ensure()
    ca_crt = stored(client)["ca.crt"]
    assert bundles(client) == [base64.b64encode(ca_crt).decode()] * 2
    # Nothing differs: nothing is written.
    writes = cluster.server.accounting.total("update", "validatingwebhookconfigurations")
    certs.ensure()
    assert cluster.server.accounting.total("update", "validatingwebhookconfigurations") == writes
    # A new CA (its Secret emptied): the bundle follows.
    secret = client.live_get(SECRETS, SECRET, NS)
    client.replace(SECRETS, {**secret, "data": {}}, NS)
    pair = certs.ensure()
    new_ca = stored(client)["ca.crt"]
    assert new_ca != ca_crt
    assert bundles(client) == [base64.b64encode(new_ca).decode()] * 2
    assert verifies(pair.cert_pem, new_ca)
    # A webhook whose bundle someone changed is put right.
    config = client.live_get(VALIDATING_WEBHOOK_CONFIGURATIONS, VWC)
    config["webhooks"][1]["clientConfig"]["caBundle"] = base64.b64encode(b"stale").decode()
    client.replace(VALIDATING_WEBHOOK_CONFIGURATIONS, config)
    certs.ensure()
    assert bundles(client) == [base64.b64encode(new_ca).decode()] * 2


def test_a_conflict_on_the_webhook_configuration_is_retried_from_a_fresh_read(
    make: Any, client: Client, cluster: Cluster
) -> None:
    client.create(VALIDATING_WEBHOOK_CONFIGURATIONS, webhook_config("a.example.com"))
    held, answered = threading.Event(), threading.Event()
    cluster.server.faults.add(
        Fault(
            verb="update",
            resource="validatingwebhookconfigurations",
            hold=held,
            answered=answered,
        )
    )
    certs = make(webhook_config_name=VWC)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            certs.ensure()
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    accounting = cluster.server.accounting
    try:
        eventually(lambda: accounting.total("update", "validatingwebhookconfigurations") == 1)
        config = client.live_get(VALIDATING_WEBHOOK_CONFIGURATIONS, VWC)
        config["metadata"].setdefault("labels", {})["touched"] = "yes"
        client.replace(VALIDATING_WEBHOOK_CONFIGURATIONS, config)
    finally:
        held.set()
    thread.join(30)
    assert errors == []
    config = client.live_get(VALIDATING_WEBHOOK_CONFIGURATIONS, VWC)
    assert config["metadata"]["labels"] == {"touched": "yes"}
    assert bundles(client) == [base64.b64encode(stored(client)["ca.crt"]).decode()]
    assert accounting.total("update", "validatingwebhookconfigurations") == 3


def test_a_missing_webhook_configuration_is_warned_of_once_and_set_when_it_appears(
    make: Any, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    certs = make(webhook_config_name=VWC)
    with caplog.at_level(logging.WARNING, logger="ome.runtime.webhookcerts"):
        certs.ensure()
        certs.ensure()
    assert certs.ready() is None
    warned = [r for r in caplog.records if "not found" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    client.create(VALIDATING_WEBHOOK_CONFIGURATIONS, webhook_config("a.example.com"))
    certs.ensure()
    assert bundles(client) == [base64.b64encode(stored(client)["ca.crt"]).decode()]


def test_the_background_loop_retries_failures_and_follows_other_replicas(
    make: Any, cluster: Cluster
) -> None:
    cluster.server.faults.add(Fault(verb="get", resource="secrets", code=500, times=None))
    certs = make(check_interval=0.05)
    certs.start()
    eventually(lambda: (why := certs.ready()) is not None and "500" in why)
    assert certs.current() is None
    cluster.server.faults.clear()
    pair = eventually(certs.current)
    assert certs.ready() is None
    # Another replica rotates (it wants one more name): this one follows on a later pass.
    other = make(dns_names=[*NAMES, "extra.default.svc"])
    rotated = other.ensure()
    assert rotated != pair
    eventually(lambda: certs.current() == rotated)


def test_watched_an_idle_replica_sends_no_request_and_a_change_is_put_right_at_once(
    make: Any, client: Client, cluster: Cluster
) -> None:
    """With informers (as the manager runs it): once the caches are synced, passes read them
    and send nothing, however often they run; a caBundle someone overwrites is restored
    on the change's watch event, long before the next pass (an hour) is due."""
    client.create(VALIDATING_WEBHOOK_CONFIGURATIONS, webhook_config("a.example.com"))
    factory = InformerFactory(Rest(cluster.api))
    certs = make(webhook_config_name=VWC, informers=factory, check_interval=3600)
    factory.start()
    try:
        certs.start()
        eventually(lambda: certs.current() is not None and factory.has_synced())
        wanted = base64.b64encode(stored(client)["ca.crt"]).decode()
        eventually(lambda: bundles(client) == [wanted])
        accounting = cluster.server.accounting
        accounting.reset()
        for _ in range(5):
            certs.ensure()
        sent = [r for r in accounting.snapshot() if r["verb"] != "watch"]
        assert sent == []
        config = client.live_get(VALIDATING_WEBHOOK_CONFIGURATIONS, VWC)
        config["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(b"stale").decode()
        client.replace(VALIDATING_WEBHOOK_CONFIGURATIONS, config)
        eventually(lambda: bundles(client) == [wanted], timeout=10)
    finally:
        certs.stop()
        factory.stop()


def test_arguments_are_checked(client: Client) -> None:
    with pytest.raises(ValueError, match="at least one DNS name or IP"):
        SecretCerts(client, NS, SECRET, [])
    with pytest.raises(ValueError):
        SecretCerts(client, NS, SECRET, NAMES, ip_addresses=["not-an-ip"])
    with pytest.raises(ValueError, match="validity"):
        SecretCerts(client, NS, SECRET, NAMES, validity=timedelta(0))

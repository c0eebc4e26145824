"""Tests for ``ome.runtime.certs``: the certificates it makes are ones TLS clients accept.

Handshakes run between two in-memory ``ssl.SSLObject`` ends, so no port or thread is needed.
"""

from __future__ import annotations

import ipaddress
import ssl
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID

from ome.runtime.certs import KeyPair, generate_ca, issue_serving_cert, needs_rotation, not_after


@pytest.fixture(scope="module")
def ca() -> KeyPair:
    return generate_ca("test-ca")


@pytest.fixture(scope="module")
def serving(ca: KeyPair) -> KeyPair:
    return issue_serving_cert(ca, ["hook.webhooks.svc", "localhost"], ["127.0.0.1"])


def handshake(server: KeyPair, trusted_ca: KeyPair, hostname: str, tmp_path: Path) -> None:
    """A full TLS handshake; raises ``ssl.SSLError`` when the client rejects the server."""
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_file.write_bytes(server.cert_pem)
    key_file.write_bytes(server.key_pem)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert_file, key_file)
    client_ctx = ssl.create_default_context(cadata=trusted_ca.cert_pem.decode())

    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname=hostname)
    srv = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(20):
        for side, obj in (("client", client), ("server", srv)):
            if not done[side]:
                try:
                    obj.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return
    raise AssertionError("handshake did not finish")


@pytest.mark.parametrize("hostname", ["hook.webhooks.svc", "localhost", "127.0.0.1"])
def test_client_trusting_the_ca_accepts_every_name_of_the_serving_cert(
    ca: KeyPair, serving: KeyPair, hostname: str, tmp_path: Path
) -> None:
    handshake(serving, ca, hostname, tmp_path)


def test_client_trusting_another_ca_rejects_the_cert(serving: KeyPair, tmp_path: Path) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        handshake(serving, generate_ca("other-ca"), "localhost", tmp_path)


def test_client_rejects_a_host_name_the_cert_does_not_carry(
    ca: KeyPair, serving: KeyPair, tmp_path: Path
) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        handshake(serving, ca, "other.webhooks.svc", tmp_path)


def test_serving_cert_is_signed_by_the_ca_and_carries_sans_and_server_auth(
    ca: KeyPair, serving: KeyPair
) -> None:
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    cert = x509.load_pem_x509_certificate(serving.cert_pem)
    cert.verify_directly_issued_by(ca_cert)

    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["hook.webhooks.svc", "localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca

    constraints = ca_cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.value.ca
    assert constraints.critical


def test_cert_does_not_verify_against_another_ca_of_the_same_name(serving: KeyPair) -> None:
    other = x509.load_pem_x509_certificate(generate_ca("test-ca").cert_pem)
    with pytest.raises(InvalidSignature):
        x509.load_pem_x509_certificate(serving.cert_pem).verify_directly_issued_by(other)


def test_serving_cert_needs_a_name(ca: KeyPair) -> None:
    with pytest.raises(ValueError, match="at least one"):
        issue_serving_cert(ca, [])


def test_ip_only_serving_cert_works(ca: KeyPair, tmp_path: Path) -> None:
    handshake(issue_serving_cert(ca, [], ["127.0.0.1"]), ca, "127.0.0.1", tmp_path)


def test_not_after_follows_valid_for() -> None:
    before = datetime.now(UTC)
    ca = generate_ca("short-ca", valid_for=timedelta(days=30))
    cert = issue_serving_cert(ca, ["localhost"], valid_for=timedelta(days=2))
    assert timedelta(days=2) - timedelta(seconds=5) <= not_after(cert.cert_pem) - before
    assert not_after(cert.cert_pem) - before <= timedelta(days=2) + timedelta(seconds=5)
    assert not_after(cert.cert_pem).tzinfo is not None


def test_serving_cert_never_outlives_its_ca() -> None:
    ca = generate_ca("short-ca", valid_for=timedelta(days=1))
    cert = issue_serving_cert(ca, ["localhost"], valid_for=timedelta(days=365))
    assert not_after(cert.cert_pem) == not_after(ca.cert_pem)


def test_needs_rotation_only_within_the_window_before_expiry(serving: KeyPair) -> None:
    expiry = not_after(serving.cert_pem)
    window = timedelta(days=30)
    assert not needs_rotation(serving.cert_pem, datetime.now(UTC), window)
    assert not needs_rotation(serving.cert_pem, expiry - window - timedelta(seconds=1), window)
    assert needs_rotation(serving.cert_pem, expiry - window, window)
    assert needs_rotation(serving.cert_pem, expiry - timedelta(days=1), window)
    assert needs_rotation(serving.cert_pem, expiry + timedelta(days=1), window)


def test_needs_rotation_rejects_a_naive_time(serving: KeyPair) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        needs_rotation(serving.cert_pem, datetime.now(), timedelta(days=1))

"""Self-signed CAs and the serving certificates they sign, as PEM bytes.

Owns key generation, issuance and expiry checks for webhook TLS. It must never import
``ome_sim`` (product code uses it) nor touch files, the network or a cluster.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_VALIDITY = timedelta(days=365)
# Backdate notBefore a little so a freshly issued cert is valid on a peer whose clock lags.
_CLOCK_SKEW = timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def generate_ca(common_name: str, valid_for: timedelta = DEFAULT_VALIDITY) -> KeyPair:
    """A self-signed CA (basicConstraints CA=true, keyCertSign) valid from now for ``valid_for``."""
    key = _new_key()
    now = datetime.now(UTC)
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + valid_for)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_serving_cert(
    ca: KeyPair,
    dns_names: list[str],
    ip_addresses: list[str] | None = None,
    valid_for: timedelta = DEFAULT_VALIDITY,
) -> KeyPair:
    """A TLS server certificate for ``dns_names`` and ``ip_addresses``, signed by ``ca``.

    The first DNS name (or IP) becomes the subject CN; every name is a SAN, since TLS
    clients match host names against SANs only. Raises ``ValueError`` without any name.
    """
    ips = [ipaddress.ip_address(ip) for ip in ip_addresses or []]
    if not dns_names and not ips:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC private key")
    key = _new_key()
    now = datetime.now(UTC)
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ip) for ip in ips]
    not_after = min(now + valid_for, ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0] if dns_names else str(ips[0])))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def not_after(cert_pem: bytes) -> datetime:
    """The certificate's expiry, timezone-aware (UTC)."""
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def needs_rotation(cert_pem: bytes, now: datetime, before: timedelta) -> bool:
    """True once ``now`` is within ``before`` of the certificate's expiry (or past it)."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    return now >= not_after(cert_pem) - before

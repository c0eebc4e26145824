"""Where the webhook server's certificate comes from, and how it is kept fresh.

- ``DirectoryCerts``: a mounted Secret (cert-manager's ``tls.crt`` and ``tls.key``), re-read
  when its files change. Someone else issues and rotates it, and injects the CA bundle.
- ``SecretCerts``: self-managed. A CA and a serving certificate live in one Secret, so every
  replica serves the same ones; whichever replica first finds them missing, invalid, short of
  a wanted name or near expiry writes new ones (a 409 means another replica did: its result
  is read back and used), and the CA goes into a ValidatingWebhookConfiguration's
  ``caBundle``.

Both hold the pair in memory only and never write key material to disk. Certificates are
made by ``ome.runtime.certs``. It knows nothing of what the webhooks check.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import logging
import os
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from ome.kube import JSON, Resource

from .certs import KeyPair, generate_ca, issue_serving_cert, needs_rotation, not_after
from .client import Client
from .informer import EventHandler, Informer, InformerFactory
from .rest import SECRETS, VALIDATING_WEBHOOK_CONFIGURATIONS, status_of

log = logging.getLogger(__name__)

CA_VALIDITY_FACTOR = 10
"""A self-managed CA is valid this many times as long as the serving certificates it signs,
so it outlives several rotations of them before it is replaced itself."""
RETRY_WITHOUT_CERT = 5.0
"""Seconds between passes while no certificate is held yet (if less than the interval)."""
MAX_CONFLICTS = 5
"""Write attempts per pass that may meet a 409 before the pass gives up."""

CA_CRT, CA_KEY, TLS_CRT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"

# What a failed API call raises: an answer other than 2xx, a transport failure or timeout.
_API_ERRORS = (ApiException, HTTPError, OSError)


class CertSource(Protocol):
    """A serving certificate that may change while the server runs."""

    def current(self) -> KeyPair | None:
        """The pair to serve now, or None while there is none."""
        ...

    def start(self) -> None:
        """Begin watching or rotating, in a daemon thread."""
        ...

    def stop(self) -> None: ...

    def ready(self) -> str | None:
        """None while a pair is held; otherwise why there is none."""
        ...


def check_pair(pair: KeyPair) -> str | None:
    """Why ``pair`` cannot be served (unparsable, or a key that is not the certificate's),
    or None. ``cert_pem`` may hold a chain: the first certificate is the server's."""
    try:
        cert = x509.load_pem_x509_certificates(pair.cert_pem)[0]
    except ValueError as e:
        return f"the certificate is not PEM: {e}"
    key = _private_key(pair.key_pem)
    if key is None:
        return "the key is not an unencrypted PEM private key"
    if not _same_key(cert, key):
        return "the key does not belong to the certificate"
    return None


def _private_key(pem: bytes | None) -> PrivateKeyTypes | None:
    if not pem:
        return None
    try:
        return serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return None


def _same_key(cert: x509.Certificate, key: PrivateKeyTypes) -> bool:
    der, spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    try:
        return cert.public_key().public_bytes(der, spki) == key.public_key().public_bytes(der, spki)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return False


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _describe(error: BaseException) -> str:
    if isinstance(error, ApiException):
        message = status_of(error).get("message") or error.reason or ""
        return f"{error.status} {message}".strip()
    return f"{type(error).__name__}: {error}"


# --- a fixed pair -----------------------------------------------------------------------------


class StaticCerts:
    """A pair that never changes, held from the start: the self-signed certificate a server
    makes for itself when it is given none (the metrics server, as controller-runtime's;
    scrapers skip verifying it, or are given a mounted one with ``--metrics-cert-dir``)."""

    def __init__(self, pair: KeyPair) -> None:
        self._pair = pair

    @classmethod
    def self_signed(cls, dns_names: list[str], valid_for: timedelta) -> StaticCerts:
        ca = generate_ca(f"{dns_names[0]}-ca", valid_for)
        return cls(issue_serving_cert(ca, dns_names, valid_for=valid_for))

    def current(self) -> KeyPair | None:
        return self._pair

    def start(self) -> None:
        return None

    def stop(self) -> None:
        return None

    def ready(self) -> str | None:
        return None


# --- a mounted Secret -----------------------------------------------------------------------


class _Background(ABC):
    """The thread a certificate source keeps its pair fresh in: started once, stopped by
    setting ``_stop`` (which ``_run`` waits on between checks); ``_wake`` (set by ``stop``
    too) cuts a wait short."""

    _thread_name = "webhook-certs"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` or until woken; True once stopped."""
        self._wake.wait(seconds)
        self._wake.clear()
        return self._stop.is_set()

    @abstractmethod
    def _run(self) -> None:
        """The thread's loop: a subclass watches or rotates until ``_pause`` says stopped."""

    def _start_thread(self) -> None:
        if self._thread is not None:
            raise RuntimeError("already started")
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)


class DirectoryCerts(_Background):
    """``tls.crt`` and ``tls.key`` in ``directory`` (a mounted Secret, as cert-manager makes).

    Both files are read at ``start`` and re-read every ``check_interval`` seconds; a pair
    whose bytes changed replaces the one held if it is usable, else the old pair is kept and
    the error logged (once per change). Contents are compared, not mtimes, since the kubelet
    swaps a symlink to a new directory and the files' own mtimes tell nothing.
    """

    def __init__(self, directory: str, check_interval: float = 10.0, what: str = "webhook") -> None:
        self.directory = directory
        self.check_interval = check_interval
        self.what = what  # whose certificate, for the log lines and the thread's name
        self._thread_name = f"{what}-certs-dir"
        self._lock = threading.Lock()
        self._current: KeyPair | None = None
        self._problem: str | None = "not started"
        self._seen: tuple[bytes | str, bytes | str] | None = None
        super().__init__()

    def current(self) -> KeyPair | None:
        with self._lock:
            return self._current

    def ready(self) -> str | None:
        with self._lock:
            return None if self._current is not None else self._problem

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("already started")
        self._check()
        self._start_thread()

    def _run(self) -> None:
        while not self._stop.wait(self.check_interval):
            try:
                self._check()
            except Exception:
                log.exception("checking the %s certificate in %s failed", self.what, self.directory)

    def _read(self, name: str) -> bytes | str:
        path = os.path.join(self.directory, name)
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            return f"{path}: {e.strerror or e}"

    def _check(self) -> None:
        seen = (self._read(TLS_CRT), self._read(TLS_KEY))
        if seen == self._seen:
            return
        problem = self._problem_of(seen)
        if problem is not None and "does not belong" in problem:
            # Read while the kubelet swapped the files? Read once more before judging.
            again = (self._read(TLS_CRT), self._read(TLS_KEY))
            if again != seen:
                seen, problem = again, self._problem_of(again)
        self._seen = seen
        cert, key = seen
        with self._lock:
            had = self._current is not None
            if problem is None:
                assert isinstance(cert, bytes) and isinstance(key, bytes)
                self._current, self._problem = KeyPair(cert, key), None
            elif not had:
                self._problem = problem
        if problem is None:
            log.info(
                "loaded the %s certificate from %s (expires %s)",
                self.what,
                self.directory,
                not_after(cert).isoformat() if isinstance(cert, bytes) else "?",
            )
        elif had:
            log.error(
                "keeping the %s certificate held: the new one is unusable: %s", self.what, problem
            )
        else:
            log.error("no %s certificate: %s", self.what, problem)

    def _problem_of(self, seen: tuple[bytes | str, bytes | str]) -> str | None:
        cert, key = seen
        if isinstance(cert, str):
            return cert
        if isinstance(key, str):
            return key
        why = check_pair(KeyPair(cert, key))
        return f"{os.path.join(self.directory, TLS_CRT)}: {why}" if why else None


# --- a self-managed Secret ------------------------------------------------------------------


@dataclass
class _Stored:
    """What a Secret holds, parsed; ``problem`` says why it needs a new serving certificate."""

    ca: KeyPair | None = None
    ca_cert: x509.Certificate | None = None
    bundle: list[x509.Certificate] = field(default_factory=list)  # all of ca.crt
    ca_crt: bytes = b""  # ca.crt as stored
    serving: KeyPair | None = None
    serving_dns: list[str] = field(default_factory=list)
    serving_ips: list[str] = field(default_factory=list)
    problem: str | None = None
    missing_names: bool = False


@dataclass(frozen=True)
class _Held:
    serving: KeyPair
    ca_bundle: bytes


class SecretCerts(_Background):
    """A CA and a serving certificate kept in the Secret ``namespace/secret_name`` (type
    Opaque, keys ``ca.crt``, ``ca.key``, ``tls.crt``, ``tls.key``), shared by every replica.

    Each pass (``ensure``; ``start`` runs one at once in a daemon thread, then one every
    ``check_interval`` seconds) reads the Secret live and

    - creates it with a new CA and serving certificate when it is absent; fills it when it
      exists without them (a manifest may ship it empty);
    - issues a new serving certificate when the one stored is invalid, does not cover every
      wanted DNS name and IP, or expires within ``rotate_before`` (default: a third of
      ``validity``). The CA is kept while it outlives the new certificate; otherwise a new CA
      signs it and the old CA stays in ``ca.crt`` (a bundle) until it expires, so clients
      trust certificates of both until every replica serves the new one;
    - writes with the resourceVersion read: on a 409 another replica wrote first, and its
      result is read back and used;
    - when ``webhook_config_name`` is set, makes every webhook of that
      ValidatingWebhookConfiguration carry ``clientConfig.caBundle`` = base64(ca.crt),
      before this replica serves a certificate it just read.

    A certificate re-issued for missing names keeps the names the old one had too, so two
    replicas that want different names (a rollout that renames the Service) do not re-issue
    in turn forever. A failed pass is logged and retried (within ``RETRY_WITHOUT_CERT``
    seconds while no certificate is held).

    Given ``informers``, the Secret and the configuration are watched (one object each, by a
    ``metadata.name`` field selector) instead of read every pass: a pass reads the caches
    once they are synced, and a change to either wakes a pass at once. What the cache shows
    wrong is read live before it is written over (the cache may lag the write it shows);
    so an idle replica sends no request at all.
    """

    def __init__(
        self,
        client: Client,
        namespace: str,
        secret_name: str,
        dns_names: list[str],
        ip_addresses: list[str] | None = None,
        webhook_config_name: str | None = None,
        validity: timedelta = timedelta(days=365),
        rotate_before: timedelta | None = None,
        check_interval: float = 60.0,
        informers: InformerFactory | None = None,
    ) -> None:
        if not dns_names and not ip_addresses:
            raise ValueError("a serving certificate needs at least one DNS name or IP address")
        if validity <= timedelta(0):
            raise ValueError("validity must be positive")
        self.client = client
        self.namespace = namespace
        self.secret_name = secret_name
        self.dns_names = list(dns_names)
        self.ip_addresses = [str(ipaddress.ip_address(ip)) for ip in ip_addresses or []]
        self.webhook_config_name = webhook_config_name
        self.validity = validity
        self.rotate_before = rotate_before if rotate_before is not None else validity / 3
        if self.rotate_before < timedelta(0):
            raise ValueError("rotate_before must not be negative")
        if self.rotate_before >= validity:
            log.warning(
                "rotate_before (%s) is not shorter than validity (%s): every pass re-issues "
                "the webhook certificate",
                self.rotate_before,
                validity,
            )
        self.check_interval = check_interval
        self._lock = threading.Lock()  # guards _current and _error
        self._pass_lock = threading.Lock()  # one pass at a time
        self._current: KeyPair | None = None
        self._error: str | None = None
        self._config_missing_logged = False
        super().__init__()
        self._secrets: Informer | None = None
        self._configs: Informer | None = None
        if informers is not None:
            wake = EventHandler(
                on_add=lambda _o: self._wake.set(),
                on_update=lambda _o, _n: self._wake.set(),
                on_delete=lambda _o: self._wake.set(),
            )
            self._secrets = informers.informer(
                SECRETS, namespace, field_selector=f"metadata.name={secret_name}"
            )
            self._secrets.add_handler(wake)
            if webhook_config_name:
                self._configs = informers.informer(
                    VALIDATING_WEBHOOK_CONFIGURATIONS,
                    field_selector=f"metadata.name={webhook_config_name}",
                )
                self._configs.add_handler(wake)

    def _read(
        self, informer: Informer | None, resource: Resource, name: str, namespace: str | None
    ) -> tuple[JSON | None, bool]:
        """The object from ``informer``'s cache once it is synced, else live; and whether it
        came from the cache (so that what it shows wrong is confirmed live)."""
        if informer is not None and informer.has_synced():
            return informer.get(f"{namespace}/{name}" if namespace else name), True
        return self.client.live_get_or_none(resource, name, namespace), False

    @property
    def _where(self) -> str:
        return f"Secret {self.namespace}/{self.secret_name}"

    def current(self) -> KeyPair | None:
        with self._lock:
            return self._current

    def ready(self) -> str | None:
        with self._lock:
            if self._current is not None:
                return None
            return self._error or f"the {self._where} has not been read yet"

    def start(self) -> None:
        self._start_thread()

    def _run(self) -> None:
        while not self._stop.is_set():
            delay = self.check_interval
            try:
                self.ensure()
            except Exception as e:
                log.error(
                    "webhook certificates from the %s: %s (retrying)",
                    self._where,
                    _describe(e),
                    exc_info=not isinstance(e, _API_ERRORS),  # a bug: its traceback
                )
                if self.current() is None:
                    delay = min(delay, RETRY_WITHOUT_CERT)
            if self._pause(delay):
                return

    def ensure(self) -> KeyPair:
        """One pass: bring the Secret (and the caBundle) up to date, and hold its pair."""
        with self._pass_lock:
            try:
                held = self._sync_secret()
            except Exception as e:
                with self._lock:
                    self._error = f"no certificate from the {self._where}: {_describe(e)}"
                raise
            failure: Exception | None = None
            if self.webhook_config_name:
                try:
                    self._inject_ca_bundle(held.ca_bundle)
                except Exception as e:
                    failure = e
            with self._lock:
                changed = self._current != held.serving
                self._current, self._error = held.serving, None
            if changed:
                log.info(
                    "serving the webhook certificate from the %s (expires %s)",
                    self._where,
                    not_after(held.serving.cert_pem).isoformat(),
                )
            if failure is not None:
                raise failure
            return held.serving

    # -- the Secret ----------------------------------------------------------------------------

    def _sync_secret(self) -> _Held:
        cached_first = True
        for _ in range(MAX_CONFLICTS):
            secret, cached = self._read(
                self._secrets if cached_first else None, SECRETS, self.secret_name, self.namespace
            )
            stored = self._assess((secret.get("data") or {}) if secret is not None else {})
            if stored.problem is not None and cached:
                cached_first = False  # confirm live before writing over it
                secret = self.client.live_get_or_none(SECRETS, self.secret_name, self.namespace)
                stored = self._assess((secret.get("data") or {}) if secret is not None else {})
            if stored.problem is None:
                assert stored.serving is not None
                return _Held(stored.serving, stored.ca_crt)
            cached_first = False
            data = self._renew(stored)
            try:
                if secret is None:
                    self.client.create(SECRETS, self._new_secret(data), self.namespace)
                    log.info("created the %s with a new CA and certificate", self._where)
                else:
                    self.client.replace(SECRETS, self._updated(secret, data), self.namespace)
                    log.info(
                        "issued a new webhook certificate into the %s: %s",
                        self._where,
                        stored.problem,
                    )
            except ApiException as e:
                if e.status != 409:
                    raise
                log.info("another replica wrote the %s first: reading theirs", self._where)
                continue
            return _Held(KeyPair(data[TLS_CRT], data[TLS_KEY]), data[CA_CRT])
        raise RuntimeError(f"the {self._where} changed under every one of {MAX_CONFLICTS} writes")

    def _assess(self, data: JSON) -> _Stored:
        values = {key: _decode(data.get(key)) for key in (CA_CRT, CA_KEY, TLS_CRT, TLS_KEY)}
        stored = _Stored()
        if not any(values.values()):
            stored.problem = "it holds no certificates"
            return stored
        stored.ca_crt = values[CA_CRT] or b""
        try:
            stored.bundle = x509.load_pem_x509_certificates(stored.ca_crt)
        except ValueError:
            stored.problem = f"{CA_CRT} holds no PEM certificate"
            return stored
        ca_key = _private_key(values[CA_KEY])
        if ca_key is None:
            stored.problem = f"{CA_KEY} holds no PEM private key"
            return stored
        stored.ca_cert = next((c for c in stored.bundle if _same_key(c, ca_key)), None)
        if stored.ca_cert is None:
            stored.problem = f"no certificate in {CA_CRT} belongs to {CA_KEY}"
            return stored
        stored.ca = KeyPair(_pem(stored.ca_cert), values[CA_KEY] or b"")
        stored.problem = self._serving_problem(stored, values[TLS_CRT], values[TLS_KEY])
        return stored

    def _serving_problem(
        self, stored: _Stored, cert_pem: bytes | None, key_pem: bytes | None
    ) -> str | None:
        if not cert_pem or not key_pem:
            return f"{TLS_CRT} or {TLS_KEY} is missing"
        why = check_pair(KeyPair(cert_pem, key_pem))
        if why is not None:
            return f"{TLS_CRT}/{TLS_KEY}: {why}"
        cert = x509.load_pem_x509_certificate(cert_pem)
        assert stored.ca_cert is not None
        try:
            cert.verify_directly_issued_by(stored.ca_cert)
        except (ValueError, TypeError, InvalidSignature):
            return f"{TLS_CRT} is not signed by the CA"
        try:
            sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            sans = x509.SubjectAlternativeName([])
        stored.serving_dns = [d.lower() for d in sans.get_values_for_type(x509.DNSName)]
        stored.serving_ips = [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
        stored.serving = KeyPair(cert_pem, key_pem)
        missing = [d for d in self.dns_names if d.lower() not in stored.serving_dns]
        missing += [ip for ip in self.ip_addresses if ip not in stored.serving_ips]
        if missing:
            stored.missing_names = True
            return f"{TLS_CRT} does not cover {', '.join(missing)}"
        if needs_rotation(cert_pem, datetime.now(UTC), self.rotate_before):
            return f"{TLS_CRT} expires at {not_after(cert_pem).isoformat()}"
        return None

    def _renew(self, stored: _Stored) -> dict[str, bytes]:
        """New Secret data: a serving certificate, and a CA if the old one is not good for
        as long. Old CA certificates stay in the bundle until they expire."""
        now = datetime.now(UTC)
        ca, ca_cert = stored.ca, stored.ca_cert
        others = [c for c in stored.bundle if c is not ca_cert and c.not_valid_after_utc > now]
        if ca is None or ca_cert is None or ca_cert.not_valid_after_utc < now + self.validity:
            if ca_cert is not None and ca_cert.not_valid_after_utc > now:
                others.insert(0, ca_cert)
            ca = generate_ca(
                f"{self.secret_name}.{self.namespace} webhook CA",
                self.validity * CA_VALIDITY_FACTOR,
            )
            log.info("made a new webhook CA for the %s", self._where)
        dns, ips = list(self.dns_names), list(self.ip_addresses)
        if stored.missing_names:
            dns += [d for d in stored.serving_dns if d not in {n.lower() for n in dns}]
            ips += [ip for ip in stored.serving_ips if ip not in ips]
        serving = issue_serving_cert(ca, dns, ips, self.validity)
        bundle = ca.cert_pem + b"".join(_pem(c) for c in others)
        return {
            CA_CRT: bundle,
            CA_KEY: ca.key_pem,
            TLS_CRT: serving.cert_pem,
            TLS_KEY: serving.key_pem,
        }

    def _new_secret(self, data: dict[str, bytes]) -> JSON:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": self.secret_name, "namespace": self.namespace},
            "type": "Opaque",
            "data": _encode(data),
        }

    @staticmethod
    def _updated(secret: JSON, data: dict[str, bytes]) -> JSON:
        body = dict(secret)  # metadata keeps the resourceVersion read: a race is a 409
        body["data"] = {**(secret.get("data") or {}), **_encode(data)}
        body.setdefault("type", "Opaque")
        return body

    # -- the caBundle ----------------------------------------------------------------------------

    def _inject_ca_bundle(self, ca_bundle: bytes) -> None:
        name = self.webhook_config_name
        assert name is not None
        wanted = base64.b64encode(ca_bundle).decode()
        cached_first = True
        for _ in range(MAX_CONFLICTS):
            config, cached = self._read(
                self._configs if cached_first else None,
                VALIDATING_WEBHOOK_CONFIGURATIONS,
                name,
                None,
            )
            if cached and (config is None or _needs_bundle(config, wanted)):
                cached_first = False  # confirm live before writing over it
                config = self.client.live_get_or_none(VALIDATING_WEBHOOK_CONFIGURATIONS, name)
            cached_first = False
            if config is None:
                if not self._config_missing_logged:
                    log.warning(
                        "ValidatingWebhookConfiguration %s not found: its caBundle is set once "
                        "it exists",
                        name,
                    )
                    self._config_missing_logged = True
                return
            self._config_missing_logged = False
            changed = 0
            for hook in config.get("webhooks") or []:
                client_config = hook.setdefault("clientConfig", {})
                if client_config.get("caBundle") != wanted:
                    client_config["caBundle"] = wanted
                    changed += 1
            if not changed:
                return
            try:
                self.client.replace(VALIDATING_WEBHOOK_CONFIGURATIONS, config)
            except ApiException as e:
                if e.status != 409:
                    raise
                continue
            log.info(
                "set the caBundle of %d webhooks in ValidatingWebhookConfiguration %s",
                changed,
                name,
            )
            return
        raise RuntimeError(
            f"ValidatingWebhookConfiguration {name} changed under every one of "
            f"{MAX_CONFLICTS} writes"
        )


def _needs_bundle(config: JSON, wanted: str) -> bool:
    return any(
        (hook.get("clientConfig") or {}).get("caBundle") != wanted
        for hook in config.get("webhooks") or []
    )


def _decode(value: object) -> bytes | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _encode(data: dict[str, bytes]) -> dict[str, str]:
    return {k: base64.b64encode(v).decode() for k, v in data.items()}

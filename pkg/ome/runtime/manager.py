"""The manager owns the plumbing, as controller-runtime's does: the shared informers, the
API client, event recorders, leader election, health and readiness probes, metrics, and an
orderly stop. Controllers own decisions; the manager never makes one. It knows nothing of
TPUs.

Order of a run: probes, metrics and admission webhooks up; informers started; the leader
(or, without election, every replica) starts the controllers, each of whose workers waits
for its own informers to sync (as controller-runtime's controllers wait for their sources),
so a controller with small caches starts while the large ones still list; ready once every
informer has synced (and the webhook holds its certificate). Caches that do not sync within
``cache_sync_timeout`` stop the run with ``TimeoutError``. On stop, controllers drain, the
lease is released, informers and servers stop. Webhooks are served by every replica, leader
or not.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

from .client import Client, RetryPolicy
from .controller import Controller
from .events import EventRecorder, spam_key_by_reason
from .informer import InformerFactory
from .leader import LeaderElectionConfig, LeaderElector
from .metricsauth import DelegatingAuth
from .rest import Rest
from .serving import Check, MetricsServer, ProbeServer, parse_bind_address
from .webhook import Handler, WebhookServer
from .webhookcerts import CertSource, DirectoryCerts, SecretCerts, StaticCerts

log = logging.getLogger(__name__)

#: Exit codes of ``run``: a clean stop, and leadership lost (the process must restart).
EXIT_OK, EXIT_LOST_LEADERSHIP = 0, 1


def host_name() -> str:
    """The pod's name (``POD_NAME``, from the downward API) or else the host's: in a pod the
    two agree, but not on a host-network pod, nor where pods share the host's name (the
    simulator's kubelet)."""
    return os.environ.get("POD_NAME") or socket.gethostname()


def default_identity() -> str:
    """controller-runtime's leader-election identity: ``<host>_<uuid>``."""
    return f"{host_name()}_{uuid.uuid4()}"


@dataclass
class ManagerOptions:
    namespace: str = "ome"
    leader_elect: bool = False
    leader_election_id: str = "ome-controller-manager"
    identity: str = field(default_factory=default_identity)
    metrics_bind_address: str = ":8443"
    #: HTTPS with each scrape's bearer token reviewed by the API server (TokenReview, then a
    #: SubjectAccessReview for get on the path), as controller-runtime serves metrics; False:
    #: plain HTTP, open to whoever reaches the port (a laptop's ``make run``).
    metrics_secure: bool = True
    #: A mounted Secret's directory (tls.crt, tls.key) for the metrics server; empty: a
    #: self-signed certificate made at start (scrapers skip verifying it).
    metrics_cert_dir: str = ""
    #: The Service in front of the metrics: its DNS names go in the self-signed certificate.
    metrics_service_name: str = "ome-controller-manager-metrics-service"
    health_probe_bind_address: str = ":8081"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    cache_sync_timeout: float = 120.0
    drain_timeout: float = 30.0
    #: Admission webhooks: HOST:PORT or :PORT, "0" (the default here) for none.
    webhook_bind_address: str = "0"
    #: A mounted Secret's directory (tls.crt, tls.key), e.g. cert-manager's; empty: the
    #: manager issues its own CA and certificate and keeps them in ``webhook_secret_name``.
    webhook_cert_dir: str = ""
    webhook_secret_name: str = "ome-webhook-server-cert"
    #: The ValidatingWebhookConfiguration whose caBundle self-managed certificates fill.
    webhook_config_name: str = "ome-inferencereplica-webhook"
    #: The Service in front of the webhooks: its DNS names go in the certificate.
    webhook_service_name: str = "ome-webhook-service"
    #: More DNS names or IP addresses for the certificate (e.g. 127.0.0.1 off-cluster).
    webhook_hosts: tuple[str, ...] = ()
    webhook_cert_validity: timedelta = timedelta(days=365)
    webhook_cert_check_interval: float = 60.0

    def webhook_dns_names(self) -> list[str]:
        svc, ns = self.webhook_service_name, self.namespace
        return [f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local"]


class LeaderStatus:
    """client-go's ``leader_election_master_status{name}`` (controller-runtime serves it): 1
    while this process leads on the Lease ``name``, else 0. Read at scrape time from the
    elector's own clock, so a deposed or paused leader reports 0 as soon as it may no longer
    write. Only with leader election, as in controller-runtime: without a Lease, no series."""

    def __init__(self, name: str, leading: Callable[[], bool]) -> None:
        self._name, self._leading = name, leading

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "leader_election_master_status",
            "Whether this process is the leader (1) or a candidate (0) on the Lease name",
            labels=["name"],
        )
        family.add_metric([self._name], 1.0 if self._leading() else 0.0)
        yield family


class Manager:
    """Wires informers, controllers and leader election into one process."""

    def __init__(
        self, rest: Rest, options: ManagerOptions, registry: CollectorRegistry | None = None
    ) -> None:
        self.rest = rest
        self.options = options
        self.registry = registry if registry is not None else REGISTRY
        #: The controllers' client: while leader election is on, its writes are fenced on
        #: holding the lease (a deposed leader writes nothing more).
        self.client = Client(rest, may_write=self._may_write if options.leader_elect else None)
        #: For what every replica does, leader or not (webhook certificates).
        self._replica_client = Client(rest)
        self.informers = InformerFactory(rest)
        self.controllers: list[Controller] = []
        self._recorders: list[EventRecorder] = []
        self._health: dict[str, Check] = {}
        self._ready: dict[str, Check] = {"informers": self._informers_synced}
        self._leading = threading.Event()
        self.elector: LeaderElector | None = None
        self.probes: ProbeServer | None = None
        self.metrics: MetricsServer | None = None
        self.metrics_certs: CertSource | None = None
        # Fail fast on bad addresses, before anything starts.
        self._probe_address = parse_bind_address(options.health_probe_bind_address)
        self._metrics_address = parse_bind_address(options.metrics_bind_address)
        self._webhook_address = parse_bind_address(options.webhook_bind_address)
        self._webhooks: dict[str, Handler] = {}
        self.webhook: WebhookServer | None = None
        self.webhook_certs: CertSource | None = None
        if options.leader_elect:
            self.registry.register(LeaderStatus(options.leader_election_id, self._may_write))

    # -- wiring --------------------------------------------------------------------------

    def add_controller(self, controller: Controller) -> None:
        self.controllers.append(controller)

    def event_recorder(self, component: str, never_filtered: Collection[str] = ()) -> EventRecorder:
        """An event recorder with one spam budget per object and reason; the events of the
        ``never_filtered`` reasons are never dropped by the spam filter."""
        recorder = EventRecorder(
            self.client,
            component,
            host=host_name(),
            spam_key=spam_key_by_reason(never_filtered),
        )
        self._recorders.append(recorder)
        return recorder

    @property
    def webhooks_enabled(self) -> bool:
        return self._webhook_address is not None

    def add_webhook(self, path: str, handler: Handler) -> None:
        """Serve ``handler`` at ``path`` while the manager runs (when webhooks are enabled)."""
        if path in self._webhooks:
            raise ValueError(f"a webhook is already registered at {path}")
        self._webhooks[path] = handler

    def short_client(self) -> Client:
        """A client that gives up within a few seconds: for work an API server waits on,
        such as answering an admission review within its ``timeoutSeconds``."""
        return Client(self.rest, RetryPolicy(attempts=2, deadline=3.0, initial=0.1, cap=0.5))

    def add_health_check(self, name: str, check: Check) -> None:
        self._health[name] = check

    def add_readiness_check(self, name: str, check: Check) -> None:
        self._ready[name] = check

    def is_leader(self) -> bool:
        return self._leading.is_set()

    def leads_with_synced_caches(self) -> bool:
        """Whether this replica leads and every informer has synced: what a metric computed
        from the caches at scrape time needs (others report nothing; a cache still listing
        would show, say, every Slice as an orphan)."""
        return self.is_leader() and self.informers.has_synced()

    def _may_write(self) -> bool:
        """With leader election: only while the lease is held, and judged by the elector's
        clock (its last renewal within the renew deadline), not by whether the controllers
        were told to stop yet: a process resumed after a pause past its lease must not send
        the write its worker was about to send."""
        elector = self.elector
        return elector is not None and elector.is_leader()

    def _informers_synced(self) -> str | None:
        return None if self.informers.has_synced() else "informer caches are not synced yet"

    # -- running -------------------------------------------------------------------------

    def run(self, stop: threading.Event, started: Callable[[], None] | None = None) -> int:
        """Run until ``stop`` is set (EXIT_OK) or leadership is lost (EXIT_LOST_LEADERSHIP)."""
        self._start_servers()
        for recorder in self._recorders:
            recorder.start()
        self.informers.start()
        unsynced: list[str] = []
        ended = threading.Event()
        watch = threading.Thread(
            target=self._watch_caches,
            args=(stop, ended, unsynced),
            name="cache-sync",
            daemon=True,
        )
        try:
            if started is not None:
                started()
            watch.start()
            if not self.options.leader_elect:
                self._lead(stop)
                code = EXIT_OK
            else:
                code = self._run_elected(stop)
            ended.set()
            watch.join()
            if unsynced:
                raise TimeoutError(unsynced[0])
            return code
        finally:
            ended.set()
            for recorder in self._recorders:
                recorder.stop()
            self.informers.stop()
            self._stop_servers()

    def _watch_caches(
        self, stop: threading.Event, ended: threading.Event, unsynced: list[str]
    ) -> None:
        """Log once every informer has synced. Past ``cache_sync_timeout``, say why in
        ``unsynced`` and set ``stop``: the run winds down and raises ``TimeoutError``. Gives
        up when the run ends (``stop``, or ``ended``: leadership lost)."""
        deadline = time.monotonic() + self.options.cache_sync_timeout
        while not self.informers.wait_for_sync(0.2):
            if stop.is_set() or ended.is_set():
                return
            if time.monotonic() >= deadline:
                unsynced.append(
                    f"informer caches did not sync within {self.options.cache_sync_timeout:.0f}s"
                )
                stop.set()
                return
        log.info("informer caches synced")

    def _lead(self, stop_leading: threading.Event, stop: threading.Event | None = None) -> None:
        """Run the controllers until ``stop_leading`` is set, then stop them: drained when
        the manager was asked to stop (``stop`` set, or no election), at once when leadership
        was lost (the queued keys are the next leader's; in-flight writes are fenced)."""
        self._leading.set()
        log.info("starting %d controllers", len(self.controllers))
        for controller in self.controllers:
            controller.start()
        stop_leading.wait()
        graceful = stop is None or stop.is_set()
        log.info("stopping controllers" if graceful else "stopping controllers at once")
        self._leading.clear()
        for controller in self.controllers:
            controller.stop(self.options.drain_timeout, drain=graceful)

    def _run_elected(self, stop: threading.Event) -> int:
        lost = threading.Event()
        opts = self.options
        self.elector = LeaderElector(
            self.rest,
            LeaderElectionConfig(
                namespace=opts.namespace,
                name=opts.leader_election_id,
                identity=opts.identity,
                lease_duration=opts.lease_duration,
                renew_deadline=opts.renew_deadline,
                retry_period=opts.retry_period,
            ),
            on_started_leading=lambda leading: self._lead(leading, stop),
            on_stopped_leading=lambda: None if stop.is_set() else lost.set(),
            on_new_leader=lambda who: log.info("leader is %s", who),
        )
        self.elector.run(stop)
        if lost.is_set() and not stop.is_set():
            log.error("leader election lost: stopping so that another replica can lead")
            return EXIT_LOST_LEADERSHIP
        return EXIT_OK

    def _webhook_certs(self) -> CertSource:
        opts = self.options
        if opts.webhook_cert_dir:
            return DirectoryCerts(opts.webhook_cert_dir)
        ips, names = [], opts.webhook_dns_names()
        for host in opts.webhook_hosts:
            try:
                ipaddress.ip_address(host)
                ips.append(host)
            except ValueError:
                names.append(host)
        return SecretCerts(
            self._replica_client,
            opts.namespace,
            opts.webhook_secret_name,
            names,
            ip_addresses=ips,
            webhook_config_name=opts.webhook_config_name or None,
            validity=opts.webhook_cert_validity,
            check_interval=opts.webhook_cert_check_interval,
            informers=self.informers,
        )

    def _start_webhooks(self) -> None:
        if self._webhook_address is None:
            return
        certs = self.webhook_certs = self._webhook_certs()
        server = self.webhook = WebhookServer(*self._webhook_address, certs)
        for path, handler in self._webhooks.items():
            server.register(path, handler)
        certs.start()
        server.start()
        self._ready["webhook"] = server.ready
        log.info("serving admission webhooks on port %d", server.port)

    def _start_servers(self) -> None:
        self._start_webhooks()
        if self._probe_address is not None:
            self.probes = ProbeServer(*self._probe_address)
            self.probes.health.update(self._health)
            self.probes.ready.update(self._ready)
            self.probes.start()
            log.info("serving probes on port %d", self.probes.port)
        if self._metrics_address is not None:
            certs, auth = self._metrics_security()
            self.metrics = MetricsServer(
                *self._metrics_address, registry=self.registry, certs=certs, auth=auth
            )
            log.info(
                "serving metrics on port %d (%s%s)",
                self.metrics.port,
                self.metrics.scheme,
                ", scrapes authenticated and authorized by the API server" if auth else "",
            )

    def _metrics_security(self) -> tuple[CertSource | None, DelegatingAuth | None]:
        """The certificate and authenticator of secure metrics, or (None, None) for plain
        HTTP. The reviews go through a short, unfenced client: every replica serves its
        metrics, the leader or not, and a scrape does not wait long."""
        opts = self.options
        if not opts.metrics_secure:
            return None, None
        certs: CertSource
        if opts.metrics_cert_dir:
            certs = self.metrics_certs = DirectoryCerts(opts.metrics_cert_dir, what="metrics")
            certs.start()
        else:
            svc, ns = opts.metrics_service_name, opts.namespace
            names = ["localhost", f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local"]
            certs = StaticCerts.self_signed(names, timedelta(days=365))
        reviews = self.short_client()
        return certs, DelegatingAuth(reviews.create)

    def _stop_servers(self) -> None:
        if self.webhook is not None:
            self.webhook.stop()
        if self.webhook_certs is not None:
            self.webhook_certs.stop()
        if self.probes is not None:
            self.probes.stop()
        if self.metrics is not None:
            self.metrics.stop()
        if self.metrics_certs is not None:
            self.metrics_certs.stop()

"""The manager: probes and metrics, leader election between managers (exactly one
reconciles; a killed leader is replaced within lease duration plus retry period), SIGTERM,
JSON logs, and a quiet cost of nothing but watches and lease renewals."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

import ome
from ome.api.v1beta1 import INFERENCE_SERVICES
from ome.kube import JSON
from ome.runtime.certs import generate_ca, issue_serving_cert
from ome.runtime.controller import Controller, ControllerMetrics
from ome.runtime.manager import EXIT_OK, Manager, ManagerOptions
from ome.runtime.rest import CONFIGMAPS, LEASES, SECRETS, Rest
from ome.runtime.workqueue import RateLimitingQueue
from ome_sim.apiserver.faults import Fault
from test.cluster import Cluster, Kubectl
from test.helpers import eventually, scrape_https
from test.manifests import configmap

FAST = {"lease_duration": 2.0, "renew_deadline": 1.5, "retry_period": 0.25}


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@dataclass
class Running:
    manager: Manager
    stop: threading.Event
    thread: threading.Thread
    code: list[int] = field(default_factory=list)

    def halt(self) -> int:
        self.stop.set()
        self.thread.join(30)
        return self.code[0]


def run_manager(manager: Manager) -> Running:
    stop = threading.Event()
    running = Running(manager, stop, threading.Thread(target=lambda: None))

    def target() -> None:
        running.code.append(manager.run(stop))

    running.thread = threading.Thread(target=target, daemon=True)
    running.thread.start()
    return running


class Tracker:
    """Who is reconciling right now: at no moment may two managers be."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: dict[str, int] = {}
        self.violations = 0
        self.done: dict[str, int] = {}

    def reconciler(self, who: str):  # type: ignore[no-untyped-def]
        def reconcile(key: str) -> None:
            with self.lock:
                if any(n for other, n in self.active.items() if other != who):
                    self.violations += 1
                self.active[who] = self.active.get(who, 0) + 1
            time.sleep(0.005)  # a reconcile takes a moment
            with self.lock:
                self.active[who] -= 1
                self.done[who] = self.done.get(who, 0) + 1

        return reconcile


def elected_manager(cluster: Cluster, who: str, tracker: Tracker) -> Manager:
    rest = Rest(cluster.api)
    manager = Manager(
        rest,
        ManagerOptions(
            namespace="default",
            leader_elect=True,
            identity=who,
            metrics_bind_address="0",
            health_probe_bind_address="127.0.0.1:0",
            **FAST,
        ),
        registry=CollectorRegistry(),
    )
    informer = manager.informers.informer(CONFIGMAPS, namespace="default")
    controller = Controller(
        f"tracker-{who}",
        tracker.reconciler(who),
        workers=2,
        queue=RateLimitingQueue(name=f"tracker-{who}"),
        metrics=ControllerMetrics(CollectorRegistry()),
    )
    controller.watch(informer)
    manager.add_controller(controller)
    return manager


def leader_status(manager: Manager) -> float | None:
    """What the manager's metrics say of its leadership (client-go's gauge)."""
    return manager.registry.get_sample_value(
        "leader_election_master_status", {"name": "ome-controller-manager"}
    )


def test_exactly_one_manager_reconciles_and_the_other_takes_over(cluster: Cluster) -> None:
    rest = Rest(cluster.api)
    tracker = Tracker()
    a = run_manager(elected_manager(cluster, "manager-a", tracker))
    eventually(a.manager.is_leader, timeout=10)
    b = run_manager(elected_manager(cluster, "manager-b", tracker))
    try:
        for i in range(100):
            rest.create(CONFIGMAPS, configmap(f"c{i}"), "default")
        eventually(lambda: tracker.done.get("manager-a", 0) >= 40, timeout=20)
        assert not b.manager.is_leader() and tracker.done.get("manager-b", 0) == 0
        assert (leader_status(a.manager), leader_status(b.manager)) == (1.0, 0.0)
        assert a.halt() == EXIT_OK  # a graceful stop releases the lease
        eventually(b.manager.is_leader, timeout=5)
        assert (leader_status(a.manager), leader_status(b.manager)) == (0.0, 1.0)
        rest.create(CONFIGMAPS, configmap("after"), "default")
        eventually(lambda: tracker.done.get("manager-b", 0) >= 1, timeout=10)
        assert tracker.violations == 0
    finally:
        if not a.stop.is_set():
            a.halt()
        b.halt()


def test_probes_report_readiness_after_the_caches_sync_and_metrics_are_served(
    cluster: Cluster,
) -> None:
    registry = CollectorRegistry()
    manager = Manager(
        Rest(cluster.api),
        ManagerOptions(
            namespace="default",
            metrics_bind_address="127.0.0.1:0",
            metrics_secure=False,  # the embedded server has no TokenReview (test_metrics_auth)
            health_probe_bind_address="127.0.0.1:0",
        ),
        registry=registry,
    )
    manager.informers.informer(CONFIGMAPS, namespace="default")
    controller = Controller(
        "probe-test",
        lambda key: None,
        queue=RateLimitingQueue(name="probe-test"),
        metrics=ControllerMetrics(registry),
    )
    manager.add_controller(controller)
    running = run_manager(manager)
    try:
        eventually(lambda: manager.probes is not None and manager.metrics is not None)
        assert manager.probes is not None and manager.metrics is not None
        probes = f"http://127.0.0.1:{manager.probes.port}"
        assert get(f"{probes}/healthz") == (200, "ok")
        eventually(lambda: get(f"{probes}/readyz") == (200, "ok"))
        status, body = get(f"http://127.0.0.1:{manager.metrics.port}/metrics")
        assert status == 200 and "controller_runtime_reconcile_total" in body
    finally:
        assert running.halt() == EXIT_OK


def cache_test_manager(cluster: Cluster, timeout: float = 120.0) -> Manager:
    return Manager(
        Rest(cluster.api),
        ManagerOptions(
            namespace="default",
            metrics_bind_address="0",
            health_probe_bind_address="127.0.0.1:0",
            cache_sync_timeout=timeout,
        ),
        registry=CollectorRegistry(),
    )


def recording(name: str, passes: list[str]) -> Controller:
    return Controller(
        name,
        lambda key: passes.append(key),  # type: ignore[func-returns-value]
        queue=RateLimitingQueue(name=name),
        metrics=ControllerMetrics(CollectorRegistry()),
    )


def test_a_controller_runs_once_its_own_caches_sync_while_another_informer_still_lists(
    cluster: Cluster,
) -> None:
    """Each controller waits for the informers it reads, not for every one: the one whose
    caches are filled reconciles while a large list is still in flight (here: held by the
    server); the manager is ready, and the cache-read gauges report, only once all have."""
    rest = Rest(cluster.api)
    rest.create(CONFIGMAPS, configmap("sources-cm"), "default")
    listing = threading.Event()
    cluster.server.faults.add(
        Fault(verb="list", resource="secrets", namespace="default", hold=listing, times=None)
    )
    manager = cache_test_manager(cluster)
    configmaps = manager.informers.informer(CONFIGMAPS, namespace="default")
    secrets = manager.informers.informer(SECRETS, namespace="default")
    quick: list[str] = []
    slow: list[str] = []
    first, second = recording("quick", quick), recording("slow", slow)
    first.watch(configmaps)
    second.watch(configmaps)
    second.reads(secrets)
    manager.add_controller(first)
    manager.add_controller(second)
    running = run_manager(manager)
    try:
        eventually(lambda: "default/sources-cm" in quick, timeout=15)
        assert slow == [] and not secrets.has_synced()
        assert manager.is_leader() and not manager.leads_with_synced_caches()
        assert manager.probes is not None
        probes = f"http://127.0.0.1:{manager.probes.port}"
        status, body = get(f"{probes}/readyz")
        assert status == 500 and "informer caches are not synced yet" in body
        listing.set()
        eventually(lambda: "default/sources-cm" in slow, timeout=15)
        eventually(lambda: get(f"{probes}/readyz") == (200, "ok"))
        assert manager.leads_with_synced_caches()
    finally:
        listing.set()
        cluster.server.faults.clear()
        assert running.halt() == EXIT_OK


def test_caches_that_do_not_sync_in_time_stop_the_manager_with_one_reason(
    cluster: Cluster,
) -> None:
    """Past ``cache_sync_timeout`` the run stops (its controllers with it) and raises
    ``TimeoutError``, which ``ome-manager`` reports in one line and exits 1 on."""
    listing = threading.Event()
    cluster.server.faults.add(
        Fault(verb="list", resource="secrets", namespace="default", hold=listing, times=None)
    )
    manager = cache_test_manager(cluster, timeout=1.0)
    manager.informers.informer(SECRETS, namespace="default")
    passes: list[str] = []
    controller = recording("never", passes)
    controller.watch(manager.informers.informer(SECRETS, namespace="default"))
    manager.add_controller(controller)
    stop = threading.Event()
    began = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match=r"^informer caches did not sync within 1s$"):
            manager.run(stop)
    finally:
        listing.set()
        cluster.server.faults.clear()
    assert time.monotonic() - began < 15 and passes == []


def test_secure_metrics_serve_the_mounted_certificate_and_want_a_token(
    cluster: Cluster, tmp_path: Path
) -> None:
    """--metrics-cert-dir: the metrics server presents that certificate (not a self-signed
    one of its own), and a scrape without a bearer token is refused before anything is read
    from the registry."""
    pair = issue_serving_cert(generate_ca("test-ca"), ["localhost"])
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.key_pem)
    manager = Manager(
        Rest(cluster.api),
        ManagerOptions(
            namespace="default",
            metrics_bind_address="127.0.0.1:0",
            metrics_cert_dir=str(tmp_path),
            health_probe_bind_address="0",
        ),
        registry=CollectorRegistry(),
    )
    running = run_manager(manager)
    try:
        eventually(lambda: manager.metrics is not None)
        assert manager.metrics is not None and manager.metrics.scheme == "https"
        port = manager.metrics.port
        served = ssl.get_server_certificate(("127.0.0.1", port), timeout=10)
        assert ssl.PEM_cert_to_DER_cert(served) == ssl.PEM_cert_to_DER_cert(pair.cert_pem.decode())
        assert scrape_https(f"https://127.0.0.1:{port}/metrics", None) == (401, "Unauthorized\n")
    finally:
        assert running.halt() == EXIT_OK


def test_a_quiet_manager_costs_only_watches_and_lease_renewals(cluster: Cluster) -> None:
    namespaces = [f"quiet-{i}" for i in range(5)]

    async def seed() -> None:
        api, ns_rt = cluster.server.api, cluster.server.registry.by_key("", "namespaces")
        cm_rt = cluster.server.registry.by_key("", "configmaps")
        assert ns_rt is not None and cm_rt is not None
        from ome_sim.apiserver.api import WriteOptions

        for ns in namespaces:
            await api.create(ns_rt, "v1", "", {"metadata": {"name": ns}}, WriteOptions())
            for i in range(2000):
                await api.create(
                    cm_rt, "v1", ns, configmap(f"cm-{i:04d}", namespace=ns), WriteOptions()
                )

    cluster.thread.call(seed)
    manager = Manager(
        Rest(cluster.api),
        ManagerOptions(
            namespace="default",
            leader_elect=True,
            identity="quiet",
            metrics_bind_address="0",
            health_probe_bind_address="0",
            **FAST,
        ),
        registry=CollectorRegistry(),
    )
    informers = [manager.informers.informer(CONFIGMAPS, namespace=ns) for ns in namespaces]
    running = run_manager(manager)
    try:
        eventually(manager.leads_with_synced_caches, timeout=60)
        assert sum(len(i.keys()) for i in informers) == 10_000
        acc = cluster.server.accounting
        # The watches are open (the server has their requests), then a quiet stretch of
        # several lease renewals (every 0.25 s here).
        eventually(lambda: acc.total("watch", "configmaps") >= len(namespaces), timeout=10)
        acc.reset()
        eventually(lambda: acc.total("update", "leases") >= 5, timeout=10)
        requests = acc.snapshot()
        other = [r for r in requests if r["resource"] != "leases" and r["verb"] != "watch"]
        assert other == [], json.dumps(other)
    finally:
        running.halt()


# -- the ome-manager process ---------------------------------------------------------------------


def ome_manager() -> list[str]:
    script = Path(sys.executable).parent / "ome-manager"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ome.entrypoints.manager"]


@pytest.fixture
def kubeconfig(cluster: Cluster, kubectl: Kubectl) -> Path:
    kubectl("apply", "-f", "config/crd/")  # the manager's controllers watch OME's kinds
    return cluster.kubeconfig


def start_process(kubeconfig: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *ome_manager(),
            "--kubeconfig",
            str(kubeconfig),
            "--namespace",
            "default",
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
            "--webhook-bind-address",
            "0",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OTEL_SDK_DISABLED": "true"},
    )


def exit_of(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str]:
    """Wait for ``proc`` to exit, reading its output as it goes; its exit code and stderr.
    Not ``proc.wait``: a manager writing more log lines than a pipe holds (64 KiB) blocks in
    its logging until someone reads them, so waiting without reading would wait forever."""
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def identity_of(proc: subprocess.Popen[str]) -> str:
    """The identity from the manager's first (JSON) log line."""
    assert proc.stderr is not None
    for line in proc.stderr:
        entry = json.loads(line)
        if entry["message"] == "starting ome-manager":
            # The start-up line names the version, and the commit of this checkout.
            assert entry["version"] == ome.__version__, entry
            assert entry.get("commit") == ome.source_commit(), entry
            return str(entry["identity"])
    raise AssertionError("the manager did not log its start")


def holder(rest: Rest) -> str | None:
    try:
        return rest.get(LEASES, "ome-controller-manager", "default")["spec"].get("holderIdentity")
    except Exception:
        return None


def test_a_killed_leader_process_is_replaced_within_lease_plus_retry(
    cluster: Cluster, kubeconfig: Path
) -> None:
    rest = Rest(cluster.api)
    timing = [
        "--leader-elect",
        "--leader-elect-lease-duration",
        "3",
        "--leader-elect-renew-deadline",
        "2",
        "--leader-elect-retry-period",
        "0.5",
    ]
    first = start_process(kubeconfig, *timing)
    second = start_process(kubeconfig, *timing)
    procs = {identity_of(first): first, identity_of(second): second}
    try:
        leader_id = eventually(lambda: holder(rest) if holder(rest) in procs else None, timeout=15)
        leader = procs[leader_id]
        last_renew = rest.get(LEASES, "ome-controller-manager", "default")["spec"]["renewTime"]
        leader.send_signal(signal.SIGKILL)
        leader.wait(10)
        killed_at = time.monotonic()
        follower_id = next(i for i in procs if i != leader_id)
        eventually(lambda: holder(rest) == follower_id, timeout=10, interval=0.05)
        took = time.monotonic() - killed_at
        # The lease duration, plus two of the follower's jittered retry periods (each up to
        # 0.5 s * (1 + 1.2), as client-go jitters them): one before it sees the leader's last
        # renewal (expiry is judged from when it saw the record change), one before it tries
        # again once the lease has expired; and half a second for process scheduling on a
        # loaded machine. (It was 3 + 0.5 + 0.6 + 0.5, short of the jitter: 4.65 s and 4.70 s
        # were seen on two loaded cores.)
        bound = 3 + 2 * 0.5 * (1 + 1.2) + 0.5
        assert took <= bound, f"took {took:.2f}s > {bound:.2f}s; last renew {last_renew}"
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                exit_of(proc, 30)


def test_sigterm_stops_cleanly_and_releases_the_lease(cluster: Cluster, kubeconfig: Path) -> None:
    rest = Rest(cluster.api)
    proc = start_process(kubeconfig, "--leader-elect", "--leader-elect-retry-period", "0.5")
    me = identity_of(proc)
    eventually(lambda: holder(rest) == me, timeout=15)
    proc.send_signal(signal.SIGTERM)
    assert exit_of(proc, 30)[0] == 0
    assert holder(rest) in (None, "")


def test_every_request_of_the_manager_names_it_and_its_version(
    cluster: Cluster, kubeconfig: Path
) -> None:
    """As client-go binaries do: ``ome-manager/<version>`` on every request, with the
    process's leader-election identity, so the API server's records (here, the embedded
    one's accounting) tell the manager's writes apart, replica by replica."""
    rest = Rest(cluster.api)
    cluster.server.accounting.reset()
    proc = start_process(kubeconfig, "--leader-elect", "--leader-elect-retry-period", "0.5")
    try:
        me = identity_of(proc)
        eventually(lambda: holder(rest) == me, timeout=15)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert exit_of(proc, 30)[0] == 0
    agent = f"ome-manager/{ome.__version__} ({me})"
    acc = cluster.server.accounting
    assert acc.total("create", "leases", agent) == 1
    assert acc.total("list", "inferencereplicas", agent) >= 1  # the informers' lists
    agents = {r["userAgent"] for r in acc.snapshot() if r["resource"] == "leases"}
    assert agents <= {agent, rest.api_client.user_agent}, agents


def test_bad_flags_are_reported_clearly(kubeconfig: Path) -> None:
    out = subprocess.run(
        [*ome_manager(), "--metrics-bind-address", "nonsense"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "bind address 'nonsense'" in out.stderr
    out = subprocess.run(
        [*ome_manager()],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            k: v
            for k, v in os.environ.items()
            if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
        },
    )
    assert out.returncode == 1 and "no cluster to talk to" in out.stderr
    assert "Traceback" not in out.stderr


def test_the_webhook_flag_turns_the_admission_webhook_on_and_off(
    cluster: Cluster, kubeconfig: Path
) -> None:
    """``--webhook-bind-address 0`` (as start_process passes): no webhook, no certificate
    Secret. An address: the webhook is served, with a self-managed certificate."""
    rest = Rest(cluster.api)
    off = start_process(kubeconfig, "--leader-elect", "--leader-elect-retry-period", "0.5")
    me = identity_of(off)
    eventually(lambda: holder(rest) == me, timeout=15)
    off.send_signal(signal.SIGTERM)
    _, log = off.communicate(timeout=30)
    assert "serving admission webhooks" not in log
    assert cluster.server.accounting.total("create", "secrets") == 0
    on = start_process(kubeconfig, "--webhook-bind-address", "127.0.0.1:0")
    try:
        assert on.stderr is not None
        for line in on.stderr:
            if json.loads(line)["message"].startswith("serving admission webhooks on port "):
                break
        secret = eventually(
            lambda: rest.list(
                SECRETS, "default", field_selector="metadata.name=ome-webhook-server-cert"
            )["items"],
            timeout=30,
        )[0]
        assert {"ca.crt", "tls.crt", "tls.key"} <= set(secret["data"])
    finally:
        on.send_signal(signal.SIGTERM)
        on.communicate(timeout=30)
    assert on.returncode == 0


# -- a deposed leader ----------------------------------------------------------------------------

TIMING = [
    "--leader-elect",
    "--leader-elect-lease-duration",
    "3",
    "--leader-elect-renew-deadline",
    "2",
    "--leader-elect-retry-period",
    "0.5",
]


def service(name: str) -> JSON:
    """An InferenceService whose runtime does not exist: each one costs the manager a status
    write (its RuntimeNotFound condition), which is the work a deposed leader must not do."""
    return {
        "apiVersion": "ome.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "deploymentMode": "OMENative",
            "model": {"name": "m"},
            "runtime": {"name": "missing"},
            "engine": {"minReplicas": 1, "maxReplicas": 1},
        },
    }


def agent_of(identity: str) -> str:
    return f"ome-manager/{ome.__version__} ({identity})"


def busy_leader(cluster: Cluster, kubeconfig: Path) -> tuple[subprocess.Popen[str], str]:
    """A leader process whose writes are slowed (0.1 s each) while 100 services wait for it:
    it has work queued, and a status write in flight, at any moment of the next seconds."""
    rest = Rest(cluster.api)
    proc = start_process(kubeconfig, *TIMING)
    me = identity_of(proc)
    eventually(lambda: holder(rest) == me, timeout=15)
    for verb in ("update", "patch", "create"):
        cluster.server.faults.add(
            Fault(
                verb=verb,
                resource="inferenceservices/status",
                user_agent=agent_of(me),
                latency=0.1,
                times=None,
            )
        )
    for i in range(100):
        rest.create(INFERENCE_SERVICES, service(f"svc-{i}"), "default")
    acc = cluster.server.accounting
    eventually(lambda: acc.writes(agent_of(me)), timeout=15)  # it has started on them
    return proc, me


def quiet_about_the_fence(err: str) -> bool:
    """Whether a deposed leader's log is free of per-key errors for the writes its fence
    refused: the lease's loss is said once (``leader election lost``), not once for each
    key its workers took between the loss and the queue's drop."""
    return not [line for line in err.splitlines() if "does not hold the leader lease" in line]


def test_a_leader_paused_past_its_lease_writes_nothing_once_resumed_and_exits(
    cluster: Cluster, kubeconfig: Path
) -> None:
    """SIGSTOP past the lease, a second manager takes over, SIGCONT: the first sends no write
    of any kind after it resumes (its queue is dropped, its in-flight write is fenced), and
    exits non-zero saying ``leader election lost``, as controller-runtime does."""
    rest = Rest(cluster.api)
    first, first_id = busy_leader(cluster, kubeconfig)
    first.send_signal(signal.SIGSTOP)
    second = start_process(kubeconfig, *TIMING)
    try:
        second_id = identity_of(second)
        eventually(lambda: holder(rest) == second_id, timeout=20)
        resumed = time.monotonic()
        first.send_signal(signal.SIGCONT)
        code, err = exit_of(first, 30)
        assert code != 0
        assert "leader election lost" in err
        assert quiet_about_the_fence(err)
        late = cluster.server.accounting.writes(agent_of(first_id), since=resumed)
        assert late == [], late
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(10)


def test_a_leader_that_cannot_renew_stops_writing_at_its_renew_deadline_and_exits(
    cluster: Cluster, kubeconfig: Path
) -> None:
    """Lease renewals fail (503) for longer than the renew deadline (2 s): from then on the
    leader sends no write, and it exits non-zero with ``leader election lost``."""
    proc, me = busy_leader(cluster, kubeconfig)
    try:
        for verb in ("update", "get"):
            cluster.server.faults.add(
                Fault(verb=verb, resource="leases", user_agent=agent_of(me), code=503, times=None)
            )
        cut = time.monotonic()
        code, err = exit_of(proc, 30)
        assert code != 0
        assert "leader election lost" in err
        assert quiet_about_the_fence(err)
        # Its last renewal was sent before the cut: its deadline passed at most 2 s after.
        late = [
            w
            for w in cluster.server.accounting.writes(agent_of(me), since=cut + 2.0)
            if w.resource != "leases"
        ]
        assert late == [], late
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

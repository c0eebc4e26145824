"""``ome-manager``: the controller manager, with controller-runtime's flag names.

Thin: parses flags, sets up logs and tracing, builds the manager, runs it until SIGTERM.
Errors are one line and an exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
import threading
from types import FrameType

from kubernetes import client, config

from ome import VersionAction, __version__, source_commit, user_agent
from ome.controllers.setup import StartupError, setup_controllers
from ome.durations import parse_go_duration
from ome.runtime.logs import configure_logging
from ome.runtime.manager import Manager, ManagerOptions, default_identity
from ome.runtime.rest import Rest
from ome.runtime.serving import parse_bind_address
from ome.runtime.tracing import TracingConfigError, configure_tracing
from ome.tpuslice.config import ConfigError

log = logging.getLogger("ome.manager")

#: The cyclic garbage collector's first threshold: a young collection after this many more
#: container objects allocated than freed. Python's 700 suits small programs; the manager
#: decodes every watch event and response into thousands of short-lived dicts, nearly all
#: freed by reference counting. At 700 a burst of 500 services ran about 260 young and 24
#: middle collections and two full ones over every cached object (2.5% of the manager's CPU,
#: measured with ``gc.callbacks``); at 20,000, 7 young ones (0.4%). Memory is the same: a
#: young object that lives is kept either way, one that dies is freed when it dies.
GC_YOUNG_THRESHOLD = 20_000


def tune_gc() -> None:
    """The collector's thresholds for a process of many short-lived JSON objects (see
    ``GC_YOUNG_THRESHOLD``); the older generations keep Python's own."""
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def batch_scheduling() -> str | None:
    """Run this thread, and every thread it starts afterwards, under Linux's ``SCHED_BATCH``
    policy; None when that worked, else why not (one line for the log).

    The manager's threads hand work to each other all the time: an informer thread queues a
    key and wakes a worker, a worker wakes on its response. Under the normal policy the
    woken thread preempts the waker, which still holds Python's GIL, so the woken thread
    blocks on the GIL at once and the kernel switches back: two context switches for each
    hand-off. A batch thread does not preempt on wakeup; it runs when the waker blocks or
    its slice ends (a few milliseconds at most). It keeps the same nice value and share of
    the CPU. In a bench burst of 500 services the manager's CPU per service fell from 15.1
    and 15.4 ms to 13.4 and 13.3 ms, with All Ready no slower. Unprivileged processes may
    choose it; a platform without it (not Linux, or a seccomp profile that refuses the call)
    keeps the normal policy."""
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is None:
        return "this platform has no SCHED_BATCH"
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except OSError as e:
        return f"sched_setscheduler refused SCHED_BATCH: {e.strerror or e}"
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ome-manager", description="The OME controller manager.")
    parser.add_argument("--version", action=VersionAction, program="ome-manager")
    parser.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG"),
        help="path to a kubeconfig; default: $KUBECONFIG, else the in-cluster service account",
    )
    parser.add_argument(
        "--metrics-bind-address",
        default=":8443",
        help="where to serve /metrics, as HOST:PORT or :PORT; 0 disables (default :8443)",
    )
    parser.add_argument(
        "--metrics-secure",
        type=_boolean,
        nargs="?",
        const=True,
        default=True,
        metavar="true|false",
        help="serve /metrics over HTTPS, each scrape's bearer token authenticated (TokenReview) "
        "and authorized for get on /metrics (SubjectAccessReview) by the API server; "
        "--metrics-secure=false serves plain HTTP to anyone (default true)",
    )
    parser.add_argument(
        "--metrics-cert-dir",
        default="",
        metavar="DIR",
        help="serve the metrics with tls.crt and tls.key from DIR, re-read when they change; "
        "default: a self-signed certificate made at start",
    )
    parser.add_argument(
        "--health-probe-bind-address",
        default=":8081",
        help="where to serve /healthz and /readyz; 0 disables (default :8081)",
    )
    parser.add_argument(
        "--leader-elect",
        action="store_true",
        help="elect a leader on a Lease; only the leader runs controllers",
    )
    parser.add_argument(
        "--leader-election-id",
        default="ome-controller-manager",
        help="the name of the leader-election Lease (default ome-controller-manager)",
    )
    for flag, default, what in (
        ("--leader-elect-lease-duration", 15.0, "how long a lease is valid without renewal"),
        ("--leader-elect-renew-deadline", 10.0, "how long the leader keeps trying to renew"),
        ("--leader-elect-retry-period", 2.0, "how often candidates try to acquire or renew"),
    ):
        parser.add_argument(
            flag,
            type=float,
            default=default,
            metavar="SECONDS",
            help=f"{what} (default {default:g}s)",
        )
    parser.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE") or "ome",
        help="the manager's own namespace: its Lease and configuration live there "
        "(default: $POD_NAMESPACE, else ome)",
    )
    parser.add_argument(
        "--orphan-slice-collection",
        type=_boolean,
        nargs="?",
        const=True,
        default=True,
        metavar="true|false",
        help="release the TPU Slices whose InferenceReplica is gone (a finalizer removed by "
        "force, a teardown past its deadline), once seen so twice and confirmed by a live "
        "read, by the rules of any release; --orphan-slice-collection=false leaves them to "
        "a person (default true)",
    )
    hooks = parser.add_argument_group("admission webhook")
    hooks.add_argument(
        "--webhook-bind-address",
        default=":9443",
        help="where to serve the InferenceReplica admission webhook over HTTPS, as HOST:PORT "
        "or :PORT; 0 disables it (default :9443)",
    )
    hooks.add_argument(
        "--webhook-cert-dir",
        default="",
        metavar="DIR",
        help="serve tls.crt and tls.key from DIR (a mounted Secret, e.g. cert-manager's), "
        "re-read when they change; default: issue and rotate a self-managed CA and "
        "certificate, kept in --webhook-secret-name",
    )
    hooks.add_argument(
        "--webhook-secret-name",
        default="ome-webhook-server-cert",
        help="the Secret, in --namespace, holding self-managed certificates "
        "(default ome-webhook-server-cert)",
    )
    hooks.add_argument(
        "--webhook-config-name",
        default="ome-inferencereplica-webhook",
        help="the ValidatingWebhookConfiguration whose caBundle self-managed certificates "
        "fill; empty: leave caBundle alone (default ome-inferencereplica-webhook)",
    )
    hooks.add_argument(
        "--webhook-service-name",
        default="ome-webhook-service",
        help="the Service in front of the webhook; the certificate names "
        "<service>.<namespace>.svc (default ome-webhook-service)",
    )
    hooks.add_argument(
        "--webhook-host",
        action="append",
        default=[],
        metavar="NAME_OR_IP",
        help="another DNS name or IP address for the certificate; repeatable",
    )
    hooks.add_argument(
        "--webhook-cert-validity",
        default="8760h",
        metavar="DURATION",
        help="how long a self-managed serving certificate is valid, as a Go duration; it is "
        "renewed in the last third of that (default 8760h)",
    )
    parser.add_argument(
        "--log-format",
        choices=("auto", "json", "text"),
        default="auto",
        help="auto: text on a terminal, JSON otherwise",
    )
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default="info"
    )
    parser.add_argument(
        "--cpu-scheduling",
        choices=("batch", "normal"),
        default="batch",
        help="batch: run under Linux's SCHED_BATCH, so a thread the manager wakes does not "
        "preempt the one that woke it (fewer context switches, less CPU); normal: the "
        "kernel's default (default batch)",
    )
    return parser


def _boolean(value: str) -> bool:
    """A Go-style boolean flag value, as controller-runtime's ``--metrics-secure=false``."""
    lowered = value.strip().lower()
    if lowered in ("true", "t", "1"):
        return True
    if lowered in ("false", "f", "0"):
        return False
    raise argparse.ArgumentTypeError(f"want true or false, not {value!r}")


def _rest(kubeconfig: str | None, identity: str) -> Rest:
    """The manager's API access, from a kubeconfig or the in-cluster service account. Its
    User-Agent names the program, its version and this process's leader-election identity
    (``ome-manager/0.1.0 (<identity>)``), so the API server's audit log tells replicas apart."""
    cfg = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        raise config.ConfigException(
            "no cluster to talk to: pass --kubeconfig, set KUBECONFIG, or run in a pod"
        )
    return Rest(client.ApiClient(cfg), user_agent=f"{user_agent('ome-manager')} ({identity})")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["check-config"]:
        from ome.entrypoints import checkconfig  # noqa: PLC0415 - a subcommand

        return checkconfig.main(argv[1:])
    parser = build_parser()
    parser.epilog = (
        "ome-manager check-config FILE checks a tpuSliceProvisioning block (see its --help)."
    )
    args = parser.parse_args(argv)
    for flag in ("metrics_bind_address", "health_probe_bind_address", "webhook_bind_address"):
        try:
            parse_bind_address(getattr(args, flag))
        except ValueError as e:
            parser.error(str(e))
    try:
        validity = parse_go_duration(args.webhook_cert_validity)
    except ValueError as e:
        parser.error(f"--webhook-cert-validity: {e}")
    if validity.total_seconds() <= 0:
        parser.error("--webhook-cert-validity: must be positive")
    configure_logging(args.log_format, args.log_level)
    tune_gc()
    if args.cpu_scheduling == "batch":  # before any thread starts: they inherit the policy
        refused = batch_scheduling()
        if refused is not None:
            log.info("keeping the normal CPU scheduling policy: %s", refused)
    try:
        configure_tracing("ome-manager")
    except TracingConfigError as e:  # a bad OTEL_* variable: one line, not a traceback
        log.error("cannot start: %s", e)
        return 2
    identity = default_identity()
    try:
        rest = _rest(args.kubeconfig, identity)
    except config.ConfigException as e:
        print(f"ome-manager: {e}", file=sys.stderr)
        return 1
    manager = Manager(
        rest,
        ManagerOptions(
            identity=identity,
            namespace=args.namespace,
            leader_elect=args.leader_elect,
            leader_election_id=args.leader_election_id,
            lease_duration=args.leader_elect_lease_duration,
            renew_deadline=args.leader_elect_renew_deadline,
            retry_period=args.leader_elect_retry_period,
            metrics_bind_address=args.metrics_bind_address,
            metrics_secure=args.metrics_secure,
            metrics_cert_dir=args.metrics_cert_dir,
            health_probe_bind_address=args.health_probe_bind_address,
            webhook_bind_address=args.webhook_bind_address,
            webhook_cert_dir=args.webhook_cert_dir,
            webhook_secret_name=args.webhook_secret_name,
            webhook_config_name=args.webhook_config_name,
            webhook_service_name=args.webhook_service_name,
            webhook_hosts=tuple(args.webhook_host),
            webhook_cert_validity=validity,
        ),
    )
    try:
        setup_controllers(manager, orphan_collection=args.orphan_slice_collection)
    except ConfigError as e:
        # A5: every error, then a non-zero exit.
        log.error(
            "Failed to initialize TPU slice provisioning configuration",
            extra={"errors": "\n".join(e.errors)},
        )
        for line in e.errors:
            log.error("  %s", line)
        return 1
    except StartupError as e:  # routine: one line, and the Deployment restarts the manager
        log.error("cannot start: %s", e)
        return 1
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info(
        "starting ome-manager",
        extra={
            "version": __version__,
            **({"commit": commit} if (commit := source_commit()) else {}),
            "identity": manager.options.identity,
            "namespace": args.namespace,
        },
    )
    try:
        return manager.run(stop)
    except ValueError as e:  # e.g. leader election timings that do not fit together
        log.error("cannot start: %s", e)
        return 2
    except (OSError, TimeoutError) as e:
        log.error("manager stopped: %s", e)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""``ome-sim``: start the embedded cluster and the simulated GKE provider from the command line.

Thin: parses arguments, starts the pieces, reports progress and errors as plain lines with
an exit code (1 for a failure, 2 for bad arguments), never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from kubernetes import config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from ome import user_agent
from ome.durations import parse_go_duration
from ome.runtime.client import describe_error
from ome.runtime.rest import Rest
from ome_sim import __version__

from . import containers, controlplane, helmrun, node, system
from .apiserver import EmbeddedAPIServer, ServerThread
from .controlplane import ControlPlane
from .gke.model import DEFAULT_POOLS, KNOBS, PoolError, parse_pools
from .gke.provider import Options, Provider, install_slice_crd, parse_duration


def say(message: str) -> None:
    print(message, flush=True)


def fail(message: str, code: int = 1) -> int:
    print(f"ome-sim: {message}", file=sys.stderr, flush=True)
    return code


def _interrupt_event() -> threading.Event:
    """An event SIGINT or SIGTERM sets; installed before we tell anyone to press Ctrl-C."""
    stop = threading.Event()

    def handler(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)
    return stop


def _wait(stop: threading.Event) -> None:
    while not stop.wait(3600):
        pass


def _apiserver(args: argparse.Namespace) -> int:
    async def serve() -> int:
        server = EmbeddedAPIServer(port=args.port)
        try:
            await server.start()
        except OSError as e:
            return fail(f"apiserver: {e}")
        path = server.write_kubeconfig(args.kubeconfig)
        say(f"embedded API server listening on {server.url}")
        say(f"export KUBECONFIG={path.resolve()}")
        say(f"try: kubectl --kubeconfig {path.resolve()} get namespaces")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        say("stopping embedded API server")
        await server.stop()
        return 0

    return asyncio.run(serve())


def _provider_options(args: argparse.Namespace) -> Options:
    pod = getattr(args, "manager", "process") == "pod"
    real_node = getattr(args, "node", "simulated") == "real"
    stand_in = pod and not real_node
    return Options(
        activation_delay=args.activation_delay,
        heartbeat_interval=args.heartbeat_interval,
        scheduler=args.scheduler,
        # The manager's pod needs a node without the TPU taint: a real node, or one of the
        # provider's, whose kubelet stand-in runs it as a process. Either way the stand-in
        # serves the kubelet API for its TPU nodes' pods, and the pods' logs and kubeconfigs
        # are kept beside the kubeconfig.
        system_nodes=1 if stand_in else 0,
        run_images=(helmrun.MANAGER_IMAGE,) if stand_in else (),
        kubelet_api=real_node,
        pod_dir=str(args.kubeconfig.resolve().parent / "pods") if pod else "",
    )


def _run_provider(
    rest: Rest, args: argparse.Namespace, progress: Callable[[str], None]
) -> Provider:
    progress("installing the Slice CRD (accelerator.gke.io/v1beta1)")
    created = install_slice_crd(rest)
    progress("Slice CRD installed" if created else "Slice CRD already present")
    provider = Provider(rest, args.pools, _provider_options(args))
    provider.start(progress)
    return provider


@dataclass
class Stage:
    """What ``serve`` runs on: the cluster's admin client and kubeconfig, and, on
    ``--control-plane kube``, the control plane (to mint the manager's token)."""

    rest: Rest
    kubeconfig: Path
    interrupted: threading.Event
    plane: ControlPlane | None = None

    @property
    def name(self) -> str:
        return "the real control plane" if self.plane is not None else "the embedded cluster"


def _with_cluster(
    args: argparse.Namespace,
    command: str,
    serve: Callable[[Stage], int],
) -> int:
    """Start the cluster (the embedded API server, or with ``--control-plane kube`` etcd,
    kube-apiserver and kube-controller-manager) and the provider, run ``serve`` (which
    returns on Ctrl-C), then stop what started, in reverse; every failure is one line and
    exit code 1."""
    interrupted = _interrupt_event()
    stops: list[Callable[[], None]] = []
    try:
        start = _start_kube if args.control_plane == "kube" else _start_embedded
        path, plane = start(args, stops)
        rest = _rest(str(path))
        provider = _run_provider(rest, args, lambda m: say(f"  {m}"))
        stops.append(provider.stop)
        return serve(Stage(rest, path, interrupted, plane))
    except (
        controlplane.ControlPlaneError,
        system.StartError,
        node.NodeError,
        containers.ContainerToolError,
    ) as e:
        return fail(f"{command}: {e}")
    except ApiException as e:
        return fail(f"{command}: {describe_error(e)}")
    except (HTTPError, OSError, TimeoutError) as e:
        return fail(f"{command}: {e}")
    finally:
        for stop in reversed(stops):
            stop()


def _start_embedded(
    args: argparse.Namespace, stops: list[Callable[[], None]]
) -> tuple[Path, ControlPlane | None]:
    say("starting the embedded API server")
    thread = ServerThread(port=args.port)
    server = thread.start()
    stops.append(thread.stop)
    path = server.write_kubeconfig(args.kubeconfig).resolve()
    say(f"embedded API server listening on {server.url}")
    return path, None


def _start_kube(
    args: argparse.Namespace, stops: list[Callable[[], None]]
) -> tuple[Path, ControlPlane | None]:
    """The real control plane: the binaries are built first if they are missing
    (hack/kube-binaries.sh, with its progress), the components' logs go beside the
    kubeconfig, and the data directory is removed on exit."""
    binaries = controlplane.binaries_dir()
    if controlplane.missing_binaries(binaries):
        _build_binaries(args.config_dir.parent if hasattr(args, "config_dir") else Path())
    path = args.kubeconfig.resolve()
    real_node = getattr(args, "node", "simulated") == "real"
    plane = controlplane.ControlPlane(
        log_dir=path.parent / "control-plane",
        binaries=binaries,
        progress=lambda m: say(f"  {m}"),
        api_port=args.port,
        node_ip=node.host_ip() if real_node else "",
    )
    say(f"starting a real control plane (Kubernetes {controlplane.KUBE_VERSION})")
    stops.append(plane.stop)
    plane.start()
    plane.write_kubeconfig(path)
    say(f"kube-apiserver listening on {plane.url} (component logs: {plane.log_dir})")
    if real_node:
        image = containers.image_name()
        say(f"starting a real node: containerd, runc, CNI, the kubelet, kube-proxy ({image})")
        real = node.RealNode(
            plane, log_dir=path.parent / "node", images=(image,), progress=lambda m: say(f"  {m}")
        )
        stops.append(real.stop)
        real.start()
        (path.parent / "node.json").write_text(json.dumps(real.describe(), indent=2))
        say(f"node {real.name} is Ready (its logs: {real.log_dir}; node.json: how to reach it)")
    return path, plane


def _build_binaries(root: Path) -> None:
    """Run hack/kube-binaries.sh, whose progress lines go straight to the console."""
    script = root / "hack" / "kube-binaries.sh"
    if not script.is_file():
        raise system.StartError(
            f"the control plane binaries are not built in {controlplane.binaries_dir()}, and "
            f"{script} is not here to build them: run from the repository's root"
        )
    say(f"building the control plane binaries once ({script}; about 7 minutes on 2 cores)")
    code = subprocess.call(["bash", str(script)], stdout=subprocess.DEVNULL)
    if code != 0:
        raise system.StartError(f"{script} failed (exit code {code}); the lines above say why")


def _up(args: argparse.Namespace) -> int:
    def serve(stage: Stage) -> int:
        say("")
        say(f"the simulated GKE cluster is up on {stage.name}; in another shell:")
        say(f"export KUBECONFIG={stage.kubeconfig}")
        say(
            "kubectl get nodes -L cloud.google.com/gke-tpu-accelerator,"
            "cloud.google.com/gke-accelerator-topology-mode,cloud.google.com/gke-tpu-slice"
        )
        say("press Ctrl-C to stop")
        _wait(stage.interrupted)
        say("stopping")
        return 0

    return _with_cluster(args, "up", serve)


def _provider(args: argparse.Namespace) -> int:
    interrupted = _interrupt_event()
    try:
        rest = _rest(str(args.kubeconfig))
        provider = _run_provider(rest, args, say)
    except config.ConfigException as e:
        return fail(f"provider: cannot use kubeconfig {args.kubeconfig}: {e}")
    except HTTPError as e:
        return fail(f"provider: cannot reach the API server of {args.kubeconfig}: {_reason(e)}")
    except ApiException as e:
        return fail(f"provider: {describe_error(e)}")
    except (OSError, TimeoutError) as e:
        return fail(f"provider: {e}")
    say("press Ctrl-C to stop")
    try:
        _wait(interrupted)
    finally:
        say("stopping")
        provider.stop()
    return 0


def _metrics_relay(args: argparse.Namespace) -> int:
    interrupted = _interrupt_event()
    target = None
    if args.to:
        host, _, port = args.to.rpartition(":")
        if not host or not port.isdigit():
            return fail(f"metrics-relay: --to {args.to!r}: want HOST:PORT")
        target = (host, int(port))
    try:
        rest = _rest(str(args.kubeconfig))
        relay = helmrun.metrics_relay(rest, target)
    except config.ConfigException as e:
        return fail(f"metrics-relay: cannot use kubeconfig {args.kubeconfig}: {e}")
    say(f"manager metrics: http://127.0.0.1:{relay.port}/metrics")
    say("press Ctrl-C to stop")
    try:
        _wait(interrupted)
    finally:
        relay.close()
    return 0


def _reason(error: HTTPError) -> str:
    """The root cause of a urllib3 failure, without the retry wrapper's noise."""
    reason = getattr(error, "reason", None)
    return str(reason or error).split(": ", 1)[-1]


def _rest(kubeconfig: str) -> Rest:
    return system.rest_from(kubeconfig, user_agent("ome-sim"))


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _go_duration(text: str) -> str:
    try:
        parse_go_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"--port must be between 0 and 65535, not {text}")
    return int(text)


def _run(args: argparse.Namespace) -> int:
    """The whole system: ``ome-sim up`` plus OME's manifests and the manager process, which
    is restarted whenever it exits until Ctrl-C (`system.Supervisor`)."""

    def serve(stage: Stage) -> int:
        if args.manager == "pod":
            return _serve_manager_pod(args, stage)
        rest, path, interrupted = stage.rest, stage.kubeconfig, stage.interrupted
        kube = stage.plane is not None
        configs = system.install(
            rest,
            args.config_dir,
            system.config_with(args.slice_ready_timeout),
            lambda m: say(f"  {m}"),
            rbac=kube,
        )
        log_path = path.parent / "manager.log"
        if stage.plane is not None:
            # The manager runs as its ServiceAccount, under config/rbac, not as admin.
            manager_config = controlplane.write_kubeconfig(
                path.parent / "manager.kubeconfig",
                stage.plane.token_kubeconfig(
                    f"system:serviceaccount:{system.NAMESPACE}:{system.SERVICE_ACCOUNT}",
                    system.service_account_token(rest),
                    system.NAMESPACE,
                ),
            )
            say(
                f"  the manager runs as ServiceAccount {system.NAMESPACE}/"
                f"{system.SERVICE_ACCOUNT} ({manager_config})"
            )

            extra = ["--webhook-host", "127.0.0.1"]

            def point(port: int) -> None:
                system.point_webhooks_at_url(rest, configs, port)
        else:
            extra = []
            manager_config = path

            def point(port: int) -> None:
                system.point_webhooks_at(rest, configs, port)

        manager = system.start_manager(manager_config, log_path, extra)
        say(f"  starting the manager, pid {manager.pid} (its log: {log_path})")
        supervisor = system.Supervisor(
            manager,
            start=lambda ports, separator: system.start_manager(
                manager_config, log_path, extra, ports, separator
            ),
            serving=lambda m: point(m.ports["admission webhooks"]),
            say=say,
            stop=interrupted,
        )
        try:
            say("  waiting for the manager to bind its ports")
            try:
                probes = manager.wait_for_port("probes", 60)
                metrics = manager.wait_for_port("metrics", 60)
                webhook = manager.wait_for_port("admission webhooks", 60)
                point(webhook)
                system.wait_ready(manager, probes, 120, lambda m: say(f"  {m}"), interrupted)
            except system.StartError:
                if not interrupted.is_set():
                    raise
            if interrupted.is_set():  # Ctrl-C while starting (it reached the manager too)
                say("stopping")
                return 0
            say("")
            say(f"OME is up on {stage.name}; in another shell:")
            say(f"export KUBECONFIG={path}")
            say(f"manager metrics: http://127.0.0.1:{metrics}/metrics")
            say(f"the walkthrough's Step 2 InferenceService: {system.GUIDE_SAMPLE}")
            say(f"next: kubectl apply -f {system.GUIDE_SAMPLE}")
            say("press Ctrl-C to stop")
            supervisor.run()
            say("stopping")
            return 0
        finally:
            supervisor.stop()

    return _with_cluster(args, "run", serve)


def _serve_manager_pod(args: argparse.Namespace, stage: Stage) -> int:
    """``--manager pod``: OME installed with Helm as the walkthrough's Step 1 does, the manager
    running as the Deployment's pod (the kubelet stand-in runs it), until Ctrl-C."""
    rest, path, interrupted = stage.rest, stage.kubeconfig, stage.interrupted
    root = args.config_dir.resolve().parent
    progress = lambda m: say(f"  {m}")  # noqa: E731
    helm = helmrun.helm_binary(root)
    system.create(
        rest, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": system.NAMESPACE}}
    )
    helmrun.upgrade_install(
        helm, path, root, helmrun.guide_values(root, args.slice_ready_timeout), progress
    )
    system.install_samples(rest, args.config_dir, progress)
    helmrun.wait_rollout(rest, 180, progress, interrupted)
    if interrupted.is_set():
        say("stopping")
        return 0
    relay = helmrun.metrics_relay(rest)
    try:
        say("")
        say(f"OME is up on {stage.name}, the manager in its Deployment's pod; in another shell:")
        say(f"export KUBECONFIG={path}")
        say(f"manager metrics: http://127.0.0.1:{relay.port}/metrics")
        say(f"the walkthrough's Step 2 InferenceService: {system.GUIDE_SAMPLE}")
        say(f"next: kubectl apply -f {system.GUIDE_SAMPLE}")
        say("press Ctrl-C to stop")
        _wait(interrupted)
        say("stopping")
        return 0
    finally:
        relay.close()


def _knob_help() -> str:
    lines = ["knobs (kubectl annotate <slice|node> NAME KEY=VALUE):"]
    for knob in KNOBS:
        lines.append(f"  {knob.on:5} {knob.annotation}: {knob.effect}")
    return "\n".join(lines)


def _provider_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pool",
        action="append",
        metavar="TYPE:MODE:COUNT[:NAME]",
        help="a TPU node pool, e.g. tpu7x:provision-only:8 or tpu7x:static:2; repeat for more "
        f"(default: {' '.join(DEFAULT_POOLS)})",
    )
    parser.add_argument(
        "--activation-delay",
        type=_duration,
        default=2.0,
        metavar="DURATION",
        help="how long a Slice stays ACTIVATING (default: 2s)",
    )
    parser.add_argument(
        "--heartbeat-interval",
        type=_duration,
        default=10.0,
        metavar="DURATION",
        help="how often each node renews its Lease (default: 10s)",
    )
    parser.add_argument(
        "--scheduler",
        choices=("auto", "on", "off"),
        default="auto",
        help="bind pending pods: auto does so only when the cluster has no kube-scheduler",
    )


def _control_plane_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--control-plane",
        choices=("embedded", "kube"),
        default="embedded",
        help="embedded: the embedded API server (default); kube: etcd, kube-apiserver and "
        f"kube-controller-manager {controlplane.KUBE_VERSION} on loopback, built from their "
        "Go modules by hack/kube-binaries.sh (built on first use, which needs Go)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ome-sim",
        description="The embedded Kubernetes cluster and simulated GKE TPU provider for tests "
        "and local runs.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"ome-sim {__version__}",
        help="print the version (the product's: the two are released together)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    api = sub.add_parser(
        "apiserver",
        help="serve the embedded Kubernetes API server until interrupted",
        description="Serve the embedded Kubernetes API server on 127.0.0.1 until Ctrl-C, "
        "writing a kubeconfig for kubectl and clients.",
    )
    api.add_argument("--kubeconfig", required=True, type=Path, help="where to write the kubeconfig")
    api.add_argument(
        "--port", type=_port, default=0, help="port to listen on (default: a free one)"
    )
    api.set_defaults(func=_apiserver)

    up = sub.add_parser(
        "up",
        help="the embedded API server, the fake Slice CRD and the simulated GKE provider",
        description="Start the embedded API server, install the fake Slice CRD and run the "
        "simulated GKE provider with its TPU node pools, until Ctrl-C.",
        epilog=_knob_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    up.add_argument(
        "--kubeconfig",
        type=Path,
        default=Path(".ome/kubeconfig"),
        help="where to write the kubeconfig (default: .ome/kubeconfig)",
    )
    up.add_argument("--port", type=_port, default=0, help="API server port (default: a free one)")
    _control_plane_flag(up)
    _provider_flags(up)
    up.set_defaults(func=_up)

    run = sub.add_parser(
        "run",
        help="the whole system: the cluster, the provider, OME's manifests and the manager",
        description="What `make run` starts: the embedded API server and the simulated GKE "
        "provider, OME's CRDs, the inferenceservice-config ConfigMap with the walkthrough's Step 1 "
        "values, the webhook configuration, the sample model and runtime, and ome-manager as "
        "its own process against the kubeconfig, until Ctrl-C.",
        epilog=_knob_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--kubeconfig",
        type=Path,
        default=Path(".ome/kubeconfig"),
        help="where to write the kubeconfig; the manager's log goes beside it "
        "(default: .ome/kubeconfig)",
    )
    run.add_argument("--port", type=_port, default=0, help="API server port (default: a free one)")
    _control_plane_flag(run)
    run.add_argument(
        "--manager",
        choices=("process", "pod"),
        help="pod (the default with --control-plane kube): OME is installed with Helm "
        "(charts/ome-resources, the walkthrough's Step 1 values) and the manager runs as its "
        "Deployment's pod; process (the default, and the only way, on the embedded "
        "cluster): ome-sim installs config/ and runs ome-manager itself, beside the cluster",
    )
    run.add_argument(
        "--node",
        choices=("simulated", "real"),
        default="simulated",
        help="where the manager's pod runs with --manager pod: simulated (the default), the "
        "provider's kubelet stand-in runs it as a process; real, a real node on this machine "
        "(containerd, runc, CNI, the kubelet and kube-proxy, built by hack/node-binaries.sh; "
        "needs root) runs the image `make image` built. The TPU nodes are simulated either way",
    )
    run.add_argument(
        "--config-dir",
        type=Path,
        default=Path("config"),
        help="the repository's config/ directory: crd/, webhook/ and samples/ (default: ./config)",
    )
    run.add_argument(
        "--slice-ready-timeout",
        type=_go_duration,
        metavar="DURATION",
        help="slice.readyTimeout in the configuration (default: 10m, as in the walkthrough); "
        "a short one shows SliceReadyTimeout quickly",
    )
    _provider_flags(run)
    run.set_defaults(func=_run)

    prov = sub.add_parser(
        "provider",
        help="run the simulated GKE provider against an existing cluster",
        description="Run the simulated GKE provider (node pools, Slice scheduler, kubelet and, "
        "where the cluster has none, scheduler) against the cluster of a kubeconfig.",
        epilog=_knob_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prov.add_argument("--kubeconfig", required=True, type=Path, help="the cluster to play GKE in")
    _provider_flags(prov)
    prov.set_defaults(func=_provider)

    relay = sub.add_parser(
        "metrics-relay",
        help="serve the manager's secure metrics as plain HTTP on 127.0.0.1",
        description="Serve http://127.0.0.1:<port>/metrics, each GET fetched from the "
        "manager's HTTPS metrics with the token of the ServiceAccount ome/ome-metrics-scraper "
        "(created and bound to the ClusterRole ome-metrics-reader): from the ready manager "
        "pod's IP, or from --to (e.g. a kubectl port-forward of the metrics Service).",
    )
    relay.add_argument("--kubeconfig", required=True, type=Path, help="the cluster OME runs in")
    relay.add_argument("--to", default="", metavar="HOST:PORT", help="where the metrics are")
    relay.set_defaults(func=_metrics_relay)

    bench = sub.add_parser(
        "bench",
        help="measure provisioning at scale (make bench)",
        description="Run the benchmark scenarios on the embedded cluster with the provider "
        "simulator, each of the API server, the provider and the manager in its own process: "
        "a bare pod create as the unit, bursts of services created and deleted at once "
        "(reaction, throughput, writes per lifecycle), the same names again, a steady state "
        "and a cold start. Prints a summary with the README's goals and writes JSON; exits 1 "
        "when a scenario does not converge or writes more than 3x the ideal.",
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help="smaller scenarios (bursts of 1, 20 and 100; about 3 minutes), for CI",
    )
    bench.add_argument(
        "--out",
        type=Path,
        default=Path(".ome/bench"),
        help="where the JSON report (<timestamp>.json) and the stage's logs go "
        "(default: .ome/bench)",
    )
    bench.add_argument(
        "--bursts",
        type=_sizes,
        default=(),
        metavar="N,N,...",
        help="burst sizes instead of the plan's (1,50,500,2000; --quick 1,20,100): the two "
        "largest are compared, and the largest is burst again with the same names",
    )
    bench.add_argument(
        "--control-plane",
        choices=("embedded", "kube"),
        default="embedded",
        help="the embedded API server (default), or etcd, kube-apiserver and "
        "kube-controller-manager built by hack/kube-binaries.sh; requests are then counted "
        "from kube-apiserver's audit log, and the cold start is against the steady state's "
        "services only",
    )
    bench.add_argument(
        "--compare",
        type=Path,
        default=None,
        metavar="PATH",
        help="an earlier run's JSON (from .ome/bench/): after the summary, a table of this "
        "run against it for each burst size in both and the cold start, each figure with "
        "the ratio this/that (also in the JSON as compared_with); exits 2 at once when the "
        "file cannot be read",
    )
    bench.add_argument(
        "--manager-from",
        type=Path,
        default=None,
        metavar="DIR",
        help="run the manager of another checkout (DIR holding pkg/ome, e.g. a git worktree "
        "of main) on this tree's stage and with its environment, so that two managers are "
        "measured on the same API server and provider: run this, then --compare with its "
        "JSON; exits 2 at once when DIR holds no manager this environment would run",
    )
    bench.add_argument(
        "--against",
        type=Path,
        default=None,
        metavar="DIR",
        help="measure the manager of another checkout (DIR, as for --manager-from) in the "
        "same run: it runs each burst and the cold start just before this run's manager, "
        "on the same stage, and the goals that also hold as a ratio (CPU per service, the "
        "cold start's first pass, all Ready) are judged against it; the summary gives both "
        "managers' figures side by side. About twice as long; exits 2 at once when DIR "
        "holds no manager this environment would run",
    )
    bench.set_defaults(func=_bench)
    soak = sub.add_parser(
        "soak",
        help="a chaos soak of the manager with invariants checked throughout (make soak)",
        description="Run opted-in services (single- and multi-host, created, scaled, updated and "
        "deleted at random) under a seeded plan of faults, on the embedded cluster, while an "
        "invariant checker inside the API server judges every request: pods only on ready "
        "Slices, Slice writes only with the owner-UID label, pod deletes only for a cause, "
        "every delete under a UID precondition, writes only from the lease's holder. Then the "
        "faults stop and everything must converge. Prints 'N faults, M invariant checks, "
        "V violations, converged in Xs', writes a JSON report, and exits 1 on a violation or "
        "no convergence. The same --seed replays the same plan.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="fault kinds:\n" + "\n".join(f"  {k:<20} {v}" for k, v in _soak_faults().items()),
    )
    soak.add_argument(
        "--minutes",
        type=_positive_minutes,
        default=5.0,
        help="how long faults and load run before the convergence check (default: 5)",
    )
    soak.add_argument("--seed", type=int, default=None, help="the plan's seed (default: random)")
    soak.add_argument(
        "--faults",
        type=_fault_kinds,
        default=None,
        metavar="KIND,KIND,...",
        help="only these fault kinds (default: all; see below)",
    )
    soak.add_argument(
        "--out",
        type=Path,
        default=Path(".ome/soak"),
        help="where the JSON report and the stage's logs go (default: .ome/soak)",
    )
    soak.add_argument(
        "--plan",
        action="store_true",
        help="print the plan the seed gives (one JSON step per line) and exit",
    )
    soak.add_argument(
        "--sabotage",
        choices=("uid-precondition", "lease-check", "slice-gate", "orphan-collection"),
        default="",
        help="run the manager with this protection off (the soak must then fail)",
    )
    soak.set_defaults(func=_soak)
    return parser


def _soak_faults() -> dict[str, str]:
    from .soak.plan import FAULTS  # noqa: PLC0415 - only this subcommand needs it

    return FAULTS


def _positive_minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected minutes such as 5 or 1.5, not {text!r}"
        ) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"minutes must be positive: {text!r}")
    return value


def _fault_kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(_soak_faults()))
    if not kinds or unknown:
        named = ", ".join(unknown) if unknown else repr(text)
        raise argparse.ArgumentTypeError(
            f"unknown fault kinds: {named} (known: {', '.join(_soak_faults())})"
        )
    return kinds


def _soak(args: argparse.Namespace) -> int:
    from .soak.plan import FAULTS, make_plan  # noqa: PLC0415
    from .soak.run import run  # noqa: PLC0415 - only this subcommand needs it

    faults = args.faults or tuple(FAULTS)
    if args.plan:
        if args.seed is None:
            return fail("soak: --plan needs --seed (the plan of which seed?)")
        try:
            for step in make_plan(args.seed, args.minutes * 60, faults):
                print(json.dumps(step.json(), sort_keys=True), flush=True)
        except BrokenPipeError:  # a reader such as head that stopped reading
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return run(args.minutes, args.seed, args.out, faults, args.sabotage)


def _bench(args: argparse.Namespace) -> int:
    from .bench import run  # noqa: PLC0415 - only this subcommand needs it

    return run(
        args.quick,
        args.out,
        args.bursts,
        args.control_plane,
        args.compare,
        args.manager_from,
        args.against,
    )


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes such as 1,50,500, not {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive: {text!r}")
    return sizes


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its retries are reported by us
    parser = build_parser()
    args = parser.parse_args(argv)
    if hasattr(args, "manager") and args.manager is None:
        args.manager = "pod" if args.control_plane == "kube" else "process"
    if getattr(args, "manager", "process") == "pod" and args.control_plane != "kube":
        parser.error(
            "--manager pod needs --control-plane kube: the embedded server runs no "
            "Deployments (kube-controller-manager does)"
        )
    if getattr(args, "node", "simulated") == "real" and args.manager != "pod":
        parser.error("--node real needs --manager pod (and so --control-plane kube)")
    if hasattr(args, "pool"):
        try:
            args.pools = parse_pools(args.pool or DEFAULT_POOLS)
        except PoolError as e:
            parser.error(str(e))
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

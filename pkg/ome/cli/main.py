"""``kubectl-ome``, the ``kubectl ome`` plugin (kubectl runs any ``kubectl-<name>`` on
``PATH``): parses the command line as kubectl does, reads the cluster and prints what
``instance`` and ``slices`` build. It only reads.

Every failure is one line on standard error, ``error: ...``, and exit status 1: bad
arguments, an unreadable kubeconfig, a missing service, component or index, an API error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from ome import VersionAction, user_agent, version_line
from ome.api.v1beta1 import (
    INFERENCE_REPLICAS,
    INFERENCE_SERVICES,
    LABEL_INFERENCE_REPLICA,
    LABEL_INFERENCE_SERVICE,
    LABEL_MANAGED_BY,
    MANAGED_BY_OMENATIVE,
)
from ome.controllers.setup import CONFIG_KEY, CONFIG_MAP
from ome.kube import JSON
from ome.provider import gke
from ome.runtime.client import describe_error
from ome.runtime.rest import CONFIGMAPS, NODES, PODS, Rest
from ome.tpuslice import config as slice_config
from ome.tpuslice.types import GUIDE_CONFIG_JSON, Config

from . import instance, slices

PROG = "kubectl ome"


class CommandError(Exception):
    """A failure the user reads as one line: ``error: <message>``."""


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line and exit status 1, as every other failure."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(1)


def _connection_flags(parser: argparse.ArgumentParser, top: bool) -> None:
    """kubectl's flags, accepted before or after the command (``SUPPRESS`` below the top, so
    that a subcommand's absent flag does not undo the one given before it)."""

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    group = parser.add_argument_group("kubectl flags")
    group.add_argument(
        "--kubeconfig",
        default=default(None),
        help="the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)",
    )
    group.add_argument(
        "--context", default=default(None), help="the kubeconfig context (default: current)"
    )
    group.add_argument(
        "-n",
        "--namespace",
        default=default(None),
        help="the namespace (default: the context's, else default)",
    )
    group.add_argument(
        "--ome-namespace",
        default=default("ome"),
        help="the namespace of OME's manager and its inferenceservice-config ConfigMap "
        "(default ome)",
    )


def build_parser() -> Parser:
    parser = Parser(
        prog=PROG,
        description="Read OMENative Instances and the TPU slices OME provisions for them.",
    )
    parser.add_argument("--version", action=VersionAction, program="kubectl-ome")
    _connection_flags(parser, top=True)
    parser.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="every namespace (slices only)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    commands.required = True

    inst = commands.add_parser("instance", help="one Instance of a component")
    inst_commands = inst.add_subparsers(dest="verb", metavar="VERB", parser_class=Parser)
    inst_commands.required = True
    st = inst_commands.add_parser(
        "status",
        help="an Instance's state, operation, hold, last failure and pods",
        description="Print an Instance's row of the InferenceReplica's status.instanceStatuses "
        "and its pods: state, instance, revisions, operation, op timing (ages; the deadline as "
        "time left, - when parked), op hold, failure, fail time, pod and issue rows.",
    )
    st.add_argument("name", metavar="NAME", help="the InferenceService")
    st.add_argument("index", metavar="INDEX", type=_index, help="the Instance's index")
    st.add_argument("--component", required=True, help="the component: engine, decoder or router")
    st.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "json", "yaml"),
        default="table",
        help="table (values cut at 64 columns), wide (one field per row, uncut), json or "
        "yaml (the row as stored, with the pods)",
    )
    _connection_flags(st, top=False)

    commands.add_parser(
        "version",
        help="print kubectl-ome's version",
        description="Print kubectl-ome's version (the project's one version), and the git "
        "commit when it runs from a checkout.",
    )
    sl = commands.add_parser(
        "slices",
        help="one row per Instance slot: its Slice, hosts, pods and what it waits for",
        description="Join each opted-in component's Instance slots with their Slices, the "
        "Slices' hosts (nodes with the slice label) and the pods confined to them. WAITING says "
        "what the slot waits for, in the words of the Instance's lastFailure or OME's event.",
    )
    sl.add_argument("service", metavar="ISVC", nargs="?", help="only this InferenceService")
    sl.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "json"),
        default="table",
        help="table, wide (adds the holders that defer a release and the owner UID) or json",
    )
    sl.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        default=argparse.SUPPRESS,
        help="every namespace",
    )
    _connection_flags(sl, top=False)
    return parser


def _index(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"INDEX must be a non-negative integer, not {text!r}")
    return int(text)


# -- reading the cluster -------------------------------------------------------------------


def connect(kubeconfig: str | None, context: str | None) -> tuple[Rest, str]:
    """The API client of the kubeconfig's context, and that context's namespace."""
    where = kubeconfig or "the default kubeconfig ($KUBECONFIG or ~/.kube/config)"
    cfg = client.Configuration()
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=cfg
        )
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except Exception as e:  # any malformed kubeconfig is the user's one-line error
        raise CommandError(f"cannot load {where}: {_first_line(e)}") from None
    chosen = (
        next((c for c in contexts or [] if c.get("name") == context), None) if context else active
    )
    namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    return Rest(client.ApiClient(cfg), user_agent=user_agent("kubectl-ome")), namespace


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def _api_error(error: BaseException, server: str) -> str:
    """One line for an API or transport error: what the server said, or why it could not
    be reached."""
    if isinstance(error, ApiException):
        return f"the API server at {server} answered {describe_error(error)}"
    reason = getattr(error, "reason", None) or error
    return f"cannot reach the API server at {server}: {_first_line(reason)}"


def _get(rest: Rest, res: Any, name: str, namespace: str | None) -> JSON | None:
    try:
        return rest.get(res, name, namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _load_config(rest: Rest, namespace: str) -> Config:
    """The manager's ``tpuSliceProvisioning`` config, as it reads it at start (A1)."""
    where = f"configmap {namespace}/{CONFIG_MAP}"
    cm = _get(rest, CONFIGMAPS, CONFIG_MAP, namespace)
    if cm is None:
        raise CommandError(
            f"{where} not found: TPU slice provisioning is off, or OME runs in another "
            "namespace (--ome-namespace)"
        )
    try:
        parsed = slice_config.parse((cm.get("data") or {}).get(CONFIG_KEY))
    except slice_config.ConfigError as e:
        raise CommandError(f"{where}: {_first_line(e)}") from None
    if parsed is None:
        raise CommandError(f"{where} has no {CONFIG_KEY} entry: TPU slice provisioning is off")
    return parsed


def _slice_label(rest: Rest, namespace: str) -> str:
    """The slice label pods are confined by; the guide's when the config cannot be read
    (``instance status`` reads the Instance, not the config)."""
    try:
        return _load_config(rest, namespace).slice_label
    except (CommandError, ApiException, HTTPError):
        return str(json.loads(GUIDE_CONFIG_JSON)["nodeLabels"]["slice"])


def _service(rest: Rest, name: str, namespace: str) -> JSON:
    found = _get(rest, INFERENCE_SERVICES, name, namespace)
    if found is None:
        raise CommandError(f'inferenceservice "{name}" not found in namespace "{namespace}"')
    return found


def instance_status(rest: Rest, args: argparse.Namespace, namespace: str) -> str:
    _service(rest, args.name, namespace)
    replica_name = f"{args.name}-{args.component}"
    replica = _get(rest, INFERENCE_REPLICAS, replica_name, namespace)
    if replica is None:
        raise CommandError(
            f'inferenceservice "{args.name}" has no component "{args.component}" (no '
            f'inferencereplica "{replica_name}" in namespace "{namespace}")'
        )
    rows = [
        r
        for r in (replica.get("status") or {}).get("instanceStatuses") or []
        if isinstance(r, dict)
    ]
    row = next((r for r in rows if type(r.get("index")) is int and r["index"] == args.index), None)
    if row is None:
        have = ", ".join(str(r.get("index")) for r in rows) or "none yet"
        raise CommandError(
            f'component "{args.component}" of inferenceservice "{args.name}" has no instance '
            f"{args.index} (instances: {have})"
        )
    pods = rest.list_all(
        PODS, namespace, label_selector=f"{LABEL_INFERENCE_REPLICA}={replica_name}"
    )[0]
    view = instance.status(
        args.name,
        namespace,
        args.component,
        replica_name,
        row,
        pods,
        datetime.now(UTC),
        _slice_label(rest, args.ome_namespace),
    )
    if args.output == "json":
        return json.dumps(view.document, indent=2) + "\n"
    if args.output == "yaml":
        return str(yaml.safe_dump(view.document, sort_keys=False))
    return view.table(wide=args.output == "wide")


def slices_view(rest: Rest, args: argparse.Namespace, namespace: str | None) -> str:
    if args.service and namespace is None:
        raise CommandError("ISVC names a service of one namespace: drop -A, or use -n")
    if args.service:
        _service(rest, args.service, namespace or "")
    cfg = _load_config(rest, args.ome_namespace)
    selector = f"{LABEL_INFERENCE_SERVICE}={args.service}" if args.service else None
    replicas = rest.list_all(INFERENCE_REPLICAS, namespace, label_selector=selector)[0]
    try:
        all_slices = rest.list_all(gke.SLICES)[0]
    except ApiException as e:
        if e.status == 404:
            raise CommandError(
                f"this cluster does not serve {gke.API_VERSION} {gke.KIND}: no TPU slices"
            ) from None
        raise
    nodes = rest.list_all(NODES)[0]
    ours = rest.list_all(
        PODS, namespace, label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY_OMENATIVE}"
    )[0]
    by_replica: dict[str, list[JSON]] = {}
    for pod in ours:
        meta = pod.get("metadata") or {}
        name = (meta.get("labels") or {}).get(LABEL_INFERENCE_REPLICA)
        if name:
            by_replica.setdefault(f"{meta.get('namespace')}/{name}", []).append(pod)
    hosts = sorted(
        {
            str((n.get("metadata") or {}).get("name"))
            for n in nodes
            if ((n.get("metadata") or {}).get("labels") or {}).get(cfg.slice_label)
        }
    )
    host_pods = {
        h: rest.list_all(PODS, None, field_selector=f"spec.nodeName={h}")[0] for h in hosts
    }
    world = slices.World(tuple(all_slices), tuple(nodes), by_replica, host_pods)
    now = datetime.now(UTC)
    found = slices.rows(replicas, world, cfg, now)
    if args.output == "json":
        return json.dumps({"items": [r.document() for r in found]}, indent=2) + "\n"
    if not found:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        sys.stderr.write(f"No TPU slice slots found in {where}.\n")
        return ""
    return slices.render(found, now, wide=args.output == "wide", namespaces=namespace is None)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command == "version":  # needs no cluster
        sys.stdout.write(version_line("kubectl-ome") + "\n")
        return 0
    if args.command == "instance" and args.all_namespaces:
        sys.stderr.write("error: instance status reads one namespace: drop -A\n")
        return 1
    server = "?"
    try:
        rest, context_namespace = connect(args.kubeconfig, args.context)
        server = str(rest.api_client.configuration.host)
        namespace = args.namespace or context_namespace
        if args.command == "instance":
            out = instance_status(rest, args, namespace)
        else:
            out = slices_view(rest, args, None if args.all_namespaces else namespace)
    except CommandError as e:
        sys.stderr.write(f"error: {e}\n")
        return 1
    except (ApiException, HTTPError, OSError) as e:
        sys.stderr.write(f"error: {_api_error(e, server)}\n")
        return 1
    sys.stdout.write(out)
    return 0

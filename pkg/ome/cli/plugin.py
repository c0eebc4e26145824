"""``kubectl-ome``, the ``kubectl ome`` plugin (kubectl runs any ``kubectl-<name>`` on
``PATH``): parses the command line as kubectl does, reads the cluster and prints what
``instance``, ``slices``, ``capacity`` and ``plan`` build. It only reads. ``slices -w`` watches what
the view reads (informers) and prints the view again whenever it changes, until Ctrl-C;
``completion`` prints a shell completion script (built by the ``completion`` module).

Every failure is one line on standard error, ``error: ...``, and exit status 1: bad
arguments, an unreadable kubeconfig or a context it lacks, a missing service, component or
index, an API error. ``plan`` exits 2 when the service would wait for capacity, 1 when it
would be refused (its plan printed on standard output).

``-o json`` and ``-o yaml`` print a list as kubectl does, a ``v1`` ``List`` of the items.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config import kube_config
from urllib3.exceptions import HTTPError

from ome import VersionAction, user_agent, version_line
from ome.api.v1beta1 import (
    BASE_MODELS,
    CLUSTER_BASE_MODELS,
    CLUSTER_SERVING_RUNTIMES,
    COMPONENTS,
    INFERENCE_REPLICAS,
    INFERENCE_SERVICES,
    LABEL_INFERENCE_REPLICA,
    LABEL_INFERENCE_SERVICE,
    LABEL_MANAGED_BY,
    MANAGED_BY_OMENATIVE,
    SERVING_RUNTIMES,
)
from ome.controllers.inferenceservice.decide import engine_config, resolve
from ome.controllers.setup import CONFIG_KEY, CONFIG_MAP
from ome.kube import JSON
from ome.provider import gke
from ome.runtime.client import describe_error
from ome.runtime.informer import EventHandler, InformerFactory, index_by_node_name
from ome.runtime.rest import CONFIGMAPS, NODES, PODS, Rest
from ome.tpuslice.config import ConfigError, parse_config
from ome.tpuslice.types import GUIDE_CONFIG_JSON, Config

from . import capacity, completion, instance, plan, slices

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
    st.add_argument(
        "--component",
        help="the component: engine, decoder or router (default: the service's only one)",
    )
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
        choices=("table", "wide", "json", "yaml"),
        default="table",
        help="table, wide (adds the holders that defer a release and the owner UID), json or "
        "yaml (a List of the rows)",
    )
    sl.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="after the view, watch the Instances, Slices, nodes and pods it reads, and print "
        "it again whenever it changes, until Ctrl-C (json and yaml: one List each time)",
    )
    sl.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        default=argparse.SUPPRESS,
        help="every namespace",
    )
    _connection_flags(sl, top=False)
    cap = commands.add_parser(
        "capacity",
        help="the provision-only pool: hosts free, held by OME's and foreign Slices, unhealthy",
        description="One row per accelerator and topology over the provision-only hosts: the "
        "hosts, those in OME's Slices by state, in foreign Slices, free and healthy, cordoned, "
        "not ready and unreachable; the chips of ready OME Slices with no running pod; the "
        "Instances waiting on capacity and the longest wait. A host in no Slice counts in its "
        "accelerator's row without a topology.",
    )
    cap.add_argument("--accelerator", help="only this accelerator (its node-label value)")
    cap.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "json", "yaml"),
        default="table",
        help="table, wide (names the hosts, the idle Slices and the waiting Instances), json or "
        "yaml (a List of the rows)",
    )
    _connection_flags(cap, top=False)
    pl = commands.add_parser(
        "plan",
        help="what applying an InferenceService would do: demand, Slices, fit, or refusal",
        description="For an InferenceService manifest, print per component its demand "
        "(accelerator, topology, hosts and chips per Instance), the Slice each Instance would "
        "get (named as the controller names them, the UID's hash not known yet: <hash>), and "
        "whether it fits now: the free healthy hosts against those needed, Instance by "
        "Instance, and the surge an update would add; or the refusal the controller or the "
        "admission webhook would give, in its words. It writes nothing. Exit status: 0 when "
        "everything fits, 2 when an Instance would wait for capacity, 1 when it would be "
        "refused.",
    )
    pl.add_argument(
        "-f",
        "--filename",
        required=True,
        metavar="FILE",
        help="the InferenceService manifest, YAML or JSON (-: standard input)",
    )
    _connection_flags(pl, top=False)
    comp = commands.add_parser(
        "completion",
        help="print a shell completion script (bash or zsh)",
        description="Print a script that completes kubectl-ome's commands, flags and values "
        "(contexts, namespaces and InferenceServices through kubectl). Bash: "
        "source <(kubectl-ome completion bash), or save it in "
        "~/.local/share/bash-completion/completions/kubectl-ome. Zsh: "
        "source <(kubectl-ome completion zsh) in ~/.zshrc, after compinit.",
    )
    comp.add_argument("shell", metavar="SHELL", choices=completion.SHELLS, help="bash or zsh")
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
        names = _context_names(kubeconfig)
        if context is not None and names is not None and context not in names:
            raise CommandError(
                f'context "{context}" is not in {where} (its contexts: '
                f"{', '.join(names) or 'none'})"
            ) from None
        raise CommandError(f"cannot load {where}: {_first_line(e)}") from None
    chosen = (
        next((c for c in contexts or [] if c.get("name") == context), None) if context else active
    )
    namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    return Rest(client.ApiClient(cfg), user_agent=user_agent("kubectl-ome")), namespace


def _context_names(kubeconfig: str | None) -> list[str] | None:
    """The names of the kubeconfig's contexts (every file of ``$KUBECONFIG`` merged, as the
    client reads them), or ``None`` when it cannot be read."""
    try:
        merged = kube_config.KubeConfigMerger(  # type: ignore[no-untyped-call]
            kubeconfig or kube_config.KUBE_CONFIG_DEFAULT_LOCATION
        ).config
        contexts = merged.value.get("contexts") if merged is not None else None
        return [str(getattr(c, "value", c).get("name")) for c in contexts or []]
    except Exception:  # unreadable: the caller reports the loader's own error
        return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def _api_error(error: BaseException, server: str) -> str:
    """One line for an API or transport error: what the server said, or why it could not
    be reached."""
    if isinstance(error, ApiException):
        return f"the API server at {server} answered {describe_error(error)}"
    reason = getattr(error, "reason", None) or error
    return f"cannot reach the API server at {server}: {_CONNECTION.sub('', _first_line(reason))}"


#: The connection's repr urllib3 puts before why it failed (``HTTPSConnection(host='h',
#: port=1): ``): the client's internals, which say nothing the server's address does not.
_CONNECTION = re.compile(r"^\w*Connection\(host=.*?, port=\d+\): ")


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
        parsed = parse_config((cm.get("data") or {}).get(CONFIG_KEY))
    except ConfigError as e:
        raise CommandError(f"{where}: {_first_line(e)}") from None
    if parsed is None:
        raise CommandError(f"{where} has no {CONFIG_KEY} entry: TPU slice provisioning is off")
    return parsed


def _slice_label(rest: Rest, namespace: str) -> str:
    """The slice label pods are confined by; the sample's when the config cannot be read
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


def _component(service: JSON, given: str | None) -> str:
    """The component ``--component`` names, else the service's only one."""
    if given:
        return given
    spec = service.get("spec") or {}
    present = [c for c in COMPONENTS if isinstance(spec, dict) and spec.get(c) is not None]
    name = (service.get("metadata") or {}).get("name")
    if len(present) == 1:
        return present[0]
    if not present:
        raise CommandError(f'inferenceservice "{name}" has no component: nothing to show')
    raise CommandError(
        f'inferenceservice "{name}" has components {", ".join(present)}: choose one with '
        "--component"
    )


def _list_document(items: list[JSON]) -> JSON:
    """A list as kubectl prints one under ``-o json`` or ``-o yaml``: a ``v1`` ``List``."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def _dump(document: JSON, output: str) -> str:
    """``document`` as ``-o json`` (indented as kubectl's) or ``-o yaml`` prints it."""
    if output == "yaml":
        return str(yaml.safe_dump(document, sort_keys=False))
    return json.dumps(document, indent=2) + "\n"


def instance_status(rest: Rest, args: argparse.Namespace, namespace: str) -> str:
    args.component = _component(_service(rest, args.name, namespace), args.component)
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
    if args.output in ("json", "yaml"):
        return _dump(view.document, args.output)
    return view.table(wide=args.output == "wide")


def _slices_config(rest: Rest, args: argparse.Namespace, namespace: str | None) -> Config:
    """Check the arguments against the cluster and read the manager's config (once: the
    manager reads it at start)."""
    if args.service and namespace is None:
        raise CommandError("ISVC names a service of one namespace: drop -A, or use -n")
    if args.service:
        _service(rest, args.service, namespace or "")
    return _load_config(rest, args.ome_namespace)


def _replica_selector(args: argparse.Namespace) -> str | None:
    return f"{LABEL_INFERENCE_SERVICE}={args.service}" if args.service else None


def _world(
    cfg: Config,
    all_slices: list[JSON],
    nodes: list[JSON],
    ours: list[JSON],
    pods_on: Callable[[str], list[JSON]],
) -> slices.World:
    """What the view joins, from the Slices, the nodes, OME's pods (``ours``) and the pods
    bound to a host (``pods_on``)."""
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
    host_pods = {h: pods_on(h) for h in hosts}
    return slices.World(tuple(all_slices), tuple(nodes), by_replica, host_pods)


def _slice_rows(
    rest: Rest, args: argparse.Namespace, namespace: str | None, cfg: Config
) -> list[slices.SlotRow]:
    """The view's rows, read with one list of each resource."""
    replicas, _ = rest.list_all(
        INFERENCE_REPLICAS, namespace, label_selector=_replica_selector(args)
    )
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
    world = _world(
        cfg,
        all_slices,
        nodes,
        ours,
        lambda h: rest.list_all(PODS, None, field_selector=f"spec.nodeName={h}")[0],
    )
    return slices.rows(replicas, world, cfg, datetime.now(UTC))


def _print_slices(
    found: list[slices.SlotRow], args: argparse.Namespace, namespace: str | None
) -> None:
    """Write the view: a List under json and yaml; a table, or the one line that says there
    is none (on standard error, as kubectl's ``No resources found``)."""
    if args.output in ("json", "yaml"):
        sys.stdout.write(_dump(_list_document([r.document() for r in found]), args.output))
    elif not found:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        sys.stderr.write(f"No TPU slice slots found in {where}.\n")
    else:
        now = datetime.now(UTC)
        sys.stdout.write(
            slices.render(found, now, wide=args.output == "wide", namespaces=namespace is None)
        )
    sys.stdout.flush()


def slices_view(rest: Rest, args: argparse.Namespace, namespace: str | None) -> None:
    cfg = _slices_config(rest, args, namespace)
    found = _slice_rows(rest, args, namespace, cfg)
    _print_slices(found, args, namespace)
    if args.watch:
        watch_slices(rest, args, namespace, cfg, found)


def watch_slices(
    rest: Rest,
    args: argparse.Namespace,
    namespace: str | None,
    cfg: Config,
    shown: list[slices.SlotRow],
) -> None:
    """``slices -w``: informers on everything the view reads (the replicas, Slices, nodes and
    pods); after any of them changes, the rows are built again from their caches and printed
    when they differ from the last printed (a table again, after a blank line; one more List
    under json, one more YAML document under yaml). Returns only by an exception: Ctrl-C's
    ``KeyboardInterrupt``, which ``main`` turns into exit status 0.

    Ctrl-C ends it even when it was started with SIGINT ignored (a background job of a shell
    without job control, as CI starts its tests): Python then keeps ignoring it, while
    kubectl's ``get -w`` (Go's ``signal.Notify``) takes it back; so does this."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    factory = InformerFactory(rest)
    replicas = factory.informer(INFERENCE_REPLICAS, namespace, _replica_selector(args))
    slice_objects = factory.informer(gke.SLICES)
    nodes = factory.informer(NODES)
    pods = factory.informer(PODS)  # every namespace's: the pods holding a Slice's hosts (G2)
    pods.add_indexer("node", index_by_node_name)
    changed = threading.Event()
    handler = EventHandler(
        on_add=lambda _obj: changed.set(),
        on_update=lambda _old, _new: changed.set(),
        on_delete=lambda _obj: changed.set(),
    )
    for informer in factory.informers():
        informer.add_handler(handler)
    factory.start()
    try:
        factory.wait_for_sync()  # retries (and logs) until every list succeeds; Ctrl-C ends it
        changed.set()  # what changed between the first view and the informers' lists
        while True:
            changed.wait()
            changed.clear()
            ours = [
                p
                for p in pods.peek_list()
                if ((p.get("metadata") or {}).get("labels") or {}).get(LABEL_MANAGED_BY)
                == MANAGED_BY_OMENATIVE
                and (namespace is None or (p.get("metadata") or {}).get("namespace") == namespace)
            ]
            world = _world(
                cfg,
                slice_objects.peek_list(),
                nodes.peek_list(),
                ours,
                lambda h: pods.by_index("node", h),
            )
            found = slices.rows(replicas.peek_list(), world, cfg, datetime.now(UTC))
            if found == shown:
                continue
            if args.output == "yaml":
                sys.stdout.write("---\n")
            elif args.output != "json" and shown and found:  # a table after a table
                sys.stdout.write("\n")
            shown = found
            _print_slices(found, args, namespace)
    finally:
        for informer in factory.informers():
            informer.stop(timeout=1.0)


def capacity_view(rest: Rest, args: argparse.Namespace) -> str:
    """``capacity``: the manager's config, then every node, Slice and InferenceReplica and
    OME's pods, one list each; the rows or, without any, the line that says so (on standard
    error, as kubectl's ``No resources found``)."""
    cfg = _load_config(rest, args.ome_namespace)
    if args.accelerator is not None and args.accelerator not in cfg.accelerators:
        raise CommandError(
            f'accelerator "{args.accelerator}" is not configured (configured: '
            f"{', '.join(sorted(cfg.accelerators)) or 'none'})"
        )
    try:
        all_slices = rest.list_all(gke.SLICES)[0]
    except ApiException as e:
        if e.status == 404:
            raise CommandError(
                f"this cluster does not serve {gke.API_VERSION} {gke.KIND}: no TPU slices"
            ) from None
        raise
    nodes = rest.list_all(NODES)[0]
    replicas = rest.list_all(INFERENCE_REPLICAS, None)[0]
    ours = rest.list_all(PODS, None, label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY_OMENATIVE}")[0]
    found = capacity.rows(
        nodes, all_slices, replicas, ours, cfg, datetime.now(UTC), args.accelerator
    )
    if args.output in ("json", "yaml"):
        return _dump(_list_document([r.document() for r in found]), args.output)
    if not found:
        sys.stderr.write("No provision-only TPU hosts found.\n")
        return ""
    return capacity.render(found, wide=args.output == "wide")


def read_manifest(filename: str) -> JSON:
    """The one InferenceService of a YAML or JSON file (``-``: standard input)."""
    where = "standard input" if filename == "-" else filename
    try:
        text = sys.stdin.read() if filename == "-" else Path(filename).read_text(encoding="utf-8")
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except (OSError, UnicodeDecodeError) as e:
        raise CommandError(f"cannot read {where}: {getattr(e, 'strerror', None) or e}") from None
    except yaml.YAMLError as e:
        raise CommandError(f"{where} is not YAML or JSON: {_first_line(e)}") from None
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise CommandError(
            f"{where} holds {len(documents)} objects: plan reads one InferenceService"
        )
    found = documents[0]
    kind = (found.get("apiVersion"), found.get("kind"))
    meta = found.get("metadata")
    if kind != ("ome.io/v1beta1", "InferenceService"):
        raise CommandError(
            f"{where} holds {kind[1] or 'an object'}, not an ome.io/v1beta1 InferenceService"
        )
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise CommandError(f"{where}: the InferenceService has no metadata.name")
    return found


def plan_view(rest: Rest, service: JSON, namespace: str, ome_namespace: str) -> plan.Preview:
    """``plan``: the manager's config, the service's model and runtime as the controller
    resolves them (M6), and every node; one read each, nothing written."""
    cfg = _load_config(rest, ome_namespace)
    meta = dict(service.get("metadata") or {})
    ns = str(meta.get("namespace") or namespace)
    service = {**service, "metadata": {**meta, "namespace": ns}}
    spec = service.get("spec") if isinstance(service.get("spec"), dict) else {}
    spec = spec or {}

    def ref(key: str) -> JSON:
        value = spec.get(key)
        return value if isinstance(value, dict) else {}

    def namespaced(res: Any) -> Callable[[str], JSON | None]:
        return lambda key: _get(rest, res, key.split("/", 1)[1], key.split("/", 1)[0])

    def cluster(res: Any) -> Callable[[str], JSON | None]:
        return lambda name: _get(rest, res, name, None) if name else None

    model = resolve(
        ns,
        ref("model"),
        "BaseModel",
        "ClusterBaseModel",
        namespaced(BASE_MODELS),
        cluster(CLUSTER_BASE_MODELS),
    )
    runtime = resolve(
        ns,
        ref("runtime"),
        "ServingRuntime",
        "ClusterServingRuntime",
        namespaced(SERVING_RUNTIMES),
        cluster(CLUSTER_SERVING_RUNTIMES),
    )
    nodes = rest.list_all(NODES)[0]
    return plan.preview(service, model is not None, engine_config(runtime), nodes, cfg)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command == "version":  # needs no cluster
        sys.stdout.write(version_line("kubectl-ome") + "\n")
        return 0
    if args.command == "completion":  # needs no cluster either
        sys.stdout.write(completion.script(args.shell, build_parser()))
        return 0
    if args.command == "instance" and args.all_namespaces:
        sys.stderr.write("error: instance status reads one namespace: drop -A\n")
        return 1
    server = "?"
    try:
        manifest = read_manifest(args.filename) if args.command == "plan" else {}
        rest, context_namespace = connect(args.kubeconfig, args.context)
        server = str(rest.api_client.configuration.host)
        namespace = args.namespace or context_namespace
        if args.command == "instance":
            sys.stdout.write(instance_status(rest, args, namespace))
        elif args.command == "capacity":
            sys.stdout.write(capacity_view(rest, args))
        elif args.command == "plan":
            found = plan_view(rest, manifest, namespace, args.ome_namespace)
            sys.stdout.write(plan.render(found))
            return int(found.verdict)
        else:
            slices_view(rest, args, None if args.all_namespaces else namespace)
    except CommandError as e:
        sys.stderr.write(f"error: {e}\n")
        return 1
    except (ApiException, HTTPError, OSError) as e:
        sys.stderr.write(f"error: {_api_error(e, server)}\n")
        return 1
    except KeyboardInterrupt:  # Ctrl-C ends slices -w, as it ends kubectl get -w
        return 0 if getattr(args, "watch", False) else 130
    return 0

"""``ome-sim``: start the embedded cluster pieces from the command line.

Thin: parses arguments, starts a server, reports errors as one clear line and an exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from .apiserver import EmbeddedAPIServer


def _apiserver(args: argparse.Namespace) -> int:
    async def serve() -> int:
        server = EmbeddedAPIServer(port=args.port)
        try:
            await server.start()
        except OSError as e:
            print(f"ome-sim apiserver: {e}", file=sys.stderr)
            return 1
        path = server.write_kubeconfig(args.kubeconfig)
        print(f"embedded API server listening on {server.url}", flush=True)
        print(f"export KUBECONFIG={path.resolve()}", flush=True)
        print(f"try: kubectl --kubeconfig {path.resolve()} get namespaces", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        print("stopping embedded API server", flush=True)
        await server.stop()
        return 0

    return asyncio.run(serve())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ome-sim", description="The embedded Kubernetes cluster for tests and local runs."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    api = sub.add_parser(
        "apiserver",
        help="serve the embedded Kubernetes API server until interrupted",
        description="Serve the embedded Kubernetes API server on 127.0.0.1 until Ctrl-C, "
        "writing a kubeconfig for kubectl and clients.",
    )
    api.add_argument("--kubeconfig", required=True, type=Path, help="where to write the kubeconfig")
    api.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    api.set_defaults(func=_apiserver)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "port", 0) is not None and not 0 <= args.port <= 65535:
        print(f"ome-sim: --port must be between 0 and 65535, not {args.port}", file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        return int(args.func(args))
    return 130

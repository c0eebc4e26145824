"""The cold start's floor (``ome-sim bench``): how long the API server takes to serve the lists
a new manager's informers make before it may act, to bare clients that do nothing else.

A manager's first pass cannot end before its caches are filled, and a cache is filled by
paging through a list of every object of its type (500 to a page, as client-go and the
manager's informers page). On two cores most of a cold start is the API server serving
those pages, whatever the manager. So the bench measures that part alone, on the same
cluster just before each cold start: one process per resource, each decoding its pages as
the manager's informers do (orjson) and keeping the objects as they come (no transform,
index or handler), all told to start once every one has its client made (a condition, not
a clock: the imports take as long as the machine makes them); the floor is when the last
one has its last page. What a first pass takes above it is the manager's: its start, its
caches' work and its passes.

Run as ``python -m ome_sim.listfloor KUBECONFIG PLURAL PAGE`` by ``measure``, a child per
resource: it prints ``ready``, lists once ``go`` comes on its stdin, and prints ``<plural>
<objects> <seconds>``.
"""

from __future__ import annotations

import contextlib
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import NoReturn

from kubernetes import config

from ome import user_agent
from ome.api.v1beta1 import INFERENCE_REPLICAS, INFERENCE_SERVICES
from ome.kube import Resource
from ome.provider import gke
from ome.runtime.client import api_error, describe_error
from ome.runtime.rest import NODES, PODS

from . import system

#: The lists of a new manager's informers that grow with the cluster (the models', runtimes'
#: and webhook configuration's are a page each): every pod (the holders of chips, OME's own
#: among them), every node, every Slice, InferenceReplica and InferenceService.
LISTED: dict[str, Resource] = {
    res.plural: res for res in (PODS, NODES, gke.SLICES, INFERENCE_REPLICAS, INFERENCE_SERVICES)
}
#: The page size of the manager's informers (``Rest.list_all``) and of client-go's.
PAGE = 500
#: The floor's clients, in the request accounting: not the manager's.
AGENT = user_agent("ome-sim-listfloor")
#: What a child prints once its client is made, and waits to be told on stdin.
READY = "ready"
GO = "go"


@dataclass(frozen=True)
class Floor:
    """When the last list had its last page (``seconds``, from the go), and each resource's
    time and count of objects."""

    seconds: float
    lists: dict[str, tuple[int, float]]

    def json(self) -> dict[str, object]:
        return {
            "seconds": self.seconds,
            "lists": {p: {"objects": n, "seconds": s} for p, (n, s) in self.lists.items()},
        }


class FloorError(Exception):
    """A child failed: its output, in one line."""


def measure(kubeconfig: str, timeout: float = 300.0, page: int = PAGE) -> Floor:
    """Every list of ``LISTED`` at once, ``page`` objects to a page, each in its own process;
    FloorError when one fails or the whole takes longer than ``timeout``. The children start
    together: each makes its client (the imports take a while), says it is ready, and lists
    once all are and the go reaches it, timing from there."""
    deadline = time.monotonic() + timeout
    children = {
        plural: subprocess.Popen(
            [sys.executable, "-m", "ome_sim.listfloor", kubeconfig, plural, str(page)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for plural in LISTED
    }
    lists: dict[str, tuple[int, float]] = {}
    try:
        waiting = {child.stdout.fileno(): (plural, child) for plural, child in children.items()}  # type: ignore[union-attr]
        while waiting:
            left = deadline - time.monotonic()
            ready, _, _ = select.select(list(waiting), [], [], max(0.0, left))
            if not ready:
                raise subprocess.TimeoutExpired("listfloor", timeout)
            for fd in ready:
                plural, child = waiting.pop(fd)
                assert child.stdout is not None
                if child.stdout.readline().strip() != READY:
                    _failed(child)
        for child in children.values():
            assert child.stdin is not None
            try:
                child.stdin.write(GO + "\n")
                child.stdin.flush()
            except BrokenPipeError:  # it ended after it said it was ready
                _failed(child)
        for child in children.values():
            out, err = child.communicate(timeout=max(0.0, deadline - time.monotonic()))
            if child.returncode != 0:
                _failed(child, err)
            plural, objects, seconds = out.split()
            lists[plural] = (int(objects), float(seconds))
    except subprocess.TimeoutExpired:
        raise FloorError(f"the list floor took longer than {timeout:.0f}s") from None
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.wait()
            for pipe in (child.stdin, child.stdout, child.stderr):
                if pipe is not None and not pipe.closed:
                    with contextlib.suppress(BrokenPipeError):
                        pipe.close()
    return Floor(max(s for _, s in lists.values()), lists)


def _failed(child: subprocess.Popen[str], err: str | None = None) -> NoReturn:
    """FloorError with the last line the child wrote on stderr (``err``, once read)."""
    child.wait()
    if err is None:
        assert child.stderr is not None
        err = child.stderr.read()
    last = (err.strip().splitlines() or ["no output"])[-1]
    raise FloorError(f"the list floor's child failed ({child.returncode}): {last}")


def main(argv: list[str]) -> int:
    """One child: make the client, say it is ready, wait for the go (or the parent's end:
    exit 1), page through the list and print what it took; an API error is one line on
    stderr and exit 1."""
    kubeconfig, plural, page = argv[0], argv[1], int(argv[2])
    try:
        rest = system.rest_from(kubeconfig, AGENT)
    except (config.ConfigException, OSError) as e:
        print(f"cannot load the kubeconfig {kubeconfig}: {e}", file=sys.stderr)
        return 1
    print(READY, flush=True)
    if sys.stdin.readline().strip() != GO:
        print("the bench went away before the go", file=sys.stderr)
        return 1
    started = time.monotonic()
    try:
        items, _ = rest.list_all(LISTED[plural], page_size=page)
    except Exception as e:
        if not api_error(e):
            raise
        print(f"listing {plural} failed: {describe_error(e)}", file=sys.stderr)
        return 1
    print(plural, len(items), f"{time.monotonic() - started:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

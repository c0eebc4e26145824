"""The cold start's floor (``ome-sim bench``): how long the API server takes to serve the lists
a new manager's informers make before it may act, to bare clients that do nothing else.

A manager's first pass cannot end before its caches are filled, and a cache is filled by
paging through a list of every object of its type (500 to a page, as client-go and the
manager's informers page). On two cores most of a cold start is the API server serving
those pages, whatever the manager. So the bench measures that part alone, on the same
cluster just before each cold start: one process per resource, each decoding its pages as
the manager's informers do (orjson) and keeping the objects as they come (no transform,
index or handler), all started at the same moment; the floor is when the last one has its
last page. What a first pass takes above it is the manager's: its start, its caches' work
and its passes.

Run as ``python -m ome_sim.listfloor KUBECONFIG START PLURAL PAGE`` by ``measure``, a child
per resource; each prints ``<plural> <objects> <seconds>``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass

from kubernetes import client, config

from ome import user_agent
from ome.api.v1beta1 import INFERENCE_REPLICAS, INFERENCE_SERVICES
from ome.kube import Resource
from ome.provider import gke
from ome.runtime.client import api_error, describe_error
from ome.runtime.rest import NODES, PODS, Rest

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
#: How long before the common start the children are launched (each imports the client).
LEAD_S = 3.0


@dataclass(frozen=True)
class Floor:
    """When the last list had its last page (``seconds``, from the common start), and each
    resource's time and count of objects."""

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
    FloorError when one fails."""
    start = time.time() + LEAD_S
    children = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "ome_sim.listfloor"),
                *(kubeconfig, repr(start), plural, str(page)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for plural in LISTED
    ]
    lists: dict[str, tuple[int, float]] = {}
    try:
        for child in children:
            out, err = child.communicate(timeout=timeout + LEAD_S)
            if child.returncode != 0:
                last = (err.strip().splitlines() or ["no output"])[-1]
                raise FloorError(f"the list floor's child failed ({child.returncode}): {last}")
            plural, objects, seconds = out.split()
            lists[plural] = (int(objects), float(seconds))
    except subprocess.TimeoutExpired:
        raise FloorError(f"the list floor took longer than {timeout:.0f}s") from None
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return Floor(max(s for _, s in lists.values()), lists)


def main(argv: list[str]) -> int:
    """One child: wait for the common start, page through the list, print what it took; an
    API error is one line on stderr and exit 1."""
    kubeconfig, start, plural, page = argv[0], float(argv[1]), argv[2], int(argv[3])
    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
    rest = Rest(client.ApiClient(cfg), user_agent=AGENT)
    time.sleep(max(0.0, start - time.time()))
    try:
        items, _ = rest.list_all(LISTED[plural], page_size=page)
    except Exception as e:
        if not api_error(e):
            raise
        print(f"listing {plural} failed: {describe_error(e)}", file=sys.stderr)
        return 1
    print(plural, len(items), f"{time.time() - start:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

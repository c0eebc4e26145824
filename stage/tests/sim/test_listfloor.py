"""The cold start's list floor (``ome_sim.listfloor``) on a real API server: it pages through
every list a new manager makes, in processes of their own, counted apart from the manager's
requests; and a list the server cannot serve is a one-line error, not a figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test.cluster import Cluster, Kubectl
from test.manifests import served

from ome.api import crdgen, v1beta1
from ome_sim import listfloor

pytestmark = pytest.mark.kubectl

ROOT = Path(__file__).resolve().parents[3]


def _install(kubectl: Kubectl, cluster: Cluster) -> None:
    kubectl("apply", "-f", f"{ROOT / 'config' / 'crd'}/")
    kubectl("apply", "-f", str(ROOT / "stage" / "ome_sim" / "gke" / "crds"))
    for kind in v1beta1.KINDS:
        served(cluster, crdgen.crd(kind))


def _nodes(count: int) -> str:
    return "\n---\n".join(
        f"apiVersion: v1\nkind: Node\nmetadata:\n  name: floor-{i:04d}\n" for i in range(count)
    )


def _lists(floor: listfloor.Floor) -> dict[str, Any]:
    return {plural: objects for plural, (objects, _) in floor.lists.items()}


def test_every_list_a_manager_makes_is_paged_through_and_timed(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    _install(kubectl, cluster)
    kubectl("apply", "-f", "-", input=_nodes(7))
    before = int(kubectl("get", "nodes", "-o", "go-template={{len .items}}").stdout.strip() or 0)
    floor = listfloor.measure(str(cluster.kubeconfig), page=3)  # 7 nodes: three pages
    assert _lists(floor) == {
        "pods": 0,
        "nodes": before,
        "slices": 0,
        "inferencereplicas": 0,
        "inferenceservices": 0,
    }
    assert floor.seconds == max(s for _, s in floor.lists.values())
    assert 0 <= floor.seconds < 60
    assert floor.json()["lists"]["nodes"] == {
        "objects": before,
        "seconds": floor.lists["nodes"][1],
    }


def test_a_list_the_server_does_not_serve_is_a_one_line_error(cluster: Cluster) -> None:
    # No OME CRDs and no Slice CRD: the lists of replicas, services and Slices are 404s.
    with pytest.raises(listfloor.FloorError) as caught:
        listfloor.measure(str(cluster.kubeconfig), timeout=60)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith("the list floor's child failed (1): listing slices failed: 404 ")


def test_a_child_that_cannot_start_is_a_one_line_error_before_any_list(tmp_path: Path) -> None:
    """A child that ends before it says it is ready: the others are never told to list."""
    missing = tmp_path / "no-kubeconfig"
    with pytest.raises(listfloor.FloorError) as caught:
        listfloor.measure(str(missing), timeout=60)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(
        f"the list floor's child failed (1): cannot load the kubeconfig {missing}"
    )

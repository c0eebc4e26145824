"""The stage of ome-tpu-slices, not the product: the embedded Kubernetes API server, the GKE
provider simulator, ``ome-sim`` and its bench, soak and control-plane runner.

It ships as its own distribution (``ome-sim``); the product (package ``ome``) never imports
it, and it uses the product only through the modules the import contracts in pyproject.toml
allow (``make lint``).
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("ome-sim")
except _metadata.PackageNotFoundError:  # pragma: no cover - run from a tree not installed
    __version__ = "0.0.0"

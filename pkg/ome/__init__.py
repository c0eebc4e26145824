"""OME on-demand TPU slice provisioning for OMENative inference services.

Product code lives in the subpackages beside ``ome.sim``; ``ome.sim`` is the test and demo
environment (embedded API server, provider simulator) and is never imported by product code.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("ome-tpu-slices")
except _metadata.PackageNotFoundError:  # pragma: no cover - run from a tree not installed
    __version__ = "0.0.0"


def user_agent(program: str) -> str:
    """The User-Agent a program of this project sends: ``<program>/<version>``."""
    return f"{program}/{__version__}"

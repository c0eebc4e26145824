"""The embedded Kubernetes API server: a faithful, in-memory stand-in for kube-apiserver.

Used by CI, ``make run`` and every benchmark and fault test. Product code never imports it.
What it deliberately does not do is listed in ``docs/embedded-apiserver.md``.
"""

from .server import EmbeddedAPIServer, ServerThread

__all__ = ["EmbeddedAPIServer", "ServerThread"]

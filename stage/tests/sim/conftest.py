"""Fixtures of the simulator suite: the HTTPS webhook server shared by the admission tests."""

from test.webhooks import ca, server, server_module

__all__ = ["ca", "server", "server_module"]

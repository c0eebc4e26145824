"""TPU slice provisioning as five reconcilers: demand validation (``validation``), slice
provisioning (``provisioning``), readiness gating (``readiness``), release (``releases``) and
loss detection (``losses``), composed into plans (``plan``) that ``act`` carries out; ``reconciler``
wires them to the informers, ``admission`` is the webhook. Texts are in ``messages``."""

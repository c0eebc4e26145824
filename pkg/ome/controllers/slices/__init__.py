"""TPU slice provisioning as five reconcilers: demand validation (``demand``), slice
provisioning (``provision``), readiness gating (``gate``), release (``release``) and loss
detection (``loss``), composed into plans (``plan``) that ``act`` carries out; ``reconciler``
wires them to the informers, ``admission`` is the webhook. Texts are in ``messages``."""

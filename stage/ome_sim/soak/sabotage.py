"""Not product code: the manager with one protection turned off, to show that the soak's
checkers catch its absence (``python -m ome_sim.soak.sabotage <manager flags>``, with
``OME_SIM_SABOTAGE`` naming the protection). The product has no switch for the first three:
this module patches the running manager, before it starts, from outside; the last is the
product's own flag.

- ``uid-precondition``: pods are deleted without their UID precondition;
- ``lease-check``: writes are no longer fenced on holding the lease;
- ``slice-gate``: pods are created without waiting for their Slice to be ready;
- ``orphan-collection``: Slices whose replica is gone are left
  (``--orphan-slice-collection=false``): the leak check must find them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from ome.controllers.holds import Gated
from ome.controllers.inferencereplica import controller as replica_controller
from ome.entrypoints import manager
from ome.kube import JSON
from ome.runtime.client import Client
from ome.runtime.manager import Manager
from ome.runtime.rest import PODS

PROTECTIONS = ("uid-precondition", "lease-check", "slice-gate", "orphan-collection")


def _no_uid_precondition() -> None:
    original = Client.delete

    def delete(self: Client, res: Any, *args: Any, **kwargs: Any) -> Any:
        if res == PODS:
            kwargs.pop("uid", None)
        return original(self, res, *args, **kwargs)

    Client.delete = delete  # type: ignore[method-assign]


def _no_lease_check() -> None:
    Manager._may_write = lambda self: True  # type: ignore[method-assign]


def _no_slice_gate() -> None:
    original = replica_controller.InferenceReplicaReconciler._gate

    def gate(
        self: replica_controller.InferenceReplicaReconciler,
        replica: JSON,
        pending: Mapping[int, list[JSON]],
    ) -> Gated:
        answer = original(self, replica, pending)
        return Gated({}, answer.node_selectors, answer.failed)

    replica_controller.InferenceReplicaReconciler._gate = gate  # type: ignore[method-assign]


SABOTAGE = {
    "uid-precondition": _no_uid_precondition,
    "lease-check": _no_lease_check,
    "slice-gate": _no_slice_gate,
}
#: Protections the product itself can turn off: the flags that do it.
FLAGS = {"orphan-collection": ["--orphan-slice-collection=false"]}


def main() -> int:
    what = os.environ.get("OME_SIM_SABOTAGE", "")
    if what not in SABOTAGE and what not in FLAGS:
        print(
            f"ome_sim.soak.sabotage: OME_SIM_SABOTAGE must be one of {', '.join(PROTECTIONS)}, "
            f"not {what!r}",
            file=sys.stderr,
        )
        return 2
    if what in SABOTAGE:
        SABOTAGE[what]()
    print(f"ome_sim.soak.sabotage: the manager runs without its {what}", file=sys.stderr)
    return manager.main([*sys.argv[1:], *FLAGS.get(what, [])])


if __name__ == "__main__":
    sys.exit(main())

"""Two inputs the fuzzers found the product could not take, now bounded, kept as plain
regression tests:

- a worker ``size`` the CRD admitted (no maximum then) made B7
  (``tpuslice.placement.instance_pod_specs``) and ``instances.pod_slots`` build one pod spec per
  worker, so ``size: 2**62`` filled the memory of the admission webhook and of every slice
  reconciler pass. The CRDs now cap ``size`` at ``MAX_WORKERS``; a larger size that an older
  CRD let in counts as ``MAX_WORKERS + 1`` pods, and is refused for its pod count;
- an object nested deeper than about 500 levels (the client's ``json.loads`` decodes about
  995) made ``kube.json_copy``, which every informer read goes through, raise
  RecursionError; it now falls back to a copy with a stack of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from ome.kube import json_copy

from .strategies import in_thread, nested_text

#: Run in a child whose address space is capped, so that a regression cannot take the
#: machine with it: it ends in a MemoryError well within the time limit.
_PROBE = textwrap.dedent(
    """
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (1 << 29, 1 << 29))
    from ome.controllers.slices.model import Replica
    from ome.tpuslice import admission, config
    from ome.tpuslice.types import GUIDE_CONFIG_JSON

    template = {
        "metadata": {"annotations": {"ome.io/tpu-slice-provisioning": "true"}},
        "spec": {"nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu7x",
                                  "cloud.google.com/gke-tpu-topology": "2x2x2"}},
    }
    replica = {
        "metadata": {"name": "r", "namespace": "n", "uid": "u"},
        "spec": {"runners": [{"name": "leader", "template": template},
                             {"name": "worker", "size": 2**62, "template": template}]},
    }
    what = sys.argv[1]
    if what == "webhook":
        decision = admission.decide("CREATE", replica, None, config.parse_config(GUIDE_CONFIG_JSON),
                                   lambda _: {"tpu7x"})
        assert not decision.allowed, decision
    else:
        Replica.from_json(replica)
    print("decided")
    """
)


@pytest.mark.parametrize("where", ["webhook", "slice-model"])
def test_a_huge_worker_size_is_decided_without_building_every_pod(where: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, where], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "decided", done.stderr[-500:]


def test_the_informer_copies_whatever_the_client_decodes() -> None:
    text = '{"spec": {"engine": {"runner": {"env": ' + nested_text(700, "dict") + "}}}}"
    decoded = in_thread(lambda: json.loads(text))  # what the client hands the informer
    copied = in_thread(lambda: json_copy(decoded))
    assert in_thread(lambda: copied == decoded and copied is not decoded)

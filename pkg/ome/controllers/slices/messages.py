"""Every text of TPU slice provisioning that users read: hold messages, events and log lines,
each beside the rule of docs/rules.md that produces it (the rule's id is in its docstring).
Users compare them with the docs, so they are built here and nowhere else.

Pure: strings in, strings out. It decides nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import timedelta

from ome.durations import format_go_duration

# -- tokens and event reasons (E7, I) -----------------------------------------------------------

#: E7: the waiting token of an operation whose Instance's Slice is not ready.
CAPACITY = "CapacityProvisioning"
#: The waiting token of an Instance whose pods cannot fill a provisionable Slice (B6).
DEMAND_INVALID = "SliceDemandInvalid"

SLICE_DEMAND_INVALID = "SliceDemandInvalid"
SLICE_OWNERSHIP_CONFLICT = "SliceOwnershipConflict"
SLICE_HOST_UNAVAILABLE = "SliceHostUnavailable"
SLICE_READY_TIMEOUT = "SliceReadyTimeout"
SLICE_LOST = "SliceLost"
SLICE_RELEASE_DEFERRED = "SliceReleaseDeferred"

# -- L: startup ---------------------------------------------------------------------------------

#: L: the exact line when the Slice CRD is missing at start.
CRD_MISSING_LOG = (
    "The InferenceReplica controller won't provision TPU slices because the "
    "accelerator.gke.io/v1beta1 Slice CRD is not available; pods are created without slices "
    "until it is installed and the manager restarts."
)


#: L2: the start-up line's end while orphan collection (G6) is on.
ORPHANS_RELEASED = "orphaned slices are released"


def provisioning_on(accelerators: dict[str, tuple[str, ...]], orphans: bool = True) -> str:
    """L2: the start-up line when provisioning is on, with the accelerators and their
    topologies, and whether orphaned Slices are collected (G6): ``TPU slice provisioning is
    on: tpu7x (2x2x1, 2x2x2); orphaned slices are released``."""
    parts = [
        f"{name} ({', '.join(topologies)})" for name, topologies in sorted(accelerators.items())
    ]
    collection = (
        ORPHANS_RELEASED
        if orphans
        else "orphaned slices are left alone (--orphan-slice-collection=false)"
    )
    return f"TPU slice provisioning is on: {'; '.join(parts)}; {collection}"


def provisioning_off(why: str) -> str:
    """A1: the start-up line when provisioning is off (the CRD's case is L's own line)."""
    return f"TPU slice provisioning is off: {why}"


def no_config_map(name: str, namespace: str) -> str:
    return f"there is no {name} ConfigMap in namespace {namespace}"


def no_config_entry(name: str, namespace: str, key: str) -> str:
    return f"the {name} ConfigMap in namespace {namespace} has no {key} entry"


# -- I: events on the InferenceService ----------------------------------------------------------

SLICE_TOPOLOGY_MISSING = "SliceTopologyMissing"


def no_topology(component: str, topology_label: str) -> str:
    """B5/B6: an opted-in component whose pods select no topology gets no Slice: not an
    error, but the user is told, once per replica generation (a Warning, and a log line)."""
    return (
        f"OMENative component={component}: opted in to TPU slice provisioning, but no pod "
        f"selects a topology under {topology_label}; its pods are created without a slice"
    )


def instance_key(component: str, index: int) -> str:
    """I: the key that names an Instance in its events: ``component=<c> instance=<i>``."""
    return f"component={component} instance={index}"


def withheld(component: str, index: int, reason: str) -> str:
    """I: ``OMENative component=<c> instance=<i> withheld: <reason>``, the text of
    SliceDemandInvalid, SliceOwnershipConflict, SliceHostUnavailable and SliceReadyTimeout."""
    return f"OMENative {instance_key(component, index)} withheld: {reason}"


# -- E3: why a slot waits for its Slice ---------------------------------------------------------


def owned_by_another(name: str) -> str:
    """E3: a Slice at our name without our owner UID (SliceOwnershipConflict)."""
    return f"slice is owned by another object: {name}"


def being_released(name: str) -> str:
    """E3: the slot's Slice is terminating (or our delete of it is in flight)."""
    return f"slice {name} is being released"


def wrong_shape(name: str, have: tuple[str, str], want: tuple[str, str]) -> str:
    """E3: the slot's Slice has another type or topology than the pods select."""
    return (
        f"slice {name} is {have[0]} {have[1]}, want {want[0]} {want[1]}; it is replaced once "
        "no pod holds it"
    )


def waiting_for_partitions(name: str) -> str:
    """E3: no state and no partitions (also a Slice not created yet, and a ready one whose
    partitions are gone: either way it waits for capacity, E4)."""
    return f"slice {name} is waiting for partition assignment"


def partitions_without_state(name: str) -> str:
    """E3: partitions and no state yet."""
    return f"slice {name} has partitions assigned and no state yet"


def not_ready(name: str, state: str, status: str, message: str) -> str:
    """E3: a state that is not a ready one, or a ready one whose readiness is Unknown."""
    detail = f": {message}" if message else ""
    if status == "Unknown":
        return f"slice {name} is {state}, but its readiness is unknown{detail}"
    return f"slice {name} is {state}{detail}"


# -- E5, E6: recycles ---------------------------------------------------------------------------

RECYCLED = "it is released and provisioned again once no pod holds it"


def ready_timeout(reason: str, waited: timedelta, timeout: timedelta) -> str:
    """E5: ``<E3 reason> for <waited>, longer than the <timeout> ready timeout; ...``, with
    both as Go prints durations and the wait rounded up to whole seconds (``11m3s``), so that
    it always reads longer than the timeout it exceeded."""
    whole = timedelta(seconds=math.ceil(waited.total_seconds()))
    return (
        f"{reason} for {format_go_duration(whole)}, longer than the "
        f"{format_go_duration(timeout)} ready timeout; {RECYCLED}"
    )


def hosts_unavailable(name: str, state: str, problems: Iterable[str]) -> str:
    """E6: a ready Slice with a host its pods cannot use (F)."""
    return f"slice {name} is {state}, but {', '.join(problems)}; {RECYCLED}"


def hosts_not_visible(name: str, state: str, found: int, need: int) -> str:
    """E6: a ready Slice whose hosts are not all labelled yet (pods wait, no event)."""
    return f"slice {name} is {state}, but only {found} of its {need} hosts are visible yet"


#: GKE's states of a Slice on its usual way to ready (the simulator's too).
STATES_ON_THE_WAY = ("SliceNotCreated", "ACTIVATING")
_ON_ITS_WAY = re.compile(
    r"slice \S+ (?:is waiting for partition assignment"
    r"|has partitions assigned and no state yet"
    rf"|is (?:{'|'.join(STATES_ON_THE_WAY)})(?:: .*)?"
    r"|is \S+, but only \d+ of its \d+ hosts are visible yet)",
    re.DOTALL,
)


def on_its_way(reason: str) -> bool:
    """Whether an E3/E6 hold reason only tells that a new Slice is on its usual way to ready:
    waiting for partitions, partitions and no state yet, an activating state (with GKE's
    message), or hosts not all visible yet. Not a readiness Unknown, a failure, a release, a
    conflict or a wrong shape. Between two such reasons a user reads no difference, so the
    Instance's record is not worded anew for each (E7)."""
    return _ON_ITS_WAY.fullmatch(reason) is not None


# -- G: release ---------------------------------------------------------------------------------


def release_deferred(name: str, holders: Iterable[str]) -> str:
    """G2: the SliceReleaseDeferred event on the InferenceReplica."""
    return (
        f"TPU slice {name} is kept: pods of other workloads hold chips on its hosts "
        f"({', '.join(holders)}); it is released once they are gone"
    )


def still_held(name: str, holders: Iterable[str]) -> str:
    """G5's ``<err>`` for a Slice other workloads keep past the teardown deadline."""
    return (
        f"TPU slice {name} is kept: pods of other workloads hold chips on its hosts "
        f"({', '.join(holders)})"
    )


def still_in_use(name: str, pods: Iterable[str]) -> str:
    """What a teardown waits for before the deadline: the replica's own pods still on the
    Slice (in their grace period); past the deadline the Slice goes anyway."""
    return f"TPU slice {name} is still used by pods {', '.join(pods)}"


def still_releasing(name: str) -> str:
    """G5's ``<err>`` for a Slice whose delete was accepted but that is not gone yet (GKE
    holds it behind its finalizer while it releases the partition)."""
    return f"TPU slice {name} is still being released"


def release_failed(name: str, error: str) -> str:
    """G5's ``<err>`` for a Slice whose delete the API refused."""
    return f"deleting TPU slice {name} failed: {error}"


def teardown_failed(errors: Iterable[str], uid: str) -> str:
    """G5: the TeardownDeadlineExceeded text after ``teardown deadline exceeded; ``, with the
    errors joined by newlines, as joined errors are."""
    return (
        f"releasing owned TPU slices failed: {chr(10).join(errors)}; delete the slices labeled "
        f"ome.io/slice-owner-uid={uid} by hand"
    )


def orphan_released(name: str, uid: str, owner: str) -> str:
    """G6: the log line of an orphan released: ``released orphaned TPU slice <n>: no
    InferenceReplica has its owner UID <uid>[ (its owner was <namespace>/<name>)]``."""
    was = f" (its owner was {owner})" if owner else ""
    return f"released orphaned TPU slice {name}: no InferenceReplica has its owner UID {uid}{was}"


def orphan_in_use(name: str, uid: str, pods: Iterable[str]) -> str:
    """G6: the log line of an orphan kept while pods confined to it still run there."""
    return (
        f"orphaned TPU slice {name} (no InferenceReplica has its owner UID {uid}) is kept while "
        f"pods {', '.join(pods)} run on it; it is released once they are gone"
    )


# -- H: loss ------------------------------------------------------------------------------------

WAS_DELETED = "was deleted"
LOST_PARTITIONS = "lost its partitions"


def moved_off(nodes: list[str]) -> str:
    """H3: ``moved off node <n>`` or ``moved off nodes <a>, <b>``."""
    return (
        f"moved off node {nodes[0]}" if len(nodes) == 1 else f"moved off nodes {', '.join(nodes)}"
    )


def lost(name: str, why: str, pods: Iterable[str]) -> str:
    """H4: the SliceLost Warning."""
    return (
        f"TPU slice {name} {why} while pods {', '.join(pods)} ran on it; they are deleted so "
        "that their Instance is rebuilt"
    )

"""Slots and Slice names (D1, D2), and the names of the labels and annotation the
controller writes on its Slices (D3, D4).

Pure: no I/O, no client and no provider types. Building and parsing the Slice object itself is
the provider's (``ome.provider.gke``).
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass

# The labels and annotation the controller writes; only OWNER_UID_LABEL makes a Slice ours (D4).
OWNER_UID_LABEL = "ome.io/slice-owner-uid"
OWNER_ANNOTATION = "ome.io/slice-owner"
OWNER_KIND = "InferenceReplica"

#: GKE's webhook admits Slice names of at most 49 characters.
MAX_NAME = 49
_LABEL_VALUE_MAX = 63

_HASH = re.compile(r"[0-9a-f]{8}")
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_OBJECT_NAME = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")
_INDEX = re.compile(r"0|[1-9][0-9]*")
_SUFFIX = re.compile(r"-(0|[1-9][0-9]*)-(0|[1-9][0-9]*)-([0-9a-f]{8})")


# -- D1, D2: slots and names -------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Slot:
    """Where a Slice belongs: an Instance index and a pod ordinal (D1)."""

    instance: int
    ordinal: int


def slot_for(instance_index: int, pod_ordinal: int, multi_pod: bool) -> Slot:
    """D1: the pods of a multi-pod Instance share slot (i, 0); a single-pod Instance uses the
    pod's ordinal, so a surge pod (ordinal 1 - active) gets its own Slice."""
    return Slot(instance_index, 0 if multi_pod else pod_ordinal)


@functools.lru_cache(maxsize=16384)
def owner_hash(namespace: str, name: str, uid: str) -> str:
    """D2: the first 8 lowercase hex characters of SHA-256 of ``<namespace>/<name>/<uid>``.
    Remembered for the most recent replicas: every routing of a Slice event and every pass
    asks it again for the same replica (``lru_cache`` is thread-safe)."""
    return hashlib.sha256(f"{namespace}/{name}/{uid}".encode()).hexdigest()[:8]


@functools.lru_cache(maxsize=16384)  # pure, and asked again on every pass
def slice_name(replica_name: str, slot: Slot, hash8: str) -> str:
    """D2: ``<base>-<instance>-<ordinal>-<hash>``, at most 49 characters, a DNS-1123 label.

    ``base`` is the replica name with ``.`` as ``-``, cut to fit, trailing ``-`` removed. The
    suffix parses back from the right, so distinct slots or hashes never share a name.
    ValueError for what the API server never produces: a replica name that is not an object
    name (DNS-1123 subdomain), a negative slot, a hash that is not 8 lowercase hex characters,
    or indices so long (over 18 digits together) that no character of the name is left.
    """
    if len(replica_name) > 253 or not _OBJECT_NAME.fullmatch(replica_name):
        raise ValueError(f"replica name {replica_name!r} is not a DNS-1123 subdomain")
    if slot.instance < 0 or slot.ordinal < 0:
        raise ValueError(f"slot {slot} has a negative index")
    if not _HASH.fullmatch(hash8):
        raise ValueError(f"hash {hash8!r} is not 8 lowercase hex characters")
    suffix = f"-{slot.instance}-{slot.ordinal}-{hash8}"
    room = MAX_NAME - len(suffix)
    if room < 1:
        raise ValueError(f"slot {slot} leaves no room for a name")
    return replica_name.replace(".", "-")[:room].rstrip("-") + suffix


def parse_index(text: object) -> int | None:
    """A slot index as D3 writes it in a label: a canonical non-negative integer, else None."""
    return int(text) if isinstance(text, str) and _INDEX.fullmatch(text) else None


def owner_label_value(replica_name: str) -> str:
    """D3: the owner name label's value, the replica name cut to a label value (63
    characters, trailing ``-`` and ``.`` removed)."""
    return replica_name[:_LABEL_VALUE_MAX].rstrip("-.")


@functools.lru_cache(maxsize=16384)  # pure, and asked again for every event routed
def slot_of_name(slice_name_: str, replica_name: str, hash8: str) -> Slot | None:
    """The slot whose Slice of this replica has this name (D2 read backwards), or None when
    no slot of this replica is given the name: how a pod's slice selector or a Slice found at
    one of our names is told apart from anyone else's."""
    i = len(slice_name_) - 1
    for _ in range(3):  # the suffix is the last three dash-separated parts
        i = slice_name_.rfind("-", 0, i)
        if i < 0:
            return None
    match = _SUFFIX.fullmatch(slice_name_[i:])
    if match is None or match.group(3) != hash8:
        return None
    slot = Slot(int(match.group(1)), int(match.group(2)))
    try:
        return slot if slice_name(replica_name, slot, hash8) == slice_name_ else None
    except ValueError:
        return None

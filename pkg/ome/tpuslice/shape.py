"""Topologies and hosts (behaviour.md B1, B2): parse a topology, count its chips and hosts.

Pure: no I/O and no provider types. Every message here is the one users read.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_DIMENSION = re.compile(r"[1-9][0-9]*")


class ShapeError(ValueError):
    """A topology or host count that cannot be provisioned; ``str()`` is the user message."""


@dataclass(frozen=True)
class Topology:
    """A parsed topology such as ``2x2x1``: its dimensions, chip count and canonical text."""

    dims: tuple[int, ...]

    @property
    def chips(self) -> int:
        return math.prod(self.dims)

    def __str__(self) -> str:
        return "x".join(str(d) for d in self.dims)


def parse_topology(text: str) -> Topology:
    """B1: two or three dimensions split on lowercase ``x``, each a positive integer without
    leading zeros."""
    parts = text.split("x")
    if len(parts) not in (2, 3):
        raise ShapeError(f"topology \"{text}\": want 2 or 3 dimensions separated by 'x'")
    for part in parts:
        if not _DIMENSION.fullmatch(part):
            raise ShapeError(
                f'topology "{text}": dimension "{part}" is not a positive integer without '
                "leading zeros"
            )
    return Topology(tuple(int(p) for p in parts))


def hosts(topology: Topology, chips_per_host: int) -> int:
    """B2: hosts = chips / chipsPerHost, which must divide exactly."""
    if chips_per_host <= 0 or topology.chips % chips_per_host:
        raise ShapeError(
            f"topology {topology} is {topology.chips} chips, not a whole number of "
            f"{chips_per_host}-chip hosts"
        )
    return topology.chips // chips_per_host

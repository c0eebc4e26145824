"""Topologies and hosts (B1, B2): parse a topology, count its chips and hosts.

Pure: no I/O and no provider types. Every message here is the one users read.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

_DIMENSION = re.compile(r"[1-9][0-9]*")

#: The largest chip count a topology may have: Go's upstream counts chips in an int64.
MAX_CHIPS = 2**63 - 1
#: A dimension of more digits exceeds ``MAX_CHIPS`` on its own (dimensions have no leading
#: zeros), so it is refused before ``int()``, which also caps the digits it converts.
_MAX_DIGITS = len(str(MAX_CHIPS))


def quote(value: str) -> str:
    """``"<v>"`` of every message of the pure core: the value in double quotes with JSON
    escaping, so that a quote, a backslash or a control character in what a user configured
    cannot make the message ambiguous."""
    return json.dumps(value, ensure_ascii=False)


class ShapeError(ValueError):
    """A topology or host count that cannot be provisioned; ``str()`` is the user message."""


@dataclass(frozen=True)
class Topology:
    """A parsed topology such as ``2x2x1``: its dimensions, chip count and canonical text.

    The text is made once, with the value: every release and gate pass compares each Slice's
    topology label with it (joining the dimensions anew was 2% of the manager's CPU in a
    burst)."""

    dims: tuple[int, ...]
    text: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", "x".join(str(d) for d in self.dims))

    @property
    def chips(self) -> int:
        return math.prod(self.dims)

    def __str__(self) -> str:
        return self.text


def parse_topology(text: str) -> Topology:
    """B1: two or three dimensions split on lowercase ``x``, each a positive integer without
    leading zeros, whose product (the chip count) fits a signed 64-bit integer as in Go's
    upstream: ``topology "<s>": chip count overflows a 64-bit integer``, checked after the
    per-dimension checks. A single dimension above ``MAX_CHIPS`` is the same error."""
    parts = text.split("x")
    if len(parts) not in (2, 3):
        raise ShapeError(f"topology {quote(text)}: want 2 or 3 dimensions separated by 'x'")
    for part in parts:
        if not _DIMENSION.fullmatch(part):
            raise ShapeError(
                f"topology {quote(text)}: dimension {quote(part)} is not a positive integer "
                "without leading zeros"
            )
    if any(len(part) > _MAX_DIGITS for part in parts) or (
        math.prod(int(part) for part in parts) > MAX_CHIPS
    ):
        raise ShapeError(f"topology {quote(text)}: chip count overflows a 64-bit integer")
    return Topology(tuple(int(p) for p in parts))


def hosts(topology: Topology, chips_per_host: int) -> int:
    """B2: hosts = chips / chipsPerHost, which must divide exactly."""
    if chips_per_host <= 0 or topology.chips % chips_per_host:
        raise ShapeError(
            f"topology {topology} is {topology.chips} chips, not a whole number of "
            f"{chips_per_host}-chip hosts"
        )
    return topology.chips // chips_per_host

"""Laying rows out as kubectl does: columns padded to their widest cell and three spaces
apart, headers in capitals, and ages in kubectl's short form.

Written by hand: the layout is kubectl's ``printers.TablePrinter`` (a tabwriter with padding
3) and the age is apimachinery's ``duration.HumanDuration``, which no Python library
reproduces; both are a few lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

#: What a missing value prints as, as kubectl prints it in custom columns.
NONE = "<none>"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns padded to their widest cell, three spaces apart, no trailing blanks."""
    lines = [list(header), *(list(r) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for line in lines:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(line)]
        out.append("   ".join(cells).rstrip())
    return "\n".join(out) + "\n"


def human_duration(d: timedelta) -> str:
    """apimachinery's ``HumanDuration``: ``45s``, ``3m20s``, ``15m``, ``2h10m``, ``20h``,
    ``3d4h``, ``30d``, ``1y20d``; up to a second in the future (clock skew) reads as ``0s``,
    further as ``<invalid>``."""
    seconds = int(d.total_seconds())
    if seconds < -1:
        return "<invalid>"
    seconds = max(seconds, 0)
    if seconds < 60 * 2:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        s = seconds % 60
        return f"{minutes}m{s}s" if s else f"{minutes}m"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = seconds // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h{m}m" if m else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d{h}h" if h else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y{dy}d" if dy else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(since: datetime | None, now: datetime) -> str:
    """How long ago ``since`` was, or ``<none>``."""
    return human_duration(now - since) if since is not None else NONE


def cut(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns, ending in ``...`` when anything was cut (ASCII, so
    that any terminal's encoding can print it)."""
    return text if len(text) <= width else text[: width - 3] + "..."

"""The one way our controllers set status conditions: a condition's time of transition is
kept while its status stays, and is now when it changes or first appears. Pure: the time is
given, nothing is read or written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from ome.kube import JSON, rfc3339


@dataclass(frozen=True)
class WantedCondition:
    """A condition as a controller decides it: its ``type``, whether it holds (``ok``: the
    status ``"True"``, else ``"False"``), its reason and its message."""

    type: str
    ok: bool
    reason: str
    message: str


def set_conditions(
    previous: Sequence[JSON],
    wanted: Iterable[WantedCondition],
    generation: int,
    now: datetime,
    *,
    replace_all: bool = False,
) -> list[JSON]:
    """The status's ``conditions`` after ``wanted`` are set over ``previous``, sorted by
    type, each observed at ``generation``: a condition whose status is unchanged keeps its
    ``lastTransitionTime``; any other's is ``now``. Conditions of other types stay as they
    were, unless ``replace_all`` (the controller owns every condition of the object, and one
    it no longer sets, such as a removed component's, goes)."""
    before: dict[str, JSON] = {}
    for kept in previous:
        before.setdefault(str(kept.get("type")), kept)
    decided = {c.type: c for c in wanted}
    out = [] if replace_all else [dict(o) for o in previous if o.get("type") not in decided]
    for c in decided.values():
        status = "True" if c.ok else "False"
        old = before.get(c.type)
        since = old.get("lastTransitionTime") if old and old.get("status") == status else None
        out.append(
            {
                "type": c.type,
                "status": status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": since or rfc3339(now),
                "observedGeneration": generation,
            }
        )
    return sorted(out, key=lambda o: str(o.get("type")))

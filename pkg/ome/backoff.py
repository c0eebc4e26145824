"""The one capped exponential backoff: how long to wait after a run of failures.

Every place that spaces its retries uses :func:`capped_exponential`: an informer's failed
list-and-watch cycles, the workqueue's per-item retries, the REST client's transient
failures, a Slice release that did not go, and an Instance rebuilt too often. Each counts
its failures its own way (a reflector that starts over after quiet, a workqueue's per-item
count, a ledger kept across passes, the rebuilds within a window) and draws its own random
numbers; the formula is here, once.

Written by hand rather than taken from tenacity: tenacity's ``wait_exponential`` and
``wait_random_exponential`` take a ``RetryCallState``, which only one of the five callers
has (the client's retries, which hand theirs in through ``RetryPolicy.wait``), and the pure
core does no I/O and holds no state, so a function of plain numbers is what all of them can
call. Pure: no I/O, no clock, no random source of its own.
"""

from __future__ import annotations

import math


def capped_exponential(
    failures: int, initial: float, cap: float, *, jitter: float = 0.0, draw: float = 0.0
) -> float:
    """The wait after the ``failures``-th failure in a row (1 for the first): ``initial``,
    doubled with each further failure, at most ``cap``; then lengthened by ``jitter * draw``
    of itself (``draw``, the caller's random number in [0, 1); ``jitter`` 1.0 is up to
    +100%), and still at most ``cap``. So a wait is never longer than ``cap``, and without
    jitter the waits are ``initial, 2*initial, 4*initial ... cap``.

    Raises ``ValueError`` for a count below 1, a negative ``initial``, ``cap`` or ``jitter``,
    or a ``draw`` outside [0, 1): each is a caller's bug, never a run-time condition.
    """
    if failures < 1:
        raise ValueError(f"failures must be at least 1, not {failures}")
    if initial < 0 or cap < 0 or jitter < 0:
        raise ValueError(
            f"initial ({initial}), cap ({cap}) and jitter ({jitter}) must not be negative"
        )
    if not 0.0 <= draw < 1.0:
        raise ValueError(f"draw must be in [0, 1), not {draw}")
    try:
        wait = math.ldexp(initial, failures - 1)
    except OverflowError:
        # So many failures that the doubling left the floats: the cap, as for any long run.
        return float(cap)
    wait = min(cap, wait)
    return float(min(cap, wait * (1.0 + jitter * draw)))

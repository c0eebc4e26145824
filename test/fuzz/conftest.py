"""The fuzz suite's Hypothesis profile: deterministic (``derandomize``, no example database),
a deadline per example that catches a hang or a quadratic blow-up, and example counts sized
so that the whole suite runs in well under 90 seconds on two cores.

The profile is registered here and applied per test (``@FUZZ``, or ``settings(FUZZ, ...)``),
never loaded globally, so the other suites' Hypothesis settings are left alone.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ome-fuzz",
    derandomize=True,
    database=None,
    deadline=timedelta(seconds=2),
    max_examples=150,
    print_blob=False,
    # Big inputs (deep nesting, long texts) are the point here, and slow to generate.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

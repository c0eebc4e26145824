"""The manager's garbage collector thresholds (``ome.entrypoints.manager.tune_gc``)."""

from __future__ import annotations

import gc

from ome.entrypoints.manager import GC_YOUNG_THRESHOLD, tune_gc


def test_the_manager_collects_young_objects_less_often_and_keeps_the_older_thresholds() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        tune_gc()
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 10, 10)
    finally:
        gc.set_threshold(*before)

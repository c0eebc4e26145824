"""The manager's CPU scheduling policy (``ome.entrypoints.manager.batch_scheduling`` and
``--cpu-scheduling``). The policy belongs to a thread and the threads it starts, so each
check runs in a thread of its own and leaves the test process's alone."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import pytest

from ome.entrypoints.manager import batch_scheduling, build_parser

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling only")


def _in_a_thread(work: Callable[[], Any]) -> Any:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(work()))
    thread.start()
    thread.join()
    return out[0]


def test_batch_scheduling_holds_for_the_thread_and_the_threads_it_starts() -> None:
    def work() -> tuple[str | None, int, int]:
        refused = batch_scheduling()
        child = _in_a_thread(lambda: os.sched_getscheduler(0))
        return refused, os.sched_getscheduler(0), child

    assert _in_a_thread(work) == (None, os.SCHED_BATCH, os.SCHED_BATCH)
    assert os.sched_getscheduler(0) == os.SCHED_OTHER, "the calling thread is left alone"


def test_a_refused_call_is_one_line_for_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    assert batch_scheduling() == "sched_setscheduler refused SCHED_BATCH: Operation not permitted"


def test_the_flag_defaults_to_batch_and_takes_normal() -> None:
    parser = build_parser()
    assert parser.parse_args([]).cpu_scheduling == "batch"
    assert parser.parse_args(["--cpu-scheduling", "normal"]).cpu_scheduling == "normal"
    with pytest.raises(SystemExit):
        parser.parse_args(["--cpu-scheduling", "fifo"])

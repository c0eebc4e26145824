"""``Controller.look_after``: a timer on a state that may be gone by then. The key is queued
for a pass only if the look, once due, says so; it may ask to look again later; a look that
raises is logged and asks for nothing; a controller without a look has no timers."""

from __future__ import annotations

import logging
import threading

import pytest
from prometheus_client import CollectorRegistry

from ome.runtime.controller import Controller, ControllerMetrics, Result
from test.helpers import eventually


class Looks:
    """A controller whose looks answer from ``answers`` (one per look, in order) and whose
    passes are counted by key."""

    def __init__(self, *answers: float | Exception | None) -> None:
        self.answers = list(answers)
        self.looked: list[str] = []
        self.passes: list[str] = []
        self.done = threading.Event()
        self.controller = Controller(
            "looks", self.reconcile, metrics=ControllerMetrics(CollectorRegistry()), look=self.look
        )

    def reconcile(self, key: str) -> Result | None:
        self.passes.append(key)
        return None

    def look(self, key: str) -> float | None:
        self.looked.append(key)
        answer = self.answers.pop(0)
        if not self.answers:
            self.done.set()
        if isinstance(answer, Exception):
            raise answer
        return answer


def run(looks: Looks, stopped: list[Controller]) -> None:
    stopped.append(looks.controller)
    looks.controller.start()
    assert looks.done.wait(5), "every look came"


def test_a_look_that_finds_a_pass_due_queues_the_key_once(stopped: list[Controller]) -> None:
    looks = Looks(0.0)
    looks.controller.look_after("ns/a", 0.2)
    looks.controller.look_after("ns/a", 0.05)  # the earlier of the two
    run(looks, stopped)
    eventually(lambda: looks.passes == ["ns/a"], timeout=5)
    assert looks.looked == ["ns/a"]


def test_a_look_that_finds_nothing_due_costs_no_pass(stopped: list[Controller]) -> None:
    looks = Looks(None)
    looks.controller.look_after("ns/a", 0.01)
    run(looks, stopped)
    assert looks.passes == [] and len(looks.controller.queue) == 0


def test_a_look_may_look_again_later(stopped: list[Controller]) -> None:
    looks = Looks(0.05, -1.0)
    looks.controller.look_after("ns/a", 0.01)
    run(looks, stopped)
    eventually(lambda: looks.passes == ["ns/a"], timeout=5)
    assert looks.looked == ["ns/a", "ns/a"]


def test_a_look_that_raises_is_logged_and_asks_for_nothing(
    stopped: list[Controller], caplog: pytest.LogCaptureFixture
) -> None:
    looks = Looks(RuntimeError("a bug"))
    with caplog.at_level(logging.ERROR, logger="ome.runtime.controller"):
        looks.controller.look_after("ns/a", 0.01)
        run(looks, stopped)
        eventually(lambda: "looks: look at ns/a failed" in caplog.text, timeout=5)
    assert looks.passes == []


def test_a_controller_without_a_look_has_no_timers() -> None:
    c = Controller("plain", lambda _key: None, metrics=ControllerMetrics(CollectorRegistry()))
    with pytest.raises(ValueError, match="controller plain has no look"):
        c.look_after("ns/a", 1.0)

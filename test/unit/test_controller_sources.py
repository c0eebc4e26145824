"""A controller's workers take keys only once every informer its passes read (its sources:
those it watches, those it names with ``reads``, and those another controller routes to it
with ``also``) has synced, as each controller-runtime controller waits for its own sources.
A controller whose caches are filled runs while another's still list; one stopped before
its sources sync drops its keys at once rather than waiting out the drain."""

from __future__ import annotations

import threading
import time

from prometheus_client import CollectorRegistry

from ome.kube import JSON
from ome.runtime.controller import Controller, ControllerMetrics, Result
from ome.runtime.informer import EventHandler
from test.helpers import eventually


class Listing:
    """An informer still listing until the test says it has synced; ``waited`` is set once
    a worker waits for it."""

    def __init__(self, synced: bool = False) -> None:
        self.handlers: list[EventHandler] = []
        self._synced = threading.Event()
        self.waited = threading.Event()
        if synced:
            self._synced.set()

    def add_handler(self, handler: EventHandler) -> None:
        self.handlers.append(handler)

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        self.waited.set()
        return self._synced.wait(timeout)

    def sync(self) -> None:
        self._synced.set()

    def add(self, name: str) -> None:
        obj: JSON = {"metadata": {"namespace": "ns", "name": name}}
        for handler in self.handlers:
            assert handler.on_add is not None
            handler.on_add(obj)


class Passes:
    """A controller whose passes are recorded by key."""

    def __init__(self, name: str) -> None:
        self.keys: list[str] = []
        self.controller = Controller(
            name, self.reconcile, workers=2, metrics=ControllerMetrics(CollectorRegistry())
        )

    def reconcile(self, key: str) -> Result | None:
        self.keys.append(key)
        return None


def test_no_pass_runs_until_a_source_it_only_reads_has_synced(
    stopped: list[Controller],
) -> None:
    watched, read = Listing(synced=True), Listing()
    p = Passes("reader")
    p.controller.watch(watched)  # type: ignore[arg-type]
    p.controller.reads(read)  # type: ignore[arg-type]
    watched.add("a")
    stopped.append(p.controller)
    p.controller.start()
    assert read.waited.wait(5), "a worker waits for the informer it reads"
    assert p.keys == []
    read.sync()
    eventually(lambda: p.keys == ["ns/a"], timeout=5)


def test_a_controller_whose_caches_are_filled_runs_while_another_still_lists(
    stopped: list[Controller],
) -> None:
    small, large = Listing(synced=True), Listing()
    quick, slow = Passes("quick"), Passes("slow")
    quick.controller.watch(small)  # type: ignore[arg-type]
    slow.controller.watch(small)  # type: ignore[arg-type]
    # The large informer's events are routed to both, once: both read it.
    quick.controller.watch(large, also=[slow.controller])  # type: ignore[arg-type]
    assert large in slow.controller.sources and large in quick.controller.sources
    quick.controller.reads(small)  # type: ignore[arg-type]  # named twice, kept once
    assert quick.controller.sources == [small, large]
    small.add("a")
    stopped.extend([quick.controller, slow.controller])
    quick.controller.start()
    slow.controller.start()
    assert large.waited.wait(5)
    large.sync()  # quick's sources are now filled; slow waits on another
    other = Listing()
    blocked = Passes("blocked")
    blocked.controller.watch(small)  # type: ignore[arg-type]
    blocked.controller.reads(other)  # type: ignore[arg-type]
    stopped.append(blocked.controller)
    blocked.controller.start()
    eventually(lambda: quick.keys == ["ns/a"] and slow.keys == ["ns/a"], timeout=5)
    assert other.waited.wait(5)
    assert blocked.keys == []


def test_a_controller_stopped_before_its_sources_sync_drops_its_keys_at_once() -> None:
    never = Listing()
    p = Passes("never")
    p.controller.watch(never)  # type: ignore[arg-type]
    p.controller.enqueue("ns/a")
    p.controller.enqueue("ns/b")
    p.controller.start()
    assert never.waited.wait(5)
    began = time.monotonic()
    assert p.controller.stop(timeout=30, drain=True)  # no pass could run: nothing to drain
    assert time.monotonic() - began < 5, "not the drain's 30 s"
    assert p.keys == [] and len(p.controller.queue) == 0
    never.sync()  # too late: the workers are gone
    assert p.keys == []

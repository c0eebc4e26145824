"""``kubectl ome slices -w`` on the embedded cluster, with the simulated GKE provider and a
manager: it prints the view, then prints it again as the controller acts (a Slice created,
then ACTIVE, its pod running), until Ctrl-C, which ends it with status 0 and no traceback."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import IO

import pytest
import yaml

from test.integration.test_kubectl_ome import NS, PLUGIN, apply_sample
from test.integration.test_slices import Env, env

__all__ = ["env"]

pytestmark = pytest.mark.kubectl

#: How long the view may take to show what the controller did.
TIMEOUT = 60.0


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Watched:
    """A running ``kubectl-ome ... -w``: its standard output and error read line by line on
    threads, so that a test waits for a line with a timeout instead of sleeping."""

    def __init__(self, env: Env, *args: str) -> None:
        self.proc = subprocess.Popen(
            [str(PLUGIN), "--kubeconfig", str(env.cluster.kubeconfig), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "HOME": str(env.cluster.home)},
            # As a background job of a shell without job control starts it (CI, `make test &`):
            # SIGINT ignored. Ctrl-C must still end the watch, as it ends kubectl's.
            preexec_fn=_ignore_sigint,  # noqa: PLW1509 - one C call between fork and exec
        )
        self.out: queue.Queue[str | None] = queue.Queue()
        self.err: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.errors: list[str] = []
        assert self.proc.stdout is not None and self.proc.stderr is not None
        for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._read, args=(stream, lines), daemon=True).start()

    @staticmethod
    def _read(stream: IO[str], lines: queue.Queue[str | None]) -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    def until(
        self, wanted: Callable[[str], bool], timeout: float = TIMEOUT, stderr: bool = False
    ) -> str:
        """The first line not yet read (of standard output, or error) that ``wanted``
        accepts; fails at the timeout or when the output ends."""
        lines, seen = (self.err, self.errors) if stderr else (self.out, self.seen)
        while True:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(
                    f"no such line in {timeout}s; the output so far:\n" + "\n".join(seen)
                ) from None
            if line is None:
                raise AssertionError("the output ended:\n" + "\n".join(seen))
            seen.append(line)
            if wanted(line):
                return line

    def interrupt(self) -> tuple[int, str]:
        """Ctrl-C: the exit status and what it wrote on standard error since last read (the
        rest of its standard output joins ``seen``)."""
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=30)
        while (line := self.out.get(timeout=30)) is not None:
            self.seen.append(line)
        rest = []
        while (line := self.err.get(timeout=30)) is not None:
            rest.append(line)
        return code, "\n".join(rest)


@pytest.fixture
def watched(env: Env) -> Iterator[Callable[..., Watched]]:
    started: list[Watched] = []

    def start(*args: str) -> Watched:
        started.append(Watched(env, *args))
        return started[-1]

    yield start
    for w in started:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.communicate(timeout=30)


def cells(line: str) -> list[str]:
    return line.split()


def test_slices_watch_redraws_as_the_controller_acts(
    env: Env, watched: Callable[..., Watched]
) -> None:
    w = watched("slices", "-n", NS, "-w")
    # Nothing yet: the one line on standard error, and the watch goes on.
    empty = "No TPU slice slots found in namespace qwen3-tpu."
    w.until(lambda line: line == empty, stderr=True)
    apply_sample(env, "qwen3-tpu-isvc.yaml")
    header = w.until(lambda line: line.startswith("SERVICE"))
    assert cells(header)[:5] == ["SERVICE", "COMPONENT", "INSTANCE", "ORDINAL", "SLICE"]
    # A row per redraw: first the slot without a ready Slice, at last its pod running on it.
    first = cells(w.until(lambda line: line.startswith("qwen3-tpu ")))
    assert first[:4] == ["qwen3-tpu", "engine", "0", "0"]
    ready = cells(w.until(lambda line: "ACTIVE" in line and "(Running)" in line))
    assert ready[:4] == first[:4] and ready[9] == "1/1"
    assert ready[11] == "qwen3-tpu-engine-0-default-0(Running)"
    assert sum(1 for line in w.seen if line.startswith("SERVICE")) >= 2, w.seen
    # A change to the Slice itself redraws too: its deletion leaves the slot without it.
    name = ready[4]
    env.kubectl("delete", "slices.accelerator.gke.io", name, "--wait=false")
    w.until(lambda line: line.startswith("qwen3-tpu ") and "ACTIVE" not in line)
    code, err = w.interrupt()
    assert code == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


def test_slices_watch_as_yaml_prints_one_list_per_change(
    env: Env, watched: Callable[..., Watched]
) -> None:
    w = watched("slices", "-n", NS, "-w", "-o", "yaml")
    w.until(lambda line: line == "items: []")
    apply_sample(env, "qwen3-tpu-isvc.yaml")
    w.until(lambda line: line.strip() == "state: ACTIVE")
    w.until(lambda line: line.strip() == "phase: Running")
    code, err = w.interrupt()
    assert code == 0 and "Traceback" not in err, err
    documents = list(yaml.safe_load_all("\n".join(w.seen)))
    assert len(documents) >= 2
    assert all(d["apiVersion"] == "v1" and d["kind"] == "List" for d in documents)
    assert documents[0]["items"] == []
    last = documents[-1]["items"]
    assert [(r["inferenceService"], r["state"]) for r in last] == [("qwen3-tpu", "ACTIVE")]

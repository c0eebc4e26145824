"""Leader election on a Lease against the embedded API server: one leader at a time, prompt
hand-over on a graceful stop, step-down within the renew deadline when the leader cannot reach
the server (errors or hung calls), take-over only after expiry, 409s as "not acquired"."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client, config

from ome.runtime.leader import JITTER_FACTOR, LeaderElectionConfig, LeaderElector
from ome.runtime.rest import LEASES, Rest
from ome_sim.apiserver.faults import Fault
from test.cluster import Cluster
from test.helpers import eventually

NS, NAME = "default", "ome-controller"
LEASE, RENEW, RETRY = 1.5, 1.0, 0.2
MICROTIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class Tracker:
    """How many on_started_leading callbacks run at once, across every candidate."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.current = 0
        self.peak = 0
        self.log: list[tuple[str, str, float]] = []  # (who, "enter" | "exit", wall time)

    def enter(self, who: str) -> None:
        with self.lock:
            self.current += 1
            self.peak = max(self.peak, self.current)
            self.log.append((who, "enter", time.time()))

    def exit(self, who: str) -> None:
        with self.lock:
            self.current -= 1
            self.log.append((who, "exit", time.time()))

    def leading(self) -> int:
        with self.lock:
            return self.current

    def times(self, who: str, what: str) -> list[float]:
        with self.lock:
            return [t for w, k, t in self.log if w == who and k == what]


class Candidate:
    """One elector with its own client (its own User-Agent, so faults can target it), its own
    thread and stop event, and callbacks that report to the shared tracker."""

    def __init__(
        self,
        cluster: Cluster,
        tracker: Tracker,
        identity: str,
        work: Callable[[threading.Event], None] | None = None,
        **overrides: object,
    ) -> None:
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=cfg)
        self.api = client.ApiClient(cfg)
        self.api.user_agent = self.agent = f"leader-test/{identity}"
        self.identity = identity
        self.tracker = tracker
        self.work = work
        self.events: list[str] = []
        self.new_leaders: list[str] = []
        self.stop = threading.Event()
        settings: dict[str, object] = {
            "lease_duration": LEASE,
            "renew_deadline": RENEW,
            "retry_period": RETRY,
            **overrides,
        }
        self.config = LeaderElectionConfig(NS, NAME, identity, **settings)  # type: ignore[arg-type]
        self.elector = LeaderElector(
            Rest(self.api),
            self.config,
            on_started_leading=self._lead,
            on_stopped_leading=lambda: self.events.append("stopped"),
            on_new_leader=self.new_leaders.append,
        )
        self.thread = threading.Thread(target=self.elector.run, args=(self.stop,), daemon=True)

    def start(self) -> Candidate:
        self.thread.start()
        return self

    def _lead(self, leading: threading.Event) -> None:
        self.tracker.enter(self.identity)
        self.events.append("started")
        try:
            if self.work is not None:
                self.work(leading)
            else:
                leading.wait()
                self.events.append("told to stop")
        finally:
            self.tracker.exit(self.identity)

    def leading(self) -> bool:
        return bool(self.tracker.times(self.identity, "enter")) and self.elector.is_leader()


@pytest.fixture
def tracker() -> Tracker:
    return Tracker()


@pytest.fixture
def candidates(cluster: Cluster, tracker: Tracker) -> Iterator[Callable[..., Candidate]]:
    made: list[Candidate] = []

    def make(identity: str, **kwargs: object) -> Candidate:
        made.append(Candidate(cluster, tracker, identity, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    yield make
    cluster.server.faults.clear()
    for c in made:
        c.stop.set()
    for c in made:
        if c.thread.ident is not None:
            c.thread.join(10)
            assert not c.thread.is_alive(), f"{c.identity}: run did not return after stop"
        c.api.close()


def read_lease(cluster: Cluster) -> dict[str, Any]:
    return Rest(cluster.api).get(LEASES, NAME, NS)


def wall(microtime: str) -> float:
    return datetime.strptime(microtime, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def renewed(cluster: Cluster, times: int) -> Callable[[], bool]:
    """A check that holds once the Lease's renewTime has changed ``times`` times."""
    seen: set[str] = set()

    def lease_renewed_enough() -> bool:
        seen.add(read_lease(cluster)["spec"]["renewTime"])
        return len(seen) > times

    return lease_renewed_enough


# -- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"lease_duration": 10.0, "renew_deadline": 10.0}, "lease_duration .* renew_deadline"),
        ({"lease_duration": 5.0, "renew_deadline": 8.0}, "lease_duration .* renew_deadline"),
        ({"renew_deadline": 2.4, "retry_period": 2.0}, r"renew_deadline .* retry_period \* 1.2"),
        ({"retry_period": 0.0}, "retry_period .* positive"),
        ({"identity": ""}, "identity must not be empty"),
    ],
)
def test_invalid_timings_are_refused(settings: dict[str, Any], message: str) -> None:
    args = {"namespace": NS, "name": NAME, "identity": "a", **settings}
    with pytest.raises(ValueError, match=message):
        LeaderElectionConfig(**args)


def test_valid_timings_round_the_written_lease_duration_up() -> None:
    assert LeaderElectionConfig(NS, NAME, "a").lease_duration_seconds == 15
    assert LeaderElectionConfig(NS, NAME, "a", 1.5, 1.0, 0.2).lease_duration_seconds == 2
    assert JITTER_FACTOR == 1.2


# -- one candidate -------------------------------------------------------------------------


def test_a_lone_candidate_creates_renews_and_releases_the_lease(
    cluster: Cluster, candidates: Callable[..., Candidate]
) -> None:
    a = candidates("a").start()
    eventually(a.leading)
    assert a.elector.leader == "a"
    spec = read_lease(cluster)["spec"]
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 2
    assert spec["leaseTransitions"] == 0
    assert MICROTIME.match(spec["acquireTime"]) and MICROTIME.match(spec["renewTime"])

    eventually(renewed(cluster, 3))
    later = read_lease(cluster)["spec"]
    assert later["acquireTime"] == spec["acquireTime"]
    assert wall(later["renewTime"]) > wall(spec["renewTime"])
    eventually(lambda: a.new_leaders == ["a"])

    a.stop.set()
    a.thread.join(5)
    assert not a.thread.is_alive()
    assert a.events == ["started", "told to stop", "stopped"]
    assert not a.elector.is_leader()
    released = read_lease(cluster)["spec"]
    assert not released.get("holderIdentity")
    assert released["leaseDurationSeconds"] == 1
    assert released["leaseTransitions"] == 0
    assert wall(released["renewTime"]) >= wall(later["renewTime"])


def test_without_release_on_cancel_the_lease_keeps_its_holder(
    cluster: Cluster, candidates: Callable[..., Candidate]
) -> None:
    a = candidates("a", release_on_cancel=False).start()
    eventually(a.leading)
    a.stop.set()
    a.thread.join(5)
    assert a.events == ["started", "told to stop", "stopped"]
    spec = read_lease(cluster)["spec"]
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 2


def test_stopping_a_candidate_that_never_led_returns_without_callbacks(
    cluster: Cluster, candidates: Callable[..., Candidate]
) -> None:
    Rest(cluster.api).create(
        LEASES,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"holderIdentity": "someone", "leaseDurationSeconds": 3600},
        },
        NS,
    )
    a = candidates("a").start()
    eventually(lambda: a.elector.leader == "someone")
    eventually(lambda: a.new_leaders == ["someone"])
    a.stop.set()
    a.thread.join(5)
    assert not a.thread.is_alive()
    assert a.events == []
    assert read_lease(cluster)["spec"]["holderIdentity"] == "someone"


def test_work_that_fails_gives_the_lease_up(
    cluster: Cluster, candidates: Callable[..., Candidate]
) -> None:
    def broken(_: threading.Event) -> None:
        raise RuntimeError("the controller crashed")

    a = candidates("a", work=broken).start()
    a.thread.join(5)
    assert not a.thread.is_alive(), "run returns once the work has ended"
    assert a.events == ["started", "stopped"]
    assert not read_lease(cluster)["spec"].get("holderIdentity")


# -- two candidates ------------------------------------------------------------------------


def test_one_leader_at_a_time_and_a_prompt_hand_over_on_stop(
    cluster: Cluster, candidates: Callable[..., Candidate], tracker: Tracker
) -> None:
    a, b = candidates("a").start(), candidates("b").start()
    eventually(lambda: tracker.leading() == 1)
    leader, follower = (a, b) if a.elector.is_leader() else (b, a)
    eventually(lambda: follower.elector.leader == leader.identity)

    eventually(renewed(cluster, 8))  # a few seconds of renewals and follower retries
    assert tracker.peak == 1
    assert not follower.elector.is_leader()
    assert follower.events == []
    eventually(lambda: follower.new_leaders == [leader.identity])

    stopped_at = time.time()
    leader.stop.set()
    eventually(follower.leading, timeout=5)
    took_over_in = tracker.times(follower.identity, "enter")[0] - stopped_at
    # Released: the follower takes over on its next try, not after the lease expires.
    assert took_over_in < RETRY * (1 + JITTER_FACTOR) + 0.5
    leader.thread.join(5)
    assert leader.events == ["started", "told to stop", "stopped"]
    assert tracker.peak == 1
    assert tracker.times(leader.identity, "exit")[0] <= tracker.times(follower.identity, "enter")[0]
    spec = read_lease(cluster)["spec"]
    assert spec["holderIdentity"] == follower.identity
    assert spec["leaseTransitions"] == 1


@pytest.mark.parametrize("failure", ["errors", "hung calls"])
def test_a_leader_cut_off_from_the_server_steps_down_before_the_other_takes_over(
    cluster: Cluster, candidates: Callable[..., Candidate], tracker: Tracker, failure: str
) -> None:
    a = candidates("a").start()
    eventually(a.leading)
    b = candidates("b").start()
    eventually(lambda: b.elector.leader == "a")
    assert tracker.peak == 1

    if failure == "errors":
        fault = Fault(user_agent=a.agent, code=503, times=None)
    else:  # answers that never come in time: only the deadline, not the call, ends them
        fault = Fault(user_agent=a.agent, latency=10.0, times=None)
    cluster.server.faults.add(fault)

    a.thread.join(RENEW + 2)
    assert not a.thread.is_alive(), "run returns once leadership is lost"
    last = read_lease(cluster)["spec"]  # a's last renewal: it can write no more
    assert last["holderIdentity"] == "a", "nobody takes over before the lease expires"
    last_renewal = wall(last["renewTime"])
    assert a.events == ["started", "told to stop", "stopped"]
    assert not a.elector.is_leader()
    a_stopped = tracker.times("a", "exit")[0]
    assert a_stopped - last_renewal < RENEW + 0.25

    eventually(b.leading, timeout=10)
    b_started = tracker.times("b", "enter")[0]
    assert a_stopped < b_started
    assert tracker.peak == 1
    # b judges expiry by its own clock from when it saw a's last renewal (at most one jittered
    # retry after it), then notices on its next try: never sooner than the lease duration.
    lease_seconds = a.config.lease_duration_seconds
    assert b_started - last_renewal >= lease_seconds - 0.05
    assert b_started - last_renewal < lease_seconds + 2 * RETRY * (1 + JITTER_FACTOR) + 0.5
    spec = read_lease(cluster)["spec"]
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    eventually(lambda: b.new_leaders[-1:] == ["b"])


def test_a_write_lost_to_a_concurrent_writer_is_not_acquired(
    cluster: Cluster,
    candidates: Callable[..., Candidate],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="ome.runtime.leader")
    rest = Rest(cluster.api)
    rest.create(
        LEASES,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "leaseTransitions": 4},
        },
        NS,
    )
    a = candidates("a")
    # a's first write (taking the released Lease) waits on the server, and meanwhile another
    # writer takes the Lease: a's write then carries a stale resourceVersion.
    cluster.server.faults.add(Fault(verb="update", user_agent=a.agent, latency=0.25, times=1))
    a.start()
    accounting = cluster.server.accounting
    eventually(lambda: accounting.total(verb="update", resource="leases", user_agent=a.agent))
    lease = read_lease(cluster)
    lease["spec"].update(holderIdentity="intruder", leaseDurationSeconds=3600, leaseTransitions=5)
    rest.replace(LEASES, lease, NS)

    eventually(lambda: "written by someone else first" in caplog.text)
    eventually(lambda: a.elector.leader == "intruder")
    assert a.thread.is_alive(), "a 409 is not an error"
    assert not a.elector.is_leader()
    assert a.events == []
    spec = read_lease(cluster)["spec"]
    assert spec["holderIdentity"] == "intruder"
    assert spec["leaseTransitions"] == 5

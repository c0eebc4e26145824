"""An informer keeps an exact copy of the server's objects through churn and faults: 1,000
writes, a dropped watch, a forced 410, a 503 window through six tries and a 429 storm; and
it re-lists no more than once per 410. The informer's defaults, but for its backoff, which is
a tenth of the default (80 ms doubling to 1.5 s), so that its six tries through the window
take seconds, not half a minute, with the same doublings to the same cap."""

from __future__ import annotations

import random

from kubernetes import client

from ome.runtime.informer import Backoff, Informer
from ome.runtime.rest import CONFIGMAPS, NAMESPACES, Rest
from ome_sim.apiserver.faults import Fault
from test.cluster import Cluster
from test.helpers import eventually

NS = "recovery"
INFORMER_AGENT = "ome-informer-under-test"


def churn(rest: Rest, rng: random.Random, live: set[str], ops: int) -> None:
    """Creates, updates and deletes, picked at random but reproducibly."""
    for _ in range(ops):
        roll = rng.random()
        if roll < 0.45 or len(live) < 5:
            name = f"cm-{rng.randrange(10**9):09d}"
            rest.create(CONFIGMAPS, {"metadata": {"name": name}, "data": {"v": "0"}}, NS)
            live.add(name)
        elif roll < 0.8:
            name = rng.choice(sorted(live))
            rest.patch(CONFIGMAPS, name, {"data": {"v": str(rng.randrange(1000))}}, NS)
        else:
            name = rng.choice(sorted(live))
            rest.delete(CONFIGMAPS, name, NS)
            live.discard(name)


def matches_the_server(informer: Informer, rest: Rest) -> bool:
    items, _ = rest.list_all(CONFIGMAPS, NS)
    server = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in items}
    cached = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in informer.list()}
    return server == cached


def test_the_cache_stays_exact_through_churn_and_faults(cluster: Cluster) -> None:
    writer = Rest(cluster.api)
    writer.create(NAMESPACES, {"metadata": {"name": NS}})
    informer_api = client.ApiClient(cluster.api.configuration)
    informer_api.user_agent = INFORMER_AGENT
    informer = Informer(
        Rest(informer_api), CONFIGMAPS, namespace=NS, backoff=Backoff(initial=0.08, cap=1.5)
    )
    server, faults, accounting = cluster.server, cluster.server.faults, cluster.server.accounting

    def lists() -> int:
        return accounting.total("list", "configmaps", INFORMER_AGENT)

    def tries() -> int:
        """The informer's requests, lists and watches."""
        return accounting.total(None, "configmaps", INFORMER_AGENT)

    def drop() -> None:
        cluster.thread.call(lambda: server.drop_watches("configmaps"))

    rng = random.Random(7)
    live: set[str] = set()
    informer.start()
    try:
        assert informer.wait_for_sync(10)
        churn(writer, rng, live, 1000)
        eventually(lambda: matches_the_server(informer, writer), timeout=30)
        assert lists() == 1

        # A dropped watch: resumed from the last resourceVersion, no re-list.
        drop()
        churn(writer, rng, live, 50)
        eventually(lambda: matches_the_server(informer, writer), timeout=30)
        assert lists() == 1

        # A forced 410: exactly one re-list.
        faults.add(Fault(verb="watch", resource="configmaps", user_agent=INFORMER_AGENT, code=410))
        drop()
        churn(writer, rng, live, 50)
        eventually(lambda: matches_the_server(informer, writer), timeout=30)
        assert lists() == 2

        # A 503 window on everything the informer asks, through six of its tries (each after
        # a backoff twice the last, up to its cap); the writes go on between them.
        for verb in ("list", "watch"):
            faults.add(
                Fault(
                    verb=verb,
                    resource="configmaps",
                    user_agent=INFORMER_AGENT,
                    code=503,
                    times=None,
                )
            )
        drop()
        for _ in range(6):
            churn(writer, rng, live, 10)
            tried = tries()
            eventually(lambda: tries() > tried, timeout=10)  # noqa: B023
        faults.clear()
        # Backoff may have grown to its cap (1.5 s) by the end of the window.
        eventually(lambda: matches_the_server(informer, writer), timeout=30, interval=0.1)
        # A watch failing again and again re-lists (each try of the window, once the first
        # failed), so that the cache is never older than the backoff's cap plus a list.
        assert lists() > 2, "repeated watch failures re-list"
        # The watch works again: a write reaches the cache through it.
        churn(writer, rng, live, 5)
        eventually(lambda: matches_the_server(informer, writer), timeout=30)
        relisted = lists()

        # A 429 storm: three in a row, each honoured (a second apiece).
        faults.add(
            Fault(
                verb="watch",
                resource="configmaps",
                user_agent=INFORMER_AGENT,
                code=429,
                retry_after=1,
                times=3,
            )
        )
        drop()
        churn(writer, rng, live, 100)
        eventually(lambda: matches_the_server(informer, writer), timeout=75, interval=0.5)
        assert lists() == relisted, "a 429 is retried from the last resourceVersion"
        assert len(informer.keys()) == len(live)
    finally:
        informer.stop()

"""Bookies lost for good, one after another: AutoRecovery heals each loss before the next, nothing is lost.

A cluster of ZooKeeper, 5 bookies and 2 brokers with E/Qw/Qa = 3/3/2 (ledgers rolled every 1,000 entries so
that most are closed) runs the usual producers and consumers, plus a *late* subscription read only at the
end - from the bookies, after every loss. The three bookies of the topic's first ledger are destroyed one
after another (SIGKILL, data directory wiped, never restarted); each loss is waited out until the cluster is
healed - no ledger's metadata names the lost bookie and nothing is marked under-replicated - before the next.
Before the third loss a fresh bookie joins (after two losses only three bookies are left, exactly one
ensemble: the third loss could not be healed, and writes would stop, without a bookie to move to).

With replication enabled the checker must find 0 acknowledged messages lost. With replication disabled
(``replication disable`` through the bookie REST API) the same script must lose messages: every replica of
the first ledger is destroyed - proof that the scenario can fail.

The short version heals small amounts of data in seconds; ``--chaos-long`` runs longer between losses and
twice the traffic. The short negative control waits only briefly after each loss (nothing heals with
replication disabled, however long it waits) and gives the late subscription a short drain: the messages it
loses are the first ledger's, which no live bookie holds any more, while the live subscriptions lose none.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from chaos.harness import Scenario, ScenarioConfig
from chaos.recovery import ClusterView
from chaos.workload import NAMESPACE, ProducerSpec
from fixtures.dev_cluster import ClusterExits, open_test_cluster

from magnetar.admin.processes.dev_cluster import DevCluster

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes]

BOOKIE_ENV = {
    "MAGNETAR_AUTORECOVERY__LOST_BOOKIE_RECOVERY_DELAY_S": "0",
    "MAGNETAR_AUTORECOVERY__OPEN_LEDGER_REREPLICATION_GRACE_PERIOD_MS": "5000",
    "MAGNETAR_AUTORECOVERY__REREPLICATE_BACKOFF_MS": "500",
    "MAGNETAR_AUTORECOVERY__LOCK_RELEASE_OF_FAILED_LEDGER_GRACE_PERIOD_MS": "2000",
    "MAGNETAR_AUTORECOVERY__UNDERREPLICATED_POLL_MS": "1000",
}
BROKER_ENV = {
    "MAGNETAR_MAX_ENTRIES_PER_LEDGER": "1000",
    "MAGNETAR_ENTRY_CACHE_BYTES_MAX": "0",  # the late subscription reads from the bookies, not a cache
}
HEAL_TIMEOUT_S = 90.0


def first_ledger(cluster: DevCluster, topic: str) -> int:
    url = f"{cluster.broker_urls[0]}/admin/v2/{NAMESPACE}/{topic}/internalStats"
    request = urllib.request.Request(url)
    opener = urllib.request.build_opener(urllib.request.HTTPRedirectHandler())
    with opener.open(request, timeout=10) as response:
        stats = json.loads(response.read())
    return min(int(ledger["ledgerId"]) for ledger in stats["ledgers"])


async def run_losses(tmp_path: Path, scale: Callable[[float, float], float], *, replication: bool) -> None:
    exits = ClusterExits()
    async with open_test_cluster(
        tmp_path, exits, start=False, bookies=6, ensemble_size=3, write_quorum=3, ack_quorum=2,
        bookie_env=BOOKIE_ENV, broker_env=BROKER_ENV,
    ) as cluster:  # fmt: skip
        await cluster.start_zookeepers()
        await cluster.initialize_metadata()
        await cluster.start_bookies(cluster.bookie_names[:5])
        await cluster.start_brokers()
        view = ClusterView(cluster)
        rate = scale(50, 100)
        config = ScenarioConfig(
            "bookies lost for good" + ("" if replication else " (replication disabled)"),
            producers=(ProducerSpec("p0", rate_per_s=rate), ProducerSpec("p1", rate_per_s=rate)),
            late_subscriptions=("sub-late",),
            warmup_s=scale(8, 20),
            # without replication the late reader is stuck on the lost ledger (the live subscriptions, caught
            # up, drain at once): the drain only gives it the time a readable first entry would take
            drain_timeout_s=60.0 if replication else scale(6, 20),
            timeout_s=scale(420, 900),
        )
        scenario = Scenario(config, cluster, exits)

        async def faults(s: Scenario) -> None:
            if not replication:
                status, answer = await view.put("/api/v1/autorecovery/status?enabled=false")
                assert status == 200, answer
                assert answer == {"enabled": False}
            ledger_id = await trio.to_thread.run_sync(first_ledger, cluster, s.topic)
            metadata = (await view.ledgers())[ledger_id]
            victims_ids = metadata["allEnsembles"]["0"]
            names = {cluster.bookie_id(i): name for i, name in enumerate(cluster.bookie_names)}
            victims = [names[b] for b in victims_ids]
            s.note(f"the first ledger {ledger_id} is on {victims}: destroying them in turn")
            for number, victim in enumerate(victims, start=1):
                if number == 3:
                    s.phase("a fresh bookie joins")
                    await cluster.start_bookies([cluster.bookie_names[5]])
                s.phase(f"destroy {victim} (loss {number})")
                victim_id = cluster.bookie_id(cluster.bookie_names.index(victim))
                await view.destroy(victim)
                if replication:
                    took = await view.wait_healed(victim_id, HEAL_TIMEOUT_S)
                    s.note(f"healed of {victim} {took:.1f} s after it was destroyed")
                else:
                    await s.hold(scale(2, 20))
                    s.note(f"{len(await view.ledgers_naming(victim_id))} ledgers still name {victim}")
                await s.recovered(what=f"(after destroying {victim})")
                await s.hold(scale(3 if replication else 1, 10))

        verdict = await scenario.run(faults)
    if replication:
        scenario.assert_ok(verdict)
    else:
        lost = {sub.name: len(sub.lost) for sub in verdict.subscriptions}
        assert lost["sub-late"] > 0, (
            "destroying every replica of a ledger without re-replication must lose messages"
        )
        # the loss is the destroyed ledger, which only the late subscription still had to read
        assert lost["sub-a"] == lost["sub-b"] == 0, lost
        assert verdict.acked > 0


async def test_bookies_lost_one_after_another_are_healed(
    tmp_path: Path, scale: Callable[[float, float], float]
) -> None:
    await run_losses(tmp_path, scale, replication=True)


async def test_without_replication_the_same_losses_lose_messages(
    tmp_path: Path, scale: Callable[[float, float], float]
) -> None:
    await run_losses(tmp_path, scale, replication=False)

"""ZooKeeper outages: the data path must not notice them.

Ledgers are kept small here (200 entries, about two seconds of the workload) so that rollovers - metadata
writes - fall due during every outage. Writes to bookies need no ZooKeeper, so the owner of the topic goes on
publishing and dispatching; the current ledger takes entries past its cap until the next one can be created,
and the roll happens once ZooKeeper is back. Acknowledgements never stop for long, and none is lost. "Long"
is measured against the fault itself: a data path that waited for ZooKeeper would go without acknowledgements
for the whole outage, so no gap may reach ``FAULT_SHARE_MAX`` of the shortest fault. The gaps themselves (a
few hundred milliseconds) are benchmark figures, recorded in ``tests/bench/RESULTS.md``, not asserted.

* ZooKeeper SIGKILLed and restarted with its data: 5 s (long: 5, 15 and 30 s). ZooKeeper restores the sessions
  from its log and gives each a new timeout, so clients that reconnect in time keep their sessions.
* Sessions expired: ZooKeeper SIGKILLed for 5 s, then restarted while every broker and bookie is still cut off
  from it (proxies, see network.py) until past the session timeout: all their sessions expire. The brokers
  keep serving meanwhile, and once they reach ZooKeeper again they create their ownership nodes again; the
  bookies register again.
* A 3-server ensemble whose leader is SIGKILLed (long: three times, restarted in between): the clients move to
  the other servers once a new leader is elected; publishing does not stop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from chaos.harness import POLL_S, Scenario, ScenarioConfig
from chaos.network import open_proxied_cluster
from fixtures.dev_cluster import TEST_SESSION_TIMEOUT_MS, ClusterExits, open_test_cluster

from magnetar.admin.processes import zookeeper as zk
from magnetar.admin.processes.dev_cluster import DevCluster

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes]

LEDGER_ENTRIES_MAX = 200
SMALL_LEDGERS = {
    "MAGNETAR_MAX_ENTRIES_PER_LEDGER": str(LEDGER_ENTRIES_MAX),
    "MAGNETAR_MIN_LEDGER_ROLLOVER_TIME_MIN": "0",
}
FAULT_SHARE_MAX = 0.5
"""The longest time without any acknowledgement during the faults, as a share of the shortest fault (how
long ZooKeeper, or the ensemble's leader, is down): publishing that waited for ZooKeeper would stop for all
of it."""
LOADED_MACHINE_FACTOR = 3
"""How much slower than its nominal rate the workload may run on a 2-core machine busy with other suites."""
OUTAGE_S = 5.0
"""The short scenarios' ZooKeeper outage."""
SESSION_S = TEST_SESSION_TIMEOUT_MS / 1000
PAST_THE_CAP = "magnetar_ledger_entries_past_cap"
SESSIONS_LOST = "magnetar_metadata_sessions_lost_total"
"""Counts the metadata sessions a broker lost (expired) since it started."""


async def _note_ledgers(s: Scenario) -> None:
    entries = await s.ledger_entries()
    s.note(f"entries per ledger now: {entries} (cap {LEDGER_ENTRIES_MAX}; consumed ledgers are trimmed)")


def _rollover_due_s(s: Scenario) -> tuple[float, str]:
    """How long the workload takes to fill a ledger (``LEDGER_ENTRIES_MAX`` entries at the producers' rate),
    times ``LOADED_MACHINE_FACTOR``, and the figures it comes from."""
    rate = sum(producer.rate_per_s for producer in s.config.producers)
    deadline_s = LOADED_MACHINE_FACTOR * LEDGER_ENTRIES_MAX / rate
    named = (
        f"{deadline_s:g} s = {LOADED_MACHINE_FACTOR} x max_entries_per_ledger {LEDGER_ENTRIES_MAX} "
        f"at the producers' {rate:g} msgs/s"
    )
    return deadline_s, named


async def _past_the_cap(s: Scenario, cluster: DevCluster, found: list[float]) -> None:
    """How far past its cap the topic's current ledger went in this outage (its owner's metric; a broker
    answers /metrics without ZooKeeper), noted and kept in ``found``. While it is 0 - the workload has not
    yet filled the ledger, on a busy machine - the outage goes on (bounded by :func:`_rollover_due_s`): the
    scenario is about a rollover that falls due while ZooKeeper is away."""
    deadline_s, named = _rollover_due_s(s)
    past = 0.0
    with trio.move_on_after(deadline_s):
        while (past := sum([await s.broker_metric(b, PAST_THE_CAP) for b in cluster.broker_names])) == 0:
            await trio.sleep(POLL_S)
    found.append(past)
    s.note(f"{past:.0f} entries written past the ledger cap so far in this outage (waited at most {named})")


async def test_zookeeper_killed_while_ledgers_roll_over(
    tmp_path: Path, scale: Callable[[float, float], float]
) -> None:
    outages = [OUTAGE_S, *([] if scale(0, 1) == 0 else [15.0, 30.0])]
    exits = ClusterExits()
    async with open_test_cluster(tmp_path, exits, broker_env=SMALL_LEDGERS) as cluster:
        scenario = Scenario(ScenarioConfig("ZooKeeper SIGKILL"), cluster, exits)
        past_cap: list[float] = []

        async def faults(s: Scenario) -> None:
            for number, outage_s in enumerate(outages, 1):
                s.phase(f"zookeeper down {outage_s:.0f} s #{number}")
                await cluster.kill("zookeeper-1")
                await s.hold(outage_s)
                await _past_the_cap(s, cluster, past_cap)
                s.phase(f"zookeeper back #{number}")
                await cluster.restart("zookeeper-1")
                await s.hold(scale(3, 5))
            await _note_ledgers(s)

        verdict = await scenario.run(faults)
    scenario.note(f"longest ack gap during the faults {scenario.longest_gap_in_faults():.2f} s")
    scenario.assert_ok(verdict, **_gap_bound(min(outages), "ZooKeeper's shortest outage"))
    assert all(past > 0 for past in past_cap), f"a rollover was due in every outage: {past_cap}"


def _sessions_lost_since(s: Scenario, before: list[float]) -> bool:
    """Whether every broker counts more lost metadata sessions than ``before`` (blocking)."""
    now = [s.broker_metric_blocking(b, SESSIONS_LOST) for b in s.cluster.broker_names]
    return all(after > earlier for after, earlier in zip(now, before, strict=True))


def _ephemerals_gone(client_port: int) -> bool:
    """Whether ZooKeeper holds no ephemeral node (``zk_ephemerals_count`` in ``mntr``)."""
    for line in zk.four_letter_word(client_port, "mntr").splitlines():
        name, _, value = line.partition("\t")
        if name == "zk_ephemerals_count":
            return int(value) == 0
    raise AssertionError("ZooKeeper's mntr has no zk_ephemerals_count")


def _gap_bound(fault_s: float, fault: str) -> dict[str, Any]:
    """``assert_ok``'s ack-gap arguments: ``FAULT_SHARE_MAX`` of a fault of ``fault_s``, named."""
    return {
        "ack_gap_max_s": FAULT_SHARE_MAX * fault_s,
        "ack_gap_basis": f"FAULT_SHARE_MAX {FAULT_SHARE_MAX:g} of {fault} ({fault_s:g} s)",
    }


async def test_sessions_expire_during_a_zookeeper_outage(
    tmp_path: Path, scale: Callable[[float, float], float]
) -> None:
    exits = ClusterExits()
    async with open_proxied_cluster(
        tmp_path, exits, bookies_through_zookeeper_proxies=True, broker_env=SMALL_LEDGERS
    ) as (cluster, network):
        scenario = Scenario(ScenarioConfig("ZooKeeper sessions expired"), cluster, exits)

        sessions_lost: dict[str, list[float]] = {}
        past_cap: list[float] = []

        async def faults(s: Scenario) -> None:
            sessions_lost["before"] = [await s.broker_metric(b, SESSIONS_LOST) for b in cluster.broker_names]
            for number in range(1, int(scale(1, 2)) + 1):
                lost_before = [await s.broker_metric(b, SESSIONS_LOST) for b in cluster.broker_names]
                s.phase(f"zookeeper down {OUTAGE_S:g} s #{number}")
                await cluster.kill("zookeeper-1")
                for proxy in network.zookeeper.values():
                    proxy.partition()
                await s.hold(OUTAGE_S)
                s.phase(f"zookeeper back, every session expiring #{number}")
                await cluster.restart("zookeeper-1")
                await s.hold(scale(3, 5))
                deadline_s = LOADED_MACHINE_FACTOR * (SESSION_S + zk.ZooKeeperSettings().tick_time_ms / 1000)
                await s.wait_for(  # ZooKeeper deleted every ephemeral node: every client's session expired
                    functools.partial(_ephemerals_gone, cluster.zk_nodes[0].client_port),
                    deadline_s,
                    f"every session to expire (no ephemeral node left, mntr): {deadline_s:g} s = "
                    f"{LOADED_MACHINE_FACTOR} x (metadata_session_timeout_ms {SESSION_S * 1000:g} + one "
                    "ZooKeeper tick, when it looks for expired sessions)",
                )
                await _past_the_cap(s, cluster, past_cap)
                s.phase(f"links to zookeeper healed #{number}")
                network.heal_all()
                deadline_s = LOADED_MACHINE_FACTOR * SESSION_S
                await s.wait_for(  # each broker reconnects, learns that its session expired, and counts it
                    functools.partial(_sessions_lost_since, s, lost_before),
                    deadline_s,
                    f"every broker to count its lost session: {deadline_s:g} s = {LOADED_MACHINE_FACTOR} x "
                    f"metadata_session_timeout_ms {SESSION_S * 1000:g} (paces reconnections)",
                )
                await s.hold(scale(4, 6))
            sessions_lost["after"] = [await s.broker_metric(b, SESSIONS_LOST) for b in cluster.broker_names]
            s.note(f"metadata sessions lost per broker: {sessions_lost}")
            await _note_ledgers(s)

        verdict = await scenario.run(faults)
    scenario.note(f"longest ack gap during the faults {scenario.longest_gap_in_faults():.2f} s")
    scenario.assert_ok(verdict, **_gap_bound(OUTAGE_S, "ZooKeeper's outage"))
    expired = [
        after > before for after, before in zip(sessions_lost["after"], sessions_lost["before"], strict=True)
    ]
    assert all(expired), f"the scenario meant to expire every broker's session: {sessions_lost}"
    assert all(past > 0 for past in past_cap), f"a rollover was due in every outage: {past_cap}"


async def _leader(cluster: DevCluster) -> str:
    """The name of the ensemble's leader (asked of each server with ``srvr``, bounded)."""
    with trio.fail_after(30):
        while True:
            for name, node in zip(cluster.zookeeper_names, cluster.zk_nodes, strict=True):
                if not cluster.process(name).running:
                    continue
                if await trio.to_thread.run_sync(zk.server_mode, node.client_port) == "leader":
                    return name
            await trio.sleep(0.2)


async def test_zookeeper_leader_killed(tmp_path: Path, scale: Callable[[float, float], float]) -> None:
    rounds = int(scale(1, 3))
    leader_down_s = scale(4, 6)
    exits = ClusterExits()
    async with open_test_cluster(tmp_path, exits, zookeepers=3, broker_env=SMALL_LEDGERS) as cluster:
        scenario = Scenario(ScenarioConfig("ZooKeeper leader SIGKILL"), cluster, exits)

        async def faults(s: Scenario) -> None:
            for number in range(1, rounds + 1):
                leader = await _leader(cluster)
                s.phase(f"kill the leader {leader} #{number}")
                await cluster.kill(leader)
                s.note(f"new leader: {await _leader(cluster)}")
                await s.hold(leader_down_s)
                s.phase(f"{leader} back #{number}")
                await cluster.restart(leader)
                await s.hold(scale(2, 4))
            await _note_ledgers(s)

        verdict = await scenario.run(faults)
    scenario.note(f"longest ack gap during the faults {scenario.longest_gap_in_faults():.2f} s")
    scenario.assert_ok(verdict, **_gap_bound(leader_down_s, "the time the killed leader stays down"))

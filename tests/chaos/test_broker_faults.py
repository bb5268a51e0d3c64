"""Broker faults: the owner of the topic SIGKILLed again and again; the owner paused (SIGSTOP) past its
session timeout and woken up (SIGCONT) - a zombie that must not write.

The topic's owner is found by a lookup. Killed: its session expires, the other broker takes the bundle on the
next request and recovers (fences) the managed ledger's last ledger; the killed broker is restarted, so the
next round has two brokers again. Paused: producers with a long send timeout keep their sessions to the
paused owner and queue publishes in its sockets; the others and the consumers move to the other broker,
which takes the topic over once the paused owner's session has expired. Woken up, the old owner reads those
queued publishes: it must not get them stored or acknowledged (its ledger is fenced, its ZooKeeper session
gone), which the checker sees as lost, reordered or phantom messages if it did.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pytest
from chaos.harness import Scenario, ScenarioConfig
from chaos.workload import ProducerSpec
from fixtures.dev_cluster import TEST_SESSION_TIMEOUT_MS, ClusterExits, open_test_cluster

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes]

SESSION_S = TEST_SESSION_TIMEOUT_MS / 1000
STOP_LANDS_S = 10.0
"""How long a SIGSTOP may take to stop a process: at once, unless a thread is in uninterruptible I/O (then
when the I/O ends); only a process that never stops waits this long."""


def _stopped(pid: int) -> bool:
    """Whether the process is stopped (state ``T`` in ``/proc/<pid>/stat``)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] in "Tt"


async def test_owner_killed_repeatedly(tmp_path: Path, scale: Callable[[float, float], float]) -> None:
    rounds = int(scale(2, 6))
    exits = ClusterExits()
    async with open_test_cluster(tmp_path, exits) as cluster:
        scenario = Scenario(ScenarioConfig("broker SIGKILL"), cluster, exits)

        async def faults(s: Scenario) -> None:
            for round_number in range(1, rounds + 1):
                owner = await s.owner()
                s.phase(f"kill {owner} #{round_number}")
                await cluster.kill(owner)
                took = await s.recovered()
                s.note(f"acks again {took:.1f} s after the kill")
                await s.hold(scale(1, 4))
                s.phase(f"restart {owner}")
                await cluster.restart(owner)
                await s.hold(scale(1, 3))

        verdict = await scenario.run(faults)
    scenario.assert_ok(verdict)


async def test_owner_killed_under_the_official_binary_client(
    tmp_path: Path, scale: Callable[[float, float], float]
) -> None:
    """The same SIGKILL of the owner, with the workload on Pulsar's binary protocol through the official
    ``pulsar-client``: it finds the new owner by itself, and every message it saw acknowledged (by the broker
    that was killed too) is consumed by both subscriptions."""
    rounds = int(scale(1, 3))
    exits = ClusterExits()
    async with open_test_cluster(tmp_path, exits) as cluster:
        config = ScenarioConfig("broker SIGKILL, pulsar-client", protocol="pulsar")
        scenario = Scenario(config, cluster, exits)

        async def faults(s: Scenario) -> None:
            for round_number in range(1, rounds + 1):
                owner = await s.owner()
                s.phase(f"kill {owner} #{round_number}")
                acked_before = s.checker.acked_count
                await cluster.kill(owner)
                took = await s.recovered()
                s.note(f"acks again {took:.1f} s after the kill ({acked_before} acknowledged before it)")
                await s.hold(scale(1, 3))
                s.phase(f"restart {owner}")
                await cluster.restart(owner)
                await s.hold(scale(1, 2))

        verdict = await scenario.run(faults)
    scenario.assert_ok(verdict)


async def test_owner_killed_with_deduplication(
    tmp_path: Path, scale: Callable[[float, float], float]
) -> None:
    """The owner SIGKILLed under named ``pulsar-client`` producers on a deduplicating namespace: the client
    resends what it had in flight to the new owner, which recovered the deduplication state (snapshot plus
    the entries after it), so nothing is stored twice - a late subscription, reading everything once after
    the faults, sees no duplicate - and nothing acknowledged is lost."""
    rounds = int(scale(1, 3))
    exits = ClusterExits()
    async with open_test_cluster(tmp_path, exits) as cluster:
        config = ScenarioConfig(
            "broker SIGKILL, dedup", protocol="pulsar", deduplication=True, late_subscriptions=("late",)
        )
        scenario = Scenario(config, cluster, exits)

        async def faults(s: Scenario) -> None:
            for round_number in range(1, rounds + 1):
                owner = await s.owner()
                s.phase(f"kill {owner} #{round_number}")
                await cluster.kill(owner)
                took = await s.recovered()
                s.note(f"acks again {took:.1f} s after the kill")
                await s.hold(scale(1, 3))
                s.phase(f"restart {owner}")
                await cluster.restart(owner)
                await s.hold(scale(1, 2))

        verdict = await scenario.run(faults)
    scenario.assert_ok(verdict)
    late = next(s for s in verdict.subscriptions if s.name == "late")
    assert late.duplicates == 0, f"{late.duplicates} messages stored twice\n{scenario.report()}"


async def test_owner_paused_past_its_session(tmp_path: Path, scale: Callable[[float, float], float]) -> None:
    rounds = int(scale(1, 4))
    producers = (
        ProducerSpec("patient", window=100, send_timeout_s=60),  # stays with the paused owner
        ProducerSpec("eager", send_timeout_s=2.0),  # moves to the other broker
    )
    exits = ClusterExits()
    async with open_test_cluster(tmp_path, exits) as cluster:
        config = ScenarioConfig("broker SIGSTOP/SIGCONT", producers=producers, consumer_idle_s=2.0)
        scenario = Scenario(config, cluster, exits)

        async def faults(s: Scenario) -> None:
            for round_number in range(1, rounds + 1):
                owner = await s.owner()
                s.phase(f"pausing {owner} #{round_number}")
                cluster.pause(owner)
                pid = cluster.process(owner).pid
                assert pid is not None
                await s.wait_for(  # what is sent from here on waits in the paused owner's sockets
                    functools.partial(_stopped, pid), STOP_LANDS_S, f"{owner} (pid {pid}) to stop on SIGSTOP"
                )
                s.phase(f"paused {owner} #{round_number}")
                took = await s.recovered(what=f"(nobody took the topic over from the paused {owner})")
                s.note(f"{await s.owner()} took over {took:.1f} s into the pause")
                await s.hold(scale(2, 5))
                s.phase(f"resume {owner} #{round_number}")
                cluster.resume(owner)
                await s.recovered()
                await s.hold(scale(2, 4))

        verdict = await scenario.run(faults)
    scenario.assert_ok(verdict)
    # The paused owner read the patient producer's publishes only after it woke up, when another broker had
    # fenced its ledger: none of them may have been stored.
    zombie_writes = scenario.checker.delivered_sent_in("paused", "patient")
    assert not zombie_writes, f"the woken owner stored {zombie_writes[:10]}...\n{scenario.report()}"

"""Bookie faults during writes: SIGKILL (ensemble change), restart (journal replay), a second one killed.

With 3 bookies and E/Qw/Qa = 2/2/2, every ledger's ensemble holds bookie-0 or bookie-1, so killing those two
in turn makes the brokers replace a bookie of an open ledger (ensemble change) at least once. Restarted on
the same port with the same directories, a bookie replays its journal and serves the entries it had
acknowledged. Then two bookies are down at once: only one is left, fewer than the ensemble size, so writes
stop (the producers' sends fail or time out: unavailable, never wrongly acknowledged) until one comes back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from chaos.harness import Scenario, ScenarioConfig
from fixtures.dev_cluster import ClusterExits, open_test_cluster

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes]


async def test_bookies_killed_during_writes(tmp_path: Path, scale: Callable[[float, float], float]) -> None:
    rounds = int(scale(1, 3))
    exits = ClusterExits()
    async with open_test_cluster(tmp_path, exits) as cluster:
        scenario = Scenario(ScenarioConfig("bookie SIGKILL"), cluster, exits)

        async def faults(s: Scenario) -> None:
            for round_number in range(1, rounds + 1):
                s.phase(f"kill bookie-0 #{round_number}")
                await cluster.kill("bookie-0")
                took = await s.recovered()
                s.note(f"writes go on {took:.1f} s after losing bookie-0 (ensemble change)")
                await s.hold(scale(2, 5))
                s.phase(f"restart bookie-0 #{round_number}")
                await cluster.restart("bookie-0")
                await s.hold(scale(1, 3))
                s.phase(f"kill bookie-1 #{round_number}")
                await cluster.kill("bookie-1")
                await s.recovered()
                await s.hold(scale(1, 3))
                s.phase(f"kill bookie-2 too #{round_number}")
                await cluster.kill("bookie-2")  # one bookie left: less than the ensemble
                await s.hold(scale(3, 8))
                s.phase(f"restart bookie-1 and bookie-2 #{round_number}")
                await cluster.restart("bookie-1")
                await cluster.restart("bookie-2")
                took = await s.recovered()
                s.note(f"writes resume {took:.1f} s after the bookies are back")
                await s.hold(scale(1, 3))

        verdict = await scenario.run(faults)
    scenario.assert_ok(verdict)

"""Network faults between components (fault-injecting proxies, see tests/chaos/network.py):

* a slow bookie (every chunk to and from it delayed): adds wait for it, nothing fails;
* a bookie of the ledger being written behind a blackhole (nothing forwarded, nothing closed) longer than
  the add timeout: the brokers replace it in the ensemble of the open ledger and go on; healed, its held
  bytes arrive late and change nothing;
* the owner of the topic cut off from ZooKeeper (blackhole) past its session timeout, while it still reaches
  the bookies and the clients: split brain is possible only until the other broker takes the topic over and
  fences the ledger; from then on the isolated owner's writes fail, and nothing it acknowledged is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from chaos.harness import Scenario, ScenarioConfig
from chaos.network import open_proxied_cluster
from fixtures.dev_cluster import TEST_SESSION_TIMEOUT_MS, ClusterExits

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes]


async def test_slow_silent_and_partitioned_links(
    tmp_path: Path, scale: Callable[[float, float], float]
) -> None:
    exits = ClusterExits()
    async with open_proxied_cluster(tmp_path, exits) as (cluster, network):
        scenario = Scenario(ScenarioConfig("network faults"), cluster, exits)

        async def faults(s: Scenario) -> None:
            slow = await network.busiest_bookie()
            s.phase(f"bookie-{slow} link delayed 200 ms")
            network.bookies[slow].set_delay(200)
            await s.recovered()
            await s.hold(scale(3, 10))
            network.bookies[slow].heal()

            silent = await network.busiest_bookie()
            s.phase(f"bookie-{silent} blackholed")
            network.bookies[silent].blackhole()
            took = await s.recovered()
            s.note(
                f"acks {took:.1f} s into bookie-{silent}'s blackhole (add timeout 5 s, then ensemble change)"
            )
            await s.hold(scale(3, 10))
            s.phase(f"bookie-{silent} healed")
            network.bookies[silent].heal()
            await s.hold(scale(1, 3))

            owner = await s.owner()
            other = next(name for name in cluster.broker_names if name != owner)
            s.phase(f"{owner} cut off from ZooKeeper")
            network.zookeeper[owner].blackhole()
            await s.hold(TEST_SESSION_TIMEOUT_MS / 1000 + scale(1, 5))
            s.phase(f"{other} takes the topic over")
            await s.takeover_by(other)
            took = await s.recovered(what=f"(after {other} took the topic over)")
            s.note(f"acks through {other} {took:.1f} s after its takeover")
            await s.hold(scale(2, 6))
            s.phase(f"{owner} reconnected to ZooKeeper")
            network.zookeeper[owner].heal()
            await s.recovered()
            await s.hold(scale(2, 4))

        verdict = await scenario.run(faults)
    scenario.assert_ok(verdict)

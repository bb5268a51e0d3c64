"""ZooKeeper killed (SIGKILL) for a few seconds, then restarted on the same port with the same data.

Writes to bookies need no ZooKeeper, so the owner of the topic goes on publishing and dispatching; what needs
it fails cleanly (a ledger rollover, persisting a cursor, taking a bundle), and no broker or bookie exits.
ZooKeeper restores the sessions from its log and gives each a new timeout, so clients that reconnect in time
keep their sessions, their ephemeral nodes and their topics. A longer outage (``--chaos-long``) expires them:
bookies register again, brokers give their bundles up and take them again on the next request.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from chaos.harness import Scenario, ScenarioConfig
from fixtures.dev_cluster import ClusterExits, open_test_cluster

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes]


async def test_zookeeper_killed_briefly(tmp_path: Path, scale: Callable[[float, float], float]) -> None:
    outages = [scale(4, 5), *([] if scale(0, 1) == 0 else [15.0, 30.0])]
    exits = ClusterExits()
    async with open_test_cluster(tmp_path, exits) as cluster:
        scenario = Scenario(ScenarioConfig("ZooKeeper SIGKILL"), cluster, exits)

        async def faults(s: Scenario) -> None:
            for number, outage_s in enumerate(outages, 1):
                s.phase(f"zookeeper down {outage_s:.0f} s #{number}")
                await cluster.kill("zookeeper-1")
                await s.hold(outage_s)
                s.phase(f"zookeeper back #{number}")
                await cluster.restart("zookeeper-1")
                took = await s.recovered()
                s.note(f"acks {took:.1f} s after ZooKeeper is back")
                await s.hold(scale(2, 5))

        verdict = await scenario.run(faults)
    scenario.assert_ok(verdict)

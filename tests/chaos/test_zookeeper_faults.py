"""ZooKeeper killed (SIGKILL) for a few seconds, then restarted on the same port with the same data.

Writes to bookies need no ZooKeeper, so the owner of the topic goes on publishing and dispatching; what needs
it fails cleanly, and no broker or bookie exits. Ledgers are kept small here (200 entries) so that the topic
must roll over to a new ledger - a metadata write - during the outage: those writes fail (the producers see
errors or time out) until ZooKeeper is back, then the managed ledger creates its next ledger and goes on.
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
    small_ledgers = {"MAGNETAR_MAX_ENTRIES_PER_LEDGER": "200", "MAGNETAR_MIN_LEDGER_ROLLOVER_TIME_MIN": "0"}
    async with open_test_cluster(tmp_path, exits, broker_env=small_ledgers) as cluster:
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

"""Decommissioning a live bookie under load: every ledger moves off it, nothing is lost, and the publish
latency during the copy is recorded.

ZooKeeper, 4 bookies and 2 brokers (E/Qw/Qa = 3/3/2, ledgers rolled every 500 entries, 1,000 with
``--chaos-long``) with the usual producers and consumers and a late subscription read at the end. A bookie of
the topic's current ensemble is decommissioned with ``magnetar admin bookies decommission`` through another
bookie's REST API, while producers publish: the command prints a progress line per interval and returns once
no ledger names the bookie (its open ledgers are recovered - fenced and closed - and new ones avoid it). Then
the bookie is stopped for good and its data wiped: the late subscription must still read everything. The
p50/p99 of the publishes acknowledged during the copy are printed (and recorded in tests/bench/RESULTS.md).
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from chaos.harness import Scenario, ScenarioConfig
from chaos.recovery import ClusterView, bookie_http
from chaos.test_bookie_loss import BOOKIE_ENV, BROKER_ENV
from chaos.workload import ProducerSpec
from fixtures.dev_cluster import ClusterExits, open_test_cluster

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes]


def percentile(values: list[float], fraction: float) -> float:
    return values[min(len(values) - 1, int(fraction * len(values)))] if values else float("nan")


async def test_decommission_a_live_bookie_under_load(
    tmp_path: Path, scale: Callable[[float, float], float]
) -> None:
    exits = ClusterExits()
    # a few closed ledgers and an open one to move off the bookie: the short version rolls ledgers twice as
    # often, so that a shorter warmup makes as many
    broker_env = {**BROKER_ENV, "MAGNETAR_MAX_ENTRIES_PER_LEDGER": str(int(scale(500, 1000)))}
    async with open_test_cluster(
        tmp_path, exits, bookies=4, ensemble_size=3, write_quorum=3, ack_quorum=2,
        bookie_env=BOOKIE_ENV, broker_env=broker_env,
    ) as cluster:  # fmt: skip
        view = ClusterView(cluster)
        rate = scale(100, 200)
        config = ScenarioConfig(
            "decommission a live bookie",
            producers=(ProducerSpec("p0", rate_per_s=rate), ProducerSpec("p1", rate_per_s=rate)),
            late_subscriptions=("sub-late",),
            warmup_s=scale(8, 60),
            timeout_s=scale(300, 900),
        )
        scenario = Scenario(config, cluster, exits)
        progress_lines: list[str] = []

        async def faults(s: Scenario) -> None:
            ledgers = await view.ledgers()
            newest = max(ledgers)
            victim_id = list(ledgers[newest]["allEnsembles"].values())[-1][0]
            victim = cluster.bookie_names[[cluster.bookie_id(i) for i in range(4)].index(victim_id)]
            other = next(n for n in cluster.bookie_names if n != victim)
            before = len(await view.ledgers_naming(victim_id))
            s.note(f"decommissioning {victim} ({victim_id}), named by {before} ledgers, via {other}")
            s.phase("decommission")
            command = [
                sys.executable, "-m", "magnetar.admin.cli", "admin", "bookies", "decommission", victim_id,
                "--bookie-url", bookie_http(cluster, other), "--interval-s", "1",
            ]  # fmt: skip
            env = {**os.environ, "MAGNETAR_LOG_LEVEL": "WARNING"}
            with trio.fail_after(120):
                done = await trio.run_process(
                    command, capture_stdout=True, capture_stderr=True, check=False, env=env
                )
            progress_lines.extend(done.stderr.decode().splitlines())
            assert done.returncode == 0, done.stderr.decode()[-2000:]
            assert await view.ledgers_naming(victim_id) == []
            s.phase("remove the decommissioned bookie")
            await view.destroy(victim)
            await s.recovered(what="(after removing the decommissioned bookie)")

        verdict = await scenario.run(faults)
        latencies = scenario.checker.ack_latencies("decommission")
    print("\n".join(progress_lines))
    if latencies:
        p50, p99 = percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000
        print(
            f"publish latency while decommissioning ({len(latencies)} acks): p50 {p50:.1f} ms, "
            f"p99 {p99:.1f} ms, max {max(latencies) * 1000:.1f} ms, "
            f"mean {statistics.fmean(latencies) * 1000:.1f} ms"
        )
    assert any("decommission" in line and "done" in line for line in progress_lines), progress_lines
    scenario.assert_ok(verdict)

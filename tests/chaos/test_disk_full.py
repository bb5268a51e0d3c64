"""A bookie's disk fills up during writes: it turns read-only, the brokers write elsewhere; freed, it is back.

Each bookie's data directory (entry logs, index, journal) is a small tmpfs. The disk of a bookie of the
ledger being written (the one that accepted the most bytes lately) is filled past
``disk_usage_threshold`` (0.90 here), its disk monitor turns it read-only (re-registered under
``/ledgers/available/readonly``, new adds refused with EREADONLY): the brokers replace it in the ensemble of
the open ledger and place new ledgers on the other two. Freed below ``disk_usage_lwm_threshold`` (0.80) it
turns writable again. With ``--chaos-long`` a second bookie fills up too, leaving one writable bookie - fewer
than the ensemble, so writes stop until a disk is freed.
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from chaos.disk import fill_to, free_filler, small_disk
from chaos.harness import Scenario, ScenarioConfig
from fixtures.dev_cluster import ClusterExits, open_test_cluster

from magnetar.admin.processes.dev_cluster import DevCluster

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes]

DISK_MB = 160
THRESHOLDS = {
    "MAGNETAR_DISK_CHECK_INTERVAL_MS": "250",
    "MAGNETAR_DISK_USAGE_THRESHOLD": "0.90",
    "MAGNETAR_DISK_USAGE_WARN_THRESHOLD": "0.85",
    "MAGNETAR_DISK_USAGE_LWM_THRESHOLD": "0.80",
    "MAGNETAR_STORAGE_ENGINE__JOURNAL_PREALLOCATE_BYTES": str(1024 * 1024),
}


def bookie_write_bytes(cluster: DevCluster, index: int) -> float:
    url = f"http://127.0.0.1:{cluster.ports.bookies[index]['http']}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("bookie_WRITE_BYTES "):
                return float(line.split()[1])
    return 0.0


async def busiest_bookies(cluster: DevCluster, window_s: float = 1.0) -> list[int]:
    """Bookies by the entry bytes they accepted over the next ``window_s``, busiest first (the first ones are
    in the ensemble of the ledger being written)."""
    indexes = range(len(cluster.bookie_names))
    before = [await trio.to_thread.run_sync(bookie_write_bytes, cluster, i) for i in indexes]
    await trio.sleep(window_s)
    after = [await trio.to_thread.run_sync(bookie_write_bytes, cluster, i) for i in indexes]
    return sorted(indexes, key=lambda i: after[i] - before[i], reverse=True)


def bookie_readonly(cluster: DevCluster, index: int) -> bool:
    url = f"http://127.0.0.1:{cluster.ports.bookies[index]['http']}/api/v1/bookie/state"
    with urllib.request.urlopen(url, timeout=5) as response:
        return bool(json.loads(response.read())["readOnly"])


async def wait_mode(scenario: Scenario, cluster: DevCluster, index: int, readonly: bool) -> float:
    """Wait (bounded) until bookie ``index`` reports the mode; returns how long it took."""
    started = trio.current_time()
    with trio.fail_after(scenario.config.recovery_timeout_s):
        while await trio.to_thread.run_sync(bookie_readonly, cluster, index) != readonly:
            await trio.sleep(0.1)  # the bookie's disk monitor runs on its own timer
    return trio.current_time() - started


async def test_bookie_disk_fills_up_during_writes(
    tmp_path: Path, scale: Callable[[float, float], float]
) -> None:
    data_dir = tmp_path / "cluster"
    full_disks = int(scale(1, 2))
    exits = ClusterExits()
    with contextlib.ExitStack() as stack:
        disks = [stack.enter_context(small_disk(data_dir / f"bookie-{i}", DISK_MB)) for i in range(3)]
        async with open_test_cluster(data_dir, exits, bookie_env=THRESHOLDS) as cluster:
            scenario = Scenario(ScenarioConfig("bookie disk full"), cluster, exits)

            async def faults(s: Scenario) -> None:
                victims = (await busiest_bookies(cluster))[:full_disks]
                for index in victims:
                    s.phase(f"fill bookie-{index}'s disk")
                    used = await trio.to_thread.run_sync(fill_to, disks[index], 0.95)
                    took = await wait_mode(s, cluster, index, readonly=True)
                    s.note(f"bookie-{index} read-only {took:.1f} s after its disk reached {used:.0%}")
                    await s.hold(scale(4, 10))
                if full_disks == 1:
                    await s.recovered(what="(writes did not move off the read-only bookie)")
                for index in victims:
                    s.phase(f"free bookie-{index}'s disk")
                    await trio.to_thread.run_sync(free_filler, disks[index])
                    took = await wait_mode(s, cluster, index, readonly=False)
                    s.note(f"bookie-{index} writable again {took:.1f} s after its disk was freed")
                    await s.recovered()
                    await s.hold(scale(2, 5))

            verdict = await scenario.run(faults)
    scenario.assert_ok(verdict)

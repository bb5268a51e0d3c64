"""``magnetar autorecovery`` as its own process, next to bookies that run none (``--no-autorecovery``).

Real ZooKeeper, four bookie processes and one AutoRecovery process with its HTTP port: it is elected
auditor, and when a bookie is SIGKILLed for good it heals the ledgers that bookie held (a closed one and
one whose idle writer left it open), which its REST API and metrics show.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import trio
from fixtures.processes import ProcessGroup

from magnetar.bookkeeper.client import ClientSettings, open_bookkeeper
from magnetar.bookkeeper.client.tcp_transport import open_tcp_transport
from magnetar.bookkeeper.metadata import open_metadata_store

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper, pytest.mark.slow]

BOOKIE_ENV = {"MAGNETAR_METADATA_SESSION_TIMEOUT_MS": "4000"}


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


async def test_an_autorecovery_process_audits_and_heals(
    zookeeper_url: str, magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    bookies = {
        p.ready["bookieId"]: p
        for p in (
            magnetar_processes.bookie(
                f"bookie{i}", zookeeper_url, tmp_path / f"bookie{i}", "--no-autorecovery", env=BOOKIE_ENV
            )
            for i in range(4)
        )
    }
    daemon = magnetar_processes.add(
        "autorecovery",
        ["autorecovery", "--metadata-url", zookeeper_url, "--http-port", "0", "--bind", "127.0.0.1",
         "--daemon-id", "ar-1"],
        env={"MAGNETAR_AUTORECOVERY__OPEN_LEDGER_REREPLICATION_GRACE_PERIOD_MS": "2000"},
    )  # fmt: skip
    assert daemon.ready["event"] == "autorecovery-ready"
    base = f"http://127.0.0.1:{daemon.ready['httpPort']}"
    settings = ClientSettings(ensemble_size=3, write_quorum=3, ack_quorum=2)
    async with (
        open_metadata_store(zookeeper_url) as metadata,
        open_tcp_transport() as transport,
        open_bookkeeper(metadata, transport, settings) as bk,
    ):
        closed = await bk.create_ledger(password=b"pw")
        for i in range(50):
            await closed.add_entry(b"closed-%d" % i)
        await closed.close()
        idle = await bk.create_ledger(password=b"pw")
        for i in range(10):
            await idle.add_entry(b"idle-%d" % i)
        shared = set(closed.metadata.ensembles[0][1]) & set(idle.metadata.ensembles[0][1])
        victim = sorted(shared)[0]
        with trio.fail_after(30):
            while (await trio.to_thread.run_sync(get, base + "/api/v1/autorecovery/who_is_auditor"))[1] != (
                "Auditor: ar-1"
            ):
                await trio.sleep(0.2)
        bookies[victim].kill()
        with trio.fail_after(120):
            while True:
                ledgers = [await bk.get_ledger_metadata(lh.ledger_id) for lh in (closed, idle)]
                named = [any(victim in m for _, m in md.ensembles) for md in ledgers]
                status, _ = await trio.to_thread.run_sync(
                    get, base + "/api/v1/autorecovery/list_under_replicated_ledger"
                )
                if not any(named) and status == 404:
                    break
                await trio.sleep(0.5)
        assert ledgers[1].is_closed, "the idle writer's ledger was recovered to be healed"
        assert ledgers[1].last_entry_id == 9
        reread = await bk.open_ledger(closed.ledger_id, b"pw", recovery=False)
        assert [e.payload for e in await reread.read_entries(0, 49)] == [b"closed-%d" % i for i in range(50)]
    _, metrics = await trio.to_thread.run_sync(get, base + "/metrics")
    lines = dict(
        line.split(" ", 1) for line in str(metrics).splitlines() if line and not line.startswith("#")
    )
    assert float(lines["magnetar_autorecovery_auditor_elected"]) == 1.0
    # BookKeeper's names, unscoped in a separate AutoRecovery process (inside a bookie: replication_...)
    assert float(lines["replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED"]) >= 2
    assert float(lines["replication_worker_NUM_BYTES_WRITTEN"]) > 0
    assert float(lines["replication_worker_NUM_ENTRIES_WRITTEN"]) > 0
    assert "auditor_NUM_UNDER_REPLICATED_LEDGERS" in lines

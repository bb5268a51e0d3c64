"""The garbage collector inside real processes: a ``magnetar bookie`` (disk storage, ZooKeeper) driven over
its HTTP endpoints - a deleted ledger's space is reclaimed, the kept ledger still reads back, the GC endpoints
and metrics report it, the process stops cleanly - and ``magnetar standalone``, which serves the endpoints of
all its bookies on the broker's port."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio
from fixtures.processes import ProcessGroup
from fixtures.standalone_process import free_ports

from magnetar.bookkeeper.client import ClientSettings, open_bookkeeper
from magnetar.bookkeeper.client.tcp_transport import open_tcp_transport
from magnetar.bookkeeper.metadata import open_metadata_store

pytestmark = [pytest.mark.processes, pytest.mark.slow]

ENV = {
    "MAGNETAR_STORAGE_ENGINE__ENTRY_LOG_BYTES_MAX": str(128 * 1024),
    "MAGNETAR_STORAGE_ENGINE__CHECKPOINT_INTERVAL_MS": "100",
    "MAGNETAR_GC__GC_WAIT_TIME_S": "3600",
    "MAGNETAR_GC__COMPACTION_RATE_ENTRIES_PER_S": "0",
}
ENTRIES = 1500


def payload(ledger: str, entry_id: int) -> bytes:
    return f"{ledger}-{entry_id}-".encode() * 12


@pytest.mark.zookeeper
async def test_bookie_process_reclaims_a_deleted_ledger_over_http(
    zookeeper_url: str, magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    process = magnetar_processes.bookie(
        "bookie", zookeeper_url, tmp_path / "bookie", "--storage", "disk", "--http-port", "0", env=ENV
    )
    http_port = process.ready["httpPort"]
    settings = ClientSettings(ensemble_size=1, write_quorum=1, ack_quorum=1)
    async with (
        open_metadata_store(zookeeper_url) as metadata,
        open_tcp_transport() as transport,
        open_bookkeeper(metadata, transport, settings) as bk,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}", timeout=30) as http,
    ):
        keep = await bk.create_ledger(password=b"pw")
        drop = await bk.create_ledger(password=b"pw")
        for entry_id in range(ENTRIES):
            await keep.add_entry(payload("keep", entry_id))
            await drop.add_entry(payload("drop", entry_id))
        await keep.close()
        await drop.close()
        await bk.delete_ledger(drop.ledger_id)

        with trio.fail_after(30):  # until a checkpoint has put every entry in a log and a pass reclaimed it
            while True:
                passes = (await http.put("/api/v1/bookie/gc?wait=true")).json()
                assert passes[0]["ok"], passes
                usage = (await http.get("/api/v1/bookie/entry_log_usage")).json()[0]
                logs = usage["entryLogs"]
                detail = (await http.get("/api/v1/bookie/gc_details")).json()[0]
                # Major compaction leaves no sealed log below 80 % usage.
                if detail["deletedLedgers"] and logs and all(log["usage"] >= 0.8 for log in logs):
                    break
                await trio.sleep(0.1)
        assert usage["totalSpace"] > 0
        details = (await http.get("/api/v1/bookie/gc_details")).json()
        assert len(details) == 1
        detail = details[0]
        assert detail["bookieId"] == process.ready["bookieId"]
        assert detail["deletedLedgers"] == 1
        assert detail["majorCompactionCounter"] >= 1
        assert detail["reclaimedByCompactionBytes"] + detail["reclaimedByDeletionBytes"] > 0
        assert detail["majorCompacting"] is False
        assert (await http.get("/api/v1/bookie/gc")).json() == {"is_in_force_gc": "false"}
        info = (await http.get("/api/v1/bookie/info")).json()
        assert info["totalSpace"] >= info["freeSpace"] > 0
        assert info["journalTotalSpace"] >= info["journalFreeSpace"] > 0
        assert info["readOnly"] is False

        files = (await http.get("/api/v1/bookie/list_disk_file")).json()
        assert ".log" in files["entrylog files"]
        assert ".txn" in files["journal files"]
        only = (await http.get("/api/v1/bookie/list_disk_file", params={"file_type": "entrylog"})).json()
        assert set(only) == {"bookieId", "entrylog files"}
        assert (await http.get("/api/v1/bookie/list_disk_file", params={"file_type": "x"})).status_code == 400

        suspended = await http.put("/api/v1/bookie/gc/suspend_compaction", json={"suspendMajor": True})
        assert suspended.json() == {"isMajorGcSuspended": "true", "isMinorGcSuspended": "false"}
        resumed = await http.put("/api/v1/bookie/gc/resume_compaction", json={"resumeMajor": "true"})
        assert resumed.json() == {"isMajorGcSuspended": "false", "isMinorGcSuspended": "false"}
        bad = await http.put("/api/v1/bookie/gc", content=b"[1]")
        assert bad.status_code == 400
        triggered = await http.put("/api/v1/bookie/gc", json={"forceMajor": False, "forceMinor": False})
        assert triggered.json() == {"is_in_force_gc": "true"}

        metrics = (await http.get("/metrics")).text
        assert "bookie_DELETED_LEDGER_COUNT 1.0" in metrics
        assert 'bookie_THREAD_RUNTIME_count{success="true"}' in metrics
        assert "bookie_RECLAIMED_COMPACTION_SPACE_BYTES" in metrics
        assert "bookie_SERVER_STATUS 1.0" in metrics

        reader = await bk.open_ledger(keep.ledger_id, b"pw")
        entries = await reader.read_entries(0, ENTRIES - 1)
        assert [e.payload for e in entries] == [payload("keep", i) for i in range(ENTRIES)]
        await reader.close()

    assert process.stop() == 0  # SIGTERM: drain, unregister, final checkpoint
    log = process.log_path.read_text()
    assert "garbage collector" in log
    assert f"deleted ledger {drop.ledger_id}" in log


async def test_standalone_serves_the_gc_endpoints_of_its_bookies(
    magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    bookie_port = free_ports(2)
    process = magnetar_processes.add(
        "standalone",
        [
            "standalone", "--data-dir", str(tmp_path / "data"), "--http-port", "0",
            "--bookie-port", str(bookie_port), "--bookies", "2",
        ],
    )  # fmt: skip
    async with httpx.AsyncClient(base_url=str(process.ready["httpUrl"]), timeout=30) as http:
        passes = (await http.put("/api/v1/bookie/gc?wait=true")).json()
        assert [p["bookieId"] for p in passes] == [f"127.0.0.1:{bookie_port + i}" for i in range(2)]
        assert all(p["ok"] for p in passes)
        details = (await http.get("/api/v1/bookie/gc_details")).json()
        assert [d["gcRuns"] for d in details] == [1, 1]
        usage = (await http.get("/api/v1/bookie/entry_log_usage")).json()
        assert len(usage) == 2
    assert process.stop() == 0, process.log_tail()

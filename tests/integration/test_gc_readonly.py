"""Read-only mode on a full disk, and back to writable once garbage collection freed space (docs/upstream.md,
BookKeeper §7).

A bookie on a small file system (a size-limited tmpfs when this machine lets the test mount one, otherwise
an injected disk-usage probe that reports the data directory's real size against a pretend capacity) takes
normal adds until its disk is above ``disk_usage_threshold`` (0.95). It then registers as read-only, answers
EREADONLY to normal adds and still accepts recovery adds. The short-lived ledger that filled it is deleted
in the metadata store; one garbage-collection pass - run while the bookie is read-only, with major compaction
paused by the warn threshold - deletes it locally, compacts its space away, and the bookie, re-checking its
disk at once, registers as writable again below the low-water mark and accepts normal adds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.disk import add, registered_readonly, small_filesystem
from fixtures.gc import CapacityProbe, entry, open_gc_cluster, register_ledgers, unregister_ledgers

from magnetar.bookkeeper.bookie.storage.opening import statvfs_probe
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.protocol.status import BookieStatus

CAPACITY_BYTES = 24 * 1024 * 1024
LONG, SHORT = 1, 2
ENTRY_BYTES = 16 * 1024


@pytest.mark.slow
@pytest.mark.parametrize("disk", ["probe", "tmpfs"])
async def test_a_full_bookie_turns_read_only_and_gc_makes_it_writable_again(
    tmp_path: Path, disk: str
) -> None:
    metadata = MemoryMetadataStore()
    with small_filesystem(tmp_path / "small", CAPACITY_BYTES) as mounted:
        if disk == "tmpfs" and mounted:
            probe = statvfs_probe
            root = tmp_path / "small"
        else:
            if disk == "tmpfs":
                print("cannot mount a tmpfs here: the injected disk-usage probe stands in for it")
            probe = CapacityProbe(CAPACITY_BYTES)
            root = tmp_path
        engine = {
            "entry_log_bytes_max": 1024 * 1024,
            "journal_file_bytes_max": 1024 * 1024,
            "journal_preallocate_bytes": 256 * 1024,
            "journal_queue_bytes_max": 1024 * 1024,
            "journal_buffered_bytes_max": 256 * 1024,
            "write_cache_bytes_max": 2 * 1024 * 1024,
            "checkpoint_interval_ms": 100,
            "journal_dir": root / "bookie-0" / "journal",  # the journal fills the same (small) disk
        }
        async with open_gc_cluster(
            metadata, root, 1, engine=engine, probes=[probe], bookie={"disk_check_interval_ms": 60_000}
        ) as cluster:
            b = cluster.bookies[0]
            core, store = b.bookie.core, b.store
            await register_ledgers(metadata, [LONG, SHORT])
            entry_id = short_id = 0
            while not b.bookie.state.readonly:
                # One long-lived entry for every nine short-lived ones, interleaved in every entry log.
                for _ in range(9):
                    assert await add(core, SHORT, short_id) is BookieStatus.EOK
                    short_id += 1
                assert await add(core, LONG, entry_id) is BookieStatus.EOK
                entry_id += 1
                await store.checkpoint()
                b.bookie.monitor.check()
                assert entry_id < 2000, "the disk never filled"
            used = store.disk_usage().used_fraction
            print(
                f"read-only at {used:.1%} disk usage after {entry_id * 10} adds ({disk}, mounted={mounted})"
            )
            await registered_readonly(metadata, b.bookie_id, True)
            assert await add(core, LONG, entry_id) is BookieStatus.EREADONLY
            assert await add(core, LONG, entry_id, recovery=True) is BookieStatus.EOK  # recovery adds go on

            await unregister_ledgers(metadata, [SHORT])
            result = await b.collector.run_once(force_minor=True)
            assert result is not None
            assert result.deleted_ledgers == [SHORT]
            assert result.compaction is not None
            assert result.compaction.kind == "minor"
            assert result.reclaimed_bytes > 0
            assert not b.bookie.state.readonly, f"still read-only at {store.disk_usage().used_fraction:.1%}"
            await registered_readonly(metadata, b.bookie_id, False)
            assert await add(core, LONG, entry_id + 1) is BookieStatus.EOK
            for i in range(entry_id + 2):
                assert store.read_entry(LONG, i) == entry(LONG, i, ENTRY_BYTES)
            details = b.collector.details()
            assert details["deletedLedgers"] == 1
            print(f"writable again at {store.disk_usage().used_fraction:.1%}: {result.compaction.to_json()}")
    await metadata.aclose()

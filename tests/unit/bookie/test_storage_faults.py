"""Faults: each gives a typed error and a log line - never a crash, never a wrong answer (invariant 8 of
docs/architecture.md §3)."""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Any

import pytest

from magnetar.bookkeeper.bookie.storage import checkpoint, journal_files
from magnetar.bookkeeper.bookie.storage.engine import DbLedgerStorage, open_ledger_store
from magnetar.bookkeeper.bookie.storage.entry_index import EntryIndex
from magnetar.bookkeeper.bookie.storage.entry_log import log_file_name
from magnetar.bookkeeper.bookie.storage.errors import (
    DiskFullError,
    NoEntryError,
    StorageIOError,
)
from magnetar.bookkeeper.bookie.storage.journal_files import journal_file_name
from magnetar.bookkeeper.bookie.storage.ledger_store import DiskUsage

KEY = b"k" * 20


def noop(_: BaseException | None) -> None:
    return None


async def fill(store: DbLedgerStorage, make_entry: Any, ledger_id: int, entry_ids: range | list[int]) -> None:
    store.create_ledger(ledger_id, KEY, noop)
    for entry_id in entry_ids:
        await store.wait_writable(200)
        store.add_entry(ledger_id, entry_id, make_entry(ledger_id, entry_id), noop)
    await store.journal.drain()


def drop_locations(settings: Any, *keys: tuple[int, int]) -> None:
    index = EntryIndex(settings.index_path)
    batch = index.batch()
    for ledger_id, entry_id in keys:
        batch.delete_location(ledger_id, entry_id)
    index.write_sync(batch)
    index.close()


async def test_a_lost_index_entry_of_a_contiguous_ledger_is_an_io_error(
    make_settings: Any, make_entry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings()
    async with open_ledger_store(settings) as store:
        await fill(store, make_entry, 1, range(50))
    drop_locations(settings, (1, 20), (1, 49))
    async with open_ledger_store(settings) as store:
        with caplog.at_level(logging.ERROR), pytest.raises(StorageIOError, match="lost"):
            store.read_entry(1, 20)
        assert "missing from the index" in caplog.text
        with pytest.raises(StorageIOError):
            store.read_entry(1, -1)  # the index ends before its recorded last entry
        assert store.read_entry(1, 19) == make_entry(1, 19)
        with pytest.raises(NoEntryError):
            store.read_entry(1, 50)  # beyond what was ever stored


async def test_gaps_of_a_striped_ledger_are_absent_until_the_index_loses_an_entry(
    make_settings: Any, make_entry: Any
) -> None:
    settings = make_settings()
    async with open_ledger_store(settings) as store:
        await fill(store, make_entry, 2, list(range(0, 60, 3)))  # entries of one bookie of E=3, WQ=1
        await store.checkpoint()
        with pytest.raises(NoEntryError):
            store.read_entry(2, 4)
    drop_locations(settings, (2, 30))
    async with open_ledger_store(settings) as store:
        with pytest.raises(StorageIOError):
            store.read_entry(2, 30)
        with pytest.raises(StorageIOError):
            store.read_entry(2, 4)  # the index lost an entry: a gap can no longer be trusted
        assert store.read_entry(2, 33) == make_entry(2, 33)


async def test_a_truncated_entry_log_is_an_io_error(make_settings: Any, make_entry: Any) -> None:
    settings = make_settings()
    async with open_ledger_store(settings) as store:
        await fill(store, make_entry, 1, range(100))
    log_path = settings.entry_log_path / log_file_name(1)
    size = log_path.stat().st_size
    with log_path.open("r+b") as f:
        f.truncate(size // 2)
    async with open_ledger_store(settings) as store:
        assert store.read_entry(1, 0) == make_entry(1, 0)
        with pytest.raises(StorageIOError):
            store.read_entry(1, 99)
        with pytest.raises(StorageIOError):
            store.read_entry(1, -1)


async def test_a_corrupt_journal_record_ends_replay_cleanly(
    make_settings: Any, make_entry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings()
    async with open_ledger_store(settings, final_checkpoint=False) as store:
        journal_id = store.journal.synced_mark.file_id
        await fill(store, make_entry, 1, range(40))
        middle = store.journal.synced_mark.offset
        await fill(store, make_entry, 2, range(40))
    path = settings.journal_path / journal_file_name(journal_id)
    data = bytearray(path.read_bytes())
    data[middle + 30] ^= 0x01  # inside the key record of ledger 2
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        async with open_ledger_store(settings) as store:
            assert [store.read_entry(1, e) for e in range(40)] == [make_entry(1, e) for e in range(40)]
            assert store.ledger_state(2) is None  # nothing after the damaged record is replayed
            assert store.replay_stats is not None
            assert len(store.replay_stats.stops) == 1
    assert "stopped at offset" in caplog.text


async def test_a_full_disk_refuses_adds_until_space_returns(make_settings: Any, make_entry: Any) -> None:
    free = [10**9]

    def probe(path: Path) -> DiskUsage:
        return DiskUsage(total_bytes=2 * 10**9, free_bytes=free[0])

    settings = make_settings(disk_free_bytes_min=1000)
    async with open_ledger_store(settings, disk_probe=probe) as store:
        await fill(store, make_entry, 1, range(3))
        free[0] = 10
        assert store.check_disk() == DiskUsage(2 * 10**9, 10)
        assert store.disk_usage().free_bytes == 10
        with pytest.raises(DiskFullError):
            store.add_entry(1, 3, make_entry(1, 3), noop)
        assert store.read_entry(1, 2) == make_entry(1, 2)
        free[0] = 10**9
        store.check_disk()
        store.add_entry(1, 3, make_entry(1, 3), noop)


async def test_a_full_journal_volume_refuses_adds_too(make_settings: Any, make_entry: Any) -> None:
    journal_free = [10**9]
    own_volume = make_settings().data_dir.parent / "journal"
    settings = make_settings(disk_free_bytes_min=1000, journal_dir=own_volume)

    def probe(path: Path) -> DiskUsage:
        free = journal_free[0] if path == settings.journal_path else 10**9
        return DiskUsage(total_bytes=2 * 10**9, free_bytes=free)

    async with open_ledger_store(settings, disk_probe=probe) as store:
        await fill(store, make_entry, 1, range(3))
        journal_free[0] = 10
        assert store.journal_disk_usage() == DiskUsage(2 * 10**9, 10)
        assert store.check_disk() == DiskUsage(2 * 10**9, 10**9)  # the ledger volume's
        with pytest.raises(DiskFullError, match="ledger or journal"):
            store.add_entry(1, 3, make_entry(1, 3), noop)
        journal_free[0] = 10**9
        store.check_disk()
        store.add_entry(1, 3, make_entry(1, 3), noop)


async def test_enospc_in_the_journal_fails_the_add_callback(
    make_settings: Any, make_entry: Any, durability: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_ledger_store(make_settings()) as store:
        store.create_ledger(1, KEY, noop)
        await store.journal.drain()

        def no_space(fd: int, buffers: Any, offset: int) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(journal_files.os, "pwritev", no_space)  # the journal writes with pwritev
        store.add_entry(1, 0, make_entry(1, 0), durability.callback("add"))
        await durability.wait_for(1)
        monkeypatch.undo()
        assert isinstance(durability.results[0][1], DiskFullError)
        store.add_entry(1, 1, make_entry(1, 1), durability.callback("next"))
        await durability.wait_for(2)
        assert durability.results[1] == ("next", None)


async def test_enospc_during_a_checkpoint_keeps_the_entries_and_a_retry_succeeds(
    make_settings: Any, make_entry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings()
    async with open_ledger_store(settings) as store:
        await fill(store, make_entry, 1, range(30))

        def no_space(data: Any) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(store.entry_logger, "write", no_space)
        with pytest.raises(DiskFullError):
            await store.checkpoint()
        monkeypatch.undo()
        assert [store.read_entry(1, e) for e in range(30)] == [make_entry(1, e) for e in range(30)]
        await store.checkpoint()
    async with open_ledger_store(settings) as store:
        assert store.replay_stats is not None
        assert store.replay_stats.entries == 0
        assert [store.read_entry(1, e) for e in range(30)] == [make_entry(1, e) for e in range(30)]


async def test_the_checkpointer_retries_a_failed_checkpoint_by_itself(
    make_settings: Any, make_entry: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(checkpoint_retry_ms=20, write_cache_bytes_max=64 * 1024, entry_bytes_max=4096)
    async with open_ledger_store(settings) as store:
        real_write = store.entry_logger.write
        failures: list[int] = []

        def fails_twice(data: Any) -> None:
            if len(failures) < 2:
                failures.append(len(data))
                raise OSError(errno.EIO, "bad sector")
            real_write(data)

        monkeypatch.setattr(store.entry_logger, "write", fails_twice)
        with caplog.at_level(logging.ERROR):
            await fill(store, make_entry, 1, range(300))  # fills half the write cache: a checkpoint is due
            await store.wait_for_checkpoints(2)
        assert len(failures) == 2
        assert "retrying in 20 ms" in caplog.text
        assert [store.read_entry(1, e) for e in range(300)] == [make_entry(1, e) for e in range(300)]


async def test_a_failing_index_write_fails_the_checkpoint_without_losing_anything(
    make_settings: Any, make_entry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings()
    async with open_ledger_store(settings) as store:
        await fill(store, make_entry, 1, range(30))

        def broken_write(batch: Any) -> None:
            raise RuntimeError("rocksdb: IO error")

        monkeypatch.setattr(store.index, "write_nosync", broken_write)
        with pytest.raises(StorageIOError, match="index write"):
            await store.checkpoint()
        monkeypatch.undo()
        await store.checkpoint()
        assert store.read_entry(1, 29) == make_entry(1, 29)
    async with open_ledger_store(settings) as store:
        assert [store.read_entry(1, e) for e in range(30)] == [make_entry(1, e) for e in range(30)]


async def test_a_damaged_ledger_record_refuses_to_open(make_settings: Any, make_entry: Any) -> None:
    settings = make_settings()
    async with open_ledger_store(settings) as store:
        await fill(store, make_entry, 1, range(3))
    index = EntryIndex(settings.index_path)
    handles = index.handles()
    handles.ledgers.put((1).to_bytes(8, "big"), b"\x07garbage")
    index.close()
    del handles
    with pytest.raises(StorageIOError, match="damaged"):
        async with open_ledger_store(settings):
            pass


async def test_run_io_maps_failures_to_bookie_errors() -> None:
    def enospc() -> None:
        raise OSError(errno.ENOSPC, "full")

    def eio() -> None:
        raise OSError(errno.EIO, "bad sector")

    with pytest.raises(DiskFullError):
        await checkpoint.run_io("x", enospc)
    with pytest.raises(StorageIOError, match="bad sector"):
        await checkpoint.run_io("x", eio)

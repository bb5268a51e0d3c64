"""The engine's garbage-collection primitives (sealed logs, usage, dead-log deletion, recovery at open) and
gc/'s transactional compaction job on them (copy, commit, rollback, recovery at open after an interruption
at every step)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from magnetar.bookkeeper.bookie.storage.compaction_files import (
    CompactionManifest,
    compacting_name,
    decode_manifest,
    encode_manifest,
    manifest_name,
)
from magnetar.bookkeeper.bookie.storage.engine import DbLedgerStorage, open_ledger_store
from magnetar.bookkeeper.bookie.storage.entry_log import log_file_name
from magnetar.bookkeeper.bookie.storage.entry_log_format import split_location
from magnetar.bookkeeper.bookie.storage.errors import NoLedgerError
from magnetar.bookkeeper.bookie.storage.settings import BookieStorageSettings
from magnetar.gc.compaction_job import CompactionJob, SourceDamagedError, start_compaction

KEY = b"k" * 20
LONG, SHORT = (1, 3), (2, 4)


def noop(_: BaseException | None) -> None:
    return None


async def no_throttle(entries: int, size: int) -> None:
    await trio.lowlevel.checkpoint()


async def write_interleaved(store: DbLedgerStorage, make_entry: Any, entries: int) -> None:
    """Entries of ledgers 1-4 interleaved in every entry log (a checkpoint every 50 rounds writes each
    ledger's run of 50); 1 and 3 live long, 2 and 4 are short-lived."""
    for ledger_id in (*LONG, *SHORT):
        store.create_ledger(ledger_id, KEY, noop)
    for entry_id in range(entries):
        for ledger_id in (*LONG, *SHORT):
            await store.wait_writable(400)
            store.add_entry(ledger_id, entry_id, make_entry(ledger_id, entry_id), noop)
        if entry_id % 50 == 49:
            await store.checkpoint()
    await store.journal.drain()
    await store.checkpoint()
    await store.checkpoint()  # the second makes the first's logs sealed whatever was rolled


def log_bytes(settings: BookieStorageSettings) -> int:
    return sum(p.stat().st_size for p in settings.entry_log_path.glob("*.log"))


def assert_readable(store: DbLedgerStorage, make_entry: Any, ledgers: tuple[int, ...], entries: int) -> None:
    for ledger_id in ledgers:
        for entry_id in range(entries):
            assert store.read_entry(ledger_id, entry_id) == make_entry(ledger_id, entry_id)


async def compact_all(store: DbLedgerStorage, **job_args: Any) -> tuple[CompactionJob, list[int]]:
    """One job over the sealed logs whose live bytes fit one entry log (what the compactor plans)."""
    logs: list[int] = []
    live = 0
    for log_id in store.gc.log_ids():
        usage = await store.gc.usage(log_id)
        size = sum(b for ledger_id, b in usage.ledger_bytes.items() if store.gc.ledger_exists(ledger_id))
        if live + size > store.settings.entry_log_bytes_max:
            break
        logs.append(log_id)
        live += size
    job = await start_compaction(store.gc, batch_bytes=64 * 1024, **job_args)
    for log_id in logs:
        await job.copy(await store.gc.usage(log_id), no_throttle)
    return job, logs


async def test_only_sealed_logs_are_offered_and_usage_comes_from_the_ledgers_map(
    make_settings: Any, make_entry: Any
) -> None:
    settings = make_settings(entry_log_bytes_max=64 * 1024)
    async with open_ledger_store(settings) as store:
        assert store.gc.log_ids() == []
        await write_interleaved(store, make_entry, 200)
        sealed = store.gc.log_ids()
        current = store.entry_logger.current
        assert current is not None
        assert sealed
        assert current.log_id not in sealed
        assert all(log_id < current.log_id for log_id in sealed)
        usage = await store.gc.usage(sealed[0])
        assert usage.from_map
        assert usage.fully_read
        assert set(usage.ledger_bytes) <= {1, 2, 3, 4}
        assert usage.total_bytes == usage.records_end - 1024


async def test_compaction_keeps_long_lived_entries_and_reclaims_the_short_lived(
    make_settings: Any, make_entry: Any
) -> None:
    settings = make_settings(entry_log_bytes_max=64 * 1024)
    async with open_ledger_store(settings) as store:
        await write_interleaved(store, make_entry, 1200)
        before = log_bytes(settings)
        for ledger_id in SHORT:
            store.delete_ledger(ledger_id)
        steps: list[str] = []
        locations = [loc for ledger_id in LONG for _, loc in store.index.entries_of(ledger_id)]
        job, sources = await compact_all(store, on_step=steps.append)
        sources_bytes = sum((settings.entry_log_path / log_file_name(i)).stat().st_size for i in sources)
        sealed = set(sources)
        result = await job.commit()
        assert result.sources_deleted == sources
        assert steps[-1] == "done"
        assert steps.index("manifest") < steps.index("visible") < steps.index("index-synced")
        assert steps.index("index-synced") < steps.index("source-deleted")
        # exactly the live entries of the sources were copied
        assert result.entries == sum(1 for loc in locations if split_location(loc)[0] in sealed) > 0
        assert result.reclaimed_bytes > 0
        assert not list(settings.entry_log_path.glob("*.compaction"))
        assert_readable(store, make_entry, LONG, 1200)
        for ledger_id in SHORT:
            with pytest.raises(NoLedgerError):
                store.read_entry(ledger_id, 0)
        assert result.reclaimed_bytes > 0.4 * sources_bytes  # half the bytes were short-lived
        assert log_bytes(settings) == before - result.reclaimed_bytes
        target_usage = await store.gc.usage(result.target)
        assert set(target_usage.ledger_bytes) == set(LONG)
    async with open_ledger_store(settings) as store:
        assert_readable(store, make_entry, LONG, 1200)
        for ledger_id in LONG:
            for entry_id, loc in store.index.entries_of(ledger_id):
                assert split_location(loc)[0] not in sources, (
                    f"{ledger_id}:{entry_id} points at a deleted log"
                )


async def test_a_newer_location_wins_over_the_compacted_copy(make_settings: Any, make_entry: Any) -> None:
    settings = make_settings(entry_log_bytes_max=64 * 1024)
    async with open_ledger_store(settings) as store:
        await write_interleaved(store, make_entry, 200)
        job, _ = await compact_all(store)
        # Between the copy and the commit the entry is re-added (recovery) and checkpointed elsewhere.
        rewritten = make_entry(1, 5, b"rewritten by recovery")
        store.add_entry(1, 5, rewritten, noop)
        await store.journal.drain()
        await store.checkpoint()
        newer = store.index.get_location(1, 5)
        # A ledger deleted between copy and commit: its copies are not pointed at, its entries are purged.
        store.delete_ledger(2)
        await job.commit()
        assert store.index.get_location(1, 5) == newer
        assert store.read_entry(1, 5) == rewritten
        assert list(store.index.entries_of(2)) == []
        assert store.read_entry(3, 7) == make_entry(3, 7)


async def test_a_dead_log_is_deleted_only_when_none_of_its_ledgers_exists(
    make_settings: Any, make_entry: Any
) -> None:
    settings = make_settings(entry_log_bytes_max=64 * 1024)
    async with open_ledger_store(settings) as store:
        await write_interleaved(store, make_entry, 400)
        victim = store.gc.log_ids()[0]
        ledgers = (await store.gc.usage(victim)).ledger_bytes.keys()
        assert await store.gc.delete_dead_log(victim, ledgers) is None  # its ledgers exist
        assert (settings.entry_log_path / log_file_name(victim)).exists()
        for ledger_id in ledgers:
            store.delete_ledger(ledger_id)
        size = await store.gc.delete_dead_log(victim, ledgers)
        assert size is not None
        assert size > 0
        assert not (settings.entry_log_path / log_file_name(victim)).exists()
        assert victim not in store.gc.log_ids()


async def test_an_aborted_compaction_leaves_the_sources_and_no_file(
    make_settings: Any, make_entry: Any
) -> None:
    settings = make_settings(entry_log_bytes_max=64 * 1024)
    async with open_ledger_store(settings) as store:
        await write_interleaved(store, make_entry, 400)
        sealed = store.gc.log_ids()
        job, sources = await compact_all(store)
        assert store.gc.log_ids() == [s for s in sealed if s not in sources]  # busy while compacted
        assert (settings.entry_log_path / compacting_name(job.target)).exists()
        await job.abort()
        assert not (settings.entry_log_path / compacting_name(job.target)).exists()
        assert store.gc.log_ids() == sealed
        assert_readable(store, make_entry, (*LONG, *SHORT), 400)


async def test_a_source_that_cannot_be_read_to_its_end_aborts_the_copy(
    make_settings: Any, make_entry: Any
) -> None:
    settings = make_settings(entry_log_bytes_max=64 * 1024)
    async with open_ledger_store(settings) as store:
        await write_interleaved(store, make_entry, 400)
        victim = store.gc.log_ids()[0]
        usage = await store.gc.usage(victim)
        path = settings.entry_log_path / log_file_name(victim)
        with path.open("r+b") as f:  # flip a byte in the middle of a record: its CRC fails
            f.seek(usage.records_end // 2)
            byte = f.read(1)
            f.seek(usage.records_end // 2)
            f.write(bytes([byte[0] ^ 0xFF]))
        job = await start_compaction(store.gc, batch_bytes=64 * 1024)
        with pytest.raises(SourceDamagedError):
            await job.copy(usage, no_throttle)
        await job.abort()
        assert path.exists()


class Crash(Exception):
    pass


STEPS = ["synced", "manifest", "visible", "relocated", "index-synced", "source-deleted", "done"]


@pytest.mark.parametrize("step", STEPS)
async def test_restart_finishes_or_rolls_back_an_interrupted_compaction(
    make_settings: Any, make_entry: Any, step: str
) -> None:
    settings = make_settings(entry_log_bytes_max=64 * 1024)
    async with open_ledger_store(settings) as store:
        await write_interleaved(store, make_entry, 300)
        for ledger_id in SHORT:
            store.delete_ledger(ledger_id)
        await store.journal.drain()

        def crash_at(name: str) -> None:
            if name == step:
                raise Crash(name)

        job, sources = await compact_all(store, on_step=crash_at)
        with pytest.raises(Crash):
            await job.commit()
        target = job.target
    async with open_ledger_store(settings) as store:
        directory = settings.entry_log_path
        assert not (directory / manifest_name(target)).exists()
        assert not (directory / compacting_name(target)).exists()
        assert_readable(store, make_entry, LONG, 300)
        committed = step != "synced"
        assert (directory / log_file_name(target)).exists() == committed
        remaining_sources = [s for s in sources if (directory / log_file_name(s)).exists()]
        assert remaining_sources == ([] if committed else sources)
        if committed:
            for ledger_id in LONG:
                logs = {split_location(loc)[0] for _, loc in store.index.entries_of(ledger_id)}
                assert target in logs
                assert not logs & set(sources)


def test_manifest_round_trip_and_damage() -> None:
    manifest = CompactionManifest(target=9, sources=(3, 4, 7), entries=1234)
    data = encode_manifest(manifest)
    assert decode_manifest(data) == manifest
    assert decode_manifest(data[:-1]) is None
    assert decode_manifest(data[:10] + b"x" + data[11:]) is None


async def test_a_damaged_manifest_discards_its_copy_at_open(
    tmp_path: Path, make_settings: Any, make_entry: Any
) -> None:
    settings = make_settings(entry_log_bytes_max=64 * 1024)
    async with open_ledger_store(settings) as store:
        await write_interleaved(store, make_entry, 400)
        job, _ = await compact_all(store)
        target = job.target
    # The process died mid-copy: a half-written target, and a manifest that is garbage.
    (settings.entry_log_path / manifest_name(target)).write_bytes(b"garbage")
    async with open_ledger_store(settings) as store:
        assert not (settings.entry_log_path / compacting_name(target)).exists()
        assert not (settings.entry_log_path / manifest_name(target)).exists()
        assert_readable(store, make_entry, (*LONG, *SHORT), 400)

"""The bookie garbage collector over a real storage engine and a memory metadata store: ledger GC against the
metadata, dead entry logs, minor/major compaction choice, disk pressure, suspension, rate limits, damage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from fixtures.gc import (
    CapacityProbe,
    directory_bytes,
    engine_settings,
    entry,
    entry_log_bytes,
    gc_settings,
    register_ledgers,
    unregister_ledgers,
    write_entries,
)

from magnetar.bookkeeper.bookie.storage.engine import DbLedgerStorage, open_ledger_store
from magnetar.bookkeeper.bookie.storage.entry_log import log_file_name
from magnetar.bookkeeper.bookie.storage.errors import NoLedgerError
from magnetar.bookkeeper.metadata.api import MetadataStore, StoreUnavailableError
from magnetar.bookkeeper.metadata.health import MetadataHealth
from magnetar.bookkeeper.metadata.ledger_paths import ledger_path
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.gc.collector import BookieGarbageCollector, DiskPressure
from magnetar.gc.ledger_gc import LedgersRootMissingError, find_deleted_ledgers
from magnetar.gc.rate_limiter import RateLimiter


@pytest.fixture
async def metadata() -> Any:
    store = MemoryMetadataStore()
    yield store
    await store.aclose()


def assert_readable(store: DbLedgerStorage, ledgers: tuple[int, ...], entries: int) -> None:
    for ledger_id in ledgers:
        for entry_id in range(entries):
            assert store.read_entry(ledger_id, entry_id) == entry(ledger_id, entry_id)


class HidingStore:
    """A metadata store whose listings miss some ledgers that do exist (a stale or partial listing)."""

    def __init__(self, inner: MetadataStore, hidden: set[str]) -> None:
        self.inner = inner
        self.hidden = hidden
        self.reads = 0

    async def exists(self, path: str) -> bool:
        self.reads += 1
        return await self.inner.exists(path)

    async def get_children(self, path: str) -> list[str]:
        self.reads += 1
        return [c for c in await self.inner.get_children(path) if f"{path}/{c}" not in self.hidden]


class FailingStore:
    health = MetadataHealth()  # it says healthy; every read fails all the same

    async def exists(self, path: str) -> bool:
        raise StoreUnavailableError("connection lost")

    async def get_children(self, path: str) -> list[str]:
        raise StoreUnavailableError("connection lost")


async def test_only_ledgers_absent_from_the_metadata_store_are_reported(
    metadata: MemoryMetadataStore,
) -> None:
    await register_ledgers(metadata, [2, 4, 6, 2**40])
    limiter = RateLimiter(0)
    found = await find_deleted_ledgers([1, 2, 3, 4, 5, 6, 2**40, 2**40 + 1], metadata, limiter)
    assert found == [1, 3, 5, 2**40 + 1]
    # A ledger missing from a listing but present on the re-read is kept (verifyMetadataOnGc).
    hiding = HidingStore(metadata, {ledger_path("/ledgers", 4)})
    assert await find_deleted_ledgers([2, 4, 5], hiding, limiter) == [5]  # type: ignore[arg-type]
    # Reads: the root, one listing per parent node, one re-read per candidate.
    assert hiding.reads == 1 + 1 + 2
    with pytest.raises(StoreUnavailableError):
        await find_deleted_ledgers([1], FailingStore(), limiter)  # type: ignore[arg-type]
    with pytest.raises(LedgersRootMissingError):
        await find_deleted_ledgers([1], MemoryMetadataStore("empty"), limiter)


async def test_metadata_reads_are_rate_limited(
    metadata: MemoryMetadataStore, autojump_clock: trio.testing.MockClock
) -> None:
    ledgers = [i * 10_000 for i in range(40)]  # one parent node each
    await register_ledgers(metadata, [1])
    start = trio.current_time()
    found = await find_deleted_ledgers(ledgers, metadata, RateLimiter(10))
    assert found == ledgers
    # 1 + 40 listings + 40 re-reads at 10/s with a one-second burst: about 7 s.
    assert 6.0 <= trio.current_time() - start <= 8.5


async def test_rate_limiter_waits_for_permits(autojump_clock: trio.testing.MockClock) -> None:
    limiter = RateLimiter(100)
    start = trio.current_time()
    for _ in range(10):
        await limiter.acquire(50)  # 500 permits at 100/s, 100 of them from the burst
    assert trio.current_time() - start == pytest.approx(3.5)
    unlimited = RateLimiter(0)
    await unlimited.acquire(10**9)
    assert unlimited.unlimited


async def test_a_pass_deletes_gone_ledgers_and_whole_dead_logs(
    tmp_path: Path, metadata: MemoryMetadataStore
) -> None:
    settings = engine_settings(tmp_path / "bookie")
    async with open_ledger_store(settings) as store:
        # Ledger 1 first, alone in its logs; then ledgers 2 and 3 interleaved.
        await write_entries(store, [1], 1500)
        await write_entries(store, [2, 3], 700)
        await register_ledgers(metadata, [2, 3])
        before = entry_log_bytes(settings)
        gc = BookieGarbageCollector(store, metadata, gc_settings(minor_compaction_threshold=0), name="b1")
        result = await gc.run_once()
        assert result is not None
        assert result.deleted_ledgers == [1]
        assert result.deleted_logs, "ledger 1's own logs are deleted without compaction"
        assert result.compaction is None
        assert result.reclaimed_by_deletion_bytes == before - entry_log_bytes(settings) > 0
        with pytest.raises(NoLedgerError):
            store.read_entry(1, 0)
        assert_readable(store, (2, 3), 700)
        details = gc.details()
        assert details["deletedLedgers"] == 1
        assert details["gcRuns"] == 1
        # Nothing is deleted that still exists in the metadata store, pass after pass.
        again = await gc.run_once()
        assert again is not None
        assert again.deleted_ledgers == []
        assert again.deleted_logs == []


async def test_forced_major_compaction_reclaims_interleaved_short_lived_ledgers(
    tmp_path: Path, metadata: MemoryMetadataStore
) -> None:
    settings = engine_settings(tmp_path / "bookie")
    async with open_ledger_store(settings) as store:
        await write_entries(store, [1, 2, 3, 4], 600)
        await register_ledgers(metadata, [1, 3])  # 2 and 4 were deleted: half of every log is garbage
        gc = BookieGarbageCollector(store, metadata, gc_settings(), name="b1")
        before = entry_log_bytes(settings)
        scheduled = await gc.run_once()  # not due yet: ledger GC only
        assert scheduled is not None
        assert scheduled.deleted_ledgers == [2, 4]
        assert scheduled.compaction is None
        assert entry_log_bytes(settings) == before
        minor = await gc.run_once(force_minor=True)  # logs at ~50% are above the minor threshold
        assert minor is not None
        assert minor.compaction is not None
        assert minor.compaction.logs_compacted == 0
        major = await gc.run_once(force_major=True)
        assert major is not None
        assert major.compaction is not None
        compaction = major.compaction
        assert compaction.kind == "major"
        assert compaction.logs_compacted > 1
        assert compaction.jobs < compaction.logs_compacted  # sparse logs are merged
        after = entry_log_bytes(settings)
        assert before - after == compaction.reclaimed_bytes > 0.35 * before
        assert_readable(store, (1, 3), 600)
        assert gc.details()["majorCompactionCounter"] == 1
        assert gc.stats.logs_compacted["major"] == compaction.logs_compacted
    async with open_ledger_store(settings) as store:
        assert_readable(store, (1, 3), 600)


async def test_scheduled_compaction_runs_when_due_and_major_wins(
    tmp_path: Path, metadata: MemoryMetadataStore
) -> None:
    settings = engine_settings(tmp_path / "bookie")
    async with open_ledger_store(settings) as store:
        await write_entries(store, [1, 2, 3, 4, 5], 400)
        await register_ledgers(metadata, [1])  # 20% live: below major's 0.8, not below minor's 0.2
        gc = BookieGarbageCollector(
            store,
            metadata,
            gc_settings(gc_wait_time_s=60, minor_compaction_interval_s=600, major_compaction_interval_s=1800),
        )
        now = trio.current_time()
        assert (await gc.run_once()) is not None  # nothing is due right after start-up
        assert gc.stats.compactions == {"major": 0, "minor": 0}
        gc._last_compaction_mono = {"major": now - 700, "minor": now - 700}
        due = await gc.run_once()
        assert due is not None
        assert due.compaction is not None
        assert due.compaction.kind == "minor"
        below_major = len(gc.compactor.plan(0.8))
        gc._last_compaction_mono = {"major": now - 2000, "minor": now - 2000}
        both = await gc.run_once()
        assert both is not None
        assert both.compaction is not None
        assert both.compaction.kind == "major"
        assert both.compaction.jobs == below_major > 0
        assert gc.compactor.plan(0.8) == []
        none = await gc.run_once()  # a major pass counts as a minor one too
        assert none is not None
        assert none.compaction is None
        async with trio.open_nursery() as nursery:
            await nursery.start(gc.run)
            gc.trigger(force_major=True)
            await gc.wait_for_pass()
            assert gc.stats.compactions["major"] == 2
            nursery.cancel_scope.cancel()
        assert_readable(store, (1,), 400)


async def test_disk_pressure_pauses_major_compaction_but_compaction_still_frees_a_full_disk(
    tmp_path: Path, metadata: MemoryMetadataStore
) -> None:
    probe = CapacityProbe(64 * 1024 * 1024)
    settings = engine_settings(tmp_path / "bookie")
    async with open_ledger_store(settings, disk_probe=probe) as store:
        await write_entries(store, [1, 2, 3, 4, 5], 400)
        await register_ledgers(metadata, [1])
        pressure = DiskPressure(warn=0.9, full=0.95)
        freed: list[int] = []
        gc = BookieGarbageCollector(
            store,
            metadata,
            gc_settings(gc_wait_time_s=1, major_compaction_interval_s=1, minor_compaction_interval_s=1),
            disk=pressure,
            on_space_freed=lambda: freed.append(1),
        )
        gc._last_compaction_mono = {"major": -10.0, "minor": -10.0}  # both due
        probe.used_fraction = 0.92
        paused = await gc.run_once()
        assert paused is not None
        assert paused.compaction is not None
        assert paused.compaction.kind == "minor"  # major paused above the warn threshold
        assert gc.compactor.plan(0.8), "logs below the major threshold are left"
        forced = await gc.run_once(force_major=True)  # an operator's force overrides the pause
        assert forced is not None
        assert forced.compaction is not None
        assert forced.compaction.logs_compacted > 0
        assert gc.compactor.plan(0.8) == []
        assert freed
        # Above the full threshold compaction goes on (it frees space) unless configured otherwise.
        await write_entries(store, [6, 7, 8, 9], 300)
        await register_ledgers(metadata, [6])
        probe.used_fraction = 0.97
        strict = BookieGarbageCollector(
            store,
            metadata,
            gc_settings(force_gc_allow_when_no_space=False, minor_compaction_threshold=0.5),
            disk=pressure,
        )
        strict._last_compaction_mono = {"major": None, "minor": None}
        suspended = await strict.run_once()
        assert suspended is not None
        assert suspended.compaction is None
        assert suspended.compaction_skipped is not None
        assert "disk_usage_threshold" in suspended.compaction_skipped
        allowed = BookieGarbageCollector(
            store,
            metadata,
            gc_settings(minor_compaction_threshold=0.5, major_compaction_threshold=0.8),
            disk=pressure,
        )
        allowed._last_compaction_mono = {"major": trio.current_time(), "minor": None}
        freeing = await allowed.run_once()
        assert freeing is not None
        assert freeing.compaction is not None
        assert freeing.compaction.kind == "minor"
        assert freeing.compaction.logs_compacted > 0
        assert_readable(store, (1, 6), 300)


async def test_compaction_needs_room_for_what_it_copies(
    tmp_path: Path, metadata: MemoryMetadataStore
) -> None:
    probe = CapacityProbe(8 * 1024 * 1024)
    settings = engine_settings(tmp_path / "bookie")
    async with open_ledger_store(settings, disk_probe=probe) as store:
        await write_entries(store, [1, 2], 800)
        await register_ledgers(metadata, [1])
        probe.used_fraction = 0.9999
        gc = BookieGarbageCollector(store, metadata, gc_settings(compaction_free_bytes_reserve=4096))
        result = await gc.run_once(force_major=True)
        assert result is not None
        assert result.compaction is not None
        assert result.compaction.jobs == 0
        assert result.compaction.stopped is not None
        assert "not enough free disk space" in result.compaction.stopped
        # Room for one small job at a time: the emptiest logs go first, and each job frees room for the next.
        probe.used_fraction = None
        probe.capacity_bytes = directory_bytes(settings.data_dir) + 100 * 1024
        result = await gc.run_once(force_major=True)
        assert result is not None
        assert result.compaction is not None
        assert result.compaction.jobs > 1
        assert gc.compactor.plan(0.8) == []


async def test_suspended_compaction_waits_for_resume(tmp_path: Path, metadata: MemoryMetadataStore) -> None:
    settings = engine_settings(tmp_path / "bookie")
    async with open_ledger_store(settings) as store:
        await write_entries(store, [1, 2], 600)
        await register_ledgers(metadata, [1])
        gc = BookieGarbageCollector(store, metadata, gc_settings())
        gc._last_compaction_mono = {"major": -1e9, "minor": -1e9}
        gc.suspend(major=True, minor=True)
        result = await gc.run_once()
        assert result is not None
        assert result.compaction is None
        gc.resume(major=True, minor=False)
        result = await gc.run_once()
        assert result is not None
        assert result.compaction is not None
        assert result.compaction.kind == "major"
        assert result.compaction.logs_compacted > 0


async def test_a_log_damaged_in_the_middle_is_reported_and_left_alone(
    tmp_path: Path, metadata: MemoryMetadataStore
) -> None:
    settings = engine_settings(tmp_path / "bookie")
    async with open_ledger_store(settings) as store:
        await write_entries(store, [1, 2], 800)
        await register_ledgers(metadata, [1])
        victim = store.gc.log_ids()[0]
        usage = await store.gc.usage(victim)
        path = settings.entry_log_path / log_file_name(victim)
        with path.open("r+b") as f:
            f.seek(usage.records_end // 2)
            f.write(b"\xff\xff\xff\xff")
        gc = BookieGarbageCollector(store, metadata, gc_settings())
        result = await gc.run_once(force_major=True)
        assert result is not None
        assert result.compaction is not None
        assert result.compaction.logs_compacted > 0
        assert path.exists()
        details = gc.details()
        damaged = details["damagedEntryLogs"]
        assert isinstance(damaged, dict)
        assert log_file_name(victim) in damaged
        again = await gc.run_once(force_major=True)
        assert again is not None
        assert path.exists()


async def test_a_failing_pass_is_logged_and_the_next_one_runs(
    tmp_path: Path, metadata: MemoryMetadataStore, caplog: pytest.LogCaptureFixture
) -> None:
    settings = engine_settings(tmp_path / "bookie")
    async with open_ledger_store(settings) as store:
        await write_entries(store, [1], 100)
        await register_ledgers(metadata, [1])
        gc = BookieGarbageCollector(store, metadata, gc_settings())

        async def broken() -> int:
            raise RuntimeError("usage exploded")

        gc.tracker.refresh = broken  # type: ignore[method-assign]
        assert await gc.run_once() is None
        assert gc.stats.failures == 1
        assert gc.details()["lastError"] == "RuntimeError: usage exploded"
        assert "garbage collection pass of" in caplog.text
        del gc.tracker.refresh
        assert await gc.run_once() is not None
        assert gc.details()["lastError"] is None


async def test_metadata_unreachable_deletes_nothing(tmp_path: Path) -> None:
    settings = engine_settings(tmp_path / "bookie")
    async with open_ledger_store(settings) as store:
        await write_entries(store, [1, 2], 100)
        gc = BookieGarbageCollector(store, FailingStore(), gc_settings())  # type: ignore[arg-type]
        result = await gc.run_once(force_major=True)
        assert result is not None
        assert result.deleted_ledgers == []
        assert sorted(store.ledgers()) == [1, 2]
        assert_readable(store, (1, 2), 100)


async def test_while_the_metadata_store_is_away_the_collector_pauses(tmp_path: Path) -> None:
    settings = engine_settings(tmp_path / "bookie")
    metadata = MemoryMetadataStore("gc-outage")
    async with open_ledger_store(settings) as store:
        await write_entries(store, [1, 2], 100)
        await register_ledgers(metadata, [1])
        metadata.disconnect()
        gc = BookieGarbageCollector(store, metadata, gc_settings())
        result = await gc.run_once()
        assert result is not None
        assert result.deleted_ledgers == []
        assert gc.stats.ledger_checks_paused == 1
        assert gc.details()["ledgerChecksPaused"] == 1
        metadata.reconnect()
        result = await gc.run_once()
        assert result is not None
        assert result.deleted_ledgers == [2]  # once it is back, the pass acts
    await metadata.aclose()


class OutageDuringListing(MemoryMetadataStore):
    """The connection drops and comes back while a listing is read, to a server whose view lags: it does
    not know ledger 3 yet, neither in the listing nor on the re-read (a view assembled across an outage)."""

    async def get_children(self, path: str) -> list[str]:
        children = await super().get_children(path)
        self.disconnect()
        self.reconnect()
        return [c for c in children if not c.endswith("0003")]

    async def exists(self, path: str) -> bool:
        return not path.endswith("0003") and await super().exists(path)


async def test_a_comparison_an_outage_interrupted_deletes_nothing(tmp_path: Path) -> None:
    settings = engine_settings(tmp_path / "bookie")
    metadata = OutageDuringListing("gc-outage-during")
    async with open_ledger_store(settings) as store:
        await write_entries(store, [1, 2, 3], 100)
        await register_ledgers(metadata, [1, 2, 3])
        gc = BookieGarbageCollector(store, metadata, gc_settings())
        result = await gc.run_once()
        assert result is not None
        assert result.deleted_ledgers == []
        assert sorted(store.ledgers()) == [1, 2, 3]
        assert gc.stats.ledger_checks_paused == 1
    await metadata.aclose()


async def test_a_ledger_deleted_later_is_collected_by_the_next_pass(
    tmp_path: Path, metadata: MemoryMetadataStore
) -> None:
    settings = engine_settings(tmp_path / "bookie")
    async with open_ledger_store(settings) as store:
        await write_entries(store, [1, 2], 400)
        await register_ledgers(metadata, [1, 2])
        gc = BookieGarbageCollector(store, metadata, gc_settings())
        assert (await gc.run_once()) is not None
        await unregister_ledgers(metadata, [2])
        result = await gc.run_once(force_major=True)
        assert result is not None
        assert result.deleted_ledgers == [2]
        assert_readable(store, (1,), 400)


async def test_the_log_being_written_is_sealed_once_enough_of_it_is_garbage(
    tmp_path: Path, metadata: MemoryMetadataStore
) -> None:
    """A log that never fills up (a quiet laptop standalone) would keep deleted ledgers' bytes for ever:
    ``active_log_roll_garbage_bytes`` seals it so the same pass deletes it."""
    settings = engine_settings(tmp_path / "bookie", entry_log_bytes_max=64 * 1024 * 1024)
    async with open_ledger_store(settings) as store:
        await write_entries(store, [1, 2], 300)
        await register_ledgers(metadata, [3])  # ledgers 1 and 2 are gone, ledger 3 comes later
        assert len(store.gc.log_ids()) == 0, "everything is still in the log being written"
        before = entry_log_bytes(settings)
        # BookKeeper's behaviour (0): the log being written is left alone, nothing comes back.
        keeping = BookieGarbageCollector(store, metadata, gc_settings(), name="b1")
        kept = await keeping.run_once()
        assert kept is not None
        assert kept.deleted_ledgers == [1, 2]
        assert kept.sealed_active_log is None
        assert kept.deleted_logs == []
        assert entry_log_bytes(settings) == before
        # Below the threshold nothing is sealed either.
        too_little = gc_settings(active_log_roll_garbage_bytes=before * 2)
        assert (await BookieGarbageCollector(store, metadata, too_little).run_once()) is not None
        assert store.gc.log_ids() == []
        gc = BookieGarbageCollector(store, metadata, gc_settings(active_log_roll_garbage_bytes=1024))
        result = await gc.run_once()
        assert result is not None
        assert result.sealed_active_log is not None
        assert result.deleted_logs == [result.sealed_active_log]
        assert result.reclaimed_by_deletion_bytes > 0.9 * before
        assert entry_log_bytes(settings) < 0.1 * before
        assert gc.details()["sealedActiveEntryLogs"] == 1
        # Writing goes on in the next log, and a later checkpoint does not mind the roll.
        await write_entries(store, [3], 50)
        assert_readable(store, (3,), 50)
        again = await gc.run_once()
        assert again is not None
        assert again.sealed_active_log is None
        assert again.deleted_ledgers == []
        assert_readable(store, (3,), 50)


async def test_a_log_being_written_with_live_data_is_sealed_and_left_to_compaction(
    tmp_path: Path, metadata: MemoryMetadataStore
) -> None:
    settings = engine_settings(tmp_path / "bookie", entry_log_bytes_max=64 * 1024 * 1024)
    async with open_ledger_store(settings) as store:
        await write_entries(store, [1, 2, 3, 4], 200)
        await register_ledgers(metadata, [4])
        gc = BookieGarbageCollector(
            store, metadata, gc_settings(active_log_roll_garbage_bytes=1024, minor_compaction_threshold=0)
        )
        result = await gc.run_once(force_major=True)
        assert result is not None
        assert result.sealed_active_log is not None
        assert result.deleted_logs == [], "ledger 4 still lives in it"
        assert result.compaction is not None
        assert result.compaction.logs_compacted == 1
        assert result.reclaimed_bytes > 0
        assert_readable(store, (4,), 200)

"""The disk engine through the LedgerStore contract: adds, reads, fencing, LAC, deletion, checkpoints,
restart and replay (idempotent), back-pressure and the garbage-collection primitives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from magnetar.bookkeeper.bookie.storage.engine import DbLedgerStorage, Relocation, open_ledger_store
from magnetar.bookkeeper.bookie.storage.errors import (
    LedgerFencedError,
    NoEntryError,
    NoLedgerError,
    StorageBusyError,
    StorageClosedError,
)
from magnetar.bookkeeper.bookie.storage.journal_files import list_journal_ids
from magnetar.bookkeeper.bookie.storage.ledger_store import LedgerStore
from magnetar.bookkeeper.bookie.storage.log_mark import LogMark, encode_mark, write_file_durably
from magnetar.bookkeeper.bookie.storage.settings import BookieStorageSettings

KEY = b"k" * 20


def noop(_: BaseException | None) -> None:
    return None


def contract(store: DbLedgerStorage) -> LedgerStore:
    return store  # mypy checks that the engine implements the LedgerStore protocol


async def add_all(
    store: DbLedgerStorage, make_entry: Any, ledger_id: int, entry_ids: range, durability: Any
) -> None:
    for entry_id in entry_ids:
        await store.wait_writable(200)
        body = make_entry(ledger_id, entry_id)
        store.add_entry(ledger_id, entry_id, body, durability.callback(f"{ledger_id}:{entry_id}"))
    await store.journal.drain()


async def test_an_entry_is_readable_at_once_and_acked_after_the_journal_sync(
    make_settings: Any, make_entry: Any, durability: Any
) -> None:
    async with open_ledger_store(make_settings()) as store:
        contract(store).create_ledger(1, KEY, durability.callback("create"))
        store.add_entry(1, 0, make_entry(1, 0), durability.callback("add"))
        assert store.read_entry(1, 0) == make_entry(1, 0)  # from the write cache, before any sync
        assert durability.results == []
        await durability.wait_for(2)
        assert durability.results == [("create", None), ("add", None)]
        assert store.ledger_state(1) is not None
        assert list(store.ledgers()) == [1]


async def test_journal_figures_for_the_metrics_count_syncs_records_and_bytes(
    make_settings: Any, make_entry: Any, durability: Any
) -> None:
    async with open_ledger_store(make_settings()) as store:
        contract(store).create_ledger(1, KEY, durability.callback("create"))
        await add_all(store, make_entry, 1, range(5), durability)
        stats = store.stats()
    journal = store.journal.stats
    assert stats["journal_records"] == journal.records == 6  # the ledger's key and five entries
    assert stats["journal_bytes"] == journal.bytes > 5 * len(make_entry(1, 0))
    assert stats["journal_syncs"] == journal.syncs >= 1
    assert stats["journal_inline_syncs"] == journal.inline_syncs
    assert stats["journal_failed_syncs"] == 0
    assert stats["journal_queued_bytes"] == 0
    assert stats["journal_sync_seconds"] >= stats["journal_sync_seconds_max"] > 0


async def test_reads_after_checkpoint_and_restart_come_from_the_entry_logs(
    make_settings: Any, make_entry: Any, durability: Any
) -> None:
    settings = make_settings(entry_log_bytes_max=64 * 1024)
    async with open_ledger_store(settings) as store:
        for ledger_id in (1, 2, 3):
            store.create_ledger(ledger_id, KEY, noop)
        for entry_id in range(300):
            for ledger_id in (1, 2, 3):
                await store.wait_writable(200)
                body = make_entry(ledger_id, entry_id)
                store.add_entry(ledger_id, entry_id, body, durability.callback("a"))
        await durability.wait_for(900)
        await store.checkpoint()
        assert len(store.entry_logger.log_ids()) >= 1  # 64 KiB logs rolled
    async with open_ledger_store(settings) as store:
        assert store.replay_stats is not None
        assert store.replay_stats.entries == 0  # everything was checkpointed
        for ledger_id in (1, 2, 3):
            for entry_id in range(300):
                assert store.read_entry(ledger_id, entry_id) == make_entry(ledger_id, entry_id)
            assert store.read_entry(ledger_id, -1) == make_entry(ledger_id, 299)
    assert durability.errors == []


async def test_catch_up_reads_are_served_by_read_ahead(
    make_settings: Any, make_entry: Any, durability: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(read_ahead_entries=20)
    async with open_ledger_store(settings) as store:
        store.create_ledger(5, KEY, noop)
        await add_all(store, make_entry, 5, range(100), durability)
    async with open_ledger_store(settings) as store:
        calls = []
        real = store.entry_logger.read_run

        def counting_read_run(*args: Any, **kwargs: Any) -> Any:
            calls.append(args[2])
            return real(*args, **kwargs)

        monkeypatch.setattr(store.entry_logger, "read_run", counting_read_run)
        for entry_id in range(100):
            assert store.read_entry(5, entry_id) == make_entry(5, entry_id)
        assert calls == [0, 21, 42, 63, 84]


async def test_unknown_ledgers_and_entries(make_settings: Any, make_entry: Any, durability: Any) -> None:
    async with open_ledger_store(make_settings()) as store:
        with pytest.raises(NoLedgerError):
            store.read_entry(9, 0)
        with pytest.raises(NoLedgerError):
            store.add_entry(9, 0, make_entry(9, 0), noop)
        with pytest.raises(NoLedgerError):
            store.fence(9, noop)
        store.create_ledger(9, KEY, noop)
        with pytest.raises(NoEntryError):
            store.read_entry(9, -1)
        await add_all(store, make_entry, 9, range(3), durability)
        await store.checkpoint()
        with pytest.raises(NoEntryError):
            store.read_entry(9, 3)
        with pytest.raises(NoEntryError):
            store.read_entry(9, 1_000_000)


async def test_fence_and_explicit_lac_are_durable_and_survive_restart(
    make_settings: Any, durability: Any
) -> None:
    settings = make_settings()
    async with open_ledger_store(settings, final_checkpoint=False) as store:
        store.create_ledger(3, KEY, noop)
        store.fence(3, durability.callback("fence"))
        state = store.ledger_state(3)
        assert state is not None
        assert state.fenced  # effective at once, before the journal sync
        store.set_explicit_lac(3, b"lac-body", durability.callback("lac"))
        await durability.wait_for(2)
    async with open_ledger_store(settings) as store:
        state = store.ledger_state(3)
        assert state is not None
        assert state.fenced
        assert state.explicit_lac_body == b"lac-body"
        assert state.master_key == KEY
    assert durability.errors == []


async def test_create_ledger_is_idempotent_for_the_same_key(make_settings: Any, durability: Any) -> None:
    async with open_ledger_store(make_settings()) as store:
        store.create_ledger(4, KEY, durability.callback("first"))
        store.create_ledger(4, KEY, durability.callback("again"))
        with pytest.raises(ValueError, match="another master key"):
            store.create_ledger(4, b"x" * 20, noop)
        await durability.wait_for(2)
    assert durability.errors == []


async def test_a_deleted_ledger_stays_deleted_across_replay(
    make_settings: Any, make_entry: Any, durability: Any
) -> None:
    settings = make_settings()
    async with open_ledger_store(settings, final_checkpoint=False) as store:
        for ledger_id in (1, 2):
            store.create_ledger(ledger_id, KEY, noop)
            await add_all(store, make_entry, ledger_id, range(10), durability)
        await store.checkpoint()
        await add_all(store, make_entry, 1, range(10, 20), durability)
        store.delete_ledger(1)
        store.delete_ledger(1)  # idempotent
        assert store.ledger_state(1) is None
        with pytest.raises(NoLedgerError):
            store.read_entry(1, 0)
        await store.journal.drain()
    async with open_ledger_store(settings) as store:
        assert list(store.ledgers()) == [2]
        assert store.replay_stats is not None
        assert store.replay_stats.skipped_entries == 10
        assert list(store.index.entries_of(1)) == []
        assert store.read_entry(2, 9) == make_entry(2, 9)


async def test_replaying_records_already_checkpointed_changes_nothing(
    make_settings: Any, make_entry: Any, durability: Any
) -> None:
    settings = make_settings(journal_max_backups=5)  # the journal files must outlive the checkpoint
    async with open_ledger_store(settings, final_checkpoint=False) as store:
        first_mark = store.journal.synced_mark
        for ledger_id in (1, 2):
            store.create_ledger(ledger_id, KEY, noop)
        await add_all(store, make_entry, 1, range(0, 200, 2), durability)  # a striped ledger
        await add_all(store, make_entry, 2, range(150), durability)
        store.fence(2, noop)
        await store.checkpoint()
        await add_all(store, make_entry, 2, range(150, 160), durability)
    # Pretend the checkpoint's mark was never persisted: everything is replayed onto flushed state.
    write_file_durably(settings.mark_path, encode_mark(first_mark))
    for _ in range(2):
        async with open_ledger_store(settings, final_checkpoint=False) as store:
            assert store.replay_stats is not None
            assert store.replay_stats.entries == 260
            ranges = store._ledgers.ranges
            assert (ranges[1].first, ranges[1].last, ranges[1].count) == (0, 198, 100)
            assert (ranges[2].first, ranges[2].last, ranges[2].count) == (0, 159, 160)
            assert store.index.count_entries(1, 0, 198) == 100
            with pytest.raises(NoEntryError):
                store.read_entry(1, 7)  # a gap of the striped ledger: never stored here
            assert store.read_entry(2, 159) == make_entry(2, 159)
            state = store.ledger_state(2)
            assert state is not None
            assert state.fenced
        write_file_durably(settings.mark_path, encode_mark(first_mark))


async def test_a_full_write_cache_swaps_and_checkpoints_by_itself(
    make_settings: Any, make_entry: Any, durability: Any
) -> None:
    settings = make_settings(write_cache_bytes_max=128 * 1024, entry_bytes_max=8 * 1024)
    async with open_ledger_store(settings) as store:
        store.create_ledger(1, KEY, noop)
        await add_all(store, make_entry, 1, range(2000), durability)
        assert store.checkpoints >= 2
        for entry_id in range(0, 2000, 97):
            assert store.read_entry(1, entry_id) == make_entry(1, entry_id)
    assert durability.errors == []


def gate_flushes(store: DbLedgerStorage, monkeypatch: pytest.MonkeyPatch) -> trio.Event:
    """Hold every write-cache flush until the returned event is set."""
    gate = trio.Event()
    real_flush = store._flusher.flush

    async def gated_flush(*args: Any) -> Any:
        await gate.wait()
        return await real_flush(*args)

    monkeypatch.setattr(store._flusher, "flush", gated_flush)
    return gate


def fill_both_halves(store: DbLedgerStorage, make_entry: Any, durability: Any, ledger_id: int = 1) -> int:
    """Add entries until the active half is full while the other is being flushed; the next entry id."""
    entry_id = 0
    while store._pending is None or store._cache.has_room(len(make_entry(ledger_id, entry_id))):
        body = make_entry(ledger_id, entry_id)
        store.add_entry(ledger_id, entry_id, body, durability.callback(f"{ledger_id}:{entry_id}"))
        entry_id += 1
    return entry_id


async def test_adds_are_refused_at_once_while_both_halves_are_full_without_a_throttle_time(
    make_settings: Any, make_entry: Any, durability: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(
        write_cache_bytes_max=64 * 1024, entry_bytes_max=4 * 1024, write_throttle_ms_max=0
    )
    async with open_ledger_store(settings) as store:
        gate = gate_flushes(store, monkeypatch)
        store.create_ledger(1, KEY, noop)
        refused_at = fill_both_halves(store, make_entry, durability)
        with pytest.raises(StorageBusyError, match="write_cache_bytes_max"):
            store.add_entry(1, refused_at, make_entry(1, refused_at), noop)

        async def add_when_writable() -> None:
            await store.wait_writable(200)
            store.add_entry(1, refused_at, make_entry(1, refused_at), durability.callback("late"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(add_when_writable)
            await trio.testing.wait_all_tasks_blocked()
            gate.set()
        await durability.wait_for(refused_at + 1)
    assert durability.errors == []


async def test_adds_wait_for_the_flush_while_both_halves_are_full_and_keep_their_order(
    make_settings: Any, make_entry: Any, durability: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BookKeeper's write cache throttle: a full cache delays adds instead of failing them."""
    settings = make_settings(write_cache_bytes_max=64 * 1024, entry_bytes_max=4 * 1024)
    async with open_ledger_store(settings) as store:
        gate = gate_flushes(store, monkeypatch)
        store.create_ledger(1, KEY, noop)
        first_waiting = fill_both_halves(store, make_entry, durability)
        for entry_id in range(first_waiting, first_waiting + 20):  # accepted, not refused
            store.add_entry(1, entry_id, make_entry(1, entry_id), durability.callback(f"1:{entry_id}"))
        assert store.throttled_adds == 20
        await trio.testing.wait_all_tasks_blocked()
        assert f"1:{first_waiting}" not in durability.names  # waiting, neither stored nor refused
        gate.set()
        await durability.wait_for(first_waiting + 20)
        for entry_id in range(first_waiting + 20):
            assert store.read_entry(1, entry_id) == make_entry(1, entry_id)
    assert durability.errors == []
    waiting = [name for name in durability.names if int(name.split(":")[1]) >= first_waiting]
    assert waiting == [f"1:{i}" for i in range(first_waiting, first_waiting + 20)]


async def test_an_add_that_waits_longer_than_the_throttle_time_is_refused(
    make_settings: Any, make_entry: Any, durability: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(
        write_cache_bytes_max=64 * 1024, entry_bytes_max=4 * 1024, write_throttle_ms_max=50
    )
    async with open_ledger_store(settings) as store:
        gate = gate_flushes(store, monkeypatch)
        store.create_ledger(1, KEY, noop)
        waiting = fill_both_halves(store, make_entry, durability)
        store.add_entry(1, waiting, make_entry(1, waiting), durability.callback("late"))
        await durability.wait_for(waiting + 1)  # every earlier add durable, and this one refused
        error = dict(durability.results)["late"]
        assert isinstance(error, StorageBusyError)
        assert "write_throttle_ms_max=50" in str(error)
        gate.set()
    assert len(durability.errors) == 1


async def test_a_fence_fails_the_waiting_adds_of_its_ledger_only(
    make_settings: Any, make_entry: Any, durability: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(write_cache_bytes_max=64 * 1024, entry_bytes_max=4 * 1024)
    async with open_ledger_store(settings) as store:
        gate = gate_flushes(store, monkeypatch)
        store.create_ledger(1, KEY, noop)
        store.create_ledger(2, KEY, noop)
        waiting = fill_both_halves(store, make_entry, durability)
        store.add_entry(1, waiting, make_entry(1, waiting), durability.callback("fenced"))
        store.add_entry(2, 0, make_entry(2, 0), durability.callback("other"))
        store.fence(1, durability.callback("fence"))
        assert durability.results[-1][0] == "fenced"
        assert isinstance(durability.results[-1][1], LedgerFencedError)
        gate.set()
        await durability.wait_for(waiting + 3)
        assert store.read_entry(2, 0) == make_entry(2, 0)
        with pytest.raises(NoEntryError):
            store.read_entry(1, waiting)
    assert [type(error) for error in durability.errors] == [LedgerFencedError]


async def test_waiting_adds_are_bounded_to_half_the_write_cache(
    make_settings: Any, make_entry: Any, durability: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(write_cache_bytes_max=64 * 1024, entry_bytes_max=4 * 1024)
    async with open_ledger_store(settings) as store:
        gate = gate_flushes(store, monkeypatch)
        store.create_ledger(1, KEY, noop)
        entry_id = fill_both_halves(store, make_entry, durability)
        refusal: StorageBusyError | None = None
        while refusal is None:
            try:
                store.add_entry(1, entry_id, make_entry(1, entry_id), durability.callback(f"1:{entry_id}"))
                entry_id += 1
            except StorageBusyError as exc:
                refusal = exc
        assert "already wait for room" in str(refusal)
        assert store.throttled_adds > 0
        assert store.waiting_add_bytes <= settings.write_cache_bytes_max // 2
        gate.set()
        await durability.wait_for(entry_id)
    assert durability.errors == []


async def test_checkpoints_delete_old_journal_files_but_keep_backups(
    make_settings: Any, make_entry: Any, durability: Any
) -> None:
    settings = make_settings(
        journal_file_bytes_max=64 * 1024, journal_max_backups=1, write_cache_bytes_max=4 * 1024 * 1024
    )
    async with open_ledger_store(settings) as store:
        store.create_ledger(1, KEY, noop)
        for entry_id in range(600):
            store.add_entry(1, entry_id, make_entry(1, entry_id, b"j" * 1000), durability.callback("a"))
            if entry_id % 50 == 49:
                await store.journal.drain()
        assert store.checkpoints == 1  # only the one at startup
        assert len(list_journal_ids(settings.journal_path)) > 3
        await store.checkpoint()
        ids = list_journal_ids(settings.journal_path)
        assert len(ids) == 2  # the current file and one backup
        assert ids[-1] == store.journal.synced_mark.file_id


async def test_the_store_refuses_work_after_closing(make_settings: Any, make_entry: Any) -> None:
    async with open_ledger_store(make_settings()) as store:
        store.create_ledger(1, KEY, noop)
    with pytest.raises(StorageClosedError):
        store.add_entry(1, 0, make_entry(1, 0), noop)
    with pytest.raises(StorageClosedError):
        store.read_entry(1, 0)


async def test_compaction_primitives_move_a_log_and_never_overwrite_newer_locations(
    make_settings: Any, make_entry: Any, durability: Any
) -> None:
    settings: BookieStorageSettings = make_settings(entry_log_bytes_max=64 * 1024)
    async with open_ledger_store(settings) as store:
        for ledger_id in (1, 2):
            store.create_ledger(ledger_id, KEY, noop)
            await add_all(store, make_entry, ledger_id, range(400), durability)
        await store.checkpoint()
        logger = store.entry_logger
        victim = logger.log_ids()[0]
        assert logger.ledgers_map(victim) is not None  # rolled: GC reads usage without a scan
        # What a compactor does with the primitives: copy every entry of the log, point the index at the
        # copies (only where it still points at the old record), then delete the log.
        scanned = await trio.to_thread.run_sync(lambda: list(logger.scan(victim)))
        bodies = [store.read_entry(e.ledger_id, e.entry_id) for e in scanned]
        new = await store.append_to_entry_log(bodies)
        moves = [
            Relocation(e.ledger_id, e.entry_id, (victim << 32) | e.offset, loc)
            for e, loc in zip(scanned, new, strict=True)
        ]
        stale = Relocation(1, 3, 12345, 67890)  # the index no longer says 12345 for 1:3
        assert await store.update_locations([*moves, stale]) == len(moves)
        assert store.index.get_location(1, 3) != 67890
        await store.delete_entry_log(victim)
        assert victim not in logger.log_ids()
    async with open_ledger_store(settings) as store:
        for ledger_id in (1, 2):
            for entry_id in range(400):
                assert store.read_entry(ledger_id, entry_id) == make_entry(ledger_id, entry_id)


async def test_settings_paths(tmp_path: Path) -> None:
    settings = BookieStorageSettings(data_dir=tmp_path / "d", journal_dir=tmp_path / "j")
    assert settings.journal_path == tmp_path / "j"
    assert settings.entry_log_path == tmp_path / "d" / "ledgers"
    assert LogMark(1, 2) < LogMark(2, 0)

"""Journal: group commit, durability callbacks, bounded memory, write failures, file rolling."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

from magnetar.bookkeeper.bookie.storage import journal_files
from magnetar.bookkeeper.bookie.storage.errors import (
    DiskFullError,
    StorageBusyError,
    StorageClosedError,
    StorageIOError,
)
from magnetar.bookkeeper.bookie.storage.journal import Journal
from magnetar.bookkeeper.bookie.storage.journal_files import (
    JournalReplayReader,
    JournalWriterFile,
    list_journal_ids,
)
from magnetar.bookkeeper.bookie.storage.journal_format import RecordKind
from magnetar.bookkeeper.bookie.storage.log_mark import LogMark


class GatedWriter(JournalWriterFile):
    """A real journal file whose syncs wait for the test to open a gate."""

    def __init__(self, directory: Path, **kwargs: int) -> None:
        super().__init__(directory, **kwargs)
        self.gate = threading.Event()
        self.gate.set()
        self.sync_threads: list[int] = []
        """The thread of each sync (the event loop's for inline syncs)."""
        self.clock: trio.testing.MockClock | None = None
        self.sync_s = 0.0
        """With ``clock``, how long each sync takes (the clock jumps by that much)."""

    def write_and_sync(self, data: bytes | bytearray) -> LogMark:
        self.sync_threads.append(threading.get_ident())
        self.gate.wait()
        if self.clock is not None:
            self.clock.jump(self.sync_s)
        return super().write_and_sync(data)


def make_writer(path: Path, **overrides: int) -> GatedWriter:
    options = {"first_file_id": 1, "file_bytes_max": 1 << 20, "preallocate_bytes": 64 * 1024}
    options.update(overrides)
    return GatedWriter(path, **options)


def fail_the_first_batch_sync(monkeypatch: pytest.MonkeyPatch, error: OSError) -> None:
    """Creating the journal file syncs fine, the first batch's fdatasync raises ``error``, later ones work."""
    real_fdatasync = os.fdatasync
    failures = iter([False, True])

    def flaky_fdatasync(fd: int) -> None:
        if next(failures, False):
            raise error
        real_fdatasync(fd)

    monkeypatch.setattr(journal_files.os, "fdatasync", flaky_fdatasync)


@asynccontextmanager
async def running_journal(writer: JournalWriterFile, **overrides: object) -> AsyncIterator[Journal]:
    options: dict[str, object] = {
        "group_wait_ms": 2.0,
        "buffered_bytes_max": 64 * 1024,
        "queue_bytes_max": 1 << 20,
        "flush_when_queue_empty": True,
    }
    options.update(overrides)
    journal = Journal(writer, **options)
    await journal.open()
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        yield journal
        await journal.drain()
        nursery.cancel_scope.cancel()
    journal.close()


ALWAYS_INLINE: dict[str, object] = {"inline_sync_bytes_max": 1 << 20, "inline_sync_ms_max": 60_000.0}
"""Syncs stay on the loop's thread however long the last one took (a loaded host's fdatasync can exceed the
default 5 ms, which would move the next sync to the journal thread): the tests below check where a burst's
sync runs, not the policy's timing."""


def read_all(path: Path, start: LogMark | None = None) -> tuple[list[tuple[int, bytes]], JournalReplayReader]:
    reader = JournalReplayReader(path, start, chunk_bytes=4096, record_bytes_max=1 << 20)
    records = []
    while (batch := reader.read_batch()) is not None:
        records.extend(batch.records)
    reader.close()
    return records, reader


async def test_callbacks_fire_in_order_after_the_sync(tmp_path: Path, durability) -> None:
    writer = make_writer(tmp_path)
    async with running_journal(writer) as journal:
        writer.gate.clear()
        for i in range(20):
            journal.append_entry(b"entry %d" % i, durability.callback(f"e{i}"))
        journal.append_fence(7, durability.callback("fence"))
        await trio.testing.wait_all_tasks_blocked()
        assert durability.results == []  # the sync has not returned yet
        writer.gate.set()
        await durability.wait_for(21)
    assert durability.names == [f"e{i}" for i in range(20)] + ["fence"]
    assert durability.errors == []
    records, _ = read_all(tmp_path)
    assert [payload for _, payload in records[:20]] == [b"entry %d" % i for i in range(20)]
    assert records[20] == (RecordKind.FENCE, (7).to_bytes(8, "big"))


async def test_appends_of_one_scheduler_pass_share_one_sync(tmp_path: Path, durability) -> None:
    async with running_journal(make_writer(tmp_path)) as journal:
        for i in range(500):
            journal.append_entry(b"x" * 100, durability.callback(str(i)))
        await journal.drain()
        assert journal.stats.syncs == 1
        assert journal.stats.records == 500
        first_mark = journal.synced_mark
        journal.append_entry(b"y", durability.callback("late"))
        await journal.drain()
        assert journal.stats.syncs == 2
        assert journal.synced_mark > first_mark


async def test_an_idle_journals_small_batch_is_synced_on_the_event_loops_thread(
    tmp_path: Path, durability
) -> None:
    writer = make_writer(tmp_path)
    async with running_journal(writer, inline_sync_bytes_max=4096) as journal:
        journal.append_entry(b"small", durability.callback("small"))
        await durability.wait_for(1)
        assert journal.stats.syncs == journal.stats.inline_syncs == 1
    assert writer.sync_threads == [threading.get_ident()]
    assert durability.results == [("small", None)]
    records, _ = read_all(tmp_path)
    assert [payload for _, payload in records] == [b"small"]


async def test_a_batch_over_the_inline_limit_is_synced_in_the_journal_thread(
    tmp_path: Path, durability
) -> None:
    writer = make_writer(tmp_path)
    async with running_journal(writer, inline_sync_bytes_max=4096) as journal:
        journal.append_entry(b"b" * 5000, durability.callback("big"))
        await durability.wait_for(1)
        assert (journal.stats.syncs, journal.stats.inline_syncs) == (1, 0)
    assert threading.get_ident() not in writer.sync_threads
    assert durability.errors == []


async def test_after_a_slow_sync_batches_go_to_the_thread_until_a_sync_is_quick_again(
    tmp_path: Path, durability, mock_clock: trio.testing.MockClock
) -> None:
    """A sync that took longer than ``inline_sync_ms_max`` (a slow disk) sends the next batch to the journal
    thread, so the loop stays free while the disk is slow; a quick sync there brings the journal back."""
    writer = make_writer(tmp_path)
    writer.clock = mock_clock
    async with running_journal(writer, inline_sync_bytes_max=4096, inline_sync_ms_max=5.0) as journal:
        for name, sync_s in (("slow", 0.006), ("next", 0.001), ("back", 0.001)):
            writer.sync_s = sync_s
            journal.append_entry(name.encode(), durability.callback(name))
            await durability.wait_for(len(durability.names) + 1)
        assert (journal.stats.syncs, journal.stats.inline_syncs) == (3, 2)
    loop = threading.get_ident()
    assert [thread == loop for thread in writer.sync_threads] == [True, False, True]
    assert durability.names == ["slow", "next", "back"]


async def test_a_failed_slow_sync_sends_the_next_batch_to_the_thread(
    tmp_path: Path, durability, mock_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_the_first_batch_sync(monkeypatch, OSError(errno.EIO, "Input/output error"))
    writer = make_writer(tmp_path)
    writer.clock = mock_clock
    writer.sync_s = 0.006
    async with running_journal(writer, inline_sync_bytes_max=4096, inline_sync_ms_max=5.0) as journal:
        journal.append_entry(b"lost", durability.callback("lost"))
        await durability.wait_for(1)
        journal.append_entry(b"kept", durability.callback("kept"))
        await durability.wait_for(2)
        assert (journal.stats.failed_syncs, journal.stats.syncs, journal.stats.inline_syncs) == (1, 1, 0)
    assert threading.get_ident() == writer.sync_threads[0] != writer.sync_threads[1]
    assert [name for name, error in durability.results if error is None] == ["kept"]


async def test_group_wait_holds_a_batch_open_until_the_oldest_record_waited(
    tmp_path: Path, durability, autojump_clock: trio.testing.MockClock
) -> None:
    async with running_journal(
        make_writer(tmp_path), group_wait_ms=50.0, flush_when_queue_empty=False
    ) as journal:
        started = trio.current_time()
        journal.append_entry(b"first", durability.callback("first"))
        await trio.sleep(0.01)
        assert durability.results == []
        journal.append_entry(b"second", durability.callback("second"))
        await durability.wait_for(2)
        assert trio.current_time() - started >= 0.05
        assert journal.stats.syncs == 1


async def test_a_full_batch_flushes_before_the_group_wait(
    tmp_path: Path, durability, autojump_clock: trio.testing.MockClock
) -> None:
    async with running_journal(
        make_writer(tmp_path), group_wait_ms=10_000.0, buffered_bytes_max=4096, flush_when_queue_empty=False
    ) as journal:
        started = trio.current_time()
        journal.append_entry(b"z" * 5000, durability.callback("big"))
        await durability.wait_for(1)
        assert trio.current_time() - started < 10


async def test_appends_beyond_the_queue_bound_are_refused_until_capacity_returns(
    tmp_path: Path, durability
) -> None:
    writer = make_writer(tmp_path)
    async with running_journal(writer, queue_bytes_max=64 * 1024, buffered_bytes_max=8192) as journal:
        writer.gate.clear()
        refused = 0
        while journal.has_capacity(1000):
            journal.append_entry(b"q" * 1000, durability.callback(str(refused)))
            refused += 1
        with pytest.raises(StorageBusyError, match="journal_queue_bytes_max=65536"):
            journal.append_entry(b"q" * 1000, durability.callback("refused"))
        assert journal.queued_bytes <= 64 * 1024
        assert not journal.has_capacity(1000)
        writer.gate.set()
        await journal.wait_for_capacity(1000)
        journal.append_entry(b"q" * 1000, durability.callback("after"))
        await durability.wait_for(refused + 1)
    assert durability.errors == []


async def test_a_failed_sync_fails_its_batch_and_the_next_batch_goes_to_a_new_file(
    tmp_path: Path, durability, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_the_first_batch_sync(monkeypatch, OSError(errno.ENOSPC, "No space left on device"))
    async with running_journal(make_writer(tmp_path)) as journal:
        journal.append_entry(b"lost", durability.callback("lost"))
        await durability.wait_for(1)
        mark_after_failure = journal.synced_mark
        journal.append_entry(b"kept", durability.callback("kept"))
        await durability.wait_for(2)
        assert journal.stats.failed_syncs == 1
    assert isinstance(durability.results[0][1], DiskFullError)
    assert durability.results[1] == ("kept", None)
    assert mark_after_failure.file_id == 1
    assert list_journal_ids(tmp_path) == [1, 2]
    records, _ = read_all(tmp_path, LogMark(2, 0))
    assert [payload for _, payload in records] == [b"kept"]


async def test_closing_fails_what_was_never_synced_and_refuses_appends(tmp_path: Path, durability) -> None:
    journal = Journal(
        make_writer(tmp_path),
        group_wait_ms=2,
        buffered_bytes_max=4096,
        queue_bytes_max=65536,
        flush_when_queue_empty=True,
    )
    await journal.open()
    journal.append_entry(b"never synced", durability.callback("pending"))
    journal.close()
    assert isinstance(durability.results[0][1], StorageClosedError)
    with pytest.raises(StorageClosedError):
        journal.append_entry(b"late", durability.callback("late"))
    with pytest.raises(StorageClosedError):
        journal.append_fence(1, durability.callback("late fence"))
    assert len(durability.results) == 1


async def test_files_roll_at_the_size_limit_and_replay_reads_across_them(tmp_path: Path) -> None:
    writer = make_writer(tmp_path, file_bytes_max=64 * 1024, preallocate_bytes=16 * 1024)
    payloads = [bytes([i % 251]) * 900 for i in range(300)]

    def noop(_: BaseException | None) -> None:
        return None

    async with running_journal(writer, buffered_bytes_max=8192) as journal:
        for i, payload in enumerate(payloads):
            journal.append_entry(payload, noop)
            if i % 10 == 9:
                await journal.drain()
    ids = list_journal_ids(tmp_path)
    assert len(ids) >= 4
    for file_id in ids[:-1]:
        size = (tmp_path / journal_files.journal_file_name(file_id)).stat().st_size
        assert size <= 64 * 1024 + 16 * 1024
    records, reader = read_all(tmp_path)
    assert [payload for _, payload in records] == payloads
    assert reader.stops == []


def test_file_creation_preallocates_and_writes_a_header(tmp_path: Path) -> None:
    writer = make_writer(tmp_path, preallocate_bytes=128 * 1024)
    mark = writer.open()
    assert mark == LogMark(1, 512)
    path = tmp_path / journal_files.journal_file_name(1)
    assert path.stat().st_size == 128 * 1024
    assert path.read_bytes()[:4] == b"MGJL"
    writer.close()


async def test_a_bursts_batch_is_synced_by_its_release_on_the_callers_thread(
    tmp_path: Path, durability
) -> None:
    """A connection's reader appends a read's requests between hold() and release(): they do not wake the
    writer task, and release() syncs them right away on the caller's thread, callbacks included."""
    writer = make_writer(tmp_path)
    async with running_journal(writer, **ALWAYS_INLINE) as journal:
        journal.hold()
        for i in range(5):
            journal.append_entry(b"burst %d" % i, durability.callback(str(i)))
        await trio.testing.wait_all_tasks_blocked()
        assert journal.stats.syncs == 0  # the writer task was not woken
        journal.release()
        assert durability.names == [str(i) for i in range(5)]  # answered before release() returned
        assert durability.errors == []
        assert (journal.stats.syncs, journal.stats.inline_syncs, journal.stats.records) == (1, 1, 5)
        await trio.testing.wait_all_tasks_blocked()
        assert journal.stats.syncs == 1  # the writer task found nothing left to sync
        journal.append_entry(b"after", durability.callback("after"))  # still wakes the writer task
        with trio.fail_after(5):
            await durability.wait_for(6)
        assert journal.stats.syncs == 2
    assert writer.sync_threads == [threading.get_ident()] * 2
    records, _ = read_all(tmp_path)
    assert [payload for _, payload in records] == [b"burst %d" % i for i in range(5)] + [b"after"]


async def test_a_burst_leaves_its_batch_to_the_writer_task_while_another_task_is_ready(
    tmp_path: Path, durability
) -> None:
    """Another task ready to run might append to the same batch in this scheduler pass (another connection's
    reader, say): release() then wakes the writer task, which syncs once appends have drained."""
    async with running_journal(make_writer(tmp_path), **ALWAYS_INLINE) as journal:

        async def other_reader() -> None:
            journal.append_entry(b"other", durability.callback("other"))

        async with trio.open_nursery() as nursery:
            journal.hold()
            journal.append_entry(b"mine", durability.callback("mine"))
            nursery.start_soon(other_reader)  # ready to run when the burst ends
            journal.release()
            assert durability.results == []
        await durability.wait_for(2)
        assert durability.names == ["mine", "other"]
        assert journal.stats.syncs == 1


async def test_a_burst_leaves_big_batches_and_group_waits_to_the_writer_task(
    tmp_path: Path, durability, autojump_clock: trio.testing.MockClock
) -> None:
    writer = make_writer(tmp_path)
    async with running_journal(writer, inline_sync_bytes_max=4096) as journal:
        journal.hold()
        journal.append_entry(b"b" * 5000, durability.callback("big"))
        journal.release()
        assert durability.results == []
        await durability.wait_for(1)
        assert (journal.stats.syncs, journal.stats.inline_syncs) == (1, 0)  # in the journal thread
    assert threading.get_ident() not in writer.sync_threads
    (tmp_path / "group").mkdir()
    async with running_journal(
        make_writer(tmp_path / "group"), group_wait_ms=50.0, flush_when_queue_empty=False
    ) as journal:
        started = trio.current_time()
        journal.hold()
        journal.append_entry(b"waits", durability.callback("waits"))
        journal.release()
        await durability.wait_for(2)
        assert trio.current_time() - started >= 0.049  # the group wait still holds the batch open


async def test_a_failed_sync_at_the_end_of_a_burst_fails_its_batch_only(
    tmp_path: Path, durability, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_the_first_batch_sync(monkeypatch, OSError(errno.EIO, "Input/output error"))
    async with running_journal(make_writer(tmp_path), **ALWAYS_INLINE) as journal:
        journal.hold()
        journal.append_entry(b"lost", durability.callback("lost"))
        journal.release()
        assert [name for name, _ in durability.results] == ["lost"]
        assert isinstance(durability.results[0][1], StorageIOError)
        journal.hold()
        journal.append_entry(b"kept", durability.callback("kept"))
        journal.release()
        await durability.wait_for(2)
        assert durability.results[1] == ("kept", None)
        assert journal.stats.failed_syncs == 1
    assert list_journal_ids(tmp_path) == [1, 2]  # the failed batch's file was abandoned
    records, _ = read_all(tmp_path, LogMark(2, 0))
    assert [payload for _, payload in records] == [b"kept"]

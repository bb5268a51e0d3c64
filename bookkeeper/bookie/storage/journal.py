"""The journal: BookKeeper's write-ahead log with group commit (``Journal`` + ``ForceWriteThread``,
docs/upstream.md, BookKeeper §5.1).

Theory of operation. Appends are cheap and synchronous on the trio thread: a record is encoded straight into
the current batch (a :class:`~.journal_format.JournalBatch`: record headers, metadata records and small
entries in a ``bytearray``, each entry body of 512 bytes or more by reference, not copied; the writer hands
the parts to ``pwritev``) and its durability callback queued beside it. One writer task owns the
file. It waits for a batch to form, writes it and fdatasyncs the file, and only after the sync returns
advances the synced mark and fires the batch's callbacks, in append order. Requests that arrive during a
sync form the next batch, so batches grow with load (group commit) and shrink to one record when the
bookie is idle.

Where the sync runs. While syncs are quick - the last one took at most ``journal_inline_sync_ms_max`` - a
batch of at most ``journal_inline_sync_bytes_max`` is written and synced on the loop's own thread: handing
it to the journal thread (a :class:`~magnetar.bookkeeper.runtime.sync_thread.SyncThread` the task owns)
costs two wake-ups per group commit (the thread, then the loop with its answer), more CPU here than the
sync itself. The loop is blocked meanwhile (in a standalone that is the broker's loop too); requests that
arrive wait in the socket buffers and are read, appended and synced together right after. Once a sync is
slow or fails (a slow, busy or failing disk), the next batches go to the journal thread, so the loop keeps
serving reads, pings and the admin API while the disk is slow; a quick sync there brings the journal back.
On this 2-core VM (RESULTS.md, 2026-11-22), syncing every batch inline instead of only an idle journal's
small ones cut a saturated 3-bookie cluster's bookie CPU per message by a quarter and raised its
throughput by 15 %.

A batch is flushed when, as in BookKeeper, the oldest record has waited ``journal_group_wait_ms``, or the
batch holds ``journal_buffered_bytes_max`` bytes, or - with ``journal_flush_when_queue_empty`` - appends
have drained: one pass of the trio scheduler produced no new record.

Bursts. A bookie connection's reader appends the requests of what it read as one burst between
:meth:`Journal.hold` and :meth:`Journal.release`, without an ``await`` in between. The burst's appends do not
wake the writer task; :meth:`~Journal.release` syncs the batch right there, on the reader's own thread, when
that is what the writer task would do next anyway - appends drain the queue, nothing else is ready to run on
the loop (so no other append could join the batch in the next pass), the batch may be synced inline and no
sync is in progress - and otherwise wakes the writer task as an append would have. A group commit then
costs the loop no task switches: the reader reads, appends, syncs and answers in one step, then waits for
the socket again (RESULTS.md, 2026-11-26: 14 % less bookie CPU per message in a saturated 3-bookie cluster).

Memory is bounded: bytes appended but not yet durable never exceed ``journal_queue_bytes_max``. An append
beyond it is refused with :class:`StorageBusyError` (ETOOMANYREQUESTS), because the ``LedgerStore`` contract
is synchronous; callers that prefer back-pressure await :meth:`Journal.wait_for_capacity` first.

A failed write or sync fails every callback of its batch (an add is never reported durable unless it is:
ENOSPC becomes :class:`DiskFullError`, anything else :class:`StorageIOError`), the file is abandoned and the
next batch opens a new one. After :meth:`close` every later append fails with :class:`StorageClosedError`.
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass
from typing import NoReturn

import trio
import trio.lowlevel

from magnetar.bookkeeper.bookie.storage.errors import (
    BookieError,
    DiskFullError,
    StorageBusyError,
    StorageClosedError,
    StorageIOError,
)
from magnetar.bookkeeper.bookie.storage.journal_files import JournalWriterFile
from magnetar.bookkeeper.bookie.storage.journal_format import (
    RECORD_HEADER_BYTES,
    JournalBatch,
    RecordKind,
    ledger_payload,
)
from magnetar.bookkeeper.bookie.storage.ledger_store import DurableCallback
from magnetar.bookkeeper.bookie.storage.log_mark import LogMark
from magnetar.bookkeeper.runtime import SyncThread, open_sync_thread

log = logging.getLogger(__name__)


@dataclass(slots=True)
class JournalStats:
    """Counters for benchmarks and metrics: how group commit actually batched."""

    syncs: int = 0
    inline_syncs: int = 0
    """Of ``syncs``, those made on the event loop's thread (see ``journal_inline_sync_bytes_max``)."""
    records: int = 0
    bytes: int = 0
    sync_seconds: float = 0.0
    sync_seconds_max: float = 0.0
    failed_syncs: int = 0


@dataclass(slots=True)
class _Batch:
    """A batch taken for writing: its records, their callbacks, and when the write began."""

    buf: JournalBatch
    callbacks: list[DurableCallback]
    records: int
    started: float


def storage_error(exc: OSError, what: str) -> BookieError:
    """The bookie error an OS error on the write path becomes."""
    if exc.errno == errno.ENOSPC:
        return DiskFullError(f"{what}: no space left on device")
    return StorageIOError(f"{what}: {exc}")


class Journal:
    def __init__(
        self,
        writer: JournalWriterFile,
        *,
        group_wait_ms: float,
        buffered_bytes_max: int,
        queue_bytes_max: int,
        flush_when_queue_empty: bool,
        inline_sync_bytes_max: int = 0,
        inline_sync_ms_max: float = 5.0,
    ) -> None:
        self._writer = writer
        self._group_wait_s = group_wait_ms / 1000.0
        self._buffered_bytes_max = buffered_bytes_max
        self._queue_bytes_max = queue_bytes_max
        self._flush_when_queue_empty = flush_when_queue_empty
        self._inline_sync_bytes_max = inline_sync_bytes_max
        self._inline_sync_s_max = inline_sync_ms_max / 1000.0
        self._buf = JournalBatch()
        self._callbacks: list[DurableCallback] = []
        self._records = 0
        self._first_append_at = 0.0
        self._last_sync_s = 0.0
        self._in_flight_bytes = 0
        self._data_ready = trio.Event()
        self._batch_full = trio.Event()
        self._progress = trio.Event()
        self._closed = False
        self._writer_running = False
        self._holds = 0
        self.synced_mark = LogMark(-1, 0)
        """Every record before this position is durable (advanced after each fdatasync)."""
        self.stats = JournalStats()

    async def open(self) -> None:
        """Create the first journal file of this process (in a worker thread)."""
        self.synced_mark = await trio.to_thread.run_sync(self._writer.open)

    # -- appends (trio thread, synchronous) -----------------------------------------------------------------

    def append_entry(self, body: bytes, on_durable: DurableCallback) -> None:
        """Journal a packaged entry; ``on_durable`` fires after the fdatasync that covers it. The batch keeps
        ``body`` itself until it is written: a mutable buffer is copied into ``bytes`` first."""
        buf = self._buf
        size = len(body)
        if not buf.size:
            self._start_batch(size)
        elif self._in_flight_bytes + buf.size + size > self._queue_bytes_max:
            self._refuse(size)
        buf.append_entry(body if type(body) is bytes else bytes(body))
        self._callbacks.append(on_durable)
        self._records += 1
        if buf.size >= self._buffered_bytes_max:
            self._batch_full.set()

    def append_ledger_key(self, ledger_id: int, master_key: bytes, on_durable: DurableCallback) -> None:
        self._append_meta(RecordKind.LEDGER_KEY, ledger_payload(ledger_id, master_key), on_durable)

    def append_fence(self, ledger_id: int, on_durable: DurableCallback) -> None:
        self._append_meta(RecordKind.FENCE, ledger_payload(ledger_id), on_durable)

    def append_explicit_lac(self, ledger_id: int, body: bytes, on_durable: DurableCallback) -> None:
        self._append_meta(RecordKind.EXPLICIT_LAC, ledger_payload(ledger_id, body), on_durable)

    def append_delete(self, ledger_id: int, on_durable: DurableCallback) -> None:
        self._append_meta(RecordKind.DELETE, ledger_payload(ledger_id), on_durable)

    def _append_meta(self, kind: RecordKind, payload: bytes, on_durable: DurableCallback) -> None:
        size = len(payload)
        if not self._buf.size:
            self._start_batch(size)
        elif self._in_flight_bytes + self._buf.size + size > self._queue_bytes_max:
            self._refuse(size)
        self._buf.append_record(kind, payload)
        self._callbacks.append(on_durable)
        self._records += 1
        if self._buf.size >= self._buffered_bytes_max:
            self._batch_full.set()

    def _start_batch(self, size: int) -> None:
        if self._closed:
            raise StorageClosedError("the journal is closed")
        if self._in_flight_bytes + size + RECORD_HEADER_BYTES > self._queue_bytes_max:
            self._refuse(size)
        self._first_append_at = trio.current_time()
        if not self._holds:
            self._data_ready.set()

    def _refuse(self, size: int) -> NoReturn:
        if self._closed:
            raise StorageClosedError("the journal is closed")
        raise StorageBusyError(
            f"journal_queue_bytes_max={self._queue_bytes_max} reached: {self.queued_bytes} bytes are "
            f"waiting for fdatasync, {size} more refused"
        )

    # -- bursts (a connection's reader) --------------------------------------------------------------------

    def hold(self) -> None:
        """A burst of appends begins: they will not wake the writer task (see the module's docstring). End it
        with :meth:`release` before the next ``await``."""
        self._holds += 1

    def release(self) -> None:
        """The burst ends: sync its batch now on this thread if the writer task would do just that next, else
        wake the writer task. A failed sync fails the batch's callbacks, as in the writer task."""
        self._holds -= 1
        if self._holds or not self._buf.size:
            return
        if (
            self._flush_when_queue_empty
            and not self._in_flight_bytes
            and self._sync_inline(self._buf.size)
            and trio.lowlevel.current_statistics().tasks_runnable == 0
        ):
            self._flush_inline()
        else:
            self._data_ready.set()

    # -- capacity and draining --------------------------------------------------------------------------

    @property
    def queued_bytes(self) -> int:
        """Bytes appended but not yet durable."""
        return self._in_flight_bytes + self._buf.size

    def has_capacity(self, size: int) -> bool:
        return self.queued_bytes + size + RECORD_HEADER_BYTES <= self._queue_bytes_max

    async def wait_for_capacity(self, size: int) -> None:
        """Wait until an append of ``size`` bytes would be accepted (back-pressure for callers)."""
        while not self.has_capacity(size) and not self._closed:
            await self._progress.wait()

    async def drain(self) -> None:
        """Wait until everything appended so far has been synced (or failed)."""
        while self._buf.size or self._in_flight_bytes:
            if not self._writer_running:
                raise StorageClosedError("the journal writer is not running")
            await self._progress.wait()

    def close(self) -> None:
        """Refuse further appends and fail those still buffered (call after :meth:`drain`)."""
        self._closed = True
        callbacks, self._callbacks = self._callbacks, []
        self._buf = JournalBatch()
        _fire(callbacks, StorageClosedError("the journal closed before this record was synced"))
        self._signal_progress()
        self._writer.close()

    # -- the writer task --------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Group-commit loop; runs until cancelled. Start it with ``await nursery.start(journal.run)``."""
        try:
            async with open_sync_thread("magnetar-journal") as sync_thread:
                self._writer_running = True
                task_status.started()
                while True:
                    await self._data_ready.wait()
                    await self._gather_batch()
                    if self._buf.size:
                        await self._flush(sync_thread)
                    elif self._data_ready.is_set():  # a burst's release synced the batch meanwhile
                        self._data_ready = trio.Event()
        finally:
            self._writer_running = False
            self._signal_progress()

    async def _gather_batch(self) -> None:
        while self._buf.size < self._buffered_bytes_max:
            remaining = self._first_append_at + self._group_wait_s - trio.current_time()
            if remaining <= 0:
                return
            if self._flush_when_queue_empty:
                before = self._records
                await trio.lowlevel.checkpoint()
                if self._records == before:
                    return
            else:
                with trio.move_on_after(remaining):
                    await self._batch_full.wait()

    def _sync_inline(self, size: int) -> bool:
        """Sync this batch on the event loop's thread? Unless it is big or the last sync was slow."""
        return size <= self._inline_sync_bytes_max and self._last_sync_s <= self._inline_sync_s_max

    async def _flush(self, sync_thread: SyncThread) -> None:
        if self._sync_inline(self._buf.size):
            self._flush_inline()
            return
        batch = self._take_batch()
        try:
            mark = await sync_thread.run(self._writer.write_and_sync, batch.buf.parts())
        except BaseException as exc:
            self._batch_failed(batch, exc)
        else:
            self._batch_synced(batch, mark, inline=False)

    def _flush_inline(self) -> None:
        """Write and sync the batch on the loop's own thread (see the module's docstring)."""
        batch = self._take_batch()
        try:
            mark = self._writer.write_and_sync(batch.buf.parts())
        except BaseException as exc:
            self._batch_failed(batch, exc)
        else:
            self._batch_synced(batch, mark, inline=True)

    def _take_batch(self) -> _Batch:
        batch = _Batch(self._buf, self._callbacks, self._records, trio.current_time())
        self._buf, self._callbacks, self._records = JournalBatch(), [], 0
        # A burst's release takes the batch while the writer task may still wait on these events: only one
        # that has fired is replaced, or the writer would wait on an event nobody sets any more.
        if self._data_ready.is_set():
            self._data_ready = trio.Event()
        if self._batch_full.is_set():
            self._batch_full = trio.Event()
        self._in_flight_bytes = batch.buf.size
        return batch

    def _batch_synced(self, batch: _Batch, mark: LogMark, *, inline: bool) -> None:
        self._last_sync_s = took = trio.current_time() - batch.started
        assert mark >= self.synced_mark, "the synced journal mark went backwards"
        self.synced_mark = mark
        stats = self.stats
        stats.syncs += 1
        stats.inline_syncs += inline
        stats.records += batch.records
        stats.bytes += batch.buf.size
        stats.sync_seconds += took
        stats.sync_seconds_max = max(stats.sync_seconds_max, took)
        self._in_flight_bytes = 0
        _fire(batch.callbacks, None)
        self._signal_progress()

    def _batch_failed(self, batch: _Batch, exc: BaseException) -> None:
        """Fail the batch's callbacks. An OS error is the disk's (the next batch opens a new file); anything
        else - a cancellation, a bug - is raised again."""
        self._in_flight_bytes = 0
        if not isinstance(exc, OSError):
            _fire(batch.callbacks, StorageIOError(f"journal writer failed: {exc!r}"))
            raise exc
        self._last_sync_s = trio.current_time() - batch.started
        self.stats.failed_syncs += 1
        log.error("journal batch of %d records (%d bytes) failed: %s", batch.records, batch.buf.size, exc)
        _fire(batch.callbacks, storage_error(exc, "journal write"))
        self._signal_progress()

    def _signal_progress(self) -> None:
        self._progress.set()
        self._progress = trio.Event()


def _fire(callbacks: list[DurableCallback], error: BaseException | None) -> None:
    for callback in callbacks:
        try:
            callback(error)
        except Exception:
            log.exception("a journal durability callback raised (callbacks must not raise)")

"""The bookie's disk storage engine: BookKeeper's ``DbLedgerStorage`` behind the ``LedgerStore`` contract.

Theory of operation (docs/upstream.md, BookKeeper §5, invariants 6, 8, 11, 12 of docs/architecture.md §3):

* **Add.** The entry goes into the active write cache first, then into the journal (BookKeeper's order:
  storage before journal, so a journal roll can never precede the entry in storage). It is readable at once
  and acknowledged (``on_durable(None)``) only after the journal's fdatasync covers it. Master keys, fences
  and explicit LACs take effect in memory at once and are journaled the same way; a fence is therefore
  durable before its callback fires (invariant 6).
* **Back-pressure.** An add that finds the active write cache full while the other half is still being
  flushed, or the journal queue full, waits for room (BookKeeper's write throttle, ``write_throttle_ms_max``)
  in the queue of :mod:`.add_throttle`, which also keeps later adds behind it; it is refused with
  StorageBusyError (ETOOMANYREQUESTS) only after that time.
* **Checkpoint** (every ``checkpoint_interval_ms``, and as soon as the active write cache fills): take the
  journal's synced mark, swap the write caches, flush the full one to the entry log and the index
  (:mod:`.checkpoint`), persist the mark (monotonic, atomic), and only then delete journal files older than
  the mark beyond ``journal_max_backups`` (invariant 11).
* **Restart.** Ledger records are loaded from the index; the journal is replayed from the persisted mark,
  idempotently (entries, master keys, fences, explicit LACs, deletions); a checkpoint then makes it all
  durable in the entry logs before the store serves anything.
* **Garbage collection** (``magnetar.gc``, through the primitives of :mod:`.gc_primitives`). Opening first
  finishes or rolls back a compaction a crash interrupted (before the journal replay); every completed
  checkpoint *seals* the logs before the current one, which GC may then delete or compact (invariant 12).
* **Read.** Write cache (both halves), read cache, index, entry log - with read-ahead of the following
  entries of the same ledger into the read cache. An entry the index lacks is "no entry" only if the
  ledger's indexed entry range shows it was never stored here; otherwise, and for every unreadable record,
  the answer is :class:`StorageIOError`, never a false "no entry" (invariant 8).

Everything public runs on the trio thread; blocking file I/O runs in worker threads (reads are ``pread``
calls, mostly served by the page cache, as BookKeeper's read threads do). The engine owns its background
tasks - the journal writer, the checkpointer and the disk monitor - in a nursery opened by
:func:`open_ledger_store`, which also closes everything in order on exit.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from magnetar.bookkeeper.bookie.storage.add_throttle import AddThrottle, WaitingAdd
from magnetar.bookkeeper.bookie.storage.checkpoint import CacheFlusher, run_io
from magnetar.bookkeeper.bookie.storage.entry_index import (
    EntryIndex,
)
from magnetar.bookkeeper.bookie.storage.errors import (
    BookieError,
    DiskFullError,
    LedgerFencedError,
    NoEntryError,
    NoLedgerError,
    StorageBusyError,
    StorageClosedError,
    StorageIOError,
)
from magnetar.bookkeeper.bookie.storage.gc_primitives import GcPrimitives, Relocation
from magnetar.bookkeeper.bookie.storage.journal import Journal
from magnetar.bookkeeper.bookie.storage.journal_files import (
    delete_journals_before,
)
from magnetar.bookkeeper.bookie.storage.ledger_registry import LedgerRegistry
from magnetar.bookkeeper.bookie.storage.ledger_store import DiskUsage, DurableCallback, LedgerState
from magnetar.bookkeeper.bookie.storage.log_mark import LogMark
from magnetar.bookkeeper.bookie.storage.opening import DiskProbe, EngineParts, open_parts, statvfs_probe
from magnetar.bookkeeper.bookie.storage.read_cache import ReadCache
from magnetar.bookkeeper.bookie.storage.replay import ReplayStats, replay_journal
from magnetar.bookkeeper.bookie.storage.settings import BookieStorageSettings
from magnetar.bookkeeper.bookie.storage.write_cache import DoubleWriteCache, WriteCache
from magnetar.bookkeeper.runtime import GiveWay

log = logging.getLogger(__name__)

__all__ = ["DbLedgerStorage", "Relocation", "open_ledger_store"]

_IDS = struct.Struct(">qq")


@dataclass(slots=True)
class _PendingFlush:
    cache: WriteCache
    mark: LogMark | None
    """The journal mark this flush makes safe to persist (None: replay from the start, persist nothing)."""
    dirty: set[int]


@asynccontextmanager
async def open_ledger_store(
    settings: BookieStorageSettings, *, disk_probe: DiskProbe = statvfs_probe, final_checkpoint: bool = True
) -> AsyncIterator[DbLedgerStorage]:
    """Open the engine (replaying the journal), run its background tasks, and close it on exit.

    On exit the journal is drained and a last checkpoint is taken (under a shield, bounded by
    ``close_timeout_ms``), the background tasks are cancelled, then files and the index are closed.
    ``final_checkpoint=False`` leaves the last changes to journal replay, as a crash would (tests and the
    replay benchmark use it).
    """
    parts = await run_io("opening the ledger store", open_parts, settings)
    store = DbLedgerStorage(settings, parts, disk_probe)
    store._final_checkpoint = final_checkpoint
    try:
        await store.gc.recover()  # finish or roll back a compaction a crash interrupted
        await store._recover()
        async with trio.open_nursery() as nursery:
            await nursery.start(store._journal.run)
            nursery.start_soon(store._checkpoint_loop)
            nursery.start_soon(store._disk_monitor)
            nursery.start_soon(store._throttle.run)
            store._accepting = True
            try:
                yield store
            finally:
                with trio.CancelScope(shield=True):
                    await store._quiesce()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The caller's body runs inside our nursery; give its exception back as it raised it.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    finally:
        store._close()


class DbLedgerStorage:
    """The ``LedgerStore`` of a bookie on disk. Create it with :func:`open_ledger_store`."""

    def __init__(self, settings: BookieStorageSettings, parts: EngineParts, disk_probe: DiskProbe) -> None:
        self.settings = settings
        self._index = parts.index
        self.entry_logger = parts.entry_logger
        self._mark_file = parts.mark_file
        self._journal = Journal(
            parts.journal_writer,
            group_wait_ms=settings.journal_group_wait_ms,
            buffered_bytes_max=settings.journal_buffered_bytes_max,
            queue_bytes_max=settings.journal_queue_bytes_max,
            flush_when_queue_empty=settings.journal_flush_when_queue_empty,
            inline_sync_bytes_max=settings.journal_inline_sync_bytes_max,
            inline_sync_ms_max=settings.journal_inline_sync_ms_max,
        )
        self._flusher = CacheFlusher(
            parts.entry_logger,
            parts.index,
            slice_entries=settings.checkpoint_slice_entries,
            write_bytes=settings.entry_log_write_bytes,
            give_way=GiveWay(settings.checkpoint_give_way_ms / 1000, self._writers_waiting_soon),
        )
        self._disk_probe = disk_probe
        self._ledgers = LedgerRegistry(parts.states, parts.ranges)
        self._states = self._ledgers.states
        self._cache = DoubleWriteCache(settings.write_cache_bytes_max)
        self._read_cache = ReadCache(settings.read_cache_bytes_max)
        self._pending: _PendingFlush | None = None
        self._deleted_while_flushing: set[int] = set()
        self._replay_mark: LogMark | None = None
        self._replaying = False
        self._checkpoint_lock = trio.Lock()
        self.gc = GcPrimitives(parts.entry_logger, parts.index, self._states, self._checkpoint_lock, settings)
        """The primitives garbage collection uses (:mod:`.gc_primitives`); its procedures: ``magnetar.gc``."""
        self._checkpoint_wanted = trio.Event()
        self._flush_done = trio.Event()
        self._accepting = False
        self._closed = False
        self._disk_full = False
        self._entry_bytes_max = settings.entry_bytes_max
        self._read_ahead_entries = settings.read_ahead_entries if settings.read_cache_bytes_max else 0
        self._final_checkpoint = True
        self._throttle = AddThrottle(
            self, wait_ms=settings.write_throttle_ms_max, bytes_max=settings.write_cache_bytes_max // 2
        )
        self.checkpoints = 0
        """Write-cache flushes completed so far (the one at startup included)."""
        self.replay_stats: ReplayStats | None = None

    @property
    def journal(self) -> Journal:
        return self._journal

    @property
    def index(self) -> EntryIndex:
        return self._index

    def stats(self) -> dict[str, float]:
        """Journal figures for the bookie's metrics (``magnetar_bookie_journal_*``): group commits and how
        long their syncs took, the records and bytes they covered, bytes still waiting for a sync; and the
        adds that waited for room in the write cache (``bookie_throttled_write_requests``,
        ``magnetar_bookie_write_waiting_bytes``)."""
        journal = self._journal.stats
        return {
            "journal_syncs": journal.syncs,
            "journal_inline_syncs": journal.inline_syncs,
            "journal_failed_syncs": journal.failed_syncs,
            "journal_records": journal.records,
            "journal_bytes": journal.bytes,
            "journal_sync_seconds": journal.sync_seconds,
            "journal_sync_seconds_max": journal.sync_seconds_max,
            "journal_queued_bytes": self._journal.queued_bytes,
            "write_throttled_adds": self._throttle.throttled,
            "write_waiting_bytes": self._throttle.bytes,
        }

    # -- LedgerStore: state ------------------------------------------------------------------------------

    def ledger_state(self, ledger_id: int) -> LedgerState | None:
        return self._states.get(ledger_id)

    def ledgers(self) -> Iterable[int]:
        return sorted(self._states)

    def disk_usage(self) -> DiskUsage:
        return self._disk_probe(self.settings.data_dir)

    def journal_disk_usage(self) -> DiskUsage:
        return self._disk_probe(self.settings.journal_path)

    def create_ledger(self, ledger_id: int, master_key: bytes, on_durable: DurableCallback) -> None:
        self._check_meta_append(len(master_key) + 8)
        self._ledgers.create(ledger_id, master_key)
        self._journal.append_ledger_key(ledger_id, master_key, on_durable)

    def fence(self, ledger_id: int, on_durable: DurableCallback) -> None:
        self._ledgers.known(ledger_id)
        self._check_meta_append(8)
        self._throttle.fail(
            ledger_id, LedgerFencedError(f"ledger {ledger_id} was fenced while the add waited")
        )
        self._ledgers.fence(ledger_id)
        self._journal.append_fence(ledger_id, on_durable)

    def set_explicit_lac(self, ledger_id: int, body: bytes, on_durable: DurableCallback) -> None:
        self._ledgers.known(ledger_id)
        self._check_meta_append(len(body) + 8)
        self._ledgers.set_explicit_lac(ledger_id, body)
        self._journal.append_explicit_lac(ledger_id, body, on_durable)

    # -- LedgerStore: bursts (group commit without a task switch, see the journal) ------------------------

    def begin_burst(self) -> None:
        self._journal.hold()

    def end_burst(self) -> None:
        self._journal.release()

    # -- LedgerStore: add --------------------------------------------------------------------------------

    def add_entry(self, ledger_id: int, entry_id: int, body: bytes, on_durable: DurableCallback) -> None:
        if not self._accepting:
            raise StorageClosedError("the ledger store is not accepting writes")
        if ledger_id not in self._states:
            raise NoLedgerError(f"ledger {ledger_id} is unknown here")
        size = len(body)
        if size > self._entry_bytes_max or size < 16 or _IDS.unpack_from(body) != (ledger_id, entry_id):
            raise StorageIOError(
                f"refusing entry {ledger_id}:{entry_id}: {size} bytes that do not start with its ids "
                f"or exceed entry_bytes_max={self._entry_bytes_max}"
            )
        if self._disk_full:
            raise DiskFullError(
                f"less than disk_free_bytes_min={self.settings.disk_free_bytes_min} free (ledger or journal)"
            )
        if self._throttle or not self.has_room(size):
            self._throttle.submit(WaitingAdd(ledger_id, entry_id, body, on_durable))
            return
        self.add_now(ledger_id, entry_id, body, on_durable)

    # -- the throttle's view (:mod:`.add_throttle`) ------------------------------------------------------

    @property
    def accepting(self) -> bool:
        return self._accepting

    def knows(self, ledger_id: int) -> bool:
        return ledger_id in self._states

    @property
    def throttled_adds(self) -> int:
        """Adds that had to wait for room in the write cache, since start."""
        return self._throttle.throttled

    @property
    def waiting_add_bytes(self) -> int:
        return self._throttle.bytes

    def has_room(self, size: int) -> bool:
        """Whether an add of ``size`` bytes can go in now (a full active half is swapped unless the other one
        is still being flushed)."""
        cache = self._cache
        if self._pending is not None and not cache.has_room(size):
            return False
        return self._journal.has_capacity(size)

    def add_now(self, ledger_id: int, entry_id: int, body: bytes, on_durable: DurableCallback) -> None:
        cache = self._cache
        if not cache.has_room(len(body)):
            assert self._pending is None, "an add went in while both write cache halves were full"
            self._swap()
            self._checkpoint_wanted.set()
        # BookKeeper adds to storage before journaling, so that no checkpoint can fall between the two. Here
        # both happen in one synchronous step of the event loop, where no checkpoint can run; journaling
        # first lets the journal's bound refuse the add (StorageBusyError) before anything changed.
        self._journal.append_entry(body, on_durable)
        cache.active.put(ledger_id, entry_id, body)

    async def wait_writable(self, size: int) -> None:
        """Back-pressure for callers: return once an add of ``size`` bytes would not be refused as busy."""
        while not self._closed:
            await self._journal.wait_for_capacity(size)
            if self._cache.has_room(size) or self._pending is None:
                return
            await self._flush_done.wait()

    # -- LedgerStore: read -------------------------------------------------------------------------------

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        if self._closed:
            raise StorageClosedError("the ledger store is closed")
        if ledger_id not in self._states:
            raise NoLedgerError(f"ledger {ledger_id} is unknown here")
        if entry_id < 0:
            if entry_id != -1:
                raise NoEntryError(f"entry id {entry_id} is invalid")
            return self._read_last(ledger_id)
        body = self._cache.get(ledger_id, entry_id)
        if body is not None:
            return body
        body = self._read_cache.get(ledger_id, entry_id)
        if body is not None:
            return body
        loc = self._location(ledger_id, entry_id)
        if loc is None:
            raise self._ledgers.absent_error(self._index, ledger_id, entry_id)
        if not self._read_ahead_entries:
            return self.entry_logger.read(loc, ledger_id, entry_id)
        body, following = self.entry_logger.read_run(
            loc,
            ledger_id,
            entry_id,
            entries_max=self._read_ahead_entries,
            bytes_max=self.settings.read_ahead_bytes_max,
        )
        following.append((entry_id, body))
        self._read_cache.put_run(ledger_id, following)
        return body

    def _read_last(self, ledger_id: int) -> bytes:
        try:
            indexed = self._index.last_entry_id(ledger_id)
        except Exception as exc:
            raise StorageIOError(f"index lookup of ledger {ledger_id} failed: {exc}") from exc
        self._ledgers.check_last_indexed(ledger_id, indexed)
        candidates = [e for e in (indexed, self._cache.last_entry(ledger_id)) if e is not None]
        if not candidates:
            raise NoEntryError(f"ledger {ledger_id} has no entries here")
        return self.read_entry(ledger_id, max(candidates))

    def _location(self, ledger_id: int, entry_id: int) -> int | None:
        try:
            return self._index.get_location(ledger_id, entry_id)
        except Exception as exc:
            log.error("index lookup of %d:%d failed: %s", ledger_id, entry_id, exc)
            raise StorageIOError(f"index lookup of {ledger_id}:{entry_id} failed: {exc}") from exc

    # -- LedgerStore: delete ------------------------------------------------------------------------------

    def delete_ledger(self, ledger_id: int) -> None:
        if self._closed:
            raise StorageClosedError("the ledger store is closed")
        if ledger_id not in self._states:
            return
        self._forget_ledger(ledger_id)
        try:
            self._journal.append_delete(ledger_id, _log_failure(f"deletion of ledger {ledger_id}"))
        except BookieError as exc:
            log.warning(
                "deletion of ledger %d not journaled (%s); GC deletes it again if it returns", ledger_id, exc
            )

    def _forget_ledger(self, ledger_id: int) -> None:
        self._ledgers.forget(ledger_id)
        self._cache.active.drop_ledger(ledger_id)
        self._read_cache.clear()
        if self._pending is not None:
            self._deleted_while_flushing.add(ledger_id)
        self._delete_from_index([ledger_id])

    def _delete_from_index(self, ledger_ids: Iterable[int]) -> None:
        batch = self._index.batch()
        for ledger_id in ledger_ids:
            batch.delete_ledger(ledger_id)
        try:
            self._index.write_nosync(batch)
        except Exception as exc:
            log.error("removing deleted ledgers from the index failed: %s (GC will retry)", exc)

    # -- checkpoint ---------------------------------------------------------------------------------------

    async def checkpoint(self) -> None:
        """Flush everything added so far to the entry logs and the index, then persist the journal mark."""
        async with self._checkpoint_lock:
            if self._pending is None:
                self._swap()
            await self._flush_pending()

    def _writers_waiting_soon(self) -> bool:
        """The active write cache is half full: a checkpoint still running when it fills blocks the adds."""
        return self._cache.active.bytes * 2 >= self._cache.half_bytes_max

    async def wait_for_checkpoints(self, count: int) -> None:
        """Wait until ``count`` write-cache flushes have completed (tools and tests)."""
        while self.checkpoints < count and not self._closed:
            await self._flush_done.wait()

    def _swap(self) -> None:
        mark = self._replay_mark if self._replaying else self._journal.synced_mark
        self._pending = _PendingFlush(self._cache.swap(), mark, self._ledgers.take_dirty())

    async def _flush_pending(self) -> None:
        pending = self._pending
        assert pending is not None
        started = trio.current_time()
        try:
            result = await self._flusher.flush(
                pending.cache, pending.dirty, self._states, self._ledgers.ranges
            )
        except BookieError:
            self._reload_ranges(pending.cache.ledgers)
            raise
        self._ledgers.install_ranges(result.ranges)
        for ledger_id, entry_id in result.rewritten:
            self._read_cache.discard(ledger_id, entry_id)  # a stale copy must not outlive its re-add
        self._cache.flushed()
        self._pending = None
        self.gc.checkpoint_completed()
        deleted, self._deleted_while_flushing = self._deleted_while_flushing, set()
        if deleted:
            self._delete_from_index(deleted)
        self.checkpoints += 1
        self._flush_done.set()
        self._flush_done = trio.Event()
        if pending.mark is not None and await run_io(
            "persisting the journal mark", self._mark_file.persist, pending.mark
        ):
            await run_io(
                "deleting old journal files",
                delete_journals_before,
                self.settings.journal_path,
                pending.mark,
                self.settings.journal_max_backups,
            )
        log.debug(
            "checkpoint: %d entries, %d bytes in %.1f ms, mark %s",
            result.entries,
            result.bytes,
            (trio.current_time() - started) * 1000,
            pending.mark,
        )

    def _reload_ranges(self, ledger_ids: Iterable[int]) -> None:
        """After a failed flush, take the ranges of the index (some batches may have been written)."""
        for ledger_id in ledger_ids:
            try:
                record = self._index.get_ledger_record(ledger_id)
            except Exception as exc:
                log.error("reloading the record of ledger %d failed: %s", ledger_id, exc)
                continue
            if record is not None and record.entries is not None:
                self._ledgers.install_ranges({ledger_id: record.entries})

    async def _checkpoint_loop(self) -> None:
        interval_s = self.settings.checkpoint_interval_ms / 1000
        retry = False
        while True:
            if not retry:
                with trio.move_on_after(interval_s):
                    await self._checkpoint_wanted.wait()
            self._checkpoint_wanted = trio.Event()
            try:
                await self.checkpoint()
                retry = False
            except BookieError as exc:
                log.error("checkpoint failed (%s); retrying in %d ms", exc, self.settings.checkpoint_retry_ms)
                await trio.sleep(self.settings.checkpoint_retry_ms / 1000)
                retry = True

    # -- garbage collection primitives ----------------------------------------------------------------------

    async def append_to_entry_log(self, bodies: Sequence[bytes]) -> list[int]:
        """BookKeeper's simple compactor, step 1: write entries to the current entry log durably."""
        return await self.gc.append_to_current_log(bodies)

    async def update_locations(self, moves: Sequence[Relocation]) -> int:
        """Step 2: point the index at the new (synced) locations where it still holds the old; durable."""
        return await self.gc.update_locations(moves)

    async def delete_entry_log(self, log_id: int) -> None:
        """Step 3: delete a log nothing points at any more (after ``update_locations``)."""
        await self.gc.delete_log(log_id)

    # -- lifecycle ------------------------------------------------------------------------------------------

    async def _recover(self) -> None:
        """Replay the journal from the persisted mark, open a new journal file, checkpoint."""
        self._replaying = True
        self._replay_mark = self._mark_file.persisted
        try:
            self.replay_stats = await replay_journal(
                self,
                self.settings.journal_path,
                self._mark_file.persisted,
                chunk_bytes=self.settings.journal_replay_read_bytes,
                record_bytes_max=self.settings.entry_bytes_max + 64,
            )
        finally:
            self._replaying = False
        await self._journal.open()
        await self.checkpoint()

    # -- replay target (see :mod:`.replay`) -----------------------------------------------------------------

    def replay_has_room(self, size: int) -> bool:
        return self._cache.has_room(size)

    async def replay_checkpoint(self, mark: LogMark | None) -> None:
        self._replay_mark = mark
        await self.checkpoint()

    def replay_entry(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        self._cache.active.put(ledger_id, entry_id, body)

    def replay_ledger_key(self, ledger_id: int, master_key: bytes) -> None:
        self._ledgers.create(ledger_id, master_key, replaying=True)

    def replay_fence(self, ledger_id: int) -> None:
        self._ledgers.fence(ledger_id)

    def replay_explicit_lac(self, ledger_id: int, body: bytes) -> None:
        self._ledgers.set_explicit_lac(ledger_id, body)

    def replay_delete(self, ledger_id: int) -> None:
        if ledger_id in self._states:
            self._forget_ledger(ledger_id)

    async def _quiesce(self) -> None:
        self._accepting = False
        self._throttle.fail(None, StorageClosedError("the ledger store is closing"))
        with trio.move_on_after(self.settings.close_timeout_ms / 1000) as scope:
            try:
                await self._journal.drain()
                if self._final_checkpoint:
                    await self.checkpoint()
            except BookieError as exc:
                log.error("final checkpoint failed (%s); the journal will be replayed on restart", exc)
        if scope.cancelled_caught:
            log.error("closing the ledger store took over close_timeout_ms; the journal will be replayed")

    def _close(self) -> None:
        self._accepting = False
        self._closed = True
        self._journal.close()
        self.entry_logger.close()
        self._index.close()

    async def _disk_monitor(self) -> None:
        while True:
            self.check_disk()
            await trio.sleep(self.settings.disk_free_check_interval_ms / 1000)

    def check_disk(self) -> DiskUsage | None:
        """Probe free space now (the monitor does it every ``disk_free_check_interval_ms``); below
        ``disk_free_bytes_min`` on the ledger or the journal volume every add is refused with DiskFullError
        until space returns. Returns the ledger volume's usage."""
        try:
            usage = self._disk_probe(self.settings.data_dir)
            journal = self._disk_probe(self.settings.journal_path)
        except OSError as exc:
            log.warning("disk probe failed: %s", exc)
            return None
        floor = self.settings.disk_free_bytes_min
        short = [name for name, u in (("ledger", usage), ("journal", journal)) if u.free_bytes < floor]
        full = bool(short)
        if full != self._disk_full:
            self._disk_full = full
            if full:
                free = min(usage.free_bytes, journal.free_bytes)
                log.error(
                    "only %d bytes free on the %s volume: refusing adds (disk_free_bytes_min)", free, short[0]
                )
            else:
                log.warning("%d bytes free again: accepting adds", min(usage.free_bytes, journal.free_bytes))
        return usage

    # -- helpers -----------------------------------------------------------------------------------------

    def _check_meta_append(self, size: int) -> None:
        if not self._accepting:
            raise StorageClosedError("the ledger store is not accepting writes")
        if not self._journal.has_capacity(size):
            raise StorageBusyError(f"journal_queue_bytes_max={self.settings.journal_queue_bytes_max} reached")


def _log_failure(what: str) -> DurableCallback:
    def callback(error: BaseException | None) -> None:
        if error is not None:
            log.warning("%s not durable: %s", what, error)

    return callback

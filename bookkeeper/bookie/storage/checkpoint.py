"""Flushing a swapped write cache into the entry log and the index (DbLedgerStorage ``flush``,
docs/upstream.md, BookKeeper §5.3).

This is the storage half of a checkpoint; the engine (:mod:`.engine`) takes the journal mark and swaps
the caches before, and persists the mark after. Order, which makes a crash at any point harmless:

1. Entries are packed **sorted by (ledger, entry)** into entry-log records, on the trio thread in slices of
   ``checkpoint_slice_entries`` (Python's GIL would give a worker thread no more parallelism, only coarser
   5 ms switches), and written in pieces of about ``entry_log_write_bytes`` by a worker thread. Between
   slices the checkpoint gives way to foreground work (:class:`~magnetar.bookkeeper.runtime.pacing.GiveWay`:
   it waits for an idle event loop, for at most ``checkpoint_give_way_ms``), so publishes do not queue
   behind it. A log that reaches ``entry_log_bytes_max`` is rolled (ledgers map, synced) and writing
   continues in the next.
2. The entry log is **fdatasynced**.
3. Only then the index is written, one RocksDB batch per slice (giving way between batches), and
   RocksDB's WAL is synced once at the end. Each batch carries the ledger records with the entry ranges
   *as of that batch*, so the index's ranges always describe exactly the locations it holds, even after a
   crash between batches. rocksdict holds the GIL while it writes, so bounded batches bound each stall of
   the event loop.

A crash before step 3 completes leaves entries in the log that nothing points at (garbage for GC) and the
mark unpersisted: the journal replays them. Failures raise :class:`BookieError` (ENOSPC is DiskFullError);
a failed entry-log write abandons that log, whose tail is then uncertain.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import crc32c
import trio

from magnetar.bookkeeper.bookie.storage.entry_index import (
    ENTRY_KEY,
    EntryIndex,
    EntryRange,
    IndexBatch,
    LedgerRecord,
)
from magnetar.bookkeeper.bookie.storage.entry_log import CurrentLog, EntryLogger
from magnetar.bookkeeper.bookie.storage.entry_log_format import (
    HEADER_BYTES,
    IDS,
    OFFSET_BITS,
    RECORD_HEADER,
    append_record,
)
from magnetar.bookkeeper.bookie.storage.errors import BookieError, StorageIOError
from magnetar.bookkeeper.bookie.storage.journal import storage_error
from magnetar.bookkeeper.bookie.storage.ledger_store import LedgerState
from magnetar.bookkeeper.bookie.storage.write_cache import WriteCache
from magnetar.bookkeeper.runtime import GiveWay

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FlushResult:
    ranges: dict[int, EntryRange]
    """The entry range of every ledger the flush wrote, as the index now holds it."""
    entries: int
    bytes: int
    rewritten: list[tuple[int, int]]
    """Entries at or below their ledger's last indexed entry: possibly re-added with new bytes."""


async def run_io(what: str, fn: Callable[..., T], *args: object) -> T:
    """Run blocking storage I/O in a worker thread; OS and RocksDB failures become BookieErrors."""
    try:
        return await trio.to_thread.run_sync(fn, *args)
    except OSError as exc:
        raise storage_error(exc, what) from exc
    except BookieError:
        raise
    except Exception as exc:  # rocksdict raises plain Exceptions
        raise StorageIOError(f"{what}: {exc}") from exc


class CacheFlusher:
    def __init__(
        self,
        entry_logger: EntryLogger,
        index: EntryIndex,
        *,
        slice_entries: int,
        write_bytes: int,
        give_way: GiveWay | None = None,
    ) -> None:
        self._logger = entry_logger
        self._index = index
        self._slice_entries = slice_entries
        self._write_bytes = write_bytes
        self.give_way = give_way or GiveWay(0)

    async def flush(
        self,
        cache: WriteCache,
        dirty: set[int],
        states: Mapping[int, LedgerState],
        ranges: Mapping[int, EntryRange],
    ) -> FlushResult:
        """Write ``cache`` and the records of the ``dirty`` ledgers durably; see the module docstring."""
        run = _FlushRun(self, states, ranges)
        run.batches.append(self._index.batch())
        if cache.count:
            try:
                if self._logger.current is None:
                    await run_io("entry log start", self._logger.start_log)
                run.begin()
                for ledger_id in cache.sorted_ledgers():
                    await run.add_ledger(ledger_id, cache.ledgers[ledger_id])
                await run.write_out()
                await run_io("entry log flush", self._logger.flush)
            except BookieError:
                self._logger.abandon_current()
                raise
        for ledger_id in dirty:
            if ledger_id not in run.new_ranges:
                run.put_record(ledger_id, ranges.get(ledger_id))
        for batch in run.batches:
            if batch.size:
                await run_io("index write", self._index.write_nosync, batch)
                await self.give_way()
        await run_io("index sync", self._index.sync_wal)
        return FlushResult(run.new_ranges, run.entries, run.bytes, run.rewritten)


class _FlushRun:
    """The state of one flush: the bytes not yet written, the index batches, the ranges so far."""

    def __init__(
        self, flusher: CacheFlusher, states: Mapping[int, LedgerState], ranges: Mapping[int, EntryRange]
    ):
        self._f = flusher
        self._states = states
        self._ranges = ranges
        self.new_ranges: dict[int, EntryRange] = {}
        self.batches: list[IndexBatch] = []
        self.entries = 0
        self.bytes = 0
        self.rewritten: list[tuple[int, int]] = []
        self._buf = bytearray()
        self._buf_offset = 0
        self._log: CurrentLog | None = None
        self._in_slice = 0

    def begin(self) -> None:
        self._log = self._f._logger.current
        assert self._log is not None
        self._buf_offset = self._log.offset

    async def add_ledger(self, ledger_id: int, entries: dict[int, bytes]) -> None:
        if ledger_id not in self._states:
            return  # deleted since the swap
        prev = self._ranges.get(ledger_id)
        first, last, count = (prev.first, prev.last, prev.count) if prev is not None else (-1, -1, 0)
        f = self._f
        bytes_max, slice_entries, write_bytes = f._logger.bytes_max, f._slice_entries, f._write_bytes
        pack_key, pack_head, crc = ENTRY_KEY.pack, RECORD_HEADER.pack, crc32c.crc32c
        locations: list[tuple[bytes, int]] = []
        ledger_bytes = 0
        # The loop below runs once per entry of every checkpoint: state lives in locals, and is written
        # back to ``self`` around each await (writing out or rolling replaces the buffer).
        buf, offset, log_base, in_slice = self._loop_state()
        for entry_id in sorted(entries):
            body = entries[entry_id]
            size = len(body)
            if offset + size + 8 > bytes_max and offset > HEADER_BYTES:
                self._in_slice = in_slice
                self._commit(ledger_id, locations, ledger_bytes, EntryRange(first, last, count))
                locations, ledger_bytes = [], 0
                await self._roll()
                buf, offset, log_base, in_slice = self._loop_state()
            buf += pack_head(size, crc(body, size))
            buf += body
            locations.append((pack_key(ledger_id, entry_id), log_base | offset))
            offset += size + 8
            ledger_bytes += size + 8
            if count == 0:
                first = last = entry_id
                count = 1
            elif entry_id > last:
                last, count = entry_id, count + 1
            elif entry_id < first:
                first, count = entry_id, count + 1
            else:
                self.rewritten.append((ledger_id, entry_id))
                if f._index.get_location(ledger_id, entry_id) is None:
                    count += 1  # fills a gap (recovery); a re-added entry is not counted twice
            in_slice += 1
            if in_slice >= slice_entries or len(buf) >= write_bytes:
                self._commit(ledger_id, locations, ledger_bytes, EntryRange(first, last, count))
                locations, ledger_bytes = [], 0
                await self._end_slice()
                buf, offset, log_base, in_slice = self._loop_state()
        self._in_slice = in_slice
        self._commit(ledger_id, locations, ledger_bytes, EntryRange(first, last, count))

    def _loop_state(self) -> tuple[bytearray, int, int, int]:
        """The buffer, the log offset of its end, the location base of the log, entries in the slice."""
        assert self._log is not None
        buf = self._buf
        return buf, self._buf_offset + len(buf), self._log.log_id << OFFSET_BITS, self._in_slice

    def _commit(
        self, ledger_id: int, locations: list[tuple[bytes, int]], ledger_bytes: int, rng: EntryRange
    ) -> None:
        """Record a run of one ledger's entries in the current batch, with the ledger's range after it."""
        if not locations:
            return
        assert self._log is not None
        usage = self._log.usage
        usage[ledger_id] = usage.get(ledger_id, 0) + ledger_bytes
        self.batches[-1].put_locations(locations)
        self.new_ranges[ledger_id] = rng
        self.put_record(ledger_id, rng)
        self.entries += len(locations)
        self.bytes += ledger_bytes

    def put_record(self, ledger_id: int, rng: EntryRange | None) -> None:
        state = self._states.get(ledger_id)
        if state is not None:
            self.batches[-1].put_ledger(ledger_id, LedgerRecord(state, rng))

    async def _end_slice(self) -> None:
        self._in_slice = 0
        if len(self._buf) >= self._f._write_bytes:
            await self.write_out()
        await self._f.give_way()
        self.batches.append(self._f._index.batch())

    async def write_out(self) -> None:
        if self._buf:
            buf, self._buf = self._buf, bytearray()
            await run_io("entry log write", self._f._logger.write, buf)
            assert self._log is not None
            self._buf_offset = self._log.offset

    async def _roll(self) -> None:
        await self.write_out()
        self._log = await run_io("entry log roll", self._f._logger.roll)
        self._buf_offset = self._log.offset


async def append_durably(entry_logger: EntryLogger, bodies: list[bytes]) -> list[int]:
    """Append packaged entries to the current entry log, fdatasync it, and return their locations.

    The compactor's write primitive (docs/upstream.md, BookKeeper §6: copy, *flush*, then update the index).
    The caller holds the engine's checkpoint lock, so this never interleaves with a checkpoint's writes.
    """
    locations: list[int] = []
    try:
        current = entry_logger.current
        if current is None:
            current = await run_io("entry log start", entry_logger.start_log)
        buf = bytearray()
        offset = current.offset
        for body in bodies:
            size = len(body)
            if offset + size + 8 > entry_logger.bytes_max and offset > HEADER_BYTES:
                await run_io("entry log write", entry_logger.write, buf)
                buf = bytearray()
                current = await run_io("entry log roll", entry_logger.roll)
                offset = current.offset
            ledger_id = IDS.unpack_from(body)[0]
            current.usage[ledger_id] = current.usage.get(ledger_id, 0) + size + 8
            locations.append((current.log_id << OFFSET_BITS) | offset)
            offset += append_record(buf, body)
        await run_io("entry log write", entry_logger.write, buf)
        await run_io("entry log flush", entry_logger.flush)
    except BookieError:
        entry_logger.abandon_current()
        raise
    return locations

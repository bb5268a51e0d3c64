"""What the storage engine offers garbage collection: narrow, safe operations on the running engine, and the
recovery of an interrupted compaction (BookKeeper ``GarbageCollectorThread`` mechanics, docs/upstream.md,
BookKeeper §6).

The procedures - which ledgers are gone, which logs to delete or compact, how fast, when, and the
transactional copy itself (reading live records, writing ``<target>.log.compacting``, its commit and its
rollback) - are :mod:`magnetar.gc`'s. It reaches the engine only through :class:`GcPrimitives`, which it types
with a Protocol of the engine's face for GC (:class:`.gc_seam.StoragePrimitives`); this package never imports
``magnetar.gc``. Each primitive keeps invariant 12 of docs/architecture.md §3:

* :meth:`GcPrimitives.log_ids` - the logs GC may look at: *sealed* logs only, i.e. not the log being
  written and not a log whose entries a running checkpoint may still be indexing (the ids below the log that
  was current when the last checkpoint completed, and the targets of finished compactions), and not the logs
  a compaction claimed. A sealed log never gains an index entry again; it only loses them.
* :meth:`GcPrimitives.usage` - ``ledgerId -> bytes`` of a log from its ledgers map, or from a scan for a log
  without one (a crash interrupted it). A scan that stops early leaves a log GC must not delete until
  :meth:`GcPrimitives.index_references` proved (one pass over the index) that nothing points past that point.
* :meth:`GcPrimitives.delete_dead_log` - delete a log none of whose ledgers exists any more. Under the
  checkpoint lock, the index entries of those ledgers are deleted again and RocksDB's WAL is synced (this
  also makes every earlier, unsynced ledger deletion durable) before the file goes.
* :meth:`GcPrimitives.seal_active_log` - roll the log being written when enough of it belongs to deleted
  ledgers, and count it sealed at once: under the checkpoint lock no checkpoint is writing or indexing it,
  and once rolled nothing writes to it again (a checkpoint that failed and retries writes into the new log).
  Without this a log of deleted ledgers' data waits until it reaches ``entry_log_bytes_max``.
* For a compaction: :meth:`GcPrimitives.allocate_compaction_log` reserves a target id (durably, under the
  lock checkpoints roll logs under) and :meth:`GcPrimitives.claim` / :meth:`GcPrimitives.release` hide a
  compaction's logs from :meth:`GcPrimitives.log_ids` and from recovery while it runs;
  :attr:`GcPrimitives.existing_ledgers` and :attr:`GcPrimitives.locate` say whether a record is live (its
  ledger exists and the index points exactly at it); :meth:`GcPrimitives.write_manifest` writes the
  compaction's manifest, the commit point (its format is the engine's, :mod:`.compaction_files`, because
  recovery reads it); :meth:`GcPrimitives.finish_compaction` rolls a committed compaction forward.
* Rolling forward (after the commit point): make the target visible as ``<target>.log``, point the index at
  the copies (only entries whose location is still in a source; checked and written in bounded batches under
  the checkpoint lock, so a checkpoint never interleaves), sync the index, then delete the sources and the
  manifest. A running compaction and recovery run this same code.
* :meth:`GcPrimitives.recover` - at engine open, before journal replay (recovery is part of opening the
  storage, as replay is, whether or not a collector runs), and before each GC pass: delete copies that never
  committed and roll committed ones forward (a crash may leave the target not yet visible or the index half
  pointed at it).

Blocking work runs in worker threads; the index is safe to use from them (rocksdict holds the GIL per call,
which is also why index batches stay small and the loops yield the GIL often).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from magnetar.bookkeeper.bookie.storage.checkpoint import append_durably, run_io
from magnetar.bookkeeper.bookie.storage.compaction_files import (
    CompactionManifest,
    LogRecordReader,
    compacting_name,
    find_leftovers,
    make_visible,
    manifest_name,
    remove_file,
    write_manifest,
)
from magnetar.bookkeeper.bookie.storage.entry_index import EntryIndex
from magnetar.bookkeeper.bookie.storage.entry_log import EntryLogger, log_file_name
from magnetar.bookkeeper.bookie.storage.entry_log_format import (
    HEADER_BYTES,
    OFFSET_BITS,
    RECORD_HEADER_BYTES,
    ScanStop,
    decode_header,
)
from magnetar.bookkeeper.bookie.storage.errors import BookieError
from magnetar.bookkeeper.bookie.storage.ledger_store import LedgerState
from magnetar.bookkeeper.bookie.storage.settings import BookieStorageSettings

log = logging.getLogger(__name__)

StepHook = Callable[[str], None]
"""Told each step of a compaction (progress reporting; crash tests kill the process at one)."""
SCAN_CHUNK_BYTES = 4 * 1024 * 1024
GIL_YIELD_EVERY = 64
"""Loops in worker threads give the GIL away this often (``time.sleep(0)``): otherwise the event loop waits
for the interpreter's 5 ms switch interval at every wake-up, and publish latency suffers (measured)."""


@dataclass(frozen=True, slots=True)
class Relocation:
    """Compaction moved an entry: point the index at ``new_location`` if it still says ``old_location``."""

    ledger_id: int
    entry_id: int
    old_location: int
    new_location: int


@dataclass(frozen=True, slots=True)
class LogUsage:
    """What a sealed entry log holds: bytes per ledger (records, headers included)."""

    log_id: int
    ledger_bytes: Mapping[int, int]
    file_bytes: int
    records_end: int
    """Offset where the log's records end (the ledgers map, or where a scan stopped)."""
    from_map: bool
    scan_stop: ScanStop | None = None
    """How a scan ended (None when the ledgers map was used)."""

    @property
    def total_bytes(self) -> int:
        return sum(self.ledger_bytes.values())

    @property
    def fully_read(self) -> bool:
        """The records are known to end where reading stopped (no torn or corrupt record before it)."""
        return self.from_map or self.scan_stop in (ScanStop.END, ScanStop.LEDGERS_MAP)


@dataclass(slots=True)
class CompactionResult:
    target: int
    sources: list[int]
    sources_deleted: list[int]
    entries: int
    copied_bytes: int
    target_bytes: int
    reclaimed_bytes: int
    relocated: int


class GcPrimitives:
    def __init__(
        self,
        entry_logger: EntryLogger,
        index: EntryIndex,
        states: Mapping[int, LedgerState],
        lock: trio.Lock,
        settings: BookieStorageSettings,
    ) -> None:
        self._logger = entry_logger
        self._index = index
        self._states = states
        self._lock = lock
        self._settings = settings
        self._sealed_below = 0
        self._compacted: set[int] = set()
        """Targets of finished compactions: complete, and never written by a checkpoint - sealed at once."""
        self._busy: set[int] = set()
        self._record_bytes_max = settings.entry_bytes_max + RECORD_HEADER_BYTES

    def checkpoint_completed(self) -> None:
        """Called by the engine after each successful checkpoint: every older log is fully indexed."""
        current = self._logger.current
        self._sealed_below = current.log_id if current is not None else self._logger.last_id + 1

    def log_ids(self) -> list[int]:
        """Sealed logs that no compaction claimed, ascending."""
        sealed, compacted, busy = self._sealed_below, self._compacted, self._busy
        return [i for i in self._logger.log_ids() if (i < sealed or i in compacted) and i not in busy]

    def ledger_exists(self, ledger_id: int) -> bool:
        return ledger_id in self._states

    @property
    def existing_ledgers(self) -> Container[int]:
        """The ledgers that exist, read-only (``in`` is cheap enough for a loop over every record)."""
        return self._states

    @property
    def locate(self) -> Callable[[int, int], int | None]:
        """The index lookup: ``(ledgerId, entryId) -> location`` or None (blocking: in a worker thread)."""
        return self._index.get_location

    @property
    def directory(self) -> Path:
        """The entry-log directory (where a compaction writes its target)."""
        return self._logger.directory

    @property
    def record_bytes_max(self) -> int:
        """The largest record a log may hold (the largest entry and its record header)."""
        return self._record_bytes_max

    @property
    def compaction_log_bytes_max(self) -> int:
        """How large a compaction's target may grow (one entry log and one entry more)."""
        return self._settings.entry_log_bytes_max + self._settings.entry_bytes_max

    def active_log_garbage_bytes(self) -> int:
        """Bytes of the log being written that belong to deleted ledgers (as far as checkpoints wrote it)."""
        current = self._logger.current
        if current is None:
            return 0
        return sum(size for ledger_id, size in current.usage.items() if ledger_id not in self._states)

    async def seal_active_log(self, garbage_bytes_min: int) -> int | None:
        """Roll the log being written if at least ``garbage_bytes_min`` (> 0) of it belong to deleted ledgers;
        the id of the log sealed, or None."""
        assert garbage_bytes_min > 0, "sealing a log with no garbage would only make empty logs"
        async with self._lock:
            current = self._logger.current
            if current is None or self.active_log_garbage_bytes() < garbage_bytes_min:
                return None
            sealed = current.log_id
            try:
                await run_io("entry log roll", self._logger.roll)
            except BookieError:
                if self._logger.current is current:
                    self._logger.abandon_current()  # its tail is uncertain; the next checkpoint starts one
                raise
            following = self._logger.current
            assert following is not None
            assert following.log_id > sealed
            self._sealed_below = following.log_id
        return sealed

    # -- usage --------------------------------------------------------------------------------------

    async def usage(self, log_id: int) -> LogUsage:
        return await run_io(f"reading the usage of entry log {log_id:x}", self._usage, log_id)

    def _usage(self, log_id: int) -> LogUsage:
        path = self._logger.directory / log_file_name(log_id)
        file_bytes = path.stat().st_size
        mapped = self._logger.ledgers_map(log_id)
        if mapped is not None:
            with path.open("rb") as f:
                header = decode_header(f.read(HEADER_BYTES))
            return LogUsage(log_id, mapped, file_bytes, header.map_offset, from_map=True)
        reader = LogRecordReader(path, chunk_bytes=SCAN_CHUNK_BYTES, record_bytes_max=self._record_bytes_max)
        usage: dict[int, int] = {}
        reader.open()
        try:
            while (chunk := reader.read_chunk()) is not None:
                for e in chunk.entries:
                    usage[e.ledger_id] = usage.get(e.ledger_id, 0) + e.record_bytes
        finally:
            reader.close()
        return LogUsage(log_id, usage, file_bytes, reader.stop_offset, from_map=False, scan_stop=reader.stop)

    async def index_references(self) -> dict[int, int]:
        """``logId -> highest offset`` any index entry points at (one full pass over the index): the proof
        that nothing points past where a log could be read."""
        return await run_io("scanning the index", self._index.log_references)

    # -- deleting a log with no live ledger ------------------------------------------------------------

    async def delete_dead_log(self, log_id: int, ledgers: Collection[int]) -> int | None:
        """Delete a sealed log whose ``ledgers`` are all deleted; its size, or None if one came back."""
        async with self._lock:
            if any(ledger_id in self._states for ledger_id in ledgers):
                return None
            await self._purge_and_sync(ledgers)
            size = await run_io("entry log size", self._file_size, log_id)
            self._logger.forget_log(log_id)
            await run_io("deleting an entry log", self._logger.delete_log_file, log_id)
        return size

    async def _purge_and_sync(self, ledgers: Iterable[int]) -> None:
        """Delete the index entries of ``ledgers`` that no longer exist, and sync the index (lock held)."""
        batch = self._index.batch()
        for ledger_id in ledgers:
            if ledger_id not in self._states:
                batch.delete_ledger(ledger_id)
        if batch.size:
            await run_io("purging deleted ledgers from the index", self._index.write_sync, batch)
        else:
            await run_io("index sync", self._index.sync_wal)

    def _file_size(self, log_id: int) -> int:
        try:
            return (self._logger.directory / log_file_name(log_id)).stat().st_size
        except FileNotFoundError:
            return 0

    # -- compaction ----------------------------------------------------------------------------------------

    async def allocate_compaction_log(self) -> int:
        """A new log id for a compaction's target, reserved durably and claimed (:meth:`release` it)."""
        async with self._lock:  # log ids are allocated under the lock checkpoints roll logs under
            target = await run_io("allocating a compaction log id", self._logger.allocate_log_id)
        self._busy.add(target)
        return target

    def claim(self, log_id: int) -> None:
        """A running compaction works on ``log_id``: GC and recovery leave it alone until it is released."""
        self._busy.add(log_id)

    def release(self, log_ids: Iterable[int]) -> None:
        self._busy.difference_update(log_ids)

    async def write_manifest(self, manifest: CompactionManifest) -> None:
        """Write the compaction's manifest durably: its commit point (the target must be complete and
        synced); from here on recovery rolls it forward."""
        await run_io("writing a compaction manifest", write_manifest, self._logger.directory, manifest)

    async def finish_compaction(
        self,
        manifest: CompactionManifest,
        *,
        ledgers: Collection[int] | None = None,
        on_step: StepHook | None = None,
        relocate_batch_entries: int = 512,
    ) -> CompactionResult:
        """Roll a committed compaction forward (after :meth:`write_manifest`): make the target visible,
        relocate, sync, delete the sources, drop the manifest.

        A running compaction and recovery at open share this code. A running compaction passes the
        ``ledgers`` of its sources (the index entries of those deleted meanwhile are purged) and its count of
        copied records (``manifest.entries``) is trusted; recovery (``ledgers`` None) trusts nothing in
        memory and proves with one pass over the index that no source is referenced any more before deleting
        it.
        """
        trusted = ledgers is not None
        step = on_step or _no_step
        directory = self._logger.directory
        target, sources = manifest.target, set(manifest.sources)
        result = CompactionResult(target, sorted(sources), [], manifest.entries, 0, 0, 0, 0)
        if not await run_io("making a compacted log visible", make_visible, directory, target):
            log.error(
                "compaction into %s: the target log is missing; keeping its sources %s",
                log_file_name(target),
                [log_file_name(s) for s in sorted(sources)],
            )
            await run_io("removing a compaction manifest", remove_file, directory / manifest_name(target))
            return result
        self._logger.add_log_id(target)
        step("visible")
        result.target_bytes = self._file_size(target)
        seen, result.relocated, clean = await self._relocate(target, sources, relocate_batch_entries, step)
        async with self._lock:
            await self._purge_and_sync(ledgers or ())
        step("index-synced")
        if not (trusted and clean and seen == manifest.entries):
            if trusted:
                log.error("compacted log %s scanned to %d records, %d copied", target, seen, manifest.entries)
            refs = await run_io("scanning the index", self._index.log_references)
            for source in sorted(sources & refs.keys()):
                log.error("entry log %s is still referenced by the index; keeping it", log_file_name(source))
            sources -= refs.keys()
        for source in sorted(sources):
            size = self._file_size(source)
            async with self._lock:
                self._logger.forget_log(source)
                await run_io("deleting a compacted entry log", self._logger.delete_log_file, source)
            result.sources_deleted.append(source)
            result.reclaimed_bytes += size
            step("source-deleted")
        result.reclaimed_bytes -= result.target_bytes
        await run_io("removing a compaction manifest", remove_file, directory / manifest_name(target))
        self._compacted.add(target)
        step("done")
        return result

    async def _relocate(
        self, target: int, sources: set[int], batch_entries: int, step: StepHook
    ) -> tuple[int, int, bool]:
        """Point the index at the target's records where it points into a source; (records, moved, clean)."""
        reader = LogRecordReader(
            self._logger.directory / log_file_name(target),
            chunk_bytes=SCAN_CHUNK_BYTES,
            record_bytes_max=self._record_bytes_max,
        )
        await run_io("opening a compacted log", reader.open)
        seen = moved = 0
        base = target << OFFSET_BITS
        try:
            while (chunk := await run_io("reading a compacted log", reader.read_chunk)) is not None:
                records = chunk.entries
                seen += len(records)
                for start in range(0, len(records), batch_entries):
                    piece = records[start : start + batch_entries]
                    items = [(r.ledger_id, r.entry_id, base | r.offset) for r in piece]
                    async with self._lock:
                        moved += await run_io("relocating index entries", self._apply, items, sources)
                step("relocated")
        finally:
            reader.close()
        return seen, moved, reader.stop in (ScanStop.END, ScanStop.LEDGERS_MAP)

    def _apply(self, items: list[tuple[int, int, int]], sources: set[int]) -> int:
        """Point each entry at its new location if the index still points into a source (lock held)."""
        index = self._index
        batch = index.batch()
        for i, (ledger_id, entry_id, new_location) in enumerate(items):
            if i % GIL_YIELD_EVERY == 0:
                time.sleep(0)
            current = index.get_location(ledger_id, entry_id)
            if current is not None and current >> OFFSET_BITS in sources:
                batch.put_location(ledger_id, entry_id, new_location)
        if batch.size:
            index.write_nosync(batch)
        return batch.size

    # -- recovery at open --------------------------------------------------------------------------------

    async def recover(self) -> list[CompactionResult]:
        """Finish committed compactions and delete uncommitted copies: at engine open (before replay), and
        at the start of every GC pass (BookKeeper's ``cleanUpAndRecover``) for one a failure interrupted."""
        directory = self._logger.directory
        leftovers = await run_io("looking for interrupted compactions", find_leftovers, directory)
        finished = []
        for target, manifest in sorted(leftovers.manifests.items()):
            if target in self._busy:
                continue  # a running compaction's
            if manifest is None:
                log.error("compaction manifest %s is damaged; its copy is discarded", manifest_name(target))
                await run_io("removing a damaged manifest", remove_file, directory / manifest_name(target))
                continue
            result = await self.finish_compaction(manifest)
            log.warning(
                "finished an interrupted compaction into %s: %d entries relocated, sources %s deleted",
                log_file_name(target),
                result.relocated,
                [log_file_name(s) for s in result.sources_deleted],
            )
            finished.append(result)
        for target in leftovers.compacting:
            if target in self._busy or leftovers.manifests.get(target) is not None:
                continue
            log.warning("discarding %s: a compaction interrupted before its commit", compacting_name(target))
            await run_io("discarding a compaction log", remove_file, directory / compacting_name(target))
        return finished

    # -- BookKeeper's simpler compactor: copy into the current log (kept for tools and tests) -------------

    async def append_to_current_log(self, bodies: Sequence[bytes]) -> list[int]:
        async with self._lock:
            return await append_durably(self._logger, list(bodies))

    async def update_locations(self, moves: Sequence[Relocation]) -> int:
        async with self._lock:
            batch = self._index.batch()
            for move in moves:
                if move.ledger_id in self._states and (
                    self._index.get_location(move.ledger_id, move.entry_id) == move.old_location
                ):
                    batch.put_location(move.ledger_id, move.entry_id, move.new_location)
            if batch.size:
                await run_io("index relocation", self._index.write_sync, batch)
            return batch.size

    async def delete_log(self, log_id: int) -> None:
        async with self._lock:
            self._logger.forget_log(log_id)
            await run_io("deleting an entry log", self._logger.delete_log_file, log_id)


def _no_step(_: str) -> None:
    return None

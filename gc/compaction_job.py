"""One transactional compaction: the live records of some sealed entry logs copied into one new log, then
committed or rolled back (BookKeeper's ``TransactionalEntryLogCompactor``, docs/upstream.md, BookKeeper §6;
invariant 12 of docs/architecture.md §3).

:func:`start_compaction` reserves the target (a new log id) and creates ``<target>.log.compacting``
(:mod:`.compaction_log`). :meth:`CompactionJob.copy` reads a source log's records in bounded pieces and
appends the *live* ones - their ledger exists and the index points exactly at them - to the target;
:meth:`CompactionJob.commit` syncs the target, has the engine write the manifest (the commit point) and roll
the compaction forward (the target made visible as ``<target>.log``, the index pointed at the copies in
bounded batches under the checkpoint lock and synced, then the sources and the manifest deleted - the same
code the engine's recovery runs after a crash); :meth:`CompactionJob.abort` deletes the unfinished target and
leaves the sources as they are. A crash before the commit point leaves a copy recovery deletes at the next
open; a crash after it leaves a compaction recovery finishes.

Everything here reaches the engine through
:class:`~magnetar.bookkeeper.bookie.storage.gc_seam.StoragePrimitives`. Blocking work runs in worker threads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from magnetar.bookkeeper.bookie.storage.gc_seam import (
    GIL_YIELD_EVERY,
    OFFSET_BITS,
    BookieError,
    CompactionManifest,
    CompactionResult,
    LogRecordReader,
    LogUsage,
    StepHook,
    StorageIOError,
    StoragePrimitives,
    compacting_name,
    log_file_name,
    run_io,
)
from magnetar.gc.compaction_log import CompactionLogWriter

log = logging.getLogger(__name__)

Throttle = Callable[[int, int], Awaitable[None]]
"""Awaited before each batch is copied with ``(entries, bytes)``: the compactor's rate limit."""


class SourceDamagedError(StorageIOError):
    """A source log could not be read to where its records end; the compaction was rolled back."""


@dataclass(slots=True)
class _LiveChunk:
    raw: bytearray = field(default_factory=bytearray)
    ledger_bytes: list[tuple[int, int]] = field(default_factory=list)
    entries: int = 0


async def start_compaction(
    storage: StoragePrimitives,
    *,
    batch_bytes: int,
    relocate_batch_entries: int = 512,
    sync_bytes: int = 0,
    on_step: StepHook | None = None,
) -> CompactionJob:
    """A new compaction job with its target log created (id reserved durably)."""
    target = await storage.allocate_compaction_log()
    writer = CompactionLogWriter(
        storage.directory, target, offset_limit=storage.compaction_log_bytes_max, sync_bytes=sync_bytes
    )
    try:
        await run_io("creating a compaction log", writer.open)
    except BaseException:
        storage.release((target,))
        raise
    log.info("compaction into entry log %s started", compacting_name(target))
    return CompactionJob(
        storage,
        writer,
        batch_bytes=batch_bytes,
        relocate_batch_entries=relocate_batch_entries,
        on_step=on_step,
    )


class CompactionJob:
    """One compaction: sources copied into one target, then committed or rolled back (see the module)."""

    def __init__(
        self,
        storage: StoragePrimitives,
        writer: CompactionLogWriter,
        *,
        batch_bytes: int,
        relocate_batch_entries: int,
        on_step: StepHook | None,
    ) -> None:
        self._storage = storage
        self._writer = writer
        self._batch_bytes = batch_bytes
        self._relocate_batch_entries = relocate_batch_entries
        self._ledgers: set[int] = set()
        self._step = on_step or _no_step
        self.sources: list[int] = []
        self.entries = 0
        self.copied_bytes = 0
        self._finished = False

    @property
    def target(self) -> int:
        return self._writer.log_id

    @property
    def target_bytes(self) -> int:
        """Bytes written to the target so far (header included)."""
        return self._writer.offset

    async def copy(self, usage: LogUsage, throttle: Throttle) -> None:
        """Copy the live records of the sealed log ``usage`` describes; :class:`SourceDamagedError` if its
        records cannot be read to where they end (then the caller aborts the job)."""
        storage, source = self._storage, usage.log_id
        storage.claim(source)
        self.sources.append(source)
        self._ledgers.update(usage.ledger_bytes)
        reader = LogRecordReader(
            storage.directory / log_file_name(source),
            chunk_bytes=self._batch_bytes,
            record_bytes_max=storage.record_bytes_max,
        )
        await run_io("opening an entry log for compaction", reader.open)
        try:
            while True:
                chunk = await run_io("reading for compaction", self._read_live, reader, source)
                if chunk is None:
                    break
                if not chunk.entries:
                    continue
                await throttle(chunk.entries, len(chunk.raw))
                await run_io("writing a compaction log", self._writer.append, chunk.raw, chunk.ledger_bytes)
                self.entries += chunk.entries
                self.copied_bytes += len(chunk.raw)
                self._step("copy")
        finally:
            reader.close()
        if reader.stop_offset < usage.records_end:
            raise SourceDamagedError(
                f"entry log {log_file_name(source)} reads only to offset {reader.stop_offset} of "
                f"{usage.records_end} ({reader.stop.value if reader.stop else 'stopped'})"
            )

    def _read_live(self, reader: LogRecordReader, source: int) -> _LiveChunk | None:
        """The next records of ``source`` that are live: their ledger exists and the index points at them
        (blocking)."""
        read = reader.read_chunk()
        if read is None:
            return None
        live = _LiveChunk()
        existing, locate = self._storage.existing_ledgers, self._storage.locate
        loc_base = source << OFFSET_BITS
        view, base = memoryview(read.buf), read.base
        run_start = run_end = -1  # contiguous live records are copied with one slice
        for i, e in enumerate(read.entries):
            if i % GIL_YIELD_EVERY == 0:
                time.sleep(0)
            if e.ledger_id in existing and locate(e.ledger_id, e.entry_id) == loc_base | e.offset:
                start = e.offset - base
                if start != run_end:
                    if run_end > run_start:
                        live.raw += view[run_start:run_end]
                    run_start = start
                run_end = start + e.record_bytes
                live.ledger_bytes.append((e.ledger_id, e.record_bytes))
                live.entries += 1
        if run_end > run_start:
            live.raw += view[run_start:run_end]
        return live

    async def commit(self) -> CompactionResult:
        """Sync the target, write the manifest, and finish (shielded: the steps after the commit point are
        short, and an orderly shutdown should not leave them to recovery)."""
        storage = self._storage
        self._finished = True
        with trio.CancelScope(shield=True):
            try:
                await run_io("syncing a compaction log", self._writer.finish)
                self._step("synced")
                manifest = CompactionManifest(self.target, tuple(self.sources), self.entries)
                await storage.write_manifest(manifest)
            except BookieError:
                await self._discard()
                raise
            self._step("manifest")
            try:
                result = await storage.finish_compaction(
                    manifest,
                    ledgers=self._ledgers,
                    on_step=self._step,
                    relocate_batch_entries=self._relocate_batch_entries,
                )
            finally:
                storage.release((self.target, *self.sources))
        result.copied_bytes = self.copied_bytes
        return result

    async def abort(self) -> None:
        """Roll back: delete the unfinished target; the sources stay as they are."""
        if self._finished:
            return
        self._finished = True
        with trio.CancelScope(shield=True):
            await self._discard()

    async def _discard(self) -> None:
        try:
            await run_io("discarding a compaction log", self._writer.discard)
        finally:
            self._storage.release((self.target, *self.sources))
        log.info("compaction into %s rolled back", compacting_name(self.target))


def _no_step(_: str) -> None:
    return None

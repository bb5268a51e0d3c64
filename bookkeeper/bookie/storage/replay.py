"""Journal replay at startup (BookKeeper ``BookieImpl.readJournal`` / ``replay``, docs/upstream.md, BookKeeper
§5.1).

Everything journaled after the persisted mark is re-applied to storage, idempotently: entries go back into
the write cache (re-adding an entry replaces it with the same bytes), master-key records recreate ledgers,
fence records re-fence them (fencing is sticky), explicit-LAC records restore the last value, and deletion
records delete again. Entries of a ledger that is unknown when they are met - deleted before the mark, or
deleted later in the journal - are skipped, as BookKeeper skips entries of deleted ledgers.

Reading and decoding happen in a worker thread, one chunk at a time (bounded memory); records are applied
on the trio thread. When the write cache fills, a checkpoint runs with the mark of the last *fully
applied* chunk, so a crash during replay never persists a mark beyond what storage holds. A torn or corrupt
record ends its file's replay with one log line (see :mod:`.journal_files`); startup goes on.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import trio

from magnetar.bookkeeper.bookie.storage.checkpoint import run_io
from magnetar.bookkeeper.bookie.storage.errors import StorageIOError
from magnetar.bookkeeper.bookie.storage.journal_files import JournalMissingError, JournalReplayReader
from magnetar.bookkeeper.bookie.storage.journal_format import LEDGER_ID, RecordKind, StopReason
from magnetar.bookkeeper.bookie.storage.ledger_store import LedgerState
from magnetar.bookkeeper.bookie.storage.log_mark import LogMark

log = logging.getLogger(__name__)

_IDS = struct.Struct(">qq")


class ReplayTarget(Protocol):
    def ledger_state(self, ledger_id: int) -> LedgerState | None: ...

    def replay_has_room(self, size: int) -> bool:
        """Whether the write cache can take an entry of ``size`` bytes without a checkpoint."""
        ...

    async def replay_checkpoint(self, mark: LogMark | None) -> None:
        """Checkpoint everything applied so far; ``mark`` is where replay may resume afterwards."""
        ...

    def replay_entry(self, ledger_id: int, entry_id: int, body: bytes) -> None: ...

    def replay_ledger_key(self, ledger_id: int, master_key: bytes) -> None: ...

    def replay_fence(self, ledger_id: int) -> None: ...

    def replay_explicit_lac(self, ledger_id: int, body: bytes) -> None: ...

    def replay_delete(self, ledger_id: int) -> None: ...


@dataclass(slots=True)
class ReplayStats:
    entries: int = 0
    meta_records: int = 0
    skipped_entries: int = 0
    end: LogMark | None = None
    stops: list[tuple[LogMark, StopReason]] = field(default_factory=list)
    seconds: float = 0.0


async def replay_journal(
    target: ReplayTarget, directory: Path, start: LogMark | None, *, chunk_bytes: int, record_bytes_max: int
) -> ReplayStats:
    """Apply every journal record after ``start`` to ``target``; see the module docstring."""
    stats = ReplayStats(end=start)
    began = trio.current_time()
    try:
        reader = JournalReplayReader(
            directory, start, chunk_bytes=chunk_bytes, record_bytes_max=record_bytes_max
        )
    except JournalMissingError as exc:
        log.error("cannot replay the journal: %s", exc)
        raise StorageIOError(str(exc)) from exc
    try:
        while True:
            batch = await run_io("reading the journal", reader.read_batch)
            if batch is None:
                break
            await _apply_batch(target, batch.records, stats)
            stats.end = batch.mark
    finally:
        reader.close()
    stats.stops = reader.stops
    stats.seconds = trio.current_time() - began
    log.info(
        "journal replayed from %s to %s: %d entries, %d other records, %d entries of deleted ledgers "
        "skipped, %d files ended early, %.2f s",
        start,
        stats.end,
        stats.entries,
        stats.meta_records,
        stats.skipped_entries,
        len(stats.stops),
        stats.seconds,
    )
    return stats


async def _apply_batch(target: ReplayTarget, records: list[tuple[int, bytes]], stats: ReplayStats) -> None:
    unpack_ids, ledger_state, has_room, put = (
        _IDS.unpack_from,
        target.ledger_state,
        target.replay_has_room,
        target.replay_entry,
    )
    entry_kind = RecordKind.ENTRY
    for kind, payload in records:
        if kind != entry_kind:
            _apply_meta(target, kind, payload, stats)
            continue
        if len(payload) < _IDS.size:
            log.warning("journal entry record of %d bytes ignored", len(payload))
            continue
        ledger_id, entry_id = unpack_ids(payload)
        if ledger_state(ledger_id) is None:
            stats.skipped_entries += 1
            continue
        if not has_room(len(payload)):
            await target.replay_checkpoint(stats.end)
        put(ledger_id, entry_id, payload)
        stats.entries += 1


def _apply_meta(target: ReplayTarget, kind: int, payload: bytes, stats: ReplayStats) -> None:
    if len(payload) < LEDGER_ID.size:
        log.warning("journal record of kind %d with %d bytes ignored", kind, len(payload))
        return
    (ledger_id,) = LEDGER_ID.unpack_from(payload)
    stats.meta_records += 1
    tail = payload[LEDGER_ID.size :]
    if kind == RecordKind.LEDGER_KEY:
        target.replay_ledger_key(ledger_id, tail)
    elif kind == RecordKind.FENCE:
        target.replay_fence(ledger_id)
    elif kind == RecordKind.EXPLICIT_LAC:
        target.replay_explicit_lac(ledger_id, tail)
    elif kind == RecordKind.DELETE:
        target.replay_delete(ledger_id)

"""The storage engine's face for garbage collection: the only module of ``magnetar.bookkeeper.bookie`` that
``magnetar.gc`` imports (``tests/unit/test_architecture.py`` enforces it).

``gc/`` holds the procedures (which ledgers and logs to collect, the transactional compaction copy, its commit
and rollback); the engine exposes only narrow primitives, each safe on a running engine (invariant 12 of
docs/architecture.md §3). This module says what GC may use of the engine: the Protocols it calls through
(the engine's ``GcPrimitives``, :mod:`.gc_primitives`, satisfies :class:`StoragePrimitives`, and its
``DbLedgerStorage``, :mod:`.engine`, satisfies :class:`CollectableStore`), the value types they return, and
the on-disk format pieces a compaction copy writes and reads (entry-log names, header and ledgers map, the
compaction's file names and manifest). The engine keeps the compaction manifest's format and the recovery
that reads it, because opening the storage must finish or roll back an interrupted compaction before its
journal replay, whether or not a collector runs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable
from pathlib import Path
from typing import Protocol

from magnetar.bookkeeper.bookie.storage.checkpoint import run_io
from magnetar.bookkeeper.bookie.storage.compaction_files import (
    CompactionManifest,
    LogRecordReader,
    compacting_name,
    remove_file,
)
from magnetar.bookkeeper.bookie.storage.entry_log import log_file_name
from magnetar.bookkeeper.bookie.storage.entry_log_format import (
    HEADER_BYTES,
    OFFSET_BITS,
    encode_header,
    encode_ledgers_map,
)
from magnetar.bookkeeper.bookie.storage.errors import BookieError, StorageIOError
from magnetar.bookkeeper.bookie.storage.gc_primitives import (
    GIL_YIELD_EVERY,
    CompactionResult,
    LogUsage,
    StepHook,
)
from magnetar.bookkeeper.bookie.storage.ledger_store import DiskUsage
from magnetar.bookkeeper.bookie.storage.settings import BookieStorageSettings

__all__ = [
    "GIL_YIELD_EVERY",
    "HEADER_BYTES",
    "OFFSET_BITS",
    "BookieError",
    "BookieStorageSettings",
    "CollectableStore",
    "CompactionManifest",
    "CompactionResult",
    "DiskUsage",
    "LogRecordReader",
    "LogUsage",
    "StepHook",
    "StorageIOError",
    "StoragePrimitives",
    "compacting_name",
    "encode_header",
    "encode_ledgers_map",
    "log_file_name",
    "remove_file",
    "run_io",
]


class StoragePrimitives(Protocol):
    """The engine's garbage-collection primitives (:mod:`.gc_primitives`)."""

    # -- what there is -------------------------------------------------------------------------------------

    def log_ids(self) -> list[int]:
        """Sealed logs no compaction claimed, ascending: the only logs GC may delete or compact."""
        ...

    @property
    def existing_ledgers(self) -> Container[int]:
        """The ledgers that exist (read-only)."""
        ...

    @property
    def locate(self) -> Callable[[int, int], int | None]:
        """The index lookup ``(ledgerId, entryId) -> location`` (blocking: call it in a worker thread)."""
        ...

    async def usage(self, log_id: int) -> LogUsage:
        """``ledgerId -> bytes`` of a sealed log, from its ledgers map or a scan."""
        ...

    async def index_references(self) -> dict[int, int]:
        """``logId -> highest offset`` any index entry points at (one pass over the index)."""
        ...

    # -- deleting ------------------------------------------------------------------------------------------

    def active_log_garbage_bytes(self) -> int: ...

    async def seal_active_log(self, garbage_bytes_min: int) -> int | None:
        """Roll the log being written if that many of its bytes belong to deleted ledgers; its id, or None."""
        ...

    async def delete_dead_log(self, log_id: int, ledgers: Collection[int]) -> int | None:
        """Delete a sealed log whose ``ledgers`` are all deleted (under the checkpoint lock, after a durable
        purge of their index entries); its size, or None if one of them came back."""
        ...

    # -- compaction ----------------------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The entry-log directory, where a compaction writes ``<target>.log.compacting``."""
        ...

    @property
    def record_bytes_max(self) -> int: ...

    @property
    def compaction_log_bytes_max(self) -> int: ...

    async def allocate_compaction_log(self) -> int:
        """A target log id, reserved durably and claimed."""
        ...

    def claim(self, log_id: int) -> None:
        """Hide ``log_id`` from :meth:`log_ids` and from recovery while a compaction works on it."""
        ...

    def release(self, log_ids: Iterable[int]) -> None: ...

    async def write_manifest(self, manifest: CompactionManifest) -> None:
        """The commit point: from here on the compaction is rolled forward, by :meth:`finish_compaction` or
        by recovery."""
        ...

    async def finish_compaction(
        self,
        manifest: CompactionManifest,
        *,
        ledgers: Collection[int],
        on_step: StepHook | None = None,
        relocate_batch_entries: int = 512,
    ) -> CompactionResult:
        """Roll a committed compaction forward: target visible, index relocated in bounded batches under the
        checkpoint lock and synced, sources and manifest deleted."""
        ...

    async def recover(self) -> list[CompactionResult]:
        """Roll committed compactions forward and delete uncommitted copies (what opening the engine does)."""
        ...


class CollectableStore(Protocol):
    """The storage engine as the garbage collector sees it."""

    @property
    def gc(self) -> StoragePrimitives: ...

    @property
    def settings(self) -> BookieStorageSettings: ...

    def ledgers(self) -> Iterable[int]:
        """The local ledgers (a snapshot to compare with the metadata store)."""
        ...

    def delete_ledger(self, ledger_id: int) -> None: ...

    def disk_usage(self) -> DiskUsage: ...

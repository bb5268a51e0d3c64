"""Every limit of the bookie storage engine, named with its unit last (docs/upstream.md, BookKeeper §5).

BookKeeper's names are given where a setting mirrors one (``journalMaxGroupWaitMSec`` ->
``journal_group_wait_ms``). The model is frozen and validated: a combination that cannot work (a journal
batch bigger than the journal queue, an entry log that a 32-bit offset cannot address, a write cache that
cannot hold one entry) is rejected when the settings are built, not discovered at run time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from magnetar.bookkeeper.runtime import rename_old

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

ENTRY_LOG_OFFSET_LIMIT = 2**32
"""A location packs the entry-log id and the offset in 32 bits each (BookKeeper ``logId << 32 | offset``)."""

JOURNAL_RECORD_BYTES_LIMIT = 2**28
"""A journal record's length shares a 32-bit word with its 4-bit kind (:mod:`.journal_format`)."""


class BookieDirectories(BaseModel):
    """Where a bookie keeps its data, declared once: the bookie server's settings and its engine's inherit
    them (the server hands the engine its own, :meth:`BookieServerSettings.storage_settings`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data_dir: Path = Path("data/bookie")
    """Entry logs (``ledgers/``), the RocksDB index (``index/``) and the journal mark live here (the ledgers
    volume)."""
    journal_dir: Path | None = None
    """Journal files; ``data_dir/journal`` when unset (a separate disk in production, as BookKeeper)."""


class BookieStorageSettings(BookieDirectories):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # -- journal (BookKeeper Journal / JournalChannel) ----------------------------------------------------
    journal_group_wait_ms: float = Field(2.0, ge=0)
    """journalMaxGroupWaitMSec: flush once the oldest waiting record is this old."""
    journal_buffered_bytes_max: int = Field(512 * KIB, ge=4 * KIB)
    """journalBufferedWritesThreshold: flush once this many bytes are buffered."""
    journal_flush_when_queue_empty: bool = True
    """journalFlushWhenQueueEmpty: flush as soon as no more appends are pending (BookKeeper default false;
    here the trio scheduler tells when appends have drained, which keeps latency low at light load)."""
    journal_inline_sync_bytes_max: int = Field(1 * MIB, ge=0)
    """A batch of at most this many bytes is written and fdatasynced on the event loop's thread while syncs
    are quick (``journal_inline_sync_ms_max``); a bigger one - more than ``journal_buffered_bytes_max``
    only collects while a sync runs in the thread - goes to the journal thread. The thread's two wake-ups
    per group commit cost more CPU here than the sync (the journal module's docstring). On this 2-core VM
    (RESULTS.md, 2026-11-22) syncing every batch inline, where only an idle journal's batches of up to
    8 KiB were before, cut a saturated 3-bookie cluster's bookie CPU per message by a quarter (4.7 -> 3.5
    us), raised its throughput by 15 % and lowered its publish p99 at 5,000 and 20,000 msgs/s.
    0: every batch in the thread."""
    journal_inline_sync_ms_max: float = Field(5.0, ge=0)
    """Syncs stay on the event loop's thread only while the last one took at most this long: on a slow,
    busy or failing disk the batches go to the journal thread, so the loop goes on serving reads, pings and
    the admin API during the sync (a quick sync in the thread brings them back). Local SSDs sync in well
    under 1 ms, network volumes in 1-3 ms, spinning disks in 5-15 ms."""
    journal_queue_bytes_max: int = Field(64 * MIB, ge=64 * KIB)
    """Bytes appended but not yet durable (buffered + being synced); beyond it appends are refused with
    StorageBusyError (the role of journalMaxMemorySizeMb)."""
    journal_file_bytes_max: int = Field(2 * GIB, ge=64 * KIB)
    """journalMaxSizeMB: roll to a new file beyond this size (a batch is never split across files)."""
    journal_preallocate_bytes: int = Field(16 * MIB, ge=4 * KIB)
    """journalPreAllocSizeMB: the file is extended by this much ahead of the write position."""
    journal_max_backups: int = Field(0, ge=0, le=1000)
    """journalMaxBackups: journal files older than the checkpoint mark that are kept anyway. Every checkpoint
    deletes the others: replay starts at the mark, so they are never read again. BookKeeper's default is 5;
    0 here, as Pulsar's Helm chart sets it (``journalMaxBackups: "0"``): on a dedicated journal volume the
    backups are what fills it (see the disk monitor)."""
    journal_replay_read_bytes: int = Field(4 * MIB, ge=4 * KIB)
    """Replay reads the journal in chunks of this size (bounded memory at startup)."""

    # -- entry logs (DefaultEntryLogger) -------------------------------------------------------------------
    entry_log_bytes_max: int = Field(1 * GIB, ge=64 * KIB)
    """logSizeLimit: roll the entry log beyond this size; must stay below 4 GiB (32-bit offsets)."""
    entry_log_write_bytes: int = Field(1 * MIB, ge=4 * KIB)
    """A checkpoint writes the entry log in pieces of about this size."""
    entry_log_open_files_max: int = Field(64, ge=1)
    """Entry logs kept open for reading (least recently used are closed)."""
    entry_bytes_max: int = Field(5 * MIB, ge=64)
    """Largest packaged entry accepted (BookKeeper's nettyMaxFrameSizeBytes is 5 MiB)."""

    # -- caches (DbLedgerStorage) --------------------------------------------------------------------------
    write_cache_bytes_max: int = Field(64 * MIB, ge=64 * KIB)
    """dbStorage_writeCacheMaxSizeMb, both halves: each of the two swapped caches holds half."""
    write_throttle_ms_max: int = Field(4_000, ge=0, le=600_000)
    """dbStorage_maxThrottleTimeMs: an add that finds the write cache full while the other half is still
    being flushed (or the journal queue full) waits this long for room before it is refused
    (ETOOMANYREQUESTS); 0 refuses at once. BookKeeper waits 10 s; keep it below the clients'
    ``add_timeout_ms`` (5 s by default), so a client hears the refusal rather than its own timeout. Waiting
    adds hold at most half of ``write_cache_bytes_max`` more; beyond that they are refused at once."""
    read_cache_bytes_max: int = Field(64 * MIB, ge=0)
    """dbStorage_readAheadCacheMaxSizeMb."""
    read_ahead_entries: int = Field(100, ge=0)
    """dbStorage_readAheadCacheBatchSize: following entries of the same ledger cached on a miss."""
    read_ahead_bytes_max: int = Field(64 * KIB, ge=4 * KIB)
    """One read-ahead reads at most this many bytes of the entry log."""

    # -- checkpoint (SyncThread) ---------------------------------------------------------------------------
    checkpoint_interval_ms: int = Field(10_000, ge=1)
    """flushInterval: a checkpoint runs this often, and whenever the write cache fills."""
    checkpoint_slice_entries: int = Field(256, ge=1)
    """Entries packed per slice of a checkpoint (and per index batch) before the event loop gets a turn
    (256 entries take about 0.6 ms here)."""
    checkpoint_give_way_ms: float = Field(2.0, ge=0)
    """Between two slices a checkpoint waits for an idle event loop, at most this long (0: it only yields).
    Keeps the publish latency of the bookie's process flat while it checkpoints; a checkpoint that writers
    wait for (the active write cache half full) does not wait."""
    checkpoint_retry_ms: int = Field(1000, ge=1)
    """After a failed checkpoint (disk full, I/O error) the next attempt waits this long."""
    close_timeout_ms: int = Field(30_000, ge=1)
    """Closing drains the journal and checkpoints for at most this long (the journal covers the rest)."""

    # -- disk ----------------------------------------------------------------------------------------------
    disk_free_check_interval_ms: int = Field(1000, ge=1)
    """How often the engine probes the free space of its volumes against ``disk_free_bytes_min`` (the hard
    floor). Was ``disk_check_interval_ms``, which still sets it: the bookie server's
    ``disk_check_interval_ms`` (BookKeeper's ``diskCheckInterval``, 10 s) is the other check, of the usage
    thresholds that turn the bookie read-only."""
    disk_free_bytes_min: int = Field(64 * MIB, ge=0)
    """Below this many free bytes every add is refused with DiskFullError (the read-only threshold for
    normal adds is the bookie server's business; this is the hard floor that protects the journal)."""

    RENAMED: ClassVar[dict[str, str]] = {"disk_check_interval_ms": "disk_free_check_interval_ms"}
    """Old names that still set a renamed setting (:mod:`magnetar.bookkeeper.runtime.flat_settings`)."""

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        return rename_old(cls, data)

    @model_validator(mode="after")
    def _check_relations(self) -> BookieStorageSettings:
        if self.journal_buffered_bytes_max > self.journal_queue_bytes_max:
            raise ValueError("journal_buffered_bytes_max must not exceed journal_queue_bytes_max")
        if self.entry_bytes_max + 64 > JOURNAL_RECORD_BYTES_LIMIT:
            raise ValueError(f"entry_bytes_max must stay below {JOURNAL_RECORD_BYTES_LIMIT - 64}")
        if self.entry_log_bytes_max + self.entry_bytes_max + 64 * KIB > ENTRY_LOG_OFFSET_LIMIT:
            raise ValueError("entry_log_bytes_max + entry_bytes_max must stay below 4 GiB (32-bit offsets)")
        if self.write_cache_bytes_max < 4 * self.entry_bytes_max:
            raise ValueError("write_cache_bytes_max must hold at least two of the largest entries per half")
        if self.journal_queue_bytes_max < 2 * self.entry_bytes_max:
            raise ValueError("journal_queue_bytes_max must hold at least two of the largest entries")
        return self

    @property
    def journal_path(self) -> Path:
        return self.journal_dir if self.journal_dir is not None else self.data_dir / "journal"

    @property
    def entry_log_path(self) -> Path:
        return self.data_dir / "ledgers"

    @property
    def index_path(self) -> Path:
        return self.data_dir / "index"

    @property
    def mark_path(self) -> Path:
        return self.data_dir / "lastMark"

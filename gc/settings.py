"""Settings of garbage collection: the bookie's garbage collector and entry-log compactor (docs/upstream.md,
BookKeeper §6).

BookKeeper keeps them in the bookie's ``ServerConfiguration``; here they are the collector's, and a bookie
process's settings (:class:`magnetar.admin.processes.bookie_settings.BookieSettings`, the composition root's)
are the bookie server's plus these, under ``gc``. Names map to
BookKeeper's, unit last: ``gcWaitTime`` -> ``gc_wait_time_s``, ``gcMetadataOpRateLimit`` ->
``gc_metadata_op_rate_per_s``, ``minorCompactionThreshold`` / ``minorCompactionInterval`` ->
``minor_compaction_threshold`` / ``minor_compaction_interval_s`` (and major),
``minor/majorCompactionMaxTimeMillis`` -> ``*_compaction_max_time_s``, ``compactionRateByEntries`` /
``compactionRateByBytes`` / ``isThrottleByBytes`` -> ``compaction_rate_entries_per_s`` /
``compaction_rate_bytes_per_s`` / ``compaction_throttle_by_bytes``, ``isForceGCAllowWhenNoSpace`` ->
``force_gc_allow_when_no_space`` (default *true* here: compaction is what frees a full disk, BookKeeper issue
#571), ``useTargetEntryLogSizeForGc`` -> ``use_target_entry_log_size_for_gc``, ``forceAllowCompaction`` ->
#``force_allow_compaction``. ``active_log_roll_garbage_bytes`` is Magnetar's own
(BookKeeper never touches the log being written). A threshold or interval <= 0 disables that compaction,
as in BookKeeper, whose start-up checks (minor below major, intervals not below ``gcWaitTime``) are the
validator's. Compaction is always transactional here (``useTransactionalCompaction=true``).

The broker-side retention service's settings are declared with the managed ledger's
(:mod:`magnetar.managed_ledger.retention_settings`), which the broker's settings inherit; they are
re-exported here.
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from magnetar.managed_ledger.retention_settings import RetentionSettings

MIB = 1024 * 1024


class GcSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    gc_enabled: bool = True
    """Run the garbage collector in the bookie (disk storage only)."""
    gc_wait_time_s: float = Field(600.0, gt=0)
    """gcWaitTime: pause between two garbage-collection passes (a trigger starts one at once)."""
    gc_metadata_op_rate_per_s: float = Field(1000.0, gt=0)
    """gcMetadataOpRateLimit: metadata-store reads per second while comparing local ledgers."""
    active_log_roll_garbage_bytes: int = Field(0, ge=0)
    """A pass seals the entry log being written once at least this many of its bytes belong to deleted
    ledgers, so they can be reclaimed (a log holding nothing else is deleted in the same pass, the rest
    compacted later) instead of waiting until the log reaches ``entry_log_bytes_max``. 0: never, as
    BookKeeper; ``magnetar standalone`` defaults to 4 MiB."""

    minor_compaction_threshold: float = Field(0.2, le=1.0)
    """Entry logs whose live fraction is below this are compacted by minor compaction (<= 0: disabled)."""
    minor_compaction_interval_s: float = 3600.0
    major_compaction_threshold: float = Field(0.8, le=1.0)
    major_compaction_interval_s: float = 86400.0
    minor_compaction_max_time_s: float = Field(0.0, ge=0)
    """A minor compaction pass starts no new log after this long (0: no limit)."""
    major_compaction_max_time_s: float = Field(0.0, ge=0)

    compaction_rate_entries_per_s: float = Field(1000.0, ge=0)
    """compactionRateByEntries: entries copied per second (0: unlimited)."""
    compaction_rate_bytes_per_s: float = Field(1_000_000.0, ge=0)
    """compactionRateByBytes: bytes copied per second when throttling by bytes (0: unlimited)."""
    compaction_throttle_by_bytes: bool = False
    compaction_batch_bytes: int = Field(1 * MIB, ge=64 * 1024)
    """The compactor reads and writes the logs in pieces of about this size (one worker-thread call each)."""
    compaction_sync_bytes: int = Field(4 * MIB, ge=0)
    """The compaction log is fdatasynced every this many bytes (0: once, at the end): the disk then writes it
    back in pieces instead of one burst that the journal's fsyncs would queue behind."""
    compaction_relocate_batch_entries: int = Field(512, ge=1)
    """Index updates made per hold of the checkpoint lock when a compacted log is made visible."""
    compaction_free_bytes_reserve: int = Field(1 * MIB, ge=0)
    """A compaction starts only if the disk has room for the live data it copies plus this reserve."""

    force_gc_allow_when_no_space: bool = True
    """Keep compacting while the disk is above disk_usage_threshold (the bookie read-only): it frees space."""
    force_allow_compaction: bool = False
    """Let a trigger force a compaction that the thresholds disable."""
    use_target_entry_log_size_for_gc: bool = False
    """Usage = remaining / max(total, entry_log_bytes_max): small logs count as mostly empty (get merged)."""

    @model_validator(mode="after")
    def _check_relations(self) -> Self:
        minor_on = self.minor_compaction_threshold > 0 and self.minor_compaction_interval_s > 0
        major_on = self.major_compaction_threshold > 0 and self.major_compaction_interval_s > 0
        if minor_on and self.minor_compaction_interval_s < self.gc_wait_time_s:
            raise ValueError("minor_compaction_interval_s must not be below gc_wait_time_s")
        if major_on and self.major_compaction_interval_s < self.gc_wait_time_s:
            raise ValueError("major_compaction_interval_s must not be below gc_wait_time_s")
        if minor_on and major_on:
            if self.minor_compaction_threshold > self.major_compaction_threshold:
                raise ValueError("minor_compaction_threshold must not exceed major_compaction_threshold")
            if self.minor_compaction_interval_s > self.major_compaction_interval_s:
                raise ValueError("minor_compaction_interval_s must not exceed major_compaction_interval_s")
        return self

    @property
    def minor_enabled(self) -> bool:
        return self.minor_compaction_threshold > 0 and self.minor_compaction_interval_s > 0

    @property
    def major_enabled(self) -> bool:
        return self.major_compaction_threshold > 0 and self.major_compaction_interval_s > 0


__all__ = ["GcSettings", "RetentionSettings"]

"""Per entry log: how many bytes each ledger holds and how much of it is still live (BookKeeper's
``EntryLogMetadata`` map, built by ``extractMetaFromEntryLogs``; docs/upstream.md, BookKeeper §6).

A sealed log never changes, so its ``ledgerId -> bytes`` is read once - from the ledgers map written when the
log was rolled, or by a scan when it has none - and kept. What changes is which of those ledgers still exist:
*remaining* bytes are those of existing ledgers, and ``usage = remaining / total`` (BookKeeper's
``getUsage``; with ``use_target_entry_log_size_for_gc`` the denominator is at least the log size limit, so
small logs - a restart's, or a small compaction's - count as mostly empty and get merged rather than pile
up).
A log whose ledgers are all gone is *dead* and deleted outright; the others are compaction candidates.

A log without a ledgers map whose scan stopped at a torn or corrupt record may hold records the scan could
not reach. It is trusted only after one pass over the index shows that nothing points at or beyond the
point where the scan stopped (true after a crash: the index only ever points at synced records). Otherwise
the log is *damaged*: it is never deleted or compacted, and it is reported (compaction must neither stop
silently nor destroy what it cannot read).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from magnetar.bookkeeper.bookie.storage.gc_seam import BookieError, LogUsage, StoragePrimitives, log_file_name

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LogStatus:
    log_id: int
    file_bytes: int
    total_bytes: int
    remaining_bytes: int
    usage: float
    ledgers: int
    live_ledgers: int
    damaged: str | None

    def to_json(self) -> dict[str, object]:
        return {
            "logId": self.log_id,
            "file": log_file_name(self.log_id),
            "fileBytes": self.file_bytes,
            "totalBytes": self.total_bytes,
            "remainingBytes": self.remaining_bytes,
            "usage": round(self.usage, 6),
            "ledgers": self.ledgers,
            "liveLedgers": self.live_ledgers,
            "damaged": self.damaged,
        }


class UsageTracker:
    def __init__(self, engine: StoragePrimitives, *, target_log_bytes: int | None = None) -> None:
        """``target_log_bytes``: the least denominator of the usage fraction (None: the log's own total)."""
        self._engine = engine
        self._target_log_bytes = target_log_bytes
        self._usage: dict[int, LogUsage] = {}
        self.damaged: dict[int, str] = {}

    async def refresh(self) -> int:
        """Learn the usage of sealed logs not seen yet, forget logs that are gone; how many were new."""
        ids = self._engine.log_ids()
        present = set(ids)
        for log_id in [i for i in self._usage if i not in present]:
            del self._usage[log_id]
        new: list[LogUsage] = []
        for log_id in ids:
            if log_id in self._usage or log_id in self.damaged:
                continue
            try:
                usage = await self._engine.usage(log_id)
            except BookieError as exc:
                self.mark_damaged(log_id, f"unreadable: {exc}")
                continue
            new.append(usage)
        await self._check_partial([u for u in new if not u.fully_read])
        for usage in new:
            if usage.log_id not in self.damaged:
                self._usage[usage.log_id] = usage
        return len(new)

    async def _check_partial(self, partial: list[LogUsage]) -> None:
        if not partial:
            return
        refs = await self._engine.index_references()
        for usage in partial:
            if refs.get(usage.log_id, -1) >= usage.records_end:
                stop = usage.scan_stop.value if usage.scan_stop else "stopped"
                self.mark_damaged(
                    usage.log_id, f"records readable only to offset {usage.records_end} ({stop})"
                )
            else:
                log.info(
                    "entry log %s ends in a torn record at offset %d (a crash); nothing is indexed past it",
                    log_file_name(usage.log_id),
                    usage.records_end,
                )

    def mark_damaged(self, log_id: int, reason: str) -> None:
        """Leave this log alone from now on (reported by the GC details)."""
        if log_id not in self.damaged:
            log.error("entry log %s is damaged and left alone: %s", log_file_name(log_id), reason)
        self.damaged[log_id] = reason
        self._usage.pop(log_id, None)

    def forget(self, log_id: int) -> None:
        self._usage.pop(log_id, None)

    def usage_of(self, log_id: int) -> LogUsage:
        return self._usage[log_id]

    def remaining_bytes(self, log_id: int) -> int:
        existing = self._engine.existing_ledgers
        return sum(
            size for ledger_id, size in self._usage[log_id].ledger_bytes.items() if ledger_id in existing
        )

    def fraction(self, log_id: int) -> float:
        usage = self._usage[log_id]
        total = usage.total_bytes
        if self._target_log_bytes is not None:
            total = max(total, self._target_log_bytes)
        return self.remaining_bytes(log_id) / total if total > 0 else 0.0

    def dead_logs(self) -> list[int]:
        return [log_id for log_id in sorted(self._usage) if self.remaining_bytes(log_id) == 0]

    def candidates(self, threshold: float) -> list[tuple[float, int]]:
        """``(usage, logId)`` of the live logs below ``threshold``, lowest usage first."""
        found = []
        for log_id in sorted(self._usage):
            fraction = self.fraction(log_id)
            if fraction < threshold and self.remaining_bytes(log_id) > 0:
                found.append((fraction, log_id))
        found.sort()
        return found

    def statuses(self) -> list[LogStatus]:
        existing = self._engine.existing_ledgers
        out = []
        for log_id in sorted(self._usage):
            usage = self._usage[log_id]
            live = [ledger_id for ledger_id in usage.ledger_bytes if ledger_id in existing]
            out.append(
                LogStatus(
                    log_id,
                    usage.file_bytes,
                    usage.total_bytes,
                    self.remaining_bytes(log_id),
                    self.fraction(log_id),
                    len(usage.ledger_bytes),
                    len(live),
                    None,
                )
            )
        for log_id, reason in sorted(self.damaged.items()):
            out.append(LogStatus(log_id, 0, 0, 0, 0.0, 0, 0, reason))
        return out

    @property
    def log_count(self) -> int:
        return len(self._usage)

    def totals(self) -> tuple[int, int]:
        """``(file bytes, remaining bytes)`` over the tracked logs."""
        return (
            sum(u.file_bytes for u in self._usage.values()),
            sum(self.remaining_bytes(log_id) for log_id in self._usage),
        )

"""Entry-log compaction policy: which logs, in which order, at what rate (BookKeeper's
``GarbageCollectorThread.doCompactEntryLogs`` with the ``TransactionalEntryLogCompactor``; docs/upstream.md,
BookKeeper §6).

A pass (minor or major) takes the logs whose usage is below its threshold, lowest usage first (they free
the most space per byte copied), and packs them into jobs whose live bytes fit one entry log
(``entry_log_bytes_max``): each job copies the live entries of its logs into one new log and retires them
(:class:`~magnetar.gc.compaction_job.CompactionJob`, transactional and crash-safe). Merging
several sparse logs into one keeps the number of logs from growing (BookKeeper compacts one log into one).
Copying is throttled by a token bucket in entries or bytes per second (``compactionRateByEntries`` /
``compactionRateByBytes``), so the disk and the event loop stay available to writers.

Jobs are planned one at a time against the free disk space: a job copies no more than the disk can take
(less ``compaction_free_bytes_reserve``), so on a nearly full disk the emptiest logs go first in small jobs,
and each job's freed space lets the next one be bigger. A job that would free nothing (a single log with no
dead bytes) is not planned; a source a job cannot read to its end is marked damaged and the job rolled back
(its other logs are retried on the next pass). A pass stops when nothing is left below its threshold, at its
time limit, when the caller says stop (suspended, disk pressure), when what is left does not fit the free
space, or on a storage error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Set
from dataclasses import dataclass

import trio

from magnetar.bookkeeper.bookie.storage.gc_seam import BookieError, StepHook, StoragePrimitives, log_file_name
from magnetar.gc.compaction_job import SourceDamagedError, start_compaction
from magnetar.gc.log_usage import UsageTracker
from magnetar.gc.rate_limiter import RateLimiter
from magnetar.gc.settings import GcSettings

log = logging.getLogger(__name__)

StopCheck = Callable[[], str | None]
"""Asked before each job: a reason to stop the pass, or None to go on."""


@dataclass(slots=True)
class CompactionPass:
    kind: str
    threshold: float
    jobs: int = 0
    logs_compacted: int = 0
    entries: int = 0
    copied_bytes: int = 0
    reclaimed_bytes: int = 0
    seconds: float = 0.0
    stopped: str | None = None
    """Why the pass ended before its last job (None: it did them all)."""

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "threshold": self.threshold,
            "jobs": self.jobs,
            "logsCompacted": self.logs_compacted,
            "entries": self.entries,
            "copiedBytes": self.copied_bytes,
            "reclaimedBytes": self.reclaimed_bytes,
            "seconds": round(self.seconds, 3),
            "stopped": self.stopped,
        }


class Compactor:
    def __init__(
        self,
        engine: StoragePrimitives,
        tracker: UsageTracker,
        settings: GcSettings,
        *,
        target_log_bytes: int,
        free_bytes: Callable[[], int | None],
        on_step: StepHook | None = None,
    ) -> None:
        self._engine = engine
        self._tracker = tracker
        self._settings = settings
        self._target_log_bytes = target_log_bytes
        self._free_bytes = free_bytes
        self._on_step = on_step
        by_bytes = settings.compaction_throttle_by_bytes
        self._by_bytes = by_bytes
        self.limiter = RateLimiter(
            settings.compaction_rate_bytes_per_s if by_bytes else settings.compaction_rate_entries_per_s
        )

    def plan(
        self, threshold: float, budget_bytes: int | None = None, exclude: Set[int] = frozenset()
    ) -> list[list[int]]:
        """Jobs for the logs below ``threshold``, lowest usage first, each copying at most ``budget_bytes``
        (default: one entry log's worth) of live data."""
        tracker = self._tracker
        budget = self._target_log_bytes if budget_bytes is None else min(budget_bytes, self._target_log_bytes)
        jobs: list[list[int]] = []
        current: list[int] = []
        current_bytes = 0
        for _, log_id in tracker.candidates(threshold):
            remaining = tracker.remaining_bytes(log_id)
            if log_id in exclude or remaining > budget:
                continue
            if current and current_bytes + remaining > budget:
                jobs.append(current)
                current, current_bytes = [], 0
            current.append(log_id)
            current_bytes += remaining
        if current:
            jobs.append(current)
        return [job for job in jobs if len(job) > 1 or self._frees_bytes(job[0])]

    def _frees_bytes(self, log_id: int) -> bool:
        return self._tracker.remaining_bytes(log_id) < self._tracker.usage_of(log_id).total_bytes

    async def run(self, kind: str, threshold: float, *, max_time_s: float, stop: StopCheck) -> CompactionPass:
        result = CompactionPass(kind, threshold)
        started = trio.current_time()
        tried: set[int] = set()
        while True:
            reason = stop()
            if reason is None and max_time_s and trio.current_time() - started >= max_time_s:
                reason = f"{kind}_compaction_max_time_s={max_time_s} reached"
            job, reason = self._next_job(threshold, tried) if reason is None else (None, reason)
            if job is None:
                result.stopped = reason
                break
            tried.update(job)
            try:
                await self._run_job(job, result)
            except BookieError as exc:
                log.error("%s compaction stopped: %s", kind, exc)
                result.stopped = f"storage error: {exc}"
                break
        result.seconds = trio.current_time() - started
        return result

    def _next_job(self, threshold: float, tried: set[int]) -> tuple[list[int] | None, str | None]:
        """The next job that fits the free space; else None and why (None: nothing left to do)."""
        free = self._free_bytes()
        budget = None if free is None else free - self._settings.compaction_free_bytes_reserve
        jobs = self.plan(threshold, budget, tried)
        if jobs:
            return jobs[0], None
        if budget is not None and self.plan(threshold, None, tried):
            log.warning("compaction paused: %d bytes free are not enough to copy the next log", free)
            return None, f"not enough free disk space ({free} bytes)"
        return None, None

    async def _run_job(self, logs: list[int], result: CompactionPass) -> None:
        tracker = self._tracker
        job = await start_compaction(
            self._engine,
            batch_bytes=self._settings.compaction_batch_bytes,
            relocate_batch_entries=self._settings.compaction_relocate_batch_entries,
            sync_bytes=self._settings.compaction_sync_bytes,
            on_step=self._on_step,
        )
        source = logs[0]
        try:
            for source in logs:
                await job.copy(tracker.usage_of(source), self._throttle)
        except SourceDamagedError as exc:
            await job.abort()
            tracker.mark_damaged(source, str(exc))
            return
        except BaseException:
            await job.abort()
            raise
        done = await job.commit()
        for log_id in done.sources_deleted:
            tracker.forget(log_id)
        result.jobs += 1
        result.logs_compacted += len(done.sources_deleted)
        result.entries += done.entries
        result.copied_bytes += done.copied_bytes
        result.reclaimed_bytes += done.reclaimed_bytes
        log.info(
            "%s compaction: %s -> %s, %d live entries (%d bytes) copied, %d bytes reclaimed",
            result.kind,
            _names(done.sources_deleted),
            log_file_name(done.target),
            done.entries,
            done.copied_bytes,
            done.reclaimed_bytes,
        )

    async def _throttle(self, entries: int, size: int) -> None:
        await self.limiter.acquire(size if self._by_bytes else entries)


def _names(log_ids: list[int]) -> str:
    return ",".join(log_file_name(log_id) for log_id in log_ids)

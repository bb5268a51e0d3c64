"""The bookie's garbage collector: BookKeeper's ``GarbageCollectorThread`` (docs/upstream.md, BookKeeper §6,
§7, invariant 12 of docs/architecture.md §3).

One pass (every ``gc_wait_time_s``, or at once when triggered):

1. **Ledgers.** Local ledgers whose metadata is gone are deleted locally (:mod:`.ledger_gc`: snapshot first,
   rate-limited reads, re-check before deleting; a ledger that exists in the metadata store is never deleted).
   Paused while the metadata store is unhealthy (``store.health``): a pass then compares nothing, and a pass
   during which an outage began deletes nothing - a view read across an outage may be stale or partial, and
   a ledger is never deleted because its metadata could not be read.
2. **The log being written.** With ``active_log_roll_garbage_bytes`` set, it is sealed once that many of
   its bytes belong to deleted ledgers (Magnetar's own step: BookKeeper leaves it until it is full), so the
   steps below can reclaim it.
3. **Entry-log usage.** Newly sealed logs are read once (:mod:`.log_usage`).
4. **Dead logs.** Logs none of whose ledgers exists any more are deleted outright.
5. **Compaction**, when due or forced: major (usage below ``major_compaction_threshold``, every
   ``major_compaction_interval_s``) takes precedence over minor (``minor_compaction_threshold``,
   ``minor_compaction_interval_s``), as in BookKeeper; :mod:`.compactor` does the work.

Disk pressure (the bookie's disk figures, BookKeeper's ``LedgerDirsMonitor`` listener): above
``disk_usage_warn_threshold`` a scheduled major compaction is paused (a minor one runs instead) unless
forced; above ``disk_usage_threshold`` - where the bookie is read-only - compaction goes on (it is what frees
the disk; BookKeeper suspends it unless ``isForceGCAllowWhenNoSpace``, see BookKeeper #571) unless
``force_gc_allow_when_no_space`` is off. Deleting ledgers and dead logs never needs space and always runs.
After a pass that freed space the ``on_space_freed`` hook runs (the bookie re-checks its disk at once, so a
read-only bookie becomes writable again without waiting for its next disk check).

A failing pass is logged with its cause and counted; the loop goes on (pain point #2: no silent stop).
Passes never overlap: a trigger during a pass runs another pass after it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from magnetar.bookkeeper.bookie.storage.gc_seam import CollectableStore, DiskUsage, StepHook, log_file_name
from magnetar.bookkeeper.metadata import MetadataStore, MetadataStoreError
from magnetar.gc.compactor import CompactionPass, Compactor
from magnetar.gc.ledger_gc import LedgersRootMissingError, find_deleted_ledgers
from magnetar.gc.log_usage import UsageTracker
from magnetar.gc.rate_limiter import RateLimiter
from magnetar.gc.settings import GcSettings

log = logging.getLogger(__name__)

MAJOR = "major"
MINOR = "minor"
DEFAULT_MAJOR_THRESHOLD = 0.8
DEFAULT_MINOR_THRESHOLD = 0.2
LEDGER_DELETES_PER_YIELD = 256


@dataclass(frozen=True, slots=True)
class DiskPressure:
    """The bookie's disk thresholds (``disk_usage_warn_threshold``, ``disk_usage_threshold``)."""

    warn: float = 0.90
    full: float = 0.95


@dataclass(slots=True)
class GcStats:
    """Cumulative figures (exported as metrics by :mod:`.gc_metrics`)."""

    runs: int = 0
    failures: int = 0
    ledger_checks_paused: int = 0
    """Passes that compared no ledgers: the metadata store was unavailable, or had an outage meanwhile."""
    run_seconds_total: float = 0.0
    last_run_seconds: float = 0.0
    deleted_ledgers: int = 0
    deleted_logs: int = 0
    reclaimed_by_deletion_bytes: int = 0
    reclaimed_by_compaction_bytes: int = 0
    compactions: dict[str, int] = field(default_factory=lambda: {MAJOR: 0, MINOR: 0})
    logs_compacted: dict[str, int] = field(default_factory=lambda: {MAJOR: 0, MINOR: 0})
    compacted_entries: int = 0
    compacted_bytes: int = 0
    sealed_active_logs: int = 0


@dataclass(slots=True)
class GcPassResult:
    deleted_ledgers: list[int] = field(default_factory=list)
    sealed_active_log: int | None = None
    """The log being written that this pass sealed (``active_log_roll_garbage_bytes``)."""
    deleted_logs: list[int] = field(default_factory=list)
    reclaimed_by_deletion_bytes: int = 0
    compaction: CompactionPass | None = None
    compaction_skipped: str | None = None
    seconds: float = 0.0

    @property
    def reclaimed_bytes(self) -> int:
        return self.reclaimed_by_deletion_bytes + (self.compaction.reclaimed_bytes if self.compaction else 0)


class BookieGarbageCollector:
    def __init__(
        self,
        store: CollectableStore,
        metadata: MetadataStore | None,
        settings: GcSettings,
        *,
        disk: DiskPressure | None = None,
        on_space_freed: Callable[[], object] | None = None,
        on_step: StepHook | None = None,
        name: str = "",
    ) -> None:
        self.store = store
        self.metadata = metadata
        self.settings = settings
        self.name = name
        """The bookie id (for logs and the HTTP details)."""
        self._disk = disk or DiskPressure()
        self._on_space_freed = on_space_freed
        log_bytes = store.settings.entry_log_bytes_max
        self.tracker = UsageTracker(
            store.gc, target_log_bytes=log_bytes if settings.use_target_entry_log_size_for_gc else None
        )
        self.compactor = Compactor(
            store.gc,
            self.tracker,
            settings,
            target_log_bytes=log_bytes,
            free_bytes=self._free_bytes,
            on_step=on_step,
        )
        self.metadata_limiter = RateLimiter(settings.gc_metadata_op_rate_per_s)
        self.stats = GcStats()
        self.suspended = {MAJOR: False, MINOR: False}
        self.compacting: str | None = None
        self.forced = False
        self.last_compaction_ms = {MAJOR: 0, MINOR: 0}
        self.last_result: GcPassResult | None = None
        self.last_error: str | None = None
        now = trio.current_time()  # compaction intervals count from start-up, as BookKeeper's do
        self._last_compaction_mono: dict[str, float | None] = {MAJOR: now, MINOR: now}
        self._pass_lock = trio.Lock()
        self._wakeup = trio.Event()
        self._force = {MAJOR: False, MINOR: False}
        self._pass_done = trio.Event()

    # -- control --------------------------------------------------------------------------------------

    def trigger(self, *, force_major: bool = False, force_minor: bool = False) -> None:
        """Start a pass now (BookKeeper's ``forceGC``); the forced kinds run whatever their schedule."""
        self._force[MAJOR] |= force_major
        self._force[MINOR] |= force_minor
        self._wakeup.set()

    async def wait_for_pass(self) -> None:
        """Wait until the next pass to start (the one a trigger just asked for) has finished."""
        await self._pass_done.wait()

    def suspend(self, *, major: bool, minor: bool) -> None:
        self.suspended[MAJOR] |= major
        self.suspended[MINOR] |= minor

    def resume(self, *, major: bool, minor: bool) -> None:
        if major:
            self.suspended[MAJOR] = False
        if minor:
            self.suspended[MINOR] = False

    @property
    def in_forced_pass(self) -> bool:
        return self.forced

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The scheduled loop: a pass every ``gc_wait_time_s`` or when triggered; never dies of a failure."""
        log.info("garbage collector %s running: a pass every %s s", self.name, self.settings.gc_wait_time_s)
        task_status.started()
        while True:
            with trio.move_on_after(self.settings.gc_wait_time_s):
                await self._wakeup.wait()
            self._wakeup = trio.Event()
            force, self._force = self._force, {MAJOR: False, MINOR: False}
            await self.run_once(force_major=force[MAJOR], force_minor=force[MINOR])

    async def run_once(self, *, force_major: bool = False, force_minor: bool = False) -> GcPassResult | None:
        """One pass now (after the one running, if any); its result, or None if it failed (logged)."""
        async with self._pass_lock:
            done, self._pass_done = self._pass_done, trio.Event()
            self.forced = force_major or force_minor
            started = trio.current_time()
            try:
                result = await self._pass(force_major, force_minor)
                self.last_error = None
            except Exception as exc:
                self.stats.failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("garbage collection pass of %s failed; the next one will retry", self.name)
                result = None
            finally:
                self.forced = False
                self.compacting = None
                elapsed = trio.current_time() - started
                self.stats.runs += 1
                self.stats.run_seconds_total += elapsed
                self.stats.last_run_seconds = elapsed
                done.set()
            if result is not None:
                result.seconds = elapsed
                self.last_result = result
                if result.reclaimed_bytes > 0 and self._on_space_freed is not None:
                    self._on_space_freed()
            return result

    # -- one pass ----------------------------------------------------------------------------------------

    async def _pass(self, force_major: bool, force_minor: bool) -> GcPassResult:
        result = GcPassResult()
        await self.store.gc.recover()  # a compaction a failure interrupted is finished or rolled back
        await self._collect_ledgers(result)
        await self._seal_active_log(result)
        await self.tracker.refresh()
        await self._delete_dead_logs(result)
        kind, threshold, skipped = self._choose_compaction(force_major, force_minor)
        if kind is None:
            result.compaction_skipped = skipped
            if skipped:
                log.info("GC %s: no compaction: %s", self.name, skipped)
            return result
        self.compacting = kind
        max_time = (
            self.settings.major_compaction_max_time_s
            if kind == MAJOR
            else self.settings.minor_compaction_max_time_s
        )
        forced = force_major if kind == MAJOR else force_minor
        compaction = await self.compactor.run(
            kind, threshold, max_time_s=max_time, stop=lambda: self._stop_reason(kind, forced)
        )
        self._record_compaction(kind, compaction)
        result.compaction = compaction
        return result

    async def _collect_ledgers(self, result: GcPassResult) -> None:
        if self.metadata is None:
            return
        health = self.metadata.health
        if not health.healthy:
            self.stats.ledger_checks_paused += 1
            log.info("GC %s: ledgers not compared: the metadata store is %s", self.name, health.state.value)
            return
        generation = health.generation
        local = list(self.store.ledgers())  # the snapshot comes before any metadata read
        try:
            gone = await find_deleted_ledgers(local, self.metadata, self.metadata_limiter)
        except (MetadataStoreError, LedgersRootMissingError) as exc:
            log.warning("GC %s: ledgers not compared with the metadata store this pass: %s", self.name, exc)
            return
        if not health.uninterrupted_since(generation):
            self.stats.ledger_checks_paused += 1
            log.warning(
                "GC %s: the metadata store had an outage during the comparison; nothing deleted this pass "
                "(%d candidates are checked again next time)",
                self.name,
                len(gone),
            )
            return
        for count, ledger_id in enumerate(gone, 1):
            self.store.delete_ledger(ledger_id)
            log.info(
                "GC %s: deleted ledger %d: its metadata no longer exists (checked twice)",
                self.name,
                ledger_id,
            )
            if count % LEDGER_DELETES_PER_YIELD == 0:
                await trio.lowlevel.checkpoint()
        result.deleted_ledgers = gone
        self.stats.deleted_ledgers += len(gone)

    async def _seal_active_log(self, result: GcPassResult) -> None:
        garbage_min = self.settings.active_log_roll_garbage_bytes
        if garbage_min <= 0:
            return
        garbage = self.store.gc.active_log_garbage_bytes()
        sealed = await self.store.gc.seal_active_log(garbage_min)
        if sealed is None:
            return
        result.sealed_active_log = sealed
        self.stats.sealed_active_logs += 1
        log.info(
            "GC %s: sealed entry log %s while it was being written: %d bytes of it belong to deleted ledgers",
            self.name,
            log_file_name(sealed),
            garbage,
        )

    async def _delete_dead_logs(self, result: GcPassResult) -> None:
        for log_id in self.tracker.dead_logs():
            ledgers = self.tracker.usage_of(log_id).ledger_bytes
            size = await self.store.gc.delete_dead_log(log_id, ledgers.keys())
            if size is None:
                continue  # a ledger came back meanwhile; usage will say so next time
            self.tracker.forget(log_id)
            result.deleted_logs.append(log_id)
            result.reclaimed_by_deletion_bytes += size
            log.info(
                "GC %s: deleted entry log %s (%d bytes): none of its %d ledgers exists any more",
                self.name,
                log_file_name(log_id),
                size,
                len(ledgers),
            )
        self.stats.deleted_logs += len(result.deleted_logs)
        self.stats.reclaimed_by_deletion_bytes += result.reclaimed_by_deletion_bytes

    def _choose_compaction(
        self, force_major: bool, force_minor: bool
    ) -> tuple[str | None, float, str | None]:
        """``(kind, threshold, why none)`` for this pass."""
        s = self.settings
        now = trio.current_time()
        major = self._eligible(MAJOR, force_major, s.major_enabled, s.major_compaction_interval_s, now)
        minor = self._eligible(MINOR, force_minor, s.minor_enabled, s.minor_compaction_interval_s, now)
        used = self._used_fraction()
        skipped = None
        if major and used is not None and used > self._disk.warn and not force_major:
            skipped = f"major compaction paused: disk usage {used:.1%} above disk_usage_warn_threshold"
            log.warning("GC %s: %s", self.name, skipped)
            major = False
        if used is not None and used > self._disk.full and not s.force_gc_allow_when_no_space:
            major, minor = major and force_major, minor and force_minor
            skipped = f"compaction suspended: disk usage {used:.1%} above disk_usage_threshold"
        if major:
            threshold = s.major_compaction_threshold if s.major_enabled else DEFAULT_MAJOR_THRESHOLD
            return MAJOR, threshold, None
        if minor:
            threshold = s.minor_compaction_threshold if s.minor_enabled else DEFAULT_MINOR_THRESHOLD
            return MINOR, threshold, None
        return None, 0.0, skipped

    def _eligible(self, kind: str, forced: bool, enabled: bool, interval_s: float, now: float) -> bool:
        if forced:
            if enabled or self.settings.force_allow_compaction:
                return True
            log.warning("GC %s: forced %s compaction refused: it is disabled", self.name, kind)
            return False
        if not enabled or self.suspended[kind]:
            return False
        last = self._last_compaction_mono[kind]
        return last is None or now - last >= interval_s

    def _stop_reason(self, kind: str, forced: bool) -> str | None:
        if not forced and self.suspended[kind]:
            return f"{kind} compaction suspended"
        used = self._used_fraction()
        if kind == MAJOR and not forced and used is not None and used > self._disk.warn:
            return f"disk usage {used:.1%} above disk_usage_warn_threshold"
        return None

    def _record_compaction(self, kind: str, compaction: CompactionPass) -> None:
        now_mono, now_ms = trio.current_time(), int(time.time() * 1000)
        kinds = (MAJOR, MINOR) if kind == MAJOR else (MINOR,)  # a major pass also does a minor's work
        for k in kinds:
            self._last_compaction_mono[k] = now_mono
            self.last_compaction_ms[k] = now_ms
        stats = self.stats
        stats.compactions[kind] += 1
        stats.logs_compacted[kind] += compaction.logs_compacted
        stats.compacted_entries += compaction.entries
        stats.compacted_bytes += compaction.copied_bytes
        stats.reclaimed_by_compaction_bytes += compaction.reclaimed_bytes
        log.info(
            "GC %s: %s compaction (usage < %s): %d logs into %d, %d bytes copied, %d reclaimed in %.2f s%s",
            self.name,
            kind,
            compaction.threshold,
            compaction.logs_compacted,
            compaction.jobs,
            compaction.copied_bytes,
            compaction.reclaimed_bytes,
            compaction.seconds,
            f" (stopped: {compaction.stopped})" if compaction.stopped else "",
        )

    # -- disk --------------------------------------------------------------------------------------------

    def _disk_usage(self) -> DiskUsage | None:
        try:
            return self.store.disk_usage()
        except OSError as exc:
            log.warning("GC %s: disk usage unknown: %s", self.name, exc)
            return None

    def _used_fraction(self) -> float | None:
        usage = self._disk_usage()
        return None if usage is None else usage.used_fraction

    def _free_bytes(self) -> int | None:
        usage = self._disk_usage()
        return None if usage is None else usage.free_bytes

    # -- reporting ----------------------------------------------------------------------------------------

    def details(self) -> dict[str, object]:
        """BookKeeper's ``GarbageCollectionStatus`` (``/api/v1/bookie/gc_details``) and more figures."""
        stats = self.stats
        file_bytes, remaining_bytes = self.tracker.totals()
        return {
            "bookieId": self.name,
            "forceCompacting": self.forced and self.compacting is not None,
            "majorCompacting": self.compacting == MAJOR,
            "minorCompacting": self.compacting == MINOR,
            "lastMajorCompactionTime": self.last_compaction_ms[MAJOR],
            "lastMinorCompactionTime": self.last_compaction_ms[MINOR],
            "majorCompactionCounter": stats.compactions[MAJOR],
            "minorCompactionCounter": stats.compactions[MINOR],
            "isMajorGcSuspended": self.suspended[MAJOR],
            "isMinorGcSuspended": self.suspended[MINOR],
            "gcRuns": stats.runs,
            "gcFailures": stats.failures,
            "ledgerChecksPaused": stats.ledger_checks_paused,
            "lastGcSeconds": round(stats.last_run_seconds, 3),
            "deletedLedgers": stats.deleted_ledgers,
            "deletedEntryLogs": stats.deleted_logs,
            "sealedActiveEntryLogs": stats.sealed_active_logs,
            "reclaimedByDeletionBytes": stats.reclaimed_by_deletion_bytes,
            "reclaimedByCompactionBytes": stats.reclaimed_by_compaction_bytes,
            "entryLogs": self.tracker.log_count,
            "entryLogBytes": file_bytes,
            "entryLogRemainingBytes": remaining_bytes,
            "damagedEntryLogs": {log_file_name(i): why for i, why in sorted(self.tracker.damaged.items())},
            "lastCompaction": (
                self.last_result.compaction.to_json()
                if self.last_result is not None and self.last_result.compaction is not None
                else None
            ),
            "lastError": self.last_error,
        }

"""Garbage-collection metrics, collected into the bookie's own registry (BookKeeper's
``GarbageCollectorStats``: ``deletedLedgerCount``, ``reclaimedSpaceViaDeletes``,
``reclaimedSpaceViaCompaction``, ``minor/majorCompactionCount``, ``gcThreadRuntime``,
``activeEntryLogCount``, ``activeEntryLogSpaceBytes``), named ``magnetar_bookie_gc_*``. The read-only state
is the bookie's own ``magnetar_bookie_readonly``. Values are read from :class:`~.collector.GcStats` when
scraped.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from magnetar.gc.collector import MAJOR, MINOR, BookieGarbageCollector

PREFIX = "magnetar_bookie_gc_"


class GcMetrics(Collector):
    def __init__(self, collector: BookieGarbageCollector) -> None:
        self._gc = collector

    def collect(self) -> Iterable[Metric]:
        gc = self._gc
        stats = gc.stats
        yield SummaryMetricFamily(
            PREFIX + "run_seconds",
            "Duration of garbage-collection passes",
            count_value=stats.runs,
            sum_value=stats.run_seconds_total,
        )
        yield CounterMetricFamily(
            PREFIX + "failures", "Passes that failed (see the log)", value=stats.failures
        )
        yield CounterMetricFamily(
            PREFIX + "ledger_checks_paused",
            "Passes that compared no ledgers with the metadata store: it was unavailable, or had an outage "
            "during the comparison",
            value=stats.ledger_checks_paused,
        )
        yield CounterMetricFamily(
            PREFIX + "deleted_ledgers",
            "Local ledgers deleted because their metadata is gone",
            value=stats.deleted_ledgers,
        )
        yield CounterMetricFamily(
            PREFIX + "deleted_entry_logs",
            "Entry logs deleted whole (no live ledger left)",
            value=stats.deleted_logs,
        )
        reclaimed = CounterMetricFamily(PREFIX + "reclaimed_bytes", "Disk bytes freed", labels=["via"])
        reclaimed.add_metric(["deletion"], stats.reclaimed_by_deletion_bytes)
        reclaimed.add_metric(["compaction"], stats.reclaimed_by_compaction_bytes)
        yield reclaimed
        compactions = CounterMetricFamily(PREFIX + "compactions", "Compaction passes", labels=["kind"])
        logs = CounterMetricFamily(
            PREFIX + "compacted_entry_logs", "Entry logs compacted away", labels=["kind"]
        )
        for kind in (MAJOR, MINOR):
            compactions.add_metric([kind], stats.compactions[kind])
            logs.add_metric([kind], stats.logs_compacted[kind])
        yield compactions
        yield logs
        yield CounterMetricFamily(
            PREFIX + "compacted_bytes", "Live bytes copied by compaction", value=stats.compacted_bytes
        )
        yield CounterMetricFamily(
            PREFIX + "compacted_entries", "Live entries copied by compaction", value=stats.compacted_entries
        )
        file_bytes, remaining = gc.tracker.totals()
        yield GaugeMetricFamily(
            PREFIX + "entry_logs", "Sealed entry logs tracked", value=gc.tracker.log_count
        )
        yield GaugeMetricFamily(
            PREFIX + "entry_log_bytes", "Bytes of the sealed entry logs", value=file_bytes
        )
        yield GaugeMetricFamily(
            PREFIX + "entry_log_remaining_bytes",
            "Bytes of existing ledgers in the sealed logs",
            value=remaining,
        )
        yield GaugeMetricFamily(
            PREFIX + "damaged_entry_logs",
            "Entry logs left alone because they cannot be read whole",
            value=len(gc.tracker.damaged),
        )
        compacting = GaugeMetricFamily(PREFIX + "compacting", "1 while a compaction runs", labels=["kind"])
        for kind in (MAJOR, MINOR):
            compacting.add_metric([kind], int(gc.compacting == kind))
        yield compacting

"""Garbage-collection metrics, collected into the bookie's own registry, under BookKeeper's names (its
``GarbageCollectorStats`` in the bookie scope): ``bookie_DELETED_LEDGER_COUNT``,
``bookie_RECLAIMED_DELETION_SPACE_BYTES``, ``bookie_RECLAIMED_COMPACTION_SPACE_BYTES``,
``bookie_MINOR_COMPACTION_COUNT``, ``bookie_MAJOR_COMPACTION_COUNT``, ``bookie_THREAD_RUNTIME`` (a summary of
the passes: ``_count`` and ``_sum`` in milliseconds), ``bookie_ACTIVE_ENTRY_LOG_COUNT`` and
``bookie_ACTIVE_ENTRY_LOG_SPACE_BYTES`` (the sealed entry logs the collector tracks). BookKeeper's counters
are typed ``gauge`` here for the reason :mod:`magnetar.bookkeeper.bookie.metrics` gives. Figures BookKeeper
does not have keep ``magnetar_bookie_gc_*``. The read-only state is the bookie's own
``bookie_SERVER_STATUS``. Values are read from :class:`~.collector.GcStats` when scraped.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from magnetar.gc.collector import MAJOR, MINOR, BookieGarbageCollector

PREFIX = "magnetar_bookie_gc_"


class GcMetrics(Collector):
    def __init__(self, collector: BookieGarbageCollector) -> None:
        self._gc = collector

    def collect(self) -> Iterable[Metric]:
        gc = self._gc
        stats = gc.stats
        runtime = Metric("bookie_THREAD_RUNTIME", "Garbage-collection passes (ms)", "summary")
        runtime.add_sample("bookie_THREAD_RUNTIME_count", {"success": "true"}, stats.runs)
        runtime.add_sample("bookie_THREAD_RUNTIME_sum", {"success": "true"}, stats.run_seconds_total * 1000)
        yield runtime
        yield CounterMetricFamily(
            PREFIX + "failures", "Passes that failed (see the log)", value=stats.failures
        )
        yield CounterMetricFamily(
            PREFIX + "ledger_checks_paused",
            "Passes that compared no ledgers with the metadata store: it was unavailable, or had an outage "
            "during the comparison",
            value=stats.ledger_checks_paused,
        )
        yield GaugeMetricFamily(
            "bookie_DELETED_LEDGER_COUNT",
            "Local ledgers deleted because their metadata is gone",
            value=stats.deleted_ledgers,
        )
        yield CounterMetricFamily(
            PREFIX + "deleted_entry_logs",
            "Entry logs deleted whole (no live ledger left)",
            value=stats.deleted_logs,
        )
        yield GaugeMetricFamily(
            "bookie_RECLAIMED_DELETION_SPACE_BYTES",
            "Disk bytes freed by deleting entry logs",
            value=stats.reclaimed_by_deletion_bytes,
        )
        yield GaugeMetricFamily(
            "bookie_RECLAIMED_COMPACTION_SPACE_BYTES",
            "Disk bytes freed by compaction",
            value=stats.reclaimed_by_compaction_bytes,
        )
        for kind in (MINOR, MAJOR):
            yield GaugeMetricFamily(
                f"bookie_{kind.upper()}_COMPACTION_COUNT",
                f"{kind.capitalize()} compaction passes",
                value=stats.compactions[kind],
            )
        logs = CounterMetricFamily(
            PREFIX + "compacted_entry_logs", "Entry logs compacted away", labels=["kind"]
        )
        for kind in (MAJOR, MINOR):
            logs.add_metric([kind], stats.logs_compacted[kind])
        yield logs
        yield CounterMetricFamily(
            PREFIX + "compacted_bytes", "Live bytes copied by compaction", value=stats.compacted_bytes
        )
        yield CounterMetricFamily(
            PREFIX + "compacted_entries", "Live entries copied by compaction", value=stats.compacted_entries
        )
        file_bytes, remaining = gc.tracker.totals()
        yield GaugeMetricFamily(
            "bookie_ACTIVE_ENTRY_LOG_COUNT", "Sealed entry logs tracked", value=gc.tracker.log_count
        )
        yield GaugeMetricFamily(
            "bookie_ACTIVE_ENTRY_LOG_SPACE_BYTES", "Bytes of the sealed entry logs", value=file_bytes
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

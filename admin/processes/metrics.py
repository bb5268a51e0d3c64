"""Storage metrics for the broker's ``/metrics``: managed ledgers, the BookKeeper client and retention.

They join the broker's own metrics (Pulsar's ``pulsar_*`` names,
:mod:`magnetar.broker.metrics.broker_metrics`) as one more
:class:`~magnetar.broker.metrics.exposition.MetricsSource`, with the same labels (``cluster``, ``namespace``,
``topic``). Where Pulsar has the figure, its name: ``pulsar_storage_backlog_size`` (bytes behind the slowest
subscription, Pulsar's estimated backlog size) and ``pulsar_ml_count`` (managed ledgers open). The rest has no
Pulsar equivalent and keeps Magnetar's names: the managed-ledger figures ``magnetar_ml_*`` (ledgers, entries,
entries added, pending adds, rollovers, trims, ledgers deleted), the BookKeeper client's add latency and
counters ``magnetar_bookkeeper_client_*``, and the retention service's counters. Every name is declared once,
in the tables below. Everything is read from the live objects when scraped (no per-operation cost), a little
at a time (see :mod:`magnetar.broker.metrics.exposition`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from magnetar.bookkeeper.client import ADD_LATENCY_BUCKETS_S, ClientStats
from magnetar.broker.metrics import TOPIC_LABELS, BrokerMetrics, Family, FamilyRows, Kind, Row
from magnetar.broker.wire import InvalidTopicNameError, TopicName
from magnetar.gc import RetentionService, RetentionStats, backlog_bytes
from magnetar.managed_ledger.factory import ManagedLedgerFactory
from magnetar.managed_ledger.ledger import ManagedLedger

PREFIX = "magnetar_"
LABELS = list(TOPIC_LABELS)


def _per_topic(name: str, kind: Kind, help_text: str) -> Family:
    return Family(PREFIX + name, kind, help_text, TOPIC_LABELS)


def _single(name: str, kind: Kind, help_text: str) -> Family:
    return Family(PREFIX + name, kind, help_text)


COUNTER, GAUGE = Kind.COUNTER, Kind.GAUGE
STORAGE_BACKLOG_SIZE = Family(
    "pulsar_storage_backlog_size", GAUGE, "Bytes behind the slowest subscription", TOPIC_LABELS
)
ML_FAMILIES: tuple[tuple[Family, Callable[[ManagedLedger], float]], ...] = (
    (_per_topic("ml_ledgers", GAUGE, "Ledgers of the managed ledger"), lambda ml: len(ml.ledgers)),
    (
        _per_topic("ml_entries", GAUGE, "Entries stored in the managed ledger"),
        lambda ml: ml.number_of_entries(),
    ),
    (
        _per_topic("ml_entries_added", COUNTER, "Entries added since loaded"),
        lambda ml: ml.entries_added_counter,
    ),
    (_per_topic("ml_pending_adds", GAUGE, "Adds queued or in flight"), lambda ml: ml.pending_adds),
    (
        _per_topic("ml_rollovers", COUNTER, "Ledger rollovers since loaded"),
        lambda ml: ml.ledger_switches_counter,
    ),
)
ML_OPEN = Family("pulsar_ml_count", GAUGE, "Open managed ledgers", ("cluster",))
CLIENT_ADD_LATENCY = Family(
    PREFIX + "bookkeeper_client_add_latency_seconds",
    Kind.HISTOGRAM,
    "Ledger add latency (send to ack quorum)",
    buckets=ADD_LATENCY_BUCKETS_S,
)
CLIENT_COUNTERS: tuple[tuple[Family, Callable[[ClientStats], float]], ...] = (
    (_single("bookkeeper_client_adds", COUNTER, "Adds acknowledged by an ack quorum"), lambda s: s.adds),
    (
        _single("bookkeeper_client_add_failures", COUNTER, "Adds failed (outcome unknown)"),
        lambda s: s.add_failures,
    ),
    (
        _single("bookkeeper_client_ensemble_changes", COUNTER, "Bookies replaced in write ensembles"),
        lambda s: s.ensemble_changes,
    ),
    (
        _single("bookkeeper_client_ledger_recoveries", COUNTER, "Ledgers fenced and recovered"),
        lambda s: s.recoveries,
    ),
    (
        _single("bookkeeper_client_ledger_recovery_failures", COUNTER, "Recoveries that failed"),
        lambda s: s.recovery_failures,
    ),
    (_single("bookkeeper_client_ledgers_created", COUNTER, "Ledgers created"), lambda s: s.ledgers_created),
    (_single("bookkeeper_client_ledgers_deleted", COUNTER, "Ledgers deleted"), lambda s: s.ledgers_deleted),
)
RETENTION_COUNTERS: tuple[tuple[Family, Callable[[RetentionStats], float]], ...] = (
    (_single("ml_trims", COUNTER, "Trim passes run"), lambda s: s.trims),
    (_single("ml_trim_failures", COUNTER, "Trim passes that failed"), lambda s: s.trim_failures),
    (_single("ml_ledgers_deleted", COUNTER, "Ledgers deleted by retention"), lambda s: s.ledgers_deleted),
    (
        _single("retention_trim_events_dropped", COUNTER, "Trim events dropped, queue full"),
        lambda s: s.trim_events_dropped,
    ),
    (
        _single("retention_messages_expired", COUNTER, "Entries acknowledged by message TTL"),
        lambda s: s.messages_expired,
    ),
    (
        _single("retention_backlog_evicted", COUNTER, "Entries skipped by backlog eviction"),
        lambda s: s.backlog_entries_evicted,
    ),
)
QUOTA_EXCEEDED_TOPICS = _single(
    "backlog_quota_exceeded_topics", GAUGE, "Topics whose producers are held or refused by a backlog quota"
)


def topic_label(ml_name: str) -> str:
    try:
        return str(TopicName.from_managed_ledger_name(ml_name))
    except InvalidTopicNameError:
        return ml_name


class StorageMetrics:
    """A metrics source over the managed-ledger factory (and the retention service, when there is one)."""

    def __init__(
        self, factory: ManagedLedgerFactory, retention: RetentionService | None = None, cluster: str = ""
    ) -> None:
        self._factory = factory
        self._retention = retention
        self._cluster = cluster
        self._label_cache: dict[str, tuple[str, str, str]] = {}

    def families(self) -> Iterator[FamilyRows]:
        ledgers = self._factory.opened()  # those open when the scrape began
        self._label_cache = {}
        yield STORAGE_BACKLOG_SIZE, ((self._labels(ml), _backlog_size(ml)) for ml in ledgers)
        for family, read in ML_FAMILIES:
            yield family, self._rows(ledgers, read)
        yield ML_OPEN, [((self._cluster,), len(ledgers))]
        stats = self._factory.bk.stats
        counts = stats.add_latency_counts
        yield CLIENT_ADD_LATENCY, [((), list(counts), stats.add_latency_sum_s)]
        for family, read_client in CLIENT_COUNTERS:
            yield family, [((), read_client(stats))]
        if self._retention is not None:
            retention = self._retention
            for family, read_retention in RETENTION_COUNTERS:
                yield family, [((), read_retention(retention.stats))]
            yield QUOTA_EXCEEDED_TOPICS, [((), len(retention.quota.exceeded))]

    def _labels(self, ml: ManagedLedger) -> tuple[str, str, str]:
        labels = self._label_cache.get(ml.name)
        if labels is None:
            namespace = "/".join(ml.name.split("/")[:2])
            labels = self._label_cache[ml.name] = (self._cluster, namespace, topic_label(ml.name))
        return labels

    def _rows(self, ledgers: list[ManagedLedger], read: Callable[[ManagedLedger], float]) -> Iterator[Row]:
        for ml in ledgers:
            yield self._labels(ml), read(ml)


def _backlog_size(ml: ManagedLedger) -> int:
    slowest = ml.slowest_subscription_mark_delete()
    return backlog_bytes(ml, slowest) if slowest is not None else 0


def register_storage_metrics(
    metrics: BrokerMetrics,
    factory: ManagedLedgerFactory,
    retention: RetentionService | None = None,
    cluster: str = "",
) -> StorageMetrics:
    source = StorageMetrics(factory, retention, cluster)
    metrics.add_source(source)
    return source


class CollectorSource:
    """A prometheus_client collector (the bookies' metrics, which keep their own registries) as a
    :class:`~magnetar.broker.metrics.exposition.MetricsSource`, so it joins the broker's streamed
    ``/metrics``:
    counters, gauges and histograms are read back from the collector's samples when scraped; a summary
    (BookKeeper's op-stats) becomes gauges of the same sample names - its quantile rows, ``_count`` and
    ``_sum`` - so the names a dashboard queries are there."""

    def __init__(self, collector: Collector) -> None:
        self._collector = collector

    def families(self) -> Iterator[FamilyRows]:
        for metric in self._collector.collect():
            samples = list(metric.samples)
            if metric.type == "summary":
                yield from _summary_as_gauges(metric.documentation, samples)
                continue
            kind = _KINDS.get(metric.type)
            if kind is None:
                continue  # info, state sets: none of the bookies' metrics is one
            label_names = tuple(sorted(k for k in samples[0].labels if k != "le")) if samples else ()
            name = metric.name
            if kind is Kind.HISTOGRAM:
                bounds = sorted(
                    {float(s.labels["le"]) for s in samples if s.name.endswith("_bucket")} - {float("inf")}
                )
                family = Family(name, kind, metric.documentation, label_names, tuple(bounds))
                yield family, _histogram_rows(samples, label_names, len(bounds))
            else:
                wanted = f"{name}_total" if kind is Kind.COUNTER else name
                rows = [
                    (tuple(s.labels[k] for k in label_names), s.value) for s in samples if s.name == wanted
                ]
                yield Family(name, kind, metric.documentation, label_names), rows


_KINDS = {"counter": Kind.COUNTER, "gauge": Kind.GAUGE, "histogram": Kind.HISTOGRAM}


def _summary_as_gauges(documentation: str, samples: list[Sample]) -> Iterator[FamilyRows]:
    by_name: dict[str, list[Sample]] = {}
    for sample in samples:
        by_name.setdefault(sample.name, []).append(sample)
    for name, group in by_name.items():
        label_names = tuple(sorted(group[0].labels))
        rows = [(tuple(s.labels.get(k, "") for k in label_names), s.value) for s in group]
        yield Family(name, Kind.GAUGE, documentation, label_names), rows


def _histogram_rows(
    samples: list[Sample], label_names: tuple[str, ...], bound_count: int
) -> list[tuple[tuple[str, ...], list[float], float]]:
    """One row per label set: per-bucket counts (the samples' are cumulative) and the sum."""
    cumulative: dict[tuple[str, ...], list[tuple[float, float]]] = {}
    sums: dict[tuple[str, ...], float] = {}
    for sample in samples:
        key = tuple(sample.labels[k] for k in label_names)
        if sample.name.endswith("_bucket"):
            cumulative.setdefault(key, []).append((float(sample.labels["le"]), sample.value))
        elif sample.name.endswith("_sum"):
            sums[key] = sample.value
    rows = []
    for key, points in cumulative.items():
        points.sort()
        counts, previous = [], 0.0
        for _, running in points[: bound_count + 1]:
            counts.append(running - previous)
            previous = running
        rows.append((key, counts, sums.get(key, 0.0)))
    return rows

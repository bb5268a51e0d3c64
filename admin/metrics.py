"""Storage metrics for the broker's ``/metrics``: managed ledgers and the retention service.

They join the broker's registry next to its topic metrics (``magnetar_in_messages_total``,
``magnetar_storage_size``, ``magnetar_msg_backlog``, publish latency ...) with the same labels (``cluster``,
``namespace``, ``topic``), named as Pulsar's under a ``magnetar_`` prefix: ``storage_backlog_size``,
``subscription_back_log`` (per subscription), and the managed-ledger figures ``magnetar_ml_*`` (ledgers,
entries, entries added, pending adds, rollovers, trims, ledgers deleted). Everything is read from the live
objects when scraped (a collector: no per-operation cost).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from magnetar.bookkeeper.client.stats import ClientStats
from magnetar.broker.errors import InvalidTopicNameError
from magnetar.broker.topic_name import TopicName
from magnetar.gc.expiry import backlog_bytes
from magnetar.gc.retention import RetentionService
from magnetar.managed_ledger.factory import ManagedLedgerFactory
from magnetar.managed_ledger.ledger import ManagedLedger

PREFIX = "magnetar_"
LABELS = ["cluster", "namespace", "topic"]


def topic_label(ml_name: str) -> str:
    try:
        return str(TopicName.from_managed_ledger_name(ml_name))
    except InvalidTopicNameError:
        return ml_name


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, labels=labels)


class StorageCollector(Collector):
    def __init__(
        self, factory: ManagedLedgerFactory, retention: RetentionService | None = None, cluster: str = ""
    ) -> None:
        self._factory = factory
        self._retention = retention
        self._cluster = cluster

    def collect(self) -> Iterable[Metric]:
        ledgers = self._factory.opened()
        yield from self._topic_metrics(ledgers)
        yield from self._ml_metrics(ledgers)
        yield from self._client_metrics(self._factory.bk.stats)
        if self._retention is not None:
            yield from self._retention_metrics(self._retention)

    def _labels(self, ml: ManagedLedger) -> list[str]:
        topic = topic_label(ml.name)
        namespace = "/".join(ml.name.split("/")[:2])
        return [self._cluster, namespace, topic]

    def _topic_metrics(self, ledgers: list[ManagedLedger]) -> Iterable[Metric]:
        backlog_size = _gauge("storage_backlog_size", "Bytes behind the slowest subscription", LABELS)
        sub_backlog = _gauge("subscription_back_log", "Unacknowledged entries", [*LABELS, "subscription"])
        for ml in ledgers:
            labels = self._labels(ml)
            slowest = ml.slowest_durable_mark_delete()
            backlog_size.add_metric(labels, backlog_bytes(ml, slowest) if slowest is not None else 0)
            for name, cursor in sorted(ml.cursors.items()):
                sub_backlog.add_metric([*labels, name], cursor.backlog())
        yield from (backlog_size, sub_backlog)

    def _ml_metrics(self, ledgers: list[ManagedLedger]) -> Iterable[Metric]:
        count = _gauge("ml_ledgers", "Ledgers of the managed ledger", LABELS)
        entries = _gauge("ml_entries", "Entries stored in the managed ledger", LABELS)
        added = CounterMetricFamily(PREFIX + "ml_entries_added", "Entries added since loaded", labels=LABELS)
        pending = _gauge("ml_pending_adds", "Adds queued or in flight", LABELS)
        rollovers = CounterMetricFamily(
            PREFIX + "ml_rollovers", "Ledger rollovers since loaded", labels=LABELS
        )
        for ml in ledgers:
            labels = self._labels(ml)
            count.add_metric(labels, len(ml.ledgers))
            entries.add_metric(labels, ml.number_of_entries())
            added.add_metric(labels, ml.entries_added_counter)
            pending.add_metric(labels, ml.pending_adds)
            rollovers.add_metric(labels, ml.ledger_switches_counter)
        yield from (count, entries, added, pending, rollovers)
        yield GaugeMetricFamily(PREFIX + "ml_open", "Open managed ledgers", value=len(ledgers))

    @staticmethod
    def _client_metrics(stats: ClientStats) -> Iterable[Metric]:
        latency = HistogramMetricFamily(
            PREFIX + "bookkeeper_client_add_latency_seconds", "Ledger add latency (send to ack quorum)"
        )
        latency.add_metric([], stats.latency_buckets(), stats.add_latency_sum_s)
        yield latency
        counters = {
            "bookkeeper_client_adds": ("Adds acknowledged by an ack quorum", stats.adds),
            "bookkeeper_client_add_failures": ("Adds failed (outcome unknown)", stats.add_failures),
            "bookkeeper_client_ensemble_changes": (
                "Bookies replaced in write ensembles",
                stats.ensemble_changes,
            ),
            "bookkeeper_client_ledger_recoveries": ("Ledgers fenced and recovered", stats.recoveries),
            "bookkeeper_client_ledger_recovery_failures": ("Recoveries that failed", stats.recovery_failures),
            "bookkeeper_client_ledgers_created": ("Ledgers created", stats.ledgers_created),
            "bookkeeper_client_ledgers_deleted": ("Ledgers deleted", stats.ledgers_deleted),
        }
        for name, (doc, value) in counters.items():
            yield CounterMetricFamily(PREFIX + name, doc, value=value)

    @staticmethod
    def _retention_metrics(service: RetentionService) -> Iterable[Metric]:
        stats = service.stats
        counters = {
            "ml_trims": ("Trim passes run", stats.trims),
            "ml_trim_failures": ("Trim passes that failed", stats.trim_failures),
            "ml_ledgers_deleted": ("Ledgers deleted by retention", stats.ledgers_deleted),
            "retention_trim_events_dropped": ("Trim events dropped, queue full", stats.trim_events_dropped),
            "retention_messages_expired": ("Entries acknowledged by message TTL", stats.messages_expired),
            "retention_backlog_evicted": (
                "Entries skipped by backlog eviction",
                stats.backlog_entries_evicted,
            ),
        }
        for name, (doc, value) in counters.items():
            yield CounterMetricFamily(PREFIX + name, doc, value=value)
        yield GaugeMetricFamily(
            PREFIX + "backlog_quota_exceeded_topics",
            "Topics whose producers are held or refused by a backlog quota",
            value=len(service.quota.exceeded),
        )


def register_storage_metrics(
    registry: CollectorRegistry,
    factory: ManagedLedgerFactory,
    retention: RetentionService | None = None,
    cluster: str = "",
) -> StorageCollector:
    collector = StorageCollector(factory, retention, cluster)
    registry.register(collector)
    return collector

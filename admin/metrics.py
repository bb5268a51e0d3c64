"""Broker-side storage metrics for ``/metrics``: managed ledgers and the retention service.

Names follow Pulsar's topic metrics under a ``magnetar_`` prefix: ``pulsar_storage_size`` ->
``magnetar_storage_size``, likewise ``msg_backlog``, ``subscription_back_log``, ``storage_backlog_size``;
and Pulsar's managed-ledger metrics as ``magnetar_ml_*``. Everything is read from the live objects
when scraped (a collector, no per-operation cost). The topic label is the full topic name (``persistent://t/ns/x``).

Traffic metrics (``magnetar_in_messages_total``, rates, publish latency) belong to the broker's producers and
dispatchers and are registered by the broker next to these.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from magnetar.broker.errors import InvalidTopicNameError
from magnetar.broker.topic_name import TopicName
from magnetar.gc.expiry import backlog_bytes
from magnetar.gc.retention import RetentionService
from magnetar.managed_ledger.factory import ManagedLedgerFactory
from magnetar.managed_ledger.ledger import ManagedLedger

PREFIX = "magnetar_"


def topic_label(ml_name: str) -> str:
    try:
        return str(TopicName.from_managed_ledger_name(ml_name))
    except InvalidTopicNameError:
        return ml_name


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, labels=labels)


class StorageCollector(Collector):
    def __init__(self, factory: ManagedLedgerFactory, retention: RetentionService | None = None) -> None:
        self._factory = factory
        self._retention = retention

    def collect(self) -> Iterable[Metric]:
        ledgers = self._factory.opened()
        yield from self._topic_metrics(ledgers)
        yield from self._ml_metrics(ledgers)
        if self._retention is not None:
            yield from self._retention_metrics(self._retention)

    def _topic_metrics(self, ledgers: list[ManagedLedger]) -> Iterable[Metric]:
        size = _gauge("storage_size", "Bytes stored for the topic (all ledgers)", ["topic"])
        backlog = _gauge("msg_backlog", "Unacknowledged entries, summed over subscriptions", ["topic"])
        backlog_size = _gauge("storage_backlog_size", "Bytes behind the slowest subscription", ["topic"])
        subs = _gauge("subscriptions_count", "Durable subscriptions of the topic", ["topic"])
        sub_backlog = _gauge("subscription_back_log", "Unacknowledged entries", ["topic", "subscription"])
        for ml in ledgers:
            topic = topic_label(ml.name)
            size.add_metric([topic], ml.total_size())
            backlogs = {name: cursor.backlog() for name, cursor in ml.cursors.items()}
            backlog.add_metric([topic], sum(backlogs.values()))
            slowest = ml.slowest_durable_mark_delete()
            backlog_size.add_metric([topic], backlog_bytes(ml, slowest) if slowest is not None else 0)
            subs.add_metric([topic], len(backlogs))
            for name, count in sorted(backlogs.items()):
                sub_backlog.add_metric([topic, name], count)
        yield from (size, backlog, backlog_size, subs, sub_backlog)

    def _ml_metrics(self, ledgers: list[ManagedLedger]) -> Iterable[Metric]:
        count = _gauge("ml_ledgers", "Ledgers of the managed ledger", ["topic"])
        entries = _gauge("ml_entries", "Entries stored in the managed ledger", ["topic"])
        added = CounterMetricFamily(
            PREFIX + "ml_entries_added", "Entries added since loaded", labels=["topic"]
        )
        pending = _gauge("ml_pending_adds", "Adds queued or in flight", ["topic"])
        rollovers = CounterMetricFamily(
            PREFIX + "ml_rollovers", "Ledger rollovers since loaded", labels=["topic"]
        )
        for ml in ledgers:
            topic = topic_label(ml.name)
            count.add_metric([topic], len(ml.ledgers))
            entries.add_metric([topic], ml.number_of_entries())
            added.add_metric([topic], ml.entries_added_counter)
            pending.add_metric([topic], ml.pending_adds)
            rollovers.add_metric([topic], ml.ledger_switches_counter)
        yield from (count, entries, added, pending, rollovers)
        yield GaugeMetricFamily(PREFIX + "ml_open", "Open managed ledgers", value=len(ledgers))

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
    registry: CollectorRegistry, factory: ManagedLedgerFactory, retention: RetentionService | None = None
) -> StorageCollector:
    collector = StorageCollector(factory, retention)
    registry.register(collector)
    return collector

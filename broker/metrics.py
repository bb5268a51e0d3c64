"""The broker's Prometheus metrics, named as Pulsar's topic metrics with a ``magnetar_`` prefix.

Per topic (labels ``cluster``, ``namespace``, ``topic``): ``magnetar_in_messages_total``,
``magnetar_in_bytes_total``, ``magnetar_out_messages_total``, ``magnetar_out_bytes_total``,
``magnetar_storage_size``, ``magnetar_msg_backlog``, ``magnetar_producers_count``,
``magnetar_subscriptions_count``, ``magnetar_consumers_count`` and the publish latency histogram
``magnetar_publish_latency_seconds`` (message received by the broker -> stored with the ack quorum). Broker-
wide: ``magnetar_topics_count``.

Metadata outages (broker-wide, see :mod:`.metadata_outage`): ``magnetar_metadata_store_healthy`` (1/0),
``magnetar_metadata_outages_total``, ``magnetar_metadata_sessions_lost_total``,
``magnetar_metadata_outage_seconds`` (the current outage so far, 0 when healthy),
``magnetar_metadata_waiters`` (requests waiting for the store), ``magnetar_bundles_owned``,
``magnetar_bundles_unconfirmed`` (served without their node, after a lost session),
``magnetar_ledger_rollovers_deferred`` (topics whose current ledger takes entries past its cap),
``magnetar_ledger_entries_past_cap`` (their sum), and the bounds in force:
``magnetar_serve_without_session_max_seconds``, ``magnetar_rollover_deferred_entries_max``.

The hot path only adds to plain integers (:class:`TopicMetrics`); a custom collector turns them into metric
families when ``/metrics`` is scraped, so publishing pays no Prometheus client overhead per message. Every
broker has its own ``CollectorRegistry`` (several brokers may share a test process).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from magnetar.broker.topic import PersistentTopic

PUBLISH_LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0)
"""Upper bounds (seconds), close to Pulsar's storage write latency buckets (0.5 ms ... 1 s, overflow)."""


class _Received(Protocol):
    received_at: float


class TopicMetrics:
    """Counters of one topic, updated without locks or allocation on the publish path."""

    __slots__ = ("bytes_in", "entries_in", "latency_buckets", "latency_sum_s", "msg_in")

    def __init__(self) -> None:
        self.msg_in = 0
        self.bytes_in = 0
        self.entries_in = 0
        self.latency_buckets = [0] * (len(PUBLISH_LATENCY_BUCKETS_S) + 1)
        self.latency_sum_s = 0.0

    def on_entry_stored(self, batch: Sequence[_Received], size_bytes: int, now: float) -> None:
        self.entries_in += 1
        self.msg_in += len(batch)
        self.bytes_in += size_bytes
        buckets = self.latency_buckets
        total = 0.0
        for pending in batch:
            latency = now - pending.received_at
            total += latency
            buckets[bisect.bisect_left(PUBLISH_LATENCY_BUCKETS_S, latency)] += 1
        self.latency_sum_s += total

    def on_messages_stored(self, count: int, size_bytes: int, latency_s: float) -> None:
        """``count`` messages received together were stored in one entry of ``size_bytes``."""
        self.entries_in += 1
        self.msg_in += count
        self.bytes_in += size_bytes
        self.latency_buckets[bisect.bisect_left(PUBLISH_LATENCY_BUCKETS_S, latency_s)] += count
        self.latency_sum_s += latency_s * count


@dataclass(frozen=True, slots=True)
class MetadataFigures:
    """The broker's figures about metadata outages at scrape time."""

    healthy: bool
    outages_total: int
    sessions_lost_total: int
    outage_s: float
    waiters: int
    bundles_owned: int
    bundles_unconfirmed: int
    rollovers_deferred: int
    entries_past_cap: int
    serve_without_session_max_s: float
    rollover_deferred_entries_max: int


class BrokerMetrics(Collector):
    """The collector of one broker; ``topics`` lists the loaded topics at scrape time."""

    def __init__(
        self,
        cluster: str,
        topics: Callable[[], Iterable[PersistentTopic]],
        metadata: Callable[[], MetadataFigures] | None = None,
    ) -> None:
        self._cluster = cluster
        self._topics = topics
        self._metadata = metadata
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        topics = list(self._topics())
        labels = ["cluster", "namespace", "topic"]
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "in_messages": CounterMetricFamily("magnetar_in_messages", "Messages published", labels=labels),
            "in_bytes": CounterMetricFamily("magnetar_in_bytes", "Payload bytes published", labels=labels),
            "out_messages": CounterMetricFamily("magnetar_out_messages", "Messages delivered", labels=labels),
            "out_bytes": CounterMetricFamily("magnetar_out_bytes", "Payload bytes delivered", labels=labels),
            "storage": GaugeMetricFamily("magnetar_storage_size", "Bytes stored in ledgers", labels=labels),
            "backlog": GaugeMetricFamily("magnetar_msg_backlog", "Unacknowledged entries", labels=labels),
            "producers": GaugeMetricFamily("magnetar_producers_count", "Producers", labels=labels),
            "subscriptions": GaugeMetricFamily(
                "magnetar_subscriptions_count", "Subscriptions", labels=labels
            ),
            "consumers": GaugeMetricFamily("magnetar_consumers_count", "Consumers", labels=labels),
        }
        latency = HistogramMetricFamily(
            "magnetar_publish_latency_seconds", "Publish latency (received -> stored)", labels=labels
        )
        for topic in topics:
            values = [self._cluster, f"{topic.name.tenant}/{topic.name.namespace}", topic.full_name]
            subscriptions = list(topic.subscriptions.values())
            m = topic.metrics
            families["in_messages"].add_metric(values, m.msg_in)
            families["in_bytes"].add_metric(values, m.bytes_in)
            families["out_messages"].add_metric(values, sum(s.msg_out_counter for s in subscriptions))
            families["out_bytes"].add_metric(values, sum(s.bytes_out_counter for s in subscriptions))
            families["storage"].add_metric(values, topic.ml.total_size())
            families["backlog"].add_metric(values, sum(s.backlog() for s in subscriptions if s.durable))
            families["producers"].add_metric(values, len(topic.producers))
            families["subscriptions"].add_metric(values, sum(1 for s in subscriptions if s.durable))
            families["consumers"].add_metric(values, sum(len(s.consumers) for s in subscriptions))
            cumulative = 0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip(PUBLISH_LATENCY_BUCKETS_S, m.latency_buckets, strict=False):
                cumulative += count
                buckets.append((repr(bound), cumulative))
            buckets.append(("+Inf", cumulative + m.latency_buckets[-1]))
            latency.add_metric(values, buckets, m.latency_sum_s)
        yield from families.values()
        yield latency
        topics_count = GaugeMetricFamily("magnetar_topics_count", "Topics loaded", labels=["cluster"])
        topics_count.add_metric([self._cluster], len(topics))
        yield topics_count
        if self._metadata is not None:
            yield from self._metadata_families(self._metadata())

    def _metadata_families(self, f: MetadataFigures) -> Iterator[Metric]:
        counters: list[tuple[str, str, float]] = [
            ("magnetar_metadata_outages", "Metadata store outages seen", f.outages_total),
            ("magnetar_metadata_sessions_lost", "Metadata sessions lost (expired)", f.sessions_lost_total),
        ]
        gauges: list[tuple[str, str, float]] = [
            ("magnetar_metadata_store_healthy", "1 while the metadata store is usable", int(f.healthy)),
            ("magnetar_metadata_outage_seconds", "Length of the current metadata outage so far", f.outage_s),
            ("magnetar_metadata_waiters", "Requests waiting for the metadata store", f.waiters),
            ("magnetar_bundles_owned", "Namespace bundles this broker serves", f.bundles_owned),
            (
                "magnetar_bundles_unconfirmed",
                "Bundles served without their ownership node (after a lost session)",
                f.bundles_unconfirmed,
            ),
            (
                "magnetar_ledger_rollovers_deferred",
                "Topics whose current ledger takes entries past its cap",
                f.rollovers_deferred,
            ),
            ("magnetar_ledger_entries_past_cap", "Entries written past the ledger cap", f.entries_past_cap),
            (
                "magnetar_serve_without_session_max_seconds",
                "Bound: serving without a confirmed metadata session (serve_without_session_max_s)",
                f.serve_without_session_max_s,
            ),
            (
                "magnetar_rollover_deferred_entries_max",
                "Bound: entries past the ledger cap while a rollover is deferred",
                f.rollover_deferred_entries_max,
            ),
        ]
        for name, documentation, value in counters:
            counter = CounterMetricFamily(name, documentation, labels=["cluster"])
            counter.add_metric([self._cluster], value)
            yield counter
        for name, documentation, value in gauges:
            gauge = GaugeMetricFamily(name, documentation, labels=["cluster"])
            gauge.add_metric([self._cluster], value)
            yield gauge

"""The broker's Prometheus metrics, named as Pulsar's topic metrics with a ``magnetar_`` prefix.

Per topic (labels ``cluster``, ``namespace``, ``topic``): ``magnetar_in_messages_total``,
``magnetar_in_bytes_total``, ``magnetar_out_messages_total``, ``magnetar_out_bytes_total``,
``magnetar_storage_size``, ``magnetar_msg_backlog``, ``magnetar_producers_count``,
``magnetar_subscriptions_count``, ``magnetar_consumers_count`` and the publish latency histogram
``magnetar_publish_latency_seconds`` (message received by the broker -> stored with the ack quorum). Broker-
wide: ``magnetar_topics_count``.

The hot path only adds to plain integers (:class:`TopicMetrics`); a custom collector turns them into metric
families when ``/metrics`` is scraped, so publishing pays no Prometheus client overhead per message. Every
broker has its own ``CollectorRegistry`` (several brokers may share a test process).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Sequence
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


class BrokerMetrics(Collector):
    """The collector of one broker; ``topics`` lists the loaded topics at scrape time."""

    def __init__(self, cluster: str, topics: Callable[[], Iterable[PersistentTopic]]) -> None:
        self._cluster = cluster
        self._topics = topics
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

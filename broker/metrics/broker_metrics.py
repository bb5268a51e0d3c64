"""The broker's Prometheus metrics, under Pulsar's names, labels and meanings.

Pulsar's dashboards and alerts query these names (Pulsar's ``NamespaceStatsAggregator`` / ``TopicStats``), so
the broker exports them as Pulsar does:

* per topic (labels ``cluster``, ``namespace``, ``topic``): ``pulsar_subscriptions_count``,
  ``pulsar_producers_count``, ``pulsar_consumers_count``, ``pulsar_rate_in`` / ``pulsar_rate_out``
  (messages per second) and ``pulsar_throughput_in`` / ``pulsar_throughput_out`` (bytes per second) - rates
  over the last stats period (``stats_update_interval_s``, as Pulsar's ``statsUpdateFrequencyInSecs``), not
  since start -, ``pulsar_average_msg_size``, ``pulsar_storage_size`` (bytes stored counting every replica:
  the logical size times the write quorum, as Pulsar) and ``pulsar_storage_logical_size``,
  ``pulsar_msg_backlog`` (unacknowledged messages over the durable subscriptions),
  ``pulsar_storage_write_rate`` (entries per second), ``pulsar_in_messages_total`` / ``pulsar_in_bytes_total``
  (since the topic was loaded), ``pulsar_publish_rate_limit_times`` (publishes that found the topic over its
  ``publishRate``) and ``pulsar_storage_write_latency_le_*`` (Pulsar's buckets, 0.5 ms ... 1 s and
  overflow, with ``_count``, and ``_sum`` in microseconds as Pulsar's: the entries stored during the last
  stats period by how long they took, from the message's arrival to its acknowledgement by the bookies; each
  bucket counts its own range, not those below it, as Pulsar's ``StatsBuckets``);
* per subscription (labels plus ``subscription``): ``pulsar_subscription_back_log`` (and ``_no_delayed``),
  ``pulsar_subscription_msg_drop_rate`` (messages a non-persistent subscription dropped per second, for want
  of a consumer with a permit; 0 for a persistent one),
  ``pulsar_subscription_delayed``, ``pulsar_subscription_msg_rate_out``,
  ``pulsar_subscription_msg_throughput_out``, ``pulsar_subscription_msg_rate_redeliver``,
  ``pulsar_subscription_unacked_messages``, ``pulsar_subscription_blocked_on_unacked_messages``,
  ``pulsar_subscription_consumers_count``, ``pulsar_subscription_last_acked_timestamp`` and the delivery
  counters ``pulsar_out_messages_total`` / ``pulsar_out_bytes_total``; and, with the label ``reason``
  (``subscription``, ``topic``, ``broker``: whose dispatch rate),
  ``pulsar_subscription_dispatch_throttled_msg_events`` / ``..._bytes_events`` (reads a dispatch rate held
  back or cut short);
* per namespace: ``pulsar_topics_count``; per broker (label ``cluster``): ``pulsar_broker_*`` (topics,
  subscriptions, producers, consumers, rates, throughputs, storage, backlog), as Pulsar's broker-level stats.

Non-persistent topics (:mod:`.core.non_persistent_topic`) have the same rows, as in Pulsar: their storage,
backlog, write-rate and write-latency figures are 0 (nothing is written).

Every sample is typed ``gauge``, the ``_total`` ones included: that is how Pulsar writes them (its
``PrometheusMetricStreams`` declares every topic metric a gauge), and a dashboard's ``rate()`` works on them
either way. With ``expose_topic_level_metrics_in_prometheus`` off the rows are summed per namespace
(:mod:`.exposition`), and as in Pulsar the subscription rows and ``pulsar_average_msg_size`` are not
written, ``pulsar_out_*_total`` are the namespace's, and ``pulsar_msg_backlog`` carries
``remote_cluster="local"``. Like Pulsar, the cluster-wide families start with a row that has only the
``cluster`` label and the value 0 (here: empty ``namespace``/``topic`` labels, which Prometheus treats as
absent), so a broker without topics still shows in a dashboard.

``magnetar_publish_latency_seconds`` is Magnetar's own: a cumulative Prometheus histogram of the same latency
(Pulsar's ``le_*`` gauges count one stats period only). The storage layer adds its figures in
:mod:`magnetar.admin.processes.metrics`. Every name is declared once, in the tables below; docs/metrics.md
lists them.

Metadata outages (broker-wide, see :mod:`magnetar.broker.metadata_outage`; Magnetar's own names, as Pulsar has
no such figures): ``magnetar_metadata_store_healthy`` (1/0), ``magnetar_metadata_outages_total``,
``magnetar_metadata_sessions_lost_total``, ``magnetar_metadata_outage_seconds`` (the current outage so far, 0
when healthy), ``magnetar_metadata_waiters`` (requests waiting for the store), ``magnetar_bundles_owned``,
``magnetar_bundles_unconfirmed`` (served without their node, after a lost session),
``magnetar_ledger_rollovers_deferred`` (topics whose current ledger takes entries past its cap),
``magnetar_ledger_entries_past_cap`` (their sum), and the bounds in force:
``magnetar_serve_without_session_max_seconds``, ``magnetar_rollover_deferred_entries_max``
(:data:`METADATA_FAMILIES`).

The hot path only adds to plain integers (:class:`~.core.topic_metrics.TopicMetrics`); the figures are read
from the live objects when ``/metrics`` is scraped, and rendered a little at a time (:mod:`.exposition`), so
publishing pays no Prometheus client overhead per message and a scrape never holds the event loop for long.
With ``expose_topic_level_metrics_in_prometheus`` off they are summed per namespace.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.broker.core import (
    PUBLISH_LATENCY_BUCKETS_S,
    NonPersistentSubscription,
    NonPersistentTopic,
    TopicMetrics,
)
from magnetar.broker.metrics.exposition import Exposition, Family, FamilyRows, Kind, MetricsSource, Row

if TYPE_CHECKING:
    from magnetar.broker.core import PersistentTopic, Subscription

    Topic = PersistentTopic | NonPersistentTopic
    """Both kinds: a non-persistent topic stores nothing (storage, backlog and write figures are 0)."""
    AnySubscription = Subscription | NonPersistentSubscription

PULSAR_WRITE_LATENCY_BOUNDS_MS = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0)
PULSAR_WRITE_LATENCY_SUFFIXES = ("0_5", "1", "5", "10", "20", "50", "100", "200", "1000")
TOPIC_LABELS = ("cluster", "namespace", "topic")
SUBSCRIPTION_LABELS = (*TOPIC_LABELS, "subscription")
NAMESPACE_LABELS = ("cluster", "namespace")
GAUGE = Kind.GAUGE


def _pulsar_bucket_of(index: int) -> int:
    """Pulsar's write-latency bucket (0..9, 9 = overflow) of our bucket ``index``."""
    if index >= len(PUBLISH_LATENCY_BUCKETS_S):
        return len(PULSAR_WRITE_LATENCY_BOUNDS_MS)
    bound_ms = PUBLISH_LATENCY_BUCKETS_S[index] * 1000
    return bisect.bisect_left(PULSAR_WRITE_LATENCY_BOUNDS_MS, bound_ms - 1e-9)


_TO_PULSAR_BUCKET = [_pulsar_bucket_of(i) for i in range(len(PUBLISH_LATENCY_BUCKETS_S) + 1)]


def pulsar_write_latency(metrics: TopicMetrics) -> tuple[list[int], int, float]:
    """A topic's latencies of the last period in Pulsar's buckets (9 bounds + overflow), their count and
    their sum in microseconds."""
    out = [0] * (len(PULSAR_WRITE_LATENCY_BOUNDS_MS) + 1)
    for index, count in enumerate(metrics.latency_period.counts):
        out[_TO_PULSAR_BUCKET[index]] += count
    return out, sum(out), metrics.latency_period.sum_s * 1_000_000


# -- what each figure reads --------------------------------------------------------------------------------


def _durable(t: Topic) -> list[AnySubscription]:
    return [s for s in t.subscriptions.values() if s.durable]


def _subscriptions(t: Topic) -> float:
    return len(_durable(t))


def _producers(t: Topic) -> float:
    return len(t.producers)


def _consumers(t: Topic) -> float:
    return sum(len(s.consumers) for s in t.subscriptions.values())


def _rate_in(t: Topic) -> float:
    return t.rate_in.msgs_per_s


def _throughput_in(t: Topic) -> float:
    return t.rate_in.bytes_per_s


def _rate_out(t: Topic) -> float:
    return sum(s.rate_out.msgs_per_s for s in t.subscriptions.values())


def _throughput_out(t: Topic) -> float:
    return sum(s.rate_out.bytes_per_s for s in t.subscriptions.values())


def _average_msg_size(t: Topic) -> float:
    rate = t.rate_in.msgs_per_s
    return t.rate_in.bytes_per_s / rate if rate else 0.0


def _logical_size(t: Topic) -> float:
    return 0 if isinstance(t, NonPersistentTopic) else t.ml.total_size()


def _storage_size(t: Topic) -> float:
    return 0 if isinstance(t, NonPersistentTopic) else t.ml.total_size() * t.ml.settings.write_quorum


def _backlog(t: Topic) -> float:
    return sum(s.backlog() for s in _durable(t))


def _write_rate(t: Topic) -> float:
    return t.metrics.entries_per_s


def _msg_in(t: Topic) -> float:
    return t.metrics.msg_in


def _bytes_in(t: Topic) -> float:
    return t.metrics.bytes_in


def _msg_out(t: Topic) -> float:
    return sum(s.msg_out_counter for s in t.subscriptions.values())


def _bytes_out(t: Topic) -> float:
    return sum(s.bytes_out_counter for s in t.subscriptions.values())


def _publish_rate_limited(t: Topic) -> float:
    return t.publish_rate_limited()


def _sub_backlog(s: AnySubscription) -> float:
    return s.backlog()


def _sub_none(s: AnySubscription) -> float:
    return 0


def _sub_delayed(s: AnySubscription) -> float:
    return 0 if isinstance(s, NonPersistentSubscription) else s.dispatcher.delayed_count


def _sub_backlog_no_delayed(s: AnySubscription) -> float:
    return max(0, s.backlog() - _sub_delayed(s))


def _sub_rate_out(s: AnySubscription) -> float:
    return s.rate_out.msgs_per_s


def _sub_throughput_out(s: AnySubscription) -> float:
    return s.rate_out.bytes_per_s


def _sub_rate_redeliver(s: AnySubscription) -> float:
    return s.rate_redeliver.msgs_per_s


def _sub_unacked(s: AnySubscription) -> float:
    return sum(len(c.pending) for c in s.consumers)


def _sub_consumers(s: AnySubscription) -> float:
    return len(s.consumers)


def _sub_last_acked(s: AnySubscription) -> float:
    return s.last_ack_ms


def _sub_drop_rate(s: AnySubscription) -> float:
    return s.rate_drop.msgs_per_s if isinstance(s, NonPersistentSubscription) else 0


def _sub_msg_out(s: AnySubscription) -> float:
    return s.msg_out_counter


def _sub_bytes_out(s: AnySubscription) -> float:
    return s.bytes_out_counter


@dataclass(frozen=True, slots=True)
class Figure:
    """A figure of a topic: its name, help and how to read it."""

    name: str
    help: str
    read: Callable[[Topic], float]
    broker_level: bool = False
    """Also summed over the broker as ``pulsar_broker_<name without pulsar_>`` (Pulsar's broker stats)."""
    starts_with_zero: bool = False
    """One of Pulsar's "default broker stats": a ``cluster``-only row with 0 comes first."""


PERIOD = " (last stats period)"
TOPIC_FIGURES: tuple[Figure, ...] = (
    Figure("pulsar_subscriptions_count", "Durable subscriptions", _subscriptions, True, True),
    Figure("pulsar_producers_count", "Connected producers", _producers, True, True),
    Figure("pulsar_consumers_count", "Connected consumers", _consumers, True, True),
    Figure("pulsar_rate_in", "Messages published per second" + PERIOD, _rate_in, True, True),
    Figure("pulsar_rate_out", "Messages delivered per second" + PERIOD, _rate_out, True, True),
    Figure("pulsar_throughput_in", "Bytes published per second" + PERIOD, _throughput_in, True, True),
    Figure("pulsar_throughput_out", "Bytes delivered per second" + PERIOD, _throughput_out, True, True),
    Figure("pulsar_storage_size", "Bytes stored, every replica counted", _storage_size, True, True),
    Figure("pulsar_storage_logical_size", "Bytes stored, one copy", _logical_size, True, True),
    Figure("pulsar_msg_backlog", "Unacknowledged messages, durable subscriptions", _backlog, True, True),
    Figure("pulsar_storage_write_rate", "Entries written per second" + PERIOD, _write_rate, True, True),
    Figure("pulsar_in_messages_total", "Messages published since the topic was loaded", _msg_in),
    Figure("pulsar_in_bytes_total", "Bytes published since the topic was loaded", _bytes_in),
    Figure(
        "pulsar_publish_rate_limit_times", "Publishes over the topic's publishRate", _publish_rate_limited
    ),
)
AVERAGE_MSG_SIZE = Figure("pulsar_average_msg_size", "Mean message size" + PERIOD, _average_msg_size)
NAMESPACE_OUT_FIGURES: tuple[Figure, ...] = (
    Figure("pulsar_out_messages_total", "Messages delivered since loaded", _msg_out),
    Figure("pulsar_out_bytes_total", "Bytes delivered since loaded", _bytes_out),
)


@dataclass(frozen=True, slots=True)
class SubscriptionFigure:
    name: str
    help: str
    read: Callable[[AnySubscription], float]


SUBSCRIPTION_FIGURES: tuple[SubscriptionFigure, ...] = (
    SubscriptionFigure("pulsar_subscription_back_log", "Unacknowledged messages", _sub_backlog),
    SubscriptionFigure(
        "pulsar_subscription_back_log_no_delayed",
        "Unacknowledged messages, delayed excluded",
        _sub_backlog_no_delayed,
    ),
    SubscriptionFigure("pulsar_subscription_delayed", "Entries held back for delayed delivery", _sub_delayed),
    SubscriptionFigure("pulsar_subscription_msg_rate_out", "Messages delivered per second", _sub_rate_out),
    SubscriptionFigure(
        "pulsar_subscription_msg_throughput_out", "Bytes delivered per second", _sub_throughput_out
    ),
    SubscriptionFigure(
        "pulsar_subscription_msg_rate_redeliver", "Messages redelivered per second", _sub_rate_redeliver
    ),
    SubscriptionFigure("pulsar_subscription_unacked_messages", "Delivered, not acknowledged", _sub_unacked),
    SubscriptionFigure(
        "pulsar_subscription_blocked_on_unacked_messages", "1 while blocked on unacked messages", _sub_none
    ),
    SubscriptionFigure("pulsar_subscription_consumers_count", "Connected consumers", _sub_consumers),
    SubscriptionFigure(
        "pulsar_subscription_msg_drop_rate", "Messages dropped per second (non-persistent)", _sub_drop_rate
    ),
    SubscriptionFigure(
        "pulsar_subscription_last_acked_timestamp", "Last acknowledgement (epoch ms)", _sub_last_acked
    ),
    SubscriptionFigure("pulsar_out_messages_total", "Messages delivered since loaded", _sub_msg_out),
    SubscriptionFigure("pulsar_out_bytes_total", "Bytes delivered since loaded", _sub_bytes_out),
)
THROTTLED_LABELS = (*SUBSCRIPTION_LABELS, "reason")
THROTTLED_FAMILIES: tuple[tuple[Family, str], ...] = (
    (Family("pulsar_subscription_dispatch_throttled_msg_events", GAUGE,
            "Reads held back or cut short by a dispatch rate's messages", THROTTLED_LABELS), "msgs"),
    (Family("pulsar_subscription_dispatch_throttled_bytes_events", GAUGE,
            "Reads held back or cut short by a dispatch rate's bytes", THROTTLED_LABELS), "bytes"),
)  # fmt: skip
TOPICS_COUNT = Family("pulsar_topics_count", GAUGE, "Topics loaded", NAMESPACE_LABELS)
WRITE_LATENCY_FAMILIES: tuple[Family, ...] = (
    *(
        Family(f"pulsar_storage_write_latency_le_{suffix}", GAUGE,
               f"Entries stored within {bound:g} ms in the last stats period", TOPIC_LABELS)
        for suffix, bound in zip(PULSAR_WRITE_LATENCY_SUFFIXES, PULSAR_WRITE_LATENCY_BOUNDS_MS, strict=True)
    ),
    Family("pulsar_storage_write_latency_overflow", GAUGE,
           "Entries stored in more than 1 s in the last stats period", TOPIC_LABELS),
    Family("pulsar_storage_write_latency_count", GAUGE, "Entries stored in the last stats period",
           TOPIC_LABELS),
    Family("pulsar_storage_write_latency_sum", GAUGE,
           "Microseconds the entries of the last stats period took to store", TOPIC_LABELS),
)  # fmt: skip
PUBLISH_LATENCY = Family(
    "magnetar_publish_latency_seconds",
    Kind.HISTOGRAM,
    "Publish latency (received -> stored), since the topic was loaded",
    TOPIC_LABELS,
    PUBLISH_LATENCY_BUCKETS_S,
)


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


def broker_wide(name: str, kind: Kind, help_text: str) -> Family:
    return Family(name, kind, help_text, ("cluster",))


METADATA_FAMILIES: tuple[tuple[Family, Callable[[MetadataFigures], float]], ...] = (
    (
        broker_wide("magnetar_metadata_outages", Kind.COUNTER, "Metadata store outages seen"),
        lambda f: f.outages_total,
    ),
    (
        broker_wide("magnetar_metadata_sessions_lost", Kind.COUNTER, "Metadata sessions lost (expired)"),
        lambda f: f.sessions_lost_total,
    ),
    (
        broker_wide("magnetar_metadata_store_healthy", Kind.GAUGE, "1 while the metadata store is usable"),
        lambda f: int(f.healthy),
    ),
    (
        broker_wide(
            "magnetar_metadata_outage_seconds", Kind.GAUGE, "Length of the current metadata outage so far"
        ),
        lambda f: f.outage_s,
    ),
    (
        broker_wide("magnetar_metadata_waiters", Kind.GAUGE, "Requests waiting for the metadata store"),
        lambda f: f.waiters,
    ),
    (
        broker_wide("magnetar_bundles_owned", Kind.GAUGE, "Namespace bundles this broker serves"),
        lambda f: f.bundles_owned,
    ),
    (
        broker_wide(
            "magnetar_bundles_unconfirmed",
            Kind.GAUGE,
            "Bundles served without their ownership node (after a lost session)",
        ),
        lambda f: f.bundles_unconfirmed,
    ),
    (
        broker_wide(
            "magnetar_ledger_rollovers_deferred",
            Kind.GAUGE,
            "Topics whose current ledger takes entries past its cap",
        ),
        lambda f: f.rollovers_deferred,
    ),
    (
        broker_wide("magnetar_ledger_entries_past_cap", Kind.GAUGE, "Entries written past the ledger cap"),
        lambda f: f.entries_past_cap,
    ),
    (
        broker_wide(
            "magnetar_serve_without_session_max_seconds",
            Kind.GAUGE,
            "Bound: serving without a confirmed metadata session (serve_without_session_max_s)",
        ),
        lambda f: f.serve_without_session_max_s,
    ),
    (
        broker_wide(
            "magnetar_rollover_deferred_entries_max",
            Kind.GAUGE,
            "Bound: entries past the ledger cap while a rollover is deferred",
        ),
        lambda f: f.rollover_deferred_entries_max,
    ),
)


class BrokerMetrics:
    """The metrics of one broker: its own topic figures plus the sources the composition root adds; each
    scrape is an :class:`~.exposition.Exposition` over all of them."""

    def __init__(
        self,
        cluster: str,
        topics: Callable[[], Iterable[Topic]],
        metadata: Callable[[], MetadataFigures] | None = None,
        *,
        topic_level: bool = True,
        chunk_bytes: int = 64 * 1024,
        step_ms: float = 2.0,
    ) -> None:
        self._cluster = cluster
        self._topics = topics
        self._metadata = metadata
        self.topic_level = topic_level
        self._chunk_bytes = chunk_bytes
        self._step_ms = step_ms
        self.sources: list[MetricsSource] = [self]

    def add_source(self, source: MetricsSource) -> None:
        self.sources.append(source)

    def exposition(self, *, gzip: bool = False) -> Exposition:
        return Exposition(
            self.sources,
            topic_level=self.topic_level,
            gzip=gzip,
            chunk_bytes=self._chunk_bytes,
            step_ms=self._step_ms,
        )

    def families(self) -> Iterator[FamilyRows]:
        topics = list(self._topics())  # the topics loaded when the scrape began
        for figure in TOPIC_FIGURES:
            yield self._topic_family(figure, topics)
        if self.topic_level:
            yield self._topic_family(AVERAGE_MSG_SIZE, topics)
            for sub_figure in SUBSCRIPTION_FIGURES:
                family = Family(sub_figure.name, GAUGE, sub_figure.help, SUBSCRIPTION_LABELS)
                yield family, self._subscription_rows(topics, sub_figure.read)
            for family, dimension in THROTTLED_FAMILIES:
                yield family, self._throttled_rows(topics, dimension)
        else:
            for figure in NAMESPACE_OUT_FIGURES:
                yield self._topic_family(figure, topics)
        yield from self._write_latency(topics)
        yield (
            PUBLISH_LATENCY,
            ((self._labels(t), t.metrics.latency_buckets, t.metrics.latency_sum_s) for t in topics),
        )
        yield TOPICS_COUNT, self._topics_count(topics)
        for figure in TOPIC_FIGURES:
            if figure.broker_level:
                name = "pulsar_broker_" + figure.name.removeprefix("pulsar_")
                family = Family(name, GAUGE, f"{figure.help}, over the broker", ("cluster",))
                yield family, self._broker_sum(topics, figure.read)
        yield (
            Family("pulsar_broker_topics_count", GAUGE, "Topics loaded on this broker", ("cluster",)),
            [((self._cluster,), len(topics))],
        )
        if self._metadata is not None:
            figures = self._metadata()
            for family, read in METADATA_FAMILIES:
                yield family, [((self._cluster,), read(figures))]

    def _topic_family(self, figure: Figure, topics: list[Topic]) -> FamilyRows:
        labels: tuple[str, ...] = TOPIC_LABELS
        extra: tuple[str, ...] = ()
        if figure.name == "pulsar_msg_backlog" and not self.topic_level:
            labels, extra = (*TOPIC_LABELS, "remote_cluster"), ("local",)
        family = Family(figure.name, GAUGE, figure.help, labels)
        return family, self._rows(topics, figure, extra)

    def _rows(self, topics: list[Topic], figure: Figure, extra: tuple[str, ...]) -> Iterator[Row]:
        if figure.starts_with_zero:
            yield (self._cluster, "", "", *("" for _ in extra)), 0
        for topic in topics:
            yield (*self._labels(topic), *extra), figure.read(topic)

    def _broker_sum(self, topics: list[Topic], read: Callable[[Topic], float]) -> Iterator[Row | None]:
        """One row, the figure summed over the topics; ``None`` after each topic, so a scrape's step can end
        between two topics (a sum over thousands of topics is far longer than a step)."""
        total = 0.0
        for topic in topics:
            total += read(topic)
            yield None
        yield (self._cluster,), total

    def _subscription_rows(
        self, topics: list[Topic], read: Callable[[AnySubscription], float]
    ) -> Iterator[Row]:
        for topic in topics:
            labels = self._labels(topic)
            for name, subscription in topic.subscriptions.items():
                if subscription.durable:
                    yield (*labels, name), read(subscription)

    def _throttled_rows(self, topics: list[Topic], dimension: str) -> Iterator[Row]:
        """One row per reason for each durable subscription of a persistent topic (a non-persistent one has
        no dispatch rate)."""
        for topic in topics:
            labels = self._labels(topic)
            for name, subscription in topic.subscriptions.items():
                if not isinstance(subscription, NonPersistentSubscription) and subscription.durable:
                    events = subscription.dispatcher.throttled_events
                    counts = events.msgs if dimension == "msgs" else events.bytes
                    for reason, count in counts.items():
                        yield (*labels, name, reason), count

    def _write_latency(self, topics: list[Topic]) -> Iterator[FamilyRows]:
        """Pulsar's write-latency families. Each topic's buckets are computed once, while the first family's
        rows are read (one topic per row, so a scrape's step can end between two topics), and kept for the
        others: a renderer reads one family's rows to the end before it asks for the next family."""
        per_topic: list[tuple[tuple[str, str, str], list[int], int, float]] = []

        def first_bucket() -> Iterator[Row]:
            for topic in topics:
                labels = self._labels(topic)
                buckets, count, total_us = pulsar_write_latency(topic.metrics)
                per_topic.append((labels, buckets, count, total_us))
                yield labels, buckets[0]

        bucket_families = WRITE_LATENCY_FAMILIES[: len(PULSAR_WRITE_LATENCY_BOUNDS_MS) + 1]
        yield bucket_families[0], first_bucket()
        for index, family in enumerate(bucket_families[1:], 1):
            yield family, [(labels, buckets[index]) for labels, buckets, _, _ in per_topic]
        count_family, sum_family = WRITE_LATENCY_FAMILIES[-2:]
        yield count_family, [(labels, count) for labels, _, count, _ in per_topic]
        yield sum_family, [(labels, total_us) for labels, _, _, total_us in per_topic]

    def _topics_count(self, topics: list[Topic]) -> list[Row]:
        per_namespace: dict[str, int] = {}
        for topic in topics:
            namespace = self._labels(topic)[1]
            per_namespace[namespace] = per_namespace.get(namespace, 0) + 1
        rows: list[Row] = [((self._cluster, ""), 0)]
        rows.extend(((self._cluster, namespace), count) for namespace, count in sorted(per_namespace.items()))
        return rows

    def _labels(self, topic: Topic) -> tuple[str, str, str]:
        name = topic.name
        return self._cluster, f"{name.tenant}/{name.namespace}", topic.full_name

"""The broker's Prometheus metrics, named as Pulsar's topic metrics with a ``magnetar_`` prefix.

Per topic (labels ``cluster``, ``namespace``, ``topic``): ``magnetar_in_messages_total``,
``magnetar_in_bytes_total``, ``magnetar_out_messages_total``, ``magnetar_out_bytes_total``,
``magnetar_storage_size``, ``magnetar_msg_backlog``, ``magnetar_producers_count``,
``magnetar_subscriptions_count``, ``magnetar_consumers_count`` and the publish latency histogram
``magnetar_publish_latency_seconds`` (message received by the broker -> stored with the ack quorum). Broker-
wide: ``magnetar_topics_count``. The names are declared once, below (:data:`TOPIC_FAMILIES` and the families
after it); the layers above declare theirs in their own module (the storage figures:
:mod:`magnetar.admin.processes.metrics`).

Metadata outages (broker-wide, see :mod:`.metadata_outage`): ``magnetar_metadata_store_healthy`` (1/0),
``magnetar_metadata_outages_total``, ``magnetar_metadata_sessions_lost_total``,
``magnetar_metadata_outage_seconds`` (the current outage so far, 0 when healthy),
``magnetar_metadata_waiters`` (requests waiting for the store), ``magnetar_bundles_owned``,
``magnetar_bundles_unconfirmed`` (served without their node, after a lost session),
``magnetar_ledger_rollovers_deferred`` (topics whose current ledger takes entries past its cap),
``magnetar_ledger_entries_past_cap`` (their sum), and the bounds in force:
``magnetar_serve_without_session_max_seconds``, ``magnetar_rollover_deferred_entries_max``
(:data:`METADATA_FAMILIES`).

The hot path only adds to plain integers (:class:`TopicMetrics`); the figures are read from the live objects
when ``/metrics`` is scraped, and rendered a little at a time (:mod:`.exposition`), so publishing pays no
Prometheus client overhead per message and a scrape never holds the event loop for long. With
``expose_topic_level_metrics_in_prometheus`` off they are summed per namespace.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from magnetar.broker.exposition import Exposition, Family, FamilyRows, Kind, MetricsSource, Row

if TYPE_CHECKING:
    from magnetar.broker.topic import PersistentTopic

PUBLISH_LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0)
"""Upper bounds (seconds), close to Pulsar's storage write latency buckets (0.5 ms ... 1 s, overflow)."""
TOPIC_LABELS = ("cluster", "namespace", "topic")


@dataclass(frozen=True, slots=True)
class TopicFamily:
    """A per-topic figure: its family and how to read it from a loaded topic."""

    family: Family
    read: Callable[[PersistentTopic], float]


def _msg_in(t: PersistentTopic) -> float:
    return t.metrics.msg_in


def _bytes_in(t: PersistentTopic) -> float:
    return t.metrics.bytes_in


def _msg_out(t: PersistentTopic) -> float:
    return sum(s.msg_out_counter for s in t.subscriptions.values())


def _bytes_out(t: PersistentTopic) -> float:
    return sum(s.bytes_out_counter for s in t.subscriptions.values())


def _storage_size(t: PersistentTopic) -> float:
    return t.ml.total_size()


def _backlog(t: PersistentTopic) -> float:
    return sum(s.backlog() for s in t.subscriptions.values() if s.durable)


def _producers(t: PersistentTopic) -> float:
    return len(t.producers)


def _subscriptions(t: PersistentTopic) -> float:
    return sum(1 for s in t.subscriptions.values() if s.durable)


def _consumers(t: PersistentTopic) -> float:
    return sum(len(s.consumers) for s in t.subscriptions.values())


TOPIC_FAMILIES: tuple[TopicFamily, ...] = (
    TopicFamily(Family("magnetar_in_messages", Kind.COUNTER, "Messages published", TOPIC_LABELS), _msg_in),
    TopicFamily(
        Family("magnetar_in_bytes", Kind.COUNTER, "Payload bytes published", TOPIC_LABELS), _bytes_in
    ),
    TopicFamily(Family("magnetar_out_messages", Kind.COUNTER, "Messages delivered", TOPIC_LABELS), _msg_out),
    TopicFamily(
        Family("magnetar_out_bytes", Kind.COUNTER, "Payload bytes delivered", TOPIC_LABELS), _bytes_out
    ),
    TopicFamily(
        Family("magnetar_storage_size", Kind.GAUGE, "Bytes stored in ledgers", TOPIC_LABELS), _storage_size
    ),
    TopicFamily(Family("magnetar_msg_backlog", Kind.GAUGE, "Unacknowledged entries", TOPIC_LABELS), _backlog),
    TopicFamily(Family("magnetar_producers_count", Kind.GAUGE, "Producers", TOPIC_LABELS), _producers),
    TopicFamily(
        Family("magnetar_subscriptions_count", Kind.GAUGE, "Subscriptions", TOPIC_LABELS), _subscriptions
    ),
    TopicFamily(Family("magnetar_consumers_count", Kind.GAUGE, "Consumers", TOPIC_LABELS), _consumers),
)
PUBLISH_LATENCY = Family(
    "magnetar_publish_latency_seconds",
    Kind.HISTOGRAM,
    "Publish latency (received -> stored)",
    TOPIC_LABELS,
    PUBLISH_LATENCY_BUCKETS_S,
)
TOPICS_COUNT = Family("magnetar_topics_count", Kind.GAUGE, "Topics loaded", ("cluster",))


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


def _broker_wide(name: str, kind: Kind, help_text: str) -> Family:
    return Family(name, kind, help_text, ("cluster",))


METADATA_FAMILIES: tuple[tuple[Family, Callable[[MetadataFigures], float]], ...] = (
    (
        _broker_wide("magnetar_metadata_outages", Kind.COUNTER, "Metadata store outages seen"),
        lambda f: f.outages_total,
    ),
    (
        _broker_wide("magnetar_metadata_sessions_lost", Kind.COUNTER, "Metadata sessions lost (expired)"),
        lambda f: f.sessions_lost_total,
    ),
    (
        _broker_wide("magnetar_metadata_store_healthy", Kind.GAUGE, "1 while the metadata store is usable"),
        lambda f: int(f.healthy),
    ),
    (
        _broker_wide(
            "magnetar_metadata_outage_seconds", Kind.GAUGE, "Length of the current metadata outage so far"
        ),
        lambda f: f.outage_s,
    ),
    (
        _broker_wide("magnetar_metadata_waiters", Kind.GAUGE, "Requests waiting for the metadata store"),
        lambda f: f.waiters,
    ),
    (
        _broker_wide("magnetar_bundles_owned", Kind.GAUGE, "Namespace bundles this broker serves"),
        lambda f: f.bundles_owned,
    ),
    (
        _broker_wide(
            "magnetar_bundles_unconfirmed",
            Kind.GAUGE,
            "Bundles served without their ownership node (after a lost session)",
        ),
        lambda f: f.bundles_unconfirmed,
    ),
    (
        _broker_wide(
            "magnetar_ledger_rollovers_deferred",
            Kind.GAUGE,
            "Topics whose current ledger takes entries past its cap",
        ),
        lambda f: f.rollovers_deferred,
    ),
    (
        _broker_wide("magnetar_ledger_entries_past_cap", Kind.GAUGE, "Entries written past the ledger cap"),
        lambda f: f.entries_past_cap,
    ),
    (
        _broker_wide(
            "magnetar_serve_without_session_max_seconds",
            Kind.GAUGE,
            "Bound: serving without a confirmed metadata session (serve_without_session_max_s)",
        ),
        lambda f: f.serve_without_session_max_s,
    ),
    (
        _broker_wide(
            "magnetar_rollover_deferred_entries_max",
            Kind.GAUGE,
            "Bound: entries past the ledger cap while a rollover is deferred",
        ),
        lambda f: f.rollover_deferred_entries_max,
    ),
)


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


class BrokerMetrics:
    """The metrics of one broker: its own topic figures plus the sources the composition root adds; each
    scrape is an :class:`~.exposition.Exposition` over all of them."""

    def __init__(
        self,
        cluster: str,
        topics: Callable[[], Iterable[PersistentTopic]],
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
        for figure in TOPIC_FAMILIES:
            yield figure.family, self._rows(topics, figure.read)
        yield (
            PUBLISH_LATENCY,
            ((self._labels(t), t.metrics.latency_buckets, t.metrics.latency_sum_s) for t in topics),
        )
        yield TOPICS_COUNT, [((self._cluster,), len(topics))]
        if self._metadata is not None:
            figures = self._metadata()
            for family, read in METADATA_FAMILIES:
                yield family, [((self._cluster,), read(figures))]

    def _rows(self, topics: list[PersistentTopic], read: Callable[[PersistentTopic], float]) -> Iterator[Row]:
        for topic in topics:
            yield self._labels(topic), read(topic)

    def _labels(self, topic: PersistentTopic) -> tuple[str, str, str]:
        name = topic.name
        return self._cluster, f"{name.tenant}/{name.namespace}", topic.full_name

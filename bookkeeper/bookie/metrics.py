"""Bookie metrics in a per-bookie prometheus ``CollectorRegistry`` (never the process-global one).

Names mirror BookKeeper's server stats under ``magnetar_bookie_``: ``ADD_ENTRY_REQUEST`` /
``READ_ENTRY_REQUEST`` latency and counts become ``magnetar_bookie_request_seconds{op}`` and
``magnetar_bookie_requests_total{op,status}``; ``ADD_ENTRY_IN_PROGRESS`` ->
``magnetar_bookie_requests_in_progress``; ``WRITE_BYTES``/``READ_BYTES`` ->
``magnetar_bookie_{write,read}_bytes_total``; ``SERVER_STATUS`` -> ``magnetar_bookie_readonly`` (1 while
read-only). Storage figures (journal queue, fsync counts ...) are exported as gauges
``magnetar_bookie_<name>`` when the store offers ``stats() -> Mapping[str, float]``.

The request path updates plain Python counters (a dict increment and a bisect per request) and the registry
reads them only when scraped, through this module's collector: cheaper than prometheus_client's
lock-per-update metric objects at 100k requests/s.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from magnetar.bookkeeper.protocol.status import BookieStatus

LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
PREFIX = "magnetar_bookie_"
OPS = ("add_entry", "read_entry", "read_lac", "write_lac", "get_bookie_info", "invalid")

StoreStats = Callable[[], Mapping[str, float]]


class _Histogram:
    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.total += seconds

    def buckets(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, count in zip((*LATENCY_BUCKETS_S, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return out


class BookieMetrics(Collector):
    """The counters of one bookie; ``render_metrics()`` gives the Prometheus text exposition."""

    def __init__(self, *, store_stats: StoreStats | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests: dict[tuple[str, BookieStatus], int] = {}
        self.latency: dict[str, _Histogram] = {op: _Histogram() for op in OPS}
        self.requests_in_progress = 0
        self.write_bytes = 0
        self.read_bytes = 0
        self.connections = 0
        self.connections_rejected = 0
        self.auth_failures = 0
        self.connections_unauthenticated = 0
        self.unauthenticated_evicted = 0
        self.tls_handshake_failures = 0
        self.readonly = False
        self.disk_usage_ratio = 0.0
        self.journal_disk_usage_ratio = 0.0
        self._store_stats = store_stats
        self.registry.register(self)

    def request_done(self, op: str, status: BookieStatus, seconds: float) -> None:
        key = (op, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        self.latency[op].observe(seconds)

    def render_metrics(self) -> bytes:
        return render_metrics(self.registry)

    def collect(self) -> Iterable[Metric]:
        requests = CounterMetricFamily(
            PREFIX + "requests", "Requests answered, by operation and status", labels=["op", "status"]
        )
        for (op, status), count in sorted(self.requests.items()):
            requests.add_metric([op, status.name], count)
        yield requests
        latency = HistogramMetricFamily(
            PREFIX + "request_seconds", "Time from request decoded to response queued", labels=["op"]
        )
        for op, histogram in self.latency.items():
            latency.add_metric([op], histogram.buckets(), histogram.total)
        yield latency
        yield GaugeMetricFamily(
            PREFIX + "requests_in_progress", "Requests being processed", value=self.requests_in_progress
        )
        yield CounterMetricFamily(PREFIX + "write_bytes", "Entry bytes accepted", value=self.write_bytes)
        yield CounterMetricFamily(PREFIX + "read_bytes", "Entry bytes served", value=self.read_bytes)
        yield GaugeMetricFamily(PREFIX + "connections", "Open client connections", value=self.connections)
        yield CounterMetricFamily(
            PREFIX + "connections_rejected",
            "Connections closed at once because connections_max was reached",
            value=self.connections_rejected,
        )
        yield CounterMetricFamily(
            PREFIX + "auth_failures",
            "Connections refused for a missing, invalid or unauthorized token",
            value=self.auth_failures,
        )
        yield GaugeMetricFamily(
            PREFIX + "connections_unauthenticated",
            "Open connections that have not authenticated yet (authentication on)",
            value=self.connections_unauthenticated,
        )
        yield CounterMetricFamily(
            PREFIX + "unauthenticated_evicted",
            "Unauthenticated connections closed to admit a new one (unauthenticated_connections_max)",
            value=self.unauthenticated_evicted,
        )
        yield CounterMetricFamily(
            PREFIX + "tls_handshake_failures",
            "Connections that failed or timed out in the TLS handshake",
            value=self.tls_handshake_failures,
        )
        readonly = int(self.readonly)
        yield GaugeMetricFamily(PREFIX + "readonly", "1 while the bookie is read-only", value=readonly)
        yield GaugeMetricFamily(
            PREFIX + "disk_usage_ratio", "Used fraction of the ledger storage", value=self.disk_usage_ratio
        )
        yield GaugeMetricFamily(
            PREFIX + "journal_disk_usage_ratio",
            "Used fraction of the journal's file system",
            value=self.journal_disk_usage_ratio,
        )
        if self._store_stats is not None:
            for name, value in sorted(self._store_stats().items()):
                metric = PREFIX + re.sub(r"[^a-zA-Z0-9_]", "_", name)
                yield GaugeMetricFamily(metric, f"Ledger storage figure {name}", value=value)


def render_metrics(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of ``registry`` (serve it as ``text/plain; version=0.0.4``)."""
    return generate_latest(registry)


class LabelledBookieMetrics(Collector):
    """The metrics of several bookies as one collector, every sample labelled ``bookie="<bookie id>"``.

    A process that hosts bookies beside its own metrics (``magnetar standalone``, whose broker owns
    ``/metrics``) registers this in its registry: one scrape then has everything, and the bookies' samples of
    one metric share one family (a page must not name a metric twice)."""

    def __init__(self, registries: Callable[[], Iterable[tuple[str, CollectorRegistry]]]) -> None:
        self._registries = registries

    def collect(self) -> Iterable[Metric]:
        families: dict[str, Metric] = {}
        for bookie_id, registry in self._registries():
            for family in registry.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = merged
                for sample in family.samples:
                    merged.samples.append(sample._replace(labels={"bookie": bookie_id, **sample.labels}))
        yield from families.values()

"""Bookie metrics in a per-bookie prometheus ``CollectorRegistry`` (never the process-global one), under
BookKeeper's names.

BookKeeper's Prometheus provider names a bookie's figures by stats scope and constant; BookKeeper's and
Pulsar's dashboards query those names, so the bookie exports them:

* ``bookkeeper_server_<OP>_REQUEST`` for ``ADD_ENTRY``, ``READ_ENTRY``, ``READ_LAC``, ``WRITE_LAC`` and
  ``GET_BOOKIE_INFO``, plus ``bookkeeper_server_ADD_ENTRY`` / ``READ_ENTRY``: BookKeeper's op-stats, a
  summary per ``success`` label (``true`` for EOK) - ``_count`` and ``_sum`` in milliseconds since start, and
  the quantiles 0.5, 0.75, 0.95, 0.99, 0.999, 0.9999 and 1.0 of the last complete minute (BookKeeper rolls its
  quantile sketches over every 60 s), estimated within this bookie's latency buckets. A request is handled
  whole when it is read (decoded, stored or read, answered), so the ``_REQUEST`` and the plain figure are the
  same time here;
* ``bookie_WRITE_BYTES`` / ``bookie_READ_BYTES`` (entry bytes accepted / served), ``bookie_SERVER_STATUS``
  (1 writable, 0 read-only), and from the disk store ``bookie_journal_JOURNAL_SYNC`` (a summary of the
  journal's syncs: ``_count`` / ``_sum`` by ``success``, no quantiles) and
  ``bookie_journal_JOURNAL_WRITE_BYTES``.

BookKeeper types its counters ``counter`` with the bare name (``bookie_WRITE_BYTES``); the Python client can
only write a counter as ``<name>_total``, so these are typed ``gauge`` under BookKeeper's exact name (a
query by name, ``rate()`` included, works the same). What BookKeeper has no figure for keeps Magnetar's
names: ``magnetar_bookie_requests_in_progress`` (all operations), ``magnetar_bookie_invalid_requests``,
connection and authentication counters, disk-usage ratios, the other journal figures
(``magnetar_bookie_journal_*``). docs/metrics.md lists every name.

The request path updates plain Python counters (a dict increment and a bisect per request) and the registry
reads them only when scraped, through this module's collector: cheaper than prometheus_client's
lock-per-update metric objects at 100k requests/s.
"""

from __future__ import annotations

import bisect
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from magnetar.bookkeeper.protocol import BookieStatus

LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
PREFIX = "magnetar_bookie_"
SERVER = "bookkeeper_server_"
OPS = ("add_entry", "read_entry", "read_lac", "write_lac", "get_bookie_info")
BK_OP_NAMES = {op: op.upper() for op in OPS}
PLAIN_OP_TOO = ("add_entry", "read_entry")
"""Ops BookKeeper also reports without ``_REQUEST`` (the bookie's processing time)."""
QUANTILES = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0)
QUANTILE_WINDOW_S = 60.0
"""BookKeeper's quantile roll-over period (its Prometheus provider's latency rollover, 60 s)."""
STORE_BK_NAMES = {
    "journal_bytes": "bookie_journal_JOURNAL_WRITE_BYTES",
    "write_throttled_adds": "bookie_throttled_write_requests",
}
"""Figures of the disk store that BookKeeper names (the rest are ``magnetar_bookie_<name>``)."""
JOURNAL_SYNC_FIGURES = ("journal_syncs", "journal_failed_syncs", "journal_sync_seconds")

StoreStats = Callable[[], Mapping[str, float]]


class _Histogram:
    __slots__ = ("_at_rotation", "counts", "total", "window")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.total = 0.0
        self.window = [0] * len(self.counts)
        """Counts of the last complete quantile window."""
        self._at_rotation = [0] * len(self.counts)

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.total += seconds

    def rotate(self) -> None:
        self.window = [now - then for now, then in zip(self.counts, self._at_rotation, strict=True)]
        self._at_rotation = list(self.counts)

    def quantile_ms(self, q: float) -> float:
        """The ``q`` quantile of the last window, interpolated within its bucket (NaN when it was empty)."""
        total = sum(self.window)
        if total == 0:
            return math.nan
        rank = q * total
        running = 0
        for index, count in enumerate(self.window):
            if count and running + count >= rank:
                lower = LATENCY_BUCKETS_S[index - 1] if index > 0 else 0.0
                upper = LATENCY_BUCKETS_S[index] if index < len(LATENCY_BUCKETS_S) else LATENCY_BUCKETS_S[-1]
                fraction = (rank - running) / count
                return (lower + (upper - lower) * fraction) * 1000
            running += count
        return LATENCY_BUCKETS_S[-1] * 1000


def _summary(name: str, documentation: str) -> Metric:
    return Metric(name, documentation, "summary")


class BookieMetrics(Collector):
    """The counters of one bookie; ``render_metrics()`` gives the Prometheus text exposition."""

    def __init__(
        self, *, store_stats: StoreStats | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests: dict[tuple[str, BookieStatus], int] = {}
        self.latency: dict[tuple[str, bool], _Histogram] = {
            (op, success): _Histogram() for op in OPS for success in (True, False)
        }
        self.invalid_requests = 0
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
        self._clock = clock
        self._rotated_at = clock()
        self.registry.register(self)

    def request_done(self, op: str, status: BookieStatus, seconds: float) -> None:
        if op not in BK_OP_NAMES:
            self.invalid_requests += 1
            return
        key = (op, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        self.latency[(op, status is BookieStatus.EOK)].observe(seconds)

    def render_metrics(self) -> bytes:
        return render_metrics(self.registry)

    def _rotate_if_due(self) -> None:
        now = self._clock()
        if now - self._rotated_at >= QUANTILE_WINDOW_S:
            self._rotated_at = now
            for histogram in self.latency.values():
                histogram.rotate()

    def _op_stats(self, op: str, name: str) -> Metric:
        what = f"{BK_OP_NAMES[op]} latency (ms): count and sum since start, quantiles of the last minute"
        metric = _summary(name, what)
        for success in (True, False):
            histogram = self.latency[(op, success)]
            labels = {"success": "true" if success else "false"}
            for q in QUANTILES:
                metric.add_sample(name, {**labels, "quantile": repr(q)}, histogram.quantile_ms(q))
            metric.add_sample(f"{name}_count", labels, sum(histogram.counts))
            metric.add_sample(f"{name}_sum", labels, histogram.total * 1000)
        return metric

    def collect(self) -> Iterable[Metric]:
        self._rotate_if_due()
        for op, bk_name in BK_OP_NAMES.items():
            yield self._op_stats(op, f"{SERVER}{bk_name}_REQUEST")
            if op in PLAIN_OP_TOO:
                yield self._op_stats(op, f"{SERVER}{bk_name}")
        yield GaugeMetricFamily("bookie_WRITE_BYTES", "Entry bytes accepted", value=self.write_bytes)
        yield GaugeMetricFamily("bookie_READ_BYTES", "Entry bytes served", value=self.read_bytes)
        yield GaugeMetricFamily(
            "bookie_SERVER_STATUS",
            "1 while the bookie is writable, 0 while read-only",
            value=int(not self.readonly),
        )
        yield CounterMetricFamily(
            PREFIX + "invalid_requests", "Requests that could not be decoded", value=self.invalid_requests
        )
        yield GaugeMetricFamily(
            PREFIX + "requests_in_progress", "Requests being processed", value=self.requests_in_progress
        )
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
        yield GaugeMetricFamily(
            PREFIX + "disk_usage_ratio", "Used fraction of the ledger storage", value=self.disk_usage_ratio
        )
        yield GaugeMetricFamily(
            PREFIX + "journal_disk_usage_ratio",
            "Used fraction of the journal's file system",
            value=self.journal_disk_usage_ratio,
        )
        if self._store_stats is not None:
            yield from _store_metrics(dict(self._store_stats()))


def _store_metrics(stats: dict[str, float]) -> Iterable[Metric]:
    if all(name in stats for name in JOURNAL_SYNC_FIGURES):
        name = "bookie_journal_JOURNAL_SYNC"
        sync = _summary(name, "Journal syncs (ms): count and sum since start")
        failed = stats["journal_failed_syncs"]
        sync.add_sample(f"{name}_count", {"success": "true"}, stats["journal_syncs"] - failed)
        sync.add_sample(f"{name}_sum", {"success": "true"}, stats["journal_sync_seconds"] * 1000)
        sync.add_sample(f"{name}_count", {"success": "false"}, failed)
        sync.add_sample(f"{name}_sum", {"success": "false"}, 0.0)
        yield sync
    for name, value in sorted(stats.items()):
        bk_name = STORE_BK_NAMES.get(name)
        if bk_name is not None:
            yield GaugeMetricFamily(bk_name, f"Ledger storage figure {name}", value=value)
        else:
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

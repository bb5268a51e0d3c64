"""AutoRecovery's figures (:class:`AutoRecoveryStats`, plain counters) and their Prometheus collector.

Where BookKeeper has the figure, the name is BookKeeper's (``ReplicationStats``: the auditor's scope
``auditor_``, the replication worker's ``replication_worker_``, both under ``replication_`` when AutoRecovery
runs inside a bookie, as BookKeeper's embedded AutoRecovery scopes them; BookKeeper's counters are exported
as gauges with the exact names, as the bookie's are - see docs/metrics.md):

* ``auditor_NUM_UNDER_REPLICATED_LEDGERS`` - marks counted at the auditor's last audit (BookKeeper records
  the count of each audit in a summary; here a gauge of the last one);
* ``replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED`` - ledgers this process healed;
* ``replication_worker_NUM_ENTRIES_WRITTEN``, ``replication_worker_NUM_BYTES_WRITTEN`` - what it copied to new
  bookies.

BookKeeper has no figure for the rest, prefixed ``magnetar_autorecovery_``:

* ``auditor_elected`` - 1 while this daemon is the auditor;
* ``lost_bookies`` - bookies the auditor holds lost (0 in the other daemons);
* ``replication_rate_bytes_per_s`` - its copy rate over the last ``RATE_WINDOW_S``;
* ``replication_failures_total`` - ledger replications that failed (retried later);
* ``ledgers_marked_total`` - marks this auditor wrote or extended;
* ``recoveries_total`` - open ledgers it recovered (fenced and closed) to replicate them;
* ``audit_passes_discarded_total`` - auditor passes dropped unfinished because a metadata-store outage began
  during them (their view of the bookies and ledgers may be partial);
* ``outage_pauses_total`` - times the auditor or the worker paused for an unhealthy metadata store.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "magnetar_autorecovery_"
EMBEDDED_SCOPE = "replication_"
"""BookKeeper's scope of AutoRecovery's figures when it runs inside a bookie."""
RATE_WINDOW_S = 10.0


@dataclass(slots=True)
class AutoRecoveryStats:
    auditor_elected: bool = False
    lost_bookies: int = 0
    under_replicated_ledgers: int = 0
    ledgers_marked: int = 0
    ledgers_replicated: int = 0
    entries_replicated: int = 0
    bytes_replicated: int = 0
    replication_failures: int = 0
    recoveries: int = 0
    audit_passes_discarded: int = 0
    outage_pauses: int = 0
    _recent: deque[tuple[float, int]] = field(default_factory=deque)

    def copied(self, now: float, size_bytes: int) -> None:
        self.entries_replicated += 1
        self.bytes_replicated += size_bytes
        self._recent.append((now, size_bytes))
        self._trim(now)

    def _trim(self, now: float) -> None:
        while self._recent and self._recent[0][0] < now - RATE_WINDOW_S:
            self._recent.popleft()

    def rate_bytes_per_s(self, now: float) -> float:
        self._trim(now)
        return sum(size for _, size in self._recent) / RATE_WINDOW_S


class AutoRecoveryCollector(Collector):
    """``scope``: ``""`` for ``magnetar autorecovery``, :data:`EMBEDDED_SCOPE` inside a bookie."""

    def __init__(self, stats: AutoRecoveryStats, now: Callable[[], float], scope: str = "") -> None:
        self._stats = stats
        self._now = now
        self._scope = scope

    def collect(self) -> Iterable[Metric]:
        s = self._stats
        scope = self._scope
        bookkeeper = {
            "auditor_NUM_UNDER_REPLICATED_LEDGERS": (
                "ledgers marked under-replicated at the auditor's last audit",
                s.under_replicated_ledgers,
            ),
            "replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED": (
                "ledgers healed by this process",
                s.ledgers_replicated,
            ),
            "replication_worker_NUM_ENTRIES_WRITTEN": ("entries copied to new bookies", s.entries_replicated),
            "replication_worker_NUM_BYTES_WRITTEN": ("bytes copied to new bookies", s.bytes_replicated),
        }
        gauges = {
            **{scope + name: figure for name, figure in bookkeeper.items()},
            PREFIX + "auditor_elected": ("1 while this daemon is the auditor", float(s.auditor_elected)),
            PREFIX + "lost_bookies": ("bookies the auditor holds lost", s.lost_bookies),
            PREFIX + "replication_rate_bytes_per_s": (
                "recent re-replication rate",
                s.rate_bytes_per_s(self._now()),
            ),
        }
        for name, (doc, value) in gauges.items():
            gauge = GaugeMetricFamily(name, doc)
            gauge.add_metric([], float(value))
            yield gauge
        counters = {
            "replication_failures": ("ledger replications that failed", s.replication_failures),
            "ledgers_marked": ("marks written or extended by the auditor", s.ledgers_marked),
            "recoveries": ("open ledgers recovered to replicate them", s.recoveries),
            "audit_passes_discarded": (
                "auditor passes dropped for a metadata outage",
                s.audit_passes_discarded,
            ),
            "outage_pauses": ("pauses for an unhealthy metadata store", s.outage_pauses),
        }
        for name, (doc, value) in counters.items():
            counter = CounterMetricFamily(PREFIX + name, doc)
            counter.add_metric([], float(value))
            yield counter

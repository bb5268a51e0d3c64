"""Aggregate figures of one replication client, read by the metrics exporters (no prometheus import here).

Counters only ever grow; the add-latency histogram is cumulative per bucket as Prometheus expects, with
BookKeeper-client-like buckets from 0.5 ms to 10 s. Recording costs a bisect and two increments per
acknowledged add.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

ADD_LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


@dataclass(slots=True)
class ClientStats:
    adds: int = 0
    add_failures: int = 0
    add_latency_sum_s: float = 0.0
    add_latency_counts: list[int] = field(default_factory=lambda: [0] * (len(ADD_LATENCY_BUCKETS_S) + 1))
    ensemble_changes: int = 0
    recoveries: int = 0
    recovery_failures: int = 0
    ledgers_created: int = 0
    ledgers_deleted: int = 0

    def record_add(self, latency_s: float) -> None:
        self.adds += 1
        self.add_latency_sum_s += latency_s
        self.add_latency_counts[bisect.bisect_left(ADD_LATENCY_BUCKETS_S, latency_s)] += 1

    def latency_buckets(self) -> list[tuple[str, int]]:
        """``(upper bound, cumulative count)`` pairs ending with ``+Inf``, Prometheus style."""
        out: list[tuple[str, int]] = []
        running = 0
        bounds = [*(str(b) for b in ADD_LATENCY_BUCKETS_S), "+Inf"]
        for bound, count in zip(bounds, self.add_latency_counts, strict=True):
            running += count
            out.append((bound, running))
        return out

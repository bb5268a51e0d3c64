"""What one measurement produced: a throughput, a latency distribution, or the reason there is none."""

from __future__ import annotations

import math
from dataclasses import dataclass

SATURATED_FRACTION = 0.95
"""A fixed-rate run that acknowledged less than this share of its target rate did not keep up."""


@dataclass(frozen=True)
class Throughput:
    count: int
    elapsed_s: float
    errors: int = 0
    """Publish: messages whose acknowledgement reported a failure."""
    complete: bool = True
    intervals: int | None = None
    """Consume: deliveries after the first (the rate is timed from the first delivery to the last)."""
    duplicates: int = 0
    """Consume: messages delivered again (not counted in ``count``)."""
    skipped: int = 0
    """Consume: messages never delivered while later ones were."""

    @property
    def rate(self) -> float:
        done = self.count if self.intervals is None else self.intervals
        return done / self.elapsed_s if done > 0 and self.elapsed_s > 0 else 0.0


@dataclass(frozen=True)
class Latency:
    target_rate: float
    achieved_rate: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    count: int
    expected: int
    errors: int = 0
    duplicates: int = 0
    """End to end: messages delivered again (not timed)."""
    send_lag_p99_ms: float = math.nan
    """How late the harness handed messages over (the first of each batch): its own scheduling delay."""

    @property
    def saturated(self) -> bool:
        return self.count < self.expected or self.achieved_rate < SATURATED_FRACTION * self.target_rate

    def percentiles(self) -> tuple[float, float, float]:
        return self.p50_ms, self.p99_ms, self.p999_ms


@dataclass(frozen=True)
class Failure:
    reason: str


Figure = Throughput | Latency | Failure


def is_number(value: float | None) -> bool:
    return value is not None and not math.isnan(value) and not math.isinf(value)

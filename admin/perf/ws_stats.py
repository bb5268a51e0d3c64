"""What ``magnetar perf produce|consume`` measure and print: latency histograms, counters, report lines and
the closing summary.

Latencies go into a histogram of microseconds cut to 3 significant digits (HdrHistogram-style buckets). Every
``--report-interval-s`` a line gives the interval's rate and percentiles; at the end one JSON line gives the
run's figures, for scripts. That line is strict JSON: a percentile of no latencies (nothing was acknowledged)
is ``null``, never ``NaN`` (which Python's ``json`` would write and no JSON parser accepts).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import trio

_SCALES = ((10_000, 10), (100_000, 100), (1_000_000, 1_000), (10_000_000, 10_000))
PERCENTILES = (50, 95, 99, 99.9)


def bucket_us(seconds: float) -> int:
    """A latency in microseconds, cut to 3 significant digits (the histogram's bucket)."""
    micros: int = int(seconds * 1e6)
    if micros < 1000:
        return micros if micros > 0 else 0
    for limit, scale in _SCALES:
        if micros < limit:
            return micros - micros % scale
    big_scale = int(10 ** (len(str(micros)) - 3))
    return micros - micros % big_scale


class Histogram:
    """Latencies in microseconds, bucketed to 3 significant digits."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.total = 0
        self.max_us = 0

    def record(self, seconds: float) -> None:
        self.add(bucket_us(seconds))

    def add(self, micros: int, count: int = 1) -> None:
        """Count ``count`` latencies already cut by :func:`bucket_us`."""
        counts = self.counts
        counts[micros] = counts.get(micros, 0) + count
        self.total += count
        self.max_us = max(self.max_us, micros)

    def percentile_ms(self, pct: float) -> float:
        """The ``pct`` percentile in milliseconds; NaN for an empty histogram (see :meth:`summary`)."""
        if not self.total:
            return math.nan
        wanted = math.ceil(self.total * pct / 100)
        seen = 0
        for value in sorted(self.counts):
            seen += self.counts[value]
            if seen >= wanted:
                return value / 1000
        return self.max_us / 1000

    def summary(self) -> dict[str, float | None]:
        """p50, p95, p99, p99.9 and max in milliseconds; every one None when nothing was recorded."""
        out: dict[str, float | None] = {}
        for pct in PERCENTILES:
            out[f"p{pct}"] = round(self.percentile_ms(pct), 3) if self.total else None
        out["max"] = self.max_us / 1000 if self.total else None
        return out


@dataclass
class Stats:
    started: float = field(default_factory=time.monotonic)
    count: int = 0
    """Messages acknowledged (produce) or received (consume)."""
    errors: int = 0
    """Messages the broker refused (``send-error``, a failed RECEIPT)."""
    resent: int = 0
    """Messages sent again on a new connection: the old one was lost before their ack came."""
    interval_count: int = 0
    histogram: Histogram = field(default_factory=Histogram)
    interval: Histogram = field(default_factory=Histogram)
    last_ack: float = 0.0
    max_gap_s: float = 0.0

    def record(self, latency_s: float, now: float, count: int = 1) -> None:
        """``count`` messages acknowledged (or received) at ``now`` (``time.monotonic``), ``latency_s``
        after they were sent."""
        if now != self.last_ack:
            if self.last_ack and now - self.last_ack > self.max_gap_s:
                self.max_gap_s = now - self.last_ack
            self.last_ack = now
        self.count += count
        self.interval_count += count
        micros = bucket_us(latency_s)
        self.histogram.add(micros, count)
        self.interval.add(micros, count)


RETRIABLE_SEND_ERROR = 8
"""Pulsar's ``send-error:8`` ("unknown error"): the producer or its topic closed under the message (an
unload, a failover) or the write failed. Its message is sent again; other refusals (3: a request that cannot
be read, 7: a bad payload) would fail again and are only counted."""


class PerfFailure(Exception):
    """Stops the run: something retrying cannot fix (the message says what, for the user)."""


RESEND_PAUSE_S = 0.2
"""A producer waits this long before sending again what the broker refused with a retriable error (the
close of its connection is usually on the way)."""


@dataclass
class SendProgress:
    """Messages one producer has sent; on a lost connection the unacknowledged ones are sent again, and so
    is a message refused with :data:`RETRIABLE_SEND_ERROR`. A producer whose messages are refused for
    ``give_up_after_s`` without any being acknowledged stops the run."""

    who: str
    window: int
    """The producer's ``--max-pending``."""
    give_up_after_s: float
    sent: int = 0
    refused_since: float | None = None
    """When the current run of refusals began (None: the last answer was an acknowledgement)."""
    resend_not_before: float = 0.0

    def rewind(self, unacknowledged: int, stats: Stats) -> None:
        self.sent -= unacknowledged
        stats.resent += unacknowledged

    def acknowledged(self) -> None:
        self.refused_since = None

    def refused(self, count: int, code: int, reason: str, stats: Stats) -> None:
        """``count`` messages refused with ``send-error:<code>``."""
        now = time.monotonic()
        stats.errors += count
        if self.refused_since is None:
            self.refused_since = now
        if code == RETRIABLE_SEND_ERROR:
            self.rewind(count, stats)
            self.resend_not_before = now + RESEND_PAUSE_S
        if now - self.refused_since > self.give_up_after_s:
            raise PerfFailure(
                f"{self.who}: messages refused for {now - self.refused_since:.1f} s without an "
                f"acknowledgement (--reconnect-timeout-s); last: send-error:{code} {reason}"
            )

    async def pause_before_resending(self) -> None:
        delay = self.resend_not_before - time.monotonic()
        if delay > 0:
            await trio.sleep(delay)


def _ms(value: float | None) -> str:
    return "-" if value is None else str(value)


def report_line(kind: str, stats: Stats, since: float) -> str:
    """The interval's line (and a new interval starts)."""
    elapsed = max(time.monotonic() - since, 1e-9)
    summary = stats.interval.summary()
    line = (
        f"{kind}: {stats.interval_count / elapsed:,.0f} msg/s | total {stats.count:,} | "
        f"errors {stats.errors} | latency ms p50 {_ms(summary['p50'])} p95 {_ms(summary['p95'])} "
        f"p99 {_ms(summary['p99'])} max {_ms(summary['max'])}"
    )
    stats.interval_count = 0
    stats.interval = Histogram()
    return line


def summary_line(kind: str, stats: Stats, extra: dict[str, Any]) -> str:
    """The run's closing JSON line (strict JSON: :func:`json.dumps` refuses a NaN that slipped in)."""
    elapsed = time.monotonic() - stats.started
    result = {
        "kind": kind,
        "messages": stats.count,
        "errors": stats.errors,
        "resent": stats.resent,
        "elapsed_s": round(elapsed, 3),
        "rate_msg_s": round(stats.count / elapsed, 1) if elapsed > 0 else 0.0,
        "latency_ms": stats.histogram.summary(),
        "max_gap_s": round(stats.max_gap_s, 3),
        **extra,
    }
    return json.dumps(result, allow_nan=False)

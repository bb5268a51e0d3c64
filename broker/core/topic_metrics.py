"""A topic's figures counted on the publish path: plain integers, no lock, no allocation per message.

The broker's ``/metrics`` (:mod:`magnetar.broker.metrics.broker_metrics`) reads them from the live topics when
scraped; the publish latency is the time from a request's arrival at the broker to its entry stored with the
ack quorum, counted per message in :data:`PUBLISH_LATENCY_BUCKETS_S`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from typing import Protocol

PUBLISH_LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0)
"""Upper bounds (seconds) of the cumulative histogram; they include every bound of Pulsar's write-latency
buckets, so those are sums of these."""


class StoredRequest(Protocol):
    """A request of an entry stored: when it arrived and how many messages it held."""

    @property
    def received_at(self) -> float: ...

    @property
    def messages(self) -> int: ...

    @property
    def payload_bytes(self) -> int: ...


class Period:
    """How a histogram's buckets grew during the last stats period (Pulsar's ``StatsBuckets.refresh``)."""

    __slots__ = ("counts", "previous", "previous_sum_s", "sum_s")

    def __init__(self, size: int) -> None:
        self.previous = [0] * size
        self.previous_sum_s = 0.0
        self.counts = [0] * size
        self.sum_s = 0.0

    def end(self, cumulative: Sequence[int], cumulative_sum_s: float) -> None:
        self.counts = [now - before for now, before in zip(cumulative, self.previous, strict=True)]
        self.sum_s = cumulative_sum_s - self.previous_sum_s
        self.previous = list(cumulative)
        self.previous_sum_s = cumulative_sum_s


class TopicMetrics:
    """Counters of one topic, updated without locks or allocation on the publish path."""

    __slots__ = (
        "_entries_before",
        "bytes_in",
        "entries_in",
        "entries_per_s",
        "entry_bytes_in",
        "latency_buckets",
        "latency_period",
        "latency_sum_s",
        "msg_in",
    )

    def __init__(self) -> None:
        self.msg_in = 0
        self.bytes_in = 0
        """Message payload bytes published (Pulsar's ``bytesInCounter``; ``bytesOutCounter`` counts the same
        kind of bytes, delivered)."""
        self.entry_bytes_in = 0
        """Bytes of the entries stored (payloads plus the entry format's metadata)."""
        self.entries_in = 0
        self.latency_buckets = [0] * (len(PUBLISH_LATENCY_BUCKETS_S) + 1)
        self.latency_sum_s = 0.0
        self.latency_period = Period(len(self.latency_buckets))
        """The latencies of the last stats period (what Pulsar's ``le_*`` gauges show)."""
        self.entries_per_s = 0.0
        self._entries_before = 0

    def on_entry_stored(self, requests: Iterable[StoredRequest], size_bytes: int, now: float) -> None:
        """An entry of ``size_bytes`` holding ``requests`` was stored at ``now`` (``trio.current_time()``)."""
        self.entries_in += 1
        self.entry_bytes_in += size_bytes
        buckets = self.latency_buckets
        total = 0.0
        count = 0
        payload_bytes = 0
        received_at = latency = math.nan
        bucket = 0
        for request in requests:
            if request.received_at != received_at:  # requests received together (one read) share a bucket
                received_at = request.received_at
                latency = now - received_at
                bucket = bisect.bisect_left(PUBLISH_LATENCY_BUCKETS_S, latency)
            messages = request.messages
            payload_bytes += request.payload_bytes
            count += messages
            total += latency * messages
            buckets[bucket] += messages
        self.bytes_in += payload_bytes
        self.msg_in += count
        self.latency_sum_s += total

    def end_period(self, period_s: float) -> None:
        """The end of a stats period of ``period_s`` seconds (> 0): the per-period figures."""
        self.entries_per_s = max(0, self.entries_in - self._entries_before) / period_s
        self._entries_before = self.entries_in
        self.latency_period.end(self.latency_buckets, self.latency_sum_s)

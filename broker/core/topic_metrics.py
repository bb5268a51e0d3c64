"""A topic's figures counted on the publish path: plain integers, no lock, no allocation per message.

The broker's ``/metrics`` (:mod:`magnetar.broker.metrics`) reads them from the live topics when scraped; the
publish latency is the time from a request's arrival at the broker to its entry stored with the ack quorum,
counted per message in :data:`PUBLISH_LATENCY_BUCKETS_S`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Protocol

PUBLISH_LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0)
"""Upper bounds (seconds), close to Pulsar's storage write latency buckets (0.5 ms ... 1 s, overflow)."""


class StoredRequest(Protocol):
    """A request of an entry stored: when it arrived and how many messages it held."""

    @property
    def received_at(self) -> float: ...

    @property
    def messages(self) -> int: ...


class TopicMetrics:
    """Counters of one topic, updated without locks or allocation on the publish path."""

    __slots__ = ("bytes_in", "entries_in", "latency_buckets", "latency_sum_s", "msg_in")

    def __init__(self) -> None:
        self.msg_in = 0
        self.bytes_in = 0
        self.entries_in = 0
        self.latency_buckets = [0] * (len(PUBLISH_LATENCY_BUCKETS_S) + 1)
        self.latency_sum_s = 0.0

    def on_entry_stored(self, requests: Iterable[StoredRequest], size_bytes: int, now: float) -> None:
        """An entry of ``size_bytes`` holding ``requests`` was stored at ``now`` (``trio.current_time()``)."""
        self.entries_in += 1
        self.bytes_in += size_bytes
        buckets = self.latency_buckets
        total = 0.0
        count = 0
        for request in requests:
            latency = now - request.received_at
            messages = request.messages
            count += messages
            total += latency * messages
            buckets[bisect.bisect_left(PUBLISH_LATENCY_BUCKETS_S, latency)] += messages
        self.msg_in += count
        self.latency_sum_s += total

"""A topic's publish figures: the latency histogram counts every message in its bucket, however many of an
entry's requests were received together (they share one bucket lookup)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.core.topic_metrics import PUBLISH_LATENCY_BUCKETS_S, TopicMetrics


@dataclass
class Request:
    received_at: float
    messages: int
    payload_bytes: int


requests = st.lists(
    st.builds(
        Request,
        received_at=st.sampled_from([0.0, 0.0004, 0.003, 0.003, 0.9, 4.99, 6.0]),
        messages=st.integers(1, 1000),
        payload_bytes=st.integers(0, 1 << 20),
    ),
    min_size=1,
    max_size=30,
)


@given(st.lists(requests, min_size=1, max_size=4))
def test_entries_count_each_message_in_its_latency_bucket(entries: list[list[Request]]) -> None:
    metrics = TopicMetrics()
    expected = [0] * (len(PUBLISH_LATENCY_BUCKETS_S) + 1)
    latency_sum = 0.0
    now = 6.0
    for entry in entries:
        metrics.on_entry_stored(entry, 100, now)
        for request in entry:
            latency = now - request.received_at
            expected[bisect.bisect_left(PUBLISH_LATENCY_BUCKETS_S, latency)] += request.messages
            latency_sum += latency * request.messages
    assert metrics.latency_buckets == expected
    assert abs(metrics.latency_sum_s - latency_sum) < 1e-6 * max(1.0, latency_sum)
    assert metrics.msg_in == sum(r.messages for entry in entries for r in entry)
    assert metrics.bytes_in == sum(r.payload_bytes for entry in entries for r in entry)
    assert (metrics.entries_in, metrics.entry_bytes_in) == (len(entries), 100 * len(entries))

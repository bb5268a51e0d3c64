"""The Prometheus text exposition of :mod:`magnetar.broker.metrics.exposition`: format, escaping,
per-namespace aggregation, gzip, and the bounds of each rendering step (a fake clock, no timing)."""

from __future__ import annotations

import gzip
import itertools
import math
from collections.abc import Iterator

import trio
from prometheus_client.parser import text_string_to_metric_families

from magnetar.broker.metrics.exposition import (
    Exposition,
    Family,
    FamilyRows,
    Kind,
    format_value,
    render_text,
)

LABELS = ("cluster", "namespace", "topic")
IN = Family("t_in_messages", Kind.COUNTER, "Messages published", LABELS)
SIZE = Family("t_storage_size", Kind.GAUGE, "Bytes stored\nin ledgers", LABELS)
SUBS = Family("t_back_log", Kind.GAUGE, "Backlog", (*LABELS, "subscription"))
LATENCY = Family("t_latency_seconds", Kind.HISTOGRAM, "Latency", LABELS, (0.1, 1.0))
OPEN = Family("t_open", Kind.GAUGE, "Open")


class Source:
    def __init__(self, topics: list[tuple[str, str]]) -> None:
        self.topics = topics  # (namespace, topic)

    def families(self) -> Iterator[FamilyRows]:
        rows = [(("c", ns, topic), float(i + 1)) for i, (ns, topic) in enumerate(self.topics)]
        yield IN, rows
        yield SIZE, [(labels, value * 10) for labels, value in rows]
        yield SUBS, [((*labels, sub), value) for labels, value in rows for sub in ("a", "b")]
        yield LATENCY, [(labels, [1, 2, 3], value) for labels, value in rows]
        yield OPEN, [((), len(self.topics))]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def test_the_text_parses_and_holds_every_row() -> None:
    source = Source(
        [("t/a", "persistent://t/a/x"), ("t/a", "persistent://t/a/y"), ("t/b", "persistent://t/b/z")]
    )
    got = samples(render_text([source]))
    x = {"cluster": "c", "namespace": "t/a", "topic": "persistent://t/a/x"}
    assert got[key("t_in_messages_total", **x)] == 1.0
    assert got[key("t_storage_size", **x)] == 10.0
    assert got[key("t_back_log", **x, subscription="b")] == 1.0
    assert got[key("t_latency_seconds_bucket", **x, le="0.1")] == 1.0
    assert got[key("t_latency_seconds_bucket", **x, le="1.0")] == 3.0
    assert got[key("t_latency_seconds_bucket", **x, le="+Inf")] == 6.0
    assert got[key("t_latency_seconds_count", **x)] == 6.0
    assert got[key("t_latency_seconds_sum", **x)] == 1.0
    assert got[key("t_open")] == 3.0


def test_label_values_are_escaped() -> None:
    odd = 'persistent://t/a/q"uote\\back\nslash'
    text = render_text([Source([("t/a", odd)])])
    got = samples(text)
    assert got[key("t_in_messages_total", cluster="c", namespace="t/a", topic=odd)] == 1.0
    assert "# HELP t_storage_size Bytes stored\\nin ledgers" in text


def test_aggregation_sums_per_namespace_and_drops_topic_labels() -> None:
    source = Source(
        [("t/a", "persistent://t/a/x"), ("t/a", "persistent://t/a/y"), ("t/b", "persistent://t/b/z")]
    )
    text = render_text([source], topic_level=False)
    assert "topic=" not in text
    assert "subscription=" not in text
    got = samples(text)
    a, b = {"cluster": "c", "namespace": "t/a"}, {"cluster": "c", "namespace": "t/b"}
    assert got[key("t_in_messages_total", **a)] == 1.0 + 2.0
    assert got[key("t_in_messages_total", **b)] == 3.0
    assert got[key("t_back_log", **a)] == 2 * (1.0 + 2.0)  # both subscriptions of both topics
    assert got[key("t_latency_seconds_bucket", **a, le="+Inf")] == 12.0
    assert got[key("t_latency_seconds_sum", **a)] == 3.0
    assert got[key("t_open")] == 3.0
    assert len(text.splitlines()) < len(render_text([source]).splitlines())


def test_values_are_written_as_prometheus_clients_write_them() -> None:
    assert [format_value(v) for v in (3, 0.25, math.inf, -math.inf, math.nan)] == [
        "3.0",
        "0.25",
        "+Inf",
        "-Inf",
        "NaN",
    ]


def collect(exposition: Exposition) -> list[bytes]:
    chunks: list[bytes] = []

    async def main() -> None:
        async for chunk in exposition:
            chunks.append(chunk)

    trio.run(main)
    return chunks


def test_the_exposition_comes_in_bounded_chunks_and_gzips() -> None:
    source = Source([(f"t/n{i % 7}", f"persistent://t/n{i % 7}/topic-{i}") for i in range(2000)])
    plain = collect(Exposition([source], chunk_bytes=4096))
    assert len(plain) > 50
    assert all(len(chunk) < 4096 + 2048 for chunk in plain)  # a chunk stops at the row that fills it
    assert b"".join(plain).decode() == render_text([source])
    zipped = collect(Exposition([source], gzip=True, chunk_bytes=4096))
    assert gzip.decompress(b"".join(zipped)) == b"".join(plain)


def test_each_step_stops_when_its_time_is_up() -> None:
    """A clock that advances 1 ms per reading and half a millisecond a step: a step formats one clock-read's
    worth of rows (32), however much room its chunk has left - aggregation included, where rows produce no
    text until the family's end."""
    source = Source([("t/a", f"persistent://t/a/topic-{i}") for i in range(1000)])
    rows = 1000 * 5 + 1  # five families of 1,000 rows (the subscriptions' 2,000) and one single row
    for topic_level in (True, False):
        readings = itertools.count()

        def clock(readings: Iterator[int] = readings) -> float:
            return next(readings) / 1000

        exposition = Exposition(
            [source],
            topic_level=topic_level,
            chunk_bytes=1 << 30,
            step_ms=0.5,
            clock=clock,
        )
        steps = 0
        while not exposition._done:
            exposition.step()
            steps += 1
        assert rows // 32 <= steps <= rows // 32 + 10

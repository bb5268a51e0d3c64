"""The bookies' prometheus_client metrics, re-rendered by the broker's streamed exposition, read back the same
samples as prometheus_client's own rendering (the standalone's ``/metrics`` carries them that way)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from magnetar.admin.processes.metrics import CollectorSource
from magnetar.bookkeeper.bookie.metrics import BookieMetrics, LabelledBookieMetrics
from magnetar.bookkeeper.protocol.status import BookieStatus
from magnetar.broker.exposition import render_text


def samples(text: str) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    return {
        (sample.name, tuple(sorted(sample.labels.items())), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


def test_counters_gauges_and_histograms_of_two_bookies_read_back_alike() -> None:
    first, second = BookieMetrics(), BookieMetrics()
    for seconds in (0.0002, 0.003, 0.003, 0.7, 20.0):
        first.request_done("add_entry", BookieStatus.EOK, seconds)
    second.request_done("read_entry", BookieStatus.ENOENTRY, 0.01)
    collector = LabelledBookieMetrics(lambda: [("b1:3181", first.registry), ("b2:3182", second.registry)])
    ours = render_text([CollectorSource(collector)])
    theirs = generate_latest(collector).decode()
    assert samples(ours) == samples(theirs)
    assert (
        "magnetar_bookie_requests_total",
        (("bookie", "b1:3181"), ("op", "add_entry"), ("status", "EOK")),
        5.0,
    ) in samples(ours)


def test_a_family_without_samples_is_still_declared() -> None:
    idle = BookieMetrics()
    text = render_text([CollectorSource(LabelledBookieMetrics(lambda: [("b1:3181", idle.registry)]))])
    assert "# TYPE magnetar_bookie_requests_total counter" in text

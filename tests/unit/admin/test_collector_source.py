"""The bookies' prometheus_client metrics, re-rendered by the broker's streamed exposition, read back the same
samples as prometheus_client's own rendering (the standalone's ``/metrics`` carries them that way); a
summary (BookKeeper's op-stats) comes back as gauges of the same sample names."""

from __future__ import annotations

import math

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from magnetar.admin.processes.metrics import CollectorSource
from magnetar.bookkeeper.bookie.metrics import BookieMetrics, LabelledBookieMetrics
from magnetar.bookkeeper.protocol.status import BookieStatus
from magnetar.broker.metrics.exposition import render_text


def samples(text: str) -> set[tuple[str, tuple[tuple[str, str], ...], float | str]]:
    """Every sample (NaN as the text ``NaN``: a quantile of an empty window, equal on both sides)."""
    return {
        (
            sample.name,
            tuple(sorted(sample.labels.items())),
            "NaN" if math.isnan(sample.value) else sample.value,
        )
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
        "bookkeeper_server_ADD_ENTRY_REQUEST_count",
        (("bookie", "b1:3181"), ("success", "true")),
        5.0,
    ) in samples(ours)
    assert (
        "bookkeeper_server_READ_ENTRY_REQUEST_count",
        (("bookie", "b2:3182"), ("success", "false")),
        1.0,
    ) in samples(ours)


def test_a_family_without_samples_is_still_declared() -> None:
    idle = BookieMetrics()
    text = render_text([CollectorSource(LabelledBookieMetrics(lambda: [("b1:3181", idle.registry)]))])
    assert "# TYPE magnetar_bookie_auth_failures_total counter" in text


def test_quantiles_cover_the_last_complete_minute() -> None:
    now = [0.0]
    metrics = BookieMetrics(clock=lambda: now[0])
    for _ in range(99):
        metrics.request_done("add_entry", BookieStatus.EOK, 0.0003)  # in (0.25 ms, 0.5 ms]
    metrics.request_done("add_entry", BookieStatus.EOK, 0.3)  # in (250 ms, 500 ms]

    def quantile(q: str) -> float:
        for name, labels, value in samples(metrics.render_metrics().decode()):
            wanted = (("quantile", q), ("success", "true"))
            if name == "bookkeeper_server_ADD_ENTRY_REQUEST" and labels == wanted:
                return float(value)
        raise AssertionError(q)

    assert math.isnan(quantile("0.5"))  # no minute has completed yet
    now[0] = 61.0
    assert 0.25 <= quantile("0.5") <= 0.5  # milliseconds, as BookKeeper reports them
    assert 250 <= quantile("1.0") <= 500
    now[0] = 122.0
    assert math.isnan(quantile("0.99"))  # the last minute was idle

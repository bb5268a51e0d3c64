"""``/metrics`` of a broker with many topics: rendered a little at a time, and summed per namespace on demand.

The audit measured 11.5 MB and 0.54 s per scrape with 3,000 topics, all of it one step of the event loop:
every publish and delivery waited for the scrape. Now each step of a scrape formats at most
``metrics_chunk_bytes`` of text (or ``metrics_step_ms`` of work, whichever comes first) and lets the other
tasks run. This test checks that as a property, not a duration: while a scrape of 1,000 topics is answered
complete and correct, the rows are read over at least as many task steps of the broker's loop as the text
holds chunks (counted by a :class:`~magnetar.bookkeeper.runtime.loop_monitor.LoopMonitor`), and another task
of that loop runs between them. How long a step takes is a benchmark's figure, not a test's:
``tests/bench/bench_metrics_scrape.py`` measures the longest step (recorded in ``tests/bench/RESULTS.md``).
With ``expose_topic_level_metrics_in_prometheus`` off, the figures are per namespace and the scrape's size no
longer depends on the number of topics.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio
from fixtures.admin import admin_extras
from fixtures.broker import Broker, Cluster
from prometheus_client.parser import text_string_to_metric_families

from magnetar.bookkeeper.runtime.loop_monitor import LoopMonitor
from magnetar.broker.metrics.exposition import FamilyRows, MetricsSource
from magnetar.broker.wire.topic_name import TopicName

TOPICS = 1000


@dataclass
class Interleaving:
    """What ran in the broker's loop while a scrape read its rows: the loop monitor's step count at each row
    read, and the ticks of a task that only yields (``ticker``) at the first and the last row."""

    monitor: LoopMonitor = field(default_factory=lambda: LoopMonitor(float("inf"), log_each=False))
    ticks: int = 0
    steps_reading: set[int] = field(default_factory=set)
    first_tick: int | None = None
    last_tick: int = 0
    stop: trio.Event = field(default_factory=trio.Event)

    async def ticker(self) -> None:
        while not self.stop.is_set():
            await trio.lowlevel.checkpoint()
            self.ticks += 1

    def read(self, rows: Iterable[Any]) -> Iterator[Any]:
        for row in rows:
            self.steps_reading.add(self.monitor.steps)  # the same value for every row of one task step
            if self.first_tick is None:
                self.first_tick = self.ticks
            self.last_tick = self.ticks
            yield row


@dataclass
class Observed:
    """A broker's metrics source, its rows read through :meth:`Interleaving.read`."""

    source: MetricsSource
    interleaving: Interleaving

    def families(self) -> Iterator[FamilyRows]:
        for family, rows in self.source.families():
            yield family, self.interleaving.read(rows)


async def load_topics(service: Any, count: int) -> None:
    limiter = trio.CapacityLimiter(50)

    async def load(index: int) -> None:
        async with limiter:
            namespace = "default" if index % 2 else "other"
            topic = await service.get_topic(TopicName.of("public", namespace, f"metered-{index:05d}"))
            await topic.get_or_create_subscription("sub", start_earliest=True)

    async with trio.open_nursery() as nursery:
        for index in range(count):
            nursery.start_soon(load, index)


async def create_namespace(service: Any) -> None:
    from magnetar.broker.policies.store import Policies

    await service.policies.create_namespace("public/other", Policies())


def start(cluster: Cluster, **settings: Any) -> Broker:
    broker = cluster.start_broker(extras=admin_extras, **settings)
    broker.call(create_namespace, broker.service)
    broker.call(load_topics, broker.service, TOPICS)
    return broker


@dataclass
class Scrape:
    text: str
    headers: httpx.Headers
    interleaving: Interleaving


def scrape(broker: Broker, encoding: str = "identity") -> Scrape:
    interleaving = Interleaving()
    metrics = broker.service.metrics
    sources = list(metrics.sources)

    async def observe() -> None:
        trio.lowlevel.add_instrument(interleaving.monitor)
        metrics.sources[:] = [Observed(source, interleaving) for source in sources]
        assert broker.cluster._nursery is not None
        broker.cluster._nursery.start_soon(interleaving.ticker)

    def restore() -> None:
        interleaving.stop.set()
        metrics.sources[:] = sources
        trio.lowlevel.remove_instrument(interleaving.monitor)

    broker.call(observe)
    try:
        with (
            httpx.Client(base_url=broker.http_url, timeout=60) as http,
            http.stream("GET", "/metrics", headers={"accept-encoding": encoding}) as response,
        ):
            assert response.status_code == 200
            raw = b"".join(response.iter_raw())
    finally:
        broker.call_sync(restore)
    text = gzip.decompress(raw) if response.headers.get("content-encoding") == "gzip" else raw
    return Scrape(text.decode(), response.headers, interleaving)


def values(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_a_scrape_of_many_topics_lets_the_loop_run_between_its_chunks(cluster: Cluster) -> None:
    broker = start(cluster)
    chunk_bytes = broker.settings.metrics_chunk_bytes
    for encoding in ("identity", "gzip"):
        scraped = scrape(broker, encoding)
        assert len(values(scraped.text, "pulsar_in_messages_total")) == TOPICS
        assert len(values(scraped.text, "pulsar_subscription_back_log")) == TOPICS
        assert scraped.headers["transfer-encoding"] == "chunked"
        assert scraped.headers.get("content-encoding", "identity") == encoding
        # A step stops once it holds metrics_chunk_bytes of text (sooner after metrics_step_ms): the rows
        # of a text of N chunks are read in at least N task steps, whatever the machine's speed or load.
        chunks = len(scraped.text.encode()) // chunk_bytes
        seen = scraped.interleaving
        steps = len(seen.steps_reading)
        assert chunks >= 10, f"a scrape of {TOPICS} topics is only {len(scraped.text)} bytes"
        assert steps >= chunks, (
            f"the rows of a {len(scraped.text)}-byte scrape ({encoding}) were read in {steps} task steps of "
            f"the broker's loop: fewer than the {chunks} chunks of metrics_chunk_bytes={chunk_bytes} it holds"
        )
        # trio runs every runnable task once per batch: a task that only yields ran in every batch between
        # the first and the last reading step
        assert seen.first_tick is not None
        ticked = seen.last_tick - seen.first_tick
        assert ticked >= steps - 2, (
            f"another task of the loop ran {ticked} times while the scrape ({encoding}) read its rows in "
            f"{steps} steps"
        )


def test_topic_level_metrics_off_sums_per_namespace(cluster: Cluster) -> None:
    broker = start(cluster, expose_topic_level_metrics_in_prometheus=False)
    text = scrape(broker).text
    assert "topic=" not in text
    assert "subscription=" not in text
    subscriptions = values(text, "pulsar_subscriptions_count")
    assert subscriptions == {
        (("cluster", "standalone"), ("namespace", "")): 0,  # Pulsar's cluster-only row (empty = absent)
        (("cluster", "standalone"), ("namespace", "public/default")): TOPICS / 2,
        (("cluster", "standalone"), ("namespace", "public/other")): TOPICS / 2,
    }
    backlog = values(text, "pulsar_msg_backlog")
    assert (
        backlog[(("cluster", "standalone"), ("namespace", "public/default"), ("remote_cluster", "local"))]
        >= 0
    )
    assert sum(values(text, "magnetar_ml_ledgers").values()) == TOPICS  # one ledger each
    assert values(text, "pulsar_broker_topics_count") == {(("cluster", "standalone"),): TOPICS}
    assert values(text, "pulsar_topics_count")[
        (("cluster", "standalone"), ("namespace", "public/other"))
    ] == (TOPICS / 2)
    # Per namespace the size does not grow with the topics: about 22 kB of family headers, zero rows,
    # namespace rows and the broker-wide figures (the metadata-outage ones included), against megabytes
    # at topic level.
    assert len(text) < 25_000

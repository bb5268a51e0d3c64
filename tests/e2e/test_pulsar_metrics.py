"""A broker's ``/metrics`` under Pulsar's names, labels and meanings, as Pulsar's dashboards query them.

A real broker (in-process bookies, write quorum 2) with a short stats period; WebSocket producers and
consumers as users run them. Checked: the names and label sets Pulsar writes (``cluster``, ``namespace``,
``topic``, ``subscription``), every family typed ``gauge`` as Pulsar types them, the counters' values, the
rates per second over the stats period, the storage size counting replicas, the write-latency buckets of the
last period, and the per-namespace form with topic-level metrics off.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import websocket
from fixtures.admin import admin_extras
from fixtures.broker import Broker, Cluster, publish, publish_many, receive
from prometheus_client.parser import text_string_to_metric_families

Connect = Callable[..., websocket.WebSocket]
NS = "persistent/public/default"
TOPIC = {"cluster": "standalone", "namespace": "public/default", "topic": "persistent://public/default/m"}


def scrape(broker: Broker) -> tuple[dict[tuple[str, tuple[tuple[str, str], ...]], float], dict[str, str]]:
    text = httpx.get(f"{broker.http_url}/metrics", timeout=30).text
    samples = {}
    types = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
    return samples, types


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_topic_and_subscription_metrics_have_pulsars_names(cluster: Cluster, ws_connect: Connect) -> None:
    broker = cluster.start_broker(
        extras=admin_extras, stats_update_interval_s=0.5, write_quorum=2, ack_quorum=2, ensemble_size=2
    )
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/m")
    consumer = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{NS}/m/sub")
    for i in range(20):  # one at a time: one entry each (backlogs count entries until messages are indexed)
        assert publish(producer, f"message-{i}")["result"] == "ok"
    received = receive(consumer, 5)  # acknowledges 5 of the 20
    assert len(received) == 5
    payload_bytes = sum(len(f"message-{i}") for i in range(20))

    def backlog_settled() -> bool:
        samples, _ = scrape(broker)
        return value(samples, "pulsar_subscription_back_log", **TOPIC, subscription="sub") == 15

    wait_for(backlog_settled, "the acknowledgements")

    samples, types = scrape(broker)
    assert value(samples, "pulsar_in_messages_total", **TOPIC) == 20
    assert value(samples, "pulsar_in_bytes_total", **TOPIC) >= payload_bytes  # stored bytes, metadata too
    assert value(samples, "pulsar_out_messages_total", **TOPIC, subscription="sub") >= 5
    assert value(samples, "pulsar_msg_backlog", **TOPIC) == 15
    assert value(samples, "pulsar_subscriptions_count", **TOPIC) == 1
    assert value(samples, "pulsar_producers_count", **TOPIC) == 1
    assert value(samples, "pulsar_consumers_count", **TOPIC) == 1
    assert value(samples, "pulsar_subscription_consumers_count", **TOPIC, subscription="sub") == 1
    logical = value(samples, "pulsar_storage_logical_size", **TOPIC)
    assert logical > 0
    assert value(samples, "pulsar_storage_size", **TOPIC) == 2 * logical  # two replicas
    assert value(samples, "pulsar_storage_backlog_size", **TOPIC) > 0
    assert value(samples, "pulsar_topics_count", cluster="standalone", namespace="public/default") == 1
    assert value(samples, "pulsar_broker_topics_count", cluster="standalone") == 1
    assert value(samples, "pulsar_broker_msg_backlog", cluster="standalone") == 15
    # Pulsar's cluster-only rows with 0 (empty labels are absent labels for Prometheus)
    assert value(samples, "pulsar_rate_in", cluster="standalone", namespace="", topic="") == 0
    for name in ("pulsar_in_messages_total", "pulsar_rate_in", "pulsar_subscription_back_log",
                 "pulsar_storage_write_latency_le_1", "pulsar_out_bytes_total"):  # fmt: skip
        assert types[name] == "gauge", name

    # Rates: per second over the last stats period; the publishes fell into one period.
    def period_counted() -> bool:
        current, _ = scrape(broker)
        return value(current, "pulsar_storage_write_latency_count", **TOPIC) > 0

    wait_for(period_counted, "a stats period holding the publishes")
    samples, _ = scrape(broker)
    entries = value(samples, "pulsar_storage_write_latency_count", **TOPIC)
    buckets = [
        value(samples, f"pulsar_storage_write_latency_le_{suffix}", **TOPIC)
        for suffix in ("0_5", "1", "5", "10", "20", "50", "100", "200", "1000")
    ] + [value(samples, "pulsar_storage_write_latency_overflow", **TOPIC)]
    assert sum(buckets) == entries  # each bucket counts its own range, as Pulsar's StatsBuckets
    assert value(samples, "pulsar_storage_write_latency_sum", **TOPIC) > 0  # microseconds
    assert value(samples, "pulsar_rate_in", **TOPIC) > 0
    assert value(samples, "pulsar_throughput_in", **TOPIC) > 0
    assert value(samples, "pulsar_storage_write_rate", **TOPIC) > 0
    producer.close()
    consumer.close()


def test_namespace_form_when_topic_level_metrics_are_off(cluster: Cluster, ws_connect: Connect) -> None:
    broker = cluster.start_broker(extras=admin_extras, expose_topic_level_metrics_in_prometheus=False)
    for topic in ("a", "b"):
        producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/{topic}")
        consumer = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{NS}/{topic}/sub")
        publish_many(producer, ["x", "y", "z"])
        producer.close()
        consumer.close()
    samples, _ = scrape(broker)
    namespace = {"cluster": "standalone", "namespace": "public/default"}
    assert value(samples, "pulsar_in_messages_total", **namespace) == 6
    assert value(samples, "pulsar_topics_count", **namespace) == 2
    assert value(samples, "pulsar_subscriptions_count", **namespace) == 2
    assert value(samples, "pulsar_msg_backlog", **namespace, remote_cluster="local") >= 0
    assert "pulsar_out_messages_total" in {name for name, _ in samples}
    assert not any(name.startswith("pulsar_subscription_") for name, _ in samples)
    assert not any(dict(labels).get("topic") for _, labels in samples)

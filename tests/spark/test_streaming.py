"""The ``magnetar`` source in a real local SparkSession against a broker on port 0."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fixtures.broker import Broker
from fixtures.spark import Produced, create_partitioned, cursors, pin, produce, rows_of_table, truncate
from pyspark.errors import StreamingQueryException

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TOPIC = "persistent://public/default/orders"
QUERY_TIMEOUT_S = 120


def stream(spark: Any, broker: Broker, **options: str) -> Any:
    reader = spark.readStream.format("magnetar").option("serviceUrl", broker.http_url)
    return reader.options(**{"topic": TOPIC, **options}).load()


def run_to_parquet(spark: Any, broker: Broker, tmp: Path, **options: str) -> list[dict[str, Any]]:
    """One ``availableNow`` run into ``tmp/out`` (checkpoint in ``tmp/checkpoint``); its progress reports."""
    query = (
        stream(spark, broker, **options)
        .writeStream.format("parquet")
        .option("path", str(tmp / "out"))
        .option("checkpointLocation", str(tmp / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the query did not finish"
    return [p for p in query.recentProgress if p["numInputRows"]]


def parquet_rows(spark: Any, path: Path) -> list[Produced]:
    return sorted(rows_of_table(spark.read.parquet(str(path)).toArrow()), key=order)


def order(row: Produced) -> tuple[str, int, int, int, bytes]:
    return row.topic, row.partition, row.ledger_id, row.entry_id, row.message_id


def test_available_now_reads_everything_and_a_restart_reads_exactly_the_new(
    spark: Any, spark_broker: Broker, tmp_path: Path
) -> None:
    create_partitioned(spark_broker, TOPIC, 4)
    produced = []
    for partition in range(4):
        # Without a subscription, retention trims every closed ledger at once.
        pin(spark_broker, f"{TOPIC}-partition-{partition}")
        produced += produce(spark_broker, f"{TOPIC}-partition-{partition}", 25_000, batch=40)
    options = {"startingOffsets": "earliest", "subscriptionPrefix": "e2e"}
    progress = run_to_parquet(spark, spark_broker, tmp_path, **options)
    assert sum(p["numInputRows"] for p in progress) == 100_000
    assert parquet_rows(spark, tmp_path / "out") == sorted(produced, key=order)

    more = []
    for partition in range(4):
        more += produce(
            spark_broker, f"{TOPIC}-partition-{partition}", 500, label="more", first=25_000, batch=40
        )
    progress = run_to_parquet(spark, spark_broker, tmp_path, **options)
    assert sum(p["numInputRows"] for p in progress) == 2_000
    assert parquet_rows(spark, tmp_path / "out") == sorted(produced + more, key=order)
    assert "e2e-orders-partition-0" in cursors(spark_broker, f"{TOPIC}-partition-0")  # a given prefix stays


def test_max_entries_per_trigger_splits_the_backlog(spark: Any, spark_broker: Broker) -> None:
    create_partitioned(spark_broker, TOPIC, 2)
    produced = produce(spark_broker, f"{TOPIC}-partition-0", 1500, batch=1)
    produced += produce(spark_broker, f"{TOPIC}-partition-1", 900, batch=1)
    query = (
        stream(spark, spark_broker, startingOffsets="earliest", maxEntriesPerTrigger="1000")
        .writeStream.format("memory")
        .queryName("limited")
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [1000, 1000, 400]
    rows = rows_of_table(spark.sql("select * from limited").toArrow())
    assert sorted(rows, key=order) == sorted(produced, key=order)


def test_retention_keeps_what_the_query_has_not_read_and_fail_on_data_loss(
    spark: Any, spark_broker: Broker, tmp_path: Path
) -> None:
    options = {"startingOffsets": "earliest", "subscriptionPrefix": "guard"}
    first = produce(spark_broker, TOPIC, 1000, batch=1)
    run_to_parquet(spark, spark_broker, tmp_path, **options)
    # Unread data fills closed ledgers; a truncate (every closed ledger below the slowest cursor) keeps them.
    unread = produce(spark_broker, TOPIC, 5000, batch=1, label="unread", first=1000)
    truncate(spark_broker, TOPIC)
    progress = run_to_parquet(spark, spark_broker, tmp_path, **options)
    assert sum(p["numInputRows"] for p in progress) == 5000
    assert parquet_rows(spark, tmp_path / "out") == first + unread

    # Without the subscription nothing protects the next messages: truncated before the query runs again.
    spark_broker_delete(spark_broker, "guard-orders")
    lost = produce(spark_broker, TOPIC, 5000, batch=1, label="lost", first=6000)
    truncate(spark_broker, TOPIC)
    with pytest.raises(StreamingQueryException, match=r"magnetar: data loss: .*orders: ledger"):
        run_to_parquet(spark, spark_broker, tmp_path, **options)
    progress = run_to_parquet(spark, spark_broker, tmp_path, **options, failOnDataLoss="false")
    kept = [r for r in lost if r.ledger_id == lost[-1].ledger_id]
    assert 0 < len(kept) < len(lost)
    assert sum(p["numInputRows"] for p in progress) == len(kept)
    assert parquet_rows(spark, tmp_path / "out") == first + unread + kept


def spark_broker_delete(broker: Broker, subscription: str) -> None:
    url = f"{broker.http_url}/admin/v2/persistent/public/default/orders/subscription/{subscription}"
    assert httpx.delete(url).status_code == 204


def test_processing_time_trigger(spark: Any, spark_broker: Broker) -> None:
    produce(spark_broker, TOPIC, 10)
    query = (
        stream(spark, spark_broker)  # default start: latest
        .writeStream.format("memory")
        .queryName("ticking")
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        produced = produce(spark_broker, TOPIC, 300, first=10)
        query.processAllAvailable()
        produced += produce(spark_broker, TOPIC, 200, first=310)
        query.processAllAvailable()
        rows = rows_of_table(spark.sql("select * from ticking").toArrow())
        assert sorted(rows, key=order) == produced
    finally:
        query.stop()


def test_batch_read_of_a_range(spark: Any, spark_broker: Broker) -> None:
    pin(spark_broker, TOPIC)
    produced = produce(spark_broker, TOPIC, 5000, batch=1)
    ledgers = sorted({r.ledger_id for r in produced})
    start = {TOPIC: {"ledgerId": ledgers[0], "entryId": 999}}
    end = {TOPIC: {"ledgerId": ledgers[1], "entryId": 1499}}
    df = (
        spark.read.format("magnetar")
        .option("serviceUrl", spark_broker.http_url)
        .option("topic", TOPIC)
        .option("startingOffsets", json.dumps(start))
        .option("endingOffsets", json.dumps(end))
        .option("maxEntriesPerPartition", "600")
        .load()
    )
    assert df.rdd.getNumPartitions() == 5  # 1000 + 1500 entries in splits of 600 (one crosses a ledger)
    rows = sorted(rows_of_table(df.toArrow()), key=order)
    assert rows == produced[1000:3500]
    assert df.groupBy("producerName").count().count() == 3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topicz": "x"}, "unknown option 'topicz'"),
        ({"startingOffsets": "{nope"}, "option 'startingOffsets': expected earliest, latest or JSON"),
        ({"topic": "missing"}, "topic persistent://public/default/missing does not exist"),
        ({"serviceUrl": "http://127.0.0.1:1"}, "option 'serviceUrl': cannot reach the broker"),
    ],
)
def test_bad_input_fails_at_load(
    spark: Any, spark_broker: Broker, options: dict[str, str], message: str
) -> None:
    produce(spark_broker, TOPIC, 1)
    with pytest.raises(Exception, match="PYTHON_DATA_SOURCE_ERROR") as raised:
        stream(spark, spark_broker, **options)
    assert message in str(raised.value)
    assert "at org.apache.spark" not in str(raised.value)  # no Java stack trace


def test_stream_only_errors_fail_at_start(spark: Any, spark_broker: Broker) -> None:
    produce(spark_broker, TOPIC, 1)
    query = stream(spark, spark_broker, endingOffsets="latest").writeStream.format("noop").start()
    with pytest.raises(StreamingQueryException, match="'endingOffsets' is not valid in streaming queries"):
        query.awaitTermination(QUERY_TIMEOUT_S)


def test_readme_pipeline_aggregates_per_key_into_parquet(
    spark: Any, spark_broker: Broker, tmp_path: Path
) -> None:
    """The README's example (with ``availableNow`` instead of a processing-time trigger)."""
    from pyspark.sql import functions as F

    produced = produce(spark_broker, TOPIC, 3000)
    orders = stream(spark, spark_broker, startingOffsets="earliest", maxEntriesPerTrigger="500")
    out = tmp_path / "orders-per-key"

    def counts_per_key(batch: Any, batch_id: int) -> None:
        (
            batch.groupBy(F.col("key").cast("string").alias("key"))
            .agg(
                F.count("*").alias("messages"),
                F.sum(F.length("value")).alias("bytes"),
                F.max("publishTime").alias("lastPublishTime"),
            )
            .write.mode("overwrite")
            .parquet(str(out / f"batch={batch_id}"))
        )

    query = (
        orders.writeStream.foreachBatch(counts_per_key)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    totals = spark.read.parquet(str(out)).groupBy("key").agg(F.sum("messages"), F.sum("bytes")).collect()
    expected: dict[str | None, list[int]] = {}
    for row in produced:
        key = None if row.key is None else row.key.decode()
        counts = expected.setdefault(key, [0, 0])
        counts[0] += 1
        counts[1] += len(row.value)
    assert {r[0]: [r[1], r[2]] for r in totals} == expected
    assert spark.read.parquet(str(out)).select("batch").distinct().count() > 1

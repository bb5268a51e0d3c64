"""The stream and batch readers driven by hand against a real broker, as the Spark engine drives them:
PySpark >= 4.2 (``latestOffset(start, limit)``, ``availableNow``) and 4.0/4.1 (``latestOffset()``), the
subscriptions that protect unread data, data-loss detection, redirects, and errors at ``load()``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from fixtures.admin import admin_extras
from fixtures.broker import Broker, Cluster
from fixtures.spark import Produced, create_partitioned, cursors, ledger_ids, pin, produce, row_of, truncate

from magnetar.admin.spark import MagnetarDataSource, MagnetarStreamReader
from magnetar.admin.spark.client import AdminClient, MagnetarSourceError, close_shared_clients
from magnetar.admin.spark.compat import ReadAllAvailable, ReadMaxRows
from magnetar.admin.spark.options import MagnetarOptionError
from magnetar.admin.spark.reading import DataLossError, RangePartition
from magnetar.admin.spark.rows import spark_schema
from magnetar.broker.wire.topic_name import parse_topic_name

ORDERS = "persistent://public/default/orders"


def source(broker: Broker, **options: str) -> MagnetarDataSource:
    return MagnetarDataSource({"serviceUrl": broker.http_url, "topic": ORDERS, **options})


def stream(broker: Broker, **options: str) -> MagnetarStreamReader:
    reader = source(broker, **options).streamReader(spark_schema())
    assert isinstance(reader, MagnetarStreamReader)
    return reader


def read_all(reader: Any, parts: Sequence[Any]) -> list[Produced]:
    return [row_of(row) for part in parts for batch in reader.read(part) for row in batch.to_pylist()]


def key(row: Produced) -> tuple[int, int, bytes]:
    return row.ledger_id, row.entry_id, row.message_id


def test_stream_batches_protect_and_release_data(spark_broker: Broker) -> None:
    create_partitioned(spark_broker, ORDERS, 2)
    reader = stream(
        spark_broker, startingOffsets="earliest", maxEntriesPerTrigger="1000", maxEntriesPerPartition="700"
    )
    start = reader.initialOffset()
    assert start == {f"{ORDERS}-partition-{i}": {"entryId": -1, "ledgerId": -1} for i in range(2)}
    subscription = f"{reader.prefix}-orders-partition-0"
    assert subscription in cursors(spark_broker, f"{ORDERS}-partition-0")  # created before any data
    produced = produce(spark_broker, f"{ORDERS}-partition-0", 5000, batch=3) + produce(
        spark_broker, f"{ORDERS}-partition-1", 50
    )
    entries = {p: len({(r.ledger_id, r.entry_id) for r in produced if r.partition == p}) for p in (0, 1)}
    assert entries[0] > 2000  # crosses a ledger boundary

    rows: list[Produced] = []
    batches = 0
    while True:
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        if end == start:
            break
        parts = reader.partitions(start, end)
        assert all(isinstance(p, RangePartition) and p.entries <= 700 for p in parts)
        assert sum(p.entries for p in parts) <= 1000
        rows += read_all(reader, parts)
        reader.commit(start)  # Spark commits one batch late
        start, batches = end, batches + 1
    assert batches == -(-(entries[0] + entries[1]) // 1000)
    assert sorted(rows, key=key) == sorted(produced, key=key)

    reader.commit(start)
    last = max((r.ledger_id, r.entry_id) for r in produced if r.partition == 0)
    assert cursors(spark_broker, f"{ORDERS}-partition-0")[subscription] == f"{last[0]}:{last[1]}"
    reader.stop()  # a generated prefix: the subscriptions go with the query
    assert subscription not in cursors(spark_broker, f"{ORDERS}-partition-0")


def test_a_given_prefix_keeps_its_subscription_and_resumes(spark_broker: Broker) -> None:
    produce(spark_broker, ORDERS, 100)
    first = stream(spark_broker, subscriptionPrefix="q1")  # default start: latest
    start = first.initialOffset()
    later = produce(spark_broker, ORDERS, 10, first=100)
    end = first.latestOffset(start, ReadAllAvailable())
    assert sorted(read_all(first, first.partitions(start, end)), key=key) == later
    first.commit(end)
    first.stop()
    assert cursors(spark_broker, ORDERS)["q1-orders"] == f"{later[-1].ledger_id}:{later[-1].entry_id}"

    again = stream(spark_broker, subscriptionPrefix="q1")  # a restart: Spark passes the checkpointed offset
    more = produce(spark_broker, ORDERS, 5, first=110)
    following = again.latestOffset(end, ReadAllAvailable())
    assert read_all(again, again.partitions(end, following)) == more


def test_pyspark_4_0_calls_latest_offset_without_start_or_limit(spark_broker: Broker) -> None:
    produced = produce(spark_broker, ORDERS, 250, batch=1)
    reader = stream(spark_broker, startingOffsets="earliest", maxEntriesPerTrigger="100")
    start = reader.initialOffset()
    ends = []
    for _ in range(4):
        end = reader.latestOffset()  # what PySpark 4.0/4.1 call, then partitions(start, end)
        ends.append(end[ORDERS])
        assert (
            sum(p.entries for p in reader.partitions(start, end))
            == end[ORDERS]["entryId"] - start[ORDERS]["entryId"]
        )
        start = end
    assert [e["entryId"] for e in ends] == [99, 199, 249, 249]
    # After a restart the engine of those versions gives no start: the first batch reads all there is.
    restarted = stream(spark_broker, startingOffsets="earliest", maxEntriesPerTrigger="10")
    assert restarted.latestOffset()[ORDERS]["entryId"] == produced[-1].entry_id
    assert restarted.latestOffset()[ORDERS]["entryId"] == produced[-1].entry_id


def test_available_now_stops_at_the_target(spark_broker: Broker) -> None:
    produce(spark_broker, ORDERS, 30, batch=1)
    reader = stream(spark_broker, startingOffsets="earliest", maxEntriesPerTrigger="20")
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    produce(spark_broker, ORDERS, 30, batch=1, first=30)
    first = reader.latestOffset(start, ReadMaxRows(20))
    second = reader.latestOffset(first, ReadMaxRows(20))
    assert (first[ORDERS]["entryId"], second[ORDERS]["entryId"]) == (19, 29)
    assert reader.latestOffset(second, ReadMaxRows(20)) == second  # done: nothing past the target
    assert reader.latestOffset(second, ReadAllAvailable()) == second


def test_data_loss_at_planning_fails_or_skips(spark_broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    produced = produce(spark_broker, ORDERS, 1500, batch=1)
    reader = stream(spark_broker, startingOffsets="earliest", subscriptionPrefix="q")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert len(read_all(reader, reader.partitions(start, end))) == 1500
    # The operator deletes the query's subscription, more data arrives and is truncated before it is read.
    httpx.delete(f"{spark_broker.http_url}/admin/v2/persistent/public/default/orders/subscription/q-orders")
    later = produce(spark_broker, ORDERS, 3000, batch=1, first=1500)
    truncate(spark_broker, ORDERS)
    assert produced[0].ledger_id not in ledger_ids(spark_broker, ORDERS)
    restarted = stream(spark_broker, subscriptionPrefix="q")
    following = restarted.latestOffset(end, ReadAllAvailable())
    with pytest.raises(
        DataLossError, match=r"orders: ledger \d+ holding the last consumed entry .* was deleted"
    ):
        restarted.partitions(end, following)

    lenient = stream(spark_broker, subscriptionPrefix="q", failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="magnetar.spark"):
        rows = read_all(lenient, lenient.partitions(end, lenient.latestOffset(end, ReadAllAvailable())))
    assert "data loss" in caplog.text
    stored = set(ledger_ids(spark_broker, ORDERS))
    assert rows == [r for r in later if r.ledger_id in stored]
    assert 0 < len(rows) < len(later)


def test_a_deleted_topic_fails_the_query_or_is_skipped(
    spark_broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    produce(spark_broker, ORDERS, 5)
    strict, lenient = stream(spark_broker), stream(spark_broker, failOnDataLoss="false")
    starts = strict.initialOffset(), lenient.initialOffset()
    topic_url = f"{spark_broker.http_url}/admin/v2/persistent/public/default/orders"
    assert httpx.delete(topic_url, params={"force": "true"}).status_code == 204
    with pytest.raises(DataLossError, match="persistent://public/default/orders was deleted"):
        strict.latestOffset(starts[0], ReadAllAvailable())
    with caplog.at_level(logging.WARNING, logger="magnetar.spark"):
        assert lenient.latestOffset(starts[1], ReadAllAvailable()) == starts[1]
    assert "was deleted" in caplog.text
    assert httpx.get(f"{topic_url}/internalStats").status_code == 404  # not re-created by the query


def test_data_loss_at_reading_fails_or_skips(spark_broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    pinned = pin(spark_broker, ORDERS)  # keeps the ledgers until the plan is made
    produce(spark_broker, ORDERS, 4500, batch=1)
    batch = source(spark_broker).reader(spark_schema())
    parts = batch.partitions()
    assert httpx.delete(pinned).status_code == 204
    truncate(spark_broker, ORDERS)  # no subscription left: the two closed ledgers go after planning
    with pytest.raises(DataLossError, match="were planned but are no longer stored"):
        read_all(batch, parts)
    lenient = source(spark_broker, failOnDataLoss="false").reader(spark_schema())
    with caplog.at_level(logging.WARNING, logger="magnetar.spark"):
        assert len(read_all(lenient, parts)) == 500
    assert "are no longer stored; skipped" in caplog.text


def test_batch_reads_a_range_split_by_ledger(spark_broker: Broker) -> None:
    pin(spark_broker, ORDERS)
    produced = produce(spark_broker, ORDERS, 5000, batch=1)
    ledgers = sorted({r.ledger_id for r in produced})
    start, end = {"ledgerId": ledgers[0], "entryId": 1499}, {"ledgerId": ledgers[2], "entryId": 99}
    reader = source(
        spark_broker,
        startingOffsets=f'{{"{ORDERS}": {json_of(start)}}}',
        endingOffsets=f'{{"{ORDERS}": {json_of(end)}}}',
        maxEntriesPerPartition="400",
    ).reader(spark_schema())
    parts = reader.partitions()
    assert [[(s.ledger_id, s.first_entry, s.last_entry) for s in p.segments] for p in parts] == [
        [(ledgers[0], 1500, 1899)],
        [(ledgers[0], 1900, 1999), (ledgers[1], 0, 299)],
        [(ledgers[1], 300, 699)],
        [(ledgers[1], 700, 1099)],
        [(ledgers[1], 1100, 1499)],
        [(ledgers[1], 1500, 1899)],
        [(ledgers[1], 1900, 1999), (ledgers[2], 0, 99)],
    ]
    assert read_all(reader, parts) == produced[1500 : 2000 + 2000 + 100]


def json_of(position: dict[str, int]) -> str:
    return f'{{"ledgerId": {position["ledgerId"]}, "entryId": {position["entryId"]}}}'


def test_topics_pattern_and_new_partitions(spark_broker: Broker) -> None:
    create_partitioned(spark_broker, "persistent://public/default/sales-eu", 2)
    produce(spark_broker, "persistent://public/default/sales-us", 5)
    produce(spark_broker, "persistent://public/default/other", 5)
    reader = MagnetarDataSource({
        "serviceUrl": spark_broker.http_url,
        "topicsPattern": r"persistent://public/default/sales-.*",
        "startingOffsets": "earliest",
    }).streamReader(spark_schema())  # fmt: skip
    start = reader.initialOffset()
    assert sorted(start) == [
        "persistent://public/default/sales-eu-partition-0",
        "persistent://public/default/sales-eu-partition-1",
        "persistent://public/default/sales-us",
    ]
    produce(spark_broker, "persistent://public/default/sales-asia", 3)
    end = reader.latestOffset(start, ReadAllAvailable())
    rows = read_all(reader, reader.partitions(start, end))
    assert sorted({(r.topic, r.partition) for r in rows}) == [
        ("persistent://public/default/sales-asia", -1),
        ("persistent://public/default/sales-us", -1),
    ]
    assert len(rows) == 8


def test_reads_follow_the_redirect_to_the_owner() -> None:
    cluster = Cluster()
    cluster.start()
    try:
        owner = cluster.start_broker(extras=admin_extras)
        other = cluster.start_broker(extras=admin_extras)
        produced = produce(owner, ORDERS, 20)
        assert (
            httpx.get(f"{other.http_url}/admin/v2/persistent/public/default/orders/lastMessageId").status_code
            == 307
        )
        reader = source(other, startingOffsets="earliest").streamReader(spark_schema())
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert read_all(reader, reader.partitions(start, end)) == produced
        reader.commit(end)
        assert (
            cursors(owner, ORDERS)[f"{reader.prefix}-orders"]
            == f"{produced[-1].ledger_id}:{produced[-1].entry_id}"
        )
    finally:
        close_shared_clients()
        cluster.stop()


def test_bad_input_is_reported_at_load(spark_broker: Broker) -> None:
    with pytest.raises(
        MagnetarSourceError, match="magnetar: topic persistent://public/default/missing does not exist"
    ):
        source(spark_broker, topic="missing").schema()
    with pytest.raises(
        MagnetarSourceError, match=r"option 'serviceUrl': cannot reach the broker at http://127\.0\.0\.1:1"
    ):
        MagnetarDataSource({"serviceUrl": "http://127.0.0.1:1", "topic": "x"}).schema()
    with pytest.raises(MagnetarOptionError, match="unknown option 'topicz'"):
        MagnetarDataSource({"serviceUrl": spark_broker.http_url, "topicz": "x"}).schema()
    produce(spark_broker, ORDERS, 3)
    assert source(spark_broker).schema() == spark_schema()
    with pytest.raises(
        MagnetarOptionError, match="names persistent://public/default/elsewhere, which is not a partition"
    ):
        source(spark_broker, startingOffsets='{"elsewhere": "latest"}').streamReader(
            spark_schema()
        ).initialOffset()
    with pytest.raises(
        MagnetarOptionError, match=r"option 'startingOffsets': offset 0:99 of .* is past its last entry"
    ):
        source(spark_broker, startingOffsets=f'{{"{ORDERS}": [0, 99]}}').streamReader(
            spark_schema()
        ).initialOffset()
    with pytest.raises(MagnetarOptionError, match="'endingOffsets' is not valid in streaming queries"):
        source(spark_broker, endingOffsets="latest").streamReader(spark_schema())


def test_client_reuses_its_connection(spark_broker: Broker) -> None:
    produce(spark_broker, ORDERS, 3)
    client = AdminClient(spark_broker.http_url, 10)
    try:
        for _ in range(3):
            assert client.partitions(parse_topic_name(ORDERS)) == 0
        assert len(client._connections) == 1
    finally:
        client.close()

"""Partitioned topics, readers, end of topic, lookup, proxied sessions, ownership loss, health and metrics."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Callable

import httpx
import trio
import websocket
from fixtures.broker import Broker, Cluster, publish_many, receive, recv_json, send_json, unb64

from magnetar.broker.wire.message_id import MessageId
from magnetar.broker.wire.topic_name import parse_topic_name

Connect = Callable[..., websocket.WebSocket]
NS = "persistent/public/default"


def texts(messages: list[dict[str, object]]) -> list[str]:
    return [unb64(str(m["payload"])).decode() for m in messages]


def make_partitioned(broker: Broker, name: str, partitions: int) -> None:
    broker.call(broker.service.policies.create_partitioned, "public/default", name, partitions)


def test_partitioned_topic_routes_by_key_and_consumes_from_every_partition(
    broker: Broker, ws_connect: Connect
) -> None:
    make_partitioned(broker, "parts", 3)
    consumer = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{NS}/parts/sub?subscriptionType=Shared")
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/parts")
    for i in range(30):
        send_json(producer, {"payload": "eA==", "key": f"k{i % 5}", "context": str(i)})
    acks = [recv_json(producer) for _ in range(30)]
    partitions_by_key: dict[str, set[int]] = {}
    for ack in acks:
        assert ack["result"] == "ok"
        key = f"k{int(ack['context']) % 5}"
        partitions_by_key.setdefault(key, set()).add(MessageId.from_base64(ack["messageId"]).partition)
    assert all(len(p) == 1 for p in partitions_by_key.values())
    received = receive(consumer, 30)
    assert sorted(m["messageId"] for m in received) == sorted(a["messageId"] for a in acks)


def test_round_robin_producer_uses_every_partition(broker: Broker, ws_connect: Connect) -> None:
    make_partitioned(broker, "rr", 4)
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/rr?messageRoutingMode=RoundRobinPartition")
    acks = publish_many(producer, [f"m{i}" for i in range(8)])
    assert {MessageId.from_base64(a["messageId"]).partition for a in acks} == {0, 1, 2, 3}
    reader = ws_connect(f"{broker.ws_url}/ws/v2/reader/{NS}/rr?messageId=earliest")
    assert sorted(texts(receive(reader, 8))) == sorted(f"m{i}" for i in range(8))


def test_reader_from_earliest_latest_and_a_message_id(broker: Broker, ws_connect: Connect) -> None:
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/readers")
    acks = publish_many(producer, [f"m{i}" for i in range(5)])
    earliest = ws_connect(f"{broker.ws_url}/ws/v2/reader/{NS}/readers?messageId=earliest")
    assert texts(receive(earliest, 5)) == [f"m{i}" for i in range(5)]
    latest = ws_connect(f"{broker.ws_url}/ws/v2/reader/{NS}/readers")
    from_id = ws_connect(f"{broker.ws_url}/ws/v2/reader/{NS}/readers?messageId={acks[1]['messageId']}")
    assert texts(receive(from_id, 3)) == ["m2", "m3", "m4"]  # exclusive of the start id, as Pulsar
    publish_many(producer, ["m5"])
    assert texts(receive(latest, 1)) == ["m5"]


def test_is_end_of_topic_after_termination(broker: Broker, ws_connect: Connect) -> None:
    consumer = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{NS}/ending/sub")
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/ending")
    publish_many(producer, ["a"])
    send_json(consumer, {"type": "isEndOfTopic"})
    first = recv_json(consumer)
    if "messageId" in first:  # the message may come before the answer
        send_json(consumer, {"messageId": first["messageId"]})
        first = recv_json(consumer)
    assert first == {"endOfTopic": False}
    topic = parse_topic_name("persistent://public/default/ending")
    loaded = broker.service.topic_if_loaded(topic)
    broker.call(loaded.terminate)
    send_json(consumer, {"type": "isEndOfTopic"})
    assert recv_json(consumer) == {"endOfTopic": True}


def test_lookup_health_and_metrics(broker: Broker, ws_connect: Connect) -> None:
    with httpx.Client(base_url=broker.http_url) as http:
        assert http.get("/admin/v2/brokers/health").text == "ok"
        lookup = http.get(f"/lookup/v2/topic/{NS}/looked-up").json()
        assert lookup["httpUrl"] == broker.service.http_url
        bundle = http.get(f"/lookup/v2/topic/{NS}/looked-up/bundle").json()
        assert bundle.startswith("0x")
        assert http.get("/lookup/v2/topic/persistent/nope/default/x").status_code == 404
        producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/measured")
        publish_many(producer, ["a", "b"])
        metrics = http.get("/metrics").text
    assert 'pulsar_in_messages_total{cluster="standalone",namespace="public/default",' in metrics
    assert "magnetar_publish_latency_seconds_bucket" in metrics


def test_a_non_owner_proxies_and_a_lost_session_moves_the_topic_only_when_another_broker_takes_it(
    cluster: Cluster, ws_connect: Connect
) -> None:
    first = cluster.start_broker()
    second = cluster.start_broker()
    producer = ws_connect(f"{first.ws_url}/ws/v2/producer/{NS}/moving")
    acked = publish_many(producer, [f"m{i}" for i in range(10)])
    assert all(a["result"] == "ok" for a in acked)
    # the second broker answers lookups with the owner's URL and serves WebSocket sessions through the owner
    with urllib.request.urlopen(f"{second.http_url}/lookup/v2/topic/{NS}/moving") as answer:
        assert json.load(answer)["httpUrl"] == first.service.http_url
    proxied = ws_connect(f"{second.ws_url}/ws/v2/reader/{NS}/moving?messageId=earliest")
    assert texts(receive(proxied, 10)) == [f"m{i}" for i in range(10)]
    # the first broker is cut off from the store and its session expires there: it serves on
    first.call_sync(first.metadata.disconnect)
    first.call_sync(first.metadata.expire_session)
    assert [a["result"] for a in publish_many(producer, ["m10", "m11"])] == ["ok", "ok"]
    # the second broker reaches the store: a client asking it takes the topic over there (fencing the ledger)
    again = ws_connect(f"{second.ws_url}/ws/v2/producer/{NS}/moving")
    assert publish_many(again, ["m12"])[0]["result"] == "ok"
    # the first broker's next write is fenced: never acknowledged; it drops the topic and its clients
    send_json(producer, {"payload": "bTEz", "context": "13"})  # "m13"
    answer = producer.recv_data(control_frame=True)
    if answer[0] == websocket.ABNF.OPCODE_TEXT:
        assert json.loads(answer[1])["result"].startswith("send-error")
        answer = producer.recv_data(control_frame=True)
    assert answer[0] == websocket.ABNF.OPCODE_CLOSE
    assert first.service.topics == {}
    # back in touch with the store, the first broker finds the bundle taken and gives it up
    first.call_sync(first.metadata.reconnect)
    deadline = time.monotonic() + 5
    while first.call_sync(lambda: first.service.ownership.owned):
        assert time.monotonic() < deadline, "the first broker kept the bundle another broker owns"
        time.sleep(0.05)
    with urllib.request.urlopen(f"{first.http_url}/lookup/v2/topic/{NS}/moving") as answer_:
        assert json.load(answer_)["httpUrl"] == second.service.http_url
    reader = ws_connect(f"{second.ws_url}/ws/v2/reader/{NS}/moving?messageId=earliest")
    assert texts(receive(reader, 13)) == [f"m{i}" for i in range(13)]


def test_concurrent_first_requests_load_a_topic_once(broker: Broker) -> None:
    """Found by the failure suite: two requests for an unloaded topic both passed the "is it loading?" check
    before either registered its load (the ownership check in between awaits), so the topic was loaded twice -
    two PersistentTopics over one managed ledger - and the second to finish failed with a KeyError."""
    topic = parse_topic_name(f"persistent://public/default/concurrent-{uuid.uuid4().hex[:8]}")

    async def load_concurrently() -> list[object]:
        loaded: list[object] = []

        async def load() -> None:
            loaded.append(await broker.service.get_topic(topic))

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(load)
        return loaded

    loaded = broker.call(load_concurrently)
    assert len(loaded) == 4
    assert all(each is loaded[0] for each in loaded)

"""Produce/consume round trips over real sockets, with websocket-client and websockets as users write them."""

from __future__ import annotations

import json
from collections.abc import Callable

import websocket
from fixtures.broker import Broker, b64, publish, publish_many, receive, recv_json, send_json, unb64
from websockets.sync.client import connect as websockets_connect

from magnetar.broker.wire.message_id import MessageId


def test_round_trip_with_websocket_client(
    broker: Broker, ws_connect: Callable[..., websocket.WebSocket]
) -> None:
    topic = "persistent/public/default/round-trip"
    consumer = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{topic}/sub")
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{topic}")
    ack = publish(
        producer,
        "hello",
        context="c1",
        key="k1",
        properties={"a": "1"},
        eventTime="2021-10-29T16:01:38.967-07:00",
    )
    assert ack["result"] == "ok"
    assert ack["context"] == "c1"
    assert ack["errorCode"] == 0
    mid = MessageId.from_base64(ack["messageId"])
    assert mid.partition == -1
    assert mid.batch_index == -1
    message = recv_json(consumer)
    assert message["messageId"] == ack["messageId"]
    assert unb64(message["payload"]) == b"hello"
    assert message["properties"] == {"a": "1"}
    assert message["key"] == "k1"
    assert message["redeliveryCount"] == 0
    assert message["eventTime"] == "2021-10-29T23:01:38.967Z"
    assert message["publishTime"].endswith("Z")
    send_json(consumer, {"messageId": message["messageId"]})


def test_many_messages_keep_order_and_ids(
    broker: Broker, ws_connect: Callable[..., websocket.WebSocket]
) -> None:
    topic = "persistent/public/default/order"
    consumer = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{topic}/sub")
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{topic}")
    payloads = [f"m{i}" for i in range(500)]
    acks = publish_many(producer, payloads)
    assert [a["result"] for a in acks] == ["ok"] * 500
    assert [a["context"] for a in acks] == [str(i) for i in range(500)]
    ids = [MessageId.from_base64(a["messageId"]) for a in acks]
    assert ids == sorted(ids)
    assert len(set(ids)) == 500
    received = receive(consumer, 500)
    assert [unb64(m["payload"]).decode() for m in received] == payloads
    assert [m["messageId"] for m in received] == [a["messageId"] for a in acks]


def test_round_trip_with_websockets(broker: Broker) -> None:
    topic = "persistent/public/default/websockets-lib"
    with (
        websockets_connect(f"{broker.ws_url}/ws/v2/consumer/{topic}/s") as consumer,
        websockets_connect(f"{broker.ws_url}/ws/v2/producer/{topic}") as producer,
    ):
        for i in range(20):
            producer.send(json.dumps({"payload": b64(f"x{i}"), "context": f"{i}"}))
        acks = [json.loads(producer.recv(timeout=10)) for _ in range(20)]
        assert all(a["result"] == "ok" for a in acks)
        got = []
        for _ in range(20):
            message = json.loads(consumer.recv(timeout=10))
            got.append(unb64(message["payload"]).decode())
            consumer.send(json.dumps({"messageId": message["messageId"]}))
        assert got == [f"x{i}" for i in range(20)]

"""Bad input gets Pulsar's error for it, and the connection, the broker and every acked message go on."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import websocket
from fixtures.broker import Broker, b64, publish, publish_many, receive, recv_json, send_json, unb64

Connect = Callable[..., websocket.WebSocket]
NS = "persistent/public/default"


def expect_status(connect: Connect, url: str, status: int) -> str:
    with pytest.raises(websocket.WebSocketBadStatusException) as caught:
        connect(url)
    assert caught.value.status_code == status
    return (caught.value.resp_body or b"").decode()


def close_frame(ws: websocket.WebSocket) -> tuple[int, str]:
    ws.settimeout(5)
    while True:
        opcode, frame = ws.recv_data_frame(control_frame=True)
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            return int.from_bytes(frame.data[:2], "big"), frame.data[2:].decode()


def close_code(ws: websocket.WebSocket) -> int:
    return close_frame(ws)[0]


def test_producer_errors_are_acks_and_the_session_goes_on(broker: Broker, ws_connect: Connect) -> None:
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/bad-producer")
    ok = publish(producer, "before", context="0")
    assert ok["result"] == "ok"
    producer.send("{not json")
    assert recv_json(producer)["result"] == "send-error:3"
    send_json(producer, {"context": "1"})
    missing = recv_json(producer)
    assert missing["result"] == "send-error:7"
    assert missing["context"] == "1"
    send_json(producer, {"payload": "***", "context": "2"})
    bad = recv_json(producer)
    assert bad["result"] == "send-error:7"
    assert bad["errorMsg"].startswith("Invalid Base64 message-payload error=")
    send_json(producer, {"payload": b64("x"), "eventTime": "yesterday", "context": "3"})
    assert recv_json(producer)["result"] == "send-error:7"
    producer.send_binary(b"\x00\x01")
    assert recv_json(producer)["result"] == "send-error:3"
    after = publish(producer, "after", context="4")
    assert after["result"] == "ok"
    reader = ws_connect(f"{broker.ws_url}/ws/v2/reader/{NS}/bad-producer?messageId=earliest")
    assert [unb64(m["payload"]) for m in receive(reader, 2)] == [b"before", b"after"]


def test_oversized_frame_closes_that_session_only(broker: Broker, ws_connect: Connect) -> None:
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/big")
    publish(producer, "small")
    producer.send(json.dumps({"payload": "A" * (5 * 1024 * 1024 + 16)}))
    assert close_code(producer) == 1009
    other = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/big")
    assert publish(other, "still fine")["result"] == "ok"


def test_upgrade_failures_have_pulsars_status_codes(broker: Broker, ws_connect: Connect) -> None:
    body = expect_status(ws_connect, f"{broker.ws_url}/ws/v2/consumer/{NS}/t/sub?subscriptionType=Nope", 400)
    assert "Invalid query params" in body
    expect_status(ws_connect, f"{broker.ws_url}/ws/v2/consumer/{NS}/t/sub?receiverQueueSize=abc", 400)
    expect_status(ws_connect, f"{broker.ws_url}/ws/v2/producer/persistent/bad%20tenant/default/t", 400)
    expect_status(ws_connect, f"{broker.ws_url}/ws/v2/consumer/{NS}/t", 400)
    expect_status(ws_connect, f"{broker.ws_url}/ws/v2/reader/{NS}/t?messageId=notbase64!", 400)
    expect_status(ws_connect, f"{broker.ws_url}/ws/v2/producer/persistent/public/missing-ns/t", 404)
    ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/named?producerName=p1")
    expect_status(ws_connect, f"{broker.ws_url}/ws/v2/producer/{NS}/named?producerName=p1", 409)


def test_topics_are_not_created_when_auto_creation_is_off(cluster: object, ws_connect: Connect) -> None:
    broker = cluster.start_broker(allow_auto_topic_creation=False)  # type: ignore[attr-defined]
    expect_status(ws_connect, f"{broker.ws_url}/ws/v2/producer/{NS}/never-created", 404)


def test_consumer_bad_commands(broker: Broker, ws_connect: Connect) -> None:
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/bad-consumer")
    consumer = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{NS}/bad-consumer/sub?subscriptionType=Shared")
    acks = publish_many(producer, ["a", "b"])
    first = recv_json(consumer)
    # unknown ids, ids of another partition and repeated acks are ignored; the session goes on
    send_json(consumer, {"messageId": "CP////8PEP////8P"})
    send_json(consumer, {"messageId": "CAEQABgFMAA="})
    send_json(consumer, {"messageId": first["messageId"]})
    send_json(consumer, {"messageId": first["messageId"]})
    send_json(consumer, {"type": "isEndOfTopic"})
    answers = [recv_json(consumer), recv_json(consumer)]
    assert {"endOfTopic": False} in answers
    second = next(a for a in answers if "messageId" in a)
    assert second["messageId"] == acks[1]["messageId"]
    # a frame that is not a JSON command closes the session with 4003 (Pulsar's code 3)
    consumer.send("{oops")
    assert close_code(consumer) == 4003
    binary = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{NS}/bad-consumer/sub?subscriptionType=Shared")
    binary.send_binary(b"\x01")
    assert close_code(binary) == 4003
    bad_id = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{NS}/bad-consumer/sub?subscriptionType=Shared")
    send_json(bad_id, {"messageId": "%%%"})
    # the second message was never acknowledged: it comes back; the first one never does
    assert close_code(bad_id) == 4003
    last = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{NS}/bad-consumer/sub?subscriptionType=Shared")
    again = recv_json(last)
    assert again["messageId"] == acks[1]["messageId"]


def test_a_negative_permit_closes_the_consumer_with_a_reason_that_names_it(
    broker: Broker, ws_connect: Connect
) -> None:
    consumer = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{NS}/negative-permit/sub?pullMode=true")
    send_json(consumer, {"type": "permit", "permitMessages": -5})
    code, reason = close_frame(consumer)
    assert code == 4003
    assert "permitMessages must not be negative: -5" in reason


def test_names_with_control_characters_are_refused_on_the_upgrade(
    broker: Broker, ws_connect: Connect
) -> None:
    body = expect_status(ws_connect, f"{broker.ws_url}/ws/v2/producer/{NS}/%00nul", 400)
    assert "control character U+0000" in body
    body = expect_status(ws_connect, f"{broker.ws_url}/ws/v2/consumer/{NS}/t/sub%1Bx", 400)
    assert "subscription" in body
    assert "U+001B" in body
    expect_status(ws_connect, f"{broker.ws_url}/ws/v2/reader/{NS}/a%C2%85b", 400)  # U+0085, a C1 control
    expect_status(ws_connect, f"{broker.ws_url}/ws/v2/producer/{NS}/%2E%2E", 400)
    expect_status(ws_connect, f"{broker.ws_url}/ws/v2/consumer/{NS}/t/%2E", 400)

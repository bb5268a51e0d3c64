"""Subscription types, flow control and redelivery over the WebSocket API."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable

import pytest
import websocket
from fixtures.broker import (
    Broker,
    nothing_arrives,
    publish_many,
    receive,
    recv_json,
    send_json,
    unb64,
)

from magnetar.broker.wire import MessageId

Connect = Callable[..., websocket.WebSocket]
TOPIC = "persistent/public/default"


def payloads(messages: list[dict[str, object]]) -> list[str]:
    return [unb64(str(m["payload"])).decode() for m in messages]


def test_exclusive_refuses_a_second_consumer(broker: Broker, ws_connect: Connect) -> None:
    url = f"{broker.ws_url}/ws/v2/consumer/{TOPIC}/excl/sub"
    ws_connect(url)
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        ws_connect(url)
    assert refused.value.status_code == 409
    assert b"Exclusive consumer is already connected" in (refused.value.resp_body or b"")


def test_shared_spreads_messages_and_redelivers_when_a_consumer_leaves(
    broker: Broker, ws_connect: Connect
) -> None:
    base = f"{broker.ws_url}/ws/v2/consumer/{TOPIC}/shared/sub?subscriptionType=Shared&receiverQueueSize=10"
    first = ws_connect(base + "&consumerName=a")
    second = ws_connect(base + "&consumerName=b")
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{TOPIC}/shared")
    publish_many(producer, [f"m{i}" for i in range(20)])
    got_first = receive(first, 10, ack=False)  # a's window is full: it acks nothing yet
    got_second = receive(second, 10)
    assert sorted(payloads(got_first) + payloads(got_second)) == sorted(f"m{i}" for i in range(20))
    first.close()  # unacknowledged messages go back to the other consumer
    redelivered = receive(second, 10)
    assert sorted(payloads(redelivered)) == sorted(payloads(got_first))
    assert nothing_arrives(second)


def test_failover_switches_to_the_next_consumer_with_everything_unacked(
    broker: Broker, ws_connect: Connect
) -> None:
    base = f"{broker.ws_url}/ws/v2/consumer/{TOPIC}/failover/sub?subscriptionType=Failover"
    active = ws_connect(base + "&consumerName=a")
    standby = ws_connect(base + "&consumerName=b")
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{TOPIC}/failover")
    publish_many(producer, [f"m{i}" for i in range(10)])
    got = receive(active, 10, ack=False)
    assert payloads(got) == [f"m{i}" for i in range(10)]
    for message in got[:4]:
        send_json(active, {"messageId": message["messageId"]})
    assert nothing_arrives(standby)
    # the acks travel before the close: wait for an answer on the same connection to be sure
    send_json(active, {"type": "isEndOfTopic"})
    assert recv_json(active) == {"endOfTopic": False}
    active.close()
    again = receive(standby, 6)
    assert payloads(again) == [f"m{i}" for i in range(4, 10)]


def test_key_shared_keeps_each_key_on_one_consumer_in_order(broker: Broker, ws_connect: Connect) -> None:
    base = f"{broker.ws_url}/ws/v2/consumer/{TOPIC}/keyed/sub?subscriptionType=Key_Shared"
    consumers = [ws_connect(base + f"&consumerName=c{i}") for i in range(3)]
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{TOPIC}/keyed")
    keys = [f"key-{i}" for i in range(12)]
    for round_ in range(10):
        for key in keys:
            send_json(producer, {"payload": "eA==", "key": key, "context": f"{key}/{round_}"})
    acks = [recv_json(producer) for _ in range(120)]
    assert all(a["result"] == "ok" for a in acks)
    seen: dict[str, list[int]] = defaultdict(list)
    owners: dict[str, set[int]] = defaultdict(set)
    total = 0
    while total < 120:
        for index, consumer in enumerate(consumers):
            consumer.settimeout(0.2)
            try:
                message = json.loads(consumer.recv())
            except websocket.WebSocketTimeoutException:
                continue
            total += 1
            seen[message["key"]].append(total)
            owners[message["key"]].add(index)
            send_json(consumer, {"messageId": message["messageId"]})
    assert sorted(seen) == sorted(keys)
    assert all(len(v) == 10 for v in seen.values())
    assert all(len(o) == 1 for o in owners.values()), owners


def test_receiver_queue_size_bounds_unacknowledged_deliveries(broker: Broker, ws_connect: Connect) -> None:
    consumer = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{TOPIC}/window/sub?receiverQueueSize=5")
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{TOPIC}/window")
    publish_many(producer, [f"m{i}" for i in range(12)])
    first = receive(consumer, 5, ack=False)
    assert nothing_arrives(consumer)
    for message in first[:2]:
        send_json(consumer, {"messageId": message["messageId"]})
    assert payloads(receive(consumer, 2, ack=False)) == ["m5", "m6"]
    assert nothing_arrives(consumer)


def test_pull_mode_delivers_only_against_permits(broker: Broker, ws_connect: Connect) -> None:
    consumer = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{TOPIC}/pull/sub?pullMode=true")
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{TOPIC}/pull")
    publish_many(producer, [f"m{i}" for i in range(5)])
    assert nothing_arrives(consumer)
    send_json(consumer, {"type": "permit", "permitMessages": 2})
    assert payloads(receive(consumer, 2)) == ["m0", "m1"]
    assert nothing_arrives(consumer)  # acks release no permits in pull mode
    send_json(consumer, {"type": "permit", "permitMessages": 10})
    assert payloads(receive(consumer, 3)) == ["m2", "m3", "m4"]


def test_negative_ack_redelivers_after_the_delay_with_a_count(broker: Broker, ws_connect: Connect) -> None:
    consumer = ws_connect(
        f"{broker.ws_url}/ws/v2/consumer/{TOPIC}/nack/sub?subscriptionType=Shared&negativeAckRedeliveryDelay=100"
    )
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{TOPIC}/nack")
    publish_many(producer, ["a", "b"])
    first = receive(consumer, 2, ack=False)
    send_json(consumer, {"messageId": first[1]["messageId"]})
    send_json(consumer, {"type": "negativeAcknowledge", "messageId": first[0]["messageId"]})
    again = recv_json(consumer)
    assert again["messageId"] == first[0]["messageId"]
    assert again["redeliveryCount"] == 1
    send_json(consumer, {"messageId": again["messageId"]})
    assert nothing_arrives(consumer)


def test_ack_timeout_redelivers_unacknowledged_messages(broker: Broker, ws_connect: Connect) -> None:
    consumer = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{TOPIC}/acktimeout/sub?ackTimeoutMillis=1000")
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{TOPIC}/acktimeout")
    publish_many(producer, ["a"])
    first = recv_json(consumer)
    consumer.settimeout(5)
    again = recv_json(consumer)
    assert again["messageId"] == first["messageId"]
    assert again["redeliveryCount"] == 1


def test_durable_subscription_resumes_after_the_last_ack(broker: Broker, ws_connect: Connect) -> None:
    url = f"{broker.ws_url}/ws/v2/consumer/{TOPIC}/resume/sub"
    consumer = ws_connect(url)
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{TOPIC}/resume")
    publish_many(producer, [f"m{i}" for i in range(6)])
    got = receive(consumer, 3)
    send_json(consumer, {"type": "isEndOfTopic"})
    recv_json(consumer)  # the acks were processed before this answer
    consumer.close()
    assert got[-1]["payload"]
    rest = receive(ws_connect.retrying(url), 3)  # type: ignore[attr-defined]
    assert payloads(rest) == ["m3", "m4", "m5"]


def test_unsubscribe_removes_the_subscription(broker: Broker, ws_connect: Connect) -> None:
    url = f"{broker.ws_url}/ws/v2/consumer/{TOPIC}/unsub/sub?subscriptionInitialPosition=Earliest"
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{TOPIC}/unsub")
    publish_many(producer, ["a", "b"])
    consumer = ws_connect(url)
    assert payloads(receive(consumer, 2, ack=False)) == ["a", "b"]
    send_json(consumer, {"type": "unsubscribe"})
    opcode, _ = consumer.recv_data(control_frame=True)
    assert opcode == websocket.ABNF.OPCODE_CLOSE
    # a new subscription of that name starts afresh (earliest again: both messages)
    assert payloads(receive(ws_connect(url), 2)) == ["a", "b"]


def send_together(ws: websocket.WebSocket, texts: list[str]) -> None:
    """Text frames in one socket write: the server reads them as one group."""
    ws.sock.sendall(
        b"".join(websocket.ABNF.create_frame(t, websocket.ABNF.OPCODE_TEXT).format() for t in texts)
    )


def test_acks_sent_together_are_applied_in_order_up_to_a_bad_frame(
    broker: Broker, ws_connect: Connect
) -> None:
    """One socket write of many frames reaches the server as one group: the acks at its head are applied
    as a group, the frames after them one at a time, in the order sent - a forged ack and an id of another
    topic are ignored among them, a negative ack redelivers only its message, and a frame that is not a
    command closes the session (4003) after everything before it was applied."""
    base = f"{broker.ws_url}/ws/v2/consumer/{TOPIC}/grouped"
    url = (
        f"{base}/sub?receiverQueueSize=50&negativeAckRedeliveryDelay=100&subscriptionInitialPosition=Earliest"
    )
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{TOPIC}/grouped")
    publish_many(producer, [f"m{i}" for i in range(12)])
    other = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{TOPIC}/grouped-other/sub")
    ws_connect(f"{broker.ws_url}/ws/v2/producer/{TOPIC}/grouped-other").send(json.dumps({"payload": "eA=="}))
    foreign = recv_json(other)["messageId"]  # delivered by this broker, on another topic
    consumer = ws_connect(url)
    got = receive(consumer, 12, ack=False)
    ids = [m["messageId"] for m in got]
    forged = MessageId(2**63 - 1, 0, -1, 2**31 - 1, 2**31 - 1).to_base64()
    texts = [json.dumps({"messageId": i}, separators=(",", ":")) for i in ids[:4]]
    texts += [json.dumps({"messageId": forged}), json.dumps({"messageId": foreign}, separators=(",", ":"))]
    texts.append(json.dumps({"type": "negativeAcknowledge", "messageId": ids[4]}))
    texts += [json.dumps({"messageId": i}, separators=(",", ":")) for i in ids[5:11]]
    send_together(consumer, texts)
    again = recv_json(consumer)
    assert (again["messageId"], again["redeliveryCount"]) == (ids[4], 1)
    assert nothing_arrives(consumer)
    # a group that ends in a frame that is not a command: applied up to it, then the session closes
    send_together(consumer, [json.dumps({"messageId": ids[4]}, separators=(",", ":")), '{"messageId":'])
    opcode, data = consumer.recv_data(control_frame=True)
    assert opcode == websocket.ABNF.OPCODE_CLOSE
    assert int.from_bytes(data[:2], "big") == 4003
    # every ack was applied: a new session gets the one message never acknowledged, nothing else
    rest = ws_connect.retrying(url)  # type: ignore[attr-defined]
    assert payloads(receive(rest, 1)) == ["m11"]
    assert nothing_arrives(rest)

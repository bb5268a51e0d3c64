"""The ``magnetar.v1`` binary subprotocol end to end (websocket-client offering the subprotocol): it mixes
with the JSON API on the same topics, keeps subscription semantics, and refuses bad frames like JSON."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import websocket
from fixtures.admin import admin_extras
from fixtures.broker import (
    Broker,
    Cluster,
    b64,
    nothing_arrives,
    publish_many,
    recv_json,
    send_json,
    unb64,
)

from magnetar.broker.wire.magnetar_v1 import (
    SUBPROTOCOL,
    FrameType,
    OutgoingMessage,
    Receipt,
    ReceivedMessage,
    encode_ack_ranges,
    encode_command,
    encode_ids,
    encode_permit,
    encode_send,
    parse_messages,
    parse_receipt,
)
from magnetar.broker.wire.message_id import MessageId

Connect = Callable[..., websocket.WebSocket]
NS = "persistent/public/default"


def binary(ws_connect: Connect, url: str) -> websocket.WebSocket:
    ws = ws_connect(url, subprotocols=[SUBPROTOCOL])
    assert ws.getsubprotocol() == SUBPROTOCOL
    return ws


def send(ws: websocket.WebSocket, request_id: int, messages: list[OutgoingMessage | bytes]) -> Receipt:
    ws.send_binary(encode_send(request_id, messages))
    frame = ws.recv()
    assert isinstance(frame, bytes)
    return parse_receipt(frame)


def receive(ws: websocket.WebSocket, count: int) -> list[ReceivedMessage]:
    out: list[ReceivedMessage] = []
    while len(out) < count:
        frame = ws.recv()
        assert isinstance(frame, bytes)
        assert frame[0] == FrameType.MESSAGES
        out += parse_messages(frame)
    assert len(out) == count
    return out


def ack_all(ws: websocket.WebSocket, messages: list[ReceivedMessage]) -> None:
    partition = messages[0].message_id[0]
    first = messages[0].message_id[1:4]
    last = messages[-1].message_id[1:4]
    ws.send_binary(
        encode_ack_ranges([(partition, (first[0], first[1], first[2]), (last[0], last[1], last[2]))])
    )


def close_code(ws: websocket.WebSocket) -> int:
    ws.settimeout(5)
    while True:
        opcode, frame = ws.recv_data_frame(control_frame=True)
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            return int.from_bytes(frame.data[:2], "big")


def test_binary_and_json_clients_share_topics_and_ids(broker: Broker, ws_connect: Connect) -> None:
    json_consumer = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{NS}/mixed/json-sub")
    binary_consumer = binary(ws_connect, f"{broker.ws_url}/ws/v2/consumer/{NS}/mixed/binary-sub")
    producer = binary(ws_connect, f"{broker.ws_url}/ws/v2/producer/{NS}/mixed")
    sent: list[OutgoingMessage | bytes] = [
        OutgoingMessage(b"one", key="k1", properties={"a": "1"}, event_time_ms=1_635_548_498_967),
        OutgoingMessage(b"two"),
        b"three",
    ]
    receipt = send(producer, 7, sent)
    assert receipt.ok
    assert receipt.request_id == 7
    assert len(receipt.ranges) == 1  # one frame, one entry
    ids = receipt.message_ids()
    assert [i[3:] for i in ids] == [(0, 3), (1, 3), (2, 3)]
    # the JSON consumer sees the same messages with the same ids, key, properties and event time
    from_json = [recv_json(json_consumer) for _ in range(3)]
    assert [MessageId.from_base64(m["messageId"]) for m in from_json] == [
        MessageId(i[1], i[2], i[0], i[3], i[4]) for i in ids
    ]
    assert [unb64(m["payload"]) for m in from_json] == [b"one", b"two", b"three"]
    assert from_json[0]["key"] == "k1"
    assert from_json[0]["properties"] == {"a": "1"}
    assert from_json[0]["eventTime"] == "2021-10-29T23:01:38.967Z"
    got = receive(binary_consumer, 3)
    assert [m.message_id for m in got] == ids
    assert [m.payload for m in got] == [b"one", b"two", b"three"]
    assert (got[0].key, got[0].properties, got[0].event_time_ms) == ("k1", {"a": "1"}, 1_635_548_498_967)
    assert (got[1].key, got[1].properties, got[1].redelivery_count) == (None, {}, 0)
    # and a JSON producer's messages reach the binary consumer with single-message ids
    json_producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/mixed")
    ack = publish_many(json_producer, ["four"])[0]
    (four,) = receive(binary_consumer, 1)
    mid = MessageId.from_base64(ack["messageId"])
    assert four.message_id == (-1, mid.ledger_id, mid.entry_id, -1, 0)
    assert four.payload == b"four"


def test_range_acks_persist_and_the_rest_is_redelivered(broker: Broker, ws_connect: Connect) -> None:
    url = f"{broker.ws_url}/ws/v2/consumer/{NS}/ranges/sub"
    consumer = binary(ws_connect, url)
    producer = binary(ws_connect, f"{broker.ws_url}/ws/v2/producer/{NS}/ranges")
    assert send(producer, 1, [f"m{i}".encode() for i in range(10)]).ok
    got = receive(consumer, 10)
    ack_all(consumer, got[:6])  # a range ending inside the batch entry
    consumer.close()
    again = binary(ws_connect.retrying, url)  # type: ignore[attr-defined]
    rest = receive(again, 4)
    assert [m.payload for m in rest] == [b"m6", b"m7", b"m8", b"m9"]
    assert [m.message_id for m in rest] == [m.message_id for m in got[6:]]
    _, ledger, entry, index, _ = rest[-1].message_id
    cumulative = encode_ack_ranges([(-1, (-1, -1, -1), (ledger, entry, index))])
    again.send_binary(cumulative)
    again.close()
    last = binary(ws_connect.retrying, url)  # type: ignore[attr-defined]
    assert nothing_arrives(last)


def test_a_range_ack_finds_a_redelivered_message_behind_later_ones(
    broker: Broker, ws_connect: Connect
) -> None:
    """A negatively acknowledged message comes back after the later ones it was sent before; a range that
    covers only it still acknowledges it (the consumer's pending messages are no longer in position order)."""
    query = "subscriptionType=Shared&negativeAckRedeliveryDelay=50"
    url = f"{broker.ws_url}/ws/v2/consumer/{NS}/behind/sub?{query}"
    consumer = binary(ws_connect, url)
    producer = binary(ws_connect, f"{broker.ws_url}/ws/v2/producer/{NS}/behind")
    assert send(producer, 1, [b"a", b"b", b"c", b"d"]).ok
    got = receive(consumer, 4)
    consumer.send_binary(encode_ids(FrameType.NACK, [got[0].message_id]))
    (again,) = receive(consumer, 1)
    assert (again.payload, again.message_id) == (b"a", got[0].message_id)
    ack_all(consumer, [again])  # the range [a, a]: a is now the last of the pending messages
    ack_all(consumer, got[1:3])  # [b, c]
    consumer.close()
    rest = receive(binary(ws_connect.retrying, url), 1)  # type: ignore[attr-defined]
    assert [m.payload for m in rest] == [b"d"]


def test_individual_acks_nacks_and_pull_mode(broker: Broker, ws_connect: Connect) -> None:
    url = (
        f"{broker.ws_url}/ws/v2/consumer/{NS}/pull/sub?subscriptionType=Shared&pullMode=true"
        "&negativeAckRedeliveryDelay=100"
    )
    consumer = binary(ws_connect, url)
    producer = binary(ws_connect, f"{broker.ws_url}/ws/v2/producer/{NS}/pull")
    assert send(producer, 1, [b"a", b"b", b"c"]).ok
    assert nothing_arrives(consumer)  # pull mode: nothing without permits
    consumer.send_binary(encode_permit(2))
    first = receive(consumer, 2)
    assert [m.payload for m in first] == [b"a", b"b"]
    consumer.send_binary(encode_ids(FrameType.ACK, [first[1].message_id]))
    consumer.send_binary(encode_ids(FrameType.NACK, [first[0].message_id]))
    consumer.send_binary(encode_permit(5))
    rest = receive(consumer, 2)
    assert sorted(m.payload for m in rest) == [b"a", b"c"]
    redelivered = next(m for m in rest if m.payload == b"a")
    assert redelivered.message_id == first[0].message_id
    assert redelivered.redelivery_count == 1


def test_partitioned_topic_routes_keys_and_reports_every_partition(
    broker: Broker, ws_connect: Connect
) -> None:
    broker.call(broker.service.policies.create_partitioned, "public/default", "bparts", 3)
    json_producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/bparts")
    producer = binary(ws_connect, f"{broker.ws_url}/ws/v2/producer/{NS}/bparts")
    keys = [f"k{i % 5}" for i in range(20)]
    receipt = send(producer, 3, [OutgoingMessage(b"x", key=k) for k in keys])
    assert receipt.ok
    partitions = [i[0] for i in receipt.message_ids()]
    for key, partition in zip(keys, partitions, strict=True):
        send_json(json_producer, {"payload": b64("y"), "key": key})
        assert MessageId.from_base64(recv_json(json_producer)["messageId"]).partition == partition
    keyless = send(producer, 4, [b"p"] * 5)
    assert len({i[0] for i in keyless.message_ids()}) == 1  # a frame's key-less messages go together
    consumer = binary(
        ws_connect, f"{broker.ws_url}/ws/v2/consumer/{NS}/bparts/sub?subscriptionInitialPosition=Earliest"
    )
    got = receive(consumer, 45)
    assert sorted(m.message_id[0] for m in got if m.payload == b"x") == sorted(partitions)


def test_a_frame_larger_than_the_batch_limit_becomes_several_entries(
    broker: Broker, ws_connect: Connect
) -> None:
    producer = binary(ws_connect, f"{broker.ws_url}/ws/v2/producer/{NS}/big-frame?maxPendingMessages=100")
    count = broker.settings.publish_batch_messages_max * 2 + 1
    receipt = send(producer, 9, [b"z"] * count)
    assert receipt.ok
    assert [r[4] for r in receipt.ranges] == [count // 2, count // 2, 1]
    assert len(set(receipt.message_ids())) == count


def test_bad_frames(broker: Broker, ws_connect: Connect) -> None:
    producer = binary(ws_connect, f"{broker.ws_url}/ws/v2/producer/{NS}/bad-binary")
    producer.send_binary(encode_send(5, [b"ok"])[:-1])
    refused = parse_receipt(producer.recv())  # type: ignore[arg-type]
    assert (refused.request_id, refused.error_code) == (5, 3)
    producer.send(json.dumps({"payload": b64("json in a binary session")}))
    assert parse_receipt(producer.recv()).error_code == 3  # type: ignore[arg-type]
    assert send(producer, 6, [b"still fine"]).ok  # the session goes on
    consumer = binary(ws_connect, f"{broker.ws_url}/ws/v2/consumer/{NS}/bad-binary/sub")
    consumer.send_binary(b"\x99")
    assert close_code(consumer) == 4003
    text_in_binary = binary(ws_connect, f"{broker.ws_url}/ws/v2/consumer/{NS}/bad-binary/sub2")
    text_in_binary.send(json.dumps({"type": "permit", "permitMessages": 1}))
    assert close_code(text_in_binary) == 4003
    negative = binary(ws_connect, f"{broker.ws_url}/ws/v2/consumer/{NS}/bad-binary/sub3?pullMode=true")
    negative.send_binary(bytes((FrameType.PERMIT,)) + (2**32 - 5).to_bytes(4, "little"))  # -5 as u32
    assert close_code(negative) == 4003


def test_binary_reader_permits_and_end_of_topic(broker: Broker, ws_connect: Connect) -> None:
    producer = binary(ws_connect, f"{broker.ws_url}/ws/v2/producer/{NS}/breader")
    assert send(producer, 1, [b"r0", b"r1", b"r2"]).ok
    reader = binary(
        ws_connect, f"{broker.ws_url}/ws/v2/reader/{NS}/breader?messageId=earliest&receiverQueueSize=2"
    )
    first = receive(reader, 2)
    assert [m.payload for m in first] == [b"r0", b"r1"]
    assert nothing_arrives(reader)  # the window of 2 is full
    reader.send_binary(encode_permit(2))
    assert [m.payload for m in receive(reader, 1)] == [b"r2"]
    reader.send_binary(encode_command(FrameType.IS_END_OF_TOPIC))
    assert reader.recv() == bytes((FrameType.END_OF_TOPIC, 0))


def test_backlog_quota_refuses_a_binary_send_like_a_json_publish(
    cluster: Cluster, ws_connect: Connect
) -> None:
    broker = cluster.start_broker(extras=admin_extras, backlog_quota_check_interval_s=0.1)
    admin_path = "/admin/v2/persistent/public/default/bquota"
    with httpx.Client(base_url=broker.http_url, timeout=30) as admin:
        assert admin.put(f"{admin_path}/subscription/slow", json="earliest").status_code == 204
        answer = admin.post(
            f"{admin_path}/backlogQuota",
            params={"backlogQuotaType": "destination_storage"},
            json={"limitSize": 500, "limitTime": -1, "policy": "producer_exception"},
        )
        assert answer.status_code == 204, answer.text
        producer = binary(ws_connect, f"{broker.ws_url}/ws/v2/producer/{NS}/bquota")
        assert send(producer, 1, [b"x" * 100] * 20).ok
        deadline = time.monotonic() + 30
        while (receipt := send(producer, 2, [b"late"])).ok:
            assert time.monotonic() < deadline, "the quota never refused the SEND"
            time.sleep(0.05)
        assert receipt.error_code == 8
        assert "ProducerBlockedQuotaExceeded" in receipt.reason
        assert admin.post(f"{admin_path}/subscription/slow/skip_all").status_code == 204
        while not (receipt := send(producer, 3, [b"after"])).ok:
            assert time.monotonic() < deadline, "the quota never released the producer"
            time.sleep(0.05)


def test_an_event_time_of_any_long_reaches_a_json_consumer(broker: Broker, ws_connect: Connect) -> None:
    """A binary producer's event time is any 64-bit value; a JSON consumer gets it written as Java writes
    an instant past year 9999 (the broker used to fail rendering it, and the process with it)."""
    json_consumer = ws_connect(f"{broker.ws_url}/ws/v2/consumer/{NS}/far-times/sub")
    producer = binary(ws_connect, f"{broker.ws_url}/ws/v2/producer/{NS}/far-times")
    times = [2**63 - 1, -(2**63), 2**62, 253_402_300_800_000]
    assert send(producer, 1, [OutgoingMessage(b"x", event_time_ms=ms) for ms in times]).ok
    got = [recv_json(json_consumer)["eventTime"] for _ in times]
    assert got == [
        "+292278994-08-17T07:12:55.807Z",
        "-292275055-05-16T16:47:04.192Z",
        "+146140482-04-24T15:36:27.904Z",
        "+10000-01-01T00:00:00Z",
    ]
    assert (
        publish_many(ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/far-times"), ["after"])[0]["result"]
        == "ok"
    )

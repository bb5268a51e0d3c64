"""The fan-out of a proxied session on a partitioned topic, without a network: routing of publishes and acks
to partitions, the merge of a split SEND's receipts, isEndOfTopic over every partition, and pull-mode
permits (never more deliveries than the client permitted, a bounded hold)."""

from __future__ import annotations

import json
import random
from typing import Any, cast

import pytest
import trio
import trio.testing
from fixtures.ws_fakes import FakeClient

from magnetar.bookkeeper.runtime.http import WebSocketClosed
from magnetar.bookkeeper.runtime.http.ws_client import WsClosed, WsRejected
from magnetar.broker.core.key_hash import partition_for_key
from magnetar.broker.core.routing import PartitionRouter
from magnetar.broker.owner_proxy.fanout import FanOutSession, PartitionPort
from magnetar.broker.protocols.magnetar_v1.fan import BinaryConsumerFan, BinaryProducerFan
from magnetar.broker.protocols.magnetar_v1.producer import route_frame
from magnetar.broker.protocols.magnetar_v1.relay_tracking import BinaryConsumerTracker
from magnetar.broker.protocols.pulsar_ws.fan import DELIVERED_IDS_MAX, JsonConsumerFan, JsonProducerFan
from magnetar.broker.protocols.pulsar_ws.relay_tracking import JsonConsumerTracker, JsonProducerTracker
from magnetar.broker.protocols.ws_errors import WsSessionError
from magnetar.broker.settings import BrokerSettings
from magnetar.broker.wire.entry_format import StoredMessage
from magnetar.broker.wire.magnetar_v1 import (
    FrameType,
    OutgoingMessage,
    ReceiptRange,
    encode_ack_ranges,
    encode_command,
    encode_ids,
    encode_permit,
    encode_receipt,
    encode_send,
    encode_send_error,
    end_of_topic_frame,
    message_record,
    message_records,
    messages_frame,
    parse_consumer_frame,
    parse_messages,
    parse_receipt,
    parse_send,
)
from magnetar.broker.wire.message_id import MessageId

PARTITIONS = 4


def router(mode: str = "SinglePartition", seed: int = 1) -> PartitionRouter[int]:
    return PartitionRouter(
        list(range(PARTITIONS)), routing_mode=mode, hashing_scheme=None, rng=random.Random(seed)
    )


def publish(key: str | None, context: str) -> str:
    request: dict[str, str] = {"payload": "eA==", "context": context}
    if key is not None:
        request["key"] = key
    return json.dumps(request)


def json_id(partition: int, entry: int) -> str:
    return MessageId(7, entry, partition, -1, 0).to_base64()


def delivery(partition: int, entry: int) -> str:
    return json.dumps({"messageId": json_id(partition, entry), "payload": "eA=="}, separators=(",", ":"))


def record(partition: int, entry: int) -> bytes:
    return message_record(partition, 7, entry, -1, 0, 0, StoredMessage(b"x", "p", 0, 0, 0, None))


# -- producers ------------------------------------------------------------------------------------------


def test_json_publishes_go_to_their_keys_partition_and_keyless_ones_by_the_routing_mode() -> None:
    fan = JsonProducerFan(router())
    for index in range(40):
        key = f"key-{index}"
        routed = fan.from_client(publish(key, str(index)))
        assert routed.partitions == [(partition_for_key(key, PARTITIONS, None), publish(key, str(index)))]
        assert routed.client == []
    single = {fan.from_client(publish(None, str(i))).partitions[0][0] for i in range(10)}
    assert len(single) == 1  # SinglePartition: one partition for the session
    round_robin = JsonProducerFan(router("RoundRobinPartition"))
    cycle = [round_robin.from_client(publish(None, str(i))).partitions[0][0] for i in range(8)]
    assert sorted(cycle[:PARTITIONS]) == list(range(PARTITIONS))
    assert cycle[PARTITIONS:] == cycle[:PARTITIONS]
    # an answer comes back as it is (its message id names its partition)
    answer = json.dumps({"result": "ok", "messageId": json_id(2, 5), "context": "1"})
    assert fan.from_partition(2, [answer]).client == [answer]


def keyed_frame(request_id: int, keys: list[str | None]) -> bytes:
    return encode_send(request_id, [OutgoingMessage(f"m{i}".encode(), key=k) for i, k in enumerate(keys)])


def test_a_send_split_over_partitions_is_answered_with_one_receipt_in_frame_order() -> None:
    keys: list[str | None] = ["a", "a", "b", "c", "a", "b"]
    fan = BinaryProducerFan(router())
    routed = fan.from_client(keyed_frame(42, keys))
    # the same runs as a local session cuts the frame into
    local = route_frame(router(), parse_send(keyed_frame(42, keys)))
    assert [p for p, _ in routed.partitions] == [p for p, _ in local]
    assert [parse_send(bytes(f)).run.messages for _, f in routed.partitions] == [
        run.messages for _, run in local
    ]
    assert fan.waiting == len(local)
    # each partition answers its runs (out of order across partitions); one RECEIPT when the last is stored
    answers: list[bytes] = []
    sent = list(enumerate(routed.partitions))
    for slot, (partition, frame) in reversed(sent):
        upstream_request = parse_send(bytes(frame)).request_id
        messages = parse_send(bytes(frame)).run.messages
        ranges = [ReceiptRange(partition, 9, slot, 0, messages, messages)]
        out = fan.from_partition(partition, [encode_receipt(upstream_request, ranges)])
        answers.extend(bytes(m) for m in out.client)
    assert len(answers) == 1
    receipt = parse_receipt(answers[0])
    assert receipt.request_id == 42
    assert [r.entry_id for r in receipt.ranges] == list(range(len(local)))  # frame order
    ids = receipt.message_ids()
    assert [i[0] for i in ids] == [partition_for_key(k, PARTITIONS, None) for k in keys if k is not None]
    assert fan.waiting == 0


def test_a_send_with_one_failed_partition_gets_one_send_error() -> None:
    fan = BinaryProducerFan(router())
    routed = fan.from_client(keyed_frame(5, ["a", "b", "c", "d"]))
    assert len({p for p, _ in routed.partitions}) > 1
    (first, frame), *rest = routed.partitions
    out = fan.from_partition(first, [encode_send_error(parse_send(bytes(frame)).request_id, 8, "moved")])
    assert [parse_receipt(bytes(m)) for m in out.client] == [parse_receipt(encode_send_error(5, 8, "moved"))]
    for partition, frame in rest:  # the other runs' receipts answer nothing more
        ranges = [ReceiptRange(partition, 1, 1, 0, 1, 1)]
        upstream_request = parse_send(bytes(frame)).request_id
        assert fan.from_partition(partition, [encode_receipt(upstream_request, ranges)]).client == []
    assert fan.waiting == 0
    # a frame that cannot be read is answered at once, as a local session answers it (code 3)
    refused = parse_receipt(bytes(fan.from_client(b"\x01garbage").client[0]))
    assert refused.error_code == 3


# -- consumers and readers ------------------------------------------------------------------------------


def test_json_acks_go_to_the_partition_their_id_names_and_unsubscribe_to_every_partition() -> None:
    fan = JsonConsumerFan(PARTITIONS, pull_mode=False, reader=False, prefetch=10)
    assert fan.opening().permits == {}
    ack = json.dumps({"messageId": json_id(3, 1)})
    assert fan.from_client(ack).partitions == [(3, ack)]
    nack = json.dumps({"type": "negativeAcknowledge", "messageId": json_id(1, 2)})
    assert fan.from_client(nack).partitions == [(1, nack)]
    assert fan.from_client(json.dumps({"messageId": json_id(9, 1)})).partitions == []  # no such partition
    with pytest.raises(WsSessionError):
        fan.from_client("not json")
    unsubscribe = json.dumps({"type": "unsubscribe"})
    assert not fan.unsubscribing
    assert fan.from_client(unsubscribe).partitions == [(p, unsubscribe) for p in range(PARTITIONS)]
    assert fan.unsubscribing


def test_is_end_of_topic_is_true_only_when_every_partition_is_at_its_end() -> None:
    fan = JsonConsumerFan(PARTITIONS, pull_mode=False, reader=False, prefetch=10)
    question = json.dumps({"type": "isEndOfTopic"})
    assert len(fan.from_client(question).partitions) == PARTITIONS
    assert len(fan.from_client(question).partitions) == PARTITIONS  # a second question before the answers
    answers = []
    for partition in range(PARTITIONS):  # partition 2 is not at its end for the first question only
        first = '{"endOfTopic":false}' if partition == 2 else '{"endOfTopic":true}'
        answers += fan.from_partition(partition, [first, '{"endOfTopic":true}']).client
    assert answers == ['{"endOfTopic":false}', '{"endOfTopic":true}']
    binary = BinaryConsumerFan(2, pull_mode=False, reader=True, prefetch=10)
    binary.from_client(encode_command(FrameType.IS_END_OF_TOPIC))
    assert binary.from_partition(0, [end_of_topic_frame(True)]).client == []
    assert binary.from_partition(1, [end_of_topic_frame(True)]).client == [end_of_topic_frame(True)]


def test_binary_acks_and_ack_ranges_are_split_per_partition() -> None:
    fan = BinaryConsumerFan(PARTITIONS, pull_mode=False, reader=False, prefetch=10)
    ids = [(0, 7, 1, -1, 0), (2, 7, 2, -1, 0), (0, 7, 3, -1, 0), (8, 7, 4, -1, 0)]
    routed = fan.from_client(encode_ids(FrameType.ACK, ids))
    assert routed.partitions == [
        (0, encode_ids(FrameType.ACK, [ids[0], ids[2]])),
        (2, encode_ids(FrameType.ACK, [ids[1]])),
    ]
    ranges = [(1, (7, 1, -1), (7, 5, -1)), (3, (8, 0, -1), (8, 2, -1))]
    routed = fan.from_client(encode_ack_ranges(ranges))
    assert [(p, parse_consumer_frame(bytes(f)).ranges) for p, f in routed.partitions] == [
        (1, [ranges[0]]),
        (3, [ranges[1]]),
    ]
    with pytest.raises(WsSessionError):
        fan.from_client("text")


def test_pull_mode_never_delivers_more_than_the_client_permitted_and_holds_a_bounded_number() -> None:
    """A simulation: each partition's session delivers only within the permits the fan-out granted it (as
    an owner does), in random order and amounts; the client grants permits at random."""
    prefetch = 5
    for binary in (False, True):
        rng = random.Random(7)
        fan = (BinaryConsumerFan if binary else JsonConsumerFan)(
            PARTITIONS, pull_mode=True, reader=False, prefetch=prefetch
        )
        upstream_permits = dict(fan.opening().permits)
        assert upstream_permits == dict.fromkeys(range(PARTITIONS), prefetch)
        next_entry = [0] * PARTITIONS
        permitted = delivered = 0
        seen: list[tuple[int, int]] = []
        for _ in range(400):
            if rng.random() < 0.3:
                count = rng.randint(1, 4)
                permitted += count
                permit = (
                    encode_permit(count)
                    if binary
                    else json.dumps({"type": "permit", "permitMessages": count})
                )
                out = fan.from_client(permit)
                assert out.partitions == []
            else:
                partition = rng.randrange(PARTITIONS)
                count = rng.randint(0, upstream_permits[partition])
                entries = range(next_entry[partition], next_entry[partition] + count)
                next_entry[partition] += count
                upstream_permits[partition] -= count
                if not count:
                    continue
                if binary:
                    frames: list[str | bytes] = [messages_frame([record(partition, e) for e in entries])]
                else:
                    frames = [delivery(partition, e) for e in entries]
                out = fan.from_partition(partition, frames)
            for partition, granted in out.permits.items():
                upstream_permits[partition] += granted
            for message in out.client:
                if isinstance(message, bytes):
                    got = [(m.message_id[0], m.message_id[2]) for m in parse_messages(message)]
                else:
                    parsed = MessageId.from_base64(json.loads(message)["messageId"])
                    got = [(parsed.partition, parsed.entry_id)]
                delivered += len(got)
                seen += got
            assert delivered <= permitted
            assert len(fan.held) <= PARTITIONS * prefetch
            assert all(0 <= p <= prefetch for p in upstream_permits.values())
        assert delivered == min(permitted, sum(next_entry)) > 100  # nothing held while the client has permits
        for partition in range(PARTITIONS):  # each partition's messages in their order
            entries = [e for p, e in seen if p == partition]
            assert entries == sorted(entries)


def test_a_readers_releases_go_to_the_partitions_of_its_oldest_deliveries() -> None:
    fan = BinaryConsumerFan(3, pull_mode=False, reader=True, prefetch=10)
    fan.from_partition(2, [messages_frame([record(2, 1), record(2, 2)])])
    fan.from_partition(0, [messages_frame([record(0, 1)])])
    fan.from_partition(2, [messages_frame([record(2, 3)])])
    assert fan.from_client(encode_permit(3)).partitions == [(2, encode_permit(2)), (0, encode_permit(1))]
    assert fan.from_client(encode_permit(5)).partitions == [(2, encode_permit(1))]
    with pytest.raises(WsSessionError):
        fan.from_client(encode_command(FrameType.UNSUBSCRIBE))
    json_reader = JsonConsumerFan(3, pull_mode=False, reader=True, prefetch=10)
    json_reader.from_partition(1, [delivery(1, 1)])
    json_reader.from_partition(0, [delivery(0, 1)])
    json_reader.from_partition(2, [delivery(2, 1)])
    release = json.dumps({"messageId": json_id(0, 1)})
    assert json_reader.from_client(release).partitions == [(0, release)]
    assert json_reader.from_client("{}").partitions == [(1, "{}")]  # no id: the oldest delivery's partition
    assert json_reader.from_client("{}").partitions == [(2, "{}")]  # partition 0's was released by its id
    for entry in range(2, 500):  # releases by id keep nothing behind
        json_reader.from_partition(entry % 3, [delivery(entry % 3, entry)])
        json_reader.from_client(json.dumps({"messageId": json_id(entry % 3, entry)}))
    assert json_reader.unreleased == 0


def test_message_records_split_a_messages_frame_and_join_again() -> None:
    frame = messages_frame([record(0, 1), record(1, 2), record(0, 3)])
    records = message_records(frame)
    assert len(records) == 3
    assert messages_frame(records) == frame
    assert messages_frame(records[1:2]) == messages_frame([record(1, 2)])


async def test_a_port_sends_the_permits_granted_meanwhile_before_the_frames_and_ends_when_shut() -> None:
    fan = JsonConsumerFan(1, pull_mode=True, reader=False, prefetch=3)
    session = FanOutSession.__new__(FanOutSession)
    session.fan = fan
    port = PartitionPort(0, session, frames_max=2)
    await port.put("a")
    port.grant(2)
    port.grant(3)
    assert await port.receive_batch() == ['{"type":"permit","permitMessages":5}', "a"]
    await port.put("b")
    await port.put("c")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(port.put, "d")  # full: the client's reader waits for room
        await trio.testing.wait_all_tasks_blocked()
        assert await port.receive_batch() == ["b", "c"]
    assert await port.receive_batch() == ["d"]
    port.shut()
    with pytest.raises(WebSocketClosed):
        await port.receive_batch()


# -- the session, against scripted upstream sessions ----------------------------------------------------


class FakeUpstream:
    """A partition owner's session: answers each publish with an ack naming its partition, or ends (1001)
    on the publish after ``answer_max`` answers, without answering it."""

    def __init__(self, partition: int, answer_max: int = 1_000) -> None:
        self.peer = f"owner-{partition}"
        self.partition = partition
        self.received: list[str] = []
        self.answer_max = answer_max
        self.closed = False
        self._to_proxy_send, self._to_proxy = trio.open_memory_channel[str](100)

    async def send(self, message: str | bytes) -> None:
        assert isinstance(message, str)
        self.received.append(message)
        if len(self.received) <= self.answer_max:
            context = json.loads(message)["context"]
            answer = {
                "result": "ok",
                "messageId": json_id(self.partition, len(self.received)),
                "context": context,
            }
            await self._to_proxy_send.send(json.dumps(answer))
        elif len(self.received) == self.answer_max + 1:
            self._to_proxy_send.close()

    async def send_many(self, messages: list[str | bytes]) -> None:
        for message in messages:
            await self.send(message)

    async def receive_batch(self) -> list[str | bytes]:
        try:
            return [await self._to_proxy.receive()]
        except trio.EndOfChannel:
            raise WsClosed(1001, "Topic unloaded") from None

    async def aclose(self) -> None:
        self.closed = True


def key_for(partition: int, partitions: int, n: int = 0) -> str:
    keys = (f"key-{i}" for i in range(1000))
    matching = [k for k in keys if partition_for_key(k, partitions, None) == partition]
    return matching[n]


async def test_a_partition_that_ends_fails_back_only_its_own_messages_then_closes_the_session_1001() -> None:
    client = FakeClient()
    upstreams = [FakeUpstream(0, answer_max=1), FakeUpstream(1)]
    attempts = 0

    async def unreachable(overrides: dict[str, str]) -> Any:
        nonlocal attempts
        attempts += 1
        raise WsRejected(503, b'{"reason": "bundle not ready"}')

    proxy_settings = BrokerSettings(
        ws_proxy_reconnect_backoff_initial_ms=10,
        ws_proxy_reconnect_backoff_max_ms=20,
        ws_proxy_reconnect_deadline_ms=300,
    )
    fan = JsonProducerFan(
        PartitionRouter([0, 1], routing_mode="SinglePartition", hashing_scheme=None, rng=random.Random(1))
    )
    session = FanOutSession(
        cast(Any, client),
        fan,
        cast(Any, upstreams),
        [JsonProducerTracker(), JsonProducerTracker()],
        [unreachable, unreachable],
        proxy_settings,
        "persistent://t/ns/parts",
    )
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.run)
            for context, (partition, n) in enumerate([(0, 0), (1, 0), (1, 1), (0, 1), (1, 2)]):
                await client.inbox_send.send(publish(key_for(partition, 2, n), str(context)))
                await trio.testing.wait_all_tasks_blocked()
    answers = {json.loads(a)["context"]: json.loads(a) for a in client.sent}
    assert {c: a["result"] for c, a in answers.items()} == {
        "0": "ok",
        "1": "ok",
        "2": "ok",
        "3": "send-error:8",  # partition 0's session ended with it unanswered
        "4": "ok",  # partition 1 went on
    }
    assert {MessageId.from_base64(answers[c]["messageId"]).partition for c in "124"} == {1}
    assert client.close_code == 1001  # partition 0 unreachable past the deadline
    assert attempts >= 2
    assert all(u.closed for u in upstreams)  # every upstream session closed with the client's


def test_an_is_end_of_topic_question_lost_in_a_move_is_answered_false() -> None:
    question = json.dumps({"type": "isEndOfTopic"})
    tracker = JsonConsumerTracker(pull_mode=False, reader=False)
    for _ in range(3):
        tracker.on_forward(question)
    tracker.on_forward(json.dumps({"messageId": json_id(0, 1)}))  # an ack is no question
    tracker.on_upstream('{"endOfTopic":true}')
    assert tracker.lost("moved") == ['{"endOfTopic":false}', '{"endOfTopic":false}']
    assert tracker.lost("moved again") == []
    binary = BinaryConsumerTracker(pull_mode=False, reader=True)
    binary.on_forward(encode_command(FrameType.IS_END_OF_TOPIC))
    assert binary.lost("moved") == [end_of_topic_frame(False)]
    # through the fan-out, the partition's false answer completes the question
    fan = JsonConsumerFan(2, pull_mode=False, reader=False, prefetch=1)
    fan.from_client(question)
    assert fan.from_partition(0, ['{"endOfTopic":true}']).client == []
    assert fan.from_partition(1, ['{"endOfTopic":false}']).client == ['{"endOfTopic":false}']


def test_a_json_consumers_acks_of_delivered_ids_are_routed_from_memory_within_a_bound() -> None:
    fan = JsonConsumerFan(PARTITIONS, pull_mode=False, reader=False, prefetch=10)
    assert fan.from_partition(3, [delivery(3, 1)]).client == [delivery(3, 1)]
    ack = '{"messageId":"' + json_id(3, 1) + '"}'
    assert fan.from_client(ack).partitions == [(3, ack)]
    assert fan.from_client(ack).partitions == [(3, ack)]  # again (forgotten): by the full parse, the same
    for entry in range(DELIVERED_IDS_MAX + 10):
        fan.from_partition(entry % PARTITIONS, [delivery(entry % PARTITIONS, entry)])
    assert fan.remembered_ids == DELIVERED_IDS_MAX
    oldest = '{"messageId":"' + json_id(1, 1) + '"}'  # forgotten: routed by its id's partition all the same
    assert fan.from_client(oldest).partitions == [(1, oldest)]


def test_the_fan_out_settings_are_bounded() -> None:
    for name, bad in (
        ("ws_proxy_partition_prefetch_messages", 0),
        ("ws_proxy_partition_prefetch_messages", 100_001),
        ("ws_proxy_partition_opens_max", 0),
        ("ws_proxy_partition_opens_max", 1_001),
    ):
        with pytest.raises(ValueError, match=name):
            BrokerSettings(**{name: bad})
    settings = BrokerSettings()
    assert (settings.ws_proxy_partition_prefetch_messages, settings.ws_proxy_partition_opens_max) == (100, 16)

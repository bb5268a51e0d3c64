"""The consumer side of Pulsar's binary protocol against a real ``magnetar standalone``, driven by the
official ``pulsar-client``: redelivery on request (negative acks, ack timeouts, the client's dead-letter
policy, all driven by the broker's redelivery count), the last message id (``has_message_available``),
seeking by message id and by publish time, batch-index acknowledgements, and a small receiver queue against
large batches. Hostile commands on a raw connection end nothing but their own request."""

from __future__ import annotations

import json
import socket
import struct
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pulsar
import pytest
from fixtures.processes import MagnetarProcess
from fixtures.standalone_process import official_client, running_standalone

from magnetar.broker.protocols.pulsar_binary.commands import (
    CommandType,
)
from magnetar.broker.protocols.pulsar_binary.consumer_commands import (
    encode_get_last_message_id,
    encode_seek,
)
from magnetar.broker.protocols.pulsar_binary.encoders import (
    encode_connect,
)
from magnetar.broker.protocols.pulsar_binary.framing import encode_frame
from magnetar.broker.protocols.pulsar_binary.protobuf import Writer, parse_message

pytestmark = [pytest.mark.processes]

HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MagnetarProcess]:
    with running_standalone(tmp_path_factory.mktemp("binary-consumer")) as process:
        yield process


@pytest.fixture
def client(standalone: MagnetarProcess) -> Iterator[pulsar.Client]:
    with official_client(standalone) as c:
        yield c


def _topic() -> str:
    return f"persistent://public/default/cons-{uuid.uuid4().hex[:8]}"


def _drain(consumer: pulsar.Consumer, timeout_ms: int = 1500) -> list[pulsar.Message]:
    out = []
    while True:
        try:
            out.append(consumer.receive(timeout_ms))
        except pulsar.Timeout:
            return out


# -- redelivery ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.Exclusive])
def test_negative_ack_comes_back_with_redelivery_count(
    client: pulsar.Client, kind: pulsar.ConsumerType
) -> None:
    topic = _topic()
    consumer = client.subscribe(
        topic,
        "nack",
        consumer_type=kind,
        initial_position=pulsar.InitialPosition.Earliest,
        negative_ack_redelivery_delay_ms=100,
    )
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"first")
    producer.send(b"second")
    first = consumer.receive(10_000)
    assert (first.data(), first.redelivery_count()) == (b"first", 0)
    consumer.negative_acknowledge(first)
    second = consumer.receive(10_000)
    assert second.data() == b"second"
    consumer.acknowledge(second)
    again = consumer.receive(10_000)
    assert again.data() == b"first"
    assert again.redelivery_count() == 1
    consumer.negative_acknowledge(again)
    third = consumer.receive(10_000)
    assert (third.data(), third.redelivery_count()) == (b"first", 2)
    consumer.acknowledge(third)
    assert _drain(consumer, 800) == []


@pytest.mark.parametrize("kind", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.Failover])
def test_ack_timeout_redelivers(client: pulsar.Client, kind: pulsar.ConsumerType) -> None:
    topic = _topic()
    consumer = client.subscribe(
        topic,
        "timeout",
        consumer_type=kind,
        initial_position=pulsar.InitialPosition.Earliest,
        unacked_messages_timeout_ms=10_000,  # the client's least
    )
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5)
    for i in range(5):
        producer.send_async(f"t{i}".encode(), None)
    producer.flush()
    first = [consumer.receive(10_000) for _ in range(5)]
    assert [m.data() for m in first] == [f"t{i}".encode() for i in range(5)]
    assert all(m.redelivery_count() == 0 for m in first)
    # nothing acknowledged: after the timeout every message comes back, counted once more
    again = [consumer.receive(20_000) for _ in range(5)]
    assert sorted(m.data() for m in again) == [f"t{i}".encode() for i in range(5)]
    assert all(m.redelivery_count() == 1 for m in again)
    for message in again:
        consumer.acknowledge(message)
    assert _drain(consumer, 2500) == []


def test_dead_letter_policy_moves_the_message(client: pulsar.Client) -> None:
    topic = _topic()
    dlq = topic + "-DLQ"
    dead = client.subscribe(dlq, "dlq-reader", initial_position=pulsar.InitialPosition.Earliest)
    consumer = client.subscribe(
        topic,
        "with-dlq",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=2, dead_letter_topic=dlq),
    )
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"poison", properties={"p": "1"})
    producer.send(b"fine")
    counts = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            message = consumer.receive(1000)
        except pulsar.Timeout:
            break
        if message.data() == b"poison":
            counts.append(message.redelivery_count())
            consumer.negative_acknowledge(message)
        else:
            consumer.acknowledge(message)
    assert counts == [0, 1, 2]
    moved = dead.receive(10_000)
    assert moved.data() == b"poison"
    assert moved.properties().get("p") == "1"
    dead.acknowledge(moved)
    consumer.close()
    # the original subscription acknowledged it when it went to the dead-letter topic
    again = client.subscribe(topic, "with-dlq", consumer_type=pulsar.ConsumerType.Shared)
    assert _drain(again, 1500) == []


def _unacked(standalone: MagnetarProcess, topic: str, subscription: str) -> int:
    path = topic.replace("persistent://", "persistent/")
    url = f"http://{HOST}:{standalone.ready['port']}/admin/v2/{path}/stats"
    with urllib.request.urlopen(url, timeout=10) as response:
        stats = json.loads(response.read())
    return int(stats["subscriptions"][subscription]["unackedMessages"])


@pytest.mark.parametrize("batching", [False, True])
def test_acknowledged_messages_leave_nothing_pending(
    standalone: MagnetarProcess, client: pulsar.Client, batching: bool
) -> None:
    """What the client acknowledged is no longer held for it (a consumer holding acknowledged messages would
    stop at its unacknowledged-message bound)."""
    topic = _topic()
    consumer = client.subscribe(topic, "pending", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_publish_delay_ms=5)
    for i in range(30):
        producer.send_async(f"p{i}".encode(), None)
    producer.flush()
    for _ in range(30):
        consumer.acknowledge(consumer.receive(10_000))
    deadline = time.monotonic() + 10
    while _unacked(standalone, topic, "pending") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _unacked(standalone, topic, "pending") == 0


# -- last message id -----------------------------------------------------------------------------------


def test_last_message_id_and_has_message_available(client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "last", initial_position=pulsar.InitialPosition.Earliest)
    empty = consumer.get_last_message_id()
    assert empty.entry_id() == -1  # an empty topic: its ledger, entry -1 (as Pulsar answers)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5)
    ids = []
    for i in range(3):
        producer.send_async(f"l{i}".encode(), lambda _res, mid: ids.append(mid))
    producer.flush()
    single = client.create_producer(topic, batching_enabled=False)
    last_id = single.send(b"last")
    got = consumer.get_last_message_id()
    assert (got.ledger_id(), got.entry_id(), got.batch_index()) == (
        last_id.ledger_id(),
        last_id.entry_id(),
        -1,
    )
    seen = []
    while reader.has_message_available():
        seen.append(reader.read_next(10_000).data())
    assert seen == [b"l0", b"l1", b"l2", b"last"]
    batch_last = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5)
    for i in range(4):
        batch_last.send_async(f"b{i}".encode(), None)
    batch_last.flush()
    got = consumer.get_last_message_id()
    assert got.batch_index() == 3  # the last entry is a batch of 4: its last message's index
    assert reader.has_message_available()


def test_reader_from_the_latest_message_sees_what_comes_next(client: pulsar.Client) -> None:
    topic = _topic()
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"before")
    reader = client.create_reader(topic, pulsar.MessageId.latest)
    assert not reader.has_message_available()
    producer.send(b"after")
    assert reader.has_message_available()
    assert reader.read_next(10_000).data() == b"after"
    assert not reader.has_message_available()


# -- seek ----------------------------------------------------------------------------------------------


def test_consumer_seek_by_message_id_and_by_time(client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "seek", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = []
    times = []
    for i in range(10):
        ids.append(producer.send(f"s{i}".encode()))
        time.sleep(0.005)
    received = [consumer.receive(10_000) for _ in range(10)]
    times = [m.publish_timestamp() for m in received]
    for message in received:
        consumer.acknowledge(message)
    consumer.seek(ids[3])  # as with Pulsar, the client skips the message it sought to: the next is s4
    assert consumer.receive(10_000).data() == b"s4"
    consumer.seek(times[6])  # by publish time: the first message published at or after it
    assert [m.data() for m in _drain(consumer)] == [f"s{i}".encode() for i in range(6, 10)]
    consumer.seek(pulsar.MessageId.earliest)
    assert len(_drain(consumer)) == 10
    consumer.seek(pulsar.MessageId.latest)
    assert _drain(consumer, 800) == []
    producer.send(b"after")
    assert consumer.receive(10_000).data() == b"after"


def test_reader_seek(client: pulsar.Client) -> None:
    topic = _topic()
    producer = client.create_producer(topic, batching_enabled=False)
    ids = []
    for i in range(6):
        ids.append(producer.send(f"r{i}".encode()))
        time.sleep(0.005)  # publish times a few ms apart: the seek by time finds r3 alone
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    read = [reader.read_next(10_000) for _ in range(6)]
    assert [m.data() for m in read] == [f"r{i}".encode() for i in range(6)]
    reader.seek(ids[1])
    assert reader.read_next(10_000).data() == b"r2"
    reader.seek(read[3].publish_timestamp())  # the reader comes back without a start id: its subscription
    assert reader.read_next(10_000).data() == b"r3"  # stayed, reset to the time
    reader.seek(pulsar.MessageId.earliest)
    assert reader.read_next(10_000).data() == b"r0"
    later = client.create_reader(topic, ids[3])  # a reader starting after a message id
    assert later.read_next(10_000).data() == b"r4"


@pytest.mark.parametrize("inclusive", [False, True])
def test_reader_starting_at_a_message_of_a_batch(client: pulsar.Client, inclusive: bool) -> None:
    topic = _topic()
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    for i in range(5):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    first = client.create_reader(topic, pulsar.MessageId.earliest)
    ids = [first.read_next(10_000).message_id() for _ in range(5)]
    assert [mid.batch_index() for mid in ids] == [0, 1, 2, 3, 4]
    for start in (0, 2):
        reader = client.create_reader(topic, ids[start], start_message_id_inclusive=inclusive)
        expected = start if inclusive else start + 1
        assert reader.read_next(10_000).data() == f"m{expected}".encode()
        reader.close()


# -- batches -------------------------------------------------------------------------------------------


def test_batch_index_acks_hold_across_a_resubscribe(client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(
        topic,
        "batch-index",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
        batch_index_ack_enabled=True,
    )
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=10, batching_max_publish_delay_ms=50
    )
    for i in range(10):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    messages = [consumer.receive(10_000) for _ in range(10)]
    assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in messages}) == 1
    for message in messages:
        if int(message.data()[1:]) % 3 == 0:
            consumer.acknowledge(message)  # b0, b3, b6, b9: each with its batch index
    time.sleep(0.5)  # the client groups acks for 100 ms
    consumer.close()
    again = client.subscribe(
        topic, "batch-index", consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True
    )
    rest = _drain(again)
    assert sorted(m.data() for m in rest) == [b"b1", b"b2", b"b4", b"b5", b"b7", b"b8"]
    for message in rest:
        again.acknowledge(message)
    time.sleep(0.5)
    again.close()
    last = client.subscribe(topic, "batch-index", consumer_type=pulsar.ConsumerType.Shared)
    assert _drain(last, 1000) == []


@pytest.mark.parametrize(
    "kind", [pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared]
)
def test_small_receiver_queue_against_large_batches(client: pulsar.Client, kind: pulsar.ConsumerType) -> None:
    """Permits run out in the middle of a stored batch: the entry still goes to the consumer whole, so
    every message arrives once with its own id and every acknowledgement lands."""
    topic = _topic()
    consumer = client.subscribe(
        topic,
        "small-queue",
        consumer_type=kind,
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=3,
    )
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=50, batching_max_publish_delay_ms=50
    )
    n = 200
    for i in range(n):
        producer.send_async(f"q{i}".encode(), None)
    producer.flush()
    got = []
    ids = set()
    for _ in range(n):
        message = consumer.receive(10_000)
        got.append(message.data())
        mid = message.message_id()
        ids.add((mid.ledger_id(), mid.entry_id(), mid.batch_index()))
        consumer.acknowledge(message)
    assert sorted(got) == sorted(f"q{i}".encode() for i in range(n))
    assert len(ids) == n
    assert _drain(consumer, 800) == []
    time.sleep(0.5)
    consumer.close()
    again = client.subscribe(topic, "small-queue", consumer_type=kind)
    assert _drain(again, 1000) == []


@pytest.mark.parametrize("kind", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared])
def test_two_consumers_with_small_queues_share_large_batches(
    client: pulsar.Client, kind: pulsar.ConsumerType
) -> None:
    topic = _topic()
    consumers = [
        client.subscribe(
            topic,
            "two-small",
            consumer_type=kind,
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=2,
            consumer_name=f"c{n}",
        )
        for n in range(2)
    ]
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=40, batching_max_publish_delay_ms=50
    )
    n = 240
    for i in range(n):
        producer.send_async(f"k{i}".encode(), None, partition_key=f"key-{i % 10}")
    producer.flush()
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        for consumer in consumers:
            try:
                message = consumer.receive(100)
            except pulsar.Timeout:
                continue
            got.append(message.data())
            consumer.acknowledge(message)
    assert sorted(got) == sorted(f"k{i}".encode() for i in range(n))
    time.sleep(0.5)
    for consumer in consumers:
        assert _drain(consumer, 500) == []
        consumer.close()
    again = client.subscribe(topic, "two-small", consumer_type=kind)
    assert _drain(again, 1000) == []


# -- hostile commands on a raw connection --------------------------------------------------------------


def _raw(standalone: MagnetarProcess) -> socket.socket:
    sock = socket.create_connection((HOST, standalone.ready["brokerServicePort"]), timeout=10)
    sock.sendall(encode_frame(encode_connect("raw", 21)))
    _read_command(sock)  # CONNECTED
    return sock


def _read_command(sock: socket.socket) -> tuple[int, bytes]:
    head = _exactly(sock, 8)
    total, size = struct.unpack(">II", head)
    command = _exactly(sock, size)
    _exactly(sock, total - 4 - size)
    base = parse_message(command, "BaseCommand")
    kind = base.required_uint(1)
    sub = base.raw(kind)
    return kind, bytes(sub) if sub is not None else b""


def _exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def _pong(sock: socket.socket) -> None:
    sock.sendall(encode_frame(Writer().uint(1, CommandType.PING).data(CommandType.PING, b"").bytes()))
    kind, _ = _read_command(sock)
    assert kind == CommandType.PONG


def _message_id(ledger: int, entry: int, ack_set: list[int] | None = None) -> bytes:
    w = Writer().uint(1, ledger).uint(2, entry)
    for word in ack_set or []:
        w.sint(5, word)
    return w.bytes()


def test_hostile_consumer_commands_end_nothing(standalone: MagnetarProcess, client: pulsar.Client) -> None:
    sock = _raw(standalone)
    # REDELIVER and ACK for consumers this connection does not have, with forged ids: ignored
    for ledger, entry in [(2**63, 0), (2**64 - 1, 2**64 - 1), (2**63 - 1, 2**63 - 1), (5, 2**64 - 2)]:
        redeliver = Writer().uint(1, 77).data(2, _message_id(ledger, entry))
        kind = CommandType.REDELIVER_UNACKNOWLEDGED_MESSAGES
        sock.sendall(encode_frame(Writer().uint(1, kind).data(kind, redeliver.bytes()).bytes()))
        ack = Writer().uint(1, 77).uint(2, 0).data(3, _message_id(ledger, entry, [0] * 2000))
        sock.sendall(
            encode_frame(Writer().uint(1, CommandType.ACK).data(CommandType.ACK, ack.bytes()).bytes())
        )
    _pong(sock)
    # SEEK and GET_LAST_MESSAGE_ID for an unknown consumer: ERROR MetadataError on that request
    sock.sendall(encode_frame(encode_seek(77, 5, message_id=(2**63, 2**64 - 1))))
    kind, body = _read_command(sock)
    error = parse_message(body, "CommandError")
    assert (kind, error.uint(1), error.uint(2)) == (CommandType.ERROR, 5, 1)
    sock.sendall(encode_frame(encode_get_last_message_id(77, 6)))
    kind, body = _read_command(sock)
    error = parse_message(body, "CommandError")
    assert (kind, error.uint(1), error.uint(2), error.string(3)) == (
        CommandType.ERROR,
        6,
        1,
        "Consumer not found",
    )
    _pong(sock)
    sock.close()
    assert standalone.is_running()
    producer = client.create_producer(_topic())
    assert producer.send(b"still serving") is not None


def _send(sock: socket.socket, kind: CommandType, body: Writer) -> None:
    sock.sendall(encode_frame(Writer().uint(1, kind).data(kind, body.bytes()).bytes()))


def test_hostile_commands_of_a_subscribed_consumer(
    standalone: MagnetarProcess, client: pulsar.Client
) -> None:
    topic = _topic()
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=20)
    for i in range(5):
        producer.send_async(f"h{i}".encode(), None)
    producer.flush()
    sock = _raw(standalone)
    subscribe = Writer().string(1, topic).string(2, "raw").uint(3, 0).uint(4, 1).uint(5, 1).uint(13, 1)
    _send(sock, CommandType.SUBSCRIBE, subscribe)
    assert _read_command(sock)[0] == CommandType.SUCCESS
    _send(sock, CommandType.FLOW, Writer().uint(1, 1).uint(2, 1000))
    kind, body = _read_command(sock)
    assert kind == CommandType.MESSAGE
    message = parse_message(body, "CommandMessage")
    held = message.required_message(2, "MessageIdData")
    ledger, entry = held.uint(1), held.uint(2)
    assert not message.has(3)  # first delivery: no redelivery count
    # an ack_set far longer than the batch, and acks of forged ids: ignored
    _send(
        sock, CommandType.ACK, Writer().uint(1, 1).uint(2, 0).data(3, _message_id(ledger, entry, [0] * 3000))
    )
    for forged_ledger, forged_entry in [(2**63, 0), (2**64 - 1, 2**64 - 1), (ledger, 2**63 - 1)]:
        _send(
            sock,
            CommandType.ACK,
            Writer().uint(1, 1).uint(2, 0).data(3, _message_id(forged_ledger, forged_entry)),
        )
        _send(
            sock,
            CommandType.ACK,
            Writer().uint(1, 1).uint(2, 1).data(3, _message_id(forged_ledger, forged_entry)),
        )
    # redelivery of ids this consumer does not hold (Exclusive: the ids are not read; everything held comes
    # back) - the entry it holds comes back, counted once
    redeliver = Writer().uint(1, 1).data(2, _message_id(2**63, 7)).data(2, _message_id(ledger, entry + 1))
    _send(sock, CommandType.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliver)
    kind, body = _read_command(sock)
    assert kind == CommandType.MESSAGE
    again = parse_message(body, "CommandMessage")
    assert again.uint(3) == 1
    _send(sock, CommandType.GET_LAST_MESSAGE_ID, Writer().uint(1, 1).uint(2, 2))
    kind, body = _read_command(sock)
    assert kind == CommandType.GET_LAST_MESSAGE_ID_RESPONSE
    last = parse_message(body, "Response").required_message(1, "MessageIdData")
    assert (last.uint(1), last.uint(2), last.int32(4)) == (ledger, entry, 4)
    sock.sendall(encode_frame(encode_seek(1, 3, message_id=(-5, 3))))
    kind, body = _read_command(sock)
    error = parse_message(body, "CommandError")
    assert (kind, error.uint(1), error.uint(2)) == (CommandType.ERROR, 3, 1)
    assert "-5:3" in error.string(3)
    sock.sendall(encode_frame(encode_seek(1, 4)))  # neither an id nor a time
    kind, body = _read_command(sock)
    assert (kind, parse_message(body, "CommandError").uint(2)) == (CommandType.ERROR, 1)
    sock.sendall(encode_frame(encode_seek(1, 5, message_id=(2**63 - 1, 2**63 - 1))))  # the latest
    assert _read_command(sock)[0] == CommandType.CLOSE_CONSUMER
    kind, body = _read_command(sock)
    assert (kind, parse_message(body, "CommandSuccess").uint(1)) == (CommandType.SUCCESS, 5)
    _pong(sock)
    sock.close()
    # the subscription was reset to the end: a consumer of it gets only what comes next
    consumer = client.subscribe(topic, "raw")
    producer.send(b"next")
    assert consumer.receive(10_000).data() == b"next"

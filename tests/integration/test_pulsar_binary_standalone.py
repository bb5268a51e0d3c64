"""Pulsar's binary protocol against a real ``magnetar standalone``, driven by the official ``pulsar-client``
(a client nobody here wrote): produce and consume with exclusive and shared subscriptions, client-side
batching, acknowledgements that hold across a re-subscribe, interoperation with the WebSocket JSON API, and
malformed frames that end their own connection only."""

from __future__ import annotations

import base64
import json
import socket
import struct
import uuid
from collections.abc import Iterator

import pulsar
import pytest
import websocket
from fixtures.processes import MagnetarProcess
from fixtures.pulsar_raw import broker_closed
from fixtures.standalone_process import official_client, running_standalone

from magnetar.broker.protocols.pulsar_binary.encoders import (
    encode_connect,
)
from magnetar.broker.protocols.pulsar_binary.framing import encode_frame

pytestmark = [pytest.mark.processes]

HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MagnetarProcess]:
    with running_standalone(tmp_path_factory.mktemp("binary")) as process:
        yield process


@pytest.fixture
def client(standalone: MagnetarProcess) -> Iterator[pulsar.Client]:
    with official_client(standalone) as c:
        yield c


def _topic() -> str:
    return f"persistent://public/default/bin-{uuid.uuid4().hex[:8]}"


def test_ready_line_names_the_binary_port(standalone: MagnetarProcess) -> None:
    port = standalone.ready["brokerServicePort"]
    assert port > 0
    assert standalone.ready["brokerUrl"] == f"pulsar://{HOST}:{port}"


@pytest.mark.parametrize("batching", [False, True])
def test_produce_and_consume_exclusive(client: pulsar.Client, batching: bool) -> None:
    topic = _topic()
    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_publish_delay_ms=5)
    n = 200
    for i in range(n):
        producer.send_async(f"m{i}".encode(), None, properties={"i": str(i)}, partition_key=f"k{i % 7}")
    producer.flush()
    got = []
    for _ in range(n):
        message = consumer.receive(10_000)
        got.append((message.data(), message.partition_key(), message.properties()))
        consumer.acknowledge(message)
    assert got == [(f"m{i}".encode(), f"k{i % 7}", {"i": str(i)}) for i in range(n)]


def test_shared_subscription_splits_and_delivers_everything_once(client: pulsar.Client) -> None:
    topic = _topic()
    shared = pulsar.ConsumerType.Shared
    first = client.subscribe(
        topic, "shared", consumer_type=shared, initial_position=pulsar.InitialPosition.Earliest
    )
    second = client.subscribe(topic, "shared", consumer_type=shared)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5)
    n = 300
    for i in range(n):
        producer.send_async(f"s{i}".encode(), None)
    producer.flush()
    seen: list[bytes] = []
    while len(seen) < n:
        for consumer in (first, second):
            try:
                message = consumer.receive(200)
            except pulsar.Timeout:
                continue
            seen.append(message.data())
            consumer.acknowledge(message)
    assert sorted(seen) == sorted(f"s{i}".encode() for i in range(n))


def test_acked_messages_are_not_redelivered_after_resubscribe(client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "durable", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=10, batching_max_publish_delay_ms=5
    )
    for i in range(50):
        producer.send_async(f"a{i}".encode(), None)
    producer.flush()
    for _ in range(30):
        consumer.acknowledge(consumer.receive(10_000))
    consumer.close()
    again = client.subscribe(topic, "durable")
    rest = []
    while True:
        try:
            message = again.receive(2_000)
        except pulsar.Timeout:
            break
        rest.append(message.data())
        again.acknowledge(message)
    # batches of 10: the first three were acknowledged whole, and none of their messages comes back
    assert rest == [f"a{i}".encode() for i in range(30, 50)]


def _ws(standalone: MagnetarProcess, path: str) -> websocket.WebSocket:
    return websocket.create_connection(f"ws://{HOST}:{standalone.ready['port']}/ws/v2/{path}", timeout=10)


def test_binary_to_websocket_and_back(standalone: MagnetarProcess, client: pulsar.Client) -> None:
    topic = _topic()
    short = topic.removeprefix("persistent://")
    ws_consumer = _ws(standalone, f"consumer/persistent/{short}/ws-sub?subscriptionInitialPosition=Earliest")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5)
    producer.send(b"from-binary", properties={"p": "1"}, partition_key="key-1")
    frame = json.loads(ws_consumer.recv())
    assert base64.b64decode(frame["payload"]) == b"from-binary"
    assert frame["key"] == "key-1"
    assert frame["properties"] == {"p": "1"}
    ws_consumer.send(json.dumps({"messageId": frame["messageId"]}))
    ws_consumer.close()

    binary_consumer = client.subscribe(topic, "bin-sub", initial_position=pulsar.InitialPosition.Earliest)
    binary_consumer.acknowledge(binary_consumer.receive(10_000))  # the binary producer's message
    ws_producer = _ws(standalone, f"producer/persistent/{short}")
    payload = base64.b64encode(b"from-websocket").decode()
    ws_producer.send(json.dumps({"payload": payload, "properties": {"q": "2"}, "key": "key-2"}))
    assert json.loads(ws_producer.recv())["result"] == "ok"
    ws_producer.close()
    message = binary_consumer.receive(10_000)
    assert message.data() == b"from-websocket"
    assert message.partition_key() == "key-2"
    assert message.properties() == {"q": "2"}


def _raw(standalone: MagnetarProcess) -> socket.socket:
    return socket.create_connection((HOST, standalone.ready["brokerServicePort"]), timeout=10)


@pytest.mark.parametrize(
    "garbage",
    [
        bytes(range(256)) * 4,  # random bytes
        struct.pack(">I", 2**31) + b"\x00" * 8,  # a forged, "negative" size
        struct.pack(">II", 20, 200) + b"\x00" * 16,  # a command larger than its frame
        encode_frame(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"),  # a command that is no protobuf
    ],
)
def test_malformed_frames_close_that_connection_only(
    standalone: MagnetarProcess, client: pulsar.Client, garbage: bytes
) -> None:
    bystander = _raw(standalone)
    bystander.sendall(encode_frame(encode_connect("raw", 21)))
    assert bystander.recv(4096)  # CONNECTED
    sock = _raw(standalone)
    sock.sendall(encode_frame(encode_connect("raw", 21)) + garbage)
    assert broker_closed(sock)
    truncated = _raw(standalone)
    truncated.sendall(encode_frame(encode_connect("raw", 21))[:7])
    truncated.close()
    assert standalone.is_running()
    bystander.sendall(encode_frame(bytes.fromhex("08129201 00".replace(" ", ""))))  # PING
    assert bystander.recv(4096)  # PONG: the other connection goes on
    bystander.close()
    topic = _topic()
    producer = client.create_producer(topic)
    assert producer.send(b"still serving") is not None

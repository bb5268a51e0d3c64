"""The producer side of Pulsar's binary protocol against a real ``magnetar standalone``, with the official
``pulsar-client``: compressed sends (each codec, batching on and off, read back by binary and WebSocket
consumers), and the hostile cases a raw client can send (decompression bombs, lying sizes, garbage, unknown
codecs) answered with SEND_ERROR on that send only."""

from __future__ import annotations

import base64
import json
import socket
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import cramjam
import lz4.block
import pulsar
import pytest
import websocket
from fixtures.processes import MagnetarProcess, ProcessGroup
from fixtures.pulsar_raw import RawClient

from magnetar.broker.protocols.pulsar_binary.commands import (
    CommandType,
    MessageMetadata,
    ServerError,
    SingleMessage,
    encode_batch,
)

pytestmark = [pytest.mark.processes]

HOST = "127.0.0.1"
LIMIT = 5 * 1024 * 1024


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MagnetarProcess]:
    tmp: Path = tmp_path_factory.mktemp("binary-produce")
    group = ProcessGroup(tmp)
    args = [
        "standalone", "--data-dir", str(tmp / "data"), "--http-port", "0", "--broker-service-port", "0",
        "--bookie-port", str(free_port()),
    ]  # fmt: skip
    process = MagnetarProcess("standalone", args, tmp)
    group.processes.append(process)
    try:
        process.start(timeout_s=60)
        yield process
    finally:
        group.stop_all()


@pytest.fixture
def client(standalone: MagnetarProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.ready["brokerUrl"], operation_timeout_seconds=15)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def raw(standalone: MagnetarProcess) -> Iterator[RawClient]:
    r = RawClient(HOST, standalone.ready["brokerServicePort"])
    try:
        yield r
    finally:
        r.close()


def _topic(prefix: str = "prod") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


CODECS = {
    "LZ4": pulsar.CompressionType.LZ4,
    "ZLib": pulsar.CompressionType.ZLib,
    "ZSTD": pulsar.CompressionType.ZSTD,
    "SNAPPY": pulsar.CompressionType.SNAPPY,
}


@pytest.mark.parametrize("batching", [False, True])
@pytest.mark.parametrize("codec", list(CODECS))
def test_compressed_sends_are_read_back(client: pulsar.Client, codec: str, batching: bool) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic,
        compression_type=CODECS[codec],
        batching_enabled=batching,
        batching_max_publish_delay_ms=5,
    )
    n = 100
    payloads = [(f"message {i} " * (1 + i % 40)).encode() for i in range(n)]
    for i, payload in enumerate(payloads):
        producer.send_async(payload, None, properties={"i": str(i)}, partition_key=f"k{i % 5}")
    producer.flush()
    got = []
    for _ in range(n):
        message = consumer.receive(10_000)
        got.append((message.data(), message.partition_key(), message.properties()))
        consumer.acknowledge(message)
    assert got == [(payloads[i], f"k{i % 5}", {"i": str(i)}) for i in range(n)]


def test_a_websocket_consumer_reads_a_compressed_binary_batch(
    standalone: MagnetarProcess, client: pulsar.Client
) -> None:
    topic = _topic()
    short = topic.removeprefix("persistent://")
    ws = websocket.create_connection(
        f"ws://{HOST}:{standalone.ready['port']}/ws/v2/consumer/persistent/{short}/ws-sub"
        "?subscriptionInitialPosition=Earliest",
        timeout=10,
    )
    producer = client.create_producer(
        topic,
        compression_type=pulsar.CompressionType.ZSTD,
        batching_enabled=True,
        batching_max_messages=10,
        batching_max_publish_delay_ms=50,
    )
    for i in range(10):
        producer.send_async(
            b"z" * 500 + str(i).encode(), None, properties={"n": str(i)}, partition_key=f"key{i}"
        )
    producer.flush()
    seen = []
    for _ in range(10):
        frame = json.loads(ws.recv())
        seen.append((base64.b64decode(frame["payload"]), frame["key"], frame["properties"]))
        ws.send(json.dumps({"messageId": frame["messageId"]}))
    ws.close()
    assert seen == [(b"z" * 500 + str(i).encode(), f"key{i}", {"n": str(i)}) for i in range(10)]


def _compress(codec: int, data: bytes) -> bytes:
    if codec == 1:
        return bytes(lz4.block.compress(data, store_size=False))
    if codec == 2:
        return zlib.compress(data)
    if codec == 3:
        return bytes(cramjam.zstd.compress(data))
    return bytes(cramjam.snappy.compress_raw(data))


def _expect_send_error(raw: RawClient, sequence_id: int, error: ServerError, text: str) -> None:
    kind, fields = raw.read()
    assert kind == CommandType.SEND_ERROR, kind
    assert fields.uint(2) == sequence_id
    assert fields.uint(3) == error
    assert text in fields.string(4)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_hostile_compressed_sends_fail_alone(standalone: MagnetarProcess, raw: RawClient, codec: int) -> None:
    topic = _topic("hostile")
    kind, _ = raw.producer(topic, 1, 1, name=f"raw-{codec}")
    assert kind == CommandType.PRODUCER_SUCCESS
    name = f"raw-{codec}"
    bomb = _compress(codec, b"\0" * (LIMIT + 1024))
    # a bomb that says how big it is: over the maximum message size
    raw.send(1, 0, MessageMetadata(name, 0, 1, compression=codec, uncompressed_size=LIMIT + 1024), bomb)
    _expect_send_error(raw, 0, ServerError.MetadataError, "more than the maximum message size")
    # a bomb that lies: decompression stops at the bound
    raw.send(1, 1, MessageMetadata(name, 1, 1, compression=codec, uncompressed_size=1000), bomb)
    _expect_send_error(raw, 1, ServerError.MetadataError, "uncompressed_size")
    good = b"hello compressed world" * 20
    # a size off by one
    raw.send(
        1,
        2,
        MessageMetadata(name, 2, 1, compression=codec, uncompressed_size=len(good) + 1),
        _compress(codec, good),
    )
    _expect_send_error(raw, 2, ServerError.MetadataError, "uncompressed_size")
    # garbage bytes
    raw.send(1, 3, MessageMetadata(name, 3, 1, compression=codec, uncompressed_size=64), bytes(range(64)))
    _expect_send_error(raw, 3, ServerError.MetadataError, "payload")
    # a batch that decompresses fine but does not hold what it claims
    batch = encode_batch([SingleMessage(b"one")])
    meta = MessageMetadata(
        name, 4, 1, compression=codec, uncompressed_size=len(batch), num_messages_in_batch=3
    )
    raw.send(1, 4, meta, _compress(codec, batch))
    _expect_send_error(raw, 4, ServerError.MetadataError, "Invalid batch")
    # the same connection and producer go on
    raw.send(
        1,
        5,
        MessageMetadata(name, 5, 1, compression=codec, uncompressed_size=len(good)),
        _compress(codec, good),
    )
    kind, fields = raw.read()
    assert kind == CommandType.SEND_RECEIPT
    assert fields.uint(2) == 5
    assert standalone.is_running()


@pytest.mark.parametrize("number", [5, 200, 2**32 - 1])
def test_an_unknown_codec_is_refused_by_name(raw: RawClient, number: int) -> None:
    kind, _ = raw.producer(_topic("codec"), 1, 1, name="raw-codec")
    assert kind == CommandType.PRODUCER_SUCCESS
    raw.send(1, 0, MessageMetadata("raw-codec", 0, 1, compression=number, uncompressed_size=3), b"abc")
    _expect_send_error(raw, 0, ServerError.NotAllowedError, f"unknown compression type {number}")

"""Chunked messages over Pulsar's binary protocol against a real ``magnetar standalone`` whose
``max_message_size`` and entry bound are lowered for this module (1 MiB: a 5 MiB payload goes as 6 chunks):
the official ``pulsar-client`` publishes with chunking and an official consumer reassembles byte-identical
messages; chunks of two producers interleave; chunked and whole messages mix; forged chunk fields from a raw
client are answered SEND_ERROR on that send only, and so is a SEND too large for an entry; without chunking a
payload beyond the maximum is the client's ``MessageTooBig``; a WebSocket consumer and the admin API see each
chunk as a message of its own."""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Iterator

import httpx
import pulsar
import pytest
import websocket
from fixtures.processes import MagnetarProcess
from fixtures.pulsar_raw import RawClient
from fixtures.standalone_process import official_client, running_standalone

from magnetar.broker.protocols.pulsar_binary.commands import CommandType, CompressionType, ServerError
from magnetar.broker.protocols.pulsar_binary.metadata import MessageMetadata
from magnetar.broker.wire import ChunkInfo

pytestmark = [pytest.mark.processes]

HOST = "127.0.0.1"
MAX_MESSAGE_SIZE = 1024 * 1024
"""This module's ``max_message_size`` (bytes): small, so that chunking splits 5 MiB into several chunks."""
ENTRY_BYTES_MAX = 1024 * 1024
"""This module's ``entry_payload_bytes_max`` (bytes; the WebSocket frame bound lowered with it, as the size
chain asks), so that a raw SEND within the frame bound can still be too large for an entry."""
ADVERTISED = ENTRY_BYTES_MAX - 10 - 8 * 1024
"""What CONNECTED announces: the entry bound less the index prefix and the room for the entry's fields."""
CHUNKED_MAX = 16 * 1024 * 1024
"""This module's ``chunked_message_bytes_max`` (bytes)."""
BIG = 5 * 1024 * 1024


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MagnetarProcess]:
    env = {
        "MAGNETAR_MAX_MESSAGE_SIZE": str(MAX_MESSAGE_SIZE),
        "MAGNETAR_ENTRY_PAYLOAD_BYTES_MAX": str(ENTRY_BYTES_MAX),
        "MAGNETAR_WS_FRAME_BYTES_MAX": str(ENTRY_BYTES_MAX + 1024),
        "MAGNETAR_CHUNKED_MESSAGE_BYTES_MAX": str(CHUNKED_MAX),
    }
    with running_standalone(tmp_path_factory.mktemp("binary-chunks"), env=env) as process:
        yield process


@pytest.fixture(scope="module")
def client(standalone: MagnetarProcess) -> Iterator[pulsar.Client]:
    with official_client(standalone) as c:
        yield c


@pytest.fixture
def raw(standalone: MagnetarProcess) -> Iterator[RawClient]:
    r = RawClient(HOST, standalone.ready["brokerServicePort"])
    try:
        yield r
    finally:
        r.close()


def _topic(prefix: str = "chunks") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def _payload(seed: int, size: int) -> bytes:
    return (seed.to_bytes(4, "big") + os.urandom(60)) * (size // 64) + b"x" * (size % 64)


def _chunking_producer(client: pulsar.Client, topic: str) -> pulsar.Producer:
    return client.create_producer(topic, chunking_enabled=True, batching_enabled=False)


def _admin(standalone: MagnetarProcess) -> str:
    return f"http://{HOST}:{standalone.ready['port']}/admin/v2/persistent"


def test_a_chunked_message_is_received_whole(standalone: MagnetarProcess, client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "sub")
    producer = _chunking_producer(client, topic)
    payload = _payload(1, BIG)
    producer.send(payload, properties={"k": "v"}, partition_key="key-1")
    message = consumer.receive(timeout_millis=30_000)
    assert message.data() == payload
    assert message.properties() == {"k": "v"}
    assert message.partition_key() == "key-1"
    consumer.acknowledge(message)
    stats = httpx.get(f"{_admin(standalone)}/{topic.removeprefix('persistent://')}/stats", timeout=10).json()
    chunks = -(-BIG // ADVERTISED)
    assert stats["msgInCounter"] >= chunks  # each chunk is a message of its own on the broker
    producer.close()
    consumer.close()


def test_two_producers_interleave_chunked_messages(client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "sub")
    first, second = _chunking_producer(client, topic), _chunking_producer(client, topic)
    sent = {}
    for i in range(2):
        for n, producer in enumerate((first, second)):
            payload = _payload(10 * i + n, 3 * MAX_MESSAGE_SIZE + 1000 * n + i)
            sent[payload[:4]] = payload
            producer.send_async(payload, None)
    first.flush()
    second.flush()
    received = {}
    for _ in range(4):
        message = consumer.receive(timeout_millis=30_000)
        received[message.data()[:4]] = message.data()
        consumer.acknowledge(message)
    assert received == sent
    first.close()
    second.close()
    consumer.close()


def test_chunked_and_whole_messages_mix(client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "sub")
    producer = _chunking_producer(client, topic)
    payloads = [
        b"small-0",
        _payload(2, 2 * MAX_MESSAGE_SIZE + 7),
        b"small-1",
        _payload(3, MAX_MESSAGE_SIZE * 4),
    ]
    for payload in payloads:
        producer.send_async(payload, None)
    producer.flush()
    received = []
    for _ in payloads:
        message = consumer.receive(timeout_millis=30_000)
        received.append(message.data())
        consumer.acknowledge(message)
    assert received == payloads
    producer.close()
    consumer.close()


def test_without_chunking_a_large_payload_is_message_too_big(client: pulsar.Client) -> None:
    producer = client.create_producer(_topic(), batching_enabled=False)
    with pytest.raises(pulsar.MessageTooBig):
        producer.send(b"x" * (ADVERTISED + 1))
    producer.send(b"still serving")
    producer.close()


def test_a_websocket_consumer_and_a_peek_see_each_chunk(
    standalone: MagnetarProcess, client: pulsar.Client
) -> None:
    topic = _topic()
    short = topic.removeprefix("persistent://")
    ws = websocket.create_connection(
        f"ws://{HOST}:{standalone.ready['port']}/ws/v2/consumer/persistent/{short}/ws-sub"
        "?subscriptionInitialPosition=Earliest",
        timeout=10,
    )
    client.subscribe(topic, "peek-sub").close()
    producer = _chunking_producer(client, topic)
    payload = _payload(4, 2 * MAX_MESSAGE_SIZE + 100)
    producer.send(payload)
    pieces = []
    for _ in range(3):
        frame = json.loads(ws.recv())
        pieces.append(base64.b64decode(frame["payload"]))
        ws.send(json.dumps({"messageId": frame["messageId"]}))
    ws.close()
    assert b"".join(pieces) == payload
    assert all(0 < len(piece) <= MAX_MESSAGE_SIZE for piece in pieces)
    for position, piece in enumerate(pieces):
        url = f"{_admin(standalone)}/{short}/subscription/peek-sub/position/{position + 1}"
        peek = httpx.get(url, timeout=10)
        assert peek.status_code == 200, peek.text
        assert peek.content == piece
        assert peek.headers["X-Pulsar-chunk-id"] == str(position)
        assert peek.headers["X-Pulsar-num-chunks-from-msg"] == "3"
        assert peek.headers["X-Pulsar-total-chunk-msg-size"] == str(len(payload))
        assert peek.headers["X-Pulsar-uuid"]
        assert "X-Pulsar-num-batch-message" not in peek.headers
    producer.close()


def _chunk_meta(sequence_id: int, chunk: ChunkInfo, **fields: object) -> MessageMetadata:
    return MessageMetadata("raw", sequence_id, 1, chunk=chunk, **fields)  # type: ignore[arg-type]


FORGED = [
    (ChunkInfo("raw-0", 3, 3, 100), "chunk_id 3 out of range"),
    (ChunkInfo("raw-0", 5, 2, 100), "chunk_id 5 out of range"),
    (ChunkInfo("raw-0", -1, 2, 100), "chunk_id -1 out of range"),
    (ChunkInfo("raw-0", 0, -1, 100), "num_chunks_from_msg -1 out of range"),
    (ChunkInfo("raw-0", 0, 0, 100), "num_chunks_from_msg 0 out of range"),
    (ChunkInfo("raw-0", 0, 2, -5), "total_chunk_msg_size -5 out of range"),
    (ChunkInfo("raw-0", 0, 2, CHUNKED_MAX + 1), f"total_chunk_msg_size {CHUNKED_MAX + 1} out of range"),
    (ChunkInfo("raw-0", 0, 2, 2**31 - 1), "out of range"),
    (ChunkInfo("raw-0", 0, 2, 2**63 - 1), "does not fit 32 bits"),
    (ChunkInfo("raw-0", 2**63 - 1, 2, 100), "does not fit 32 bits"),
    (ChunkInfo("raw-0", 0, 2**40, 100), "does not fit 32 bits"),
    (ChunkInfo("raw-0", 0, 2, 3), "less than this chunk's"),
    (ChunkInfo("raw-0", 0, 200, 100), "than 200 chunks of one byte"),
    (ChunkInfo("", 0, 2, 100), "chunk uuid of 0 bytes"),
    (ChunkInfo("u" * 3000, 0, 2, 100), "chunk uuid of 3000 bytes"),
]


@pytest.mark.parametrize(("chunk", "text"), FORGED)
def test_forged_chunks_are_send_errors(raw: RawClient, chunk: ChunkInfo, text: str) -> None:
    topic = _topic("forged")
    kind, _ = raw.producer(topic, 1, 1, name="raw")
    assert kind == CommandType.PRODUCER_SUCCESS
    raw.send(1, 0, _chunk_meta(0, chunk), b"0123456789")
    kind, fields = raw.read()
    assert kind == CommandType.SEND_ERROR, kind
    assert fields.uint(3) == ServerError.MetadataError
    assert text in fields.string(4), fields.string(4)
    # the connection and the producer go on: a valid chunk and a whole message are stored
    raw.send(1, 1, _chunk_meta(1, ChunkInfo("raw-1", 0, 2, 20)), b"0123456789")
    kind, fields = raw.read()
    assert kind == CommandType.SEND_RECEIPT, (kind, fields.string(4))
    raw.send(1, 2, MessageMetadata("raw", 2, 1), b"whole")
    kind, _ = raw.read()
    assert kind == CommandType.SEND_RECEIPT


def test_a_send_too_large_for_an_entry_is_refused(raw: RawClient) -> None:
    """A forged client ignores CONNECTED's maximum: a payload within the frame bound that no entry can hold
    is a SEND_ERROR (it would be refused by the managed ledger), whole or as a chunk."""
    kind, _ = raw.producer(_topic("forged"), 1, 1, name="raw")
    assert kind == CommandType.PRODUCER_SUCCESS
    raw.send(1, 0, MessageMetadata("raw", 0, 1), b"y" * (ENTRY_BYTES_MAX + 1024))
    kind, fields = raw.read()
    assert (kind, fields.uint(3)) == (CommandType.SEND_ERROR, ServerError.NotAllowedError)
    assert "Exceed maximum message size" in fields.string(4)
    chunk = ChunkInfo("raw-1", 0, 2, 3 * ENTRY_BYTES_MAX)
    raw.send(1, 1, _chunk_meta(1, chunk), b"y" * (ENTRY_BYTES_MAX + 1024))
    kind, fields = raw.read()
    assert (kind, fields.uint(3)) == (CommandType.SEND_ERROR, ServerError.NotAllowedError)
    raw.send(1, 2, MessageMetadata("raw", 2, 1), b"y" * ADVERTISED)
    kind, _ = raw.read()
    assert kind == CommandType.SEND_RECEIPT


def test_a_compressed_or_batched_chunk_is_refused(raw: RawClient) -> None:
    kind, _ = raw.producer(_topic("forged"), 1, 1, name="raw")
    assert kind == CommandType.PRODUCER_SUCCESS
    chunk = ChunkInfo("raw-0", 0, 2, 100)
    raw.send(1, 0, _chunk_meta(0, chunk, compression=CompressionType.ZLIB, uncompressed_size=50), b"zz")
    kind, fields = raw.read()
    assert (kind, fields.uint(3)) == (CommandType.SEND_ERROR, ServerError.NotAllowedError)
    assert "compressed chunked messages" in fields.string(4)
    raw.send(1, 1, _chunk_meta(1, chunk, num_messages_in_batch=1), b"zz")
    kind, fields = raw.read()
    assert (kind, fields.uint(3)) == (CommandType.SEND_ERROR, ServerError.MetadataError)
    assert "a chunk cannot be a batch" in fields.string(4)


def test_the_broker_serves_on_after_forged_chunks(client: pulsar.Client) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "sub")
    producer = _chunking_producer(client, topic)
    producer.send(b"after")
    assert consumer.receive(timeout_millis=10_000).data() == b"after"
    producer.close()
    consumer.close()

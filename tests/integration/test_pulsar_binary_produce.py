"""The producer side of Pulsar's binary protocol against a real ``magnetar standalone``, with the official
``pulsar-client``: compressed sends (each codec, batching on and off, read back by binary and WebSocket
consumers), and the hostile cases a raw client can send (decompression bombs, lying sizes, garbage, unknown
codecs) answered with SEND_ERROR on that send only; producer access modes (Exclusive, WaitForExclusive,
ExclusiveWithFencing, the topic epoch) and producer names, as Pulsar's broker answers them; topic discovery
for pattern consumers (GET_TOPICS_OF_NAMESPACE: modes, patterns, hash) and its hostile requests."""

from __future__ import annotations

import base64
import json
import re
import threading
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import _pulsar
import cramjam
import httpx
import lz4.block
import pulsar
import pytest
import websocket
from fixtures.auth import TokenKeys
from fixtures.processes import MagnetarProcess
from fixtures.pulsar_raw import RawClient, command
from fixtures.standalone_process import official_client, running_standalone

from magnetar.broker.protocols.pulsar_binary.commands import (
    CommandType,
    ServerError,
)
from magnetar.broker.protocols.pulsar_binary.metadata import (
    MessageMetadata,
    SingleMessage,
    encode_batch,
)
from magnetar.broker.protocols.pulsar_binary.protobuf import Fields, Writer
from magnetar.broker.protocols.pulsar_binary.topic_list import topics_hash

pytestmark = [pytest.mark.processes]

HOST = "127.0.0.1"
LIMIT = 5 * 1024 * 1024


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MagnetarProcess]:
    with running_standalone(tmp_path_factory.mktemp("binary-produce")) as process:
        yield process


@pytest.fixture
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


# -- producer access modes and names ------------------------------------------------------------------

Mode = pulsar.ProducerAccessMode


def test_an_exclusive_producer_keeps_the_topic(client: pulsar.Client) -> None:
    topic = _topic("excl")
    owner = client.create_producer(topic, access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)  # Shared
    owner.send(b"mine")
    owner.close()
    successor = client.create_producer(topic, access_mode=Mode.Exclusive)  # free again
    successor.send(b"next")
    successor.close()


def test_exclusive_is_refused_while_shared_producers_publish(client: pulsar.Client) -> None:
    topic = _topic("excl-shared")
    shared = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=Mode.Exclusive)
    shared.send(b"still shared")


def test_wait_for_exclusive_gets_the_topic_when_it_is_free(client: pulsar.Client) -> None:
    topic = _topic("wait")
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    owner = client.create_producer(topic, access_mode=Mode.Exclusive)
    created: list[pulsar.Producer] = []
    waiter = threading.Thread(
        target=lambda: created.append(client.create_producer(topic, access_mode=Mode.WaitForExclusive))
    )
    waiter.start()
    waiter.join(1.0)
    assert waiter.is_alive()  # queued: the topic is taken
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)  # a Shared producer is refused while one waits
    owner.send(b"first")
    owner.close()
    waiter.join(15)
    assert created
    created[0].send(b"second")
    assert [consumer.receive(10_000).data() for _ in range(2)] == [b"first", b"second"]


def test_exclusive_with_fencing_takes_the_topic(client: pulsar.Client) -> None:
    topic = _topic("fence")
    old = client.create_producer(topic, access_mode=Mode.Exclusive, send_timeout_millis=5_000)
    old.send(b"before")
    new = client.create_producer(topic, access_mode=Mode.ExclusiveWithFencing)
    new.send(b"after")
    with pytest.raises(pulsar.PulsarException):
        old.send(b"fenced")  # the old producer was fenced out
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=Mode.Exclusive)


def test_a_producer_name_in_use_is_refused(client: pulsar.Client) -> None:
    topic = _topic("names")
    first = client.create_producer(topic, producer_name="the-one")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="the-one")
    first.close()
    again = client.create_producer(topic, producer_name="the-one")
    assert again.producer_name() == "the-one"
    assert again.last_sequence_id() == -1  # no deduplication: the broker keeps no sequence ids


def test_hostile_producer_requests(raw: RawClient) -> None:
    topic = _topic("raw-modes")
    for request_id, mode in enumerate([4, 99, 2**32], start=1):
        kind, fields = raw.producer(topic, request_id, request_id, access_mode=mode)
        assert kind == CommandType.ERROR
        assert fields.uint(2) == ServerError.NotAllowedError
        assert f"unknown producer access mode {mode}" in fields.string(3)
    for request_id, epoch in [(10, 2**63), (11, 2**64 - 1)]:
        kind, fields = raw.producer(topic, request_id, request_id, access_mode=1, topic_epoch=epoch)
        assert kind == CommandType.ERROR
        assert "topic_epoch" in fields.string(3)
    # an exclusive producer gets epoch 0; one that brings an older epoch than the topic's is fenced
    kind, fields = raw.producer(topic, 20, 20, name="a", access_mode=1)
    assert kind == CommandType.PRODUCER_SUCCESS
    assert fields.uint(5) == 0
    raw.send_command(command(CommandType.CLOSE_PRODUCER, Writer().uint(1, 20).uint(2, 21)))
    assert raw.read()[0] == CommandType.SUCCESS
    kind, fields = raw.producer(topic, 22, 22, name="b", access_mode=1)
    assert fields.uint(5) == 1
    raw.send_command(command(CommandType.CLOSE_PRODUCER, Writer().uint(1, 22).uint(2, 23)))
    assert raw.read()[0] == CommandType.SUCCESS
    kind, fields = raw.producer(topic, 24, 24, name="a", access_mode=1, topic_epoch=0)
    assert kind == CommandType.ERROR
    assert fields.uint(2) == ServerError.ProducerFenced
    assert "Topic epoch has already moved" in fields.string(3)
    # a waiting producer queued, told so, and leaving the line when its client closes it
    kind, _ = raw.producer(topic, 30, 30, name="holder", access_mode=1)
    assert kind == CommandType.PRODUCER_SUCCESS
    kind, fields = raw.producer(topic, 31, 31, name="waiter", access_mode=2)
    assert kind == CommandType.PRODUCER_SUCCESS
    assert not fields.boolean(6, True)  # producer_ready false: queued
    kind, fields = raw.producer(topic, 31, 32, name="waiter", access_mode=2)  # the same id again
    assert kind == CommandType.ERROR
    assert fields.uint(2) == ServerError.ServiceNotReady
    raw.send_command(command(CommandType.CLOSE_PRODUCER, Writer().uint(1, 31).uint(2, 33)))
    assert raw.read()[0] == CommandType.SUCCESS
    raw.send_command(command(CommandType.CLOSE_PRODUCER, Writer().uint(1, 30).uint(2, 34)))
    assert raw.read()[0] == CommandType.SUCCESS
    kind, fields = raw.producer(topic, 35, 35, name="c", access_mode=1)  # nobody is left waiting
    assert kind == CommandType.PRODUCER_SUCCESS
    assert fields.uint(5) == 3


# -- topic discovery (GET_TOPICS_OF_NAMESPACE) --------------------------------------------------------


def test_a_pattern_consumer_receives_from_matching_topics_old_and_new(
    client: pulsar.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Python wrapper (3.13) checks pattern_auto_discovery_period but never passes it on: the C++ core
    # would poll every 60 s. Its configuration is given the period here, as the wrapper means to.
    original = _pulsar.ConsumerConfiguration

    def configuration() -> _pulsar.ConsumerConfiguration:
        conf = original()
        conf.pattern_auto_discovery_period(1)
        return conf

    monkeypatch.setattr(_pulsar, "ConsumerConfiguration", configuration)
    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    first = client.create_producer(f"persistent://public/default/{prefix}-one")
    other = client.create_producer(f"persistent://public/default/other-{prefix}")
    consumer = client.subscribe(
        re.compile(f"persistent://public/default/{prefix}-.*"),
        "pattern-sub",
        initial_position=pulsar.InitialPosition.Earliest,
        pattern_auto_discovery_period=1,
    )
    first.send(b"one")
    other.send(b"not for the pattern")
    message = consumer.receive(10_000)
    assert message.data() == b"one"
    consumer.acknowledge(message)
    later = client.create_producer(f"persistent://public/default/{prefix}-two")  # created after subscribing
    later.send(b"two")
    message = consumer.receive(15_000)  # found by the consumer's next poll
    assert message.data() == b"two"
    assert message.topic_name() == f"persistent://public/default/{prefix}-two"
    consumer.acknowledge(message)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(1_500)  # nothing from the topic that does not match


def _topics_request(
    raw: RawClient,
    request_id: int,
    namespace: str,
    mode: int | None = None,
    pattern: str | None = None,
    digest: str | None = None,
) -> tuple[int, Fields]:
    w = Writer().uint(1, request_id).string(2, namespace)
    if mode is not None:
        w.uint(3, mode)
    if pattern is not None:
        w.string(4, pattern)
    if digest is not None:
        w.string(5, digest)
    raw.send_command(command(CommandType.GET_TOPICS_OF_NAMESPACE, w))
    return raw.read()


def _listed(fields: Fields) -> list[str]:
    return fields.repeated_strings(2)


def test_topics_of_a_namespace_by_mode_pattern_and_hash(client: pulsar.Client, raw: RawClient) -> None:
    prefix = f"list-{uuid.uuid4().hex[:8]}"
    persistent = f"persistent://public/default/{prefix}-p"
    non_persistent = f"non-persistent://public/default/{prefix}-np"
    keep = [client.create_producer(persistent), client.create_producer(non_persistent)]
    kind, fields = _topics_request(raw, 1, "public/default")  # mode PERSISTENT by default
    assert kind == CommandType.GET_TOPICS_OF_NAMESPACE_RESPONSE
    assert persistent in _listed(fields)
    assert non_persistent not in _listed(fields)
    assert not fields.boolean(3, True)  # not filtered: no pattern
    _, fields = _topics_request(raw, 2, "public/default", mode=1)
    assert non_persistent in _listed(fields)
    assert persistent not in _listed(fields)
    _, fields = _topics_request(raw, 3, "public/default", mode=2, pattern=f"public/default/{prefix}-.*")
    assert sorted(_listed(fields)) == sorted([persistent, non_persistent])
    assert fields.boolean(3)  # filtered by the broker
    digest = fields.string(4)
    assert digest == topics_hash([persistent, non_persistent])
    _, fields = _topics_request(
        raw, 4, "public/default", mode=2, pattern=f"public/default/{prefix}-.*", digest=digest
    )
    assert _listed(fields) == []
    assert not fields.boolean(5, True)  # unchanged
    _, fields = _topics_request(raw, 5, "public/default", mode=2, pattern=r"public/default/(x)\1")
    assert not fields.boolean(3, True)  # not RE2: left to the client
    assert persistent in _listed(fields)
    for producer in keep:
        producer.close()


def test_hostile_topic_list_requests(raw: RawClient) -> None:
    for request_id, (namespace, mode, text) in enumerate(
        [
            ("public", 0, "Invalid namespace"),
            ("a/b/c", 0, "Invalid namespace"),
            ("public/default", 3, "unknown mode 3"),
            ("public/default", 2**64 - 1, f"unknown mode {2**64 - 1}"),
        ],
        start=1,
    ):
        kind, fields = _topics_request(raw, request_id, namespace, mode=mode)
        assert kind == CommandType.ERROR
        assert fields.uint(1) == request_id
        assert text in fields.string(3)
    kind, fields = _topics_request(raw, 9, "nobody/nothing")
    assert kind == CommandType.GET_TOPICS_OF_NAMESPACE_RESPONSE  # an unknown namespace has no topics
    assert _listed(fields) == []
    _, fields = _topics_request(raw, 10, "public/default", pattern="(a+)+$" * 9)  # over 50 characters
    assert not fields.boolean(3, True)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, token_keys: TokenKeys) -> Iterator[MagnetarProcess]:
    """A standalone with authentication and authorization on: ``reader`` may consume in ``acme/feeds``,
    ``topic-reader`` only on one topic of it."""
    tmp: Path = tmp_path_factory.mktemp("binary-produce-secure")
    key_file = tmp / "secret.key"
    key_file.write_bytes(token_keys.secret)
    extra = [
        "--authentication-enabled",
        "--token-secret-key",
        key_file.as_uri(),
        "--super-user-roles",
        "admin",
    ]
    with running_standalone(tmp, extra) as process:
        bearer = {"Authorization": f"Bearer {token_keys.token('admin')}"}
        with httpx.Client(base_url=str(process.ready["httpUrl"]), headers=bearer, timeout=10) as http:
            http.put(
                "/admin/v2/tenants/acme", json={"adminRoles": [], "allowedClusters": ["standalone"]}
            ).raise_for_status()
            http.put("/admin/v2/namespaces/acme/feeds").raise_for_status()
            http.post(
                "/admin/v2/namespaces/acme/feeds/permissions/reader", json=["consume"]
            ).raise_for_status()
            http.post(
                "/admin/v2/persistent/acme/feeds/feed-one/permissions/topic-reader", json=["consume"]
            ).raise_for_status()
        yield process


def test_listing_a_namespace_needs_consume_on_the_namespace(
    secure: MagnetarProcess, token_keys: TokenKeys
) -> None:
    url = secure.ready["brokerUrl"]
    admin = pulsar.Client(url, authentication=pulsar.AuthenticationToken(token_keys.token("admin")))
    admin.create_producer("persistent://acme/feeds/feed-one").send(b"feed")
    pattern = re.compile("persistent://acme/feeds/feed-.*")
    for role in ("stranger", "topic-reader"):  # a grant on one topic is not a grant on the namespace
        raw = RawClient(HOST, secure.ready["brokerServicePort"], token_keys.token(role))
        kind, fields = _topics_request(raw, 1, "acme/feeds")
        raw.close()
        assert kind == CommandType.ERROR
        assert fields.uint(2) == ServerError.AuthorizationError
        assert f"Role '{role}' is not authorized to get the topics of namespace acme/feeds" in fields.string(
            3
        )
        denied = pulsar.Client(
            url,
            authentication=pulsar.AuthenticationToken(token_keys.token(role)),
            operation_timeout_seconds=10,
        )
        with pytest.raises(pulsar.LookupError):  # how the C++ core reports a refused topic listing
            denied.subscribe(pattern, "sub")
        denied.close()
    reader = pulsar.Client(url, authentication=pulsar.AuthenticationToken(token_keys.token("reader")))
    consumer = reader.subscribe(pattern, "sub", initial_position=pulsar.InitialPosition.Earliest)
    assert consumer.receive(10_000).data() == b"feed"
    reader.close()
    admin.close()


def test_a_websocket_producer_is_refused_while_a_binary_producer_holds_the_topic(
    standalone: MagnetarProcess, client: pulsar.Client
) -> None:
    topic = _topic("ws-excl")
    short = topic.removeprefix("persistent://")
    url = f"ws://{HOST}:{standalone.ready['port']}/ws/v2/producer/persistent/{short}"
    owner = client.create_producer(topic, access_mode=Mode.Exclusive)
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        websocket.create_connection(url, timeout=10)
    assert refused.value.status_code == 409  # the core's access rule, whatever the protocol
    owner.close()
    ws = websocket.create_connection(url, timeout=10)  # free again
    ws.send(json.dumps({"payload": base64.b64encode(b"shared again").decode()}))
    assert json.loads(ws.recv())["result"] == "ok"
    ws.close()

"""Key_Shared sticky hash ranges over Pulsar's binary protocol, against a real ``magnetar standalone``: the
official client's ``ConsumerKeySharedPolicy(KeySharedMode.Sticky, ranges)`` gets exactly the keys whose slot
its ranges hold, overlapping ranges are refused (ConsumerAssignError), keys nobody covers wait for a consumer
that does, and hostile KeySharedMeta (2^31, negative bounds, 10,000 ranges, start > end, an unknown mode)
is refused on its own request while the connection and the broker go on."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pulsar
import pytest
from fixtures.processes import MagnetarProcess
from fixtures.pulsar_raw import RawClient, command
from fixtures.standalone_process import official_client, running_standalone

from magnetar.broker.core.key_hash import sticky_key_slot
from magnetar.broker.protocols.pulsar_binary.commands import CommandType, ServerError
from magnetar.broker.protocols.pulsar_binary.protobuf import Writer

pytestmark = [pytest.mark.processes]

HALF = 32767
KEYS = [f"key-{i}" for i in range(40)]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MagnetarProcess]:
    with running_standalone(tmp_path_factory.mktemp("key-shared-sticky")) as process:
        yield process


@pytest.fixture
def client(standalone: MagnetarProcess) -> Iterator[pulsar.Client]:
    with official_client(standalone) as c:
        yield c


def _topic() -> str:
    return f"persistent://public/default/sticky-{uuid.uuid4().hex[:8]}"


def _sticky(client: pulsar.Client, topic: str, ranges: list[tuple[int, int]], name: str) -> pulsar.Consumer:
    return client.subscribe(
        topic,
        "sticky",
        consumer_type=pulsar.ConsumerType.KeyShared,
        consumer_name=name,
        initial_position=pulsar.InitialPosition.Earliest,
        key_shared_policy=pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=ranges),
    )


def _publish(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for key in KEYS:
        producer.send(key.encode(), partition_key=key)
    producer.close()


def _keys(consumer: pulsar.Consumer, timeout_ms: int = 1500) -> list[str]:
    got = []
    while True:
        try:
            message = consumer.receive(timeout_ms)
        except pulsar.Timeout:
            return got
        consumer.acknowledge(message)
        got.append(message.partition_key())


def test_disjoint_sticky_consumers_each_get_exactly_their_keys(client: pulsar.Client) -> None:
    topic = _topic()
    low = _sticky(client, topic, [(0, HALF)], "low")
    high = _sticky(client, topic, [(HALF + 1, 65535)], "high")
    _publish(client, topic)
    expected_low = [k for k in KEYS if sticky_key_slot(k) <= HALF]
    expected_high = [k for k in KEYS if sticky_key_slot(k) > HALF]
    assert expected_low
    assert expected_high
    assert _keys(low) == expected_low
    assert _keys(high) == expected_high


def test_overlapping_ranges_are_refused(client: pulsar.Client) -> None:
    topic = _topic()
    first = _sticky(client, topic, [(0, 1000), (5000, 6000)], "first")
    with pytest.raises(pulsar.ConsumerAssignError):
        _sticky(client, topic, [(2000, 3000), (5500, 5600)], "second")
    with pytest.raises(pulsar.ConsumerBusy):  # an auto-split consumer on a sticky subscription
        client.subscribe(topic, "sticky", consumer_type=pulsar.ConsumerType.KeyShared)
    assert _sticky(client, topic, [(1001, 4999)], "third") is not None
    first.close()


def test_keys_nobody_covers_wait_for_a_consumer_that_does(client: pulsar.Client) -> None:
    topic = _topic()
    low = _sticky(client, topic, [(0, HALF)], "low")
    _publish(client, topic)
    assert _keys(low) == [k for k in KEYS if sticky_key_slot(k) <= HALF]
    high = _sticky(client, topic, [(HALF + 1, 65535)], "high")
    assert _keys(high) == [k for k in KEYS if sticky_key_slot(k) > HALF]


def _subscribe_raw(
    raw: RawClient, topic: str, request_id: int, mode: int, ranges: list[tuple[int, int]]
) -> tuple[int, int, str]:
    meta = Writer().uint(1, mode)
    for start, end in ranges:
        meta.data(3, Writer().sint(1, start).sint(2, end).bytes())
    subscribe = (
        Writer()
        .string(1, topic)
        .string(2, "sticky")
        .uint(3, 3)  # Key_Shared
        .uint(4, request_id)  # consumer id
        .uint(5, request_id)
        .data(17, meta.bytes())
    )
    raw.send_command(command(CommandType.SUBSCRIBE, subscribe))
    kind, fields = raw.read()
    if kind == CommandType.SUCCESS:
        return kind, 0, ""
    return kind, fields.uint(2), fields.string(3)


@pytest.mark.parametrize(
    ("mode", "ranges", "message"),
    [
        (1, [(0, 2**31)], "is outside"),
        (1, [(-1, 10)], "is outside"),
        (1, [(-(2**63), 2**63 - 1)], "is outside"),
        (1, [(10, 5)], "start > end"),
        (1, [(i, i) for i in range(1025)], "Too many hash ranges"),
        (1, [], "must not be empty"),
        (7, [(0, 10)], "Unknown keySharedMode 7"),
    ],
)
def test_hostile_key_shared_meta_is_refused_on_its_request(
    standalone: MagnetarProcess, client: pulsar.Client, mode: int, ranges: list[tuple[int, int]], message: str
) -> None:
    raw = RawClient("127.0.0.1", int(standalone.ready["brokerServicePort"]))
    try:
        topic = _topic()
        kind, error, text = _subscribe_raw(raw, topic, 1, mode, ranges)
        assert (kind, error) == (CommandType.ERROR, ServerError.ConsumerAssignError)
        assert message in text
        # the connection goes on: a valid sticky consumer on it is taken
        assert _subscribe_raw(raw, topic, 2, 1, [(0, 65535)])[0] == CommandType.SUCCESS
    finally:
        raw.close()
    assert standalone.is_running()


def test_ten_thousand_ranges_are_refused_and_a_hundred_thousand_exceed_the_command_size(
    standalone: MagnetarProcess, client: pulsar.Client
) -> None:
    """10,000 IntRanges fit a command (64 KiB plus room for a schema) and are refused by the core's bound
    (ConsumerAssignError, the connection goes on); 120,000 make a SUBSCRIBE larger than a command may be: the
    connection ends with an ERROR naming the frame, as for any oversized command. The broker goes on."""
    raw = RawClient("127.0.0.1", int(standalone.ready["brokerServicePort"]))
    try:
        kind, error, text = _subscribe_raw(raw, _topic(), 1, 1, [(i, i) for i in range(10_000)])
        assert (kind, error) == (CommandType.ERROR, ServerError.ConsumerAssignError)
        assert "Too many hash ranges for KeyShared policy: 10000 (at most 1024)" in text
        kind, error, text = _subscribe_raw(raw, _topic(), 2, 1, [(i, i) for i in range(120_000)])
    finally:
        raw.close()
    assert (kind, error) == (CommandType.ERROR, ServerError.UnknownError)
    assert "Invalid frame" in text
    assert standalone.is_running()
    assert _sticky(client, _topic(), [(0, 65535)], "after") is not None

"""Pulsar binary clients that can reach one broker address only: with ``binary_proxy_enabled`` the broker
they reach relays their connection to the topic's owner (real dev cluster: ZooKeeper, 3 bookies, 2 brokers;
the official ``pulsar-client``; raw frames for what that client would never send)."""

from __future__ import annotations

import json
import socket
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from fixtures.processes import ProcessGroup
from fixtures.pulsar_raw import RawClient, broker_closed, command

from magnetar.broker.protocols.pulsar_binary.commands import CommandType, ServerError
from magnetar.broker.protocols.pulsar_binary.framing import FrameDecoder, encode_frame
from magnetar.broker.protocols.pulsar_binary.protobuf import Writer, parse_message

pytestmark = [pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A dev cluster whose brokers relay binary connections (``binary_proxy_enabled``, as the Helm chart's
    external access sets it)."""
    root = tmp_path_factory.mktemp("relay")
    group = ProcessGroup(root)
    try:
        process = group.add(
            "dev-cluster",
            ["dev-cluster", "--data-dir", str(root / "dev"), "--zk", "1", "--bookies", "2", "--brokers", "2"],
            start=False,
            env={"MAGNETAR_BINARY_PROXY_ENABLED": "true"},
        )
        process.start(timeout_s=120)
        yield {**process.ready, "root": root}
    finally:
        group.stop_all()


def _owner_url(cluster: dict[str, Any], topic: str) -> str:
    http = cluster["brokers"][0]["httpUrl"]
    with urllib.request.urlopen(f"{http}/lookup/v2/topic/{topic.replace('://', '/')}", timeout=20) as answer:
        return str(json.load(answer)["brokerUrl"])


def _topic() -> str:
    return f"persistent://public/default/relay-{uuid.uuid4().hex[:8]}"


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("pulsar://").rsplit(":", 1)
    return host, int(port)


def test_a_client_given_one_broker_reaches_topics_owned_by_the_other(cluster: dict[str, Any]) -> None:
    urls = [broker["brokerUrl"] for broker in cluster["brokers"]]
    topic = _topic()
    owner = _owner_url(cluster, topic)
    other = next(url for url in urls if url != owner)
    # the lookup at the other broker names the owner and tells the client to go through its service URL
    raw = RawClient(*_address(other))
    raw.send_command(command(CommandType.LOOKUP, Writer().string(1, topic).uint(2, 7)))
    kind, fields = raw.read()
    raw.close()
    assert kind == CommandType.LOOKUP_RESPONSE
    assert fields.string(1) == owner
    assert fields.uint(3) == 1  # Connect
    assert fields.boolean(8) is True  # proxy_through_service_url

    client = pulsar.Client(other, operation_timeout_seconds=30)  # the only address this client knows
    try:
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "relayed", initial_position=pulsar.InitialPosition.Earliest)
        for i in range(20):
            producer.send(f"m{i}".encode())
        got = []
        for _ in range(20):
            message = consumer.receive(timeout_millis=20_000)
            got.append(message.data())
            consumer.acknowledge(message)
        assert got == [f"m{i}".encode() for i in range(20)]
    finally:
        client.close()
    logs = "".join(path.read_text(errors="replace") for path in cluster["root"].rglob("*.log"))
    assert f"relayed to {owner.removeprefix('pulsar://')}" in logs  # the client's CONNECT named the owner


def _connect_naming(host: str, port: int, target: str) -> socket.socket:
    connect = Writer().string(1, "raw").uint(4, 21).string(6, target)
    sock = socket.create_connection((host, port), timeout=10)
    sock.sendall(encode_frame(command(CommandType.CONNECT, connect)))
    return sock


def _first_answer(sock: socket.socket) -> tuple[int, Any]:
    decoder = FrameDecoder()
    while (frame := decoder.next_frame()) is None:
        data = sock.recv(65536)
        assert data, "closed without an answer"
        decoder.receive_data(data)
    base = parse_message(frame.command, "BaseCommand")
    kind = base.required_uint(1)
    return kind, base.message(kind, "command")


@pytest.mark.parametrize(
    "target",
    [
        "pulsar://127.0.0.1:1",  # not a broker of the cluster: never dialled
        "pulsar://169.254.169.254:80",  # somewhere a relay must not be turned into a way to
        "http://127.0.0.1:8080",
        "pulsar://127.0.0.1:65536",
        "pulsar://\u202e127.0.0.1:6650",
        "pulsar://127.0.0.1:6650\x00",
        "x" * 10_000,
    ],
)
def test_a_connect_naming_what_is_not_a_live_broker_is_refused(cluster: dict[str, Any], target: str) -> None:
    host, port = _address(cluster["brokers"][0]["brokerUrl"])
    sock = _connect_naming(host, port, target)
    kind, fields = _first_answer(sock)
    assert kind == CommandType.ERROR
    assert fields.uint(2) == ServerError.ServiceNotReady
    assert "not a live broker" in fields.string(3)
    assert broker_closed(sock)
    # the broker goes on serving
    raw = RawClient(host, port)
    raw.send_command(command(CommandType.PING, Writer()))
    assert raw.read()[0] == CommandType.PONG
    raw.close()


def test_a_connect_naming_the_broker_itself_is_served_there(cluster: dict[str, Any]) -> None:
    url = cluster["brokers"][1]["brokerUrl"]
    sock = _connect_naming(*_address(url), url)
    kind, _ = _first_answer(sock)
    assert kind == CommandType.CONNECTED
    sock.close()

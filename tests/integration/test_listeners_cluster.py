"""Advertised listeners across brokers (real ZooKeeper, two bookies, two brokers): each broker advertises an
``external`` listener of its own, and a lookup on the broker that does not own a topic answers the owner's
address on the named listener - the listeners travel in the owner's registration. Binary LOOKUP (raw
frames) and HTTP lookup (``X-Pulsar-ListenerName``) both answer the owner's listener URL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fixtures.broker_processes import MagnetarProcess, ProcessCluster
from fixtures.pulsar_raw import RawClient, command
from fixtures.zookeeper import ZooKeeperServer

from magnetar.broker.protocols.pulsar_binary.commands import CommandType, ServerError
from magnetar.broker.protocols.pulsar_binary.protobuf import Writer

pytestmark = [pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes, pytest.mark.timeout(180)]

HOST = "127.0.0.1"
LOOKUP_REDIRECT, LOOKUP_CONNECT, LOOKUP_FAILED = 0, 1, 2


def external(index: int) -> str:
    """Broker ``index``'s external listener: an address only this test gives meaning to."""
    return f"pulsar://broker-{index}.external.example.com:{16650 + index}"


def http(broker: MagnetarProcess) -> str:
    return f"http://{HOST}:{broker.ready['port']}"


class Cluster:
    def _broker(self, index: int) -> MagnetarProcess:
        listeners = f"internal:pulsar://{HOST}:1,external:{external(index)}"
        args = ["--broker-service-port", "0", "--advertised-listeners", listeners]
        return self.processes.start_broker(index, *args, "--internal-listener-name", "internal")

    def __init__(self, metadata_url: str, tmp: Path) -> None:
        self.processes = ProcessCluster(metadata_url, tmp)
        try:
            for index in range(2):
                self.processes.start_bookie(index)
            self.brokers = [self._broker(index) for index in range(2)]
        except BaseException:
            self.processes.close()
            raise


@pytest.fixture(scope="module")
def cluster(zookeeper_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    metadata_url = zookeeper_server.url(f"/test-{uuid.uuid4().hex[:12]}")
    cluster = Cluster(metadata_url, tmp_path_factory.mktemp("listeners-cluster"))
    try:
        yield cluster
    finally:
        cluster.processes.close()


def test_a_non_owner_answers_the_owners_listener(cluster: Cluster) -> None:
    topic = f"persistent://public/default/listen-{uuid.uuid4().hex[:8]}"
    path = topic.replace("persistent://", "persistent/")
    with httpx.Client(timeout=15, follow_redirects=True) as client:
        answer = client.get(f"{http(cluster.brokers[0])}/lookup/v2/topic/{path}")
        answer.raise_for_status()
        owner = next(i for i, b in enumerate(cluster.brokers) if http(b) == answer.json()["httpUrl"])
        other = 1 - owner
        # the owner registered its internal listener as its own URL
        assert answer.json()["brokerUrl"] == f"pulsar://{HOST}:1"
        # HTTP on the non-owner: the owner's external URL, from the owner's registration (a 307, where the
        # non-owner sends the client on, carries listenerName on)
        first = client.get(
            f"{http(cluster.brokers[other])}/lookup/v2/topic/{path}",
            headers={"X-Pulsar-ListenerName": "external"},
            follow_redirects=False,
        )
        if first.status_code == 307:
            assert "listenerName=external" in first.headers["location"]
            first = client.get(first.headers["location"])
        assert (first.status_code, first.json()["brokerUrl"]) == (200, external(owner))
    raw = RawClient(HOST, int(cluster.brokers[other].ready["brokerServicePort"]))
    try:
        for request_id, name in enumerate(["external", "nope"], start=1):
            lookup = Writer().string(1, topic).uint(2, request_id).string(7, name)
            raw.send_command(command(CommandType.LOOKUP, lookup))
            kind, fields = raw.read()
            assert kind == CommandType.LOOKUP_RESPONSE
            if name == "external":
                assert fields.uint(3) in (LOOKUP_REDIRECT, LOOKUP_CONNECT)
                assert fields.string(1) == external(owner)
            else:
                assert (fields.uint(3), fields.uint(6)) == (LOOKUP_FAILED, ServerError.ServiceNotReady)
                assert fields.string(7) == "the broker do not have nope listener"
    finally:
        raw.close()

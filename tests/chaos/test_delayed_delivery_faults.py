"""Delayed messages across a SIGKILL of the topic's owner (dev cluster: ZooKeeper, 3 bookies, 2 brokers).

The official ``pulsar-client`` publishes delayed messages (``deliver_after`` of 6 to 10 s, unbatched) to a
topic with a Shared subscription whose consumer is connected; none is due yet when the owner is SIGKILLed.
Its tracker dies with it; the other broker takes the topic over, its subscription re-reads the backlog and
tracks the delayed entries again from the times stored in them. Asserted: every message the broker
acknowledged is delivered (nothing lost) and none before its time (nothing early); duplicates would be
allowed (at-least-once) but are counted."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from datetime import timedelta
from pathlib import Path

import pulsar
import pytest
import trio
from fixtures.dev_cluster import ClusterExits, open_test_cluster

from magnetar.admin.processes.dev_cluster import DevCluster

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes]

MESSAGES = 20
RECEIVE_DEADLINE_S = 90.0
"""Every message must have arrived by then (the takeover is bounded by the 4 s session and recovery)."""


def _service_url(cluster: DevCluster) -> str:
    hosts = ",".join(
        f"{cluster.broker_address(i)}:{cluster.ports.brokers[i]['binary']}"
        for i in range(len(cluster.broker_names))
    )
    return f"pulsar://{hosts}"


def _owner(cluster: DevCluster, topic: str) -> str:
    path = f"/lookup/v2/topic/persistent/public/default/{topic}"
    with urllib.request.urlopen(cluster.broker_urls[0] + path, timeout=10) as response:
        document = json.loads(response.read())
    return cluster.broker_names[cluster.broker_index(document["httpUrl"])]


async def test_delayed_messages_across_an_owner_kill(tmp_path: Path) -> None:
    exits = ClusterExits()
    async with open_test_cluster(tmp_path, exits) as cluster:
        topic = f"delayed-{uuid.uuid4().hex[:8]}"
        full = f"persistent://public/default/{topic}"
        client = pulsar.Client(_service_url(cluster), operation_timeout_seconds=30)
        try:
            consumer = client.subscribe(full, "s", consumer_type=pulsar.ConsumerType.Shared)
            producer = client.create_producer(full, batching_enabled=False, send_timeout_millis=30_000)
            earliest: dict[bytes, float] = {}

            def publish() -> None:
                for i in range(MESSAGES):
                    delay_ms = 6000 + (i % 5) * 1000
                    payload = f"m{i}".encode()
                    earliest[payload] = time.time() + delay_ms / 1000  # the client's deliverAt is later
                    producer.send(payload, deliver_after=timedelta(milliseconds=delay_ms))

            await trio.to_thread.run_sync(publish)
            owner = await trio.to_thread.run_sync(_owner, cluster, topic)
            received: dict[bytes, float] = {}
            duplicates = 0

            def consume() -> None:
                nonlocal duplicates
                deadline = time.monotonic() + RECEIVE_DEADLINE_S
                while len(received) < MESSAGES and time.monotonic() < deadline:
                    try:
                        message = consumer.receive(1000)
                    except pulsar.Timeout:
                        continue
                    arrived = time.time()
                    if message.data() in received:
                        duplicates += 1
                    received.setdefault(message.data(), arrived)
                    consumer.acknowledge(message)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, consume)
                await cluster.kill(owner)  # nothing is due yet: the earliest is 6 s after its send
                assert not received
        finally:
            client.close()
        assert not exits.exits, exits.describe()
    lost = sorted(set(earliest) - set(received))
    early = sorted(p for p, at in received.items() if at < earliest[p])
    print(f"delayed across a kill: {len(received)} delivered, {duplicates} duplicates, lost {lost}")
    assert lost == []
    assert early == []

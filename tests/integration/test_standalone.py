"""``magnetar standalone`` as a user runs it: publish, stop it, start it again, and every message is there."""

from __future__ import annotations

import base64
import json
import socket
from pathlib import Path

import pytest
import websocket
from fixtures.processes import ProcessGroup

pytestmark = [pytest.mark.processes, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start(group: ProcessGroup, name: str, data_dir: Path, bookie_port: int) -> str:
    process = group.add(
        name,
        [
            "standalone", "--data-dir", str(data_dir), "--http-port", "0",
            "--bookie-port", str(bookie_port),
        ],
    )  # fmt: skip
    assert process.ready["event"] == "standalone-ready"
    return str(process.ready["httpUrl"]).replace("http://", "ws://")


def test_standalone_keeps_messages_across_a_restart(magnetar_processes: ProcessGroup, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    bookie_port = free_port()
    url = start(magnetar_processes, "standalone-1", data_dir, bookie_port)
    topic = f"{url}/ws/v2/producer/persistent/public/default/keep"
    producer = websocket.create_connection(topic, timeout=10)
    try:
        for i in range(100):
            payload = base64.b64encode(f"message {i}".encode()).decode()
            producer.send(json.dumps({"payload": payload, "context": str(i)}))
            assert json.loads(producer.recv())["result"] == "ok"
    finally:
        producer.close()
    first = magnetar_processes.processes[0]
    assert first.stop() == 0, first.log_tail()
    assert "standalone stopped cleanly" in first.log_tail()

    url = start(magnetar_processes, "standalone-2", data_dir, bookie_port)
    consumer = websocket.create_connection(
        f"{url}/ws/v2/consumer/persistent/public/default/keep/reader-sub"
        "?subscriptionInitialPosition=Earliest",
        timeout=10,
    )
    try:
        received = []
        for _ in range(100):
            message = json.loads(consumer.recv())
            received.append(base64.b64decode(message["payload"]).decode())
            consumer.send(json.dumps({"messageId": message["messageId"]}))
        assert received == [f"message {i}" for i in range(100)]
    finally:
        consumer.close()

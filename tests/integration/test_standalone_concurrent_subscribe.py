"""200 first subscribers of a new Shared subscription at once, on a topic nobody has loaded yet, against a
real ``magnetar standalone`` (RocksDB metadata, a bookie on its TCP port).

The audit saw 198 of 200 upgrades answered 500 with a ``ManagedLedgerFencedError`` traceback: every consumer
after the first found the subscription's cursor node already written, recovered it and took the cursor over
from the others. Now the topic loads once and the cursor is created once; every subscriber is accepted, and
the subscription that results works: messages are delivered and their acknowledgments persist across an
unload.
"""

from __future__ import annotations

import base64
import collections
import concurrent.futures
import json
import socket
import threading
from pathlib import Path

import httpx
import pytest
import websocket
from fixtures.processes import ProcessGroup

pytestmark = [pytest.mark.processes, pytest.mark.slow]

SUBSCRIBERS = 200
MESSAGES = 20
TOPIC = "persistent/public/default/fresh-topic"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def outcome(error: BaseException) -> str:
    if isinstance(error, websocket.WebSocketBadStatusException):
        return f"{error.status_code} {error.resp_body[:200]!r}"
    return f"{type(error).__name__}: {error}"


def test_concurrent_first_subscribers_of_an_unloaded_topic(
    magnetar_processes: ProcessGroup, tmp_path: Path
) -> None:
    process = magnetar_processes.add(
        "standalone",
        [
            "standalone", "--data-dir", str(tmp_path / "data"), "--http-port", "0",
            "--bookie-port", str(free_port()),
        ],
    )  # fmt: skip
    http_url = str(process.ready["httpUrl"])
    ws_url = http_url.replace("http://", "ws://")
    url = f"{ws_url}/ws/v2/consumer/{TOPIC}/shared-sub?subscriptionType=Shared"
    start = threading.Barrier(SUBSCRIBERS)

    def subscribe(_: int) -> websocket.WebSocket | str:
        start.wait(timeout=60)
        try:
            return websocket.create_connection(url, timeout=60)
        except (websocket.WebSocketException, OSError) as exc:
            return outcome(exc)

    with concurrent.futures.ThreadPoolExecutor(SUBSCRIBERS) as pool:
        results = list(pool.map(subscribe, range(SUBSCRIBERS)))
    consumers = [r for r in results if isinstance(r, websocket.WebSocket)]
    outcomes = collections.Counter("accepted" if isinstance(r, websocket.WebSocket) else r for r in results)
    try:
        assert outcomes == {"accepted": SUBSCRIBERS}, process.log_tail()
        for consumer in consumers[1:]:
            consumer.close()
        consumer = consumers[0]
        producer = websocket.create_connection(f"{ws_url}/ws/v2/producer/{TOPIC}", timeout=10)
        try:
            for i in range(MESSAGES):
                producer.send(json.dumps({"payload": base64.b64encode(f"m{i}".encode()).decode()}))
                assert json.loads(producer.recv())["result"] == "ok"
        finally:
            producer.close()
        received = []
        for _ in range(MESSAGES):
            message = json.loads(consumer.recv())
            received.append(base64.b64decode(message["payload"]).decode())
            consumer.send(json.dumps({"messageId": message["messageId"]}))
        assert sorted(received) == sorted(f"m{i}" for i in range(MESSAGES))
    finally:
        for consumer in consumers:
            consumer.close()
    with httpx.Client(base_url=http_url, timeout=30) as admin:
        stats = admin.get(f"/admin/v2/{TOPIC}/stats").json()
        assert stats["subscriptions"]["shared-sub"]["msgBacklog"] == 0
        assert admin.put(f"/admin/v2/{TOPIC}/unload").status_code == 204
        # The acknowledgments were persisted by the cursor the subscribers shared: nothing comes back.
        stats = admin.get(f"/admin/v2/{TOPIC}/stats").json()
        assert stats["subscriptions"]["shared-sub"]["msgBacklog"] == 0
    assert process.stop() == 0, process.log_tail()
    log = process.log_path.read_text()
    assert "Traceback" not in log
    assert "fenced" not in log
    # One load for the 200 subscribers, one more for the stats read after the unload.
    assert log.count("loaded topic persistent://public/default/fresh-topic") == 2

"""Counts in messages, not entries, on a real ``magnetar standalone``, before and after restarts.

A JSON producer that does not wait for its acknowledgements and a ``magnetar.v1`` producer sending frames of
100 messages publish 2,000 messages; the broker packs them into far fewer entries. The admin stats count
messages (topic and subscription ``msgBacklog``, ``getPreciseBacklog=true``, ``msgInCounter``), ``skip``
skips messages - here ending inside an entry, whose skipped messages are not delivered again while the rest
are - and ``position/n`` peeks the n-th message. After a clean restart and after a kill -9 of the standalone
the counts are the same (the indexes come from the entries and the ledger metadata, not from memory).
"""

from __future__ import annotations

import base64
import json
import socket
from pathlib import Path

import httpx
import pytest
import websocket
from fixtures.processes import MagnetarProcess, ProcessGroup
from prometheus_client.parser import text_string_to_metric_families

from magnetar.broker.wire.magnetar_v1 import SUBPROTOCOL, encode_send, parse_receipt

pytestmark = [pytest.mark.processes, pytest.mark.slow]

TOPIC = "persistent/public/default/counted"
JSON_MESSAGES = 1000
FRAMES, FRAME_MESSAGES = 10, 100
TOTAL = JSON_MESSAGES + FRAMES * FRAME_MESSAGES
SKIP = 1234
"""Ends inside the 3rd binary frame's entry: message 1233 is b233 (offset 33 of its entry)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def payloads() -> list[str]:
    return [f"j{i}" for i in range(JSON_MESSAGES)] + [f"b{i}" for i in range(FRAMES * FRAME_MESSAGES)]


def publish(ws_url: str) -> None:
    producer = websocket.create_connection(f"{ws_url}/ws/v2/producer/{TOPIC}", timeout=30)
    try:
        for i in range(JSON_MESSAGES):  # all sent before any acknowledgement is read: the broker packs them
            text = json.dumps({"payload": base64.b64encode(f"j{i}".encode()).decode(), "context": str(i)})
            producer.send(text)
        for _ in range(JSON_MESSAGES):
            assert json.loads(producer.recv())["result"] == "ok"
    finally:
        producer.close()
    binary = websocket.create_connection(
        f"{ws_url}/ws/v2/producer/{TOPIC}", timeout=30, subprotocols=[SUBPROTOCOL]
    )
    try:
        for frame in range(FRAMES):
            messages = [f"b{frame * FRAME_MESSAGES + i}".encode() for i in range(FRAME_MESSAGES)]
            binary.send_binary(encode_send(frame + 1, messages))
            receipt = binary.recv()
            assert isinstance(receipt, bytes)
            assert parse_receipt(receipt).request_id == frame + 1
    finally:
        binary.close()


def backlogs(admin: httpx.Client) -> tuple[int, int]:
    """The subscription's ``msgBacklog``, plain and with ``getPreciseBacklog=true``."""
    plain = admin.get(f"/admin/v2/{TOPIC}/stats").json()
    precise = admin.get(f"/admin/v2/{TOPIC}/stats", params={"getPreciseBacklog": "true"}).json()
    return plain["subscriptions"]["sub"]["msgBacklog"], precise["subscriptions"]["sub"]["msgBacklog"]


def backlog_metrics(admin: httpx.Client) -> dict[str, float]:
    """The topic's backlog gauges in the broker's Prometheus exposition."""
    text = admin.get("/metrics").text
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("topic") == f"persistent://{TOPIC.removeprefix('persistent/')}" and (
                sample.name in ("pulsar_msg_backlog", "pulsar_subscription_back_log")
            ):
                out[sample.name] = sample.value
    return out


def peek(admin: httpx.Client, n: int) -> str:
    response = admin.get(f"/admin/v2/{TOPIC}/subscription/sub/position/{n}")
    assert response.status_code == 200, response.text
    return response.content.decode()


def start(group: ProcessGroup, name: str, data_dir: Path, bookie_port: int) -> MagnetarProcess:
    return group.add(
        name,
        [
            "standalone", "--data-dir", str(data_dir), "--http-port", "0",
            "--bookie-port", str(bookie_port),
        ],
    )  # fmt: skip


def test_counts_are_messages_and_survive_restarts(magnetar_processes: ProcessGroup, tmp_path: Path) -> None:
    data_dir, bookie_port = tmp_path / "data", free_port()
    process = start(magnetar_processes, "standalone", data_dir, bookie_port)
    http_url = str(process.ready["httpUrl"])
    with httpx.Client(base_url=http_url, timeout=30) as admin:
        assert admin.put(f"/admin/v2/{TOPIC}").status_code in (204, 409)
        assert admin.put(f"/admin/v2/{TOPIC}/subscription/sub", json="earliest").status_code == 204
        publish(http_url.replace("http://", "ws://"))

        internal = admin.get(f"/admin/v2/{TOPIC}/internalStats").json()
        entries = internal["numberOfEntries"]
        assert FRAMES <= entries <= TOTAL // 2, entries  # packed: far fewer entries than messages
        stats = admin.get(f"/admin/v2/{TOPIC}/stats").json()
        assert stats["msgInCounter"] == TOTAL
        assert stats["bytesInCounter"] == sum(len(p) for p in payloads())  # payload bytes
        assert backlogs(admin) == (TOTAL, TOTAL)
        assert peek(admin, 1) == "j0"
        assert peek(admin, TOTAL) == f"b{FRAMES * FRAME_MESSAGES - 1}"

        assert admin.post(f"/admin/v2/{TOPIC}/subscription/sub/skip/{SKIP}").status_code == 204
        left = TOTAL - SKIP
        assert backlogs(admin) == (left, left)
        assert peek(admin, 1) == payloads()[SKIP]
        assert peek(admin, 2) == payloads()[SKIP + 1]

        # a consumer gets exactly the messages not skipped: the rest of the partly skipped entry included
        ws_url = http_url.replace("http://", "ws://")
        consumer = websocket.create_connection(f"{ws_url}/ws/v2/consumer/{TOPIC}/sub", timeout=30)
        try:
            received = [
                base64.b64decode(json.loads(consumer.recv())["payload"]).decode() for _ in range(left)
            ]
        finally:
            consumer.close()
        assert received == payloads()[SKIP:]
        assert backlog_metrics(admin) == {"pulsar_msg_backlog": left, "pulsar_subscription_back_log": left}
        stats = admin.get(f"/admin/v2/{TOPIC}/stats").json()
        assert stats["subscriptions"]["sub"]["msgOutCounter"] == left
        assert stats["bytesOutCounter"] == sum(len(p) for p in payloads()[SKIP:])
    assert process.stop() == 0, process.log_tail()

    for restart, ending in (("after a clean stop", "kill"), ("after kill -9", "stop")):
        process = start(magnetar_processes, f"standalone {restart}", data_dir, bookie_port)
        with httpx.Client(base_url=str(process.ready["httpUrl"]), timeout=30) as admin:
            assert backlogs(admin) == (left, left), restart
            assert peek(admin, 1) == payloads()[SKIP], restart
            assert peek(admin, left) == payloads()[-1], restart
        assert "Traceback" not in process.log_path.read_text()
        if ending == "kill":
            process.kill()
        else:
            assert process.stop() == 0, process.log_tail()

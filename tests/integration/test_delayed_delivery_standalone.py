"""Delayed delivery against a real ``magnetar standalone``: the WebSocket API's ``deliverAt`` /
``deliverAfterMs`` and the official ``pulsar-client``'s ``deliver_after``, held back on Shared subscriptions
and delivered at once on Exclusive ones; hostile values; the ``delayedDelivery`` policy (max delay, off);
``msgDelayed`` and ``pulsar_subscription_delayed``; and a delayed message across a restart of the standalone
(a SIGKILL: tracked again from the backlog, delivered, not early).

Times: only lower bounds are asserted (a message held back arrives no earlier than its time); "at once" is
shown with a delay of ten minutes that the test never waits for."""

from __future__ import annotations

import base64
import json
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pulsar
import pytest
import websocket
from fixtures.processes import MagnetarProcess
from fixtures.pulsar_raw import RawClient
from fixtures.standalone_process import running_standalone

from magnetar.broker.protocols.pulsar_binary.commands import CommandType, ServerError
from magnetar.broker.protocols.pulsar_binary.metadata import MessageMetadata

pytestmark = [pytest.mark.processes]

HOST = "127.0.0.1"
DELAY_MS = 1500
LONG_MS = 600_000
"""A delay no test waits for: a message with it that arrives was not held back."""


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MagnetarProcess]:
    with running_standalone(tmp_path_factory.mktemp("delayed")) as process:
        yield process


def url(standalone: MagnetarProcess, path: str) -> str:
    return f"ws://{HOST}:{standalone.ready['port']}/ws/v2/{path}"


def admin(standalone: MagnetarProcess, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://{HOST}:{standalone.ready['port']}{path}", data=data, method=method
    )
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        raw = response.read()
        return json.loads(raw) if raw else None


def new_topic(standalone: MagnetarProcess, namespace: str = "public/default") -> str:
    return f"persistent/{namespace}/delayed-{uuid.uuid4().hex[:8]}"


def consumer(standalone: MagnetarProcess, topic: str, sub: str, sub_type: str) -> websocket.WebSocket:
    return websocket.create_connection(
        url(standalone, f"consumer/{topic}/{sub}?subscriptionType={sub_type}"), timeout=10
    )


def send(producer: websocket.WebSocket, payload: bytes, **fields: Any) -> dict[str, Any]:
    """Publish one message (``fields`` added to the request as they are) and return the broker's answer."""
    request = {"payload": base64.b64encode(payload).decode(), "context": uuid.uuid4().hex, **fields}
    producer.send(json.dumps(request))
    answer: dict[str, Any] = json.loads(producer.recv())
    return answer


def send_raw(producer: websocket.WebSocket, raw: str) -> dict[str, Any]:
    producer.send(raw)
    answer: dict[str, Any] = json.loads(producer.recv())
    return answer


def receive(ws: websocket.WebSocket) -> tuple[bytes, float]:
    """The next message (acknowledged) and the wall-clock time it arrived."""
    message = json.loads(ws.recv())
    arrived = time.time()
    ws.send(json.dumps({"messageId": message["messageId"]}))
    return base64.b64decode(message["payload"]), arrived


def eventually(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def sub_stats(standalone: MagnetarProcess, topic: str, sub: str) -> dict[str, Any]:
    stats: dict[str, Any] = admin(standalone, "GET", f"/admin/v2/{topic}/stats")["subscriptions"][sub]
    return stats


def delayed_metric(standalone: MagnetarProcess, topic: str, sub: str) -> float | None:
    with urllib.request.urlopen(f"http://{HOST}:{standalone.ready['port']}/metrics", timeout=10) as response:
        text = response.read().decode()
    name = topic.replace("persistent/", "persistent://", 1)
    for line in text.splitlines():
        labels = f'topic="{name}"' in line and f'subscription="{sub}"' in line
        if line.startswith("pulsar_subscription_delayed{") and labels:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_shared_holds_back_exclusive_delivers_at_once(standalone: MagnetarProcess) -> None:
    topic = new_topic(standalone)
    shared = consumer(standalone, topic, "shared", "Shared")
    exclusive = consumer(standalone, topic, "exclusive", "Exclusive")
    producer = websocket.create_connection(url(standalone, f"producer/{topic}"), timeout=10)
    try:
        start = time.time()
        assert send(producer, b"after", deliverAfterMs=DELAY_MS)["result"] == "ok"
        assert send(producer, b"at", deliverAt=int(start * 1000) + DELAY_MS)["result"] == "ok"
        assert send(producer, b"now")["result"] == "ok"
        assert send(producer, b"long", deliverAfterMs=LONG_MS)["result"] == "ok"
        # Exclusive: everything, in order, the ten-minute one included
        assert [receive(exclusive)[0] for _ in range(4)] == [b"after", b"at", b"now", b"long"]
        # Shared: the undelayed one first, then each delayed one no earlier than its time
        assert receive(shared)[0] == b"now"
        held = dict(receive(shared) for _ in range(2))
        assert set(held) == {b"after", b"at"}
        assert min(held.values()) >= start + DELAY_MS / 1000
        # the ten-minute one is still held back: counted in the stats and the metrics
        eventually(lambda: sub_stats(standalone, topic, "shared")["msgDelayed"] == 1, "msgDelayed")
        stats = sub_stats(standalone, topic, "shared")
        assert stats["msgBacklogNoDelayed"] == stats["msgBacklog"] - 1
        assert sub_stats(standalone, topic, "exclusive")["msgDelayed"] == 0
        assert delayed_metric(standalone, topic, "shared") == 1
    finally:
        for ws in (shared, exclusive, producer):
            ws.close()


@pytest.mark.parametrize(
    ("raw_field", "outcome"),
    [
        ('"deliverAt": -5', "now"),
        ('"deliverAfterMs": -5', "now"),
        ('"deliverAt": 0', "now"),
        ('"deliverAt": "  "', "now"),  # Jackson reads a blank string as 0
        ('"deliverAt": 9223372036854775807', "held"),  # 2^63 - 1: never, effectively
        ('"deliverAfterMs": 9223372036854775807', "held"),  # now + that: capped, not wrapped
        ('"deliverAt": 9223372036854775808', "refused"),  # 2^63
        # below 64 bits JSON's parser gives a float, truncated as Jackson's ACCEPT_FLOAT_AS_INT does: -2^63
        ('"deliverAt": -9223372036854775809', "now"),
        ('"deliverAt": 18446744073709551616', "refused"),  # 2^64, as a float: out of range
        ('"deliverAt": 1e30', "refused"),
        ('"deliverAt": "soon"', "refused"),
        ('"deliverAt": "\\u0661\\u0662"', "refused"),  # Arabic-Indic digits are no Java long
        ('"deliverAt": "1\\u202e2"', "refused"),  # a bidi control in the digits
        ('"deliverAt": true', "refused"),
        ('"deliverAfterMs": [1]', "refused"),
        ('"deliverAfterMs": {"ms": 1}', "refused"),
    ],
)
def test_hostile_delivery_times(standalone: MagnetarProcess, raw_field: str, outcome: str) -> None:
    topic = new_topic(standalone)
    shared = consumer(standalone, topic, "s", "Shared")
    producer = websocket.create_connection(url(standalone, f"producer/{topic}"), timeout=10)
    try:
        payload = base64.b64encode(b"hostile").decode()
        answer = send_raw(producer, f'{{"payload": "{payload}", "context": "c", {raw_field}}}')
        if outcome == "refused":
            assert answer["result"] == "send-error:3", answer
            return
        assert answer["result"] == "ok", answer
        if outcome == "now":
            assert receive(shared)[0] == b"hostile"
        else:
            eventually(lambda: sub_stats(standalone, topic, "s")["msgDelayed"] == 1, "held back")
        assert send(producer, b"after it")["result"] == "ok"  # the producer and the broker go on
        assert receive(shared)[0] == b"after it"
    finally:
        shared.close()
        producer.close()


def test_policy_max_delay_and_off(standalone: MagnetarProcess) -> None:
    namespace = f"public/delay-{uuid.uuid4().hex[:8]}"
    admin(standalone, "PUT", f"/admin/v2/namespaces/{namespace}")
    policy = {"active": True, "tickTime": 100, "maxDeliveryDelayInMillis": 5000}
    admin(standalone, "POST", f"/admin/v2/namespaces/{namespace}/delayedDelivery", policy)
    topic = new_topic(standalone, namespace)
    shared = consumer(standalone, topic, "s", "Shared")
    producer = websocket.create_connection(url(standalone, f"producer/{topic}"), timeout=10)
    raw = RawClient(HOST, standalone.ready["brokerServicePort"])
    try:
        refused = send(producer, b"too late", deliverAfterMs=10_000)
        assert (refused["result"], refused["errorMsg"]) == (
            "send-error:8",
            "Exceeds max allowed delivery delay of 5000 milliseconds",
        )
        # the binary protocol: SEND_ERROR NotAllowedError for that send only (a raw client: the official
        # one resends a refused message until its send timeout, as it does against Pulsar)
        name = "raw-delayed"
        assert raw.producer(topic.replace("persistent/", "persistent://", 1), 1, 1, name=name)[0] == (
            CommandType.PRODUCER_SUCCESS
        )
        late = int(time.time() * 1000) + 10_000
        raw.send(1, 0, MessageMetadata(name, 0, 1, deliver_at_time_ms=late), b"too late")
        kind, fields = raw.read()
        assert (kind, fields.uint(2), fields.uint(3), fields.string(4)) == (
            CommandType.SEND_ERROR,
            0,
            ServerError.NotAllowedError,
            "Exceeds max allowed delivery delay of 5000 milliseconds",
        )
        raw.send(1, 1, MessageMetadata(name, 1, 1, deliver_at_time_ms=-(2**63)), b"raw now")
        assert raw.read()[0] == CommandType.SEND_RECEIPT
        assert receive(shared)[0] == b"raw now"
        assert send(producer, b"within", deliverAfterMs=200)["result"] == "ok"
        assert receive(shared)[0] == b"within"
        # held back, then released when the policy turns delayed delivery off (no unload: the watch)
        assert send(producer, b"held", deliverAfterMs=4000)["result"] == "ok"
        eventually(lambda: sub_stats(standalone, topic, "s")["msgDelayed"] == 1, "held back")
        off = {**policy, "active": False}
        admin(standalone, "POST", f"/admin/v2/namespaces/{namespace}/delayedDelivery", off)
        assert receive(shared)[0] == b"held"
        # off: delivered at once, however long the delay (and no maximum applies)
        assert send(producer, b"off", deliverAfterMs=LONG_MS)["result"] == "ok"
        assert receive(shared)[0] == b"off"
    finally:
        raw.close()
        shared.close()
        producer.close()


def test_official_client_deliver_after(standalone: MagnetarProcess) -> None:
    topic = "persistent://public/default/delayed-binary-" + uuid.uuid4().hex[:8]
    client = pulsar.Client(standalone.ready["brokerUrl"], operation_timeout_seconds=10)
    try:
        shared = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic)
        start = time.time()
        producer.send(b"later", deliver_after=timedelta(milliseconds=DELAY_MS))
        producer.send(b"now")
        first = shared.receive(10_000)
        assert first.data() == b"now"
        shared.acknowledge(first)
        later = shared.receive(10_000)
        assert later.data() == b"later"
        assert time.time() >= start + DELAY_MS / 1000
        shared.acknowledge(later)
    finally:
        client.close()


@pytest.mark.parametrize("sub_type", [1, 0], ids=["Shared", "Exclusive"])
def test_a_binary_message_carries_its_deliver_at_time(standalone: MagnetarProcess, sub_type: int) -> None:
    """The MESSAGE of a delayed message has ``deliver_at_time`` in its metadata (held back on Shared, at
    once on Exclusive), a plain one none (the Python client does not show it: raw frames read it)."""
    topic = "persistent://public/default/deliver-at-" + uuid.uuid4().hex[:8]
    deliver_at = int(time.time() * 1000) + 1500
    client = pulsar.Client(standalone.ready["brokerUrl"], operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"plain")
        producer.send(b"delayed", deliver_at=deliver_at)
        producer.close()
    finally:
        client.close()
    raw = RawClient(HOST, standalone.ready["brokerServicePort"])
    try:
        raw.subscribe(topic, "raw", consumer_id=1, request_id=1, sub_type=sub_type)
        assert raw.read()[0] == CommandType.SUCCESS
        raw.flow(1, 10)
        seen: list[tuple[int, int | None]] = []
        for _ in range(2):
            kind, _ = raw.read()
            assert kind == CommandType.MESSAGE
            meta = raw.last_metadata
            assert meta is not None
            seen.append((meta.sequence_id, meta.deliver_at_time_ms))
        assert seen == [(0, None), (1, deliver_at)]  # plain first (stored first; on Shared, not held)
    finally:
        raw.close()


def test_a_delayed_message_survives_a_crash(standalone: MagnetarProcess) -> None:
    """Last in the module: it SIGKILLs the standalone and starts it again (same data, new ports); the
    delayed message is tracked again from the backlog - delivered, and not before its time."""
    topic = new_topic(standalone)
    delay_ms = 6000
    shared = consumer(standalone, topic, "s", "Shared")
    producer = websocket.create_connection(url(standalone, f"producer/{topic}"), timeout=10)
    start = time.time()
    try:
        assert send(producer, b"across", deliverAfterMs=delay_ms)["result"] == "ok"
    finally:
        shared.close()
        producer.close()
    standalone.kill()
    standalone.stop()  # reaps it and closes its output pipe
    standalone.start(timeout_s=60)
    shared = consumer(standalone, topic, "s", "Shared")
    shared.settimeout(delay_ms / 1000 + 15)
    try:
        payload, arrived = receive(shared)
        assert payload == b"across"
        assert arrived >= start + delay_ms / 1000
    finally:
        shared.close()

"""Rate policies against a real ``magnetar standalone``: set with the REST calls of Java's ``PulsarAdmin``
on a topic already loaded (the change reaches it through the metadata watch, no unload), then observed on
real clients - a WebSocket producer and the official client's producer slowed to the publish rate (acks
come slower, nothing is refused), a WebSocket consumer fed at the dispatch rate, a consumer's subscribes
beyond the subscribe rate refused on both protocols - and hostile bodies on each route.

The rates are measured after the first second (the bucket starts with one second's tokens) over about
2.5 s, and must be within 10 % of the policy."""

from __future__ import annotations

import base64
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pulsar
import pytest
import websocket
from fixtures.admin_http import Admin
from fixtures.processes import MagnetarProcess
from fixtures.standalone_process import official_client, running_standalone

from magnetar.broker.wire.magnetar_v1 import SUBPROTOCOL, encode_send, parse_receipt

pytestmark = [pytest.mark.processes]

HOST = "127.0.0.1"
SKIP_S = 1.0
"""The first second is the bucket's initial burst: not measured."""
WINDOW_S = 2.5


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MagnetarProcess]:
    with running_standalone(tmp_path_factory.mktemp("rates")) as process:
        yield process


@pytest.fixture
def admin(standalone: MagnetarProcess) -> Admin:
    return Admin(standalone)


@pytest.fixture
def namespace(admin: Admin) -> str:
    name = f"public/rate-{uuid.uuid4().hex[:8]}"
    assert admin.call("PUT", f"/namespaces/{name}")[0] == 204
    return name


def ws_url(standalone: MagnetarProcess, path: str) -> str:
    return f"ws://{HOST}:{standalone.ready['port']}/ws/v2/{path}"


def observed_rate(times: list[float]) -> float:
    """Events per second from ``SKIP_S`` after the first for ``WINDOW_S``."""
    start = times[0] + SKIP_S
    inside = [t for t in times if start <= t < start + WINDOW_S]
    return len(inside) / WINDOW_S


def enough(rate: int) -> int:
    """Messages that keep a producer at ``rate`` through the measured window (and not much longer): the
    first second's burst, then the rate until the window's end."""
    return int(rate * (1 + SKIP_S + WINDOW_S + 0.2))


def metric(standalone: MagnetarProcess, name: str, **labels: str) -> float:
    """The value of the ``/metrics`` row of ``name`` whose labels include ``labels`` (0 when none)."""
    text = httpx.get(f"http://{HOST}:{standalone.ready['port']}/metrics", timeout=30).text
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match and all(f'{key}="{value}"' in match.group(1) for key, value in labels.items()):
            return float(match.group(2))
    return 0.0


def create_topic(admin: Admin, topic: str) -> None:
    """A loaded topic: created over REST, as ``pulsar-admin topics create`` does."""
    assert admin.call("PUT", f"/persistent/{topic}")[0] == 204


def test_publish_rate_slows_a_websocket_producer_to_the_rate(
    standalone: MagnetarProcess, admin: Admin, namespace: str
) -> None:
    topic = f"{namespace}/pub"
    rate = 300
    ws = websocket.create_connection(ws_url(standalone, f"producer/persistent/{topic}"), timeout=10)
    try:
        ws.send(json.dumps({"payload": base64.b64encode(b"warm").decode()}))
        assert json.loads(ws.recv())["result"] == "ok"  # the topic is loaded before the policy is set
        body = {"publishThrottlingRateInMsg": rate, "publishThrottlingRateInByte": -1}
        assert admin.call("POST", f"/persistent/{topic}/publishRate", body)[0] == 204
        time.sleep(0.3)  # the metadata watch reaches the loaded topic
        payload = json.dumps({"payload": base64.b64encode(b"x" * 100).decode()})
        total = enough(rate)

        def flood() -> None:
            for _ in range(total):
                ws.send(payload)

        sender = threading.Thread(target=flood, daemon=True)
        sender.start()
        acks: list[float] = []
        for _ in range(total):
            ack = json.loads(ws.recv())
            assert ack["result"] == "ok", ack  # slowed, never refused
            acks.append(time.monotonic())
        sender.join(timeout=10)
    finally:
        ws.close()
    observed = observed_rate(acks)
    assert abs(observed - rate) <= 0.1 * rate, (observed, rate)
    status, stats = admin.call("GET", f"/persistent/{topic}/stats")
    assert status == 200
    assert stats["publishRateLimitedTimes"] > 0
    full = f"persistent://{topic}"
    assert (
        metric(standalone, "pulsar_publish_rate_limit_times", topic=full) == stats["publishRateLimitedTimes"]
    )


def test_publish_rate_slows_the_official_clients_producer(
    standalone: MagnetarProcess, admin: Admin, namespace: str
) -> None:
    topic = f"{namespace}/bin"
    create_topic(admin, topic)
    rate = 400
    assert (
        admin.call("POST", f"/namespaces/{namespace}/publishRate", {"publishThrottlingRateInMsg": rate})[0]
        == 204
    )
    time.sleep(0.3)
    acks: list[float] = []
    failures: list[object] = []

    def sent(result: object, _id: object) -> None:
        if result == pulsar.Result.Ok:
            acks.append(time.monotonic())
        else:
            failures.append(result)

    with official_client(standalone) as client:
        producer = client.create_producer(
            f"persistent://{topic}",
            batching_enabled=False,
            max_pending_messages=5000,
            block_if_queue_full=True,
        )
        for _ in range(enough(rate)):
            producer.send_async(b"y" * 100, sent)
        producer.flush()
        producer.close()
    assert not failures
    observed = observed_rate(sorted(acks))
    assert abs(observed - rate) <= 0.1 * rate, (observed, rate)


def test_publish_rate_slows_a_magnetar_v1_producer(
    standalone: MagnetarProcess, admin: Admin, namespace: str
) -> None:
    """The binary WebSocket subprotocol: SEND frames of 10 messages, receipts at the rate."""
    topic = f"{namespace}/v1"
    create_topic(admin, topic)
    rate = 500
    body = {"publishThrottlingRateInMsg": rate, "publishThrottlingRateInByte": -1}
    assert admin.call("POST", f"/persistent/{topic}/publishRate", body)[0] == 204
    time.sleep(0.3)
    url = ws_url(standalone, f"producer/persistent/{topic}")
    ws = websocket.create_connection(url, timeout=10, subprotocols=[SUBPROTOCOL])
    frames = enough(rate) // 10
    stored: list[float] = []
    try:
        sender = threading.Thread(
            target=lambda: [ws.send_binary(encode_send(i, [b"z" * 100] * 10)) for i in range(frames)],
            daemon=True,
        )
        sender.start()
        for _ in range(frames):
            frame = ws.recv()
            assert isinstance(frame, bytes)
            receipt = parse_receipt(frame)
            assert receipt.ok, receipt
            stored += [time.monotonic()] * sum(r.messages for r in receipt.ranges)
        sender.join(timeout=10)
    finally:
        ws.close()
    observed = observed_rate(stored)
    assert abs(observed - rate) <= 0.1 * rate, (observed, rate)


def test_dispatch_rate_feeds_a_websocket_consumer_at_the_rate(
    standalone: MagnetarProcess, admin: Admin, namespace: str
) -> None:
    topic = f"{namespace}/disp"
    rate = 200
    body = {"dispatchThrottlingRateInMsg": rate, "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 1, "relativeToPublishRate": False}  # fmt: skip
    assert admin.call("POST", f"/namespaces/{namespace}/dispatchRate", body)[0] == 204
    received = consume_backlog(standalone, topic, "sub", enough(rate))
    observed = observed_rate(received)
    assert abs(observed - rate) <= 0.1 * rate, (observed, rate)
    # the namespace's dispatchRate is the topic's limit: the stats and /metrics say so, under Pulsar's names
    sub = admin.call("GET", f"/persistent/{topic}/stats")[1]["subscriptions"]["sub"]
    assert sub["dispatchThrottledMsgEventsByTopicLimit"] > 0
    assert sub["dispatchThrottledMsgEventsBySubscriptionLimit"] == 0
    assert sub["dispatchThrottledBytesEventsByTopicLimit"] == 0  # no byte rate
    assert sub["dispatchThrottledMsgEventsByBrokerLimit"] == 0
    labels = {"topic": f"persistent://{topic}", "subscription": "sub"}
    events = metric(standalone, "pulsar_subscription_dispatch_throttled_msg_events", reason="topic", **labels)
    assert events >= sub["dispatchThrottledMsgEventsByTopicLimit"]


def consume_backlog(standalone: MagnetarProcess, topic: str, subscription: str, count: int) -> list[float]:
    """Publish ``count`` messages (one entry each) to a new subscription, then receive and acknowledge
    them with a WebSocket consumer: the times they arrived."""
    path = f"consumer/persistent/{topic}/{subscription}?subscriptionInitialPosition=Earliest"
    websocket.create_connection(ws_url(standalone, path), timeout=10).close()  # the subscription
    with official_client(standalone) as client:
        producer = client.create_producer(
            f"persistent://{topic}", batching_enabled=False, block_if_queue_full=True
        )
        for i in range(count):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        producer.close()
    ws = websocket.create_connection(ws_url(standalone, path), timeout=10)
    received: list[float] = []
    try:
        for _ in range(count):
            message = json.loads(ws.recv())
            received.append(time.monotonic())
            ws.send(json.dumps({"messageId": message["messageId"]}))
    finally:
        ws.close()
    return received


def test_subscription_own_dispatch_rate_reaches_a_loaded_topic(
    standalone: MagnetarProcess, admin: Admin, namespace: str
) -> None:
    topic = f"{namespace}/subdisp"
    create_topic(admin, topic)
    rate = 150
    own = {"dispatchThrottlingRateInMsg": rate, "dispatchThrottlingRateInByte": -1, "ratePeriodInSecond": 1}
    assert admin.call("POST", f"/persistent/{topic}/s1/dispatchRate", own)[0] == 204
    time.sleep(0.3)  # the metadata watch reaches the loaded topic
    received = consume_backlog(standalone, topic, "s1", enough(rate))
    observed = observed_rate(received)
    assert abs(observed - rate) <= 0.1 * rate, (observed, rate)
    sub = admin.call("GET", f"/persistent/{topic}/stats")[1]["subscriptions"]["s1"]
    assert sub["dispatchThrottledMsgEventsBySubscriptionLimit"] > 0
    assert sub["dispatchThrottledMsgEventsByTopicLimit"] == 0
    labels = {"topic": f"persistent://{topic}", "subscription": "s1"}
    name = "pulsar_subscription_dispatch_throttled_msg_events"
    assert metric(standalone, name, reason="subscription", **labels) > 0
    assert metric(standalone, name, reason="topic", **labels) == 0


def test_subscribe_rate_refuses_a_consumer_beyond_it_on_both_protocols(
    standalone: MagnetarProcess, admin: Admin, namespace: str
) -> None:
    topic = f"{namespace}/subs"
    create_topic(admin, topic)
    body = {"subscribeThrottlingRatePerConsumer": 2, "ratePeriodInSecond": 60}
    assert admin.call("POST", f"/persistent/{topic}/subscribeRate", body)[0] == 204
    time.sleep(0.3)
    path = f"consumer/persistent/{topic}/sub?consumerName=same"
    for _ in range(2):
        websocket.create_connection(ws_url(standalone, path), timeout=10).close()
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        websocket.create_connection(ws_url(standalone, path), timeout=10)
    assert refused.value.status_code == 500
    assert b"Subscribe limited by subscribe rate limit per consumer." in (refused.value.resp_body or b"")
    # another consumer name has its own bucket; the official client is refused with NotAllowed
    with official_client(standalone) as client:
        for _ in range(2):
            client.subscribe(f"persistent://{topic}", "bsub", consumer_name="bin").close()
        with pytest.raises(pulsar.PulsarException) as error:
            client.subscribe(f"persistent://{topic}", "bsub", consumer_name="bin")
        assert "NotAllowed" in type(error.value).__name__ or "NotAllowed" in str(error.value)


HOSTILE = [
    b'"fast"',
    b"[1]",
    b"true",
    b'{"F": "ten"}',
    b'{"F": 9223372036854775808}',
    b'{"F": -9223372036854775809}',
    '{"F": "\u0661\u0662"}'.encode(),
    '{"F": "1\u202e2"}'.encode(),
    b'{"F": 1.5}',
    b'{"F": null, "G": ' + b"9" * 4000 + b"}",
]


def test_hostile_rate_bodies_are_refused_and_change_nothing(admin: Admin, namespace: str) -> None:
    topic = f"{namespace}/hostile"
    create_topic(admin, topic)
    routes = {
        "publishRate": "publishThrottlingRateInMsg",
        "dispatchRate": "dispatchThrottlingRateInMsg",
        "subscriptionDispatchRate": "dispatchThrottlingRateInByte",
        "subscribeRate": "subscribeThrottlingRatePerConsumer",
    }
    for route, field in routes.items():
        for base in (f"/namespaces/{namespace}/{route}", f"/persistent/{topic}/{route}"):
            for raw in HOSTILE:
                body = raw.replace(b'"F"', json.dumps(field).encode()).replace(b'"G"', b'"other"')
                status, answer = admin.call("POST", base, raw=body)
                if raw.startswith(b'{"F": null'):  # null field: the Java default; the other field unknown
                    assert status in (204, 400), (base, body, status)
                    continue
                assert status == 400, (base, body, status, answer)
                assert "reason" in answer
            assert admin.call("DELETE", base)[0] == 204
            assert admin.call("GET", base)[0] == 204
    sub = f"/persistent/{topic}/s%E2%80%AE/dispatchRate"
    assert admin.call("POST", sub, {"dispatchThrottlingRateInMsg": 1})[0] == 412

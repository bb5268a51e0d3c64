"""WebSocket sessions on a broker that does not own the topic, on real processes (ZooKeeper, two bookies,
three brokers): the broker serves them through its owner proxy and follows the topic when it moves.

The clients are ``websocket-client`` sessions that refuse redirects (``redirect_limit=0``, as a browser's
WebSocket), opened on a broker chosen because it does not own the topic. Mid-stream the topic's bundle is
unloaded (admin) or its owner SIGKILLed; the clients' sessions must stay open, every acknowledged message
must reach the consumer and the reader (0 lost) in the order it was sent, and a message whose outcome became
unknown must be answered with an error result (``send-error``, the same ``context``), never left unanswered.
"""

from __future__ import annotations

import json
import struct
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import websocket
from fixtures.broker import b64, unb64
from fixtures.broker_processes import MagnetarProcess, ProcessCluster
from fixtures.zookeeper import ZooKeeperServer

from magnetar.broker.core.key_hash import partition_for_key
from magnetar.broker.wire.magnetar_v1 import (
    SUBPROTOCOL,
    OutgoingMessage,
    encode_ack_ranges,
    encode_permit,
    encode_send,
    parse_messages,
    parse_receipt,
)
from magnetar.broker.wire.message_id import MessageId

pytestmark = [pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.processes, pytest.mark.timeout(180)]

NS = "public/proxy"
ENV = {
    "MAGNETAR_METADATA_SESSION_TIMEOUT_MS": "4000",
    "MAGNETAR_LOAD_BALANCER_SHEDDING_ENABLED": "false",
    "MAGNETAR_WS_PROXY_RECONNECT_DEADLINE_MS": "30000",
}
WINDOW = 8
"""Messages a producer keeps in flight (so that a move finds some without an answer)."""


def url(broker: MagnetarProcess) -> str:
    return f"http://127.0.0.1:{broker.ready['port']}"


class Cluster:
    def __init__(self, zookeeper_url: str, tmp_path: Path) -> None:
        self.processes = ProcessCluster(zookeeper_url, tmp_path)
        for index in range(2):
            self.processes.start_bookie(index)
        self.brokers = [self.processes.start_broker(index, env=ENV) for index in range(3)]
        self.http = httpx.Client(timeout=10, follow_redirects=True)
        answer = self.http.put(
            f"{url(self.brokers[0])}/admin/v2/namespaces/{NS}", json={"bundles": {"numBundles": 4}}
        )
        assert answer.is_success, answer.text
        # Retention, so that a reader that follows a move can read on where it was: without it the ledgers
        # every subscription has consumed are trimmed when the topic is opened again, and a reader - whose
        # non-durable position does not hold them, as in Pulsar - would find them gone.
        retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
        answer = self.http.post(f"{url(self.brokers[0])}/admin/v2/namespaces/{NS}/retention", json=retention)
        assert answer.is_success, answer.text

    def owner(self, topic: str) -> str:
        answer = self.http.get(f"{url(self.brokers[0])}/lookup/v2/topic/persistent/{NS}/{topic}")
        answer.raise_for_status()
        return str(answer.json()["httpUrl"])

    def non_owner(self, topic: str) -> MagnetarProcess:
        owner = self.owner(topic)
        return next(b for b in self.brokers if url(b) != owner)

    def unload_bundle(self, topic: str) -> None:
        entry = url(self.brokers[0])
        bundle = self.http.get(f"{entry}/lookup/v2/topic/persistent/{NS}/{topic}/bundle").json()
        answer = self.http.put(f"{entry}/admin/v2/namespaces/{NS}/{bundle}/unload")
        assert answer.status_code == 204, answer.text

    def close(self) -> None:
        self.http.close()
        self.processes.close()


@pytest.fixture(scope="module")
def cluster(zookeeper_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One cluster for the file's tests (each on its own topic); the SIGKILL test runs last."""
    metadata_url = zookeeper_server.url(f"/test-{uuid.uuid4().hex[:12]}")
    cluster = Cluster(metadata_url, tmp_path_factory.mktemp("ws-proxy"))
    try:
        yield cluster
    finally:
        cluster.close()


OPENED: list[websocket.WebSocket] = []


@pytest.fixture(autouse=True)
def _close_sessions() -> Any:
    yield
    while OPENED:
        OPENED.pop().close(timeout=1)


def ws(broker: MagnetarProcess, path: str, **options: Any) -> websocket.WebSocket:
    """A session that does not follow redirects (as a browser's WebSocket); closed after the test."""
    base = url(broker).replace("http://", "ws://")
    session = websocket.create_connection(f"{base}{path}", timeout=30, redirect_limit=0, **options)
    OPENED.append(session)
    return session


def proxy_figures(broker: MagnetarProcess) -> dict[str, float]:
    """The broker's ``magnetar_ws_proxy_*`` samples from its ``/metrics``."""
    text = httpx.get(f"{url(broker)}/metrics", timeout=10).text
    figures: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("magnetar_ws_proxy_"):
            sample, value = line.rsplit(" ", 1)
            figures[sample.split("{", 1)[0]] = float(value)
    return figures


class JsonProducer(threading.Thread):
    """Sends ``count`` messages ``p-<i>`` with up to ``WINDOW`` in flight; records each answer."""

    def __init__(self, session: websocket.WebSocket, count: int, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.session, self.count, self.interval_s = session, count, interval_s
        self.acked: list[int] = []
        self.ack_ids: dict[int, str] = {}
        """The message id of each acknowledged message."""
        self.failed: list[int] = []
        self.error: BaseException | None = None

    def request(self, index: int) -> dict[str, str]:
        return {"payload": b64(f"p-{index}"), "context": str(index)}

    def run(self) -> None:
        try:
            in_flight = 0
            for index in range(self.count):
                self.session.send(json.dumps(self.request(index)))
                in_flight += 1
                while in_flight >= WINDOW:
                    self._answer()
                    in_flight -= 1
                time.sleep(self.interval_s)
            for _ in range(in_flight):
                self._answer()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _answer(self) -> None:
        answer = json.loads(self.session.recv())
        index = int(answer["context"])
        if answer["result"] == "ok":
            self.acked.append(index)
            self.ack_ids[index] = answer["messageId"]
        else:
            assert answer["result"].startswith("send-error"), answer
            assert answer.get("errorMsg"), answer
            self.failed.append(index)


class JsonReceiver(threading.Thread):
    """Receives (and acks, for a consumer) until ``stop`` is set and nothing came for a while."""

    def __init__(
        self, session: websocket.WebSocket, stop: threading.Event, *, ack: bool, pull_permits: int = 0
    ) -> None:
        super().__init__(daemon=True)
        self.session, self.stop, self.ack = session, stop, ack
        self.pull_permits = pull_permits
        """Pull mode: grant this many permits at the start, and as many again each time they are used."""
        self.received: list[int] = []
        self.ids: list[str] = []
        self.error: BaseException | None = None
        self.session.settimeout(1.0)

    def run(self) -> None:
        try:
            if self.pull_permits:
                self.session.send(json.dumps({"type": "permit", "permitMessages": self.pull_permits}))
            while True:
                try:
                    message = json.loads(self.session.recv())
                except websocket.WebSocketTimeoutException:
                    if self.stop.is_set():
                        return
                    continue
                self.received.append(int(unb64(message["payload"]).decode().removeprefix("p-")))
                self.ids.append(message["messageId"])
                if self.ack:
                    self.session.send(json.dumps({"messageId": message["messageId"]}))
                if self.pull_permits and len(self.received) % self.pull_permits == 0:
                    self.session.send(json.dumps({"type": "permit", "permitMessages": self.pull_permits}))
        except BaseException as exc:
            self.error = exc


def first_deliveries(received: list[int]) -> list[int]:
    seen: set[int] = set()
    order = []
    for index in received:
        if index not in seen:
            seen.add(index)
            order.append(index)
    return order


def run_with_unloads(
    cluster: Cluster,
    producer: JsonProducer,
    receivers: list[JsonReceiver],
    stop: threading.Event,
    unloads: list[tuple[int, str]],
) -> None:
    """Start the producer and receivers; when the producer has ``n`` answers, unload the bundle of ``topic``
    (each ``(n, topic)`` in turn); then wait (30 s at most) until every receiver got every acknowledged
    message, stop them and check that none failed."""
    for thread in (*receivers, producer):
        thread.start()
    try:
        for answers, topic in unloads:
            while len(producer.acked) + len(producer.failed) < answers and producer.is_alive():
                time.sleep(0.05)
            cluster.unload_bundle(topic)
        producer.join(60)
        assert not producer.is_alive()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(set(producer.acked) - set(r.received) for r in receivers):
            time.sleep(0.2)
    finally:
        stop.set()
        for receiver in receivers:
            receiver.join(10)
    for receiver in receivers:
        assert receiver.error is None, repr(receiver.error)


def check(producer: JsonProducer, receivers: dict[str, list[int]]) -> None:
    assert producer.error is None, repr(producer.error)
    assert sorted(producer.acked + producer.failed) == list(range(producer.count)), (
        "a message without an answer"
    )
    for name, received in receivers.items():
        lost = sorted(set(producer.acked) - set(received))
        assert not lost, f"{name}: acknowledged messages lost: {lost[:10]}"
        order = [i for i in first_deliveries(received) if i in set(producer.acked)]
        assert order == sorted(order), f"{name}: order per producer broken: {order[:50]}"


def assert_open(session: websocket.WebSocket) -> None:
    """The client's session survived: a ping is answered."""
    session.ping(b"alive")
    session.settimeout(10)


def test_json_producer_consumers_reader_on_a_non_owner_survive_a_bundle_unload(cluster: Cluster) -> None:
    topic = "unloaded"
    cluster.owner(topic)  # places the bundle
    entry = cluster.non_owner(topic)
    consumer = ws(entry, f"/ws/v2/consumer/persistent/{NS}/{topic}/sub?subscriptionInitialPosition=Earliest")
    reader = ws(entry, f"/ws/v2/reader/persistent/{NS}/{topic}?messageId=earliest")
    puller = ws(
        entry,
        f"/ws/v2/consumer/persistent/{NS}/{topic}/pull?subscriptionInitialPosition=Earliest&pullMode=true",
    )
    producer_session = ws(entry, f"/ws/v2/producer/persistent/{NS}/{topic}")
    before = proxy_figures(entry)
    stop = threading.Event()
    receivers = [
        JsonReceiver(consumer, stop, ack=True),
        JsonReceiver(reader, stop, ack=True),
        JsonReceiver(puller, stop, ack=True, pull_permits=40),  # its permits are granted again after a move
    ]
    producer = JsonProducer(producer_session, 400, 0.005)
    run_with_unloads(cluster, producer, receivers, stop, [(120, topic), (240, topic)])
    print(f"\nunload x2: acked {len(producer.acked)}, failed back {len(producer.failed)}, lost 0")
    check(
        producer,
        {
            "consumer": receivers[0].received,
            "reader": receivers[1].received,
            "pull consumer": receivers[2].received,
        },
    )
    for session in (consumer, reader, puller, producer_session):
        assert_open(session)
    log = entry.log_path.read_text()
    assert f"persistent://{NS}/{topic} moved from" in log, "the proxy never followed a move"
    after = proxy_figures(entry)
    delta = {name.removeprefix("magnetar_ws_proxy_"): after[name] - before[name] for name in after}
    print(f"proxy metrics on {url(entry)}: {delta}")
    assert after["magnetar_ws_proxy_sessions"] >= 4  # the four sessions, still open
    assert delta["moves_total"] >= 4
    assert delta["failed_back_total"] <= len(producer.failed)  # among the error results the producer got
    assert delta["frames_to_client_total"] >= len(producer.acked) * 4  # acks + 3 receivers' deliveries


def test_magnetar_v1_producer_and_consumer_on_a_non_owner_survive_a_bundle_unload(cluster: Cluster) -> None:
    topic = "binary"
    cluster.owner(topic)
    entry = cluster.non_owner(topic)
    options = {"subprotocols": [SUBPROTOCOL]}
    consumer = ws(
        entry, f"/ws/v2/consumer/persistent/{NS}/{topic}/sub?subscriptionInitialPosition=Earliest", **options
    )
    producer = ws(entry, f"/ws/v2/producer/persistent/{NS}/{topic}", **options)
    assert consumer.getsubprotocol() == SUBPROTOCOL
    assert producer.getsubprotocol() == SUBPROTOCOL
    stop = threading.Event()
    received: list[int] = []
    errors: list[BaseException] = []

    def consume() -> None:
        consumer.settimeout(1.0)
        try:
            while True:
                try:
                    frame = consumer.recv()
                except websocket.WebSocketTimeoutException:
                    if stop.is_set():
                        return
                    continue
                assert isinstance(frame, bytes)
                messages = parse_messages(frame)
                received.extend(int(m.payload.decode().removeprefix("p-")) for m in messages)
                first, last = messages[0].message_id, messages[-1].message_id
                consumer.send_binary(encode_ack_ranges([(first[0], first[1:4], last[1:4])]))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    acked: list[int] = []
    failed: list[int] = []
    frames = 60
    per_frame = 5
    try:
        for request_id in range(frames):
            batch = [OutgoingMessage(f"p-{request_id * per_frame + i}".encode()) for i in range(per_frame)]
            producer.send_binary(encode_send(request_id, batch))
            answer = producer.recv()
            assert isinstance(answer, bytes)
            kind, answered = answer[0], struct.unpack_from("<Q", answer, 1)[0]
            assert answered == request_id
            indexes = range(request_id * per_frame, (request_id + 1) * per_frame)
            (acked if kind == 0x81 else failed).extend(indexes)
            if request_id in (20, 40):
                cluster.unload_bundle(topic)
            time.sleep(0.02)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and set(acked) - set(received):
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join(10)
    assert not errors, repr(errors)
    lost = sorted(set(acked) - set(received))
    print(f"\nmagnetar.v1 unload x2: acked {len(acked)}, failed back {len(failed)}, lost {len(lost)}")
    assert not lost
    order = [i for i in first_deliveries(received) if i in set(acked)]
    assert order == sorted(order)
    assert_open(producer)
    assert_open(consumer)


PARTITIONS = 6
KEYS = 12


def key_of(index: int) -> str:
    return f"k{index % KEYS}"


def create_partitioned(cluster: Cluster, topic: str) -> dict[int, str]:
    """A 6-partition topic, each partition looked up (placed) through broker-0: partition -> owner URL."""
    entry = url(cluster.brokers[0])
    answer = cluster.http.put(f"{entry}/admin/v2/persistent/{NS}/{topic}/partitions", json=PARTITIONS)
    assert answer.status_code == 204, answer.text
    return {i: cluster.owner(f"{topic}-partition-{i}") for i in range(PARTITIONS)}


def bundle_of(cluster: Cluster, topic: str) -> str:
    entry = url(cluster.brokers[0])
    return str(cluster.http.get(f"{entry}/lookup/v2/topic/persistent/{NS}/{topic}/bundle").json())


class KeyedProducer(JsonProducer):
    """A JSON producer whose message ``i`` has the key ``k<i % 12>``."""

    def request(self, index: int) -> dict[str, str]:
        return {**super().request(index), "key": key_of(index)}


class PullReceiver(JsonReceiver):
    """A pull-mode consumer that checks it never holds more messages than it permitted."""

    def run(self) -> None:
        granted = 0
        try:
            self.session.send(json.dumps({"type": "permit", "permitMessages": self.pull_permits}))
            granted += self.pull_permits
            while True:
                try:
                    message = json.loads(self.session.recv())
                except websocket.WebSocketTimeoutException:
                    if self.stop.is_set():
                        return
                    continue
                self.received.append(int(unb64(message["payload"]).decode().removeprefix("p-")))
                assert len(self.received) <= granted, f"{len(self.received)} delivered, {granted} permitted"
                self.session.send(json.dumps({"messageId": message["messageId"]}))
                if len(self.received) % self.pull_permits == 0:
                    time.sleep(0.05)  # deliveries beyond the permits would arrive meanwhile
                    self.session.send(json.dumps({"type": "permit", "permitMessages": self.pull_permits}))
                    granted += self.pull_permits
        except BaseException as exc:
            self.error = exc


def check_per_key(acked: set[int], received: list[int]) -> None:
    for key in range(KEYS):
        order = [i for i in first_deliveries(received) if i in acked and i % KEYS == key]
        assert order == sorted(order), f"order of key k{key} broken: {order[:20]}"


def test_json_sessions_on_a_partitioned_topic_with_several_owners_survive_a_partition_unload(
    cluster: Cluster,
) -> None:
    topic = "parts"
    owners = create_partitioned(cluster, topic)
    print(f"\npartition owners: {owners}")
    assert len(set(owners.values())) >= 2, f"the partitions have one owner: {owners}"
    entry = cluster.brokers[0]  # owns at most some of the partitions: the others are remote
    before = proxy_figures(entry)
    consumer = ws(entry, f"/ws/v2/consumer/persistent/{NS}/{topic}/sub?subscriptionInitialPosition=Earliest")
    puller = ws(
        entry,
        f"/ws/v2/consumer/persistent/{NS}/{topic}/pull?subscriptionInitialPosition=Earliest&pullMode=true",
    )
    reader = ws(entry, f"/ws/v2/reader/persistent/{NS}/{topic}?messageId=earliest")
    producer_session = ws(entry, f"/ws/v2/producer/persistent/{NS}/{topic}")
    stop = threading.Event()
    receivers = [
        JsonReceiver(consumer, stop, ack=True),
        PullReceiver(puller, stop, ack=True, pull_permits=7),
        JsonReceiver(reader, stop, ack=True),
    ]
    producer = KeyedProducer(producer_session, 300, 0.004)
    moved = 1  # the partition whose bundle is unloaded mid-stream
    moved_bundle = bundle_of(cluster, f"{topic}-partition-{moved}")
    same_bundle = {
        i for i in range(PARTITIONS) if bundle_of(cluster, f"{topic}-partition-{i}") == moved_bundle
    }
    run_with_unloads(cluster, producer, receivers, stop, [(120, f"{topic}-partition-{moved}")])
    partitions_acked = {MessageId.from_base64(i).partition for i in producer.ack_ids.values()}
    for index, message_id in producer.ack_ids.items():
        assert MessageId.from_base64(message_id).partition == partition_for_key(
            key_of(index), PARTITIONS, None
        )
    failed_partitions = {partition_for_key(key_of(i), PARTITIONS, None) for i in producer.failed}
    print(
        f"partitioned topic, bundle of partition {moved} unloaded: acked {len(producer.acked)}, failed back "
        f"{len(producer.failed)} (partitions {sorted(failed_partitions)}; moved bundle holds "
        f"{sorted(same_bundle)}), partitions in acks {sorted(partitions_acked)}"
    )
    assert len(partitions_acked) >= 2
    assert failed_partitions <= same_bundle, "a partition that did not move failed messages back"
    assert producer.error is None, repr(producer.error)
    assert sorted(producer.acked + producer.failed) == list(range(producer.count)), (
        "a message without an answer"
    )
    for name, receiver in zip(("consumer", "pull consumer", "reader"), receivers, strict=True):
        lost = sorted(set(producer.acked) - set(receiver.received))
        assert not lost, f"{name}: acknowledged messages lost: {lost[:10]}"
        check_per_key(set(producer.acked), receiver.received)
    for session in (consumer, puller, reader, producer_session):
        assert_open(session)
    after = proxy_figures(entry)
    delta = {name.removeprefix("magnetar_ws_proxy_"): after[name] - before[name] for name in after}
    print(f"proxy metrics on {url(entry)}: {delta}")
    assert delta["sessions_opened_total"] == 4  # a partitioned session counts once, not once per partition
    assert delta["moves_total"] >= 4  # the moved partition, in each of the four sessions
    assert delta["failed_back_total"] <= len(producer.failed)
    log = entry.log_path.read_text()
    assert f"persistent://{NS}/{topic}-partition-{moved} moved from" in log, (
        "the proxy never followed the move"
    )


def test_magnetar_v1_sessions_on_a_partitioned_topic_get_one_answer_per_frame_across_a_move(
    cluster: Cluster,
) -> None:
    topic = "binparts"
    owners = create_partitioned(cluster, topic)
    assert len(set(owners.values())) >= 2, f"the partitions have one owner: {owners}"
    entry = cluster.brokers[1]
    options = {"subprotocols": [SUBPROTOCOL]}
    consumer = ws(
        entry, f"/ws/v2/consumer/persistent/{NS}/{topic}/sub?subscriptionInitialPosition=Earliest", **options
    )
    producer = ws(entry, f"/ws/v2/producer/persistent/{NS}/{topic}", **options)
    assert consumer.getsubprotocol() == SUBPROTOCOL
    assert producer.getsubprotocol() == SUBPROTOCOL
    frames, per_frame = 40, 8
    acked: list[int] = []
    failed: list[int] = []
    named: set[int] = set()
    for request_id in range(frames):
        indexes = range(request_id * per_frame, (request_id + 1) * per_frame)
        batch = [OutgoingMessage(f"p-{i}".encode(), key=key_of(i)) for i in indexes]
        producer.send_binary(encode_send(request_id, batch))
        if request_id == 20:  # one partition's bundle moves while this frame is in flight
            cluster.unload_bundle(f"{topic}-partition-0")
        answer = producer.recv()
        assert isinstance(answer, bytes)
        receipt = parse_receipt(answer)
        assert receipt.request_id == request_id
        if not receipt.ok:  # the frame had a run on the moving partition: one SEND_ERROR for the frame
            assert receipt.error_code == 8, receipt
            failed.extend(indexes)
            continue
        ids = receipt.message_ids()
        assert len(ids) == per_frame
        for index, message_id in zip(indexes, ids, strict=True):
            assert message_id[0] == partition_for_key(key_of(index), PARTITIONS, None)
            named.add(message_id[0])
        acked.extend(indexes)
    assert len(named) >= 2
    received: list[int] = []
    consumer.settimeout(10)
    while set(acked) - set(received):
        frame = consumer.recv()
        assert isinstance(frame, bytes)
        messages = parse_messages(frame)
        received.extend(int(m.payload.decode().removeprefix("p-")) for m in messages)
        for m in messages:
            consumer.send_binary(encode_ack_ranges([(m.message_id[0], m.message_id[1:4], m.message_id[1:4])]))
    print(
        f"\nmagnetar.v1 partitioned, a bundle unloaded: {len(acked)} acked, {len(failed)} failed back"
        f" ({len(failed) // per_frame} frames), {len(received)} received"
    )
    assert not set(acked) - set(received)
    check_per_key(set(acked), received)
    assert f"persistent://{NS}/{topic}-partition-0 moved from" in entry.log_path.read_text()
    # a pull-mode consumer gets at most what it permitted, however many partitions have messages
    puller = ws(
        entry,
        f"/ws/v2/consumer/persistent/{NS}/{topic}/pull?subscriptionInitialPosition=Earliest&pullMode=true",
        **options,
    )
    puller.settimeout(10)
    pulled: list[int] = []
    for permits in (1, 5, 3, 40, 2):
        puller.send_binary(encode_permit(permits))
        got = 0
        while got < permits:
            frame = puller.recv()
            assert isinstance(frame, bytes)
            got += len(parse_messages(frame))
            pulled += [int(m.payload.decode().removeprefix("p-")) for m in parse_messages(frame)]
        assert got == permits, f"{got} delivered for {permits} permits"
    puller.settimeout(0.5)
    with pytest.raises(websocket.WebSocketTimeoutException):
        puller.recv()  # nothing beyond the permits
    check_per_key(set(acked), pulled)
    assert_open(producer)
    assert_open(consumer)


def test_a_partitioned_session_passes_an_owners_refusal_on_and_ends_1000_after_unsubscribe(
    cluster: Cluster,
) -> None:
    topic = "partserr"
    owners = create_partitioned(cluster, topic)
    entry = next(
        b for b in cluster.brokers if url(b) != owners[0]
    )  # partition 0 is remote: its owner refuses
    path = f"/ws/v2/consumer/persistent/{NS}/{topic}/only?subscriptionType=Exclusive"
    first = ws(entry, path)
    second = websocket.WebSocket()
    try:
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            second.connect(url(entry).replace("http://", "ws://") + path, timeout=30, redirect_limit=0)
    finally:
        second.close()
    assert refused.value.status_code == 409, refused.value
    first.send(json.dumps({"type": "isEndOfTopic"}))
    assert json.loads(first.recv()) == {"endOfTopic": False}
    first.send(json.dumps({"type": "unsubscribe"}))
    first.settimeout(30)
    opcode, frame = first.recv_data(control_frame=True)
    assert opcode == websocket.ABNF.OPCODE_CLOSE
    assert struct.unpack("!H", frame[:2])[0] == 1000, frame
    first.shutdown()  # closed by the server: websocket-client's close() would leave the socket open
    again = ws(entry, path)  # the subscription is gone from every partition: a new one may be made
    assert_open(again)


def test_owner_sigkill_under_a_proxied_producer_and_consumer_loses_nothing(cluster: Cluster) -> None:
    topic = "killed"
    owner_url = cluster.owner(topic)
    owner = next(b for b in cluster.brokers if url(b) == owner_url)
    entry = next(b for b in cluster.brokers if b is not owner)
    consumer = ws(entry, f"/ws/v2/consumer/persistent/{NS}/{topic}/sub?subscriptionInitialPosition=Earliest")
    producer_session = ws(entry, f"/ws/v2/producer/persistent/{NS}/{topic}")
    stop = threading.Event()
    receiver = JsonReceiver(consumer, stop, ack=True)
    producer = JsonProducer(producer_session, 400, 0.01)
    receiver.start()
    producer.start()
    try:
        while len(producer.acked) < 100 and producer.is_alive():
            time.sleep(0.05)
        owner.kill()
        producer.join(90)
        assert not producer.is_alive()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and set(producer.acked) - set(receiver.received):
            time.sleep(0.2)
    finally:
        stop.set()
        receiver.join(10)
    assert receiver.error is None, repr(receiver.error)
    lost = set(producer.acked) - set(receiver.received)
    print(
        f"\nowner SIGKILL: sent {producer.count}, acked {len(producer.acked)}, "
        f"error result {len(producer.failed)}, lost {len(lost)}"
    )
    check(producer, {"consumer": receiver.received})
    assert_open(producer_session)
    assert_open(consumer)

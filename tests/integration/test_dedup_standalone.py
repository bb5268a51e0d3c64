"""Message deduplication against a real ``magnetar standalone``: enabled by the namespace policy (reaching a
loaded topic without an unload), a named producer's resent sequence ids are not stored again - over the
binary protocol with Apache's ``pulsar-client`` (explicit ``sequence_id``, ``last_sequence_id`` resumed by a
new producer of the same name) and over the WebSocket API (``producerName``, ``sequenceId``) - and the state
survives a SIGKILL of the standalone (snapshot in the ``pulsar.dedup`` cursor plus the entries after it).
One standalone for the module."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
import websocket
from fixtures.admin_http import Admin
from fixtures.processes import MagnetarProcess
from fixtures.pulsar_raw import RawClient
from fixtures.standalone_process import running_standalone

from magnetar.broker.protocols.pulsar_binary.commands import CommandType
from magnetar.broker.protocols.pulsar_binary.errors import ServerError
from magnetar.broker.protocols.pulsar_binary.metadata import MessageMetadata
from magnetar.broker.wire.magnetar_v1 import SUBPROTOCOL, encode_send, parse_receipt

pytestmark = [pytest.mark.processes]

HOST = "127.0.0.1"
NS = "public/dedup"


def call(process: MagnetarProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    return Admin(process).call(method, path, body)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dedup")


@pytest.fixture(scope="module")
def standalone(data_dir: Path) -> Iterator[MagnetarProcess]:
    # entries between snapshots: small, so that a recovery both loads a snapshot and replays entries
    env = {"MAGNETAR_BROKER_DEDUPLICATION_ENTRIES_INTERVAL": "3"}
    with running_standalone(data_dir, env=env) as process:
        assert call(process, "PUT", f"/namespaces/{NS}")[0] == 204
        assert call(process, "POST", f"/namespaces/{NS}/deduplication", True)[0] == 204
        yield process


def topic_name() -> str:
    return f"persistent://{NS}/t-{uuid.uuid4().hex[:8]}"


def read_all(client: pulsar.Client, topic: str) -> list[bytes]:
    """The payload of every message of ``topic`` from the start (the Python client shows no sequence
    ids)."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    try:
        while reader.has_message_available():
            message = reader.read_next(10_000)
            got.append(message.data())
    finally:
        reader.close()
    return got


def is_duplicate_id(message_id: pulsar.MessageId) -> bool:
    return bool(message_id.ledger_id() == -1 and message_id.entry_id() == -1)


def test_binary_resends_are_not_stored(standalone: MagnetarProcess) -> None:
    topic = topic_name()
    client = pulsar.Client(standalone.ready["brokerUrl"], operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, producer_name="p-bin", batching_enabled=False)
        for seq in range(5):
            assert not is_duplicate_id(producer.send(b"m%d" % seq, sequence_id=seq))
        for seq in (2, 3, 4):
            assert is_duplicate_id(producer.send(b"again%d" % seq, sequence_id=seq))
        producer.close()
        # a new producer of the same name numbers on from what the topic accepted
        again = client.create_producer(topic, producer_name="p-bin", batching_enabled=False)
        assert again.last_sequence_id() == 4
        # (the Python client sends no sequence id for ``sequence_id=0``: it is falsy there)
        assert is_duplicate_id(again.send(b"again1", sequence_id=1))
        again.send(b"m5")
        again.close()
        assert read_all(client, topic) == [b"m%d" % i for i in range(6)]
        status, stats = call(standalone, "GET", f"/persistent/{topic[len('persistent://') :]}/stats")
        assert status == 200
        assert stats["deduplicationStatus"] == "Enabled"
        assert "pulsar.dedup" not in stats["subscriptions"]
        status, internal = call(
            standalone, "GET", f"/persistent/{topic[len('persistent://') :]}/internalStats"
        )
        assert status == 200
        assert internal["cursors"]["pulsar.dedup"]["properties"] == {"p-bin": 5}
    finally:
        client.close()


def ws_producer(process: MagnetarProcess, topic: str, name: str) -> websocket.WebSocket:
    path = topic[len("persistent://") :]
    url = f"ws://{HOST}:{process.ready['port']}/ws/v2/producer/persistent/{path}?producerName={name}"
    return websocket.create_connection(url, timeout=10)


def ws_send(ws: websocket.WebSocket, payload: bytes, context: str, **fields: Any) -> dict[str, Any]:
    body = {"payload": base64.b64encode(payload).decode(), "context": context, **fields}
    ws.send(json.dumps(body))
    answer: dict[str, Any] = json.loads(ws.recv())
    assert answer.get("context") == context
    return answer


DUPLICATE_ID = base64.b64encode(b"\x08" + b"\xff" * 9 + b"\x01" + b"\x10" + b"\xff" * 9 + b"\x01").decode()
"""Pulsar's ``MessageIdData`` of -1:-1 (ledger and entry as 64-bit two's complement), base64."""


def test_websocket_resends_are_not_stored(standalone: MagnetarProcess) -> None:
    topic = topic_name()
    ws = ws_producer(standalone, topic, "p-ws")
    try:
        first = [ws_send(ws, b"w%d" % i, f"c{i}", sequenceId=i) for i in range(3)]
        assert all(a["result"] == "ok" and a["messageId"] != DUPLICATE_ID for a in first)
        again = ws_send(ws, b"w1-again", "c1-again", sequenceId=1)
        assert (again["result"], again["messageId"]) == ("ok", DUPLICATE_ID)
        # a number in a string is read as Jackson reads it
        assert ws_send(ws, b"w3", "c3", sequenceId="3")["result"] == "ok"
        # without a sequence id the producer numbers on
        assert ws_send(ws, b"w4", "c4")["result"] == "ok"
    finally:
        ws.close()
    client = pulsar.Client(standalone.ready["brokerUrl"], operation_timeout_seconds=10)
    try:
        assert read_all(client, topic) == [b"w%d" % i for i in range(5)]
    finally:
        client.close()


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (2**63, "send-error:3"),  # beyond Java's long
        ("\u0661\u0662", "send-error:3"),  # Arabic-Indic digits are no number
        ("ten", "send-error:3"),
        ([1], "send-error:3"),
        (-1, "send-error:"),  # a long, but no sequence id
    ],
)
def test_websocket_hostile_sequence_ids(standalone: MagnetarProcess, value: object, code: str) -> None:
    topic = topic_name()
    ws = ws_producer(standalone, topic, "p-hostile")
    try:
        answer = ws_send(ws, b"x", "c", sequenceId=value) if code != "send-error:3" else None
        if answer is None:
            ws.send(json.dumps({"payload": "eA==", "context": "c", "sequenceId": value}))
            answer = json.loads(ws.recv())
        assert answer["result"].startswith(code), answer
        assert ws_send(ws, b"fine", "ok", sequenceId=0)["result"] == "ok"  # the session goes on
    finally:
        ws.close()


@pytest.mark.parametrize("name", ["bad%01name", "rtl%E2%80%AEname", "nul%00"])
def test_websocket_hostile_producer_names_are_refused(standalone: MagnetarProcess, name: str) -> None:
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        ws_producer(standalone, topic_name(), name)
    assert refused.value.status_code == 400


def test_the_state_survives_a_sigkill(standalone: MagnetarProcess) -> None:
    """Five entries (a snapshot after the third), SIGKILL, restart: every resend is a duplicate. (A
    subscription keeps the messages: the ``pulsar.dedup`` cursor alone holds nothing back once it moves.)"""
    topic = topic_name()
    client = pulsar.Client(standalone.ready["brokerUrl"], operation_timeout_seconds=10)
    try:
        client.subscribe(topic, "keep").close()
        producer = client.create_producer(topic, producer_name="p-kill", batching_enabled=False)
        for seq in range(5):
            producer.send(b"k%d" % seq, sequence_id=seq)
    finally:
        client.close()
    standalone.kill()
    standalone.stop()  # closes the killed process's pipe
    standalone.start(timeout_s=60)
    client = pulsar.Client(standalone.ready["brokerUrl"], operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, producer_name="p-kill", batching_enabled=False)
        assert producer.last_sequence_id() == 4
        for seq in range(1, 5):
            assert is_duplicate_id(producer.send(b"k%d" % seq, sequence_id=seq))
        producer.send(b"k5", sequence_id=5)
        producer.close()
        assert read_all(client, topic) == [b"k%d" % i for i in range(6)]
    finally:
        client.close()


def test_a_topic_policy_reaches_a_loaded_topic_and_the_cursor_name_is_reserved(
    standalone: MagnetarProcess,
) -> None:
    """Off on a loaded topic (a resend is stored), on by its topic policy without an unload (the next
    resend is a duplicate), and no subscription may be named ``pulsar.dedup``."""
    topic = topic_name()
    path = f"/persistent/{topic[len('persistent://') :]}"
    client = pulsar.Client(standalone.ready["brokerUrl"], operation_timeout_seconds=10)
    try:
        client.subscribe(topic, "keep").close()
        assert call(standalone, "POST", f"{path}/deduplicationEnabled", False)[0] == 204
        producer = client.create_producer(topic, producer_name="p-toggle", batching_enabled=False)
        wait_for_status(standalone, path, "Disabled")
        producer.send(b"a", sequence_id=1)
        assert not is_duplicate_id(producer.send(b"a-stored-twice", sequence_id=1))
        assert call(standalone, "POST", f"{path}/deduplicationEnabled", True)[0] == 204
        wait_for_status(standalone, path, "Enabled")
        producer.send(b"b", sequence_id=2)
        assert is_duplicate_id(producer.send(b"b-again", sequence_id=2))
        producer.close()
        assert read_all(client, topic) == [b"a", b"a-stored-twice", b"b"]
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(topic, "pulsar.dedup")
        status, body = call(standalone, "PUT", f"{path}/subscription/pulsar.dedup")
        assert (status, body["reason"]) == (412, "Subscription with reserved subscription name attempted")
        assert call(standalone, "GET", f"{path}/subscriptions")[1] == ["keep"]
        assert "pulsar.dedup" in call(standalone, "GET", f"{path}/internalStats")[1]["cursors"]
        # off again: the cursor goes (it would hold back trimming)
        assert call(standalone, "POST", f"{path}/deduplicationEnabled", False)[0] == 204
        wait_for_status(standalone, path, "Disabled")
        assert "pulsar.dedup" not in call(standalone, "GET", f"{path}/internalStats")[1]["cursors"]
    finally:
        client.close()


def wait_for_status(process: MagnetarProcess, path: str, status: str) -> None:
    """Until the loaded topic's ``deduplicationStatus`` is ``status`` (the metadata watch delivers a policy
    change asynchronously); bounded by the number of polls, each a round trip."""
    for _ in range(200):
        if call(process, "GET", f"{path}/stats")[1]["deduplicationStatus"] == status:
            return
        time.sleep(0.05)
    raise AssertionError(f"deduplicationStatus never became {status}")


def test_magnetar_v1_sequenced_sends_are_deduplicated(standalone: MagnetarProcess) -> None:
    """SEND_SEQ: a resent frame's messages are not stored again (its RECEIPT range at -1:-1); an id out of
    range is a malformed frame (SEND_ERROR 3) and the session goes on."""
    topic = topic_name()
    path = topic[len("persistent://") :]
    url = f"ws://{HOST}:{standalone.ready['port']}/ws/v2/producer/persistent/{path}?producerName=p-v1"
    ws = websocket.create_connection(url, timeout=10, subprotocols=[SUBPROTOCOL])
    try:
        ws.send_binary(encode_send(1, [b"v0", b"v1", b"v2"], first_sequence_id=0))
        first = parse_receipt(ws.recv())
        assert first.ok
        assert first.ranges[0].ledger_id >= 0
        ws.send_binary(encode_send(2, [b"v0", b"v1", b"v2"], first_sequence_id=0))
        again = parse_receipt(ws.recv())
        assert again.ok
        assert (again.ranges[0].ledger_id, again.ranges[0].entry_id) == (-1, -1)
        ws.send_binary(encode_send(3, [b"bad"], first_sequence_id=-5))
        refused = parse_receipt(ws.recv())
        assert (refused.request_id, refused.ok, refused.error_code) == (3, False, 3)
        ws.send_binary(encode_send(4, [b"v3"]))  # a plain SEND numbers on from 2
        assert parse_receipt(ws.recv()).ok
        ws.send_binary(encode_send(5, [b"v3"], first_sequence_id=3))  # so this is its resend
        resent = parse_receipt(ws.recv())
        assert (resent.ranges[0].ledger_id, resent.ranges[0].entry_id) == (-1, -1)
    finally:
        ws.close()
    client = pulsar.Client(standalone.ready["brokerUrl"], operation_timeout_seconds=10)
    try:
        assert read_all(client, topic) == [b"v0", b"v1", b"v2", b"v3"]
    finally:
        client.close()


@pytest.mark.parametrize("sequence_id", [2**63, 2**64 - 1])
def test_binary_sequence_ids_beyond_a_java_long_are_refused(
    standalone: MagnetarProcess, sequence_id: int
) -> None:
    """A raw SEND with a sequence id no Java ``long`` holds: SEND_ERROR NotAllowedError (not retried), nothing
    stored, and the producer goes on."""
    raw = RawClient(HOST, int(standalone.ready["brokerUrl"].rsplit(":", 1)[1]))
    try:
        topic = topic_name()
        kind, _ = raw.producer(topic, 1, 1, name="p-raw")
        assert kind == CommandType.PRODUCER_SUCCESS
        raw.send(1, sequence_id, MessageMetadata("p-raw", sequence_id, 1), b"huge")
        kind, fields = raw.read()
        assert kind == CommandType.SEND_ERROR
        assert fields.uint(3) == ServerError.NotAllowedError
        raw.send(1, 7, MessageMetadata("p-raw", 7, 1), b"fine")
        kind, _ = raw.read()
        assert kind == CommandType.SEND_RECEIPT
    finally:
        raw.close()
    client = pulsar.Client(standalone.ready["brokerUrl"], operation_timeout_seconds=10)
    try:
        assert read_all(client, topic) == [b"fine"]
    finally:
        client.close()


def test_an_inactive_producers_state_is_purged_and_its_sequence_ids_stored_again(tmp_path: Path) -> None:
    """A standalone told to forget a producer name after 0.05 minutes (3 s) without a producer of that
    name: the internal stats' snapshot loses the name, a new producer of the name starts from -1 and the
    same sequence id is stored again; a name whose producer stays connected keeps its state."""
    env = {
        "MAGNETAR_BROKER_DEDUPLICATION_PRODUCER_INACTIVITY_TIMEOUT_MINUTES": "0.05",
        "MAGNETAR_BROKER_DEDUPLICATION_ENTRIES_INTERVAL": "1",  # a snapshot per entry: the stats show each
    }
    with running_standalone(tmp_path, env=env) as process:
        assert call(process, "PUT", f"/namespaces/{NS}")[0] == 204
        assert call(process, "POST", f"/namespaces/{NS}/deduplication", True)[0] == 204
        topic = topic_name()
        path = topic[len("persistent://") :]
        client = pulsar.Client(process.ready["brokerUrl"], operation_timeout_seconds=10)
        try:
            stays = client.create_producer(topic, producer_name="stays", batching_enabled=False)
            assert not is_duplicate_id(stays.send(b"s7", sequence_id=7))
            producer = client.create_producer(topic, producer_name="idle", batching_enabled=False)
            assert not is_duplicate_id(producer.send(b"first", sequence_id=5))
            assert is_duplicate_id(producer.send(b"resent", sequence_id=5))
            producer.close()

            def properties() -> dict[str, int]:
                status, internal = call(process, "GET", f"/persistent/{path}/internalStats")
                assert status == 200
                return dict(internal["cursors"]["pulsar.dedup"]["properties"])

            assert properties() == {"stays": 7, "idle": 5}
            deadline = time.monotonic() + 30
            while "idle" in properties():  # purged within the timeout plus a third of it
                assert time.monotonic() < deadline, properties()
                time.sleep(0.2)
            assert properties() == {"stays": 7}
            again = client.create_producer(topic, producer_name="idle", batching_enabled=False)
            assert again.last_sequence_id() == -1
            assert not is_duplicate_id(again.send(b"stored again", sequence_id=5))
            assert is_duplicate_id(stays.send(b"s7 again", sequence_id=7))  # connected all along
            again.close()
            stays.close()
            assert read_all(client, topic) == [b"s7", b"first", b"stored again"]
        finally:
            client.close()

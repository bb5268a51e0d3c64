"""A JSON producer's frames are handled per read: many publish requests arriving in one socket read - good
ones, hostile ones, binary ones, a read cut anywhere - are each answered as if it had come alone, in order,
and the good ones are stored in the order they were sent."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import websocket
from fixtures.broker import Broker, b64, receive, unb64

Connect = Callable[..., websocket.WebSocket]
NS = "persistent/public/default"

BAD_FRAMES: list[tuple[str | bytes, int]] = [
    ("{not json", 3),
    ("[1,2]", 3),
    ('{"payload":"aGk=","context":"x","sequenceId":9223372036854775808}', 3),
    ('{"payload":"aGk=","context":"x","properties":{"a":null}}', 3),
    ('{"payload":"not base64!","context":"x"}', 7),
    ('{"context":"x"}', 7),
    ('{"payload":"aGk=","context":"x","eventTime":"yesterday"}', 7),
    (b"\x00\x01", 3),
]


def frame(message: str | bytes) -> bytes:
    opcode = websocket.ABNF.OPCODE_TEXT if isinstance(message, str) else websocket.ABNF.OPCODE_BINARY
    data = message.encode() if isinstance(message, str) else message
    return bytes(websocket.ABNF.create_frame(data, opcode).format())


def requests(count: int) -> tuple[list[str | bytes], list[int | None]]:
    """``count`` frames: good publish requests with context ``str(i)`` and payload ``m<i>``, every fifth one
    replaced by a bad frame; and the expected outcome of each (None: ok, else the send-error code)."""
    frames: list[str | bytes] = []
    expected: list[int | None] = []
    for index in range(count):
        if index % 5 == 4:
            bad, code = BAD_FRAMES[(index // 5) % len(BAD_FRAMES)]
            frames.append(bad)
            expected.append(code)
        else:
            frames.append(json.dumps({"payload": b64(f"m{index}"), "context": str(index)}))
            expected.append(None)
    return frames, expected


def check_answers(producer: websocket.WebSocket, expected: list[int | None]) -> list[str]:
    """Every frame answered once: good ones ok (acks in order), bad ones with their send-error; the payloads
    stored, in order."""
    answers = [json.loads(producer.recv()) for _ in expected]
    oks = [answer for answer in answers if answer["result"] == "ok"]
    good = [str(i) for i, code in enumerate(expected) if code is None]
    assert [answer["context"] for answer in oks] == good
    errors = sorted(answer["result"] for answer in answers if answer["result"] != "ok")
    assert errors == sorted(f"send-error:{code}" for code in expected if code is not None)
    return [f"m{i}" for i, code in enumerate(expected) if code is None]


def test_many_requests_in_one_write_are_each_answered(broker: Broker, ws_connect: Connect) -> None:
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/one-write")
    frames, expected = requests(2000)
    producer.sock.sendall(b"".join(frame(message) for message in frames))
    stored = check_answers(producer, expected)
    reader = ws_connect(f"{broker.ws_url}/ws/v2/reader/{NS}/one-write?messageId=earliest")
    assert [unb64(m["payload"]).decode() for m in receive(reader, len(stored))] == stored


def test_requests_cut_anywhere_across_writes_are_each_answered(broker: Broker, ws_connect: Connect) -> None:
    producer = ws_connect(f"{broker.ws_url}/ws/v2/producer/{NS}/cut-writes")
    frames, expected = requests(300)
    wire = b"".join(frame(message) for message in frames)
    rng = random.Random(7)
    at = 0
    while at < len(wire):  # pieces of 1 to 300 bytes: frames cut in their headers, masks and payloads
        size = rng.randint(1, 300)
        producer.sock.sendall(wire[at : at + size])
        at += size
    stored = check_answers(producer, expected)
    reader = ws_connect(f"{broker.ws_url}/ws/v2/reader/{NS}/cut-writes?messageId=earliest")
    assert [unb64(m["payload"]).decode() for m in receive(reader, len(stored))] == stored

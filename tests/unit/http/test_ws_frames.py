"""The sans-IO WebSocket frame codec: round trips under any fragmentation and chunking, wsproto agreement,
and every protocol violation RFC 6455 names."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto.frame_protocol import FrameProtocol, Opcode

from magnetar.bookkeeper.runtime.http.ws_frames import (
    CLOSE_INVALID_PAYLOAD,
    CLOSE_MESSAGE_TOO_BIG,
    CLOSE_NO_STATUS,
    CLOSE_POLICY_VIOLATION,
    CLOSE_PROTOCOL_ERROR,
    OPCODE_BINARY,
    OPCODE_CLOSE,
    OPCODE_CONTINUATION,
    OPCODE_PING,
    OPCODE_PONG,
    OPCODE_TEXT,
    Close,
    Event,
    FrameDecoder,
    Ping,
    Pong,
    ProtocolViolation,
    append_frames,
    close_payload,
    encode_frame,
    mask,
    mask_python,
)

KEY = b"\x01\x02\x03\x04"


def server_decoder(limit: int = 1 << 20) -> FrameDecoder:
    return FrameDecoder(expect_masked=True, message_bytes_max=limit)


def client_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    return encode_frame(opcode, payload, fin=fin, mask_key=os.urandom(4))


def feed_in_chunks(decoder: FrameDecoder, data: bytes, cuts: list[int]) -> list[Event]:
    events: list[Event] = []
    start = 0
    for cut in sorted({c % (len(data) + 1) for c in cuts}):
        events += decoder.feed(data[start:cut])
        start = cut
    events += decoder.feed(data[start:])
    return events


messages = st.lists(
    st.one_of(st.text(max_size=300), st.binary(max_size=70_000)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(messages, st.lists(st.integers(min_value=0), max_size=20), st.data())
def test_messages_round_trip_through_any_fragmentation_and_chunking(
    sent: list[str | bytes], cuts: list[int], data: st.DataObject
) -> None:
    wire = bytearray()
    expected: list[Event] = []
    for message in sent:
        payload = message.encode() if isinstance(message, str) else message
        opcode = OPCODE_TEXT if isinstance(message, str) else OPCODE_BINARY
        pieces = data.draw(st.integers(min_value=1, max_value=4))
        size = -(-len(payload) // pieces) if payload else 0
        parts = [payload[i : i + size] for i in range(0, len(payload), size)] if size else [b""]
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            wire += client_frame(opcode if index == 0 else OPCODE_CONTINUATION, part, fin=last)
            if not last and data.draw(st.booleans()):
                wire += client_frame(OPCODE_PING, b"p")  # control frames may come between fragments
                expected.append(Ping(b"p"))
        expected.append(message)
    events = feed_in_chunks(server_decoder(), bytes(wire), cuts)
    # a ping between fragments is reported before the message it interrupts completes
    assert sorted(map(repr, events)) == sorted(map(repr, expected))
    assert [e for e in events if not isinstance(e, Ping)] == sent


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=200), st.binary(max_size=70_000)), min_size=1, max_size=5))
def test_client_side_decodes_what_wsproto_servers_send(sent: list[str | bytes]) -> None:
    server = FrameProtocol(client=False, extensions=[])
    wire = b"".join(bytes(server.send_data(m)) for m in sent)
    decoder = FrameDecoder(expect_masked=False, message_bytes_max=1 << 20)
    assert decoder.feed(wire) == sent


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=200), st.binary(max_size=70_000)), min_size=1, max_size=5))
def test_wsproto_servers_decode_our_masked_frames(sent: list[str | bytes]) -> None:
    server = FrameProtocol(client=False, extensions=[])
    for message in sent:
        payload = message.encode() if isinstance(message, str) else message
        opcode = OPCODE_TEXT if isinstance(message, str) else OPCODE_BINARY
        server.receive_bytes(client_frame(opcode, payload))
    received = []
    for frame in server.received_frames():
        assert frame.message_finished
        received.append(frame.payload)
    assert received == sent


@pytest.mark.parametrize("masking", [mask, mask_python], ids=["mask", "mask_python"])
@given(payload=st.binary(max_size=1000), key=st.binary(min_size=4, max_size=4), offset=st.integers(0, 7))
def test_masking_twice_is_the_identity(masking: object, payload: bytes, key: bytes, offset: int) -> None:
    assert callable(masking)
    view = memoryview(b"\xff" * offset + payload)[offset:]  # the decoder masks slices of what it received
    masked = masking(view, key)
    assert isinstance(masked, bytes)
    assert len(masked) == len(payload)
    assert masking(masked, key) == payload
    assert masked == bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def test_mask_is_the_c_speedup_of_a_declared_dependency() -> None:
    """``websockets`` is a runtime dependency for its C ``apply_mask``: a 12 KB frame costs 0.5 us instead of
    24 us, on every frame a client sends."""
    from websockets.speedups import apply_mask

    assert mask is apply_mask


def test_control_frames() -> None:
    decoder = server_decoder()
    wire = (
        client_frame(OPCODE_PING, b"hi")
        + client_frame(OPCODE_PONG, b"")
        + client_frame(OPCODE_CLOSE, close_payload(1000, "bye"))
        + client_frame(OPCODE_TEXT, b"after close: ignored")
    )
    assert decoder.feed(wire) == [Ping(b"hi"), Pong(b""), Close(1000, "bye")]
    assert decoder.finished
    assert decoder.feed(client_frame(OPCODE_TEXT, b"x")) == []


def test_close_without_a_code_is_no_status() -> None:
    assert server_decoder().feed(client_frame(OPCODE_CLOSE, b"")) == [Close(CLOSE_NO_STATUS)]


def test_close_payload_encoding() -> None:
    assert close_payload(None) == b""
    assert close_payload(CLOSE_NO_STATUS, "ignored") == b""
    assert close_payload(1006) == struct.pack("!H", 1000)  # local-only codes are never sent
    long_reason = "é" * 100  # 200 bytes of UTF-8: cut on a character boundary
    payload = close_payload(4003, long_reason)
    assert len(payload) <= 125
    assert payload[2:].decode() == "é" * 61


def violation(wire: bytes, limit: int = 1 << 20, *, expect_masked: bool = True) -> ProtocolViolation:
    events = FrameDecoder(expect_masked=expect_masked, message_bytes_max=limit).feed(wire)
    assert events, "expected a violation"
    last = events[-1]
    assert isinstance(last, ProtocolViolation), events
    return last


@pytest.mark.parametrize(
    ("wire", "code"),
    [
        (encode_frame(OPCODE_TEXT, b"x"), CLOSE_PROTOCOL_ERROR),  # unmasked client frame
        (bytes([0x81 | 0x40, 0x80 | 1]) + KEY + b"x", CLOSE_PROTOCOL_ERROR),  # RSV1 without an extension
        (bytes([0x83, 0x80]) + KEY, CLOSE_PROTOCOL_ERROR),  # reserved data opcode
        (bytes([0x8B, 0x80]) + KEY, CLOSE_PROTOCOL_ERROR),  # reserved control opcode
        (bytes([0x09, 0x80]) + KEY, CLOSE_PROTOCOL_ERROR),  # fragmented ping
        (bytes([0x89, 0x80 | 126, 0, 126]) + KEY + b"x" * 126, CLOSE_PROTOCOL_ERROR),  # control > 125
        (bytes([0x82, 0x80 | 126, 0, 5]) + KEY + b"x" * 5, CLOSE_PROTOCOL_ERROR),  # non-minimal length
        (bytes([0x82, 0x80 | 127]) + struct.pack("!Q", 100) + KEY, CLOSE_PROTOCOL_ERROR),
        (bytes([0x82, 0x80 | 127]) + struct.pack("!Q", 1 << 63) + KEY, CLOSE_PROTOCOL_ERROR),
        (client_frame(OPCODE_CONTINUATION, b"x"), CLOSE_PROTOCOL_ERROR),  # continuation of nothing
        (
            client_frame(OPCODE_TEXT, b"a", fin=False) + client_frame(OPCODE_BINARY, b"b"),
            CLOSE_PROTOCOL_ERROR,
        ),  # a new message inside a fragmented one
        (client_frame(OPCODE_TEXT, b"\xff\xfe"), CLOSE_INVALID_PAYLOAD),
        (
            client_frame(OPCODE_TEXT, b"\xc3", fin=False) + client_frame(OPCODE_CONTINUATION, b"("),
            CLOSE_INVALID_PAYLOAD,
        ),
        (client_frame(OPCODE_CLOSE, b"\x03"), CLOSE_PROTOCOL_ERROR),  # 1-byte close payload
        (client_frame(OPCODE_CLOSE, struct.pack("!H", 999)), CLOSE_PROTOCOL_ERROR),
        (client_frame(OPCODE_CLOSE, struct.pack("!H", 1005)), CLOSE_PROTOCOL_ERROR),  # local only
        (client_frame(OPCODE_CLOSE, struct.pack("!H", 2000)), CLOSE_PROTOCOL_ERROR),  # reserved
        (client_frame(OPCODE_CLOSE, struct.pack("!H", 5000)), CLOSE_PROTOCOL_ERROR),
        (client_frame(OPCODE_CLOSE, struct.pack("!H", 1000) + b"\xff"), CLOSE_INVALID_PAYLOAD),
    ],
    # named by the frame header's first two bytes: the random mask keys must not make the test ids differ
    # between two collections (pytest-xdist's workers must collect the same ids)
    ids=lambda value: value[:2].hex() if isinstance(value, bytes) else str(value),
)
def test_violations(wire: bytes, code: int) -> None:
    assert violation(wire).code == code


def test_masked_server_frame_is_a_violation_on_the_client() -> None:
    assert violation(client_frame(OPCODE_TEXT, b"x"), expect_masked=False).code == CLOSE_PROTOCOL_ERROR


def test_events_before_a_violation_are_kept_and_nothing_after_is_decoded() -> None:
    decoder = server_decoder()
    events = decoder.feed(client_frame(OPCODE_TEXT, b"ok") + encode_frame(OPCODE_TEXT, b"unmasked"))
    assert events[0] == "ok"
    assert isinstance(events[1], ProtocolViolation)
    assert decoder.finished
    assert decoder.feed(client_frame(OPCODE_TEXT, b"more")) == []


def test_oversized_message_is_refused_from_its_header_and_skipped() -> None:
    decoder = server_decoder(limit=1000)
    header = bytes([0x82, 0x80 | 127]) + struct.pack("!Q", 10_000_000) + KEY
    events = decoder.feed(header + b"x" * 100)
    assert events == [ProtocolViolation(CLOSE_MESSAGE_TOO_BIG, "message larger than 1000 bytes")]
    assert not decoder.finished  # still reading control frames (the peer's Close)
    assert decoder.buffered_bytes == 0
    for _ in range(10):  # the rest of the huge payload is skipped, never buffered
        assert decoder.feed(b"y" * 999_990) == []
        assert decoder.buffered_bytes == 0
    tail = client_frame(OPCODE_TEXT, b"dropped") + client_frame(OPCODE_CLOSE, close_payload(1000))
    assert decoder.feed(tail) == [Close(1000, "")]


def test_fragments_count_towards_the_limit() -> None:
    decoder = server_decoder(limit=1000)
    first = client_frame(OPCODE_TEXT, b"a" * 600, fin=False)
    second = client_frame(OPCODE_CONTINUATION, b"b" * 600)
    ping = client_frame(OPCODE_PING, b"")
    events = decoder.feed(first + second + ping)
    assert events == [ProtocolViolation(CLOSE_MESSAGE_TOO_BIG, "message larger than 1000 bytes"), Ping(b"")]


def test_a_message_in_more_frames_than_allowed_is_refused_with_1008_and_skipped() -> None:
    """Zero-byte continuation frames never reach the byte limit: the frame count bounds them."""
    decoder = FrameDecoder(expect_masked=True, message_bytes_max=1000, message_fragments_max=3)
    frames = (
        client_frame(OPCODE_TEXT, b"", fin=False) + client_frame(OPCODE_CONTINUATION, b"", fin=False) * 10
    )
    events = decoder.feed(frames + client_frame(OPCODE_CONTINUATION, b"") + client_frame(OPCODE_PING, b"p"))
    assert events == [ProtocolViolation(CLOSE_POLICY_VIOLATION, "message in more than 3 frames"), Ping(b"p")]
    assert not decoder.finished  # still decoding control frames: the peer's Close will arrive
    assert decoder.feed(client_frame(OPCODE_BINARY, b"later")) == []  # data frames are skipped from now on


def test_a_message_in_exactly_the_allowed_frames_passes() -> None:
    decoder = FrameDecoder(expect_masked=True, message_bytes_max=1000, message_fragments_max=3)
    frames = client_frame(OPCODE_TEXT, b"a", fin=False) + client_frame(OPCODE_CONTINUATION, b"b", fin=False)
    assert decoder.feed(frames + client_frame(OPCODE_CONTINUATION, b"c")) == ["abc"]
    assert decoder.feed(frames + client_frame(OPCODE_CONTINUATION, b"d")) == ["abd"]  # counted per message


def test_one_byte_fragments_reassemble_into_one_buffer() -> None:
    decoder = FrameDecoder(expect_masked=True, message_bytes_max=1 << 20, message_fragments_max=5000)
    wire = client_frame(OPCODE_BINARY, b"\x00", fin=False)
    wire += b"".join(client_frame(OPCODE_CONTINUATION, bytes([i % 256]), fin=False) for i in range(1, 4999))
    wire += client_frame(OPCODE_CONTINUATION, b"\xff")
    assert decoder.feed(wire) == [b"\x00" + bytes(i % 256 for i in range(1, 4999)) + b"\xff"]


def test_message_exactly_at_the_limit_passes() -> None:
    assert server_decoder(limit=1000).feed(client_frame(OPCODE_BINARY, b"z" * 1000)) == [b"z" * 1000]


def test_byte_by_byte_feeding() -> None:
    decoder = server_decoder()
    wire = client_frame(OPCODE_TEXT, "héllo".encode()) + client_frame(OPCODE_BINARY, b"\x00" * 70_000)
    events: list[Event] = []
    for index in range(0, len(wire), 7):
        events += decoder.feed(wire[index : index + 7])
    assert events == ["héllo", b"\x00" * 70_000]


def test_wsproto_opcodes_match() -> None:
    assert (OPCODE_TEXT, OPCODE_BINARY, OPCODE_CLOSE, OPCODE_PING, OPCODE_PONG) == (
        Opcode.TEXT,
        Opcode.BINARY,
        Opcode.CLOSE,
        Opcode.PING,
        Opcode.PONG,
    )


@pytest.mark.parametrize("opcode", [OPCODE_TEXT, OPCODE_BINARY])
def test_frames_appended_at_once_are_those_encoded_one_by_one(opcode: int) -> None:
    messages = [os.urandom(size) for size in (0, 1, 125, 126, 127, 65_535, 65_536, 70_000, 3)]
    out = bytearray(b"queued ")
    append_frames(out, opcode, messages)
    assert bytes(out) == b"queued " + b"".join(encode_frame(opcode, m) for m in messages)
    # and a client's decoder reads them back (a server's frames are unmasked)
    decoder = FrameDecoder(expect_masked=False, message_bytes_max=1 << 20)
    if opcode == OPCODE_BINARY:
        assert decoder.feed(bytes(out[len(b"queued ") :])) == messages


def boundary_frames() -> tuple[bytes, list[Event]]:
    """Frames around the decoder's in-line path and its edges: whole text and binary messages of 0, 1, 125,
    126, 127 and 300 bytes (7- and 16-bit lengths), a fragmented message with a ping inside, a pong."""
    wire = bytearray()
    expected: list[Event] = []
    for size in (0, 1, 125, 126, 127, 300):
        text = "é" * (size // 2) + "x" * (size % 2)
        wire += client_frame(OPCODE_TEXT, text.encode())
        wire += client_frame(OPCODE_BINARY, bytes([size % 256]) * size)
        expected += [text, bytes([size % 256]) * size]
    wire += client_frame(OPCODE_TEXT, b"frag", fin=False) + client_frame(OPCODE_PING, b"in between")
    wire += client_frame(OPCODE_CONTINUATION, b"mented") + client_frame(OPCODE_PONG, b"")
    wire += client_frame(OPCODE_BINARY, b"after")
    expected += [Ping(b"in between"), "fragmented", Pong(b""), b"after"]
    return bytes(wire), expected


def test_frames_cut_at_every_byte_decode_the_same() -> None:
    wire, expected = boundary_frames()
    assert server_decoder().feed(wire) == expected
    for cut in range(len(wire) + 1):
        decoder = server_decoder()
        assert decoder.feed(wire[:cut]) + decoder.feed(wire[cut:]) == expected, cut


def test_many_frames_in_one_read() -> None:
    wire, expected = boundary_frames()
    many = client_frame(OPCODE_BINARY, b"\x00" * 65535) + client_frame(OPCODE_TEXT, b"y" * 65536)
    events = server_decoder().feed(wire * 500 + many + wire)
    assert events == expected * 500 + [b"\x00" * 65535, "y" * 65536] + expected


def test_a_whole_message_over_the_limit_is_refused_and_later_ones_skipped() -> None:
    decoder = server_decoder(limit=1000)
    wire = client_frame(OPCODE_TEXT, b"ok") + client_frame(OPCODE_BINARY, b"z" * 1001)
    wire += client_frame(OPCODE_TEXT, b"skipped") + client_frame(OPCODE_CLOSE, close_payload(1000))
    assert decoder.feed(wire) == [
        "ok",
        ProtocolViolation(CLOSE_MESSAGE_TOO_BIG, "message larger than 1000 bytes"),
        Close(1000, ""),
    ]


def test_after_abandon_whole_messages_are_skipped_and_the_close_still_read() -> None:
    decoder = server_decoder()
    assert decoder.feed(client_frame(OPCODE_TEXT, b"before")) == ["before"]
    decoder.abandon()
    wire = client_frame(OPCODE_TEXT, b"skipped") + client_frame(OPCODE_BINARY, b"too")
    assert decoder.feed(wire + client_frame(OPCODE_CLOSE, close_payload(1001))) == [Close(1001, "")]

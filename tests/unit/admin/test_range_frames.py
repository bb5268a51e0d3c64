"""The range-read framing (:mod:`magnetar.admin.range_frames`): both versions round-trip, a version-1 stream
decodes as before, and broken input raises :class:`FrameError` instead of misreading."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.admin.range_frames import (
    LENGTH,
    FrameDecoder,
    FrameError,
    RangeEnd,
    RangeMessage,
    encode_end_frame,
    encode_entry_frame,
    encode_message_frame,
)
from magnetar.broker.wire.entry_format import StoredMessage, encode_batch, encode_message

text = st.text(max_size=20)
messages = st.builds(
    RangeMessage,
    ledger_id=st.integers(0, 2**63 - 1),
    entry_id=st.integers(-1, 2**63 - 1),
    batch_index=st.integers(-1, 100),
    batch_size=st.integers(0, 100),
    publish_time_ms=st.integers(0, 2**62),
    event_time_ms=st.integers(0, 2**62),
    key=st.none() | text,
    properties=st.dictionaries(text, text, max_size=4),
    payload=st.binary(max_size=64),
    producer_name=text,
    sequence_id=st.integers(-1, 2**62),
)


def decode_all(data: bytes, chunk: int = 7) -> list[RangeMessage | RangeEnd]:
    decoder = FrameDecoder()
    out: list[RangeMessage | RangeEnd] = []
    for i in range(0, len(data), chunk):
        out.extend(decoder.feed(data[i : i + chunk]))
    return out


@given(st.lists(messages, max_size=5), st.booleans())
def test_version_2_round_trips_in_any_chunking(batch: list[RangeMessage], complete: bool) -> None:
    end = RangeEnd((3, 4), len(batch), complete)
    data = b"".join(encode_message_frame(m, 2) for m in batch) + encode_end_frame(end)
    assert decode_all(data) == [*batch, end]


@given(messages)
def test_version_1_drops_only_the_producer_name_and_sequence_id(message: RangeMessage) -> None:
    (decoded,) = decode_all(encode_message_frame(message, 1), chunk=1000)
    assert isinstance(decoded, RangeMessage)
    assert (decoded.producer_name, decoded.sequence_id) == ("", -1)
    assert decoded.payload == message.payload
    assert (decoded.key, dict(decoded.properties)) == (message.key, dict(message.properties))


def test_version_1_bytes_are_unchanged() -> None:
    """A version-1 client sees exactly the frames it saw before version 2 existed."""
    frame = encode_message_frame(RangeMessage(1, 2, -1, 0, 5, 0, "k", {"a": "b"}, b"xy", "ignored", 9))
    assert frame.hex() == (
        "0000003e"  # length
        "01" "0000000000000001" "0000000000000002" "ffffffff" "00000000"  # kind, ledger, entry, index, size
        "0000000000000005" "0000000000000000"  # publish, event
        "00000001" "6b"  # key
        "0001" "0001" "61" "00000001" "62"  # one property
        "00000002" "7879"  # payload
    )  # fmt: skip


def test_unknown_versions_and_kinds_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown frame version"):
        encode_message_frame(RangeMessage(1, 2, -1, 0, 5, 0, None), 3)
    with pytest.raises(FrameError, match="unknown frame kind 9"):
        list(FrameDecoder().feed(LENGTH.pack(1) + b"\x09"))
    with pytest.raises(FrameError, match="bad frame length"):
        list(FrameDecoder().feed(LENGTH.pack(0)))


def test_truncated_and_trailing_bytes_are_refused() -> None:
    frame = encode_message_frame(RangeMessage(1, 2, -1, 0, 5, 0, "key", {}, b"payload", "p", 1), 2)
    body = frame[LENGTH.size :]
    with pytest.raises(FrameError, match="truncated"):
        list(FrameDecoder().feed(LENGTH.pack(len(body) - 1) + body[:-1]))
    with pytest.raises(FrameError, match="trailing"):
        list(FrameDecoder().feed(LENGTH.pack(len(body) + 1) + body + b"\x00"))
    with pytest.raises(FrameError, match="after the end frame"):
        list(FrameDecoder().feed(encode_end_frame(RangeEnd((1, 1), 0, True)) + frame))


def test_invalid_utf8_is_a_frame_error() -> None:
    frame = bytearray(encode_message_frame(RangeMessage(1, 2, -1, 0, 5, 0, None, {}, b"", "pp", 1), 2))
    frame[-12:-10] = b"\xff\xfe"  # the producer name (then key length, property count, payload length)
    with pytest.raises(FrameError, match="UTF-8"):
        list(FrameDecoder().feed(bytes(frame)))


def test_entry_frames_yield_every_message_of_the_entry() -> None:
    single = encode_message(StoredMessage(b"a", "p1", 7, 100, key="k", properties={"x": "y"}))
    batch = encode_batch(
        [StoredMessage(b"b", "p1", 8, 101), StoredMessage(b"c", "p2", 9, 102, event_time_ms=5)]
    )
    data = encode_entry_frame(3, 0, single) + encode_entry_frame(3, 1, batch)
    assert decode_all(data + encode_end_frame(RangeEnd((3, 2), 2, True)))[:-1] == [
        RangeMessage(3, 0, -1, 0, 100, 0, "k", {"x": "y"}, b"a", "p1", 7),
        RangeMessage(3, 1, 0, 2, 101, 0, None, {}, b"b", "p1", 8),
        RangeMessage(3, 1, 1, 2, 102, 5, None, {}, b"c", "p2", 9),
    ]
    with pytest.raises(FrameError, match="entry 3:0 cannot be decoded"):
        list(FrameDecoder().feed(encode_entry_frame(3, 0, single[:-1])))

"""The ``magnetar.v1`` binary subprotocol codec: round trips of every frame, the stored form of SEND messages
(same entries as the JSON path writes), and malformed input refused with the typed error only."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.wire.entry_format import (
    StoredMessage,
    decode_entry,
    encode_batch,
    encode_compact_batch,
    entry_message_count,
)
from magnetar.broker.wire.magnetar_v1 import (
    BinaryFrameError,
    FrameType,
    OutgoingMessage,
    encode_ack_ranges,
    encode_command,
    encode_ids,
    encode_permit,
    encode_receipt,
    encode_send,
    encode_send_error,
    encode_send_run,
    end_of_topic_frame,
    message_record,
    messages_frame,
    parse_consumer_frame,
    parse_messages,
    parse_receipt,
    parse_send,
    scan_messages,
    send_messages,
    sub_run,
)

texts = st.text(max_size=20)
outgoing = st.builds(
    OutgoingMessage,
    payload=st.binary(max_size=300),
    key=st.none() | texts,
    properties=st.none() | st.dictionaries(texts, texts, max_size=4),
    event_time_ms=st.integers(0, 2**62),
)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 2**64 - 1),
    st.lists(outgoing | st.binary(max_size=100), min_size=1, max_size=20),
    st.integers(0, 20),
)
def test_send_round_trips_and_stores_what_the_json_path_stores(
    request_id: int, messages: list[OutgoingMessage | bytes], cut: int
) -> None:
    frame = encode_send(request_id, messages)
    send = parse_send(frame)
    assert send.request_id == request_id
    outgoing = [OutgoingMessage(item) if isinstance(item, bytes) else item for item in messages]
    assert send.run.messages == len(messages)
    assert send.run.payload_bytes == sum(len(message.payload) for message in outgoing)
    assert send.keyed == any(message.key is not None or message.properties for message in outgoing)
    places = send_messages(send.run)
    assert [place.key for place in places] == [message.key for message in outgoing]
    # A run cut in two (as routing and the batch limits cut runs) is stored as one entry of both parts.
    cut = min(cut, len(places) - 1)
    parts = [sub_run(send.run, places[:cut]), sub_run(send.run, places[cut:])] if cut else [send.run]
    assert sum(part.messages for part in parts) == len(messages)
    entry = encode_compact_batch("producer-1", 7, 1_700_000_000_000, len(messages), [p.body for p in parts])
    expected = [
        StoredMessage(
            message.payload,
            "producer-1",
            7 + index,
            1_700_000_000_000,
            message.event_time_ms,
            message.key,
            dict(message.properties or {}),
        )
        for index, message in enumerate(outgoing)
    ]
    decoded = decode_entry(entry)
    assert decoded.batched
    assert decoded.messages == expected == decode_entry(encode_batch(expected)).messages
    assert entry_message_count(entry) == len(messages)


def test_sequenced_send_carries_the_first_sequence_id() -> None:
    frame = encode_send(9, [b"a", OutgoingMessage(b"b", key="k")], first_sequence_id=2**63 - 2)
    send = parse_send(frame)
    assert (send.request_id, send.first_sequence_id, send.run.messages) == (9, 2**63 - 2, 2)
    assert parse_send(encode_send(9, [b"a"])).first_sequence_id is None
    assert parse_send(encode_send_run(3, send.run, 7)).first_sequence_id == 7


@pytest.mark.parametrize(
    ("first", "count", "why"),
    [(-1, 1, "out of range"), (-(2**63), 1, "out of range"), (2**63 - 1, 2, "out of range")],
)
def test_sequenced_send_refuses_sequence_ids_out_of_range(first: int, count: int, why: str) -> None:
    with pytest.raises(BinaryFrameError, match=why) as refused:
        parse_send(encode_send(4, [b"x"] * count, first_sequence_id=first))
    assert refused.value.request_id == 4


def test_sequenced_send_without_its_sequence_id_is_malformed() -> None:
    with pytest.raises(BinaryFrameError, match="first sequence id"):
        parse_send(struct.pack("<BQI", FrameType.SEND_SEQ, 1, 1) + b"\0\0\0")


def test_send_refuses_malformed_frames_with_the_request_id() -> None:
    good = encode_send(42, [OutgoingMessage(b"x", key="k", properties={"a": "b"})])
    with pytest.raises(BinaryFrameError) as truncated:
        parse_send(good[:-1])
    assert truncated.value.request_id == 42
    with pytest.raises(BinaryFrameError):
        parse_send(good + b"\x00")
    with pytest.raises(BinaryFrameError):
        parse_send(b"\x03" + good[1:])  # not a SEND
    with pytest.raises(BinaryFrameError, match="at least one"):
        parse_send(struct.pack("<BQI", FrameType.SEND, 1, 0))
    bad_key = struct.pack("<BQI", FrameType.SEND, 5, 1) + struct.pack("<IHHq", 0, 2, 0, 0) + b"\xff\xfe"
    with pytest.raises(BinaryFrameError, match="UTF-8") as utf8:
        parse_send(bad_key)
    assert utf8.value.request_id == 5
    bad_property = (
        struct.pack("<BQI", FrameType.SEND, 6, 1)
        + struct.pack("<IHHq", 0, 0xFFFF, 1, 0)
        + struct.pack("<H", 1)
        + b"\xff"
        + struct.pack("<H", 0)
    )
    with pytest.raises(BinaryFrameError, match="UTF-8"):
        parse_send(bad_property)
    too_many = (
        struct.pack("<BQI", FrameType.SEND, 7, 1) + struct.pack("<IHHq", 0, 0xFFFF, 1025, 0) + b"\0" * 4100
    )
    with pytest.raises(BinaryFrameError, match="1025 properties"):
        parse_send(too_many)
    overlong = struct.pack("<BQI", FrameType.SEND, 8, 2) + struct.pack("<IHHq", 40, 0xFFFF, 0, 0) + b"\0" * 40
    with pytest.raises(BinaryFrameError, match="truncated") as short:
        parse_send(overlong + struct.pack("<IHHq", 1, 0xFFFF, 0, 0))  # the second payload is missing
    assert short.value.request_id == 8


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_but_the_typed_error(data: bytes) -> None:
    for parse in (parse_send, parse_consumer_frame, parse_receipt, parse_messages, scan_messages):
        with contextlib.suppress(BinaryFrameError):
            parse(data)


@given(
    st.integers(0, 2**64 - 1),
    st.lists(
        st.tuples(
            st.integers(-1, 2**31 - 1),
            st.integers(0, 2**62),
            st.integers(0, 2**62),
            st.integers(0, 60_000),
            st.integers(1, 1000),
            st.integers(1, 65_535),
        ),
        max_size=10,
    ),
)
def test_receipts_round_trip(request_id: int, ranges: list[tuple[int, int, int, int, int, int]]) -> None:
    receipt = parse_receipt(encode_receipt(request_id, ranges))
    assert receipt.ok
    assert receipt.request_id == request_id
    assert list(receipt.ranges) == ranges
    ids = receipt.message_ids()
    assert len(ids) == sum(r[4] for r in ranges)
    assert ids == [
        (partition, ledger, entry, first + i, size)
        for partition, ledger, entry, first, count, size in ranges
        for i in range(count)
    ]
    error = parse_receipt(encode_send_error(request_id, 8, "failed: é"))
    assert (error.ok, error.error_code, error.reason) == (False, 8, "failed: é")


stored = st.builds(
    StoredMessage,
    payload=st.binary(max_size=200),
    producer_name=texts,
    sequence_id=st.integers(0, 2**62),
    publish_time_ms=st.integers(0, 2**62),
    event_time_ms=st.integers(0, 2**62),
    key=st.none() | texts,
    properties=st.dictionaries(texts, texts, max_size=3),
    chunk=st.none(),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 100), st.integers(-1, 1000), stored), max_size=10))
def test_messages_frames_round_trip(items: list[tuple[int, int, StoredMessage]]) -> None:
    records = [
        message_record(partition, 12, 34, index, 10, index + 1, message)
        for partition, index, message in items
    ]
    frame = messages_frame(records)
    parsed = parse_messages(frame)
    assert len(parsed) == len(items)
    for got, (partition, index, message) in zip(parsed, items, strict=True):
        assert got.message_id == (partition, 12, 34, index, 10)
        assert got.redelivery_count == index + 1
        assert (got.publish_time_ms, got.event_time_ms) == (message.publish_time_ms, message.event_time_ms)
        assert (got.key, got.properties, got.payload) == (message.key, message.properties, message.payload)
    scanned = scan_messages(frame)
    assert scanned == [(p, 12, 34, i, m.publish_time_ms) for p, i, m in items]


def test_consumer_frames_round_trip() -> None:
    ids = [(0, 5, 6, -1, 0), (-1, 7, 8, 3, 10)]
    assert parse_consumer_frame(encode_ids(FrameType.ACK, ids)).ids == ids
    assert parse_consumer_frame(encode_ids(FrameType.NACK, ids)).type is FrameType.NACK
    ranges = [(-1, (-1, -1, -1), (9, 9, 9)), (3, (1, 2, 3), (4, 5, 6))]
    assert parse_consumer_frame(encode_ack_ranges(ranges)).ranges == ranges
    permit = parse_consumer_frame(encode_permit(250))
    assert (permit.type, permit.count) == (FrameType.PERMIT, 250)
    assert parse_consumer_frame(encode_permit(2**31 - 1)).count == 2**31 - 1
    for kind in (FrameType.UNSUBSCRIBE, FrameType.IS_END_OF_TOPIC):
        assert parse_consumer_frame(encode_command(kind)).type is kind


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x01",  # a SEND is not a consumer frame
        encode_ids(FrameType.ACK, [(0, 1, 2, 3, 4)])[:-1],
        encode_ack_ranges([(0, (1, 2, 3), (4, 5, 6))]) + b"\x00",
        encode_permit(1) + b"\x00",
        bytes((FrameType.PERMIT,)) + (2**32 - 5).to_bytes(4, "little"),  # -5 written as u32
        bytes((FrameType.PERMIT,)) + (2**31).to_bytes(4, "little"),
        encode_command(FrameType.UNSUBSCRIBE) + b"\x00",
        end_of_topic_frame(True),  # broker -> client only
    ],
)
def test_malformed_consumer_frames_are_refused(frame: bytes) -> None:
    with pytest.raises(BinaryFrameError):
        parse_consumer_frame(frame)

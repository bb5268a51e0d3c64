"""Range-read responses decoded into Arrow batches: the same messages the reference decoder sees, message
ids byte-identical to the broker's, and the Arrow schema Spark checks."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.admin.range_frames import (
    FrameDecoder,
    FrameError,
    RangeEnd,
    RangeMessage,
    encode_end_frame,
    encode_entry_frame,
    encode_message_frame,
)
from magnetar.admin.spark.rows import arrow_schema, decode_body, record_batch, spark_schema
from magnetar.broker.wire.entry_format import (
    ChunkInfo,
    StoredMessage,
    encode_batch,
    encode_compact_batch,
    encode_message,
)
from magnetar.broker.wire.magnetar_v1 import OutgoingMessage, encode_send, parse_send
from magnetar.broker.wire.message_id import MessageId
from magnetar.managed_ledger.entry_prefix import encode_prefix

text = st.text(max_size=12)


@st.composite
def entries(draw: st.DrawFn) -> list[RangeMessage]:
    """Messages of consecutive entries; an entry is a single message or a batch of 2..4."""
    out = []
    ledger, entry = draw(st.integers(0, 2**40)), draw(st.integers(0, 2**40))
    for offset in range(draw(st.integers(0, 4))):
        size = draw(st.sampled_from([0, 2, 3, 4]))
        for index in range(max(size, 1)):
            out.append(
                RangeMessage(
                    ledger,
                    entry + offset,
                    index if size else -1,
                    size,
                    draw(st.integers(0, 2**40)),
                    draw(st.sampled_from([0, 1_700_000_000_123])),
                    draw(st.none() | text),
                    draw(st.dictionaries(text, text, max_size=3)),
                    draw(st.binary(max_size=30)),
                    draw(st.sampled_from(["p-1", "p-2", "ünïcode"])),
                    draw(st.integers(-1, 2**40)),
                )
            )
    return out


@given(entries(), st.integers(-1, 7), st.booleans())
def test_decoding_matches_the_frames(messages: list[RangeMessage], partition: int, complete: bool) -> None:
    end = RangeEnd((5, 6), len({(m.ledger_id, m.entry_id) for m in messages}), complete)
    decoded = decode_body(
        b"".join(encode_message_frame(m, 2) for m in messages) + encode_end_frame(end), partition
    )
    assert decoded.end == end
    assert decoded.first_entry == ((messages[0].ledger_id, messages[0].entry_id) if messages else None)
    columns = decoded.columns
    assert len(columns) == len(messages)
    assert columns.values == [m.payload for m in messages]
    assert columns.keys == [None if m.key is None else m.key.encode() for m in messages]
    assert columns.producers == [m.producer_name for m in messages]
    assert [list(p) for p in columns.properties] == [list(m.properties.items()) for m in messages]
    assert columns.publish_us == [m.publish_time_ms * 1000 for m in messages]
    assert columns.event_us == [m.event_time_ms * 1000 or None for m in messages]
    assert columns.message_ids == [
        MessageId(m.ledger_id, m.entry_id, partition, m.batch_index, m.batch_size).to_bytes()
        for m in messages
    ]
    batch = record_batch(columns, "persistent://t/ns/x", partition)
    assert batch.schema.equals(arrow_schema())
    assert batch.num_rows == len(messages)


def test_version_1_frames_decode_without_producer() -> None:
    message = RangeMessage(1, 2, -1, 0, 5, 0, None, {}, b"x", "lost in v1", 3)
    decoded = decode_body(encode_message_frame(message, 1) + encode_end_frame(RangeEnd((1, 3), 1, True)), -1)
    assert decoded.columns.producers == [""]
    assert decoded.columns.values == [b"x"]


def test_record_batch_rows() -> None:
    messages = [
        RangeMessage(7, 3, -1, 0, 1_700_000_000_000, 0, "k", {"a": "b"}, b"one", "prod", 1),
        RangeMessage(7, 4, 0, 2, 1_700_000_000_001, 1_600_000_000_000, None, {}, b"two", "prod", 2),
    ]
    body = b"".join(encode_message_frame(m, 2) for m in messages) + encode_end_frame(
        RangeEnd((7, 5), 2, True)
    )
    rows = record_batch(decode_body(body, 2).columns, "persistent://t/ns/x", 2).to_pylist()
    utc = datetime.UTC
    assert rows[0] == {
        "key": b"k",
        "value": b"one",
        "topic": "persistent://t/ns/x",
        "partition": 2,
        "messageId": MessageId(7, 3, 2).to_bytes(),
        "ledgerId": 7,
        "entryId": 3,
        "publishTime": datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=utc),
        "eventTime": None,
        "properties": [("a", "b")],
        "producerName": "prod",
    }
    assert rows[1]["messageId"] == MessageId(7, 4, 2, 0, 2).to_bytes()
    assert rows[1]["eventTime"] == datetime.datetime(2020, 9, 13, 12, 26, 40, tzinfo=utc)
    assert [f.name for f in spark_schema().fields] == list(rows[0])


@pytest.mark.parametrize(
    "body",
    [
        b"",  # no end frame
        encode_end_frame(RangeEnd((1, 1), 0, True)) + b"\x00",  # data after the end frame
        b"\x00\x00\x00\x09\x01",  # truncated frame
        b"\x00\x00\x00\x01\x07" + encode_end_frame(RangeEnd((1, 1), 0, True)),  # unknown kind
        encode_message_frame(RangeMessage(1, 2, -1, 0, 5, 0, "k", {}, b"xyz"), 2)[:-1]
        + encode_end_frame(RangeEnd((1, 1), 0, True)),
    ],
)
def test_broken_bodies_raise_frame_errors(body: bytes) -> None:
    with pytest.raises(FrameError):
        decode_body(body, -1)


stored = st.builds(
    StoredMessage,
    payload=st.binary(max_size=30),
    producer_name=st.sampled_from(["p-1", "p-2", "ünïcode"]),
    sequence_id=st.integers(0, 2**40),
    publish_time_ms=st.integers(0, 2**40),
    event_time_ms=st.sampled_from([0, 1_700_000_000_123]),
    key=st.none() | text,
    properties=st.dictionaries(text, text, max_size=3),
    chunk=st.none(),
)


def stored_entry(group: list[StoredMessage], compact: bool, deliver_at_ms: int = 0) -> bytes:
    """The group as the broker stores it: one message, a batch, or (binary producers) a compact batch of the
    first message's producer and publish time; delayed until ``deliver_at_ms`` when it is not 0."""
    if compact:
        first = group[0]
        outgoing = [OutgoingMessage(m.payload, m.key, m.properties, m.event_time_ms) for m in group]
        run = parse_send(encode_send(1, outgoing)).run
        return encode_compact_batch(
            first.producer_name,
            first.sequence_id,
            first.publish_time_ms,
            len(group),
            [run.body],
            deliver_at_ms,
        )
    if len(group) > 1:
        return encode_batch(group, deliver_at_ms)
    return encode_message(group[0], deliver_at_ms)


@given(
    st.lists(
        st.tuples(
            st.lists(stored, min_size=1, max_size=4), st.booleans(), st.sampled_from([0, 1_700_000_000_000])
        ),
        max_size=4,
    ),
    st.integers(-1, 7),
)
def test_entry_frames_decode_like_the_broker_reads_them(
    groups: list[tuple[list[StoredMessage], bool, int]], partition: int
) -> None:
    """Version 3: stored entries forwarded as they are, read in place (delayed ones too: their deliver-at time
    is no column); the same rows as the broker's own decoder (through the reference frame decoder) gives."""
    frames = [
        # even entries carry the message index prefix, as entries stored since it exists; odd ones do not
        encode_entry_frame(
            9,
            entry,
            stored_entry(*group) if entry % 2 else encode_prefix(7 * entry) + stored_entry(*group),
        )
        for entry, group in enumerate(groups)
    ]
    body = b"".join(frames) + encode_end_frame(RangeEnd((9, len(groups)), len(groups), True))
    decoded = decode_body(body, partition)
    reference = [m for m in FrameDecoder().feed(body) if isinstance(m, RangeMessage)]
    columns = decoded.columns
    assert decoded.first_entry == ((9, 0) if groups else None)
    assert columns.values == [m.payload for m in reference]
    assert columns.keys == [None if m.key is None else m.key.encode() for m in reference]
    assert columns.producers == [m.producer_name for m in reference]
    assert columns.publish_us == [m.publish_time_ms * 1000 for m in reference]
    assert columns.ledgers == [m.ledger_id for m in reference]
    assert columns.entries == [m.entry_id for m in reference]
    assert [list(p) for p in columns.properties] == [list(m.properties.items()) for m in reference]
    assert columns.event_us == [m.event_time_ms * 1000 or None for m in reference]
    assert columns.message_ids == [
        MessageId(m.ledger_id, m.entry_id, partition, m.batch_index, m.batch_size).to_bytes()
        for m in reference
    ]
    assert record_batch(columns, "persistent://t/ns/x", partition).num_rows == len(reference)


def test_broken_entry_frames_raise_frame_errors() -> None:
    end = encode_end_frame(RangeEnd((1, 1), 0, True))
    message = StoredMessage(b"x", "p", 1, 2, key="k")
    for entry in (encode_message(message), stored_entry([message, message], compact=True)):
        for data in (entry[:-1], b"Xg" + entry[2:], entry + b"\x00"):
            with pytest.raises(FrameError):
                decode_body(encode_entry_frame(1, 0, data) + end, -1)


@pytest.mark.parametrize("deliver_at_ms", [0, 1_700_000_000_000])
def test_a_chunk_entry_is_a_row_of_its_own(deliver_at_ms: int) -> None:
    """A chunk of a larger message (Pulsar's chunking) is stored as an entry of its own: the Spark source
    reads it as one row holding the chunk's bytes, as the broker's own decoder does."""
    run = parse_send(encode_send(1, [OutgoingMessage(b"chunk-bytes", "k", {"p": "v"}, 0)])).run
    chunk = ChunkInfo("producer-1-9", 1, 3, 33)
    stored = encode_compact_batch("producer", 9, 1000, 1, [run.body], deliver_at_ms, chunk)
    whole = encode_message(StoredMessage(b"whole", "producer", 10, 1001))
    body = (
        encode_entry_frame(4, 0, encode_prefix(3) + stored)
        + encode_entry_frame(4, 1, whole)
        + encode_end_frame(RangeEnd((4, 2), 2, True))
    )
    decoded = decode_body(body, -1)
    reference = [m for m in FrameDecoder().feed(body) if isinstance(m, RangeMessage)]
    assert decoded.columns.values == [b"chunk-bytes", b"whole"] == [m.payload for m in reference]
    assert decoded.columns.keys == [b"k", None]
    assert decoded.columns.message_ids == [
        MessageId(m.ledger_id, m.entry_id, -1, m.batch_index, m.batch_size).to_bytes() for m in reference
    ]

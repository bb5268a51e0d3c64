"""The stored entry format: round trips (hypothesis), corrupt and hostile input, bounds."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.wire.entry_format import (
    BATCH_MESSAGES_MAX,
    CHUNK_FLAG,
    CHUNK_HEAD,
    CHUNK_UUID_BYTES_MAX,
    COMPACT_MESSAGE,
    COMPACT_NO_KEY,
    KEY_BYTES_MAX,
    PRODUCER_NAME_BYTES_MAX,
    SCHEMA_FLAG,
    ChunkInfo,
    CorruptEntryError,
    StoredMessage,
    check_chunk,
    check_compact_messages,
    decode_entry,
    encode_batch,
    encode_compact_batch,
    encode_message,
    encode_properties,
    entry_deliver_at,
    entry_message_count,
)

int64 = st.integers(-(2**63), 2**63 - 1)
short_text = st.text(max_size=20)
messages = st.builds(
    StoredMessage,
    payload=st.binary(max_size=300),
    producer_name=st.sampled_from(["standalone-0-1", "p", "prödücer", ""]) | short_text,
    sequence_id=int64,
    publish_time_ms=int64,
    event_time_ms=int64,
    key=st.none() | short_text,
    properties=st.dictionaries(short_text, short_text, max_size=5),
    chunk=st.none(),
    schema_version=st.just(-1),  # only compact batches carry a schema version (tested below)
)


@given(messages)
def test_single_message_round_trips(message: StoredMessage) -> None:
    data = encode_message(message)
    entry = decode_entry(data)
    assert not entry.batched
    assert entry.messages == [message]
    assert entry_message_count(data) == 1


@given(st.lists(messages, min_size=1, max_size=20))
def test_batch_round_trips(batch: list[StoredMessage]) -> None:
    data = encode_batch(batch)
    entry = decode_entry(memoryview(data))
    assert entry.batched
    assert entry.messages == batch
    assert entry_message_count(data) == len(batch)


def test_empty_key_differs_from_no_key() -> None:
    with_empty = StoredMessage(b"x", "p", 1, 2, key="")
    without = StoredMessage(b"x", "p", 1, 2)
    assert decode_entry(encode_message(with_empty)).messages[0].key == ""
    assert decode_entry(encode_message(without)).messages[0].key is None


def test_producer_names_are_stored_once_per_entry() -> None:
    batch = [StoredMessage(b"", "a-long-producer-name", i, 0) for i in range(100)]
    assert len(encode_batch(batch)) < 100 * 40 + 50


SAMPLE = encode_batch(
    [
        StoredMessage(b"hello", "p1", 1, 1000, 5, "k", {"a": "b"}),
        StoredMessage(b"world", "p2", 2, 1001),
    ]
)


def compact_message(
    payload: bytes, key: str | None = None, properties: dict[str, str] | None = None
) -> bytes:
    """One message as a compact batch (and a binary SEND) lays it out."""
    key_bytes = b"" if key is None else key.encode()
    key_len = COMPACT_NO_KEY if key is None else len(key_bytes)
    head = COMPACT_MESSAGE.pack(len(payload), key_len, len(properties or {}), 5)
    return head + key_bytes + encode_properties(properties or {}) + payload


COMPACT_BODY = compact_message(b"hello", "k", {"a": "b"}) + compact_message(b"world")
COMPACT_SAMPLE = encode_compact_batch("p1", 1, 1000, 2, [COMPACT_BODY])


def test_compact_batches_decode_like_batches() -> None:
    expected = [
        StoredMessage(b"hello", "p1", 1, 1000, 5, "k", {"a": "b"}),
        StoredMessage(b"world", "p1", 2, 1000, 5),
    ]
    assert decode_entry(COMPACT_SAMPLE).messages == expected == decode_entry(encode_batch(expected)).messages
    assert decode_entry(COMPACT_SAMPLE).batched
    assert entry_message_count(COMPACT_SAMPLE) == 2
    assert check_compact_messages(COMPACT_BODY, 0, 2) == (10, True)
    assert check_compact_messages(memoryview(compact_message(b"abc") * 3), 0, 3) == (9, False)


@pytest.mark.parametrize("sample", [SAMPLE, COMPACT_SAMPLE], ids=["batch", "compact"])
def test_every_truncation_is_detected(sample: bytes) -> None:
    for size in range(len(sample)):
        with pytest.raises(CorruptEntryError):
            decode_entry(sample[:size])


@pytest.mark.parametrize("sample", [SAMPLE, COMPACT_SAMPLE], ids=["batch", "compact"])
def test_trailing_bytes_are_detected(sample: bytes) -> None:
    with pytest.raises(CorruptEntryError, match="trailing"):
        decode_entry(sample + b"\x00")


def test_the_compact_check_refuses_what_the_decoder_refuses() -> None:
    for size in range(len(COMPACT_BODY)):
        with pytest.raises(CorruptEntryError):
            check_compact_messages(COMPACT_BODY[:size], 0, 2)
    with pytest.raises(CorruptEntryError, match="after the last"):
        check_compact_messages(COMPACT_BODY + b"\x00", 0, 2)
    with pytest.raises(CorruptEntryError, match="UTF-8"):
        check_compact_messages(COMPACT_MESSAGE.pack(0, 1, 0, 0) + b"\xff", 0, 1)
    with pytest.raises(CorruptEntryError, match="more than"):
        check_compact_messages(COMPACT_MESSAGE.pack(2**30, COMPACT_NO_KEY, 0, 0), 0, 1)
    two_names = COMPACT_SAMPLE.replace(b"\x01\x00\x02\x00p1", b"\x02\x00\x02\x00p1", 1)
    with pytest.raises(CorruptEntryError, match="names 2 producers"):
        decode_entry(two_names)


@settings(max_examples=300)
@given(st.data())
def test_compact_check_and_decoder_agree_on_mutated_messages(data: st.DataObject) -> None:
    body = bytearray(COMPACT_BODY)
    for _ in range(data.draw(st.integers(1, 4))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    try:
        check_compact_messages(bytes(body), 0, 2)
    except CorruptEntryError:
        with pytest.raises(CorruptEntryError):
            decode_entry(encode_compact_batch("p1", 1, 1000, 2, [bytes(body)]))
    else:
        assert len(decode_entry(encode_compact_batch("p1", 1, 1000, 2, [bytes(body)])).messages) == 2


@pytest.mark.parametrize(
    ("offset", "value", "match"),
    [
        (0, b"X", "bad magic"),
        (2, b"\x02", "version"),
        (3, b"\x07", "kind"),
    ],
)
def test_bad_header_fields(offset: int, value: bytes, match: str) -> None:
    data = SAMPLE[:offset] + value + SAMPLE[offset + 1 :]
    with pytest.raises(CorruptEntryError, match=match):
        decode_entry(data)


def test_hostile_counts_never_allocate_beyond_the_input() -> None:
    head = b"Mg\x01\x02" + struct.pack("<H", 0)
    with pytest.raises(CorruptEntryError):
        decode_entry(head + struct.pack("<I", BATCH_MESSAGES_MAX))  # claims 65535 messages in 10 bytes
    with pytest.raises(CorruptEntryError):
        decode_entry(head + struct.pack("<I", 2**32 - 1))
    with pytest.raises(CorruptEntryError):
        decode_entry(b"Mg\x01\x01" + struct.pack("<H", 1) + struct.pack("<H", 60000) + b"x")
    two = encode_batch([StoredMessage(b"", "p", 0, 0)] * 2)
    single_with_two = two.replace(b"Mg\x01\x02", b"Mg\x01\x01", 1)
    with pytest.raises(CorruptEntryError, match="more than one"):
        decode_entry(single_with_two)


def test_bad_utf8_and_bad_producer_index() -> None:
    data = bytearray(encode_message(StoredMessage(b"", "pp", 0, 0)))
    data[8] = 0xFF  # first byte of the producer name
    with pytest.raises(CorruptEntryError, match="UTF-8"):
        decode_entry(bytes(data))
    data = bytearray(encode_message(StoredMessage(b"", "pp", 0, 0)))
    data[14] = 5  # producer index of the message (after head 6 + name 4 + count 4)
    with pytest.raises(CorruptEntryError, match="producer index"):
        decode_entry(bytes(data))


@pytest.mark.parametrize("sample", [SAMPLE, COMPACT_SAMPLE], ids=["batch", "compact"])
@settings(max_examples=300)
@given(data=st.data())
def test_mutations_decode_or_raise_the_typed_error(sample: bytes, data: st.DataObject) -> None:
    raw = bytearray(sample)
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(CorruptEntryError):
        decode_entry(bytes(raw))


@given(st.binary(max_size=200))
def test_random_bytes_decode_or_raise_the_typed_error(raw: bytes) -> None:
    with contextlib.suppress(CorruptEntryError):
        decode_entry(raw)


def test_encoding_limits() -> None:
    with pytest.raises(ValueError, match=r"1\.\.65535 messages"):
        encode_batch([])
    with pytest.raises(ValueError, match="producer_name"):
        encode_message(StoredMessage(b"", "p" * (PRODUCER_NAME_BYTES_MAX + 1), 0, 0))
    with pytest.raises(ValueError, match="key"):
        encode_message(StoredMessage(b"", "p", 0, 0, key="k" * (KEY_BYTES_MAX + 1)))
    with pytest.raises(ValueError, match="64 bits"):
        encode_message(StoredMessage(b"", "p", 2**63, 0))
    with pytest.raises(ValueError, match="property value"):
        encode_message(StoredMessage(b"", "p", 0, 0, properties={"a": "v" * 70000}))


@pytest.mark.parametrize("key", [None, "k"])  # a message without key or properties is packed in line
@pytest.mark.parametrize("field", ["sequence_id", "publish_time_ms", "event_time_ms"])
@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**64 + 5])
def test_a_field_out_of_64_bits_is_named(key: str | None, field: str, value: int) -> None:
    message = StoredMessage(b"x", "p", 0, 0, key=key)._replace(**{field: value})
    with pytest.raises(ValueError, match=f"{field}={value} does not fit in 64 bits"):
        encode_batch([StoredMessage(b"y", "p", 1, 1), message])


# -- delayed entries ---------------------------------------------------------------------------------------

deliver_at = st.integers(1, 2**63 - 1)


@given(messages, deliver_at)
def test_a_delayed_single_message_round_trips(message: StoredMessage, when: int) -> None:
    data = encode_message(message, deliver_at_ms=when)
    entry = decode_entry(data)
    assert (entry.batched, entry.messages, entry.deliver_at_ms) == (False, [message], when)
    assert entry_message_count(data) == 1
    assert entry_deliver_at(memoryview(data)) == when


@given(st.lists(messages, min_size=1, max_size=10), deliver_at)
def test_a_delayed_batch_round_trips(batch: list[StoredMessage], when: int) -> None:
    data = encode_batch(batch, deliver_at_ms=when)
    entry = decode_entry(memoryview(data))
    assert (entry.batched, entry.messages, entry.deliver_at_ms) == (True, batch, when)
    assert entry_message_count(data) == len(batch)


@given(deliver_at)
def test_a_delayed_compact_batch_round_trips(when: int) -> None:
    data = encode_compact_batch("p1", 1, 1000, 2, [COMPACT_BODY], deliver_at_ms=when)
    entry = decode_entry(data)
    assert entry.messages == decode_entry(COMPACT_SAMPLE).messages
    assert entry.deliver_at_ms == when == entry_deliver_at(data)


def test_entries_without_a_delay_decode_unchanged() -> None:
    for sample in (SAMPLE, COMPACT_SAMPLE, encode_message(StoredMessage(b"x", "p", 0, 0))):
        assert decode_entry(sample).deliver_at_ms == 0 == entry_deliver_at(sample)
    assert encode_message(StoredMessage(b"x", "p", 0, 0), deliver_at_ms=0) == encode_message(
        StoredMessage(b"x", "p", 0, 0)
    )


@pytest.mark.parametrize("when", [-1, -(2**63), 2**63, 2**64])
def test_a_deliver_at_time_out_of_range_is_not_encoded(when: int) -> None:
    with pytest.raises(ValueError, match="deliver_at_ms"):
        encode_message(StoredMessage(b"x", "p", 0, 0), deliver_at_ms=when)
    with pytest.raises(ValueError, match="deliver_at_ms"):
        encode_compact_batch("p1", 1, 1000, 2, [COMPACT_BODY], deliver_at_ms=when)


@pytest.mark.parametrize("stored", [0, -1, -(2**63)])
def test_a_stored_deliver_at_time_not_after_the_epoch_is_corrupt(stored: int) -> None:
    data = bytearray(encode_message(StoredMessage(b"x", "p", 0, 0), deliver_at_ms=5))
    data[6:14] = struct.pack("<q", stored)
    with pytest.raises(CorruptEntryError, match="deliver-at"):
        decode_entry(bytes(data))


def test_every_truncation_of_a_delayed_entry_is_detected() -> None:
    sample = encode_batch([StoredMessage(b"ab", "p", 0, 0, key="k")] * 2, deliver_at_ms=123)
    for size in range(len(sample)):
        with pytest.raises(CorruptEntryError):
            decode_entry(sample[:size])


@pytest.mark.parametrize("kind", [0x80, 0x84, 0x91, 0xC1 | 0x10])  # 0x40: schema version, 0x20: chunk
def test_unknown_kinds_with_the_delay_bit_are_refused(kind: int) -> None:
    data = bytearray(encode_message(StoredMessage(b"x", "p", 0, 0), deliver_at_ms=5))
    data[3] = kind
    with pytest.raises(CorruptEntryError, match="kind"):
        decode_entry(bytes(data))


@pytest.mark.parametrize(
    "kind", [0x80 | CHUNK_FLAG | 1, 0x80 | CHUNK_FLAG | 2, CHUNK_FLAG | 1, CHUNK_FLAG | 2]
)
def test_the_chunk_bit_on_an_entry_without_a_chunk_head_is_refused(kind: int) -> None:
    data = bytearray(encode_message(StoredMessage(b"x", "p", 0, 0), deliver_at_ms=5))
    data[3] = kind
    with pytest.raises(CorruptEntryError):
        decode_entry(bytes(data))


@settings(max_examples=300)
@given(data=st.data())
def test_mutations_of_a_delayed_entry_decode_or_raise_the_typed_error(data: st.DataObject) -> None:
    raw = bytearray(encode_batch([StoredMessage(b"ab", "p", 0, 0, key="k")] * 2, deliver_at_ms=10**12))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(CorruptEntryError):
        entry = decode_entry(bytes(raw))
        assert entry.deliver_at_ms >= 0


CHUNK = ChunkInfo("producer-7-42", 1, 3, 5000)


@given(deliver_at_ms=st.sampled_from([0, 1, 2**63 - 1]), payload=st.binary(max_size=200))
def test_a_chunk_entry_round_trips(deliver_at_ms: int, payload: bytes) -> None:
    data = encode_compact_batch("p1", 4, 1000, 1, [compact_message(payload, "k")], deliver_at_ms, CHUNK)
    entry = decode_entry(data)
    assert entry.messages == [StoredMessage(payload, "p1", 4, 1000, 5, "k", {}, CHUNK)]
    assert entry.deliver_at_ms == deliver_at_ms == entry_deliver_at(data)
    assert entry_message_count(data) == 1
    assert data[3] & CHUNK_FLAG
    assert decode_entry(COMPACT_SAMPLE).messages[0].chunk is None


def test_a_chunk_entry_holds_one_message() -> None:
    with pytest.raises(ValueError, match="one message"):
        encode_compact_batch("p1", 1, 1000, 2, [COMPACT_BODY], chunk=CHUNK)


def _forged_chunk_entry(
    chunk_id: int, num_chunks: int, total: int, uuid: bytes, payload: bytes = b"ab"
) -> bytes:
    head = bytes((ord("M"), ord("g"), 1, 3 | CHUNK_FLAG)) + struct.pack("<H", 1)
    chunk_head = CHUNK_HEAD.pack(chunk_id, num_chunks, total, len(uuid)) + uuid
    rest = struct.pack("<H", 2) + b"p1" + struct.pack("<I", 1) + struct.pack("<qq", 1, 1000)
    return head + chunk_head + rest + compact_message(payload)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ((3, 3, 100, b"u"), "chunk_id 3 out of range"),
        ((0, 0, 100, b"u"), "num_chunks_from_msg 0"),
        ((0, 2**31, 2**31, b"u"), "num_chunks_from_msg"),
        ((0, 2, 2**32 - 1, b"u"), "total_chunk_msg_size"),
        ((0, 2, 1, b"u"), "less than"),
        ((0, 2, 100, b""), "uuid of 0 bytes"),
        ((0, 2, 100, b"\xff"), "not valid UTF-8"),
    ],
)
def test_forged_chunk_heads_are_corrupt(fields: tuple[int, int, int, bytes], match: str) -> None:
    with pytest.raises(CorruptEntryError, match=match):
        decode_entry(_forged_chunk_entry(*fields))


def test_a_chunk_larger_than_its_total_or_a_chunk_of_a_batch_is_corrupt() -> None:
    with pytest.raises(CorruptEntryError, match="more than its message's total"):
        decode_entry(_forged_chunk_entry(0, 2, 2, b"u", payload=b"abcd"))
    flagged = bytearray(encode_batch([StoredMessage(b"a", "p", 1, 2)] * 2))
    flagged[3] |= CHUNK_FLAG
    with pytest.raises(CorruptEntryError):
        decode_entry(bytes(flagged))
    big_uuid = _forged_chunk_entry(0, 2, 100, b"u" * (CHUNK_UUID_BYTES_MAX + 1))
    with pytest.raises(CorruptEntryError, match="chunk uuid of"):
        decode_entry(big_uuid)


@given(st.data())
def test_mutated_chunk_entries_decode_or_raise_the_typed_error(data: st.DataObject) -> None:
    sample = bytearray(encode_compact_batch("p1", 4, 1000, 1, [compact_message(b"xyz")], 0, CHUNK))
    index = data.draw(st.integers(0, len(sample) - 1))
    sample[index] = data.draw(st.integers(0, 255))
    with contextlib.suppress(CorruptEntryError):
        decode_entry(bytes(sample))


@pytest.mark.parametrize(
    ("chunk", "size", "total_max", "fault"),
    [
        (ChunkInfo("u", 0, 1, 10), 10, 10, None),
        (ChunkInfo("u", 2, 3, 30), 10, 100, None),
        (ChunkInfo("u", 0, 2, 11), 10, 10, "total_chunk_msg_size 11 out of range (0 to 10 bytes)"),
        (ChunkInfo("u", 0, 2, 10), 11, 100, "less than this chunk's 11 bytes"),
        (ChunkInfo("u", -1, 2, 10), 1, 100, "chunk_id -1 out of range"),
        (ChunkInfo("ü" * 1025, 0, 2, 10), 1, 100, "chunk uuid of 2050 bytes"),
    ],
)
def test_check_chunk(chunk: ChunkInfo, size: int, total_max: int, fault: str | None) -> None:
    found = check_chunk(chunk, size, total_max)
    if fault is None:
        assert found is None
    else:
        assert found is not None
        assert fault in found


@given(st.integers(0, 2**63 - 1), st.sampled_from([0, 1, 2**63 - 1]))
def test_compact_batches_carry_their_schema_version(version: int, deliver_at_ms: int) -> None:
    data = encode_compact_batch("p1", 1, 1000, 2, [COMPACT_BODY], deliver_at_ms, schema_version=version)
    decoded = decode_entry(data)
    assert [m.schema_version for m in decoded.messages] == [version, version]
    assert decoded.deliver_at_ms == deliver_at_ms
    assert [m.payload for m in decoded.messages] == [b"hello", b"world"]
    assert entry_message_count(data) == 2


def test_a_negative_stored_schema_version_is_corrupt() -> None:
    data = bytearray(encode_compact_batch("p1", 1, 1000, 2, [COMPACT_BODY], 0, schema_version=5))
    data[6:14] = (-1).to_bytes(8, "little", signed=True)
    with pytest.raises(CorruptEntryError, match="schema version"):
        decode_entry(bytes(data))


def test_a_chunk_of_a_producer_with_a_schema_keeps_both() -> None:
    data = encode_compact_batch("p1", 4, 1000, 1, [compact_message(b"part", "k")], 77, CHUNK, 3)
    entry = decode_entry(data)
    assert entry.messages == [StoredMessage(b"part", "p1", 4, 1000, 5, "k", {}, CHUNK, 3)]
    assert entry.deliver_at_ms == 77
    assert data[3] & CHUNK_FLAG
    assert data[3] & SCHEMA_FLAG

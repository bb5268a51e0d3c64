"""Journal codec: records round-trip, and damage of any kind yields exactly a prefix of the good records."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookkeeper.bookie.storage.journal_format import (
    HEADER_BYTES,
    RECORD_HEADER_BYTES,
    JournalFormatError,
    RecordKind,
    StopReason,
    append_record,
    decode_header,
    decode_records,
    encode_header,
)

records_strategy = st.lists(
    st.tuples(st.sampled_from(list(RecordKind)), st.binary(min_size=0, max_size=300)), min_size=1, max_size=12
)


def encode(records: list[tuple[RecordKind, bytes]]) -> tuple[bytes, list[int]]:
    """The encoded records and the offset where each one ends."""
    buf = bytearray()
    ends = []
    for kind, payload in records:
        append_record(buf, kind, payload)
        ends.append(len(buf))
    return bytes(buf), ends


def as_pairs(records: list[tuple[RecordKind, bytes]]) -> list[tuple[int, bytes]]:
    return [(int(kind), payload) for kind, payload in records]


@given(records_strategy)
def test_records_round_trip(records: list[tuple[RecordKind, bytes]]) -> None:
    data, ends = encode(records)
    decoded = decode_records(data, 0, final=True)
    assert decoded.records == as_pairs(records)
    assert decoded.end == ends[-1]
    assert decoded.stop is StopReason.END


@given(records_strategy, st.data())
def test_truncation_at_any_byte_yields_the_whole_records_before_it(
    records: list[tuple[RecordKind, bytes]], data: st.DataObject
) -> None:
    encoded, ends = encode(records)
    cut = data.draw(st.integers(0, len(encoded)))
    decoded = decode_records(encoded[:cut], 0, final=True)
    whole = sum(1 for end in ends if end <= cut)
    assert decoded.records == as_pairs(records)[:whole]
    if cut not in (0, *ends):
        assert decoded.stop is not StopReason.END or not any(encoded[decoded.end : cut])


@given(records_strategy, st.data())
def test_a_flipped_byte_yields_exactly_the_records_before_it(
    records: list[tuple[RecordKind, bytes]], data: st.DataObject
) -> None:
    encoded, ends = encode(records)
    position = data.draw(st.integers(0, len(encoded) - 1))
    flip = data.draw(st.integers(1, 255))
    damaged = bytearray(encoded)
    damaged[position] ^= flip
    decoded = decode_records(bytes(damaged), 0, final=True)
    intact = sum(1 for end in ends if end <= position)
    assert decoded.records == as_pairs(records)[:intact]
    assert decoded.stop in (StopReason.CORRUPT, StopReason.TORN, StopReason.END)


@given(records_strategy, st.integers(1, 4096))
def test_preallocated_zeros_end_the_records(records: list[tuple[RecordKind, bytes]], zeros: int) -> None:
    encoded, _ = encode(records)
    decoded = decode_records(encoded + bytes(zeros), 0, final=True)
    assert decoded.records == as_pairs(records)
    assert decoded.stop is StopReason.END


@given(records_strategy, st.data())
def test_decoding_in_chunks_matches_decoding_at_once(
    records: list[tuple[RecordKind, bytes]], data: st.DataObject
) -> None:
    encoded, _ = encode(records)
    split = data.draw(st.integers(0, len(encoded)))
    first = decode_records(encoded[:split], 0, final=False)
    assert first.stop is None
    rest = decode_records(encoded[first.end :], 0, final=True)
    assert first.records + rest.records == as_pairs(records)


def test_an_oversized_length_is_corruption_not_a_wait_for_more() -> None:
    encoded, _ = encode([(RecordKind.ENTRY, b"x" * 100)])
    decoded = decode_records(encoded, 0, final=False, length_max=50)
    assert decoded.records == []
    assert decoded.stop is StopReason.CORRUPT


def test_limit_bounds_the_records_decoded() -> None:
    encoded, ends = encode([(RecordKind.FENCE, b"12345678")] * 5)
    decoded = decode_records(encoded, 0, final=True, limit=2)
    assert len(decoded.records) == 2
    assert decoded.end == ends[1]
    assert decoded.stop is None


def test_record_header_is_eight_bytes() -> None:
    encoded, _ = encode([(RecordKind.ENTRY, b"abc")])
    assert len(encoded) == RECORD_HEADER_BYTES + 3


def test_header_round_trip_and_damage() -> None:
    header = encode_header(0x2A)
    assert len(header) == HEADER_BYTES
    decode_header(header, 0x2A)
    with pytest.raises(JournalFormatError, match="names file"):
        decode_header(header, 0x2B)
    damaged = bytearray(header)
    damaged[5] ^= 1
    with pytest.raises(JournalFormatError, match="CRC32C"):
        decode_header(bytes(damaged), 0x2A)
    with pytest.raises(JournalFormatError):
        decode_header(bytes(HEADER_BYTES), 0x2A)

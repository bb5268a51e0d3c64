"""Entry-log codec: records and ledgers maps round-trip; scans of damaged logs report exactly a prefix."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookkeeper.bookie.storage.entry_log_format import (
    HEADER_BYTES,
    EntryLogFormatError,
    ScanStop,
    append_record,
    decode_header,
    decode_ledgers_map,
    decode_record,
    encode_header,
    encode_ledgers_map,
    location,
    scan_records,
    split_location,
)

IDS = struct.Struct(">qq")

entries_strategy = st.lists(
    st.tuples(st.integers(0, 2**40), st.integers(0, 2**40), st.binary(max_size=200)), min_size=1, max_size=10
)


def encode(entries: list[tuple[int, int, bytes]]) -> tuple[bytes, list[int]]:
    buf = bytearray()
    ends = []
    for ledger_id, entry_id, tail in entries:
        append_record(buf, IDS.pack(ledger_id, entry_id) + tail)
        ends.append(len(buf))
    return bytes(buf), ends


def scanned_ids(data: bytes) -> list[tuple[int, int]]:
    result = scan_records(data, 0, 0, final=True, size_max=1 << 20)
    return [(e.ledger_id, e.entry_id) for e in result.entries]


@given(entries_strategy)
def test_records_round_trip(entries: list[tuple[int, int, bytes]]) -> None:
    data, ends = encode(entries)
    pos = 0
    for (ledger_id, entry_id, tail), end in zip(entries, ends, strict=True):
        decoded = decode_record(data, pos)
        assert decoded == (IDS.pack(ledger_id, entry_id) + tail, end)
        pos = end
    result = scan_records(data, 0, HEADER_BYTES, final=True, size_max=1 << 20)
    assert [(e.ledger_id, e.entry_id) for e in result.entries] == [(lid, eid) for lid, eid, _ in entries]
    assert [e.offset for e in result.entries] == [HEADER_BYTES + s for s in [0, *ends[:-1]]]
    assert result.stop is ScanStop.END


@given(entries_strategy, st.data())
def test_scan_of_a_truncated_log_yields_the_whole_records(
    entries: list[tuple[int, int, bytes]], data: st.DataObject
) -> None:
    encoded, ends = encode(entries)
    cut = data.draw(st.integers(0, len(encoded)))
    whole = sum(1 for end in ends if end <= cut)
    assert scanned_ids(encoded[:cut]) == [(lid, eid) for lid, eid, _ in entries[:whole]]


@given(entries_strategy, st.data())
def test_scan_of_a_log_with_a_flipped_byte_yields_the_records_before_it(
    entries: list[tuple[int, int, bytes]], data: st.DataObject
) -> None:
    encoded, ends = encode(entries)
    position = data.draw(st.integers(0, len(encoded) - 1))
    damaged = bytearray(encoded)
    damaged[position] ^= data.draw(st.integers(1, 255))
    intact = sum(1 for end in ends if end <= position)
    assert scanned_ids(bytes(damaged)) == [(lid, eid) for lid, eid, _ in entries[:intact]]


@given(st.dictionaries(st.integers(0, 2**62), st.integers(0, 2**40), max_size=50))
def test_ledgers_map_round_trip(usage: dict[int, int]) -> None:
    record = encode_ledgers_map(usage)
    decoded = decode_record(record, 0)
    assert decoded is not None
    assert decode_ledgers_map(decoded[0]) == usage


def test_scan_stops_at_the_ledgers_map() -> None:
    data, _ = encode([(1, 0, b"a"), (2, 0, b"b")])
    data += encode_ledgers_map({1: 10, 2: 10})
    result = scan_records(data, 0, 0, final=True, size_max=1 << 20)
    assert len(result.entries) == 2
    assert result.stop is ScanStop.LEDGERS_MAP


def test_decode_record_reports_damage_and_incomplete_records() -> None:
    data, _ = encode([(1, 2, b"hello")])
    assert decode_record(data[:-1], 0) is None
    damaged = bytearray(data)
    damaged[-1] ^= 0xFF
    with pytest.raises(EntryLogFormatError, match="CRC32C"):
        decode_record(bytes(damaged), 0)
    with pytest.raises(EntryLogFormatError):
        decode_record(bytes(16), 0)


def test_header_round_trip_and_damage() -> None:
    header = encode_header(4096, 7)
    assert len(header) == HEADER_BYTES
    parsed = decode_header(header)
    assert (parsed.map_offset, parsed.map_count) == (4096, 7)
    damaged = bytearray(header)
    damaged[10] ^= 1
    with pytest.raises(EntryLogFormatError):
        decode_header(bytes(damaged))


@given(st.integers(0, 2**31 - 1), st.integers(0, 2**32 - 1))
def test_location_packs_log_and_offset(log_id: int, offset: int) -> None:
    assert split_location(location(log_id, offset)) == (log_id, offset)

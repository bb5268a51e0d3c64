"""The RocksDB index: locations, floor seeks, ledger records, range deletion, reopening."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookkeeper.bookie.storage.entry_index import (
    EntryIndex,
    EntryRange,
    IndexFormatError,
    LedgerRecord,
    decode_ledger_record,
    encode_ledger_record,
)
from magnetar.bookkeeper.bookie.storage.ledger_store import LedgerState

STATE = LedgerState(master_key=b"m" * 20, fenced=False)


def test_locations_floor_seek_and_counts(tmp_path: Path) -> None:
    index = EntryIndex(tmp_path)
    batch = index.batch()
    for ledger_id in (1, 2, 3):
        for entry_id in (0, 1, 2, 5, 9):
            batch.put_location(ledger_id, entry_id, ledger_id * 1000 + entry_id)
    index.write_sync(batch)
    assert index.get_location(2, 5) == 2005
    assert index.get_location(2, 4) is None
    assert index.last_entry_id(2) == 9
    assert index.last_entry_id(4) is None
    assert index.last_entry_id(0) is None
    assert index.count_entries(2, 1, 5) == 3
    assert list(index.entries_of(3)) == [(e, 3000 + e) for e in (0, 1, 2, 5, 9)]
    index.close()


def test_deleting_a_ledger_removes_its_range_and_record_only(tmp_path: Path) -> None:
    index = EntryIndex(tmp_path)
    batch = index.batch()
    for ledger_id in (1, 2, 3):
        batch.put_location(ledger_id, 0, 1)
        batch.put_location(ledger_id, 2**63 - 1, 2)
        batch.put_ledger(ledger_id, LedgerRecord(STATE))
    index.write_sync(batch)
    batch = index.batch()
    batch.delete_ledger(2)
    index.write_nosync(batch)
    assert index.get_location(2, 0) is None
    assert index.get_location(2, 2**63 - 1) is None
    assert index.last_entry_id(2) is None
    assert index.get_ledger_record(2) is None
    assert index.get_location(1, 2**63 - 1) == 2
    assert index.get_location(3, 0) == 1
    assert [ledger_id for ledger_id, _ in index.load_ledgers()] == [1, 3]
    index.close()


def test_the_index_survives_reopening(tmp_path: Path) -> None:
    index = EntryIndex(tmp_path)
    batch = index.batch()
    batch.put_location(7, 3, 42)
    batch.put_ledger(7, LedgerRecord(LedgerState(b"k" * 20, True, b"lac"), EntryRange(3, 3, 1)))
    index.write_sync(batch)
    index.close()
    index = EntryIndex(tmp_path)
    assert index.get_location(7, 3) == 42
    record = index.get_ledger_record(7)
    assert record == LedgerRecord(LedgerState(b"k" * 20, True, b"lac"), EntryRange(3, 3, 1))
    index.close()


@given(
    st.binary(min_size=0, max_size=32),
    st.booleans(),
    st.one_of(st.none(), st.binary(max_size=64)),
    st.one_of(st.none(), st.tuples(st.integers(0, 2**40), st.integers(0, 2**20), st.integers(1, 2**20))),
)
def test_ledger_records_round_trip(
    key: bytes, fenced: bool, lac: bytes | None, entries: tuple[int, int, int] | None
) -> None:
    rng = EntryRange(entries[0], entries[0] + entries[1], entries[2]) if entries else None
    record = LedgerRecord(LedgerState(key, fenced, lac), rng)
    assert decode_ledger_record(encode_ledger_record(record)) == record


def test_a_damaged_ledger_record_is_reported() -> None:
    data = encode_ledger_record(LedgerRecord(STATE, EntryRange(0, 4, 5)))
    with pytest.raises(IndexFormatError):
        decode_ledger_record(data[:10])
    with pytest.raises(IndexFormatError):
        decode_ledger_record(b"\x09" + data[1:])


def test_entry_range_contiguity() -> None:
    assert EntryRange(0, 9, 10).contiguous
    assert not EntryRange(0, 9, 4).contiguous
    assert 5 in EntryRange(0, 9, 4)
    assert 10 not in EntryRange(0, 9, 4)

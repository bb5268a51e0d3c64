"""The journal's CRC invariant, both halves: what the append path frames passes the append-side check
(:func:`check_appended`, run on every batch before it is written) and decodes whole on replay
(:func:`decode_records`); any damaged byte is refused by both."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookkeeper.bookie.storage.journal_format import (
    RECORD_HEADER_BYTES,
    JournalAppendError,
    RecordKind,
    StopReason,
    append_record,
    check_appended,
    decode_records,
)

RECORDS = st.lists(st.tuples(st.sampled_from(RecordKind), st.binary(max_size=64)), min_size=1, max_size=12)


def _batch(records: list[tuple[RecordKind, bytes]]) -> bytearray:
    buf = bytearray()
    for kind, payload in records:
        append_record(buf, kind, payload)
    return buf


@given(RECORDS)
def test_what_is_appended_passes_both_halves(records: list[tuple[RecordKind, bytes]]) -> None:
    buf = _batch(records)
    assert check_appended(buf) == len(records)
    decoded = decode_records(bytes(buf), 0, final=True)
    assert decoded.records == [(int(k), p) for k, p in records]
    assert decoded.stop is StopReason.END


@given(RECORDS, st.data())
def test_a_damaged_byte_is_refused_by_both_halves(
    records: list[tuple[RecordKind, bytes]], data: st.DataObject
) -> None:
    buf = _batch(records)
    at = data.draw(st.integers(0, len(buf) - 1))
    buf[at] ^= data.draw(st.integers(1, 255))
    with pytest.raises(JournalAppendError, match="journal batch: record"):
        check_appended(buf)
    decoded = decode_records(bytes(buf), 0, final=True)
    assert len(decoded.records) < len(records)  # replay stops at the damaged record
    assert decoded.stop in (StopReason.CORRUPT, StopReason.TORN, StopReason.END)


def test_stray_bytes_after_the_last_record_are_refused() -> None:
    buf = _batch([(RecordKind.FENCE, b"\0" * 8)]) + b"\1\2"
    assert len(buf) < 2 * RECORD_HEADER_BYTES + 8
    with pytest.raises(JournalAppendError, match="2 stray bytes after record 1"):
        check_appended(buf)


def test_the_entry_fast_path_frames_what_the_checks_accept() -> None:
    """``Journal.append_entry`` frames entries itself (:meth:`JournalBatch.append_entry`: a small body copied
    into the batch, a large one by reference): the same bytes as :func:`append_record`, checked as parts."""
    from magnetar.bookkeeper.bookie.storage.journal_format import BODY_BY_REFERENCE_BYTES_MIN, JournalBatch

    for body in (b"\x00" * 16 + b"entry", b"\x00" * 16 + b"e" * BODY_BY_REFERENCE_BYTES_MIN):
        framed = bytearray()
        append_record(framed, RecordKind.ENTRY, body)
        batch = JournalBatch()
        batch.append_entry(body)
        parts = batch.parts()
        assert (parts[-1] is body) is (len(body) >= BODY_BY_REFERENCE_BYTES_MIN)
        assert b"".join(parts) == bytes(framed)
        assert len(batch) == len(framed)
        assert check_appended(parts) == 1
        assert check_appended(b"".join(parts)) == 1


def test_a_batch_in_parts_is_checked_part_by_part() -> None:
    """The parts a gathered write takes: a large entry's body is the part after its header, whole; a body
    part that was changed after the append, cut short or grown, or a header without its body, is refused."""
    from magnetar.bookkeeper.bookie.storage.journal_format import BODY_BY_REFERENCE_BYTES_MIN, JournalBatch

    body = b"\x00" * 16 + b"e" * BODY_BY_REFERENCE_BYTES_MIN
    batch = JournalBatch()
    batch.append_record(RecordKind.FENCE, b"\0" * 8)
    batch.append_entry(body)
    batch.append_entry(b"\x00" * 16 + b"small")
    batch.append_record(RecordKind.DELETE, b"\0" * 8)
    parts = batch.parts()
    assert check_appended(parts) == 4
    fence, header, payload, tail = parts
    assert payload is body
    with pytest.raises(JournalAppendError, match="record 1 at 16 fails its CRC32C"):
        check_appended([fence, header, b"\x01" + payload[1:], tail])
    with pytest.raises(JournalAppendError, match="record 1 at 16 has a bad word"):
        check_appended([fence, header, payload[:-1], tail])
    with pytest.raises(JournalAppendError, match="record 1 at 16 has a bad word"):
        check_appended([fence, header, payload + b"\0", tail])
    with pytest.raises(JournalAppendError, match="record 1 at 16 has a bad word"):
        check_appended([fence, header])
    with pytest.raises(JournalAppendError, match="record 1 at 16 has a bad word"):
        check_appended([fence, header, tail])

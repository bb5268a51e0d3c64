"""Journal replay reading: marks, torn and corrupt tails, damaged headers, deletion of old files."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from magnetar.bookkeeper.bookie.storage.journal_files import (
    JournalMissingError,
    JournalReplayReader,
    JournalWriterFile,
    delete_journals_before,
    journal_file_name,
    list_journal_ids,
)
from magnetar.bookkeeper.bookie.storage.journal_format import (
    HEADER_BYTES,
    RecordKind,
    StopReason,
    append_record,
)
from magnetar.bookkeeper.bookie.storage.log_mark import LogMark


def write_files(path: Path, files: list[list[bytes]]) -> list[list[LogMark]]:
    """Write each list of payloads as entry records into its own journal file; the mark after each."""
    marks: list[list[LogMark]] = []
    for file_id, payloads in enumerate(files, start=1):
        writer = JournalWriterFile(
            path, first_file_id=file_id, file_bytes_max=1 << 20, preallocate_bytes=8192
        )
        writer.open()
        file_marks = []
        for payload in payloads:
            buf = bytearray()
            append_record(buf, RecordKind.ENTRY, payload)
            file_marks.append(writer.write_and_sync(buf))
        writer.close()
        marks.append(file_marks)
    return marks


def replay(
    path: Path, start: LogMark | None = None, chunk: int = 100
) -> tuple[list[bytes], JournalReplayReader]:
    reader = JournalReplayReader(path, start, chunk_bytes=chunk, record_bytes_max=1 << 16)
    payloads = []
    while (batch := reader.read_batch()) is not None:
        payloads.extend(payload for _, payload in batch.records)
    reader.close()
    return payloads, reader


PAYLOADS = [[b"a%03d" % i * 10 for i in range(20)], [b"b%03d" % i * 10 for i in range(20)]]


def test_replay_reads_every_file_in_order_in_small_chunks(tmp_path: Path) -> None:
    write_files(tmp_path, PAYLOADS)
    payloads, reader = replay(tmp_path, chunk=33)
    assert payloads == PAYLOADS[0] + PAYLOADS[1]
    assert reader.stops == []


def test_replay_starts_at_the_mark(tmp_path: Path) -> None:
    marks = write_files(tmp_path, PAYLOADS)
    payloads, _ = replay(tmp_path, marks[0][9])
    assert payloads == PAYLOADS[0][10:] + PAYLOADS[1]


def test_batches_carry_the_mark_after_their_records(tmp_path: Path) -> None:
    marks = write_files(tmp_path, PAYLOADS)
    reader = JournalReplayReader(tmp_path, None, chunk_bytes=1 << 20, record_bytes_max=1 << 16)
    first = reader.read_batch()
    assert first is not None
    assert first.mark == marks[0][-1]
    reader.close()


def test_a_missing_mark_file_is_an_error(tmp_path: Path) -> None:
    write_files(tmp_path, PAYLOADS)
    with pytest.raises(JournalMissingError):
        JournalReplayReader(tmp_path, LogMark(9, HEADER_BYTES), chunk_bytes=4096, record_bytes_max=4096)


@pytest.mark.parametrize("cut", [1, 5, 9, 30])
def test_a_torn_tail_stops_that_file_and_replay_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, cut: int
) -> None:
    marks = write_files(tmp_path, PAYLOADS)
    torn_at = marks[0][14].offset + cut  # inside record 15 of file 1
    path = tmp_path / journal_file_name(1)
    with path.open("r+b") as f:
        f.truncate(torn_at)
    with caplog.at_level(logging.WARNING):
        payloads, reader = replay(tmp_path)
    assert payloads == PAYLOADS[0][:15] + PAYLOADS[1]
    assert reader.stops == [(marks[0][14], StopReason.TORN)]
    assert "stopped at offset" in caplog.text


def test_a_corrupt_record_stops_that_file_cleanly(tmp_path: Path) -> None:
    marks = write_files(tmp_path, PAYLOADS)
    path = tmp_path / journal_file_name(1)
    data = bytearray(path.read_bytes())
    data[marks[0][4].offset + 12] ^= 0x40  # a payload byte of record 6
    path.write_bytes(bytes(data))
    payloads, reader = replay(tmp_path)
    assert payloads == PAYLOADS[0][:5] + PAYLOADS[1]
    assert reader.stops == [(marks[0][4], StopReason.CORRUPT)]


def test_garbage_in_the_preallocated_tail_is_never_replayed(tmp_path: Path) -> None:
    marks = write_files(tmp_path, PAYLOADS[:1])
    path = tmp_path / journal_file_name(1)
    with path.open("r+b") as f:
        f.seek(marks[0][-1].offset)
        f.write(b"\x10\x00\x00\x05garbage that is not a record")
    payloads, reader = replay(tmp_path)
    assert payloads == PAYLOADS[0]
    assert reader.stops[0][1] in (StopReason.CORRUPT, StopReason.TORN)


def test_a_file_with_a_damaged_header_is_skipped(tmp_path: Path) -> None:
    write_files(tmp_path, PAYLOADS)
    path = tmp_path / journal_file_name(1)
    data = bytearray(path.read_bytes())
    data[2] ^= 0xFF
    path.write_bytes(bytes(data))
    payloads, _ = replay(tmp_path)
    assert payloads == PAYLOADS[1]


def test_old_files_are_deleted_but_backups_kept(tmp_path: Path) -> None:
    write_files(tmp_path, [[b"x"]] * 6)
    assert delete_journals_before(tmp_path, LogMark(5, HEADER_BYTES), keep_backups=2) == [1, 2]
    assert list_journal_ids(tmp_path) == [3, 4, 5, 6]
    assert delete_journals_before(tmp_path, LogMark(6, HEADER_BYTES), keep_backups=0) == [3, 4, 5]
    assert list_journal_ids(tmp_path) == [6]

"""Entry logs on disk: reads by location, read-ahead, rolling with ledgers maps, scans, damage."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from magnetar.bookkeeper.bookie.storage.entry_log import EntryLogger, log_file_name
from magnetar.bookkeeper.bookie.storage.entry_log_format import HEADER_BYTES, append_record, location
from magnetar.bookkeeper.bookie.storage.errors import StorageIOError

IDS = struct.Struct(">qq")


def body(ledger_id: int, entry_id: int, size: int = 100) -> bytes:
    return IDS.pack(ledger_id, entry_id) + bytes([entry_id % 251]) * size


def make_logger(path: Path, bytes_max: int = 64 * 1024) -> EntryLogger:
    return EntryLogger(path, bytes_max=bytes_max, open_files_max=2, entry_bytes_max=16 * 1024)


def write_entries(logger: EntryLogger, bodies: list[bytes]) -> list[int]:
    """Write bodies the way a checkpoint does; return their locations."""
    current = logger.current or logger.start_log()
    buf = bytearray()
    locations = []
    for data in bodies:
        locations.append(location(current.log_id, current.offset + len(buf)))
        size = append_record(buf, data)
        ledger_id = IDS.unpack_from(data)[0]
        current.usage[ledger_id] = current.usage.get(ledger_id, 0) + size
    logger.write(buf)
    logger.flush()
    return locations


def test_entries_read_back_by_location(tmp_path: Path) -> None:
    logger = make_logger(tmp_path)
    bodies = [body(1, e) for e in range(10)] + [body(2, 0, size=9000)]
    locations = write_entries(logger, bodies)
    for data, loc in zip(bodies, locations, strict=True):
        ledger_id, entry_id = IDS.unpack_from(data)
        assert logger.read(loc, ledger_id, entry_id) == data
    logger.close()


def test_read_run_returns_following_entries_of_the_same_ledger(tmp_path: Path) -> None:
    logger = make_logger(tmp_path)
    bodies = [body(1, e) for e in range(10)] + [body(2, e) for e in range(3)]
    locations = write_entries(logger, bodies)
    first, following = logger.read_run(locations[2], 1, 2, entries_max=100, bytes_max=64 * 1024)
    assert first == bodies[2]
    assert following == [(e, bodies[e]) for e in range(3, 10)]
    _, limited = logger.read_run(locations[2], 1, 2, entries_max=3, bytes_max=64 * 1024)
    assert [e for e, _ in limited] == [3, 4, 5]
    _, short = logger.read_run(locations[0], 1, 0, entries_max=100, bytes_max=500)
    assert 0 < len(short) < 9  # only whole records of the one bounded read
    logger.close()


def test_a_read_that_disagrees_with_the_index_is_an_io_error(tmp_path: Path) -> None:
    logger = make_logger(tmp_path)
    locations = write_entries(logger, [body(1, 0), body(1, 1)])
    with pytest.raises(StorageIOError, match="another entry"):
        logger.read(locations[1], 1, 0)
    with pytest.raises(StorageIOError):
        logger.read(location(99, HEADER_BYTES), 1, 0)  # no such log
    logger.close()


def test_a_truncated_log_is_an_io_error_not_an_absence(tmp_path: Path) -> None:
    logger = make_logger(tmp_path)
    locations = write_entries(logger, [body(1, 0), body(1, 1, size=5000)])
    logger.close()
    path = tmp_path / log_file_name(1)
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size - 10)
    logger = make_logger(tmp_path)
    assert logger.read(locations[0], 1, 0) == body(1, 0)
    with pytest.raises(StorageIOError, match=r"truncated|ends"):
        logger.read(locations[1], 1, 1)
    logger.close()


def test_a_flipped_byte_is_an_io_error(tmp_path: Path) -> None:
    logger = make_logger(tmp_path)
    locations = write_entries(logger, [body(1, 0)])
    path = tmp_path / log_file_name(1)
    data = bytearray(path.read_bytes())
    data[HEADER_BYTES + 50] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(StorageIOError, match="CRC32C"):
        logger.read(locations[0], 1, 0)
    logger.close()


def test_rolling_writes_a_ledgers_map_and_scans_agree_with_it(tmp_path: Path) -> None:
    logger = make_logger(tmp_path)
    write_entries(logger, [body(1, e) for e in range(5)] + [body(3, e) for e in range(2)])
    logger.roll()
    write_entries(logger, [body(2, 0)])
    assert logger.log_ids() == [1]  # the current log is not offered to GC
    usage = logger.ledgers_map(1)
    assert usage == {1: 5 * 124, 3: 2 * 124}
    scanned = list(logger.scan(1))
    assert [(e.ledger_id, e.entry_id) for e in scanned] == [(1, e) for e in range(5)] + [(3, 0), (3, 1)]
    assert logger.ledger_usage(1) == usage
    assert logger.ledgers_map(2) is None  # not rolled: GC scans instead
    assert logger.ledger_usage(2) == {2: 124}
    logger.close()


def test_a_torn_header_rewrite_falls_back_to_the_scan(tmp_path: Path) -> None:
    logger = make_logger(tmp_path)
    write_entries(logger, [body(1, e) for e in range(3)])
    logger.roll()
    logger.close()
    path = tmp_path / log_file_name(1)
    data = bytearray(path.read_bytes())
    data[6] ^= 0xFF
    path.write_bytes(bytes(data))
    logger = make_logger(tmp_path)
    assert logger.ledgers_map(1) is None
    assert logger.ledger_usage(1) == {1: 3 * 124}
    logger.close()


def test_a_scan_stops_at_a_torn_tail(tmp_path: Path) -> None:
    logger = make_logger(tmp_path)
    write_entries(logger, [body(1, e) for e in range(4)])
    logger.close()
    path = tmp_path / log_file_name(1)
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size - 1)
    logger = make_logger(tmp_path)
    assert [e.entry_id for e in logger.scan(1)] == [0, 1, 2]
    logger.close()


def test_log_ids_never_repeat_even_after_deletion(tmp_path: Path) -> None:
    logger = make_logger(tmp_path)
    logger.start_log()
    logger.roll()
    logger.roll()
    assert logger.current is not None
    assert logger.current.log_id == 3
    logger.delete_log(2)
    with pytest.raises(ValueError, match="being written"):
        logger.delete_log(3)
    logger.close()
    (tmp_path / log_file_name(3)).unlink()
    logger = make_logger(tmp_path)
    assert logger.start_log().log_id == 4
    assert logger.log_ids() == [1]
    logger.close()

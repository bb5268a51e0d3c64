"""The entry log's on-disk format, without I/O (BookKeeper ``DefaultEntryLogger``, docs/upstream.md,
BookKeeper §5.2).

An entry log ``<id as 8 hex digits>.log`` interleaves the entries of many ledgers, written at checkpoints
sorted by (ledger, entry). Layout::

    header   HEADER_BYTES: [magic "MGEL"][version:u32][ledgersMapOffset:u64][ledgersCount:u32][crc:u32]
    records  [size:u32][crc:u32][data: size bytes]
    map      one record whose data is [-1:i64][-2:i64][count:u32]([ledgerId:i64][bytes:i64]) * count

``data`` is the packaged entry, stored verbatim; it begins with its ledger id and entry id, so a record is
self-describing for scans without storing the ids twice. ``crc`` is the CRC32C of ``data`` seeded with
``size`` (a damaged size fails as surely as damaged data). A *location* is ``logId << 32 | offset`` of the
record's first byte, as BookKeeper packs it.

The ledgers map (BookKeeper's ``appendLedgersMap``) is appended when a log is rolled and the header is then
rewritten to point at it, so the garbage collector learns how many bytes each ledger holds without reading
the log. Its ids ``(-1, -2)`` (``INVALID_LID``, ``LEDGERS_MAP_ENTRY_ID``) make it recognisable to a scan
too. A log without a valid map (not rolled yet, or the header rewrite was torn) is scanned instead; a scan
stops at the first short, zero or corrupt record, so it only ever reports whole records.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import crc32c

MAGIC = b"MGEL"
FORMAT_VERSION = 1
HEADER_BYTES = 1024
_HEADER = struct.Struct(">4sIQI")
_CRC = struct.Struct(">I")

RECORD_HEADER = struct.Struct(">II")
RECORD_HEADER_BYTES = RECORD_HEADER.size
IDS = struct.Struct(">qq")
IDS_BYTES = IDS.size
MAP_IDS = (-1, -2)
_MAP_PREFIX = struct.Struct(">qqI")
_MAP_ITEM = struct.Struct(">qq")
OFFSET_BITS = 32
OFFSET_MASK = (1 << OFFSET_BITS) - 1


class EntryLogFormatError(ValueError):
    """An entry-log header, record or ledgers map is damaged."""


def location(log_id: int, offset: int) -> int:
    return (log_id << OFFSET_BITS) | offset


def split_location(loc: int) -> tuple[int, int]:
    return loc >> OFFSET_BITS, loc & OFFSET_MASK


def encode_header(map_offset: int = 0, map_count: int = 0) -> bytes:
    fields = _HEADER.pack(MAGIC, FORMAT_VERSION, map_offset, map_count)
    header = fields + _CRC.pack(crc32c.crc32c(fields))
    return header + bytes(HEADER_BYTES - len(header))


@dataclass(frozen=True, slots=True)
class LogHeader:
    map_offset: int
    """Offset of the ledgers-map record, 0 if the log has none (not rolled)."""
    map_count: int


def decode_header(data: bytes) -> LogHeader:
    if len(data) < _HEADER.size + _CRC.size:
        raise EntryLogFormatError(f"entry-log header is {len(data)} bytes long")
    fields = data[: _HEADER.size]
    if _CRC.unpack_from(data, _HEADER.size)[0] != crc32c.crc32c(fields):
        raise EntryLogFormatError("entry-log header fails its CRC32C")
    magic, version, map_offset, map_count = _HEADER.unpack(fields)
    if magic != MAGIC:
        raise EntryLogFormatError(f"entry-log header has magic {magic!r}")
    if version != FORMAT_VERSION:
        raise EntryLogFormatError(f"entry-log format version {version} is not supported")
    return LogHeader(map_offset, map_count)


def append_record(buf: bytearray, data: bytes) -> int:
    """Append one record holding ``data``; return its size in bytes."""
    size = len(data)
    buf += RECORD_HEADER.pack(size, crc32c.crc32c(data, size))
    buf += data
    return RECORD_HEADER_BYTES + size


def encode_ledgers_map(usage: dict[int, int]) -> bytes:
    """The ledgers-map record (header included) for ``ledgerId -> bytes``."""
    body = bytearray(_MAP_PREFIX.pack(*MAP_IDS, len(usage)))
    for ledger_id in sorted(usage):
        body += _MAP_ITEM.pack(ledger_id, usage[ledger_id])
    record = bytearray()
    append_record(record, bytes(body))
    return bytes(record)


def decode_ledgers_map(data: bytes) -> dict[int, int]:
    """Decode the ``data`` of a ledgers-map record (as returned by :func:`decode_record`)."""
    if len(data) < _MAP_PREFIX.size:
        raise EntryLogFormatError("ledgers map is too short")
    lid, eid, count = _MAP_PREFIX.unpack_from(data)
    if (lid, eid) != MAP_IDS or len(data) != _MAP_PREFIX.size + count * _MAP_ITEM.size:
        raise EntryLogFormatError("ledgers map record is malformed")
    items = _MAP_ITEM.iter_unpack(memoryview(data)[_MAP_PREFIX.size :])
    return {int(ledger_id): int(size) for ledger_id, size in items}


def decode_record(buf: bytes, pos: int) -> tuple[bytes, int] | None:
    """``(data, next position)`` of the record at ``buf[pos:]``; None if ``buf`` ends inside it.

    Raises :class:`EntryLogFormatError` if the record is zero, too small or fails its CRC.
    """
    if pos + RECORD_HEADER_BYTES > len(buf):
        return None
    size, expected = RECORD_HEADER.unpack_from(buf, pos)
    end = pos + RECORD_HEADER_BYTES + size
    if size < IDS_BYTES:
        raise EntryLogFormatError(f"record of {size} bytes at offset {pos}")
    if end > len(buf):
        return None
    data = buf[pos + RECORD_HEADER_BYTES : end]
    if crc32c.crc32c(data, size) != expected:
        raise EntryLogFormatError(f"record at offset {pos} fails its CRC32C")
    return data, end


class ScanStop(enum.Enum):
    END = "end of records"
    LEDGERS_MAP = "ledgers map reached"
    TORN = "record cut short"
    CORRUPT = "record is zero-sized or fails its CRC32C"


@dataclass(frozen=True, slots=True)
class ScannedEntry:
    ledger_id: int
    entry_id: int
    offset: int
    """Offset of the record in the log (the low half of its location)."""
    record_bytes: int


@dataclass(frozen=True, slots=True)
class ScanResult:
    entries: list[ScannedEntry]
    end: int
    stop: ScanStop | None
    """None: ``buf`` ended on or inside a record and more data may follow (``final=False``)."""


def scan_records(buf: bytes, start: int, base_offset: int, *, final: bool, size_max: int) -> ScanResult:
    """Scan the records of ``buf[start:]``; ``base_offset`` is the file offset of ``buf[0]``."""
    entries: list[ScannedEntry] = []
    pos = start
    size_buf = len(buf)
    while pos + RECORD_HEADER_BYTES <= size_buf:
        size, expected = RECORD_HEADER.unpack_from(buf, pos)
        if size == 0 and expected == 0:
            return ScanResult(entries, pos, ScanStop.END)
        end = pos + RECORD_HEADER_BYTES + size
        if size < IDS_BYTES or size > size_max:
            return ScanResult(entries, pos, ScanStop.CORRUPT)
        if end > size_buf:
            return ScanResult(entries, pos, ScanStop.TORN if final else None)
        data = buf[pos + RECORD_HEADER_BYTES : end]
        if crc32c.crc32c(data, size) != expected:
            return ScanResult(entries, pos, ScanStop.CORRUPT)
        ledger_id, entry_id = IDS.unpack_from(data)
        if (ledger_id, entry_id) == MAP_IDS:
            return ScanResult(entries, pos, ScanStop.LEDGERS_MAP)
        entries.append(ScannedEntry(ledger_id, entry_id, base_offset + pos, end - pos))
        pos = end
    if not final:
        return ScanResult(entries, pos, None)
    tail = buf[pos:]
    return ScanResult(entries, pos, ScanStop.END if not any(tail) else ScanStop.TORN)

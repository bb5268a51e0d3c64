"""The journal's on-disk format, without I/O (BookKeeper ``JournalChannel`` + journal records,
docs/upstream.md, BookKeeper §5.1).

A journal file ``<id as 16 hex digits>.txn`` starts with a :data:`HEADER_BYTES` header (magic ``MGJL``,
format version, the file's own id, a CRC32C of those fields; zero padding) followed by records::

    [word:u32 = kind << 28 | length][crc:u32][payload: length bytes]

``crc`` is the CRC32C of the payload *seeded with the word*, so a damaged length or kind fails the check as
surely as a damaged payload. BookKeeper journals carry no checksum at all; with one, replay can tell a torn
or corrupt tail from good data at record granularity. Kinds mirror BookKeeper's meta entry ids:

=========== ============================================ ===================================
kind        payload                                      BookKeeper
=========== ============================================ ===================================
ENTRY       the packaged entry (starts with ledger/entry) data record
LEDGER_KEY  ``[ledgerId:i64][masterKey]``                ``METAENTRY_ID_LEDGER_KEY``
FENCE       ``[ledgerId:i64]``                           ``METAENTRY_ID_FENCE_KEY``
EXPLICIT_LAC ``[ledgerId:i64][explicit LAC body]``        ``METAENTRY_ID_LEDGER_EXPLICITLAC``
DELETE      ``[ledgerId:i64]``                           (none: a deleted ledger stays deleted on replay)
=========== ============================================ ===================================

Files are preallocated with zeros, so a zero word marks the end of written data. Decoding stops at the
first record that is short (torn write), fails its CRC or has an unknown kind: everything before it is
returned, nothing after it - the decoded records are always a prefix of what was written.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import crc32c

MAGIC = b"MGJL"
FORMAT_VERSION = 1
HEADER_BYTES = 512
_HEADER = struct.Struct(">4sIQ")
_HEADER_CRC = struct.Struct(">I")

RECORD_HEADER = struct.Struct(">II")
RECORD_HEADER_BYTES = RECORD_HEADER.size
KIND_SHIFT = 28
LENGTH_MASK = (1 << KIND_SHIFT) - 1
LEDGER_ID = struct.Struct(">q")


class RecordKind(enum.IntEnum):
    ENTRY = 1
    LEDGER_KEY = 2
    FENCE = 3
    EXPLICIT_LAC = 4
    DELETE = 5


_KINDS = frozenset(int(k) for k in RecordKind)
ENTRY_WORD_BASE = int(RecordKind.ENTRY) << KIND_SHIFT


class StopReason(enum.Enum):
    END = "end of written data"
    TORN = "record cut short (torn write)"
    CORRUPT = "record fails its CRC32C or has an unknown kind"


class JournalFormatError(ValueError):
    """A journal file header is missing, damaged, of another version or of another file."""


def encode_header(file_id: int) -> bytes:
    fields = _HEADER.pack(MAGIC, FORMAT_VERSION, file_id)
    header = fields + _HEADER_CRC.pack(crc32c.crc32c(fields))
    return header + bytes(HEADER_BYTES - len(header))


def decode_header(data: bytes, expected_file_id: int) -> None:
    """Check a file header; raise :class:`JournalFormatError` if it is not a valid header of that file."""
    if len(data) < _HEADER.size + _HEADER_CRC.size:
        raise JournalFormatError(f"journal header is {len(data)} bytes long")
    fields = data[: _HEADER.size]
    (crc,) = _HEADER_CRC.unpack_from(data, _HEADER.size)
    if crc32c.crc32c(fields) != crc:
        raise JournalFormatError("journal header fails its CRC32C")
    magic, version, file_id = _HEADER.unpack(fields)
    if magic != MAGIC:
        raise JournalFormatError(f"journal header has magic {magic!r}")
    if version != FORMAT_VERSION:
        raise JournalFormatError(f"journal format version {version} is not supported")
    if file_id != expected_file_id:
        raise JournalFormatError(f"journal header names file {file_id:x}, expected {expected_file_id:x}")


def append_record(buf: bytearray, kind: RecordKind, payload: bytes) -> int:
    """Append one record to ``buf``; return the number of bytes appended."""
    length = len(payload)
    assert length <= LENGTH_MASK, "record too long for the journal format"
    word = (int(kind) << KIND_SHIFT) | length
    buf += RECORD_HEADER.pack(word, crc32c.crc32c(payload, word))
    buf += payload
    return RECORD_HEADER_BYTES + length


class JournalAppendError(AssertionError):
    """A batch about to be written holds a record its own reader would refuse (an internal error)."""


def check_appended(buf: bytes | bytearray | Sequence[bytes | bytearray]) -> int:
    """The append half of the journal's CRC invariant (§3 rule 11); :func:`decode_records` is the read half.

    Before a batch is written, every record in it must pass the reader's checks - a known kind, a length
    within the batch, the CRC32C of the payload seeded with the word - and the records must end exactly at
    the batch's end; otherwise :class:`JournalAppendError` names the record. ``buf`` is the batch's bytes,
    or its parts as :class:`JournalBatch` lays them out (a record's payload is in its header's part or is
    the whole next part). Nothing is copied (the CRC runs over views). Returns the number of records."""
    parts = [buf] if isinstance(buf, bytes | bytearray) else buf
    unpack_from = RECORD_HEADER.unpack_from
    crc = crc32c.crc32c
    pos = records = index = 0  # pos: the record's offset in the batch
    while index < len(parts):
        part = parts[index]
        index += 1
        if len(part) == RECORD_HEADER_BYTES and index < len(parts):  # a header; its payload the next part
            word, expected = unpack_from(part)
            length = word & LENGTH_MASK
            if word >> KIND_SHIFT not in _KINDS or len(parts[index]) != length:
                raise _bad_record(records, pos, word)
            if crc(parts[index], word) != expected:
                raise JournalAppendError(f"journal batch: record {records} at {pos} fails its CRC32C")
            index += 1
            pos += RECORD_HEADER_BYTES + length
            records += 1
            continue
        with memoryview(part) as view:
            size = len(view)
            at = 0
            while at < size:
                if at + RECORD_HEADER_BYTES > size:
                    raise JournalAppendError(f"journal batch: {size - at} stray bytes after record {records}")
                word, expected = unpack_from(view, at)
                body_end = at + RECORD_HEADER_BYTES + (word & LENGTH_MASK)
                if word >> KIND_SHIFT not in _KINDS or body_end > size:
                    raise _bad_record(records, pos, word)
                if crc(view[at + RECORD_HEADER_BYTES : body_end], word) != expected:
                    raise JournalAppendError(f"journal batch: record {records} at {pos} fails its CRC32C")
                pos += body_end - at
                at = body_end
                records += 1
    return records


BODY_BY_REFERENCE_BYTES_MIN = 512
"""An entry body of at least this many bytes joins a batch by reference, one more buffer for the gathered
write, instead of being copied into the batch: below it, the copy costs less CPU than the extra buffer
(tests/bench/RESULTS.md, "bookie: an add's payload copies")."""


def _bad_record(records: int, pos: int, word: int) -> JournalAppendError:
    return JournalAppendError(f"journal batch: record {records} at {pos} has a bad word {word:#x}")


class JournalBatch:
    """Journal records appended since the last write, as the parts one gathered write takes: record headers,
    metadata records and small entries coalesced in ``bytearray`` parts, and each entry body of at least
    :data:`BODY_BY_REFERENCE_BYTES_MIN` bytes by reference, never copied (the writer hands the parts to
    ``pwritev``). Such a body must therefore not change until the batch is written: the journal only appends
    immutable ``bytes``."""

    __slots__ = ("_parts", "_tail", "size")

    def __init__(self) -> None:
        self._parts: list[bytes | bytearray] = []
        self._tail = bytearray()
        self.size = 0
        """The batch's bytes (what the journal file grows by when it is written)."""

    def __len__(self) -> int:
        return self.size

    def append_entry(self, body: bytes) -> None:
        """Append an entry record: its header, and its body copied or by reference (see the class)."""
        length = len(body)
        word = ENTRY_WORD_BASE | length
        header = RECORD_HEADER.pack(word, crc32c.crc32c(body, word))
        if length < BODY_BY_REFERENCE_BYTES_MIN:
            tail = self._tail
            tail += header
            tail += body
        else:
            if self._tail:
                self._parts.append(self._tail)
                self._tail = bytearray()
            self._parts.append(header)
            self._parts.append(body)
        self.size += RECORD_HEADER_BYTES + length

    def append_record(self, kind: RecordKind, payload: bytes) -> None:
        """Append a (small) record whole, payload copied."""
        self.size += append_record(self._tail, kind, payload)

    def parts(self) -> list[bytes | bytearray]:
        """The batch in order, for one gathered write."""
        return [*self._parts, self._tail] if self._tail else list(self._parts)


def ledger_payload(ledger_id: int, tail: bytes = b"") -> bytes:
    return LEDGER_ID.pack(ledger_id) + tail


@dataclass(frozen=True, slots=True)
class Decoded:
    """Records decoded from ``buf[start:]``: ``(kind, payload)`` pairs, where decoding ended, and why.

    ``stop`` is None when more data may follow (``final=False``) or ``limit`` records were decoded; then
    ``end`` is where to resume.
    """

    records: list[tuple[int, bytes]]
    end: int
    stop: StopReason | None


def decode_records(
    buf: bytes, start: int, *, final: bool, length_max: int = LENGTH_MASK, limit: int | None = None
) -> Decoded:
    """Decode consecutive records of ``buf`` from ``start`` (at most ``limit`` of them).

    ``final`` says that no byte follows ``buf`` in the file: a record cut short by the end of the buffer is
    then a torn tail rather than a record to complete with the next read. A length above ``length_max``
    is corruption (it also bounds how much a reader may have to buffer to complete a record).
    """
    records: list[tuple[int, bytes]] = []
    append = records.append
    unpack_from = RECORD_HEADER.unpack_from
    crc = crc32c.crc32c
    size = len(buf)
    pos = start
    budget = -1 if limit is None else limit
    while pos + RECORD_HEADER_BYTES <= size and budget != 0:
        word, expected = unpack_from(buf, pos)
        if word == 0:
            return Decoded(records, pos, StopReason.END)
        kind = word >> KIND_SHIFT
        length = word & LENGTH_MASK
        body_start = pos + RECORD_HEADER_BYTES
        body_end = body_start + length
        if kind not in _KINDS or length > length_max:
            return Decoded(records, pos, StopReason.CORRUPT)
        if body_end > size:
            return Decoded(records, pos, StopReason.TORN if final else None)
        payload = buf[body_start:body_end]
        if crc(payload, word) != expected:
            return Decoded(records, pos, StopReason.CORRUPT)
        append((kind, payload))
        pos = body_end
        budget -= 1
    if final and budget != 0:
        tail = buf[pos:size]
        return Decoded(records, pos, StopReason.END if not any(tail) else StopReason.TORN)
    return Decoded(records, pos, None)

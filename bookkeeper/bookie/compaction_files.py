"""The files of a transactional entry-log compaction, without trio (BookKeeper's
``TransactionalEntryLogCompactor``, docs/upstream.md, BookKeeper §6; the issue is BookKeeper #571, "use a
separate log for compaction").

A compaction copies the live records of one or more *source* logs into a new *target* log and then retires
the sources. Its files, in the entry-log directory, tell a restarted bookie how far it got:

``<target>.log.compacting``
    The target while it is written: records copied verbatim (a record is position independent), then the
    ledgers map, then the header rewritten to point at it, all fdatasynced (``CompactionLogWriter.finish``).
    Nothing in the index points at it. Alone (without a manifest) it is an interrupted copy: deleted.
``<target>.compaction``
    The manifest: target id, source ids, records copied. Written durably (temp file, fsync, rename, fsync
    of the directory) only after the target is complete and synced; it is the commit point. From then on
    restart *finishes* the compaction: it makes the target visible as ``<target>.log``, points the index at
    it, deletes the sources, and deletes the manifest last.

The index is never pointed at a byte that is not durable, and a source is deleted only after the index no
longer points into it, durably: at every crash point each live entry is readable through the index (from the
source or from the target; both may hold it - duplicates are garbage for a later pass) - invariant 12 of
docs/architecture.md §3.

Everything here is blocking file I/O for worker threads. :class:`LogRecordReader` reads a log's records
sequentially in bounded pieces, with their bytes, for copying and for scans.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import crc32c

from magnetar.bookkeeper.bookie.entry_log import log_file_name
from magnetar.bookkeeper.bookie.entry_log_format import (
    HEADER_BYTES,
    ScannedEntry,
    ScanStop,
    encode_header,
    encode_ledgers_map,
    scan_records,
)
from magnetar.bookkeeper.bookie.log_mark import fsync_dir, write_file_durably

log = logging.getLogger(__name__)

COMPACTING_SUFFIX = ".log.compacting"
MANIFEST_SUFFIX = ".compaction"
_MANIFEST_MAGIC = b"MGCM"
_MANIFEST_HEAD = struct.Struct(">4sIQQI")
_SOURCE = struct.Struct(">Q")
_CRC = struct.Struct(">I")
_MANIFEST_VERSION = 1


def compacting_name(log_id: int) -> str:
    return f"{log_id:08x}{COMPACTING_SUFFIX}"


def manifest_name(log_id: int) -> str:
    return f"{log_id:08x}{MANIFEST_SUFFIX}"


@dataclass(frozen=True, slots=True)
class CompactionManifest:
    target: int
    sources: tuple[int, ...]
    entries: int
    """Records copied into the target (a whole target scans to exactly this many)."""


def encode_manifest(manifest: CompactionManifest) -> bytes:
    head = _MANIFEST_HEAD.pack(
        _MANIFEST_MAGIC, _MANIFEST_VERSION, manifest.target, manifest.entries, len(manifest.sources)
    )
    body = head + b"".join(_SOURCE.pack(s) for s in manifest.sources)
    return body + _CRC.pack(crc32c.crc32c(body))


def decode_manifest(data: bytes) -> CompactionManifest | None:
    """The manifest in ``data``, or None if it is not a whole, valid one."""
    if len(data) < _MANIFEST_HEAD.size + _CRC.size:
        return None
    magic, version, target, entries, count = _MANIFEST_HEAD.unpack_from(data)
    end = _MANIFEST_HEAD.size + count * _SOURCE.size
    if magic != _MANIFEST_MAGIC or version != _MANIFEST_VERSION or len(data) != end + _CRC.size:
        return None
    if _CRC.unpack_from(data, end)[0] != crc32c.crc32c(data[:end]):
        return None
    sources = tuple(int(s) for (s,) in _SOURCE.iter_unpack(data[_MANIFEST_HEAD.size : end]))
    return CompactionManifest(int(target), sources, int(entries))


def write_manifest(directory: Path, manifest: CompactionManifest) -> None:
    write_file_durably(directory / manifest_name(manifest.target), encode_manifest(manifest))


def remove_file(path: Path) -> None:
    """Unlink ``path`` (if present) durably."""
    path.unlink(missing_ok=True)
    fsync_dir(path.parent)


@dataclass(frozen=True, slots=True)
class Leftovers:
    """What interrupted compactions left in the entry-log directory."""

    manifests: dict[int, CompactionManifest | None]
    """``target id -> manifest`` (None: the manifest file is damaged)."""
    compacting: list[int]
    """Targets still named ``.log.compacting``."""


def find_leftovers(directory: Path) -> Leftovers:
    manifests: dict[int, CompactionManifest | None] = {}
    compacting: list[int] = []
    for path in sorted(directory.iterdir()):
        name = path.name
        if name.endswith(MANIFEST_SUFFIX + ".tmp"):
            path.unlink(missing_ok=True)  # a manifest write that never reached its rename
        elif name.endswith((MANIFEST_SUFFIX, COMPACTING_SUFFIX)):
            try:
                log_id = int(name.split(".", 1)[0], 16)
            except ValueError:
                log.warning("ignoring stray file %s in the entry-log directory", path)
                continue
            if name.endswith(COMPACTING_SUFFIX):
                compacting.append(log_id)
            else:
                manifests[log_id] = decode_manifest(path.read_bytes())
    return Leftovers(manifests, compacting)


def make_visible(directory: Path, target: int) -> bool:
    """Rename ``<target>.log.compacting`` to ``<target>.log`` durably; whether ``<target>.log`` exists."""
    staged = directory / compacting_name(target)
    final = directory / log_file_name(target)
    if staged.exists():
        os.replace(staged, final)
        fsync_dir(directory)
    return final.exists()


class CompactionLogWriter:
    """Writes ``<target>.log.compacting``: the header, copied records, the ledgers map (blocking)."""

    def __init__(self, directory: Path, log_id: int, *, offset_limit: int, sync_bytes: int = 0) -> None:
        """``sync_bytes``: fdatasync whenever this much was written since the last sync (0: only at the end),
        so that the disk writes a compaction back in small pieces rather than one burst at its commit."""
        self.directory = directory
        self.log_id = log_id
        self.path = directory / compacting_name(log_id)
        self.offset = HEADER_BYTES
        self._synced = HEADER_BYTES
        self._sync_bytes = sync_bytes
        self.usage: dict[int, int] = {}
        self._offset_limit = offset_limit
        self._fd: int | None = None

    def open(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.pwrite(fd, encode_header(), 0)
        except OSError:
            os.close(fd)
            self.path.unlink(missing_ok=True)
            raise
        self._fd = fd

    def append(self, raw: bytes | bytearray, ledger_bytes: Iterable[tuple[int, int]]) -> int:
        """Append whole records (``raw``); ``ledger_bytes`` says whose they are. Returns their offset."""
        assert self._fd is not None, "the compaction log is not open"
        start = self.offset
        if start + len(raw) > self._offset_limit:
            raise OSError(f"compaction log {self.path.name} would exceed {self._offset_limit} bytes")
        view = memoryview(raw)
        offset = start
        while view:
            written = os.pwrite(self._fd, view, offset)
            offset += written
            view = view[written:]
        self.offset = offset
        usage = self.usage
        for ledger_id, size in ledger_bytes:
            usage[ledger_id] = usage.get(ledger_id, 0) + size
        if self._sync_bytes and offset - self._synced >= self._sync_bytes:
            os.fdatasync(self._fd)
            self._synced = offset
        return start

    def finish(self) -> int:
        """Append the ledgers map, sync, point the header at it, sync, close; the file size."""
        fd = self._fd
        assert fd is not None, "the compaction log is not open"
        map_record = encode_ledgers_map(self.usage)
        os.pwrite(fd, map_record, self.offset)
        os.fdatasync(fd)
        os.pwrite(fd, encode_header(self.offset, len(self.usage)), 0)
        os.fdatasync(fd)
        os.close(fd)
        self._fd = None
        return self.offset + len(map_record)

    def discard(self) -> None:
        """Close and delete the unfinished target (rollback)."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None
        remove_file(self.path)


@dataclass(frozen=True, slots=True)
class Chunk:
    """Whole records read from a log: ``entries`` (offsets in the file) and the bytes they are in."""

    buf: bytes
    base: int
    """File offset of ``buf[0]``: entry ``e``'s record starts at ``buf[e.offset - base]``."""
    entries: list[ScannedEntry]


class LogRecordReader:
    """Reads a log's whole records in file order, about ``chunk_bytes`` at a time (blocking).

    Reading stops for good at the ledgers map, at the end, or at a torn or corrupt record; :attr:`stop` and
    :attr:`stop_offset` then say which and where.
    """

    def __init__(self, path: Path, *, chunk_bytes: int, record_bytes_max: int) -> None:
        self.path = path
        self._chunk_bytes = chunk_bytes
        self._size_max = record_bytes_max
        self._file: BinaryIO | None = None
        self._buf = b""
        self._base = HEADER_BYTES
        self.stop: ScanStop | None = None
        self.stop_offset = HEADER_BYTES

    def open(self) -> None:
        self._file = self.path.open("rb")
        self._file.seek(HEADER_BYTES)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def read_chunk(self) -> Chunk | None:
        """The next records (possibly none), or None once reading has stopped."""
        if self.stop is not None:
            return None
        assert self._file is not None, "the reader is not open"
        data = self._file.read(self._chunk_bytes)
        buf = self._buf + data if self._buf else data
        base = self._base
        result = scan_records(buf, 0, base, final=not data, size_max=self._size_max)
        self._buf = buf[result.end :]
        self._base = base + result.end
        if result.stop is not None:
            self.stop = result.stop
            self.stop_offset = self._base
            if result.stop in (ScanStop.TORN, ScanStop.CORRUPT):
                stop = result.stop.value
                log.warning("%s: records end at offset %d (%s)", self.path.name, self._base, stop)
        return Chunk(buf, base, result.entries)

"""The on-disk files of a transactional entry-log compaction, and what recovery reads of them, without trio
(BookKeeper's ``TransactionalEntryLogCompactor``, docs/upstream.md, BookKeeper §6; the issue is BookKeeper
#571, "use a separate log for compaction").

A compaction (run by ``magnetar.gc``) copies the live records of one or more *source* logs into a new
*target* log and then retires the sources. Its files, in the entry-log directory, tell a restarted bookie how
far it got; the engine reads them when it opens, before its journal replay (:mod:`.gc_primitives`), so their
format is the engine's:

``<target>.log.compacting``
    The target while it is written: records copied verbatim (a record is position independent), then the
    ledgers map, then the header rewritten to point at it, all fdatasynced (the compaction log writer of
    ``magnetar.gc``). Nothing in the index points at it. Alone (without a manifest) it is an interrupted
    copy: deleted.
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
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import crc32c

from magnetar.bookkeeper.bookie.storage.entry_log import log_file_name
from magnetar.bookkeeper.bookie.storage.entry_log_format import (
    HEADER_BYTES,
    ScannedEntry,
    ScanStop,
    scan_records,
)
from magnetar.bookkeeper.bookie.storage.log_mark import fsync_dir, write_file_durably

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

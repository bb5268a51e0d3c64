"""The journal log mark and its durable, monotonic persistence (BookKeeper ``LogMark`` / ``lastMark``).

A :class:`LogMark` ``(file id, offset)`` names a position in the journal. After a checkpoint has made
everything journaled before a mark durable in the entry logs and the index, the mark is persisted; on
restart the journal is replayed from it. The file is replaced atomically (write a temporary file, fsync it,
rename it over the old one, fsync the directory), and only ever moves forward: BookKeeper #4105 shows what a
stale checkpoint overwriting a newer mark costs (entries that are never replayed).

Functions here do blocking file I/O; the engine calls them from a worker thread.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c

log = logging.getLogger(__name__)

_MARK = struct.Struct(">4sQQ")
_CRC = struct.Struct(">I")
_MAGIC = b"MGLM"


@dataclass(frozen=True, slots=True, order=True)
class LogMark:
    file_id: int
    offset: int

    def __str__(self) -> str:
        return f"{self.file_id:x}@{self.offset}"


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_durably(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably (temp file + fsync + rename + dir fsync)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def encode_mark(mark: LogMark) -> bytes:
    fields = _MARK.pack(_MAGIC, mark.file_id, mark.offset)
    return fields + _CRC.pack(crc32c.crc32c(fields))


def decode_mark(data: bytes) -> LogMark | None:
    """The mark in ``data``, or None if it is not a whole, valid mark record."""
    if len(data) != _MARK.size + _CRC.size:
        return None
    fields = data[: _MARK.size]
    if _CRC.unpack_from(data, _MARK.size)[0] != crc32c.crc32c(fields):
        return None
    magic, file_id, offset = _MARK.unpack(fields)
    return LogMark(file_id, offset) if magic == _MAGIC else None


class MarkFile:
    """The persisted mark. :meth:`persist` ignores a mark older than the one already persisted."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.persisted = self._load()

    def _load(self) -> LogMark | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        mark = decode_mark(data)
        if mark is None:
            # Safe fallback: replaying the whole journal that is left is idempotent, only slower.
            log.warning("journal mark %s is damaged; replaying every journal file present", self.path)
        return mark

    def persist(self, mark: LogMark) -> bool:
        """Persist ``mark`` if it is newer than the persisted one; return whether it was written."""
        if self.persisted is not None and mark <= self.persisted:
            return False
        write_file_durably(self.path, encode_mark(mark))
        self.persisted = mark
        return True

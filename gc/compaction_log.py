"""The target of a compaction while it is written: ``<target>.log.compacting`` (blocking file I/O for worker
threads; BookKeeper's ``TransactionalEntryLogCompactor``, docs/upstream.md, BookKeeper §6).

The file is an entry log like any other once finished: the header, whole records copied verbatim (a record is
position independent), the ledgers map, and the header rewritten to point at it, all fdatasynced. Nothing in
the index points at it until the compaction commits (its manifest, written by the engine, is the commit
point); without a manifest, the engine's recovery deletes it
(``bookkeeper/bookie/storage/compaction_files.py`` says what the files mean).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from magnetar.bookkeeper.bookie.storage.gc_seam import (
    HEADER_BYTES,
    compacting_name,
    encode_header,
    encode_ledgers_map,
    remove_file,
)


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

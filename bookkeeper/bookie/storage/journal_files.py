"""Journal files on disk: creation, preallocation, write + fdatasync, rolling, replay reading, deletion.

BookKeeper's ``JournalChannel`` and the replay half of ``Journal`` (docs/upstream.md, BookKeeper §5.1). Every
method here blocks on file I/O and is called from a worker thread, one call at a time (the journal's writer
task and the checkpoint serialise them).

* **Writing.** A process never appends to a file it did not create: each start opens a new file, so a torn
  tail left by a crash stays where replay already stops. The file is created with its header, extended by
  ``journal_preallocate_bytes`` at a time (``posix_fallocate``, ``ftruncate`` where unsupported) so that most
  fdatasyncs need not update the file size, and rolled to the next id beyond ``journal_file_bytes_max``.
  After a failed write or sync the file is abandoned (its state after a failed fsync is unknowable: the
  "fsyncgate" lesson) and the next batch goes to a new file.
* **Replay.** Files are read from the mark in chunks of ``journal_replay_read_bytes``. A file whose header is
  invalid was never written past creation (headers are synced before any record) and is skipped; a record
  that is torn, corrupt or the start of the preallocated zeros ends that file's replay with one log line,
  and replay continues with the next file (a later file was created after that tail was abandoned).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from magnetar.bookkeeper.bookie.storage.journal_format import (
    HEADER_BYTES,
    JournalFormatError,
    StopReason,
    check_appended,
    decode_header,
    decode_records,
    encode_header,
)
from magnetar.bookkeeper.bookie.storage.log_mark import LogMark, fsync_dir
from magnetar.bookkeeper.runtime import IOV_MAX, Buffer, rest_after

log = logging.getLogger(__name__)

SUFFIX = ".txn"


def journal_file_name(file_id: int) -> str:
    return f"{file_id:016x}{SUFFIX}"


def list_journal_ids(directory: Path) -> list[int]:
    ids = []
    for path in directory.glob(f"*{SUFFIX}"):
        try:
            ids.append(int(path.stem, 16))
        except ValueError:
            log.warning("ignoring stray file %s in the journal directory", path)
    return sorted(ids)


def delete_journals_before(directory: Path, mark: LogMark, keep_backups: int) -> list[int]:
    """Delete journal files older than the mark's file, except the newest ``keep_backups`` of them."""
    older = [i for i in list_journal_ids(directory) if i < mark.file_id]
    doomed = older[: max(0, len(older) - keep_backups)]
    for file_id in doomed:
        (directory / journal_file_name(file_id)).unlink(missing_ok=True)
    if doomed:
        fsync_dir(directory)
    return doomed


def write_parts(fd: int, parts: Sequence[bytes | bytearray], offset: int) -> int:
    """Write ``parts`` one after another at ``offset`` with ``pwritev`` (short writes resumed); the offset
    after them."""
    pending: list[Buffer] = [part for part in parts if part]
    while pending:
        written = os.pwritev(fd, pending[:IOV_MAX], offset)
        offset += written
        pending = rest_after(pending, written)
    return offset


class JournalWriterFile:
    """The file the journal appends to. ``write_and_sync`` returns the mark after the synced bytes."""

    def __init__(
        self, directory: Path, *, first_file_id: int, file_bytes_max: int, preallocate_bytes: int
    ) -> None:
        self.directory = directory
        self._next_file_id = first_file_id
        self._file_bytes_max = file_bytes_max
        self._preallocate_bytes = preallocate_bytes
        self._fd: int | None = None
        self._file_id = -1
        self._offset = 0
        self._allocated = 0

    @property
    def mark(self) -> LogMark:
        return LogMark(self._file_id, self._offset)

    def open(self) -> LogMark:
        """Create the first file; return the mark at its start (the first synced position)."""
        self._roll()
        return self.mark

    def write_and_sync(self, data: bytes | bytearray | Sequence[bytes | bytearray]) -> LogMark:
        """Append ``data`` - a batch's bytes, or its parts (:class:`~.journal_format.JournalBatch`), written
        with gathered writes so that no part is copied here - and fdatasync it."""
        parts = [data] if isinstance(data, bytes | bytearray) else data
        size = sum(len(part) for part in parts)
        check_appended(parts)  # what replay will check, checked before it is written
        if self._fd is None or (self._offset > HEADER_BYTES and self._offset + size > self._file_bytes_max):
            self._roll()
        fd = self._fd
        assert fd is not None
        try:
            self._ensure_allocated(fd, self._offset + size)
            offset = write_parts(fd, parts, self._offset)
            os.fdatasync(fd)
        except OSError:
            self._abandon()
            raise
        self._offset = offset
        return self.mark

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _roll(self) -> None:
        self.close()
        file_id = self._next_file_id
        self._next_file_id += 1
        path = self.directory / journal_file_name(file_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            self._allocated = 0
            self._ensure_allocated(fd, HEADER_BYTES)
            os.pwrite(fd, encode_header(file_id), 0)
            os.fdatasync(fd)
            fsync_dir(self.directory)
        except OSError:
            os.close(fd)
            raise
        self._fd, self._file_id, self._offset = fd, file_id, HEADER_BYTES
        log.debug("journal file %s opened", path.name)

    def _ensure_allocated(self, fd: int, end: int) -> None:
        if end <= self._allocated:
            return
        target = max(end, self._allocated + self._preallocate_bytes)
        try:
            os.posix_fallocate(fd, self._allocated, target - self._allocated)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            os.ftruncate(fd, target)
        self._allocated = target

    def _abandon(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                log.warning("closing abandoned journal file %x failed", self._file_id)
            self._fd = None
        log.error(
            "journal file %x abandoned after a failed write; the next batch opens a new file", self._file_id
        )


class JournalMissingError(Exception):
    """The journal file named by the persisted mark does not exist: replay cannot be trusted."""


@dataclass(frozen=True, slots=True)
class ReplayBatch:
    records: list[tuple[int, bytes]]
    mark: LogMark
    """The position just after the last record of the batch."""


class JournalReplayReader:
    """Reads the journal from a mark, one chunk per :meth:`read_batch` call (blocking)."""

    def __init__(
        self, directory: Path, start: LogMark | None, *, chunk_bytes: int, record_bytes_max: int
    ) -> None:
        ids = list_journal_ids(directory)
        if start is not None:
            if start.file_id not in ids:
                raise JournalMissingError(
                    f"journal file {journal_file_name(start.file_id)} named by the mark {start} is missing"
                )
            ids = [i for i in ids if i >= start.file_id]
        self.directory = directory
        self._pending = ids
        self._start = start
        self._chunk_bytes = chunk_bytes
        self._record_bytes_max = record_bytes_max
        self._fd: int | None = None
        self._file_id = -1
        self._file_size = 0
        self._read_pos = 0
        self._buf = b""
        self._buf_pos = 0
        self.stops: list[tuple[LogMark, StopReason]] = []
        """Where a file's replay ended early (torn or corrupt record), for tests and operators."""

    def read_batch(self) -> ReplayBatch | None:
        """The next records, or None when every file has been read."""
        while True:
            if self._fd is None and not self._open_next():
                return None
            batch = self._read_chunk()
            if batch is not None:
                return batch

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open_next(self) -> bool:
        while self._pending:
            file_id = self._pending.pop(0)
            path = self.directory / journal_file_name(file_id)
            fd = os.open(path, os.O_RDONLY)
            try:
                decode_header(os.pread(fd, HEADER_BYTES, 0), file_id)
            except JournalFormatError as exc:
                os.close(fd)
                log.warning("journal file %s skipped: %s", path.name, exc)
                continue
            start = HEADER_BYTES
            if self._start is not None and file_id == self._start.file_id:
                start = max(HEADER_BYTES, self._start.offset)
            self._fd, self._file_id = fd, file_id
            self._file_size = os.fstat(fd).st_size
            self._read_pos, self._buf, self._buf_pos = start, b"", 0
            return True
        return False

    def _read_chunk(self) -> ReplayBatch | None:
        assert self._fd is not None
        chunk = os.pread(self._fd, self._chunk_bytes, self._read_pos)
        self._read_pos += len(chunk)
        buf = self._buf[self._buf_pos :] + chunk if self._buf_pos < len(self._buf) else chunk
        base = self._read_pos - len(buf)  # file offset of buf[0]
        final = not chunk or self._read_pos >= self._file_size
        decoded = decode_records(buf, 0, final=final, length_max=self._record_bytes_max)
        self._buf, self._buf_pos = buf, decoded.end
        mark = LogMark(self._file_id, base + decoded.end)
        if decoded.stop is not None or final:
            self._finish_file(mark, decoded.stop)
        if not decoded.records:
            return None
        return ReplayBatch(decoded.records, mark)

    def _finish_file(self, mark: LogMark, stop: StopReason | None) -> None:
        name = journal_file_name(mark.file_id)
        if stop is StopReason.TORN or stop is StopReason.CORRUPT:
            self.stops.append((mark, stop))
            log.warning("journal replay of %s stopped at offset %d: %s", name, mark.offset, stop.value)
        else:
            log.debug("journal replay of %s ended at offset %d", name, mark.offset)
        self.close()

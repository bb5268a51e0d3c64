"""Entry logs on disk: the current log being written, reads by location, ledgers maps and scans.

BookKeeper's ``DefaultEntryLogger`` (docs/upstream.md, BookKeeper §5.2). Logs are written only by checkpoints
(and, later, the compactor), which the engine serialises: the checkpoint packs records with
:mod:`.entry_log_format` on the trio thread, reserving offsets in the current log, and then calls
:meth:`EntryLogger.write` and :meth:`EntryLogger.flush` from a worker thread. Entries become reachable through
the index only after the log was flushed (fdatasync), so the index never points at bytes that a crash could
lose.

Each process start writes a new log (a log a crash interrupted keeps its torn tail, where scans stop).
Ids only grow: the last id used is persisted (``lastId``) because garbage collection may delete the newest
logs, and an id must never be reused while something could still refer to it.

Reads (``read``, ``read_run``) are blocking ``pread`` calls on cached read descriptors; they serve the
engine's read path on the trio thread, as BookKeeper's read threads do, and the page cache makes most of
them cheap. Every failure to read what the index points at is a :class:`StorageIOError` - never "no entry".
Functions GC will call (blocking, from a worker thread): :meth:`EntryLogger.log_ids`,
:meth:`EntryLogger.ledgers_map`, :meth:`EntryLogger.scan`, :meth:`EntryLogger.ledger_usage`; deleting a log
goes through the engine (``DbLedgerStorage.delete_entry_log``), which closes its read descriptor first.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import crc32c

from magnetar.bookkeeper.bookie.storage.entry_log_format import (
    HEADER_BYTES,
    IDS,
    IDS_BYTES,
    RECORD_HEADER,
    RECORD_HEADER_BYTES,
    EntryLogFormatError,
    ScannedEntry,
    ScanStop,
    decode_header,
    decode_ledgers_map,
    decode_record,
    encode_header,
    encode_ledgers_map,
    scan_records,
    split_location,
)
from magnetar.bookkeeper.bookie.storage.errors import StorageIOError
from magnetar.bookkeeper.bookie.storage.log_mark import fsync_dir, write_file_durably

log = logging.getLogger(__name__)

SUFFIX = ".log"
LAST_ID_FILE = "lastId"
_FIRST_READ_BYTES = 4096
_SCAN_CHUNK_BYTES = 4 * 1024 * 1024


def log_file_name(log_id: int) -> str:
    return f"{log_id:08x}{SUFFIX}"


def _describe(ledger_id: int, entry_id: int, loc: int) -> str:
    log_id, offset = split_location(loc)
    return f"entry {ledger_id}:{entry_id} at {log_file_name(log_id)}+{offset}"


class CurrentLog:
    """The log being written: its id, the next write offset and the bytes each ledger holds in it."""

    def __init__(self, log_id: int, fd: int) -> None:
        self.log_id = log_id
        self.fd = fd
        self.offset = HEADER_BYTES
        self.usage: dict[int, int] = {}


class EntryLogger:
    def __init__(self, directory: Path, *, bytes_max: int, open_files_max: int, entry_bytes_max: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.bytes_max = bytes_max
        self._open_files_max = open_files_max
        self._entry_bytes_max = entry_bytes_max
        ids = self._list_ids()
        self._last_id = max([self._read_last_id(), *ids])
        self._ids = set(ids)
        self.current: CurrentLog | None = None
        self._readers: OrderedDict[int, int] = OrderedDict()

    @property
    def last_id(self) -> int:
        """The highest log id ever used (persisted: ids are never reused)."""
        return self._last_id

    # -- writing (worker thread, serialised by the engine) ----------------------------------------------

    def start_log(self) -> CurrentLog:
        """Create the next log (header synced, id persisted) and make it current."""
        log_id = self._last_id + 1
        path = self.directory / log_file_name(log_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.pwrite(fd, encode_header(), 0)
            os.fdatasync(fd)
            write_file_durably(self.directory / LAST_ID_FILE, f"{log_id:x}\n".encode())
        except OSError:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        self._last_id = log_id
        self._ids.add(log_id)
        self.current = CurrentLog(log_id, fd)
        log.debug("entry log %s started", path.name)
        return self.current

    def allocate_log_id(self) -> int:
        """Reserve the next log id durably without starting a log (a compaction log takes it)."""
        log_id = self._last_id + 1
        write_file_durably(self.directory / LAST_ID_FILE, f"{log_id:x}\n".encode())
        self._last_id = log_id
        return log_id

    def add_log_id(self, log_id: int) -> None:
        """A log written outside this logger (compaction) became visible as ``<id>.log``."""
        self._ids.add(log_id)

    def write(self, data: bytes | bytearray) -> None:
        """Append ``data`` (records packed for the current offset) to the current log, unsynced."""
        current = self.current
        assert current is not None, "no current entry log"
        view = memoryview(data)
        offset = current.offset
        while view:
            written = os.pwrite(current.fd, view, offset)
            offset += written
            view = view[written:]
        current.offset = offset

    def flush(self) -> None:
        """fdatasync the current log: everything written so far is durable."""
        if self.current is not None:
            os.fdatasync(self.current.fd)

    def roll(self) -> CurrentLog:
        """Close the current log with its ledgers map (synced, then the header) and start the next."""
        current = self.current
        if current is not None:
            map_record = encode_ledgers_map(current.usage)
            os.pwrite(current.fd, map_record, current.offset)
            os.fdatasync(current.fd)
            os.pwrite(current.fd, encode_header(current.offset, len(current.usage)), 0)
            os.fdatasync(current.fd)
            os.close(current.fd)
            self.current = None
            log.info(
                "entry log %s closed: %d bytes, %d ledgers",
                log_file_name(current.log_id),
                current.offset,
                len(current.usage),
            )
        return self.start_log()

    def abandon_current(self) -> None:
        """Stop writing the current log after a failed write: its tail is uncertain, the next is fresh."""
        current, self.current = self.current, None
        if current is not None:
            try:
                os.close(current.fd)
            except OSError:
                log.warning("closing abandoned entry log %s failed", log_file_name(current.log_id))
            log.error("entry log %s abandoned after a failed write", log_file_name(current.log_id))

    def close(self) -> None:
        if self.current is not None:
            os.close(self.current.fd)
            self.current = None
        for fd in self._readers.values():
            os.close(fd)
        self._readers.clear()

    # -- reading (trio thread: blocking pread, usually from the page cache) -----------------------------

    def read(self, loc: int, ledger_id: int, entry_id: int) -> bytes:
        """The packaged entry stored at ``loc``, checked to be whole and to be ``ledger_id:entry_id``."""
        data, _ = self._read_first(loc, ledger_id, entry_id, _FIRST_READ_BYTES)
        return data

    def read_run(
        self, loc: int, ledger_id: int, entry_id: int, *, entries_max: int, bytes_max: int
    ) -> tuple[bytes, list[tuple[int, bytes]]]:
        """The entry at ``loc`` plus up to ``entries_max`` whole records following it that belong to the
        same ledger (read-ahead for catch-up readers), all from one read of at most ``bytes_max`` bytes."""
        data, (chunk, pos) = self._read_first(loc, ledger_id, entry_id, bytes_max)
        following: list[tuple[int, bytes]] = []
        # decode_record, inlined: this loop runs once per entry a catch-up reader gets.
        unpack_head, unpack_ids, crc = RECORD_HEADER.unpack_from, IDS.unpack_from, crc32c.crc32c
        size_chunk = len(chunk)
        while len(following) < entries_max and pos + RECORD_HEADER_BYTES <= size_chunk:
            size, expected = unpack_head(chunk, pos)
            end = pos + RECORD_HEADER_BYTES + size
            if size < IDS_BYTES or end > size_chunk:
                break
            record = chunk[pos + RECORD_HEADER_BYTES : end]
            if crc(record, size) != expected:
                break
            other_ledger, other_entry = unpack_ids(record)
            if other_ledger != ledger_id:
                break
            following.append((other_entry, record))
            pos = end
        return data, following

    def _read_first(
        self, loc: int, ledger_id: int, entry_id: int, read_bytes: int
    ) -> tuple[bytes, tuple[bytes, int]]:
        log_id, offset = split_location(loc)
        try:
            fd = self._reader(log_id)
            chunk = os.pread(fd, read_bytes, offset)
            decoded = decode_record(chunk, 0)
            if decoded is None:
                if len(chunk) < RECORD_HEADER_BYTES:
                    raise EntryLogFormatError("the log ends before the record")
                size = RECORD_HEADER.unpack_from(chunk)[0]
                if size > self._entry_bytes_max:
                    raise EntryLogFormatError(f"record size {size} is beyond entry_bytes_max")
                chunk = os.pread(fd, RECORD_HEADER_BYTES + size, offset)
                decoded = decode_record(chunk, 0)
                if decoded is None:
                    raise EntryLogFormatError("the log ends inside the record (truncated)")
        except (OSError, EntryLogFormatError) as exc:
            what = _describe(ledger_id, entry_id, loc)
            log.error("cannot read %s: %s", what, exc)
            raise StorageIOError(f"cannot read {what}: {exc}") from exc
        data, end = decoded
        if IDS.unpack_from(data) != (ledger_id, entry_id):
            what = _describe(ledger_id, entry_id, loc)
            log.error("%s holds %d:%d instead", what, *IDS.unpack_from(data))
            raise StorageIOError(f"{what} holds another entry (index and log disagree)")
        return data, (chunk, end)

    def _reader(self, log_id: int) -> int:
        fd = self._readers.get(log_id)
        if fd is not None:
            self._readers.move_to_end(log_id)
            return fd
        fd = os.open(self.directory / log_file_name(log_id), os.O_RDONLY)
        self._readers[log_id] = fd
        if len(self._readers) > self._open_files_max:
            _, oldest = self._readers.popitem(last=False)
            os.close(oldest)
        return fd

    # -- what garbage collection uses (blocking: call from a worker thread) ------------------------------

    def log_ids(self) -> list[int]:
        """Ids of the logs on disk, ascending, except the one being written (GC must leave it alone)."""
        current = self.current.log_id if self.current is not None else None
        ids = list(self._ids)  # one C-level copy: a checkpoint's thread may add a log meanwhile
        return sorted(i for i in ids if i != current)

    def ledgers_map(self, log_id: int) -> dict[int, int] | None:
        """``ledgerId -> bytes`` from the log's ledgers map; None if it has none (use :meth:`scan`)."""
        path = self.directory / log_file_name(log_id)
        try:
            with path.open("rb") as f:
                header = decode_header(f.read(HEADER_BYTES))
                if header.map_offset == 0:
                    return None
                f.seek(header.map_offset)
                head = f.read(RECORD_HEADER_BYTES)
                if len(head) < RECORD_HEADER_BYTES:
                    raise EntryLogFormatError("the ledgers map lies beyond the end of the log")
                size = RECORD_HEADER.unpack(head)[0]
                decoded = decode_record(head + f.read(size), 0)
            if decoded is None:
                raise EntryLogFormatError("the ledgers map is cut short")
            usage = decode_ledgers_map(decoded[0])
        except (OSError, EntryLogFormatError) as exc:
            log.warning("ledgers map of %s unusable (%s); scan the log instead", path.name, exc)
            return None
        if len(usage) != header.map_count:
            log.warning("ledgers map of %s disagrees with its header; scan the log instead", path.name)
            return None
        return usage

    def scan(self, log_id: int) -> Iterator[ScannedEntry]:
        """Every whole entry record of the log, in file order; stops at a torn or corrupt record."""
        path = self.directory / log_file_name(log_id)
        with path.open("rb") as f:
            f.seek(HEADER_BYTES)
            base, buf, pos = HEADER_BYTES, b"", 0
            while True:
                chunk = f.read(_SCAN_CHUNK_BYTES)
                buf = buf[pos:] + chunk
                base += pos
                result = scan_records(
                    buf, 0, base, final=not chunk, size_max=self._entry_bytes_max + RECORD_HEADER_BYTES
                )
                yield from result.entries
                pos = result.end
                if result.stop is not None:
                    if result.stop in (ScanStop.TORN, ScanStop.CORRUPT):
                        log.warning(
                            "scan of %s stopped at offset %d: %s", path.name, base + pos, result.stop.value
                        )
                    return

    def ledger_usage(self, log_id: int) -> dict[int, int]:
        """``ledgerId -> bytes`` held in the log: the ledgers map, or a scan when there is none."""
        usage = self.ledgers_map(log_id)
        if usage is not None:
            return usage
        usage = {}
        for entry in self.scan(log_id):
            usage[entry.ledger_id] = usage.get(entry.ledger_id, 0) + entry.record_bytes
        return usage

    def forget_log(self, log_id: int) -> None:
        """Stop reading a log about to be deleted: close its read descriptor (trio thread, like reads)."""
        if self.current is not None and log_id == self.current.log_id:
            raise ValueError(f"entry log {log_id:x} is being written")
        self._ids.discard(log_id)
        fd = self._readers.pop(log_id, None)
        if fd is not None:
            os.close(fd)

    def delete_log_file(self, log_id: int) -> None:
        """Unlink a forgotten log durably (blocking; after :meth:`forget_log`)."""
        (self.directory / log_file_name(log_id)).unlink(missing_ok=True)
        fsync_dir(self.directory)

    def delete_log(self, log_id: int) -> None:
        """Both steps at once, for single-threaded callers (tools, tests); the engine's
        ``delete_entry_log`` splits them between the trio thread and a worker thread."""
        self.forget_log(log_id)
        self.delete_log_file(log_id)

    # -- helpers ----------------------------------------------------------------------------------------

    def _list_ids(self) -> list[int]:
        ids = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            try:
                ids.append(int(path.stem, 16))
            except ValueError:
                log.warning("ignoring stray file %s in the entry-log directory", path)
        return ids

    def _read_last_id(self) -> int:
        try:
            return int((self.directory / LAST_ID_FILE).read_text().strip(), 16)
        except FileNotFoundError:
            return 0
        except ValueError:
            log.warning("%s is damaged; the next entry log id follows the logs on disk", LAST_ID_FILE)
            return 0

"""Opening the disk engine's files, without trio: the lock probe, the RocksDB index and its ledger records,
the entry logger, the log mark and the journal writer, and the disk-usage probe.

:func:`open_parts` runs in a worker thread when :func:`~.engine.open_ledger_store` opens the engine; what it
returns (:class:`EngineParts`) the engine takes over and closes. :func:`check_not_in_use` is a probe for
checks that must run before the engine opens (the bookie's identity check).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from magnetar.bookkeeper.bookie.storage.entry_index import (
    EntryIndex,
    EntryRange,
    IndexFormatError,
    decode_ledger_record,
)
from magnetar.bookkeeper.bookie.storage.entry_log import EntryLogger
from magnetar.bookkeeper.bookie.storage.errors import StorageInUseError, StorageIOError
from magnetar.bookkeeper.bookie.storage.journal_files import JournalWriterFile, list_journal_ids
from magnetar.bookkeeper.bookie.storage.ledger_store import DiskUsage, LedgerState
from magnetar.bookkeeper.bookie.storage.log_mark import MarkFile
from magnetar.bookkeeper.bookie.storage.settings import BookieStorageSettings

__all__ = ["DiskProbe", "EngineParts", "check_not_in_use", "open_parts", "statvfs_probe"]

DiskProbe = Callable[[Path], DiskUsage]
"""Total and free bytes of the file system holding a path (a test injects a full disk)."""


def statvfs_probe(path: Path) -> DiskUsage:
    """Total and available bytes of the file system holding ``path``."""
    st = os.statvfs(path)
    return DiskUsage(total_bytes=st.f_blocks * st.f_frsize, free_bytes=st.f_bavail * st.f_frsize)


@dataclass(slots=True)
class EngineParts:
    """What :func:`open_parts` opened and loaded, for the engine to take over."""

    index: EntryIndex
    entry_logger: EntryLogger
    mark_file: MarkFile
    journal_writer: JournalWriterFile
    states: dict[int, LedgerState]
    ranges: dict[int, EntryRange]


def check_not_in_use(settings: BookieStorageSettings) -> None:
    """Raise :class:`StorageInUseError` when another process has this engine open (it holds the POSIX lock
    RocksDB takes on the index's ``LOCK`` file). A probe, for checks that must run before the engine opens -
    the bookie's identity check would otherwise report another running bookie's directory as a mismatched
    cookie. It must not run in a process that has the engine open: closing the probe's descriptor would drop
    that process's own lock (POSIX locks belong to the process, not the descriptor)."""
    lock_path = settings.index_path / "LOCK"
    try:
        fd = os.open(lock_path, os.O_RDWR)
    except FileNotFoundError:
        return  # never opened: nobody holds it
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        raise StorageInUseError(
            f"bookie data directory {settings.data_dir} is held by another process "
            f"(the lock on {lock_path}: {exc.strerror})"
        ) from None
    finally:
        os.close(fd)


def open_parts(settings: BookieStorageSettings) -> EngineParts:
    """Open the index, the entry logger and the mark, and load every ledger record (blocking)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.journal_path.mkdir(parents=True, exist_ok=True)
    try:
        index = EntryIndex(settings.index_path)
    except Exception as exc:  # rocksdict raises plain Exceptions; RocksDB locks its directory
        if "lock" in str(exc).lower():
            raise StorageInUseError(
                f"bookie data directory {settings.data_dir} is held by another process "
                f"(RocksDB LOCK of {settings.index_path}): {exc}"
            ) from exc
        raise
    try:
        states: dict[int, LedgerState] = {}
        ranges: dict[int, EntryRange] = {}
        for ledger_id, raw in index.load_ledgers():
            try:
                record = decode_ledger_record(raw)
            except IndexFormatError as exc:
                raise StorageIOError(f"index record of ledger {ledger_id} is damaged: {exc}") from exc
            states[ledger_id] = record.state
            if record.entries is not None:
                ranges[ledger_id] = record.entries
        entry_logger = EntryLogger(
            settings.entry_log_path,
            bytes_max=settings.entry_log_bytes_max,
            open_files_max=settings.entry_log_open_files_max,
            entry_bytes_max=settings.entry_bytes_max,
        )
        journal_ids = list_journal_ids(settings.journal_path)
        writer = JournalWriterFile(
            settings.journal_path,
            first_file_id=(journal_ids[-1] + 1) if journal_ids else 1,
            file_bytes_max=settings.journal_file_bytes_max,
            preallocate_bytes=settings.journal_preallocate_bytes,
        )
        return EngineParts(index, entry_logger, MarkFile(settings.mark_path), writer, states, ranges)
    except BaseException:
        index.close()
        raise

"""The bookie layer's exceptions. Each carries the bookie status code it becomes on the wire."""

from __future__ import annotations

from magnetar.bookkeeper.protocol import BookieStatus


class BookieError(Exception):
    status: BookieStatus = BookieStatus.EIO


class NoLedgerError(BookieError):
    """The bookie has no record of the ledger."""

    status = BookieStatus.ENOLEDGER


class NoEntryError(BookieError):
    """The ledger exists here but this entry was never written to this bookie.

    Only raise this when the bookie *knows* the entry is absent. Data that should exist but cannot be read
    is a :class:`StorageIOError` (invariant 8 of docs/architecture.md §3: a false "no entry" can truncate
    acked data).
    """

    status = BookieStatus.ENOENTRY


class StorageIOError(BookieError):
    """A read or write failed (I/O error, corrupt record, checksum mismatch, missing index entry)."""

    status = BookieStatus.EIO


class StorageInUseError(StorageIOError):
    """The data directory is held by another process (its index's RocksDB ``LOCK``): another bookie runs on
    it. One directory, one bookie: two engines writing the same entry logs and index would corrupt both."""


class DiskFullError(BookieError):
    """The disk is over its usage threshold; normal adds are refused (the bookie goes read-only)."""

    status = BookieStatus.EREADONLY


class StorageClosedError(BookieError):
    status = BookieStatus.EIO


class StorageBusyError(BookieError):
    """The storage engine's bounded buffers are full (journal queue or write cache); retry later.

    BookKeeper's ``OperationRejectedException`` when the write cache stays full; on the wire it is
    ETOOMANYREQUESTS. Callers that prefer to wait can await the engine's capacity before adding.
    """

    status = BookieStatus.ETOOMANYREQUESTS


class LedgerFencedError(BookieError):
    """The ledger was fenced while the add waited for room in the write cache (EFENCED): the writer was
    never acknowledged, and a recovery that fenced the ledger must not meet the entry later."""

    status = BookieStatus.EFENCED

"""The contract between the bookie's request logic (:mod:`..core`) and a ledger storage engine.

Two implementations exist: the disk engine (journal + entry logs + RocksDB index, :mod:`.engine`) and the
in-memory store used by the deterministic simulation (``tests/sim``), which can lose unsynced state on a
simulated crash.

Durability is reported through callbacks, because many writes share one journal fsync (group commit):
``add_entry``, ``create_ledger``, ``fence`` and ``set_explicit_lac`` apply their change so that it is visible
to reads and checks *immediately*, and call ``on_durable(None)`` once the change is on stable storage, or
``on_durable(exc)`` if it can never be made durable. Callbacks run on the caller's thread (the trio thread for
the bookie server) and must not raise or block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

DurableCallback = Callable[[BaseException | None], None]


@dataclass(frozen=True, slots=True)
class LedgerState:
    master_key: bytes
    fenced: bool
    explicit_lac_body: bytes | None = None


@dataclass(frozen=True, slots=True)
class DiskUsage:
    total_bytes: int
    free_bytes: int

    @property
    def used_fraction(self) -> float:
        return 0.0 if self.total_bytes <= 0 else 1.0 - self.free_bytes / self.total_bytes


class LedgerStore(Protocol):
    def ledger_state(self, ledger_id: int) -> LedgerState | None:
        """The ledger's record, or None if this bookie has never seen the ledger."""
        ...

    def create_ledger(self, ledger_id: int, master_key: bytes, on_durable: DurableCallback) -> None:
        """Record the ledger with its master key (journaled). Idempotent for the same key."""
        ...

    def begin_burst(self) -> None:
        """The changes until :meth:`end_burst` come in one go (the requests of one read of a connection, with
        no ``await`` in between): durability work may wait for the end of the burst."""
        ...

    def end_burst(self) -> None:
        """The burst is over: make its changes durable, or start doing so. May call ``on_durable`` callbacks
        of the burst's changes before it returns."""
        ...

    def add_entry(self, ledger_id: int, entry_id: int, body: bytes, on_durable: DurableCallback) -> None:
        """Store a packaged entry (readable at once; durable at ``on_durable(None)``).

        Re-adding an entry that exists replaces it (recovery re-writes identical bytes). Raises
        :class:`~..errors.DiskFullError` or :class:`~..errors.StorageIOError` when it cannot accept the write.
        """
        ...

    def fence(self, ledger_id: int, on_durable: DurableCallback) -> None:
        """Mark the ledger fenced: effective for checks at once, durable at ``on_durable(None)``."""
        ...

    def set_explicit_lac(self, ledger_id: int, body: bytes, on_durable: DurableCallback) -> None: ...

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        """The packaged entry; ``entry_id == -1`` reads the last entry stored for the ledger.

        Raises :class:`~..errors.NoLedgerError`, :class:`~..errors.NoEntryError` (known absent) or
        :class:`~..errors.StorageIOError` (cannot tell - never reported as absent).
        """
        ...

    def delete_ledger(self, ledger_id: int) -> None:
        """Forget the ledger: its index entries go now; its bytes are reclaimed by garbage collection."""
        ...

    def ledgers(self) -> Iterable[int]:
        """Ids of the ledgers this bookie stores, ascending."""
        ...

    def disk_usage(self) -> DiskUsage:
        """The ledger directory's file system (entry logs and index)."""
        ...

    def journal_disk_usage(self) -> DiskUsage:
        """The journal directory's file system (the same as :meth:`disk_usage` unless it has its own)."""
        ...

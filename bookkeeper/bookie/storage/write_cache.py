"""The write cache: entries added since the last checkpoint, double-buffered (DbLedgerStorage,
docs/upstream.md, BookKeeper §5.3).

BookKeeper keeps two write caches of half the configured size: adds go to the *active* one; a checkpoint
swaps them and writes the full one (*flushing*) to the entry log while adds continue into the fresh one.
Both are searched by reads, which is how tailing readers see an entry the moment it was added.

A cache holds the packaged entries by reference (no copy) in one dict per ledger, and counts its size as
the entries' bytes plus :data:`ENTRY_OVERHEAD_BYTES` each - an estimate of the Python objects that hold
them - so that ``write_cache_bytes_max`` bounds real memory, not just payload bytes. When the active half is
full and the other half is still being flushed, adds wait for the flush (at most ``write_throttle_ms_max``,
BookKeeper's ``dbStorage_maxThrottleTimeMs``), then the engine refuses them (StorageBusyError).

Everything here runs on the trio thread. The flushing half is never modified: deleting a ledger while it is
being flushed is the engine's business (it re-deletes the ledger's index range after the flush).
"""

from __future__ import annotations

from collections.abc import Iterator

ENTRY_OVERHEAD_BYTES = 96
"""Estimated bytes of Python objects per cached entry (bytes header, int key, dict slot)."""


class WriteCache:
    """One half: ``ledgerId -> {entryId: packaged entry}`` plus the highest entry id of each ledger."""

    __slots__ = ("bytes", "count", "last_entry", "ledgers")

    def __init__(self) -> None:
        self.ledgers: dict[int, dict[int, bytes]] = {}
        self.last_entry: dict[int, int] = {}
        self.bytes = 0
        self.count = 0

    def put(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        entries = self.ledgers.get(ledger_id)
        if entries is None:
            entries = self.ledgers[ledger_id] = {}
            self.last_entry[ledger_id] = entry_id
        elif entry_id > self.last_entry[ledger_id]:
            self.last_entry[ledger_id] = entry_id
        old = entries.get(entry_id)
        entries[entry_id] = body
        if old is None:
            self.bytes += len(body) + ENTRY_OVERHEAD_BYTES
            self.count += 1
        else:
            self.bytes += len(body) - len(old)

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        entries = self.ledgers.get(ledger_id)
        return None if entries is None else entries.get(entry_id)

    def drop_ledger(self, ledger_id: int) -> None:
        entries = self.ledgers.pop(ledger_id, None)
        self.last_entry.pop(ledger_id, None)
        if entries:
            self.bytes -= sum(len(body) for body in entries.values()) + ENTRY_OVERHEAD_BYTES * len(entries)
            self.count -= len(entries)

    def sorted_ledgers(self) -> list[int]:
        return sorted(self.ledgers)

    def sorted_entries(self, ledger_id: int) -> Iterator[tuple[int, bytes]]:
        entries = self.ledgers[ledger_id]
        for entry_id in sorted(entries):
            yield entry_id, entries[entry_id]


class DoubleWriteCache:
    """The active and flushing halves, each bounded by half of ``write_cache_bytes_max``."""

    __slots__ = ("active", "flushing", "half_bytes_max")

    def __init__(self, bytes_max: int) -> None:
        self.half_bytes_max = bytes_max // 2
        self.active = WriteCache()
        self.flushing: WriteCache | None = None

    def has_room(self, size: int) -> bool:
        """Whether an entry of ``size`` bytes fits the active half."""
        return self.active.bytes + size + ENTRY_OVERHEAD_BYTES <= self.half_bytes_max

    def swap(self) -> WriteCache:
        """Make the active half the flushing one (the previous flush must have completed)."""
        assert self.flushing is None, "a write cache is still being flushed"
        self.flushing, self.active = self.active, WriteCache()
        return self.flushing

    def flushed(self) -> None:
        self.flushing = None

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        body = self.active.get(ledger_id, entry_id)
        if body is None and self.flushing is not None:
            body = self.flushing.get(ledger_id, entry_id)
        return body

    def last_entry(self, ledger_id: int) -> int | None:
        """The highest entry id of the ledger in either half."""
        last = self.active.last_entry.get(ledger_id)
        if self.flushing is not None:
            other = self.flushing.last_entry.get(ledger_id)
            if other is not None and (last is None or other > last):
                last = other
        return last

    @property
    def bytes(self) -> int:
        return self.active.bytes + (self.flushing.bytes if self.flushing is not None else 0)

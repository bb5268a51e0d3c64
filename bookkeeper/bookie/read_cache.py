"""The read cache: entries read from entry logs, plus the ones read ahead (DbLedgerStorage, §5.3).

A catch-up reader asks for entry after entry of a ledger that is no longer in the write cache. On a miss
the engine reads the entry *and* the records that follow it in the same entry log while they belong to the
same ledger (``read_ahead_entries``, one bounded ``pread``); because checkpoints write entries sorted by
(ledger, entry), those are the reader's next entries, and the next reads are served from here.

Bounded by ``read_cache_bytes_max`` (entry bytes plus an estimate of per-entry object overhead), evicting
the oldest insertions first. BookKeeper uses a ring of segments; an ordered dict gives the same FIFO order
with O(1) eviction of single entries. Entries re-added (recovery) are dropped from here by the engine so a
stale copy is never served. Runs on the trio thread only.
"""

from __future__ import annotations

from collections import OrderedDict

from magnetar.bookkeeper.bookie.write_cache import ENTRY_OVERHEAD_BYTES


class ReadCache:
    __slots__ = ("_entries", "bytes", "bytes_max")

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self.bytes = 0
        self._entries: OrderedDict[tuple[int, int], bytes] = OrderedDict()

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        return self._entries.get((ledger_id, entry_id))

    def put(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        size = len(body) + ENTRY_OVERHEAD_BYTES
        if size > self.bytes_max:
            return
        entries = self._entries
        key = (ledger_id, entry_id)
        old = entries.pop(key, None)
        if old is not None:
            self.bytes -= len(old) + ENTRY_OVERHEAD_BYTES
        entries[key] = body
        self.bytes += size
        while self.bytes > self.bytes_max:
            _, evicted = entries.popitem(last=False)
            self.bytes -= len(evicted) + ENTRY_OVERHEAD_BYTES

    def discard(self, ledger_id: int, entry_id: int) -> None:
        old = self._entries.pop((ledger_id, entry_id), None)
        if old is not None:
            self.bytes -= len(old) + ENTRY_OVERHEAD_BYTES

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

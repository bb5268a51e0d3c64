"""The read cache: entries read from entry logs, plus the ones read ahead (DbLedgerStorage, docs/upstream.md,
BookKeeper §5.3).

A catch-up reader asks for entry after entry of a ledger that is no longer in the write cache. On a miss
the engine reads the entry *and* the records that follow it in the same entry log while they belong to the
same ledger (``read_ahead_entries``, one bounded ``pread``); because checkpoints write entries sorted by
(ledger, entry), those are the reader's next entries, and the next reads are served from here.

Bounded by ``read_cache_bytes_max`` (entry bytes plus an estimate of per-entry object overhead). As in
BookKeeper's ``ReadCache``, the cache is a ring of :data:`SEGMENTS` segments: entries go into the newest
one; when it is full a new segment starts, and when the cache is over its bound the oldest segment is
dropped whole. Inserting is one dict store, eviction costs nothing per entry, and a lookup usually hits the
newest segment first. A key may be present in two segments; the newest copy wins (both hold the same bytes,
because the engine discards an entry from here when a checkpoint writes a re-added copy of it).
Runs on the trio thread only.
"""

from __future__ import annotations

from collections import deque

from magnetar.bookkeeper.bookie.storage.write_cache import ENTRY_OVERHEAD_BYTES

SEGMENTS = 8


class ReadCache:
    __slots__ = ("_newest", "_newest_bytes", "_segment_bytes_max", "_segments", "bytes", "bytes_max")

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self._segment_bytes_max = max(1, bytes_max // SEGMENTS)
        self._newest: dict[tuple[int, int], bytes] = {}
        self._newest_bytes = 0
        self._segments: deque[tuple[dict[tuple[int, int], bytes], int]] = deque()
        """Older, full segments with their sizes, oldest first."""
        self.bytes = 0

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        key = (ledger_id, entry_id)
        body = self._newest.get(key)
        if body is None and self._segments:
            for segment, _ in reversed(self._segments):
                body = segment.get(key)
                if body is not None:
                    break
        return body

    def put(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        self.put_run(ledger_id, [(entry_id, body)])

    def put_run(self, ledger_id: int, entries: list[tuple[int, bytes]]) -> None:
        """Cache entries of one ledger (an entry and what was read ahead after it)."""
        if not self.bytes_max:
            return
        newest = self._newest
        added = 0
        for entry_id, body in entries:
            newest[(ledger_id, entry_id)] = body
            added += len(body) + ENTRY_OVERHEAD_BYTES
        self._newest_bytes += added
        self.bytes += added
        if self._newest_bytes >= self._segment_bytes_max:
            self._segments.append((newest, self._newest_bytes))
            self._newest, self._newest_bytes = {}, 0
        while self.bytes > self.bytes_max and self._segments:
            _, size = self._segments.popleft()
            self.bytes -= size
        if self.bytes > self.bytes_max:  # one run larger than the whole cache
            self.clear()

    def discard(self, ledger_id: int, entry_id: int) -> None:
        """Forget every copy of an entry (its bytes are replaced by a re-add)."""
        key = (ledger_id, entry_id)
        self._newest.pop(key, None)
        for segment, _ in self._segments:
            segment.pop(key, None)

    def clear(self) -> None:
        self._newest, self._newest_bytes = {}, 0
        self._segments.clear()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._newest) + sum(len(segment) for segment, _ in self._segments)

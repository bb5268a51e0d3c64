"""A byte-bounded cache of recently added entries, shared by every managed ledger of a broker.

Tailing cursors (consumers that keep up) read what was just written; serving them from memory avoids a bookie
round trip per read, which is Pulsar's ``EntryCache``. Entries are inserted when their add is acknowledged and
evicted oldest-first (across all managed ledgers) when the byte budget is exceeded; a catch-up reader that
misses the cache reads from the bookies instead. Deleting or trimming a ledger invalidates its entries. The
eviction order is a deque of keys; keys of entries invalidated early are skipped when they reach its head,
and the deque is compacted when such stale keys outnumber live ones, so it stays bounded too.
"""

from __future__ import annotations

from collections import deque

from magnetar.managed_ledger.position import Position


class EntryCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._bytes = 0
        self._count = 0
        self._by_ledger: dict[str, dict[Position, bytes]] = {}
        self._order: deque[tuple[str, Position]] = deque()
        self.hits = 0
        self.misses = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    @property
    def entry_count(self) -> int:
        return self._count

    def put(self, name: str, position: Position, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        entries = self._by_ledger.setdefault(name, {})
        if position in entries:
            return
        entries[position] = data
        self._order.append((name, position))
        self._bytes += len(data)
        self._count += 1
        while self._bytes > self.max_bytes and self._order:
            name_, position_ = self._order.popleft()
            self._remove(name_, position_)
        if len(self._order) > 2 * self._count + 1024:
            self._order = deque((n, p) for n, p in self._order if p in self._by_ledger.get(n, {}))

    def get(self, name: str, position: Position) -> bytes | None:
        entries = self._by_ledger.get(name)
        data = None if entries is None else entries.get(position)
        if data is None:
            self.misses += 1
        else:
            self.hits += 1
        return data

    def invalidate_ledger(self, name: str, ledger_id: int) -> None:
        entries = self._by_ledger.get(name)
        if entries:
            for position in [p for p in entries if p.ledger_id == ledger_id]:
                self._remove(name, position)

    def invalidate_before(self, name: str, position: Position) -> None:
        """Drop entries every cursor has read past (they will not be read from memory again)."""
        entries = self._by_ledger.get(name)
        if entries:
            for stale in [p for p in entries if p < position]:
                self._remove(name, stale)

    def clear(self, name: str) -> None:
        entries = self._by_ledger.get(name)
        if entries:
            for position in list(entries):
                self._remove(name, position)

    def _remove(self, name: str, position: Position) -> None:
        entries = self._by_ledger.get(name)
        if entries is None:
            return
        data = entries.pop(position, None)
        if data is not None:
            self._bytes -= len(data)
            self._count -= 1
        if not entries:
            del self._by_ledger[name]

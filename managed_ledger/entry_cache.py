"""A byte-bounded cache of recently added entries, shared by every managed ledger of a broker.

Tailing cursors (consumers that keep up) read what was just written; serving them from memory avoids a bookie
round trip per read, which is Pulsar's ``EntryCache``. Entries are inserted when their add is acknowledged and
evicted oldest-first (across all managed ledgers) when the byte budget is exceeded; a catch-up reader that
misses the cache reads from the bookies instead. Deleting or trimming a ledger invalidates its entries.

An entry is cached as its writer gave it (the body: the very bytes object, not a copy) with the index of its
first message when the managed ledger stamped one (:mod:`.entry_prefix`); its size counts the prefix too,
as stored. :meth:`EntryCache.get` gives both back.

Layout matters for speed: a cache of a few hundred thousand entries must not give the garbage collector a few
hundred thousand objects to traverse. Entries live in ``name -> ledgerId -> {entryId: bytes}`` dicts whose
keys and values are atomic - or ``(first index, bytes)`` tuples of atomic values, which CPython stops tracking
at the first collection they survive, and the dicts holding them with them - and the eviction order is a deque
of plain
``(name, ledgerId, entryId)`` tuples. Keys of entries invalidated early are skipped when they reach the head
of the deque, and the deque is compacted when such stale keys outnumber live ones, so it stays bounded too.
"""

from __future__ import annotations

from collections import deque

from magnetar.managed_ledger.entry_prefix import SIZE as PREFIX_SIZE
from magnetar.managed_ledger.position import Position

_Cached = bytes | tuple[int, bytes]
"""A body, or a stamped entry's (first index, body)."""


def _size(cached: _Cached) -> int:
    """The stored size: the body's, plus the prefix for a stamped entry."""
    return len(cached) if isinstance(cached, bytes) else len(cached[1]) + PREFIX_SIZE


class EntryCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._bytes = 0
        self._count = 0
        self._by_name: dict[str, dict[int, dict[int, _Cached]]] = {}
        self._order: deque[tuple[str, int, int]] = deque()
        self.hits = 0
        self.misses = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    @property
    def entry_count(self) -> int:
        return self._count

    def put(self, name: str, position: Position, data: bytes, first_index: int | None = None) -> None:
        """Cache the entry at ``position``: its body ``data`` and, when it was stamped with one, the index of
        its first message."""
        size = len(data) if first_index is None else len(data) + PREFIX_SIZE
        if size > self.max_bytes:
            return
        ledgers = self._by_name.get(name)
        if ledgers is None:
            ledgers = self._by_name[name] = {}
        entries = ledgers.get(position.ledger_id)
        if entries is None:
            entries = ledgers[position.ledger_id] = {}
        if position.entry_id in entries:
            return
        entries[position.entry_id] = data if first_index is None else (first_index, data)
        self._order.append((name, position.ledger_id, position.entry_id))
        self._bytes += size
        self._count += 1
        while self._bytes > self.max_bytes and self._order:
            self._remove(*self._order.popleft())
        if len(self._order) > 2 * self._count + 1024:
            self._order = deque(key for key in self._order if self._holds(*key))

    def get(self, name: str, position: Position) -> bytes | None:
        """The body of the entry at ``position`` (None: not cached); see :meth:`get_entry`."""
        cached = self.get_entry(name, position)
        return None if cached is None else cached[1]

    def get_entry(self, name: str, position: Position) -> tuple[int | None, bytes] | None:
        """The entry at ``position``: the index of its first message (None: not stamped) and its body."""
        entries = self._by_name.get(name, {}).get(position.ledger_id)
        data = None if entries is None else entries.get(position.entry_id)
        if data is None:
            self.misses += 1
            return None
        self.hits += 1
        return (None, data) if isinstance(data, bytes) else data

    def invalidate_ledger(self, name: str, ledger_id: int) -> None:
        ledgers = self._by_name.get(name)
        if ledgers is None:
            return
        entries = ledgers.pop(ledger_id, None)
        if entries:
            self._bytes -= sum(_size(d) for d in entries.values())
            self._count -= len(entries)
        if not ledgers:
            del self._by_name[name]

    def invalidate_before(self, name: str, position: Position) -> None:
        """Drop entries every cursor has read past (they will not be read from memory again)."""
        ledgers = self._by_name.get(name)
        if not ledgers:
            return
        for ledger_id in [lid for lid in ledgers if lid < position.ledger_id]:
            self.invalidate_ledger(name, ledger_id)
        entries = ledgers.get(position.ledger_id)
        if entries:
            for entry_id in [e for e in entries if e < position.entry_id]:
                self._remove(name, position.ledger_id, entry_id)

    def clear(self, name: str) -> None:
        for ledger_id in list(self._by_name.get(name, {})):
            self.invalidate_ledger(name, ledger_id)

    def _holds(self, name: str, ledger_id: int, entry_id: int) -> bool:
        return entry_id in self._by_name.get(name, {}).get(ledger_id, {})

    def _remove(self, name: str, ledger_id: int, entry_id: int) -> None:
        ledgers = self._by_name.get(name)
        if ledgers is None:
            return
        entries = ledgers.get(ledger_id)
        if entries is None:
            return
        data = entries.pop(entry_id, None)
        if data is not None:
            self._bytes -= _size(data)
            self._count -= 1
        if not entries:
            del ledgers[ledger_id]
            if not ledgers:
                del self._by_name[name]

"""Reading ranges of entries across the ledgers of a managed ledger.

A range ``[start, ...]`` is cut at ledger boundaries; each piece is served from the entry cache when every
entry is there, else from the bookies: the current ledger through the writer's handle, closed ledgers through
read handles opened *without* recovery (a reader must never fence the writer) and kept in a small LRU so a
catch-up reader does not re-open a ledger per batch. The client pipelines the reads of one piece.

A ledger of the list other than the current one whose metadata is not closed (its writer moved on to the next
ledger, but closing this one failed - the metadata store went away at that instant) is opened *with*
recovery: nobody writes it any more, and recovery closes it at its last entry so it can be read to its end
(a handle opened without recovery would know no entry of it).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable

from magnetar.bookkeeper.client import BookKeeper, LedgerHandle, ReadHandle
from magnetar.managed_ledger.entry import Entry
from magnetar.managed_ledger.entry_cache import EntryCache
from magnetar.managed_ledger.entry_prefix import EntryPrefixError, split
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.position import Position

log = logging.getLogger(__name__)


class EntryReader:
    def __init__(
        self,
        name: str,
        bk: BookKeeper,
        cache: EntryCache,
        password: bytes,
        handles_max: int,
        current_handle: Callable[[], LedgerHandle | None],
        *,
        stamped: bool = False,
    ) -> None:
        self._name = name
        self._stamped = stamped
        """Whether entries carry the message index prefix (split off as they are read)."""
        self._bk = bk
        self._cache = cache
        self._password = password
        self._handles_max = handles_max
        self._current_handle = current_handle
        self._handles: OrderedDict[int, ReadHandle] = OrderedDict()

    async def read(
        self, ledgers: LedgerList, start: Position, last: Position, max_entries: int
    ) -> list[Entry]:
        """Up to ``max_entries`` stored entries from ``start`` through ``last`` (inclusive), in order."""
        out: list[Entry] = []
        position = ledgers.normalize(start)
        while len(out) < max_entries and position <= last:
            info = ledgers.get(position.ledger_id)
            if info is None or position.entry_id >= info.entries:
                break  # the slot of the next add: nothing stored yet
            end = info.entries - 1
            if position.ledger_id == last.ledger_id:
                end = min(end, last.entry_id)
            end = min(end, position.entry_id + (max_entries - len(out)) - 1)
            out.extend(await self._read_ledger(position.ledger_id, position.entry_id, end))
            position = ledgers.next_position(Position(position.ledger_id, end))
        return out

    async def _read_ledger(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        cached = []
        for entry_id in range(first, last + 1):
            position = Position(ledger_id, entry_id)
            hit = self._cache.get_entry(self._name, position)
            if hit is None:
                break
            cached.append(Entry(position, hit[1], hit[0]))
        if len(cached) == last - first + 1:
            return cached
        start = first + len(cached)
        current = self._current_handle()
        if current is not None and current.ledger_id == ledger_id:
            entries = await current.read_entries(start, last)
        else:
            handle = await self._read_handle(ledger_id)
            entries = await handle.read_entries(start, last)
        if not self._stamped:
            return cached + [Entry(Position(ledger_id, e.entry_id), e.payload) for e in entries]
        return cached + [self._unstamped(Position(ledger_id, e.entry_id), e.payload) for e in entries]

    def _unstamped(self, position: Position, stored: bytes) -> Entry:
        """The entry with its message index prefix split off (no copy); an unreadable prefix is logged and
        the bytes are handed on whole (their reader will find them corrupt)."""
        try:
            first, body = split(stored)
        except EntryPrefixError as exc:
            log.warning(
                "managed ledger %s: entry %s has no readable message index: %s", self._name, position, exc
            )
            return Entry(position, stored)
        return Entry(position, body, first)

    async def _read_handle(self, ledger_id: int) -> ReadHandle:
        handle = self._handles.get(ledger_id)
        if handle is not None:
            self._handles.move_to_end(ledger_id)
            return handle
        handle = await self._bk.open_ledger(
            ledger_id, password=self._password, recovery=False, use_stored_password=True
        )
        if not handle.is_closed:
            log.info(
                "managed ledger %s: ledger %d was left unclosed by its writer: recovering it",
                self._name,
                ledger_id,
            )
            await handle.close()
            handle = await self._bk.open_ledger(
                ledger_id, password=self._password, recovery=True, use_stored_password=True
            )
        self._handles[ledger_id] = handle
        while len(self._handles) > self._handles_max:
            _, evicted = self._handles.popitem(last=False)
            await evicted.close()
        return handle

    async def forget(self, ledger_id: int) -> None:
        handle = self._handles.pop(ledger_id, None)
        if handle is not None:
            await handle.close()

    async def close(self) -> None:
        while self._handles:
            _, handle = self._handles.popitem()
            await handle.close()

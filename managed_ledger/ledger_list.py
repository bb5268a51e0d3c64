"""The ordered list of a managed ledger's ledgers, and position arithmetic across ledger boundaries.

A managed ledger's entries live in several ledgers: ``L1:0..L1:n1-1``, then ``L2:0..`` and so on, with the
current (open) ledger last. Cursors move through that sequence, so "the entry after ``L1:n1-1``" is ``L2:0``
(skipping ledgers that hold no entries). This class answers those questions; the managed ledger keeps it up to
date as entries are added, ledgers roll over and old ledgers are trimmed. Ledgers trimmed away simply vanish
from the list: positions in them fall before :meth:`first_position`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from magnetar.managed_ledger.info import LedgerInfo
from magnetar.managed_ledger.position import Position


class LedgerList:
    def __init__(self, ledgers: Sequence[LedgerInfo] = ()) -> None:
        self._ids: list[int] = []
        self._infos: dict[int, LedgerInfo] = {}
        for info in ledgers:
            self.append(info)

    # -- maintenance ------------------------------------------------------------------------------------

    def append(self, info: LedgerInfo) -> None:
        if self._ids and info.ledger_id <= self._ids[-1]:
            raise ValueError(f"ledger {info.ledger_id} is not after {self._ids[-1]}")
        self._ids.append(info.ledger_id)
        self._infos[info.ledger_id] = info

    def update(self, info: LedgerInfo) -> None:
        if info.ledger_id not in self._infos:
            raise KeyError(info.ledger_id)
        self._infos[info.ledger_id] = info

    def remove(self, ledger_id: int) -> LedgerInfo:
        info = self._infos.pop(ledger_id)
        self._ids.remove(ledger_id)
        return info

    # -- queries ----------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[LedgerInfo]:
        return (self._infos[i] for i in self._ids)

    def __contains__(self, ledger_id: int) -> bool:
        return ledger_id in self._infos

    def get(self, ledger_id: int) -> LedgerInfo | None:
        return self._infos.get(ledger_id)

    @property
    def current(self) -> LedgerInfo | None:
        return self._infos[self._ids[-1]] if self._ids else None

    def infos(self) -> tuple[LedgerInfo, ...]:
        return tuple(self)

    def total_entries(self) -> int:
        return sum(info.entries for info in self)

    def total_size(self) -> int:
        return sum(info.size_bytes for info in self)

    def first_position(self) -> Position | None:
        """The oldest entry still stored, or None if there is none."""
        for lid in self._ids:
            if self._infos[lid].entries > 0:
                return Position(lid, 0)
        return None

    def last_position(self) -> Position | None:
        """The newest entry, or None if there is none."""
        for lid in reversed(self._ids):
            entries = self._infos[lid].entries
            if entries > 0:
                return Position(lid, entries - 1)
        return None

    def next_position(self, position: Position) -> Position:
        """The position right after ``position``: the next entry if it exists, else where it will be.

        When ``position`` is the last entry, the answer is the next slot of the current ledger, which is
        where the next add lands (tailing cursors wait there).
        """
        i = bisect.bisect_left(self._ids, position.ledger_id)
        if i < len(self._ids) and self._ids[i] == position.ledger_id:
            if position.entry_id + 1 < self._infos[position.ledger_id].entries:
                return position.next()
            i += 1
        for lid in self._ids[i:]:
            if self._infos[lid].entries > 0:
                return Position(lid, 0)
        current = self.current
        if current is None:
            return position.next()
        if current.ledger_id == position.ledger_id:
            return position.next()
        return Position(current.ledger_id, max(current.entries, 0))

    def normalize(self, position: Position) -> Position:
        """The first stored entry at or after ``position``, else the slot where the next add lands.

        Fixes read positions that went stale: a slot past the end of a ledger that has since been closed,
        or a position in a ledger that was trimmed away.
        """
        info = self._infos.get(position.ledger_id)
        if info is not None and 0 <= position.entry_id < info.entries:
            return position
        current = self.current
        if current is not None and current.ledger_id == position.ledger_id:
            return Position(position.ledger_id, max(position.entry_id, 0))
        i = bisect.bisect_right(self._ids, position.ledger_id)
        for lid in self._ids[i:]:
            if self._infos[lid].entries > 0:
                return Position(lid, 0)
        if current is None:
            return position
        return Position(current.ledger_id, current.entries)

    def previous_position(self, position: Position) -> Position:
        """The position right before ``position`` (``L:-1`` style when ``position`` opens a ledger)."""
        if position.entry_id > 0:
            return position.previous()
        i = bisect.bisect_left(self._ids, position.ledger_id)
        for lid in reversed(self._ids[:i]):
            entries = self._infos[lid].entries
            if entries > 0:
                return Position(lid, entries - 1)
        return Position(position.ledger_id, -1)

    def entries_between(self, after: Position, up_to: Position) -> int:
        """Number of stored entries ``p`` with ``after < p <= up_to``."""
        if up_to <= after:
            return 0
        count = 0
        for lid in self._ids:
            if lid < after.ledger_id or lid > up_to.ledger_id:
                continue
            entries = self._infos[lid].entries
            first = after.entry_id + 1 if lid == after.ledger_id else 0
            last = min(up_to.entry_id, entries - 1) if lid == up_to.ledger_id else entries - 1
            if last >= first:
                count += last - first + 1
        return count

    def position_after_skipping(self, start: Position, count: int) -> Position:
        """The position ``count`` entries after ``start``, clamped to the last stored entry."""
        position = start
        remaining = count
        for lid in self._ids:
            if remaining <= 0:
                break
            if lid < start.ledger_id:
                continue
            entries = self._infos[lid].entries
            first = start.entry_id + 1 if lid == start.ledger_id else 0
            available = entries - first
            if available <= 0:
                continue
            if remaining <= available:
                return Position(lid, first + remaining - 1)
            remaining -= available
            position = Position(lid, entries - 1)
        return position

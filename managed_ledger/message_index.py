"""Message indexes of a managed ledger's entries: counts in messages, not entries, without reading entries.

An entry may hold several messages (a broker-side batch), while users count messages: a backlog of 1,000
messages stored as 10 entries is 1,000, as it would be had each message been its own entry. So every entry
gets the index of its first message: the managed ledger's first message ever is index 0 and each entry's
first index is the previous entry's plus the previous entry's message count - the same running count Pulsar
keeps in its broker entry metadata (``BrokerEntryMetadata.index``, which records the entry's *last* message
index: ``first + count - 1`` here). Every count is then a difference of two indexes, known from the positions
alone:

* messages after ``a`` up to and including ``b``: ``index_after(b) - index_after(a)``, where
  ``index_after(p)`` is the index of the first message stored after ``p`` (``L:-1``, a ledger's open slot and
  positions past the end work too);
* skipping ``n`` messages from ``a``: the message ``index_after(a) + n - 1`` is the last one skipped,
  :meth:`MessageIndex.locate` names its entry and its place in the entry (a skip can end inside an entry);
* peeking message ``n`` after ``a``: the same lookup.

The table is per ledger, one 8-byte first index per entry (an ``array('q')``), kept for the stored entries
only: :meth:`MessageIndex.remove_ledger` drops a trimmed ledger. A ledger whose entries each hold one message
- the common case of producers that do not batch - still costs 8 bytes per entry; the indexes are strictly
increasing, so every lookup is a bisection. Sans-IO: no reads, no clock.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

from magnetar.managed_ledger.position import Position


class MessageIndexError(ValueError):
    """An append out of order, or a lookup of an entry the table does not hold."""


@dataclass(frozen=True, slots=True)
class MessageLocation:
    """Where message ``index`` is stored: its entry and its place among the entry's messages."""

    position: Position
    offset: int
    """0 for the entry's first message."""
    messages: int
    """How many messages the entry holds."""


class _Ledger:
    __slots__ = ("end", "firsts", "ledger_id")

    def __init__(self, ledger_id: int, start: int) -> None:
        self.ledger_id = ledger_id
        self.firsts = array("q")
        self.end = start
        """The index the ledger's next entry would get (its first index when it holds no entry)."""

    @property
    def start(self) -> int:
        return self.firsts[0] if self.firsts else self.end


class MessageIndex:
    """The first message index of every stored entry, ledger by ledger (see the module docstring)."""

    def __init__(self, next_index: int = 0) -> None:
        if next_index < 0:
            raise MessageIndexError(f"a message index is never negative: {next_index}")
        self._ledgers: list[_Ledger] = []
        self._ids: list[int] = []
        self._next = next_index

    # -- maintenance ------------------------------------------------------------------------------------

    @property
    def next_index(self) -> int:
        """The index the next stored message gets: the messages stored so far, trimmed ones included."""
        return self._next

    def append(self, position: Position, messages: int) -> int:
        """Record the entry just stored at ``position`` holding ``messages`` messages; its first index.

        Entries come in order: entry 0 of a ledger after every entry of the ledgers before it, then 1, 2, ...
        """
        if messages < 1:
            raise MessageIndexError(f"an entry holds at least one message, not {messages} ({position})")
        ledger = self._ledgers[-1] if self._ledgers else None
        if ledger is None or position.ledger_id != ledger.ledger_id:
            if ledger is not None and position.ledger_id < ledger.ledger_id:
                raise MessageIndexError(f"entry {position} is before ledger {ledger.ledger_id}")
            ledger = self._open(position.ledger_id)
        if position.entry_id != len(ledger.firsts):
            raise MessageIndexError(f"entry {position} is not the next of ledger {ledger.ledger_id}")
        first = self._next
        ledger.firsts.append(first)
        self._next = ledger.end = first + messages
        return first

    def append_ledger(self, ledger_id: int, entries: int) -> None:
        """Record a whole ledger of ``entries`` entries of one message each (entries stored before the index
        existed, whose message counts are unknown: each counts as one message, as before)."""
        if self._ledgers and ledger_id <= self._ledgers[-1].ledger_id:
            raise MessageIndexError(f"ledger {ledger_id} is not after ledger {self._ledgers[-1].ledger_id}")
        if entries < 0:
            raise MessageIndexError(f"ledger {ledger_id} cannot hold {entries} entries")
        ledger = self._open(ledger_id)
        ledger.firsts = array("q", range(self._next, self._next + entries))
        self._next = ledger.end = self._next + entries

    def remove_ledger(self, ledger_id: int) -> None:
        """Forget a ledger that was trimmed (or deleted); the indexes of the others do not change."""
        i = bisect.bisect_left(self._ids, ledger_id)
        if i < len(self._ids) and self._ids[i] == ledger_id:
            del self._ids[i]
            del self._ledgers[i]

    def _open(self, ledger_id: int) -> _Ledger:
        ledger = _Ledger(ledger_id, self._next)
        self._ledgers.append(ledger)
        self._ids.append(ledger_id)
        return ledger

    # -- queries ----------------------------------------------------------------------------------------

    def first_index(self, position: Position) -> int:
        """The index of the first message of the stored entry at ``position``."""
        ledger = self._ledger(position.ledger_id)
        if ledger is None or not 0 <= position.entry_id < len(ledger.firsts):
            raise MessageIndexError(f"no entry at {position}")
        return ledger.firsts[position.entry_id]

    def messages_in(self, position: Position) -> int:
        """How many messages the stored entry at ``position`` holds."""
        first = self.first_index(position)
        ledger = self._ledger(position.ledger_id)
        assert ledger is not None
        following = position.entry_id + 1
        return (ledger.firsts[following] if following < len(ledger.firsts) else ledger.end) - first

    def index_after(self, position: Position) -> int:
        """The index of the first message stored after ``position`` - or the next one to be stored.

        ``L:-1`` gives ledger ``L``'s first index; a position in a trimmed ledger, the first stored one's; a
        position past the last entry, :attr:`next_index`.
        """
        i = bisect.bisect_left(self._ids, position.ledger_id)
        if i < len(self._ids) and self._ids[i] == position.ledger_id:
            ledger = self._ledgers[i]
            following = position.entry_id + 1
            return ledger.firsts[following] if following < len(ledger.firsts) else ledger.end
        if i < len(self._ledgers):
            return self._ledgers[i].start
        return self._next

    def messages_between(self, after: Position, up_to: Position) -> int:
        """Messages stored in the entries ``p`` with ``after < p <= up_to``."""
        return max(0, self.index_after(up_to) - self.index_after(after))

    def locate(self, index: int) -> MessageLocation | None:
        """The entry that holds message ``index``, or None if it was trimmed or is not stored yet."""
        if not 0 <= index < self._next:
            return None
        i = bisect.bisect_right([ledger.start for ledger in self._ledgers], index) - 1
        while i >= 0 and not self._ledgers[i].firsts:
            i -= 1
        if i < 0:
            return None
        ledger = self._ledgers[i]
        if index >= ledger.end:
            return None
        entry = bisect.bisect_right(ledger.firsts, index) - 1
        following = ledger.firsts[entry + 1] if entry + 1 < len(ledger.firsts) else ledger.end
        first = ledger.firsts[entry]
        return MessageLocation(Position(ledger.ledger_id, entry), index - first, following - first)

    def first_stored_index(self) -> int:
        """The index of the oldest message still stored (:attr:`next_index` when none is)."""
        return self._ledgers[0].start if self._ledgers else self._next

    def _ledger(self, ledger_id: int) -> _Ledger | None:
        i = bisect.bisect_left(self._ids, ledger_id)
        return self._ledgers[i] if i < len(self._ids) and self._ids[i] == ledger_id else None


def unacknowledged_messages(
    index: MessageIndex,
    mark_delete: Position,
    last: Position | None,
    acked_ranges: Iterable[tuple[int, int, int]],
) -> int:
    """A cursor's backlog in messages: those after ``mark_delete`` up to ``last`` (the newest stored entry;
    None when nothing is stored), minus the messages of the entries acknowledged individually
    (``acked_ranges``: ``(ledger, first entry, last entry)``) - differences of indexes, no entry read."""
    if last is None:
        return 0
    acked = sum(
        index.messages_between(Position(ledger_id, first - 1), Position(ledger_id, last_entry))
        for ledger_id, first, last_entry in acked_ranges
    )
    return max(0, index.messages_between(mark_delete, last) - acked)

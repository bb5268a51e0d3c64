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

**After a reopen.** The indexes persist in two places: each entry's own first index (written in front of
the entry as it is added) and each ledger's first index in the managed ledger's metadata. Reopening a
topic rebuilds the table from the metadata alone: a ledger whose message count equals its entry count holds
one message per entry and is known exactly; any other is *coarse* - its first and end index are known, the
indexes of its entries only where they were learned (:meth:`MessageIndex.learn`, from entries read, whose
prefix names their index). Counts between a ledger's bounds are exact; a count that starts or ends at an
unlearned entry inside a coarse ledger is interpolated between the nearest learned entries
(:meth:`MessageIndex.is_exact_after` tells which), and :meth:`MessageIndex.entry_to_learn` names the entry to
read to pin a message down (the managed ledger reads a few entries at a cursor's positions when it
recovers the cursor, and bisects with reads for a skip or peek that ends in a coarse ledger).
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
    __slots__ = ("end", "entries", "first", "firsts", "ledger_id", "point_ids", "points")

    def __init__(self, ledger_id: int, start: int) -> None:
        self.ledger_id = ledger_id
        self.firsts = array("q")
        self.first = start
        self.end = start
        """The index the ledger's next entry would get (its first index when it holds no entry)."""
        self.entries = 0
        self.points: dict[int, int] | None = None
        """A coarse ledger's learned first indexes by entry id (None: ``firsts`` holds every entry's)."""
        self.point_ids: list[int] = []
        """The entry ids of ``points``, sorted (their indexes increase with them)."""

    @property
    def start(self) -> int:
        return self.first

    def first_of(self, entry_id: int) -> int:
        """The first index of entry ``entry_id`` (``entries``: the end) - interpolated if not learned."""
        if entry_id >= self.entries:
            return self.end
        if self.points is None:
            return self.firsts[entry_id]
        if entry_id == 0:
            return self.first
        known = self.points.get(entry_id)
        if known is not None:
            return known
        below, above = self._neighbours(entry_id)
        lo_entry, lo = below
        hi_entry, hi = above
        return min(
            hi - (hi_entry - entry_id),
            max(lo + (entry_id - lo_entry), lo + (hi - lo) * (entry_id - lo_entry) // (hi_entry - lo_entry)),
        )

    def is_known(self, entry_id: int) -> bool:
        return self.points is None or entry_id <= 0 or entry_id >= self.entries or entry_id in self.points

    def _neighbours(self, entry_id: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """The nearest learned entries (or the ledger's bounds) below and above ``entry_id``."""
        assert self.points is not None
        ids = self.point_ids
        i = bisect.bisect_left(ids, entry_id)
        below = (ids[i - 1], self.points[ids[i - 1]]) if i > 0 else (0, self.first)
        above = (ids[i], self.points[ids[i]]) if i < len(ids) else (self.entries, self.end)
        return below, above

    def remember(self, entry_id: int, first: int) -> None:
        assert self.points is not None
        if entry_id not in self.points:
            bisect.insort(self.point_ids, entry_id)
        self.points[entry_id] = first


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
        if ledger.points is not None:
            raise MessageIndexError(f"ledger {ledger.ledger_id} was recorded whole; no entry is added to it")
        first = self._next
        if not ledger.firsts:
            ledger.first = first
        ledger.firsts.append(first)
        ledger.entries += 1
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
        ledger.entries = entries
        self._next = ledger.end = self._next + entries

    def append_closed_ledger(self, ledger_id: int, first: int, end: int, entries: int) -> None:
        """Record a whole ledger from the managed ledger's metadata: its ``entries`` entries hold the messages
        ``first`` up to (excluding) ``end``. One message per entry is known exactly; otherwise the ledger is
        coarse until its entries' indexes are learned (see the module docstring)."""
        if self._ledgers and ledger_id <= self._ledgers[-1].ledger_id:
            raise MessageIndexError(f"ledger {ledger_id} is not after ledger {self._ledgers[-1].ledger_id}")
        if first < self._next or end - first < entries or entries < 0:
            raise MessageIndexError(
                f"ledger {ledger_id}: messages {first}..{end} in {entries} entries after index {self._next}"
            )
        self._next = first
        if end - first == entries:
            self.append_ledger(ledger_id, entries)
            return
        ledger = self._open(ledger_id)
        ledger.entries = entries
        ledger.points = {}
        self._next = ledger.end = end

    def open_ledger(self, ledger_id: int) -> None:
        """Start ledger ``ledger_id`` (the current one, empty): its first index is :attr:`next_index`."""
        if not self._ledgers or self._ledgers[-1].ledger_id != ledger_id:
            self._open(ledger_id)

    def learn(self, position: Position, first: int, messages: int) -> None:
        """The entry at ``position`` holds messages ``first ..`` (read from the entry): a coarse ledger
        records it; any other ignores it."""
        ledger = self._ledger(position.ledger_id)
        if ledger is None or ledger.points is None or not 0 <= position.entry_id < ledger.entries:
            return  # nothing to learn: an exact ledger (or one trimmed)
        if not ledger.first <= first < ledger.end:
            raise MessageIndexError(
                f"entry {position} claims index {first}, outside {ledger.first}..{ledger.end}"
            )
        if position.entry_id > 0:
            ledger.remember(position.entry_id, first)
        if position.entry_id + 1 < ledger.entries:
            ledger.remember(position.entry_id + 1, first + messages)

    def ledger_first_index(self, ledger_id: int) -> int | None:
        """The index of ledger ``ledger_id``'s first message (None if the ledger is not recorded)."""
        ledger = self._ledger(ledger_id)
        return None if ledger is None else ledger.first

    def is_coarse(self, ledger_id: int) -> bool:
        """Whether ledger ``ledger_id``'s entry indexes are learned one by one (see the module docstring)."""
        ledger = self._ledger(ledger_id)
        return ledger is not None and ledger.points is not None

    def is_exact_after(self, position: Position) -> bool:
        """Whether :meth:`index_after` is exact at ``position`` (not interpolated in a coarse ledger)."""
        ledger = self._ledger(position.ledger_id)
        return ledger is None or ledger.is_known(position.entry_id + 1)

    def entry_to_learn(self, index: int) -> Position | None:
        """The entry to read to locate message ``index`` when it lies in a coarse ledger between learned
        entries (None when :meth:`locate` is exact)."""
        ledger = self._holding(index)
        if ledger is None or ledger.points is None:
            return None
        points, ids = ledger.points, ledger.point_ids
        i = bisect.bisect_right(ids, index, key=points.__getitem__)  # learned entries starting <= index
        below = ids[i - 1] if i > 0 else 0
        above = ids[i] if i < len(ids) else ledger.entries
        if above - below <= 1:
            return None
        return Position(ledger.ledger_id, (below + above) // 2)

    def remove_ledger(self, ledger_id: int) -> None:
        """Forget a ledger that was trimmed (or deleted); the indexes of the others do not change."""
        i = bisect.bisect_left(self._ids, ledger_id)
        if i < len(self._ids) and self._ids[i] == ledger_id:
            del self._ids[i]
            del self._ledgers[i]

    def _holding(self, index: int) -> _Ledger | None:
        if not 0 <= index < self._next:
            return None
        i = bisect.bisect_right([ledger.start for ledger in self._ledgers], index) - 1
        while i >= 0 and not self._ledgers[i].entries:
            i -= 1
        if i < 0 or index >= self._ledgers[i].end:
            return None
        return self._ledgers[i]

    def _open(self, ledger_id: int) -> _Ledger:
        ledger = _Ledger(ledger_id, self._next)
        self._ledgers.append(ledger)
        self._ids.append(ledger_id)
        return ledger

    # -- queries ----------------------------------------------------------------------------------------

    def first_index(self, position: Position) -> int:
        """The index of the first message of the stored entry at ``position``."""
        ledger = self._ledger(position.ledger_id)
        if ledger is None or not 0 <= position.entry_id < ledger.entries:
            raise MessageIndexError(f"no entry at {position}")
        return ledger.first_of(position.entry_id)

    def messages_in(self, position: Position) -> int:
        """How many messages the stored entry at ``position`` holds."""
        first = self.first_index(position)
        ledger = self._ledger(position.ledger_id)
        assert ledger is not None
        return ledger.first_of(position.entry_id + 1) - first

    def known_messages_in(self, position: Position) -> int | None:
        """How many messages the stored entry at ``position`` holds, when the table knows it exactly (None
        for an entry it does not hold, or one inside a coarse ledger whose bounds are not learned yet)."""
        ledger = self._ledger(position.ledger_id)
        entry_id = position.entry_id
        if ledger is None or not 0 <= entry_id < ledger.entries:
            return None
        if not (ledger.is_known(entry_id) and ledger.is_known(entry_id + 1)):
            return None
        return ledger.first_of(entry_id + 1) - ledger.first_of(entry_id)

    def index_after(self, position: Position) -> int:
        """The index of the first message stored after ``position`` - or the next one to be stored.

        ``L:-1`` gives ledger ``L``'s first index; a position in a trimmed ledger, the first stored one's; a
        position past the last entry, :attr:`next_index`.
        """
        i = bisect.bisect_left(self._ids, position.ledger_id)
        if i < len(self._ids) and self._ids[i] == position.ledger_id:
            return self._ledgers[i].first_of(max(0, position.entry_id + 1))
        if i < len(self._ledgers):
            return self._ledgers[i].start
        return self._next

    def messages_between(self, after: Position, up_to: Position) -> int:
        """Messages stored in the entries ``p`` with ``after < p <= up_to``."""
        return max(0, self.index_after(up_to) - self.index_after(after))

    def locate(self, index: int) -> MessageLocation | None:
        """The entry that holds message ``index``, or None if it was trimmed or is not stored yet (in a coarse
        ledger, the nearest guess until :meth:`entry_to_learn` says None)."""
        ledger = self._holding(index)
        if ledger is None:
            return None
        if ledger.points is None:
            entry = bisect.bisect_right(ledger.firsts, index) - 1
        else:
            lo, hi = 0, ledger.entries - 1
            while lo < hi:  # the last entry whose first index is <= index
                mid = (lo + hi + 1) // 2
                if ledger.first_of(mid) <= index:
                    lo = mid
                else:
                    hi = mid - 1
            entry = lo
        first = ledger.first_of(entry)
        following = ledger.first_of(entry + 1)
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

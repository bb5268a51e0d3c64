"""Individually acknowledged entries beyond a cursor's mark-delete position ("ack holes").

Pulsar keeps these as a range set of positions (``individuallyDeletedMessages``, rendered ``[(a..b], ...]``);
we keep, per ledger, a sorted list of disjoint, non-adjacent inclusive entry ranges ``[first, last]``. Ranges
never span ledgers: whether ``L1``'s last entry is adjacent to ``L2:0`` depends on ledger sizes, which the
cursor (not this structure) knows. Memory is bounded by the number of ranges, which the cursor caps for
persistence (``unacked_ranges_persist_max``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from magnetar.managed_ledger.position import Position


class AckSet:
    def __init__(self) -> None:
        self._ranges: dict[int, tuple[list[int], list[int]]] = {}  # ledger -> (starts, ends)
        self._range_count = 0
        self._entry_count = 0

    def __len__(self) -> int:
        """Number of acknowledged entries held."""
        return self._entry_count

    @property
    def range_count(self) -> int:
        return self._range_count

    def __contains__(self, position: Position) -> bool:
        spans = self._ranges.get(position.ledger_id)
        if spans is None:
            return False
        starts, ends = spans
        i = bisect.bisect_right(starts, position.entry_id) - 1
        return i >= 0 and ends[i] >= position.entry_id

    def add(self, position: Position) -> bool:
        """Add one entry; False if it was already there."""
        return self.add_range(position.ledger_id, position.entry_id, position.entry_id) > 0

    def add_range(self, ledger_id: int, first: int, last: int) -> int:
        """Add entries ``first..last`` of a ledger; returns how many were new."""
        if first > last:
            return 0
        starts, ends = self._ranges.setdefault(ledger_id, ([], []))
        # Ranges that overlap or touch [first, last] are merged into one.
        lo = bisect.bisect_left(ends, first - 1)
        hi = bisect.bisect_right(starts, last + 1)
        covered = sum(min(ends[i], last) - max(starts[i], first) + 1 for i in range(lo, hi))
        new_first = min(first, starts[lo]) if lo < hi else first
        new_last = max(last, ends[hi - 1]) if lo < hi else last
        self._range_count -= hi - lo
        self._entry_count -= sum(ends[i] - starts[i] + 1 for i in range(lo, hi))
        starts[lo:hi] = [new_first]
        ends[lo:hi] = [new_last]
        self._range_count += 1
        self._entry_count += new_last - new_first + 1
        return (last - first + 1) - covered

    def remove_up_to(self, position: Position) -> None:
        """Forget every entry at or before ``position`` (the mark-delete moved past them)."""
        for ledger_id in [lid for lid in self._ranges if lid < position.ledger_id]:
            self._drop_ledger(ledger_id)
        spans = self._ranges.get(position.ledger_id)
        if spans is None:
            return
        starts, ends = spans
        while starts and ends[0] <= position.entry_id:
            self._entry_count -= ends[0] - starts[0] + 1
            self._range_count -= 1
            del starts[0], ends[0]
        if starts and starts[0] <= position.entry_id:
            self._entry_count -= position.entry_id - starts[0] + 1
            starts[0] = position.entry_id + 1
        if not starts:
            del self._ranges[position.ledger_id]

    def first_range_after(self, position: Position) -> tuple[int, int, int] | None:
        """``(ledger, first, last)`` of the range starting exactly at ``position``, if any."""
        spans = self._ranges.get(position.ledger_id)
        if not spans or not spans[0]:
            return None
        starts, ends = spans
        i = bisect.bisect_left(starts, position.entry_id)
        if i < len(starts) and starts[i] == position.entry_id:
            return position.ledger_id, starts[i], ends[i]
        return None

    def ranges(self) -> Iterator[tuple[int, int, int]]:
        """``(ledger, first, last)`` triples in position order."""
        for ledger_id in sorted(self._ranges):
            starts, ends = self._ranges[ledger_id]
            yield from ((ledger_id, s, e) for s, e in zip(starts, ends, strict=True))

    def count_in(self, ledger_id: int, first: int, last: int) -> int:
        """How many acknowledged entries lie in ``first..last`` of a ledger."""
        spans = self._ranges.get(ledger_id)
        if spans is None or first > last:
            return 0
        starts, ends = spans
        lo = bisect.bisect_left(ends, first)
        hi = bisect.bisect_right(starts, last)
        return sum(max(0, min(ends[i], last) - max(starts[i], first) + 1) for i in range(lo, hi))

    def render(self) -> str:
        """Pulsar's ``individuallyDeletedMessages`` text: open-closed ranges ``[(L:a..L:b], ...]``."""
        parts = [f"({lid}:{first - 1}..{lid}:{last}]" for lid, first, last in self.ranges()]
        return "[" + ", ".join(parts) + "]"

    def _drop_ledger(self, ledger_id: int) -> None:
        starts, ends = self._ranges.pop(ledger_id)
        self._range_count -= len(starts)
        self._entry_count -= sum(e - s + 1 for s, e in zip(starts, ends, strict=True))

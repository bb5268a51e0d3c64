"""The delayed-delivery tracker of one subscription (Pulsar's ``InMemoryDelayedDeliveryTracker``), sans-IO.

Theory of operation. A Shared or Key_Shared subscription that reads an entry whose deliver-at time is still in
the future does not deliver it: it hands the entry's position to this tracker and reads on (the entry stays
unacknowledged, so the cursor keeps it in the backlog). The dispatcher asks :meth:`DelayedTracker.pop_due`
which positions are due now, re-reads those entries and delivers them as it delivers a replay; it sleeps
until :meth:`DelayedTracker.next_due_ms` when nothing else wakes it. Nothing here is stored: after a restart
or an ownership change the cursor re-reads its backlog from the mark-delete position and every delayed entry
still unacknowledged is tracked again - so nothing is lost, and a message is never delivered early because
its time is in the entry itself, checked again whenever it is read.

Time is quantised by the tick (``delayedDeliveryTickTimeMillis``): a deliver-at time is rounded **up** to
the next multiple of the tick, so every message due within one tick is released by one wake-up, and a message
is never released before its time - at most one tick after it. (Pulsar's default rounds the other way and may
release a message up to a tick early; Magnetar's rule is Pulsar's "strict" mode plus the rounding.) The clock
is passed in (``now_ms``, epoch milliseconds): the tracker never reads one.

Memory. Three parallel ``array('q')`` - due time, ledger id, entry id - kept sorted by due time: **24 bytes
per tracked entry** (plus the arrays' spare capacity, at most the same again while they grow), whatever the
payload; a batch entry counts once. Adding is a binary search and an insertion (a ``memmove`` of the tail:
delays that grow with publish time, the usual case, append at the end); releasing due entries advances a head
index, and the arrays are compacted when more than half of them is released. :attr:`DelayedTracker.full`
says when ``capacity`` entries are tracked: the dispatcher then stops reading ahead (it may overshoot by the
entries of one read, ``dispatch_read_entries_max``) until some are released, so the tracker never grows
without bound.
"""

from __future__ import annotations

import bisect
from array import array

BYTES_PER_ENTRY = 24
"""What one tracked entry costs: three 64-bit integers."""
TICK_MS_MAX = 2**31 - 1


TIME_MS_MAX = 2**63 - 1


def quantise(deliver_at_ms: int, tick_ms: int) -> int:
    """``deliver_at_ms`` rounded up to a multiple of ``tick_ms`` (never earlier than asked), at most
    :data:`TIME_MS_MAX` (a time near the end of 64 bits stays there: it is never due)."""
    return min(-(-deliver_at_ms // tick_ms) * tick_ms, TIME_MS_MAX)


class DelayedTracker:
    """Positions of delayed entries, released in due-time order (see the module docstring)."""

    __slots__ = ("_entries", "_head", "_ledgers", "_times", "capacity", "tick_ms")

    def __init__(self, tick_ms: int, capacity: int) -> None:
        self.tick_ms = max(1, min(tick_ms, TICK_MS_MAX))
        self.capacity = max(1, capacity)
        """Entries tracked beyond which :attr:`full` is true."""
        self._times = array("q")
        self._ledgers = array("q")
        self._entries = array("q")
        self._head = 0
        """Entries before this index were released (compacted away from time to time)."""

    def __len__(self) -> int:
        return len(self._times) - self._head

    @property
    def full(self) -> bool:
        return len(self) >= self.capacity

    @property
    def nbytes(self) -> int:
        """Bytes the arrays hold now (capacity included)."""
        return sum(a.buffer_info()[1] * a.itemsize for a in (self._times, self._ledgers, self._entries))

    def add(self, deliver_at_ms: int, ledger_id: int, entry_id: int) -> None:
        """Track the entry at ``(ledger_id, entry_id)`` until ``deliver_at_ms`` (rounded up to the tick)."""
        due = quantise(deliver_at_ms, self.tick_ms)
        times = self._times
        if not times or due >= times[-1]:
            times.append(due)
            self._ledgers.append(ledger_id)
            self._entries.append(entry_id)
            return
        index = bisect.bisect_right(times, due, self._head)
        times.insert(index, due)
        self._ledgers.insert(index, ledger_id)
        self._entries.insert(index, entry_id)

    def next_due_ms(self) -> int | None:
        """When the earliest tracked entry is due (epoch ms), None when nothing is tracked."""
        return self._times[self._head] if len(self) else None

    def has_due(self, now_ms: int) -> bool:
        return bool(len(self)) and self._times[self._head] <= now_ms

    def pop_due(self, now_ms: int, limit: int) -> list[tuple[int, int]]:
        """Up to ``limit`` positions due at ``now_ms`` (earliest due first), no longer tracked; sorted by
        position, as the dispatcher delivers them."""
        head = self._head
        end = bisect.bisect_right(self._times, now_ms, head)
        end = min(end, head + max(0, limit))
        out = sorted(zip(self._ledgers[head:end], self._entries[head:end], strict=True))
        self._release(end)
        return out

    def pop_all(self) -> list[tuple[int, int]]:
        """Every tracked position (delayed delivery turned off, or the subscription type no longer delays),
        sorted by position."""
        return self.pop_due(2**63 - 1, len(self))

    def clear(self) -> None:
        """Forget everything (the cursor was rewound: what it reads again is tracked again)."""
        del self._times[:], self._ledgers[:], self._entries[:]
        self._head = 0

    def _release(self, end: int) -> None:
        self._head = end
        if end == len(self._times):
            self.clear()
        elif end > len(self._times) // 2:
            for column in (self._times, self._ledgers, self._entries):
                del column[:end]
            self._head = 0

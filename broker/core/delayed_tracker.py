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

Memory and time. Entries are kept in one bucket per tick (the due time, quantised): a flat ``array('q')`` of
``(ledger id, entry id)`` pairs, **16 bytes per tracked entry** (plus the array's spare capacity while it
grows), whatever the payload (a batch entry counts once), and a bucket costs about
:data:`BYTES_PER_BUCKET` more (the array object, its dictionary slot, its place in the heap of due times).
With the default 1 s tick and delays within a day that is at most 86,400 buckets (about 17 MB) however many
entries are delayed; with a 1 ms tick and scattered times, a bucket per entry in the worst case. Adding is
an append, plus a heap push for a new tick: O(log ticks), whatever order the times come in (sorted arrays
cost a ``memmove`` of the tail per add: 33 µs per add at 200,000 entries in random order). Releasing takes
whole buckets from the heap's top. :attr:`DelayedTracker.full` says when ``capacity`` entries are tracked:
the dispatcher then stops reading ahead (it may overshoot by the entries of one read,
``dispatch_read_entries_max``) until some are released, so the tracker never grows without bound.
"""

from __future__ import annotations

import heapq
from array import array

BYTES_PER_ENTRY = 16
"""What one tracked entry costs in its bucket: two 64-bit integers."""
BYTES_PER_BUCKET = 200
"""About what one tick in use costs besides its entries: the array object (80 bytes), a dictionary slot and
key (about 100 bytes), its due time in the heap (a list slot; the int is the key's)."""
TICK_MS_MAX = 2**31 - 1


TIME_MS_MAX = 2**63 - 1


def quantise(deliver_at_ms: int, tick_ms: int) -> int:
    """``deliver_at_ms`` rounded up to a multiple of ``tick_ms`` (never earlier than asked), at most
    :data:`TIME_MS_MAX` (a time near the end of 64 bits stays there: it is never due)."""
    return min(-(-deliver_at_ms // tick_ms) * tick_ms, TIME_MS_MAX)


class DelayedTracker:
    """Positions of delayed entries, released in due-time order (see the module docstring)."""

    __slots__ = ("_buckets", "_count", "_due", "capacity", "tick_ms")

    def __init__(self, tick_ms: int, capacity: int) -> None:
        self.tick_ms = max(1, min(tick_ms, TICK_MS_MAX))
        self.capacity = max(1, capacity)
        """Entries tracked beyond which :attr:`full` is true."""
        self._buckets: dict[int, array[int]] = {}
        """Due time (quantised) -> the ``(ledger id, entry id)`` pairs due then, flat."""
        self._due: list[int] = []
        """The buckets' due times, a heap."""
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def full(self) -> bool:
        return self._count >= self.capacity

    @property
    def nbytes(self) -> int:
        """Bytes the buckets hold now (their spare capacity included), plus :data:`BYTES_PER_BUCKET` each."""
        held = sum(bucket.buffer_info()[1] * bucket.itemsize for bucket in self._buckets.values())
        return held + BYTES_PER_BUCKET * len(self._buckets)

    def add(self, deliver_at_ms: int, ledger_id: int, entry_id: int) -> None:
        """Track the entry at ``(ledger_id, entry_id)`` until ``deliver_at_ms`` (rounded up to the tick)."""
        due = quantise(deliver_at_ms, self.tick_ms)
        bucket = self._buckets.get(due)
        if bucket is None:
            bucket = self._buckets[due] = array("q")
            heapq.heappush(self._due, due)
        bucket.append(ledger_id)
        bucket.append(entry_id)
        self._count += 1

    def next_due_ms(self) -> int | None:
        """When the earliest tracked entry is due (epoch ms), None when nothing is tracked."""
        return self._due[0] if self._due else None

    def has_due(self, now_ms: int) -> bool:
        return bool(self._due) and self._due[0] <= now_ms

    def pop_due(self, now_ms: int, limit: int) -> list[tuple[int, int]]:
        """Up to ``limit`` positions due at ``now_ms`` (earliest due first), no longer tracked; sorted by
        position, as the dispatcher delivers them."""
        out: list[tuple[int, int]] = []
        due, buckets = self._due, self._buckets
        while due and due[0] <= now_ms and len(out) < limit:
            bucket = buckets[due[0]]
            take = min(len(bucket) // 2, limit - len(out))
            out.extend(zip(bucket[0 : 2 * take : 2], bucket[1 : 2 * take : 2], strict=True))
            if take * 2 == len(bucket):
                del buckets[heapq.heappop(due)]
            else:
                del bucket[: 2 * take]
        self._count -= len(out)
        out.sort()
        return out

    def pop_all(self) -> list[tuple[int, int]]:
        """Every tracked position (delayed delivery turned off, or the subscription type no longer delays),
        sorted by position."""
        return self.pop_due(2**63 - 1, len(self))

    def clear(self) -> None:
        """Forget everything (the cursor was rewound: what it reads again is tracked again)."""
        self._buckets.clear()
        self._due.clear()
        self._count = 0

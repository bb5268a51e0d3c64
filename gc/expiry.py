"""Message expiry: move a cursor past the entries older than a limit (Pulsar's message TTL).

Pulsar's ``PersistentMessageExpiryMonitor`` finds the newest expired entry after a subscription's
mark-delete position with ``asyncFindNewestMatching`` - a binary search over the backlog, since publish
times grow with positions - and mark-deletes up to it: the messages count as acknowledged. This module does
the same over a :class:`~magnetar.managed_ledger.ledger.ManagedLedger`: probe ``k`` entries past mark-delete,
read that entry, ask ``publish_time_of(entry)`` (injected: the entry format is the broker's), and narrow.
At most ``reads_max`` entries are read per cursor; an entry that cannot be read counts as not expired (the
search only ever errs towards keeping messages).

``publish_time_of`` must return the *newest* publish time in the entry (a batch expires only when all of its
messages are old), in epoch milliseconds; it may raise ``ValueError`` for bytes it cannot parse.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.position import Position

log = logging.getLogger(__name__)

PublishTimeOf = Callable[[bytes | memoryview], int]


async def _is_expired(
    ml: ManagedLedger, position: Position, cutoff_ms: int, publish_time_of: PublishTimeOf
) -> bool:
    entry = await ml.read_entry(position)
    if entry is None:
        return False
    try:
        return publish_time_of(entry.data) <= cutoff_ms
    except ValueError as exc:
        log.warning("managed ledger %s: entry %s has no readable publish time: %s", ml.name, position, exc)
        return False


async def newest_expired(
    ml: ManagedLedger,
    after: Position,
    cutoff_ms: int,
    publish_time_of: PublishTimeOf,
    reads_max: int,
) -> Position | None:
    """The newest entry after ``after`` published at or before ``cutoff_ms``, or None."""
    ledgers = ml.ledgers
    count = ledgers.entries_between(after, ml.last_confirmed)
    low, high = 0, count  # invariant: the first `low` entries after `after` are expired
    reads = 0
    while low < high and reads < reads_max:
        middle = (low + high + 1) // 2
        reads += 1
        if await _is_expired(ml, ledgers.position_after_skipping(after, middle), cutoff_ms, publish_time_of):
            low = middle
        else:
            high = middle - 1
    return None if low == 0 else ledgers.position_after_skipping(after, low)


async def expire_cursor(
    ml: ManagedLedger,
    cursor: ManagedCursor,
    cutoff_ms: int,
    publish_time_of: PublishTimeOf,
    reads_max: int,
) -> int:
    """Acknowledge every entry of ``cursor`` published at or before ``cutoff_ms``; returns how many
    messages that acknowledged (an entry holding a batch counts its messages)."""
    mark = cursor.mark_delete
    target = await newest_expired(ml, mark, cutoff_ms, publish_time_of, reads_max)
    if target is None or target <= cursor.mark_delete:
        return 0
    before = cursor.message_backlog()
    cursor.ack_cumulative(target)
    return before - cursor.message_backlog()


def backlog_bytes(ml: ManagedLedger, after: Position) -> int:
    """Estimated bytes stored after ``after`` (Pulsar's ``getEstimatedBacklogSize``): whole ledgers past it
    plus the proportional share of its own ledger."""
    total = 0
    for info in ml.ledgers:
        if info.ledger_id < after.ledger_id or info.entries <= 0:
            continue
        if info.ledger_id > after.ledger_id:
            total += info.size_bytes
        else:
            remaining = max(0, info.entries - (after.entry_id + 1))
            total += info.size_bytes * remaining // info.entries
    return total


def entries_to_evict(ml: ManagedLedger, cursor: ManagedCursor, target_bytes: int) -> int:
    """How many of ``cursor``'s oldest unacknowledged entries to skip so its backlog fits ``target_bytes``."""
    excess = backlog_bytes(ml, cursor.mark_delete) - target_bytes
    if excess <= 0:
        return 0
    entries, size = ml.number_of_entries(), ml.total_size()
    average = max(1, size // entries) if entries else 1
    return min(cursor.backlog(), -(-excess // average))

"""Where a topic's stored messages are: the last one, and the first published at or after a time.

Two questions clients ask of a topic (partition) in protocol-neutral terms, answered from the managed ledger
alone, so the admin API (reset cursor to a time, last message id) and the client protocols (Pulsar's binary
GET_LAST_MESSAGE_ID and SEEK) give the same answers:

* :func:`last_message` - the last stored entry's position and, when it holds a batch of several messages,
  the index of its last message (counted from the stored entry, never from a client; an entry of one
  message is a message stored alone, as the binary protocol delivers it). An empty topic answers its current
  ledger with entry -1, as Pulsar's broker answers its last-add-confirmed position;
* :func:`first_at_or_after` - the first stored entry published at or after a time (binary search over the
  entries' publish times, bounded in reads, as Pulsar's ``findMessageIdByPublishTime``).
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.broker.wire import CorruptEntryError, decode_entry
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.position import Position

SEARCH_READS_MAX = 64
"""Entries read by one search by time (a binary search needs ~log2(entries))."""


def publish_time(data: bytes | memoryview) -> int:
    """The latest publish time of the messages of a stored entry (:class:`ValueError` if it is none)."""
    try:
        messages = decode_entry(data).messages
    except CorruptEntryError as exc:
        raise ValueError(str(exc)) from exc
    return max(m.publish_time_ms for m in messages)


async def first_at_or_after(
    ml: ManagedLedger, timestamp_ms: int, time_of: Callable[[bytes | memoryview], int] = publish_time
) -> Position | None:
    """The first stored entry published at or after ``timestamp_ms`` (None if every entry is older)."""
    first = ml.ledgers.first_position()
    if first is None:
        return None
    before = ml.ledgers.previous_position(first)
    count = ml.ledgers.entries_between(before, ml.last_confirmed)
    low, high = 1, count + 1  # answer is the smallest k in [1, count] whose entry is new enough
    reads = 0
    while low < high and reads < SEARCH_READS_MAX:
        middle = (low + high) // 2
        reads += 1
        entry = await ml.read_entry(ml.ledgers.position_after_skipping(before, middle))
        try:
            new_enough = entry is not None and time_of(entry.data) >= timestamp_ms
        except ValueError:
            new_enough = False
        if new_enough:
            high = middle
        else:
            low = middle + 1
    if low > count:
        return None
    return ml.ledgers.position_after_skipping(before, low)


async def last_message(ml: ManagedLedger) -> tuple[Position, int]:
    """The last stored entry and the batch index of its last message (-1 for an entry of one message, an
    unreadable entry, or an empty topic, whose position has entry id -1)."""
    last = ml.last_confirmed
    if last.entry_id < 0:
        return last, -1
    entry = await ml.read_entry(last)
    if entry is None:
        return last, -1
    try:
        decoded = decode_entry(entry.data)
    except CorruptEntryError:
        return last, -1
    count = len(decoded.messages)
    return last, (count - 1 if decoded.batched and count > 1 else -1)

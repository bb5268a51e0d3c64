"""Planning micro-batches over a topic partition's ledgers (sans-IO): limits, splits and data-loss checks.

A partition's entries live in a sequence of ledgers (docs/upstream.md, Pulsar §3.7); ``GET .../internalStats``
lists them oldest first, the open ledger last with ``entries: 0`` and its live count in
``currentLedgerEntries`` (patched here as Pulsar's connector does in ``fixLastLedgerInInternalStat``).
:class:`PartitionState` is that list plus the last confirmed entry and the query's subscription cursor; the
functions below do the position arithmetic the managed ledger does (``LedgerList``), from the client side:

* :func:`next_entry` - the first stored entry after a consumed position (ledgers holding no entries are
  skipped; a position in a ledger that was trimmed away continues with the next stored ledger);
* :func:`backlog` and :func:`advance` - counting entries, for ``maxEntriesPerTrigger``
  (:func:`allocate` shares the limit between partitions, as Pulsar's ``forwardMessageId`` walks ``ledgers[]``
  by ``maxEntries / #topics`` but without leaving the share of a drained partition unused);
* :func:`segments` / :func:`splits` - a batch's range ``(start, end]`` cut into per-ledger segments, packed
  into Spark partitions of at most ``maxEntriesPerPartition`` entries and about ``maxBytesPerPartition``
  bytes (by each ledger's average entry size), so one big partition is read by several tasks at once;
* :func:`start_lost` - whether entries after the start were deleted before the query could read them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from magnetar.admin.spark.offsets import EARLIEST, Position


class StatsError(ValueError):
    """``internalStats`` without the fields the planner needs."""


@dataclass(frozen=True, slots=True)
class LedgerSpan:
    ledger_id: int
    entries: int
    size_bytes: int = 0

    @property
    def entry_bytes(self) -> float:
        """The ledger's average entry size (0 when unknown)."""
        return self.size_bytes / self.entries if self.entries > 0 else 0.0


@dataclass(frozen=True, slots=True)
class PartitionState:
    ledgers: tuple[LedgerSpan, ...]
    """Oldest first, with the live entry count of the open ledger."""
    last_confirmed: Position
    cursor: Position | None = None
    """The mark-delete position of the query's subscription (None: it does not exist)."""

    @property
    def latest(self) -> Position:
        """The end offset that covers every stored entry."""
        return self.last_confirmed


def _position(text: Any) -> Position:
    if not isinstance(text, str) or ":" not in text:
        raise StatsError(f"expected a position 'ledgerId:entryId', got {text!r}")
    ledger, _, entry = text.partition(":")
    try:
        return int(ledger), int(entry)
    except ValueError:
        raise StatsError(f"expected a position 'ledgerId:entryId', got {text!r}") from None


def state_from_stats(stats: Mapping[str, Any], subscription: str | None = None) -> PartitionState:
    """A :class:`PartitionState` from Pulsar's ``PersistentTopicInternalStats`` JSON."""
    try:
        last = _position(stats["lastConfirmedEntry"])
        listed = [
            (int(lg["ledgerId"]), int(lg["entries"]), int(lg.get("size", 0))) for lg in stats["ledgers"]
        ]
        current_entries = int(stats.get("currentLedgerEntries", 0))
        current_size = int(stats.get("currentLedgerSize", 0))
        cursors = stats.get("cursors") or {}
    except (KeyError, TypeError, ValueError) as exc:
        raise StatsError(f"internalStats lacks {exc}") from None
    ledgers = []
    for index, (ledger_id, listed_entries, listed_size) in enumerate(listed):
        is_last = index == len(listed) - 1
        entries = max(listed_entries, current_entries) if is_last else listed_entries
        size = max(listed_size, current_size) if is_last else listed_size
        if ledger_id == last[0]:
            entries = last[1] + 1  # exact: nothing past the last confirmed entry is readable
        elif ledger_id > last[0]:
            entries = 0
        ledgers.append(LedgerSpan(ledger_id, entries, size))
    cursor = None
    if subscription is not None and subscription in cursors:
        cursor = _position(cursors[subscription].get("markDeletePosition"))
    return PartitionState(tuple(ledgers), last, cursor)


# -- position arithmetic ---------------------------------------------------------------------------------


def next_entry(state: PartitionState, after: Position) -> Position | None:
    """The first stored entry after ``after``, or None when there is none (yet)."""
    for span in state.ledgers:
        if span.ledger_id < after[0] or span.entries == 0:
            continue
        if span.ledger_id == after[0]:
            if after[1] + 1 < span.entries:
                return span.ledger_id, after[1] + 1
            continue
        return span.ledger_id, 0
    return None


def backlog(state: PartitionState, after: Position, up_to: Position) -> int:
    """Stored entries ``p`` with ``after < p <= up_to``."""
    count = 0
    for span in state.ledgers:
        if span.ledger_id < after[0] or span.ledger_id > up_to[0]:
            continue
        first = after[1] + 1 if span.ledger_id == after[0] else 0
        last = min(up_to[1], span.entries - 1) if span.ledger_id == up_to[0] else span.entries - 1
        count += max(0, last - first + 1)
    return count


def advance(state: PartitionState, after: Position, count: int, up_to: Position) -> Position:
    """The position ``count`` entries after ``after``, at most ``up_to``; ``after`` when ``count`` is 0."""
    position = after
    remaining = count
    for segment in segments(state, after, up_to):
        if remaining <= 0:
            break
        size = segment.entries
        take = min(size, remaining)
        position = segment.ledger_id, segment.first_entry + take - 1
        remaining -= take
    return position


def allocate(backlogs: Mapping[str, int], limit: int) -> dict[str, int]:
    """Share ``limit`` entries between partitions: equal shares, a drained partition's rest to the others."""
    grants = dict.fromkeys(backlogs, 0)
    remaining = limit
    active = sorted(name for name, size in backlogs.items() if size > 0)
    while remaining > 0 and active:
        share = max(1, remaining // len(active))
        for name in list(active):
            give = min(share, backlogs[name] - grants[name], remaining)
            grants[name] += give
            remaining -= give
            if grants[name] == backlogs[name]:
                active.remove(name)
            if remaining == 0:
                break
    return grants


# -- splitting a batch -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Segment:
    """Entries ``first_entry..last_entry`` (inclusive) of one ledger."""

    ledger_id: int
    first_entry: int
    last_entry: int

    @property
    def entries(self) -> int:
        return self.last_entry - self.first_entry + 1


def segments(state: PartitionState, after: Position, up_to: Position) -> list[Segment]:
    """The stored entries of ``(after, up_to]``, one segment per ledger."""
    out = []
    for span in state.ledgers:
        if span.ledger_id < after[0] or span.ledger_id > up_to[0] or span.entries == 0:
            continue
        first = after[1] + 1 if span.ledger_id == after[0] else 0
        last = min(up_to[1], span.entries - 1) if span.ledger_id == up_to[0] else span.entries - 1
        if last >= first:
            out.append(Segment(span.ledger_id, first, last))
    return out


def entry_bytes(state: PartitionState) -> dict[int, float]:
    """Average entry size per ledger, for :func:`splits`."""
    return {span.ledger_id: span.entry_bytes for span in state.ledgers}


def splits(
    parts: Sequence[Segment],
    max_entries: int,
    max_bytes: int | None = None,
    entry_size: Mapping[int, float] | None = None,
) -> list[tuple[Segment, ...]]:
    """Cut big segments and pack small consecutive ones: each split holds at most ``max_entries`` entries
    and, by the ledgers' average entry size (``entry_size``; below one byte it means unknown), about
    ``max_bytes`` bytes (at least one entry)."""
    assert max_entries > 0
    sizes = entry_size or {}
    out: list[tuple[Segment, ...]] = []
    current: list[Segment] = []
    count, volume = 0, 0.0
    for segment in parts:
        average = sizes.get(segment.ledger_id, 0.0)
        first = segment.first_entry
        while first <= segment.last_entry:
            room = max_entries - count
            if max_bytes is not None and volume >= max_bytes:
                room = 0
            elif max_bytes is not None and average >= 1:
                room = min(room, int((max_bytes - volume) // average))
            if room <= 0 and current:
                out.append(tuple(current))
                current, count, volume = [], 0, 0.0
                continue
            take = max(1, min(segment.last_entry - first + 1, room))
            current.append(Segment(segment.ledger_id, first, first + take - 1))
            count, volume = count + take, volume + take * average
            first += take
    if current:
        out.append(tuple(current))
    return out


# -- data loss -------------------------------------------------------------------------------------------


def start_lost(state: PartitionState, start: Position) -> str | None:
    """Why entries right after ``start`` may have been deleted unread, or None when nothing was lost.

    Entries are deleted only as whole ledgers, oldest first. While the ledger holding ``start`` is stored,
    everything after it is too. Once it is gone, what followed it is known to be intact only if the query's
    subscription still protected it: the cursor's mark-delete is not past an unread entry (retention deletes
    nothing beyond the slowest cursor). Without that guarantee the loss is reported - the ledger ids in
    between are not known to the client, so "possible" is the honest word.
    """
    if start == EARLIEST or any(span.ledger_id == start[0] for span in state.ledgers):
        return None
    last = state.last_confirmed
    if start > last:
        return (
            f"the offset {start[0]}:{start[1]} is past the end of the topic "
            f"(last entry {last[0]}:{last[1]}); was the topic deleted and recreated?"
        )
    if start == last:
        return None
    following = next_entry(state, start)
    cursor = state.cursor
    if cursor is not None and (cursor <= start or (following is not None and cursor < following)):
        return None
    first = f"{following[0]}:{following[1]}" if following is not None else "none"
    return (
        f"ledger {start[0]} holding the last consumed entry {start[0]}:{start[1]} was deleted while the "
        f"query's subscription did not protect it; entries after it may have been lost (first stored entry "
        f"after it: {first})"
    )

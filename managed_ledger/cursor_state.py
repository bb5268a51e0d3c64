"""A cursor's positions and acknowledgements, without I/O (Pulsar's ``ManagedCursorImpl`` bookkeeping).

* ``mark_delete`` - every entry at or before it is acknowledged (the last *contiguous* ack).
* ``acked``       - entries after ``mark_delete`` acknowledged individually (the "ack holes" between them are
  the unacknowledged entries).
* ``read_position`` - the next entry to dispatch.
* ``acked_prefix`` - a batch-index acknowledgement: the first ``k`` messages of the entry right after
  ``mark_delete`` are acknowledged (a skip of N messages that ended inside an entry, as Pulsar acknowledges
  the batch indexes of a partly skipped batch); its other messages are still delivered. Dropped once the
  entry is acknowledged or mark-delete moves past it.

An individual ack that fills the hole right after ``mark_delete`` moves ``mark_delete`` forward through
every contiguous acknowledged range, across ledger boundaries (using the ledger list). ``mark_delete`` only
ever moves forward, except through an explicit reset (invariant assert). Persisting this state (cursor
ledger, metadata snapshot) is the managed ledger's job; this class only says what the state is.
"""

from __future__ import annotations

from magnetar.managed_ledger.ack_set import AckSet
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.position import Position


class InvalidAckError(ValueError):
    """An acknowledgement of a position that does not exist in the managed ledger."""


class CursorState:
    def __init__(self, ledgers: LedgerList, mark_delete: Position) -> None:
        self._ledgers = ledgers
        self.mark_delete = mark_delete
        self.acked = AckSet()
        self.read_position = ledgers.next_position(mark_delete)
        self.acked_prefix: tuple[Position, int] | None = None

    def prefix_acked(self, position: Position) -> int:
        """How many leading messages of the entry at ``position`` are acknowledged by batch index."""
        prefix = self.acked_prefix
        return prefix[1] if prefix is not None and prefix[0] == position else 0

    def ack_prefix(self, position: Position, messages: int) -> None:
        """Acknowledge the first ``messages`` messages of the entry right after mark-delete (batch indexes
        ``0 .. messages-1``); it stays unacknowledged as an entry."""
        if position != self._ledgers.next_position(self.mark_delete) or messages <= 0:
            raise InvalidAckError(f"a batch-index ack applies to the entry after {self.mark_delete}")
        self._check_exists(position)
        self.acked_prefix = (position, messages)

    # -- acknowledgements -------------------------------------------------------------------------------

    def ack(self, position: Position) -> bool:
        """Individually acknowledge one entry; True if the mark-delete position moved."""
        self._check_exists(position)
        if position <= self.mark_delete:
            return False
        self.acked.add(position)
        if self.acked_prefix is not None and self.acked_prefix[0] == position:
            self.acked_prefix = None
        return self._advance()

    def ack_cumulative(self, position: Position) -> bool:
        """Acknowledge everything up to and including ``position``; True if mark-delete moved."""
        self._check_exists(position)
        if position <= self.mark_delete:
            return False
        self._set_mark_delete(position)
        self._advance()
        return True

    def restore_acked(self, ranges: tuple[tuple[int, int, int], ...]) -> None:
        """Re-apply persisted individually-acked ranges (after recovery)."""
        for ledger_id, first, last in ranges:
            if Position(ledger_id, last) > self.mark_delete:
                self.acked.add_range(ledger_id, first, last)
        self.acked.remove_up_to(self.mark_delete)
        self._advance()

    def is_acked(self, position: Position) -> bool:
        return position <= self.mark_delete or position in self.acked

    # -- positions --------------------------------------------------------------------------------------

    def reset(self, new_read_position: Position) -> None:
        """Move the cursor so that ``new_read_position`` is the next entry delivered (rewind or forward).

        Everything before it counts as acknowledged, everything from it on as unacknowledged (Pulsar's
        ``resetCursor``: individually acked state is dropped).
        """
        self.acked = AckSet()
        self.acked_prefix = None
        self.mark_delete = self._ledgers.previous_position(new_read_position)
        self.read_position = new_read_position

    def skip(self, count: int) -> None:
        """Acknowledge the next ``count`` unacknowledged entries after mark-delete (Pulsar's skip N)."""
        position = self.mark_delete
        remaining = count
        while remaining > 0:
            target = self._ledgers.position_after_skipping(position, remaining)
            if target == position:
                break
            already = self._acked_between(position, target)
            remaining -= self._ledgers.entries_between(position, target) - already
            position = target
        if position > self.mark_delete:
            self._set_mark_delete(position)
            self._advance()

    def seek_read(self, position: Position) -> None:
        self.read_position = position

    def on_ledgers_trimmed(self) -> None:
        """Ledgers before the first stored entry were deleted: a cursor left behind moves to the start."""
        first = self._ledgers.first_position()
        if first is not None and self.mark_delete < self._ledgers.previous_position(first):
            self._set_mark_delete(self._ledgers.previous_position(first))
        if first is not None and self.read_position < first:
            self.read_position = first

    # -- figures ----------------------------------------------------------------------------------------

    def backlog(self) -> int:
        """Unacknowledged entries: stored entries after mark-delete minus individually acked ones."""
        last = self._ledgers.last_position()
        if last is None:
            return 0
        return max(0, self._ledgers.entries_between(self.mark_delete, last) - len(self.acked))

    # -- internals --------------------------------------------------------------------------------------

    def _acked_between(self, after: Position, up_to: Position) -> int:
        return sum(
            self.acked.count_in(ledger, max(first, 0), last)
            for ledger, first, last in self._ledger_spans(after, up_to)
        )

    def _ledger_spans(self, after: Position, up_to: Position) -> list[tuple[int, int, int]]:
        spans = []
        for info in self._ledgers:
            lid = info.ledger_id
            if lid < after.ledger_id or lid > up_to.ledger_id:
                continue
            first = after.entry_id + 1 if lid == after.ledger_id else 0
            last = up_to.entry_id if lid == up_to.ledger_id else info.entries - 1
            if last >= first:
                spans.append((lid, first, last))
        return spans

    def _advance(self) -> bool:
        moved = False
        while True:
            following = self._ledgers.next_position(self.mark_delete)
            run = self.acked.first_range_after(following)
            if run is None:
                break
            ledger_id, _, last = run
            self._set_mark_delete(Position(ledger_id, last))
            moved = True
        if self.read_position <= self.mark_delete:
            self.read_position = self._ledgers.next_position(self.mark_delete)
        return moved

    def _set_mark_delete(self, position: Position) -> None:
        assert position >= self.mark_delete, (
            f"mark-delete must not go back ({self.mark_delete} -> {position})"
        )
        self.mark_delete = position
        self.acked.remove_up_to(position)
        if self.acked_prefix is not None and self.acked_prefix[0] <= position:
            self.acked_prefix = None

    def _check_exists(self, position: Position) -> None:
        info = self._ledgers.get(position.ledger_id)
        if info is None or not 0 <= position.entry_id < info.entries:
            raise InvalidAckError(f"no entry at {position}")

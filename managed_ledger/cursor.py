"""Cursors: named positions in a managed ledger that read entries and take acknowledgements.

A durable cursor (a subscription) persists its state through :class:`~.cursor_store.CursorStore`, throttled
to ``mark_delete_rate_per_s`` (the managed ledger's own rate when its topic's persistence policy sets one, 0
meaning unthrottled): acknowledgements advance the mark-delete position in memory at once and mark the cursor
dirty, and one background flush per cursor writes the newest state; closing writes the last one whatever
the rate. A non-durable cursor (a reader) lives only in memory and does not hold back
trimming. Reads start at the read position and advance it; a tailing reader waits for new entries.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from magnetar.bookkeeper.client import BKError
from magnetar.managed_ledger.cursor_state import CursorState
from magnetar.managed_ledger.cursor_store import CursorSnapshot, CursorStore
from magnetar.managed_ledger.entry import Entry
from magnetar.managed_ledger.errors import ManagedLedgerError, ManagedLedgerFencedError
from magnetar.managed_ledger.message_index import MessageLocation, unacknowledged_messages
from magnetar.managed_ledger.position import Position

if TYPE_CHECKING:
    from magnetar.managed_ledger.ledger import ManagedLedger

log = logging.getLogger(__name__)


class ManagedCursor:
    def __init__(
        self,
        ml: ManagedLedger,
        name: str,
        state: CursorState,
        store: CursorStore | None,
        properties: dict[str, int] | None = None,
    ) -> None:
        self.ml = ml
        self.name = name
        self._state = state
        self._store = store
        self.properties = properties or {}
        self._dirty = False
        self._flush_scheduled = False
        self._last_persist_s = -1e9
        self._closed = False
        self._persist_failing = False
        self._persisting = trio.Lock()
        """Held while the store writes: the close's final snapshot waits for a flush in flight, so an older
        state (a failed position entry falls back to the metadata node) never lands after it."""
        self.messages_consumed_counter = 0
        self.last_active_ms = 0
        self._batch_unacked: dict[Position, int] = {}
        """Entries some of whose messages a consumer acknowledged one by one: the messages still unacked
        (in memory, as the subscription's batch-index acks; the entry is acknowledged once all are)."""

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def durable(self) -> bool:
        return self._store is not None

    @property
    def mark_delete(self) -> Position:
        return self._state.mark_delete

    @property
    def read_position(self) -> Position:
        return self.ml.ledgers.normalize(self._state.read_position)

    @property
    def acked_ranges(self) -> tuple[tuple[int, int, int], ...]:
        return tuple(self._state.acked.ranges())

    def individually_deleted_messages(self) -> str:
        return self._state.acked.render()

    # -- reads --------------------------------------------------------------------------------------------

    async def read_entries(self, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` entries from the read position; advances it past what was returned."""
        start = self.read_position
        entries = await self.ml.read_entries(start, max_entries)
        if entries:
            self._state.seek_read(self.ml.ledgers.next_position(entries[-1].position))
            self.messages_consumed_counter += len(entries)
        return entries

    async def read_entries_or_wait(self, max_entries: int) -> list[Entry]:
        """As :meth:`read_entries`, but wait for new entries when none are there yet.

        Returns an empty list only when the topic is terminated and fully read, or the ledger closed.
        """
        while True:
            entries = await self.read_entries(max_entries)
            if entries or self.is_at_end() or self._closed:
                return entries
            await self.ml.wait_for_entries_after(self.ml.ledgers.previous_position(self.read_position))

    def has_more_entries(self) -> bool:
        return self.read_position <= self.ml.last_confirmed

    def is_at_end(self) -> bool:
        """The topic is terminated and this cursor has read everything."""
        return self.ml.is_terminated and not self.has_more_entries()

    def rewind(self) -> None:
        """Re-read from the first unacknowledged entry (redelivery of everything unacked)."""
        self._state.seek_read(self.ml.ledgers.next_position(self._state.mark_delete))

    def seek(self, position: Position) -> None:
        self._state.seek_read(position)

    # -- acknowledgements -------------------------------------------------------------------------------

    def ack(self, position: Position) -> None:
        if self._batch_unacked:
            self._batch_unacked.pop(position, None)
        if self._state.ack(position) or self._state.acked.range_count:
            self._mark_dirty()

    def ack_cumulative(self, position: Position) -> None:
        if self._state.ack_cumulative(position):
            self._mark_dirty()
            if self._batch_unacked:
                self._batch_unacked = {p: n for p, n in self._batch_unacked.items() if p > position}

    def mark_delete_with_properties(self, position: Position, properties: dict[str, int]) -> None:
        """Acknowledge everything up to ``position`` and make ``properties`` the cursor's (Pulsar's
        ``asyncMarkDelete(position, properties)``): both are persisted together, in one position entry, so a
        recovery finds the properties that go with its mark-delete (never newer ones with an older
        position). ``position`` may be at or before the current mark-delete (only the properties change)."""
        if position > self._state.mark_delete:
            self._state.ack_cumulative(position)
            if self._batch_unacked:
                self._batch_unacked = {p: n for p, n in self._batch_unacked.items() if p > position}
        self.properties = dict(properties)
        self._mark_dirty()

    def is_acked(self, position: Position) -> bool:
        return self._state.is_acked(position)

    def reset(self, position: Position) -> None:
        """Make ``position`` the next entry delivered (Pulsar's reset cursor)."""
        self._state.reset(self.ml.ledgers.normalize(position))
        self._mark_dirty()

    def skip(self, count: int) -> None:
        self._state.skip(count)
        self._mark_dirty()

    def clear_backlog(self) -> None:
        last = self.ml.last_confirmed
        if last.entry_id >= 0 and last > self._state.mark_delete:
            self._state.ack_cumulative(last)
            self._mark_dirty()

    def backlog(self) -> int:
        return self._state.backlog()

    def message_backlog(self) -> int:
        """Unacknowledged messages (an entry holding a batch counts its messages), from the message indexes
        of the positions, without reading entries (:func:`.message_index.unacknowledged_messages`)."""
        unacked = unacknowledged_messages(
            self.ml.message_index,
            self._state.mark_delete,
            self.ml.ledgers.last_position(),
            self._state.acked.ranges(),
        )
        prefix = self._state.acked_prefix
        if prefix is not None:
            unacked -= prefix[1]
        if self._batch_unacked:
            unacked -= self._batch_acked_messages()
        return max(0, unacked)

    def note_batch_unacked(self, position: Position, remaining: int) -> None:
        """A consumer acknowledged some messages of the entry at ``position`` by batch index; ``remaining``
        of them are not acknowledged yet (the backlog counts only those)."""
        self._batch_unacked[position] = remaining

    def forget_batch_acks(self) -> None:
        """The subscription dropped its batch-index acks (a cursor moved or reset): redelivered whole."""
        self._batch_unacked.clear()

    def _batch_acked_messages(self) -> int:
        index = self.ml.message_index
        acked = 0
        for position, remaining in list(self._batch_unacked.items()):
            if self._state.is_acked(position):
                del self._batch_unacked[position]
                continue
            try:
                stored = index.messages_in(position) - self._state.prefix_acked(position)
            except ValueError:  # trimmed
                del self._batch_unacked[position]
                continue
            acked += max(0, stored - remaining)
        return acked

    def prefix_acked(self, position: Position) -> int:
        """How many leading messages of the entry at ``position`` a partial skip acknowledged (their batch
        indexes ``0 .. k-1``: they are not delivered again)."""
        return self._state.prefix_acked(position)

    def _index_after_skipping(self, count: int) -> int:
        """The index of the message that follows the next ``count`` unacknowledged ones (the acknowledged
        ones between them - entries acked individually - are passed over, not counted)."""
        index = self.ml.message_index
        state = self._state
        start = index.index_after(state.mark_delete) + (state.acked_prefix[1] if state.acked_prefix else 0)
        target, remaining = start, count
        for ledger_id, first, last in state.acked.ranges():
            lo = index.index_after(Position(ledger_id, first - 1))
            hi = index.index_after(Position(ledger_id, last))
            if hi <= target:
                continue
            if target + remaining < lo:
                break
            remaining -= max(0, lo - target)
            target = hi
        return target + remaining

    async def locate_unacked(self, n: int) -> MessageLocation | None:
        """Where the ``n``-th unacknowledged message (1 = the first) is stored (Pulsar's peek position n, in
        messages); None past the end."""
        if n < 1:
            return None
        target = self._index_after_skipping(n - 1)
        if target >= self.ml.message_index.next_index:
            return None
        return await self.ml.locate_message(target)

    async def skip_messages(self, count: int) -> int:
        """Acknowledge the next ``count`` unacknowledged *messages* (Pulsar's skip N, an entry holding a batch
        counting its messages); a skip that ends inside an entry acknowledges that entry's first messages by
        batch index. Returns how many were skipped."""
        if count <= 0:
            return 0
        index = self.ml.message_index
        state = self._state
        target = self._index_after_skipping(count)
        before = self.message_backlog()
        if target >= index.next_index:
            self.clear_backlog()
        else:
            location = await self.ml.locate_message(target)
            if location is None:
                return 0
            previous = self.ml.ledgers.previous_position(location.position)
            if previous > state.mark_delete:
                state.ack_cumulative(previous)
            if location.offset > 0 and location.position == self.ml.ledgers.next_position(state.mark_delete):
                state.ack_prefix(location.position, location.offset)
            self._mark_dirty()
        return before - self.message_backlog()

    def on_ledgers_trimmed(self) -> None:
        self._state.on_ledgers_trimmed()

    # -- persistence ------------------------------------------------------------------------------------

    def snapshot(self) -> CursorSnapshot:
        prefix = self._state.acked_prefix
        acked_prefix = None if prefix is None else (prefix[0].ledger_id, prefix[0].entry_id, prefix[1])
        return CursorSnapshot(self._state.mark_delete, self.acked_ranges, dict(self.properties), acked_prefix)

    def _mark_dirty(self) -> None:
        self.last_active_ms = self.ml.now_ms()
        if self._store is None:
            return
        self._dirty = True
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.ml.spawn(self._flush_soon, f"cursor flush {self.name}")

    async def _flush_soon(self) -> None:
        try:
            rate = self.ml.mark_delete_rate_per_s
            if rate is None:
                rate = self.ml.settings.mark_delete_rate_per_s
            wait = self._last_persist_s + 1.0 / rate - trio.current_time() if rate > 0 else 0.0
            if wait > 0:
                await trio.sleep(wait)
            await self.flush()
        finally:
            self._flush_scheduled = False
        if self._dirty and not self._closed:
            self._mark_dirty()

    async def flush(self) -> None:
        """Persist the current state now if it changed."""
        if self._store is None or not self._dirty or self._closed:
            return
        self._dirty = False
        self._last_persist_s = trio.current_time()
        try:
            async with self._persisting:
                if self.closed:  # closed while waiting: the final snapshot holds this state and newer
                    return
                await self._store.persist(self.snapshot())
        except ManagedLedgerFencedError as exc:
            self.ml.fence_from_cursor(str(exc))
        except (BKError, ManagedLedgerError) as exc:
            # once per run of failures (a metadata outage fails every flush until it ends)
            level = logging.INFO if self._persist_failing else logging.WARNING
            log.log(level, "cursor %s/%s: persisting failed (retried): %s", self.ml.name, self.name, exc)
            self._persist_failing = True
            self._dirty = True
        else:
            if self._persist_failing:
                log.info("cursor %s/%s: persisted again", self.ml.name, self.name)
            self._persist_failing = False
        self.ml.on_cursor_persisted(self)

    async def close(self, *, persist: bool) -> None:
        if self._closed:
            return
        self._closed = True
        if self._store is not None and persist:
            try:
                async with self._persisting:  # after a flush in flight (see ``_persisting``)
                    await self._store.close(self.snapshot())
            except (BKError, ManagedLedgerError) as exc:
                log.warning("cursor %s/%s: final snapshot failed: %s", self.ml.name, self.name, exc)

    async def delete(self) -> None:
        self._closed = True
        if self._store is not None:
            await self._store.delete()

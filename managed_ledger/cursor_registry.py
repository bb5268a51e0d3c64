"""The cursors of a managed ledger: opening, recovering, deleting them, and the slowest one.

Theory of operation. A managed ledger has named *durable* cursors (subscriptions, persisted through
:class:`~.cursor_store.CursorStore`) and unnamed *non-durable* ones (readers, in memory only). The registry
owns both sets:

* **Opening.** A durable cursor is created at the latest entry (or the earliest one still stored) by
  CAS-creating its store; if the name exists already (another open, an earlier owner) its store is recovered
  instead. Concurrent opens of one name coalesce on the first one: two creations racing would each take the
  cursor over from the other (the loser's compare-and-set fails, which fences its cursor store), so they must
  not overlap. A fenced or closed managed ledger opens no cursor.
* **Recovery.** The open sequence (:mod:`.opener`) attaches the cursors it recovered, each rebuilt from its
  snapshot (mark-delete position, acknowledged ranges, acknowledged prefix of a batch) against the ledgers
  still stored.
* **The slowest cursor.** Retention may delete only what every durable cursor consumed: the minimum
  mark-delete position bounds the trim (:mod:`.trimmer`). When a persisted cursor moves that minimum into
  another ledger, the factory's retention hook hears of it. Non-durable cursors hold nothing back.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import trio

from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.cursor_state import CursorState, InvalidAckError
from magnetar.managed_ledger.cursor_store import CursorSnapshot, CursorStore
from magnetar.managed_ledger.errors import (
    CursorNotFoundError,
    ManagedLedgerClosedError,
    MetadataConflictError,
)
from magnetar.managed_ledger.ledger_state import State
from magnetar.managed_ledger.position import Position

if TYPE_CHECKING:
    from magnetar.managed_ledger.context import Context
    from magnetar.managed_ledger.ledger import ManagedLedger


class CursorRegistry:
    """The durable and non-durable cursors of one managed ledger."""

    def __init__(self, ml: ManagedLedger, ctx: Context) -> None:
        self._ml = ml
        self._ctx = ctx
        self.durable: dict[str, ManagedCursor] = {}
        self._opening: dict[str, trio.Event] = {}
        """Durable cursors being created or recovered: a concurrent open of the same name waits for it."""
        self._last_slowest_ledger = -1
        self.non_durable: list[ManagedCursor] = []

    async def open_cursor(self, name: str, *, start_at_earliest: bool = False) -> ManagedCursor:
        """Open (or create) a durable cursor; a new one starts at the latest or the earliest entry.

        Concurrent opens of one name coalesce: the first creates (or recovers) the cursor, the others wait
        for it and get the same cursor (see the module's docstring)."""
        ml = self._ml
        while True:
            existing = self.durable.get(name)
            if existing is not None:
                return existing
            opening = self._opening.get(name)
            if opening is None:
                break
            await opening.wait()  # then look again: the first open may have failed
        if ml.state in (State.FENCED, State.CLOSED):
            raise ManagedLedgerClosedError(f"managed ledger {ml.name} is {ml.state.value}")
        done = self._opening[name] = trio.Event()
        try:
            return await self._create_or_recover_cursor(name, start_at_earliest)
        finally:
            del self._opening[name]
            done.set()

    async def _create_or_recover_cursor(self, name: str, start_at_earliest: bool) -> ManagedCursor:
        ml, ctx = self._ml, self._ctx
        mark = self._initial_mark_delete(start_at_earliest)
        snapshot = CursorSnapshot(mark, (), {})
        try:
            store = await CursorStore.create(
                ml.name, name, ctx.bk, ctx.meta, ctx.settings, snapshot, ml.now_ms()
            )
        except MetadataConflictError:
            recovered = await CursorStore.recover(ml.name, name, ctx.bk, ctx.meta, ctx.settings, ml.now_ms())
            if recovered is None:
                raise
            store, snapshot = recovered
        cursor = ManagedCursor(ml, name, self._cursor_state(snapshot), store, snapshot.properties)
        self.durable[name] = cursor
        return cursor

    def open_non_durable_cursor(self, start: Position) -> ManagedCursor:
        """A reader's cursor: in memory only, starting so that ``start`` is the first entry read."""
        ledgers = self._ml.ledgers
        state = CursorState(ledgers, ledgers.previous_position(ledgers.normalize(start)))
        cursor = ManagedCursor(self._ml, f"reader-{len(self.non_durable)}", state, None)
        self.non_durable.append(cursor)
        return cursor

    def close_non_durable_cursor(self, cursor: ManagedCursor) -> None:
        if cursor in self.non_durable:
            self.non_durable.remove(cursor)

    async def delete_cursor(self, name: str) -> None:
        cursor = self.durable.pop(name, None)
        if cursor is None:
            raise CursorNotFoundError(f"cursor {name} does not exist on {self._ml.name}")
        await cursor.delete()
        self._ctx.on_trim_candidate(self._ml)

    def attach_recovered_cursor(self, name: str, store: CursorStore, snapshot: CursorSnapshot) -> None:
        state = self._cursor_state(snapshot)
        self.durable[name] = ManagedCursor(self._ml, name, state, store, snapshot.properties)

    def _cursor_state(self, snapshot: CursorSnapshot) -> CursorState:
        state = CursorState(self._ml.ledgers, snapshot.mark_delete)
        state.restore_acked(snapshot.acked_ranges)
        state.on_ledgers_trimmed()
        if snapshot.acked_prefix is not None:
            ledger_id, entry_id, messages = snapshot.acked_prefix
            with contextlib.suppress(InvalidAckError):
                state.ack_prefix(Position(ledger_id, entry_id), messages)
        return state

    def _initial_mark_delete(self, earliest: bool) -> Position:
        ml = self._ml
        if not earliest:
            return ml.last_confirmed
        first = ml.ledgers.first_position()
        if first is None:
            return ml.last_confirmed
        return ml.ledgers.previous_position(first)

    def on_cursor_persisted(self, cursor: ManagedCursor) -> None:
        slowest = self.slowest_durable_mark_delete()
        ledger = slowest.ledger_id if slowest is not None else -1
        if ledger != self._last_slowest_ledger:
            self._last_slowest_ledger = ledger
            self._ctx.on_trim_candidate(self._ml)

    def slowest_durable_mark_delete(self) -> Position | None:
        marks = [c.mark_delete for c in self.durable.values()]
        return min(marks) if marks else None

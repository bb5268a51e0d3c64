"""The add path of a managed ledger: appends, pipelined to the current ledger and acknowledged in order.

Theory of operation (docs/upstream.md, Pulsar §3, the add half of Pulsar's ``ManagedLedgerImpl``):

* **Appends.** An add goes straight to the current ledger when the managed ledger is ``LEDGER_OPENED``,
  nothing is queued ahead of it and the ledger has room (``max_entries_per_ledger`` adds *pushed* to it, plus
  ``rollover_deferred_entries_max`` while a rollover is deferred); otherwise it queues, in order, until the
  switch to the next ledger (:mod:`.ledger_switch`) flushes the queue. Adds are pipelined; the client
  acknowledges them strictly in entry order, so positions ``(ledgerId, entryId)`` are acknowledged in order
  too and ``last_confirmed`` follows the acks. An acknowledged entry is counted in the message index, put in
  the entry cache and announced to tailing readers; the add that fills the ledger (or an ack that finds it
  due by size or age) starts the rollover.
* **Message indexes.** With entry indexing configured, each entry is stamped, as it is sent, with the index
  of its first message: the next index after the acknowledged entries plus the messages still in flight.
  The prefix (:mod:`.entry_prefix`) goes to the client as a part in front of the entry: never joined.
* **Back-pressure.** :meth:`AddPipeline.wait_for_capacity` holds callers while ``pending_adds_max`` adds are
  queued or in flight; every add that completes (acknowledged or failed) and every queue failed frees
  capacity.
* **Failures.** An add to a fenced ledger (another broker recovered it) fences the managed ledger: that add
  and every pending and future one fail with :class:`ManagedLedgerFencedError`. Any other failure fails that
  add; if it went to the current ledger, the adds queued behind it fail too (their outcome is unknown, so they
  are not silently re-sent) and the managed ledger moves to ``WRITE_FAILED``; the next add starts a new
  ledger. An add while the rollover is deferred
  and the current ledger is past its bound fails at once with :class:`RolloverDeferredError`. An add the
  ledger refuses before sending it (over the client's ``entry_payload_bytes_max``, no room) fails alone, at
  once, through its callback (:class:`ManagedLedgerWriteError`); the ledger goes on.

The pipeline owns the queue and the in-flight counts; the current ledger, the state (changed only through the
ledger's checked transitions) and ``last_confirmed`` belong to the :class:`~.ledger.ManagedLedger`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from magnetar.bookkeeper.client import BKError, LedgerFencedError
from magnetar.managed_ledger.entry_prefix import SIZE as PREFIX_SIZE
from magnetar.managed_ledger.entry_prefix import encode_prefix
from magnetar.managed_ledger.errors import (
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerTerminatedError,
    ManagedLedgerWriteError,
    RolloverDeferredError,
)
from magnetar.managed_ledger.ledger_state import WRITABLE, State
from magnetar.managed_ledger.position import Position

if TYPE_CHECKING:
    from magnetar.managed_ledger.context import Context
    from magnetar.managed_ledger.ledger import ManagedLedger

log = logging.getLogger(__name__)

AddCallback = Callable[[Position | ManagedLedgerError], None]


@dataclass(slots=True)
class _PendingAdd:
    data: bytes
    callback: AddCallback
    messages: int = 1
    first_index: int | None = None
    """The index its prefix names (None: stored without one); the prefix is sent in front of ``data``."""

    @property
    def stored_size(self) -> int:
        return len(self.data) if self.first_index is None else len(self.data) + PREFIX_SIZE


class AddPipeline:
    """The adds of one managed ledger: queued, in flight, acknowledged."""

    def __init__(self, ml: ManagedLedger, ctx: Context) -> None:
        self._ml = ml
        self._ctx = ctx
        self._settings = ctx.settings
        self.pushed = 0
        """Adds sent to the current ledger (reset when a new ledger becomes current)."""
        self.inflight = 0
        self._pending: deque[_PendingAdd] = deque()
        self._inflight_messages = 0
        """Messages of the adds sent and not acknowledged yet: the next add's first index follows them."""
        self._inflight_drained = trio.Event()
        # Parking lots rather than events: most adds complete with nobody waiting, and an empty lot's wake-up
        # is a length check, where an event had to be replaced at every add.
        self._entries_added = trio.lowlevel.ParkingLot()
        self._capacity_freed = trio.lowlevel.ParkingLot()

    @property
    def pending_adds(self) -> int:
        return len(self._pending) + self.inflight

    async def add_entry(self, data: bytes, messages: int = 1) -> Position:
        """Append one entry holding ``messages`` messages and wait for its acknowledgement."""
        await self.wait_for_capacity()
        done = trio.Event()
        outcome: list[Position | ManagedLedgerError] = []

        def callback(result: Position | ManagedLedgerError) -> None:
            outcome.append(result)
            done.set()

        self.add_entry_nowait(data, callback, messages)
        await done.wait()
        result = outcome[0]
        if isinstance(result, ManagedLedgerError):
            raise result
        return result

    async def wait_for_capacity(self) -> None:
        """Back-pressure: wait while ``pending_adds_max`` adds are queued or in flight."""
        while self.pending_adds >= self._settings.pending_adds_max and self._ml.state in WRITABLE:
            await self._capacity_freed.park()

    def add_entry_nowait(self, data: bytes, callback: AddCallback, messages: int = 1) -> None:
        """Append one entry holding ``messages`` messages (a batch: more than one); ``callback`` gets its
        position or the error, in add order.

        Callers that add without waiting must respect :meth:`wait_for_capacity` themselves.
        """
        ml = self._ml
        error = self._refusal()
        if error is not None:
            callback(error)
            return
        if messages < 1:
            raise ValueError(f"an entry holds at least one message, not {messages}")
        op = _PendingAdd(data, callback, messages)
        if ml.state is State.LEDGER_OPENED and not self._pending and self.has_room():
            self._send(op)
            return
        if ml.rollover_deferred and ml.state is State.LEDGER_OPENED and not self.has_room():
            callback(self.deferred_cap_error())
            return
        self._pending.append(op)
        if ml.state is State.WRITE_FAILED:
            ml.switcher.start_new_ledger()  # drains the failed ledger's in-flight adds first

    def _refusal(self) -> ManagedLedgerError | None:
        name, state = self._ml.name, self._ml.state
        if state is State.FENCED:
            return ManagedLedgerFencedError(f"managed ledger {name} is fenced")
        if state is State.TERMINATED:
            return ManagedLedgerTerminatedError(f"managed ledger {name} is terminated")
        if state is State.CLOSED:
            return ManagedLedgerClosedError(f"managed ledger {name} is closed")
        return None

    def has_room(self) -> bool:
        limit = self._settings.max_entries_per_ledger
        if self._ml.rollover_deferred:
            limit += self._settings.rollover_deferred_entries_max
        return self.pushed < limit

    def deferred_cap_error(self) -> RolloverDeferredError:
        s, ml = self._settings, self._ml
        return RolloverDeferredError(
            f"managed ledger {ml.name}: ledger {ml.current_ledger_id} holds max_entries_per_ledger + "
            f"rollover_deferred_entries_max = {s.max_entries_per_ledger + s.rollover_deferred_entries_max} "
            "entries and no new ledger can be created while the metadata store is unavailable; retry later"
        )

    def _send(self, op: _PendingAdd) -> None:
        handle = self._ml.current
        assert handle is not None
        self.pushed += 1
        self.inflight += 1
        ledger_id = handle.ledger_id
        payload: bytes | tuple[bytes, bytes] = op.data
        if self._ctx.entry_indexing is not None:
            op.first_index = self._ml.message_index.next_index + self._inflight_messages
            payload = (encode_prefix(op.first_index), op.data)  # sent as two parts: the entry is not copied
        self._inflight_messages += op.messages

        def on_complete(result: int | BaseException) -> None:
            self._on_add_complete(ledger_id, op, result)

        try:
            handle.add_entry_nowait(payload, on_complete)
        except BKError as exc:  # refused before it was sent (too large, no room): that add fails, alone
            self.pushed -= 1
            self.inflight -= 1
            self._inflight_messages -= op.messages
            log.warning("managed ledger %s: add refused by ledger %d: %s", self._ml.name, ledger_id, exc)
            op.callback(ManagedLedgerWriteError(f"add refused: {exc}"))
            self._free_capacity()
            if self.inflight == 0:
                self._inflight_drained.set()
            return
        if self.pushed >= self._settings.max_entries_per_ledger:
            self._ml.switcher.start_rollover()

    def _on_add_complete(self, ledger_id: int, op: _PendingAdd, result: int | BaseException) -> None:
        ml = self._ml
        self.inflight -= 1
        self._inflight_messages -= op.messages
        if isinstance(result, BaseException):
            self._on_add_failed(ledger_id, op, result)
        else:
            position = Position(ledger_id, result)
            info = ml.ledgers.get(ledger_id)
            if info is not None:
                size_bytes = info.size_bytes + op.stored_size
                ml.ledgers.update(info.grown(result + 1, size_bytes))
            assert position > ml.last_confirmed, f"acks out of order: {ml.last_confirmed} -> {position}"
            ml.last_confirmed = position
            ml.entries_added_counter += 1
            ml.message_index.append(position, op.messages)
            self._ctx.cache.put(ml.name, position, op.data, op.first_index)
            op.callback(position)
            self.signal_entries_added()
            ml.switcher.check_rollover()
        self._free_capacity()
        if self.inflight == 0:
            self._inflight_drained.set()

    def _on_add_failed(self, ledger_id: int, op: _PendingAdd, error: BaseException) -> None:
        ml = self._ml
        if isinstance(error, LedgerFencedError):
            ml.fence(f"ledger {ledger_id} was fenced by another owner")
            op.callback(ManagedLedgerFencedError(f"managed ledger {ml.name} is fenced"))
            return
        log.warning("managed ledger %s: add to ledger %d failed: %s", ml.name, ledger_id, error)
        failure = ManagedLedgerWriteError(f"add failed, outcome unknown: {error}")
        op.callback(failure)
        if ml.state is State.LEDGER_OPENED and ml.current_ledger_id == ledger_id:
            # Adds queued behind the failed one fail too, so no add made after it can succeed before a
            # producer hears of the failure (the client fails the in-flight ones the same way).
            ml._move(State.WRITE_FAILED, f"an add to ledger {ledger_id} failed")
            self.fail_pending(failure)

    def signal_entries_added(self) -> None:
        if self._entries_added:
            self._entries_added.unpark_all()

    def _free_capacity(self) -> None:
        if self._capacity_freed and self.pending_adds < self._settings.pending_adds_max:
            self._capacity_freed.unpark_all()

    async def wait_for_entries_after(self, position: Position) -> None:
        """Return once an entry after ``position`` exists (or the ledger stops being writable)."""
        ml = self._ml
        while ml.last_confirmed <= position and ml.state not in (State.CLOSED, State.FENCED):
            if ml.is_terminated:
                return
            await self._entries_added.park()

    async def drain_inflight(self) -> None:
        """Wait until every add sent has been acknowledged or failed."""
        while self.inflight > 0:
            self._inflight_drained = trio.Event()
            await self._inflight_drained.wait()

    def flush_pending(self) -> None:
        """Send the queued adds, in order, while the current ledger takes them."""
        while self._pending and self._ml.state is State.LEDGER_OPENED and self.has_room():
            self._send(self._pending.popleft())

    def fail_pending(self, error: ManagedLedgerError) -> None:
        """Fail every queued add with ``error`` (the in-flight ones complete through the client)."""
        pending, self._pending = self._pending, deque()
        for op in pending:
            op.callback(error)
        self._free_capacity()

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

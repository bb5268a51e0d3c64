"""A managed ledger: one topic's storage as a sequence of BookKeeper ledgers plus named cursors.

Theory of operation (docs/upstream.md, Pulsar §3, Pulsar's ``ManagedLedgerImpl``):

* **Appends.** Adds go to the current ledger, pipelined; the client acknowledges them strictly in entry order,
  so positions ``(ledgerId, entryId)`` are acknowledged in order too. ``last_confirmed`` follows the acks.
* **Rollover.** Once ``max_entries_per_ledger`` adds were *pushed* to the current ledger (or it is due by size
  or age, checked on acks and by the periodic idle check), the next ledger is created and the ledger list
  CAS-written to name it, while the current ledger is still written; adds past the entry cap queue meanwhile.
  In that list the current ledger is listed as *open* (no entry count), so whoever opens the managed ledger
  recovers it as well as the next one: an entry added to the current ledger is found whether the write
  happened or not. Then the switch: adds queue, the in-flight ones are acknowledged, the current ledger is
  closed (a failure to close it is harmless: it is listed as open, and a reader recovers it), the queued adds
  go to the next ledger in order, and a last list write records the closed ledger's entry count. Nothing is
  lost or reordered across a rollover.
* **Deferred rollover** (the metadata store is unavailable). Creating a ledger and writing the list need
  the metadata store; appending to an open ledger does not. So when the next ledger cannot be created or
  listed (the store reports itself unhealthy, a call failed, or creating takes longer than
  ``rollover_create_wait_ms``), the rollover is *deferred*: the current ledger goes on taking entries past its
  cap, up to ``rollover_deferred_entries_max`` more, and beyond that adds fail at once with
  :class:`RolloverDeferredError` (the producer's error result; nothing was written). It is retried every
  ``rollover_retry_interval_ms`` once the store is healthy again, with a random share of that interval first
  so that the topics of a broker do not all roll at once. A list write whose outcome is unknown (the
  connection dropped while it was in flight) is settled before the next one (:mod:`.list_writer`); adds go on
  to the current ledger meanwhile, since both possible lists cover it. Safety does not depend on the store: a
  broker that took the topic over recovered (fenced) the current ledger, so the adds of this one fail with a
  fenced error instead of being acknowledged.
* **Failures.** If the client reports the ledger fenced (another broker recovered it), or a metadata write
  loses a compare-and-set race, this instance is *fenced*: every pending and future add fails with
  :class:`ManagedLedgerFencedError` and it never writes again. Any other add failure fails that add and the
  adds behind it (their outcome is unknown, so they are not silently re-sent); the next add opens a new
  ledger.
* **Trimming.** :meth:`ManagedLedger.trim` applies the pure rule of :mod:`.trim` and deletes the chosen
  ledgers: first from the ledger list (CAS), then from the bookies. Deletions that fail are retried by the
  next trim.

Background work (rollover, cursor persistence) runs in this ledger's own nursery, cancelled on close.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import trio

from magnetar.bookkeeper.client import BKError, BookKeeper, LedgerFencedError, LedgerHandle
from magnetar.bookkeeper.metadata import MetadataHealth
from magnetar.bookkeeper.runtime import Clock
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.cursor_state import CursorState, InvalidAckError
from magnetar.managed_ledger.cursor_store import CursorSnapshot, CursorStore
from magnetar.managed_ledger.entry import Entry
from magnetar.managed_ledger.entry_cache import EntryCache
from magnetar.managed_ledger.errors import (
    CursorNotFoundError,
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerTerminatedError,
    ManagedLedgerWriteError,
    MetadataConflictError,
    MetadataUnavailableError,
    RolloverDeferredError,
)
from magnetar.managed_ledger.info import LedgerInfo, ManagedLedgerInfo
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.ledger_state import STOPPED, WRITABLE, State, initial_state, move
from magnetar.managed_ledger.list_writer import LedgerListWriter
from magnetar.managed_ledger.message_index import EntryIndexing, MessageIndex, MessageLocation
from magnetar.managed_ledger.meta_store import MetaStore
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.reader import EntryReader
from magnetar.managed_ledger.rollover import jittered_max_time_ms, ledger_is_full
from magnetar.managed_ledger.settings import ManagedLedgerSettings
from magnetar.managed_ledger.trim import RetentionPolicy, ledgers_to_trim

log = logging.getLogger(__name__)

AddCallback = Callable[[Position | ManagedLedgerError], None]


@dataclass(slots=True)
class _PendingAdd:
    data: bytes
    callback: AddCallback
    messages: int = 1


@dataclass(frozen=True, slots=True)
class Context:
    """What every managed ledger of a factory shares."""

    bk: BookKeeper
    meta: MetaStore
    settings: ManagedLedgerSettings
    cache: EntryCache
    clock: Clock
    rng: random.Random
    on_trim_candidate: Callable[[ManagedLedger], None]
    """Called after a rollover and when the slowest cursor enters a new ledger (retention may trim)."""
    health: MetadataHealth | None = None
    """The metadata store's health: rollovers are deferred while it is unhealthy (None: no such signal)."""
    entry_indexing: EntryIndexing | None = None
    """How entries carry their first message's index (None: they carry none; counts live in memory)."""


async def create_bk_ledger(ctx: Context, name: str) -> LedgerHandle:
    """A new ledger for managed ledger ``name`` (its name recorded in the ledger's custom metadata)."""
    s = ctx.settings
    with trio.fail_after(s.metadata_operation_timeout_s):
        return await ctx.bk.create_ledger(
            ensemble_size=s.ensemble_size,
            write_quorum=s.write_quorum,
            ack_quorum=s.ack_quorum,
            digest_type=s.digest_type,
            password=s.password,
            custom_metadata={"pulsar/managed-ledger": name.encode()},
        )


class ManagedLedger:
    def __init__(
        self,
        name: str,
        ctx: Context,
        ledgers: LedgerList,
        info_version: int,
        current: LedgerHandle | None,
        terminated_at: Position | None,
        properties: dict[str, str],
        next_index: int | None = None,
    ) -> None:
        self.name = name
        self._ctx = ctx
        self._settings = ctx.settings
        self.ledgers = ledgers
        self._list_writer = LedgerListWriter(
            name, ctx.meta, info_version, ctx.settings.metadata_operation_timeout_s
        )
        self._current = current
        self._properties = properties
        self._terminated_at = terminated_at
        self.state = initial_state(current is not None, terminated_at is not None)
        last = ledgers.last_position()
        first_current = current.ledger_id if current is not None else -1
        self.last_confirmed = last if last is not None else Position(first_current, -1)
        self._pushed = 0
        self._inflight = 0
        self._pending: deque[_PendingAdd] = deque()
        self._ledger_created_ms = ctx.clock.time_ms()
        self._max_age_ms = self._jittered_max_age()
        self._metadata_lock = trio.Lock()
        self._inflight_drained = trio.Event()
        self._entries_added = trio.Event()
        self._capacity_freed = trio.Event()
        self._rolling = False
        self._rollover_done = trio.Event()
        self._rollover_done.set()
        self._next: LedgerHandle | None = None
        """The next ledger while a rollover lists it and the current ledger is still written."""
        self._deferred_since_ms: int | None = None
        """Set while the rollover is deferred: the current ledger takes entries past its cap."""
        self.rollovers_deferred_total = 0
        self._undeleted_ledgers: set[int] = set()
        self.cursors: dict[str, ManagedCursor] = {}
        self._cursors_opening: dict[str, trio.Event] = {}
        """Durable cursors being created or recovered: a concurrent open of the same name waits for it."""
        self._last_slowest_ledger = -1
        self.non_durable_cursors: list[ManagedCursor] = []
        self.entries_added_counter = 0
        self.message_index = _message_index(ledgers, next_index)
        """The first message index of every stored entry (counts in messages), rebuilt from the ledgers'
        first indexes in the metadata (a ledger without one counts one message per entry)."""
        if current is not None:
            self.message_index.open_ledger(current.ledger_id)
        self._inflight_messages = 0
        """Messages of the adds sent and not acknowledged yet: the next add's first index follows them."""
        self.ledger_switches_counter = 0
        """New ledgers started since this instance opened (rollovers, and recoveries from a failed add)."""
        self.last_ledger_created_ms = self._ledger_created_ms
        self.reader = EntryReader(
            name,
            ctx.bk,
            ctx.cache,
            self._settings.password,
            self._settings.read_handles_cached_max,
            lambda: self._current,
        )
        self._nursery: trio.Nursery | None = None
        self._closed = trio.Event()

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The ledger's background tasks; started by the factory, ended by :meth:`close`."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await self._closed.wait()
            nursery.cancel_scope.cancel()

    def spawn(self, fn: Callable[[], Awaitable[object]], name: str) -> None:
        """Run ``fn`` in this ledger's nursery (dropped once the ledger is closed)."""
        if self._nursery is None or self._closed.is_set():
            return
        self._nursery.start_soon(fn, name=f"{name} {self.name}")

    @property
    def settings(self) -> ManagedLedgerSettings:
        return self._settings

    def now_ms(self) -> int:
        return self._ctx.clock.time_ms()

    @property
    def current_ledger_id(self) -> int:
        return self._current.ledger_id if self._current is not None else -1

    @property
    def is_terminated(self) -> bool:
        return self._terminated_at is not None

    @property
    def pending_adds(self) -> int:
        return len(self._pending) + self._inflight

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    @property
    def rollover_deferred(self) -> bool:
        """The current ledger takes entries past its cap until the next one can be created."""
        return self._deferred_since_ms is not None

    @property
    def entries_past_cap(self) -> int:
        """Entries pushed to the current ledger beyond ``max_entries_per_ledger``."""
        return max(0, self._pushed - self._settings.max_entries_per_ledger)

    # -- appends --------------------------------------------------------------------------------------------

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
        while self.pending_adds >= self._settings.pending_adds_max and self.state in WRITABLE:
            await self._capacity_freed.wait()

    def add_entry_nowait(self, data: bytes, callback: AddCallback, messages: int = 1) -> None:
        """Append one entry holding ``messages`` messages (a batch: more than one); ``callback`` gets its
        position or the error, in add order.

        Callers that add without waiting must respect :meth:`wait_for_capacity` themselves.
        """
        error = self._refusal()
        if error is not None:
            callback(error)
            return
        if messages < 1:
            raise ValueError(f"an entry holds at least one message, not {messages}")
        op = _PendingAdd(data, callback, messages)
        if self.state is State.LEDGER_OPENED and not self._pending and self._has_room():
            self._send(op)
            return
        if self.rollover_deferred and self.state is State.LEDGER_OPENED and not self._has_room():
            callback(self._deferred_cap_error())
            return
        self._pending.append(op)
        if self.state is State.WRITE_FAILED:
            self._start_new_ledger()  # drains the failed ledger's in-flight adds first

    def _refusal(self) -> ManagedLedgerError | None:
        if self.state is State.FENCED:
            return ManagedLedgerFencedError(f"managed ledger {self.name} is fenced")
        if self.state is State.TERMINATED:
            return ManagedLedgerTerminatedError(f"managed ledger {self.name} is terminated")
        if self.state is State.CLOSED:
            return ManagedLedgerClosedError(f"managed ledger {self.name} is closed")
        return None

    def _has_room(self) -> bool:
        limit = self._settings.max_entries_per_ledger
        if self.rollover_deferred:
            limit += self._settings.rollover_deferred_entries_max
        return self._pushed < limit

    def _deferred_cap_error(self) -> RolloverDeferredError:
        s = self._settings
        return RolloverDeferredError(
            f"managed ledger {self.name}: ledger {self.current_ledger_id} holds max_entries_per_ledger + "
            f"rollover_deferred_entries_max = {s.max_entries_per_ledger + s.rollover_deferred_entries_max} "
            "entries and no new ledger can be created while the metadata store is unavailable; retry later"
        )

    def _send(self, op: _PendingAdd) -> None:
        handle = self._current
        assert handle is not None
        self._pushed += 1
        self._inflight += 1
        ledger_id = handle.ledger_id
        indexing = self._ctx.entry_indexing
        if indexing is not None:
            op.data = indexing.stamp(op.data, self.message_index.next_index + self._inflight_messages)
        self._inflight_messages += op.messages

        def on_complete(result: int | BaseException) -> None:
            self._on_add_complete(ledger_id, op, result)

        handle.add_entry_nowait(op.data, on_complete)
        if self._pushed >= self._settings.max_entries_per_ledger:
            self._start_rollover()

    def _on_add_complete(self, ledger_id: int, op: _PendingAdd, result: int | BaseException) -> None:
        self._inflight -= 1
        self._inflight_messages -= op.messages
        if isinstance(result, BaseException):
            self._on_add_failed(ledger_id, op, result)
        else:
            position = Position(ledger_id, result)
            info = self.ledgers.get(ledger_id)
            if info is not None:
                self.ledgers.update(
                    replace(info, entries=result + 1, size_bytes=info.size_bytes + len(op.data))
                )
            assert position > self.last_confirmed, f"acks out of order: {self.last_confirmed} -> {position}"
            self.last_confirmed = position
            self.entries_added_counter += 1
            self.message_index.append(position, op.messages)
            self._ctx.cache.put(self.name, position, op.data)
            op.callback(position)
            self._signal_entries_added()
            if self.state is State.LEDGER_OPENED and not self._rolling and self._current_is_full():
                self._start_rollover()
        self._free_capacity()
        if self._inflight == 0:
            self._inflight_drained.set()

    def _on_add_failed(self, ledger_id: int, op: _PendingAdd, error: BaseException) -> None:
        if isinstance(error, LedgerFencedError):
            self._fence(f"ledger {ledger_id} was fenced by another owner")
            op.callback(ManagedLedgerFencedError(f"managed ledger {self.name} is fenced"))
            return
        log.warning("managed ledger %s: add to ledger %d failed: %s", self.name, ledger_id, error)
        failure = ManagedLedgerWriteError(f"add failed, outcome unknown: {error}")
        op.callback(failure)
        if self.state is State.LEDGER_OPENED and self.current_ledger_id == ledger_id:
            # Adds queued behind the failed one fail too, so no add made after it can succeed before a
            # producer hears of the failure (the client fails the in-flight ones the same way).
            self._move(State.WRITE_FAILED, f"an add to ledger {ledger_id} failed")
            self._fail_pending(failure)

    def _signal_entries_added(self) -> None:
        event, self._entries_added = self._entries_added, trio.Event()
        event.set()

    def _free_capacity(self) -> None:
        if self.pending_adds < self._settings.pending_adds_max:
            event, self._capacity_freed = self._capacity_freed, trio.Event()
            event.set()

    async def wait_for_entries_after(self, position: Position) -> None:
        """Return once an entry after ``position`` exists (or the ledger stops being writable)."""
        while self.last_confirmed <= position and self.state not in (State.CLOSED, State.FENCED):
            if self.is_terminated:
                return
            await self._entries_added.wait()

    # -- rollover -----------------------------------------------------------------------------------------

    def _current_is_full(self) -> bool:
        if self._current is None:
            return False
        info = self.ledgers.get(self._current.ledger_id)
        if info is None:
            return False
        age_ms = self._ctx.clock.time_ms() - self._ledger_created_ms
        return ledger_is_full(
            self._settings.rollover_limits(), info.entries, info.size_bytes, age_ms, self._max_age_ms
        )

    def check_rollover(self) -> None:
        """The periodic idle check: roll a non-empty ledger that is due even if no add arrives."""
        if self.state is State.LEDGER_OPENED and not self._rolling and self._current_is_full():
            self._start_rollover()

    def _start_rollover(self) -> None:
        if self._rolling or self.state is not State.LEDGER_OPENED:
            return
        self._start_new_ledger()

    def _start_new_ledger(self) -> None:
        if self._rolling:
            return
        self._rolling = True
        self._rollover_done = trio.Event()
        self.spawn(self._rollover, "rollover")

    async def _rollover(self) -> None:
        failure: ManagedLedgerWriteError | None = None
        try:
            if self.state is State.LEDGER_OPENED and self._current is not None:
                await self._roll_current()
            else:
                await self._replace_failed_ledger()
        except ManagedLedgerFencedError:
            pass
        except (BKError, ManagedLedgerError, trio.TooSlowError) as exc:
            log.error("managed ledger %s: could not open a new ledger: %s", self.name, exc)
            if self.state not in (State.FENCED, State.CLOSED, State.TERMINATED):
                self._move(State.WRITE_FAILED, "no new ledger could be opened")
            failure = ManagedLedgerWriteError(f"no ledger available: {exc}")
        finally:
            self._rolling = False
            self._rollover_done.set()
        if failure is not None:
            # Only now, with the rollover over: an add that a callback makes starts the next attempt
            # (queued while ``_rolling`` was still set, it would wait for an attempt nothing starts).
            self._fail_pending(failure)
        if self.state is State.LEDGER_OPENED:
            self._flush_pending()
            self._ctx.on_trim_candidate(self)

    async def _roll_current(self) -> None:
        """Create and list the next ledger while the current one is written, then switch (see above)."""
        handle = await self._create_next()
        if handle is None:
            return
        if self._stopped_writing():
            await self._delete_bk_ledger(handle.ledger_id)
            return
        self._next = handle
        # From here on the next ledger may be in the stored list: it is never deleted by this instance.
        if not await self._list_next() or self._stopped_writing():
            return
        self._move(State.CLOSING_LEDGER, f"rollover to ledger {handle.ledger_id}")
        await self._drain_inflight()
        closed = await self._close_current()
        if self._stopped_writing():
            return
        self._next = None
        self.ledgers.append(LedgerInfo(handle.ledger_id))
        self._start_writing(handle, closed)
        self.spawn(self._record_closed_ledger, "ledger list")

    async def _list_next(self) -> bool:
        """Write the list naming the next ledger; False if this instance stopped writing meanwhile. While it
        cannot be written (or its outcome is unknown) the rollover is deferred and the write retried."""
        async with self._metadata_lock:
            while True:
                try:
                    await self._write_info(list(self.ledgers))
                    return True
                except (MetadataUnavailableError, trio.TooSlowError) as exc:
                    self._defer_rollover(f"writing the ledger list failed: {exc}")
                await self._pause_before_retry()
                if self._stopped_writing():
                    return False

    async def _record_closed_ledger(self) -> None:
        """Best effort: the list with the closed ledger's entry count (the next list write records it too)."""
        async with self._metadata_lock:
            if self._stopped_writing() or self._next is not None:
                return
            with contextlib.suppress(ManagedLedgerError, trio.TooSlowError):
                await self._write_info(list(self.ledgers))

    async def _replace_failed_ledger(self) -> None:
        """After a failed add: no current ledger to keep writing to, so close it, then create and switch."""
        await self._drain_inflight()
        closed = await self._close_current()
        if self._stopped_writing():
            return
        self._move(State.CREATING_LEDGER, "replacing a failed ledger")
        handle = await self.create_ledger()
        # A ledger closed with no entries (a failed one) is dropped from the list, as at open.
        dropped = closed.ledger_id if closed is not None and closed.entries == 0 else None
        try:
            async with self._metadata_lock:
                infos = [i for i in self.ledgers if i.ledger_id != dropped]
                infos.append(LedgerInfo(handle.ledger_id))
                await self._write_info_settled(infos)
                if dropped is not None:
                    self.ledgers.remove(dropped)
                    self.message_index.remove_ledger(dropped)
                self.ledgers.append(LedgerInfo(handle.ledger_id))
        except ManagedLedgerFencedError:
            with trio.CancelScope(shield=True):
                await self._delete_bk_ledger(handle.ledger_id)
            raise
        if dropped is not None:
            await self._delete_bk_ledger(dropped)
        self._start_writing(handle, closed)

    async def _create_next(self) -> LedgerHandle | None:
        """Create the next ledger while the current one stays open; None if this instance stopped writing.

        While it cannot be created the rollover is deferred (see the module's docstring) and retried."""
        while True:
            health = self._ctx.health
            if health is not None and not health.healthy and self.state is State.LEDGER_OPENED:
                self._defer_rollover("the metadata store is unavailable")
            else:
                try:
                    return await self._create_or_defer_when_slow()
                except (BKError, ManagedLedgerError, trio.TooSlowError) as exc:
                    if self.state is not State.LEDGER_OPENED:
                        raise
                    self._defer_rollover(f"creating the next ledger failed: {exc}")
            await self._pause_before_retry()
            if self._stopped_writing():
                return None

    def _stopped_writing(self) -> bool:
        """Fenced, closed or terminated (awaits in between may have changed the state)."""
        return self.state in STOPPED

    def _move(self, target: State, why: str) -> None:
        """Every change of :attr:`state` comes here: checked against :data:`.ledger_state.MOVES`."""
        self.state = move(self.name, self.state, target, why)

    async def _create_or_defer_when_slow(self) -> LedgerHandle:
        timer = trio.CancelScope()

        async def defer_when_slow() -> None:
            with timer:
                await trio.sleep(self._settings.rollover_create_wait_ms / 1000)
                if self._rolling and self.state is State.LEDGER_OPENED:
                    self._defer_rollover(
                        "creating the next ledger takes longer than rollover_create_wait_ms="
                        f"{self._settings.rollover_create_wait_ms}"
                    )

        self.spawn(defer_when_slow, "rollover timer")
        try:
            return await self.create_ledger()
        finally:
            timer.cancel()

    async def _pause_before_retry(self) -> None:
        interval_s = self._settings.rollover_retry_interval_ms / 1000
        health = self._ctx.health
        if health is not None and not health.healthy:
            while not await health.wait_healthy(interval_s):
                if self._stopped_writing():
                    return
        # a random share of the interval: the topics of a broker do not all roll at the same instant
        await trio.sleep(interval_s * (0.1 + 0.9 * self._ctx.rng.random()))

    def _defer_rollover(self, why: str) -> None:
        if self.rollover_deferred or self.state is not State.LEDGER_OPENED:
            return
        self._deferred_since_ms = self._ctx.clock.time_ms()
        self.rollovers_deferred_total += 1
        log.info(
            "managed ledger %s: rollover deferred (%s); ledger %d goes on past its cap of %d entries, up to "
            "%d more",
            self.name,
            why,
            self.current_ledger_id,
            self._settings.max_entries_per_ledger,
            self._settings.rollover_deferred_entries_max,
        )
        self._flush_pending()
        if self._pending:  # beyond the bound too: the producers hear it now instead of waiting
            self._fail_pending(self._deferred_cap_error())

    async def _drain_inflight(self) -> None:
        while self._inflight > 0:
            self._inflight_drained = trio.Event()
            await self._inflight_drained.wait()

    async def _close_current(self) -> LedgerInfo | None:
        handle = self._current
        if handle is None:
            return None
        try:
            await handle.close()
        except LedgerFencedError:
            self._fence(f"ledger {handle.ledger_id} was fenced while closing")
            raise ManagedLedgerFencedError(self.name) from None
        except BKError as exc:
            # The entries up to LAC are ours; a later recovery will fix the ledger's metadata.
            log.warning("managed ledger %s: closing ledger %d failed: %s", self.name, handle.ledger_id, exc)
        info = self.ledgers.get(handle.ledger_id)
        assert info is not None
        closed = replace(
            info,
            entries=handle.last_add_confirmed + 1,
            size_bytes=handle.length,
            timestamp_ms=self._ctx.clock.time_ms(),
        )
        self.ledgers.update(closed)
        self._current = None
        return closed

    def _start_writing(self, handle: LedgerHandle, closed: LedgerInfo | None) -> None:
        """``handle`` (in the list now) becomes the current ledger."""
        if self.rollover_deferred and closed is not None:
            assert self._deferred_since_ms is not None
            log.info(
                "managed ledger %s: rolled over after %.1f s deferred: ledger %d closed with %d entries "
                "(cap %d)",
                self.name,
                (self._ctx.clock.time_ms() - self._deferred_since_ms) / 1000,
                closed.ledger_id,
                closed.entries,
                self._settings.max_entries_per_ledger,
            )
        self._deferred_since_ms = None
        self._current = handle
        self.message_index.open_ledger(handle.ledger_id)
        self._pushed = 0
        self._ledger_created_ms = self._ctx.clock.time_ms()
        self.last_ledger_created_ms = self._ledger_created_ms
        self._max_age_ms = self._jittered_max_age()
        self._move(State.LEDGER_OPENED, f"ledger {handle.ledger_id} is current")
        self.ledger_switches_counter += 1
        log.info("managed ledger %s: now writing to ledger %d", self.name, handle.ledger_id)

    async def create_ledger(self) -> LedgerHandle:
        return await create_bk_ledger(self._ctx, self.name)

    def _flush_pending(self) -> None:
        while self._pending and self.state is State.LEDGER_OPENED and self._has_room():
            self._send(self._pending.popleft())

    def _fail_pending(self, error: ManagedLedgerError) -> None:
        pending, self._pending = self._pending, deque()
        for op in pending:
            op.callback(error)
        self._free_capacity()

    def _jittered_max_age(self) -> int:
        limits = self._settings.rollover_limits()
        return jittered_max_time_ms(limits, self._ctx.rng.random(), self._settings.rollover_jitter_fraction)

    # -- metadata -----------------------------------------------------------------------------------------

    def _persisted(self, ledgers: list[LedgerInfo]) -> list[LedgerInfo]:
        """The list as stored: while a next ledger is listed, the current one is open (no entry count), so an
        open of the managed ledger recovers both."""
        ledgers = [self._with_first_index(info) for info in ledgers]
        if self._next is None:
            return ledgers
        current = self.current_ledger_id
        listed = [
            LedgerInfo(i.ledger_id, first_index=i.first_index) if i.ledger_id == current else i
            for i in ledgers
        ]
        return [*listed, LedgerInfo(self._next.ledger_id)]

    def _with_first_index(self, info: LedgerInfo) -> LedgerInfo:
        first = self.message_index.ledger_first_index(info.ledger_id)
        return info if first is None or first == info.first_index else replace(info, first_index=first)

    async def _write_info(self, ledgers: list[LedgerInfo], terminated: Position | None = None) -> None:
        """CAS-write the ledger list (caller holds the metadata lock); a conflict fences this instance. An
        unknown outcome raises :class:`MetadataUnavailableError` or :class:`trio.TooSlowError`."""
        info = ManagedLedgerInfo(
            tuple(self._persisted(ledgers)), terminated or self._terminated_at, self._properties
        )
        try:
            await self._list_writer.write(info)
        except MetadataConflictError as exc:
            self._fence(f"metadata version conflict: {exc}")
            raise ManagedLedgerFencedError(f"managed ledger {self.name} is fenced: {exc}") from exc

    async def _write_info_settled(self, ledgers: list[LedgerInfo]) -> None:
        """As :meth:`_write_info`, retried (the store answering again) for at most
        ``metadata_operation_timeout_s`` when its outcome is unknown."""
        deadline = trio.current_time() + self._settings.metadata_operation_timeout_s
        pause_s = self._settings.rollover_retry_interval_ms / 1000
        while True:
            try:
                await self._write_info(ledgers)
                return
            except (MetadataUnavailableError, trio.TooSlowError):
                if trio.current_time() >= deadline:
                    raise
            health = self._ctx.health
            remaining = max(0.0, deadline - trio.current_time())
            if health is not None and not health.healthy:
                await health.wait_healthy(remaining)
            else:
                await trio.sleep(min(pause_s, remaining))

    def _fence(self, why: str) -> None:
        if self.state in (State.FENCED, State.CLOSED):  # a closed ledger writes nothing either: stays closed
            return
        log.warning("managed ledger %s fenced: %s", self.name, why)
        self._move(State.FENCED, why)
        self._fail_pending(ManagedLedgerFencedError(f"managed ledger {self.name} is fenced"))
        self._signal_entries_added()

    async def _delete_bk_ledger(self, ledger_id: int) -> None:
        try:
            await self._ctx.bk.delete_ledger(ledger_id)
            self._undeleted_ledgers.discard(ledger_id)
        except BKError as exc:
            log.warning(
                "managed ledger %s: deleting ledger %d failed (will retry): %s", self.name, ledger_id, exc
            )
            self._undeleted_ledgers.add(ledger_id)

    # -- cursors ------------------------------------------------------------------------------------------

    async def open_cursor(self, name: str, *, start_at_earliest: bool = False) -> ManagedCursor:
        """Open (or create) a durable cursor; a new one starts at the latest or the earliest entry.

        Concurrent opens of one name coalesce: the first creates (or recovers) the cursor, the others wait
        for it and get the same cursor. Two creations racing would each take the cursor over from the other
        (the loser's compare-and-set fails, which fences its cursor store), so they must not overlap."""
        while True:
            existing = self.cursors.get(name)
            if existing is not None:
                return existing
            opening = self._cursors_opening.get(name)
            if opening is None:
                break
            await opening.wait()  # then look again: the first open may have failed
        if self.state in (State.FENCED, State.CLOSED):
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is {self.state.value}")
        done = self._cursors_opening[name] = trio.Event()
        try:
            return await self._create_or_recover_cursor(name, start_at_earliest)
        finally:
            del self._cursors_opening[name]
            done.set()

    async def _create_or_recover_cursor(self, name: str, start_at_earliest: bool) -> ManagedCursor:
        mark = self._initial_mark_delete(start_at_earliest)
        snapshot = CursorSnapshot(mark, (), {})
        try:
            store = await CursorStore.create(
                self.name, name, self._ctx.bk, self._ctx.meta, self._settings, snapshot, self.now_ms()
            )
        except MetadataConflictError:
            recovered = await CursorStore.recover(
                self.name, name, self._ctx.bk, self._ctx.meta, self._settings, self.now_ms()
            )
            if recovered is None:
                raise
            store, snapshot = recovered
        cursor = ManagedCursor(self, name, self._cursor_state(snapshot), store, snapshot.properties)
        self.cursors[name] = cursor
        return cursor

    def open_non_durable_cursor(self, start: Position) -> ManagedCursor:
        """A reader's cursor: in memory only, starting so that ``start`` is the first entry read."""
        state = CursorState(self.ledgers, self.ledgers.previous_position(self.ledgers.normalize(start)))
        cursor = ManagedCursor(self, f"reader-{len(self.non_durable_cursors)}", state, None)
        self.non_durable_cursors.append(cursor)
        return cursor

    def close_non_durable_cursor(self, cursor: ManagedCursor) -> None:
        if cursor in self.non_durable_cursors:
            self.non_durable_cursors.remove(cursor)

    async def delete_cursor(self, name: str) -> None:
        cursor = self.cursors.pop(name, None)
        if cursor is None:
            raise CursorNotFoundError(f"cursor {name} does not exist on {self.name}")
        await cursor.delete()
        self._ctx.on_trim_candidate(self)

    def attach_recovered_cursor(self, name: str, store: CursorStore, snapshot: CursorSnapshot) -> None:
        state = self._cursor_state(snapshot)
        self.cursors[name] = ManagedCursor(self, name, state, store, snapshot.properties)

    def _cursor_state(self, snapshot: CursorSnapshot) -> CursorState:
        state = CursorState(self.ledgers, snapshot.mark_delete)
        state.restore_acked(snapshot.acked_ranges)
        state.on_ledgers_trimmed()
        if snapshot.acked_prefix is not None:
            ledger_id, entry_id, messages = snapshot.acked_prefix
            with contextlib.suppress(InvalidAckError):
                state.ack_prefix(Position(ledger_id, entry_id), messages)
        return state

    def _initial_mark_delete(self, earliest: bool) -> Position:
        if not earliest:
            return self.last_confirmed
        first = self.ledgers.first_position()
        if first is None:
            return self.last_confirmed
        return self.ledgers.previous_position(first)

    def on_cursor_persisted(self, cursor: ManagedCursor) -> None:
        slowest = self.slowest_durable_mark_delete()
        ledger = slowest.ledger_id if slowest is not None else -1
        if ledger != self._last_slowest_ledger:
            self._last_slowest_ledger = ledger
            self._ctx.on_trim_candidate(self)

    def fence_from_cursor(self, why: str) -> None:
        self._fence(why)

    # -- trimming, termination, close ------------------------------------------------------------------

    def slowest_durable_mark_delete(self) -> Position | None:
        marks = [c.mark_delete for c in self.cursors.values()]
        return min(marks) if marks else None

    async def trim(self, policy: RetentionPolicy, *, truncate: bool = False) -> list[int]:
        """Delete the consumed ledgers retention allows (see :mod:`.trim`); returns their ids."""
        if self.state in (State.FENCED, State.CLOSED):
            return []
        for ledger_id in sorted(self._undeleted_ledgers):
            await self._delete_bk_ledger(ledger_id)
        async with self._metadata_lock:
            doomed = ledgers_to_trim(
                self.ledgers.infos(),
                self.current_ledger_id,
                self.slowest_durable_mark_delete(),
                policy,
                self._ctx.clock.time_ms(),
                truncate=truncate,
            )
            if not doomed:
                return []
            keep = [info for info in self.ledgers if info.ledger_id not in doomed]
            await self._write_info(keep)
            for ledger_id in doomed:
                self.ledgers.remove(ledger_id)
                self.message_index.remove_ledger(ledger_id)
                self._ctx.cache.invalidate_ledger(self.name, ledger_id)
        for cursor in [*self.cursors.values(), *self.non_durable_cursors]:
            cursor.on_ledgers_trimmed()
        for ledger_id in doomed:
            await self.reader.forget(ledger_id)
            await self._delete_bk_ledger(ledger_id)
        log.info("managed ledger %s: trimmed ledgers %s", self.name, doomed)
        return doomed

    async def terminate(self) -> Position:
        """No more writes; readers reach the end of the topic at the returned position."""
        if self.is_terminated:
            assert self._terminated_at is not None
            return self._terminated_at
        if self.state in (State.FENCED, State.CLOSED):
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is {self.state.value}")
        await self._rollover_done.wait()
        await self._drain_inflight()
        await self._close_current()
        async with self._metadata_lock:
            await self._write_info(list(self.ledgers), terminated=self.last_confirmed)
        self._terminated_at = self.last_confirmed
        if self.state not in (State.FENCED, State.CLOSED):  # fenced or closed meanwhile: that state stays
            self._move(State.TERMINATED, f"terminated at {self.last_confirmed}")
        self._fail_pending(ManagedLedgerTerminatedError(f"managed ledger {self.name} is terminated"))
        self._signal_entries_added()
        return self.last_confirmed

    async def set_properties(self, update: Mapping[str, str], remove: Iterable[str] = ()) -> dict[str, str]:
        """Add or replace ``update`` and drop ``remove`` in the managed ledger's properties (Pulsar's
        ``asyncSetProperties`` / ``asyncDeleteProperty``, where topic properties live); persisted with the
        ledger list before this returns. Returns the properties now."""
        if self.state in (State.FENCED, State.CLOSED):
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is {self.state.value}")
        async with self._metadata_lock:
            previous = self._properties
            changed = {k: v for k, v in previous.items() if k not in set(remove)} | dict(update)
            if changed != previous:
                self._properties = changed
                try:
                    await self._write_info(list(self.ledgers))
                except BaseException:
                    self._properties = previous
                    raise
        return dict(self._properties)

    async def delete(self) -> None:
        """Delete the managed ledger: its ledgers, cursors and metadata."""
        await self.close()
        for cursor in list(self.cursors.values()):
            await cursor.delete()
        self.cursors.clear()
        for info in list(self.ledgers):
            await self._delete_bk_ledger(info.ledger_id)
        await self._ctx.meta.delete_ledger_info(self.name)

    async def close(self) -> None:
        """Close cleanly: persist cursor snapshots, close the current ledger, stop background tasks."""
        if self.state is State.CLOSED:
            return
        writable = self.state is not State.FENCED
        if writable:
            await self._drain_inflight()
        for cursor in list(self.cursors.values()):
            await cursor.close(persist=writable)
        if writable and self._current is not None:
            with contextlib.suppress(ManagedLedgerFencedError):
                await self._close_current()
        next_ledger, self._next = self._next, None
        if next_ledger is not None:  # listed by a rollover that did not switch: an empty ledger, closed
            with contextlib.suppress(BKError):
                await next_ledger.close()
        self._fail_pending(ManagedLedgerClosedError(f"managed ledger {self.name} is closed"))
        self._move(State.CLOSED, "closed by its owner")
        self._signal_entries_added()
        await self.reader.close()
        self._ctx.cache.clear(self.name)
        self._closed.set()

    # -- reads --------------------------------------------------------------------------------------------

    async def read_entries(self, start: Position, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` confirmed entries from ``start`` on."""
        if max_entries <= 0 or start > self.last_confirmed:
            return []
        entries = await self.reader.read(self.ledgers, start, self.last_confirmed, max_entries)
        indexing = self._ctx.entry_indexing
        if indexing is not None and entries:
            coarse = self.message_index.is_coarse
            for entry in entries:  # the entries of an exact ledger teach nothing: not even parsed
                if coarse(entry.position.ledger_id):
                    self._learn(indexing, entry.position, entry.data)
        return entries

    def _learn(self, indexing: EntryIndexing, position: Position, data: bytes) -> None:
        try:
            indexed = indexing.read(data)
        except ValueError as exc:
            log.warning(
                "managed ledger %s: entry %s has no readable message index: %s", self.name, position, exc
            )
            return
        if indexed is not None:
            try:
                self.message_index.learn(position, *indexed)
            except ValueError as exc:
                log.warning("managed ledger %s: entry %s: %s", self.name, position, exc)

    async def learn_indexes_after(self, positions: Iterable[Position]) -> None:
        """Read the entries that follow ``positions`` where their message index is not known exactly (in a
        coarse ledger: see :mod:`.message_index`), so counts from those positions are exact."""
        if self._ctx.entry_indexing is None:
            return
        for position in sorted(set(positions)):
            if not self.message_index.is_exact_after(position):
                # reading an entry of a coarse ledger teaches the index its place (read_entries)
                await self.read_entry(Position(position.ledger_id, position.entry_id + 1))

    async def locate_message(self, index: int) -> MessageLocation | None:
        """Where message ``index`` is stored; in a coarse ledger, found by reading entries (a bisection)."""
        while self._ctx.entry_indexing is not None:
            position = self.message_index.entry_to_learn(index)
            if position is None:
                break
            entry = await self.read_entry(position)  # learns the entry's index (read_entries)
            if entry is None or self.message_index.entry_to_learn(index) == position:
                break  # nothing learned (an entry without an index): the guess stands
        return self.message_index.locate(index)

    async def read_entry(self, position: Position) -> Entry | None:
        entries = await self.read_entries(position, 1)
        return entries[0] if entries and entries[0].position == position else None

    def number_of_entries(self) -> int:
        return self.ledgers.total_entries()

    def total_size(self) -> int:
        return self.ledgers.total_size()


def _message_index(ledgers: LedgerList, next_index: int | None) -> MessageIndex:
    """The index of the ledgers listed: each from its recorded first index up to the next one's (the last
    up to ``next_index``); a ledger without a recorded first index, or all when ``next_index`` is None,
    counts one message per entry."""
    index = MessageIndex()
    infos = list(ledgers)
    for i, info in enumerate(infos):
        following = infos[i + 1].first_index if i + 1 < len(infos) else next_index
        if next_index is None or info.first_index < 0 or following is None or following < 0:
            index.append_ledger(info.ledger_id, info.entries)
        else:
            index.append_closed_ledger(info.ledger_id, info.first_index, following, info.entries)
    return index

"""A managed ledger: one topic's storage as a sequence of BookKeeper ledgers plus named cursors.

Theory of operation (docs/upstream.md, Pulsar §3, Pulsar's ``ManagedLedgerImpl``). :class:`ManagedLedger` is
the face the broker, the admin API and retention use; it owns what every part of it shares - the ledger
list, the current ledger's handle, ``last_confirmed``, the message index and the state - and delegates each
concern to a collaborator it owns:

* :class:`~.add_pipeline.AddPipeline` (:mod:`.add_pipeline`): appends, pipelined to the current ledger and
  acknowledged in order; back-pressure; what a failed add does.
* :class:`~.ledger_switch.LedgerSwitcher` (:mod:`.ledger_switch`): rollover to the next ledger, deferred while
  the metadata store is unavailable, and replacing a ledger after a failed add.
* :class:`~.ledger_metadata.LedgerMetadata` (:mod:`.ledger_metadata`): the stored record (ledger list,
  properties, terminated position), composed and CAS-written under one lock.
* :class:`~.cursor_registry.CursorRegistry` (:mod:`.cursor_registry`): durable and non-durable cursors and
  the slowest mark-delete position.
* :class:`~.trimmer.Trimmer` (:mod:`.trimmer`): deleting the consumed ledgers retention allows.
* :class:`~.reader.EntryReader` (:mod:`.reader`): reading entries back; this module teaches the message index
  what the entries read carry.

What stays here is the life cycle and the states no collaborator owns alone:

* **State.** Every change of :attr:`ManagedLedger.state` goes through :meth:`ManagedLedger._move`, checked
  against the transition table of :mod:`.ledger_state`; collaborators change the state only through it.
* **Fencing.** If the client reports the ledger fenced (another broker recovered it), or a metadata write
  loses a compare-and-set race, this instance is *fenced*: every pending and future add fails with
  :class:`ManagedLedgerFencedError` and it never writes again.
* **Termination, properties, delete, close.** Termination waits for a switch under way and the in-flight
  adds, closes the current ledger and records the end position; properties are persisted with the ledger
  list before :meth:`ManagedLedger.set_properties` returns.

Background work (rollover, cursor persistence) runs in this ledger's own nursery, cancelled on close.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

import trio

from magnetar.bookkeeper.client import LedgerHandle
from magnetar.managed_ledger.add_pipeline import AddCallback, AddPipeline
from magnetar.managed_ledger.context import Context, Quorum
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.cursor_registry import CursorRegistry
from magnetar.managed_ledger.cursor_store import CursorSnapshot, CursorStore
from magnetar.managed_ledger.entry import Entry
from magnetar.managed_ledger.entry_prefix import EntryIndexing
from magnetar.managed_ledger.errors import (
    ManagedLedgerClosedError,
    ManagedLedgerFencedError,
    ManagedLedgerTerminatedError,
)
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.ledger_metadata import LedgerMetadata
from magnetar.managed_ledger.ledger_state import State, initial_state, move
from magnetar.managed_ledger.ledger_switch import LedgerSwitcher
from magnetar.managed_ledger.message_index import MessageIndex, MessageLocation
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.reader import EntryReader
from magnetar.managed_ledger.settings import ManagedLedgerSettings
from magnetar.managed_ledger.trim import RetentionPolicy
from magnetar.managed_ledger.trimmer import Trimmer

log = logging.getLogger(__name__)


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
        self.quorum: Quorum | None = None
        """Ensemble, write and ack quorum of the next ledger it creates (a topic's persistence policy);
        None: the settings'. Ledgers already created keep theirs."""
        self.mark_delete_rate_per_s: float | None = None
        """Mark-delete persistences per second per cursor set by the topic's persistence policy (0:
        unthrottled); None: ``settings.mark_delete_rate_per_s``."""
        self._ctx = ctx
        self._settings = ctx.settings
        self.ledgers = ledgers
        self.current = current
        """The ledger adds go to (None after a failed add until a new one is current, and once terminated)."""
        self.state = initial_state(current is not None, terminated_at is not None)
        last = ledgers.last_position()
        first_current = current.ledger_id if current is not None else -1
        self.last_confirmed = last if last is not None else Position(first_current, -1)
        self.entries_added_counter = 0
        self.message_index = _message_index(ledgers, next_index)
        """The first message index of every stored entry (counts in messages), rebuilt from the ledgers'
        first indexes in the metadata (a ledger without one counts one message per entry)."""
        if current is not None:
            self.message_index.open_ledger(current.ledger_id)
        self.metadata = LedgerMetadata(self, ctx, info_version, terminated_at, properties)
        self.adds = AddPipeline(self, ctx)
        self.switcher = LedgerSwitcher(self, ctx)
        self.cursor_registry = CursorRegistry(self, ctx)
        self.internal_cursors: set[str] = set()
        """Durable cursors its owner keeps for itself, not for a consumer (the broker's ``pulsar.dedup``):
        like every durable cursor they hold back trimming, but backlog figures, message expiry and backlog
        eviction leave them alone (:meth:`subscription_cursors`), as Pulsar's do. At most a few names."""
        self.trimmer = Trimmer(self, ctx)
        self.reader = EntryReader(
            name,
            ctx.bk,
            ctx.cache,
            self._settings.password,
            self._settings.read_handles_cached_max,
            lambda: self.current,
            stamped=ctx.entry_indexing is not None,
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
        return self.current.ledger_id if self.current is not None else -1

    @property
    def is_terminated(self) -> bool:
        return self.metadata.terminated_at is not None

    @property
    def pending_adds(self) -> int:
        return self.adds.pending_adds

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.metadata.properties)

    @property
    def rollover_deferred(self) -> bool:
        """The current ledger takes entries past its cap until the next one can be created."""
        return self.switcher.deferred_since_ms is not None

    @property
    def entries_past_cap(self) -> int:
        """Entries pushed to the current ledger beyond ``max_entries_per_ledger``."""
        return max(0, self.adds.pushed - self._settings.max_entries_per_ledger)

    @property
    def rollovers_deferred_total(self) -> int:
        return self.switcher.rollovers_deferred_total

    @property
    def ledger_switches_counter(self) -> int:
        """New ledgers started since this instance opened (rollovers, and recoveries from a failed add)."""
        return self.switcher.ledger_switches_counter

    @property
    def last_ledger_created_ms(self) -> int:
        return self.switcher.ledger_created_ms

    @property
    def cursors(self) -> dict[str, ManagedCursor]:
        """The durable cursors by name."""
        return self.cursor_registry.durable

    def subscription_cursors(self) -> dict[str, ManagedCursor]:
        """The durable cursors that belong to consumers (all but :attr:`internal_cursors`)."""
        internal = self.internal_cursors
        durable = self.cursor_registry.durable
        if not internal:
            return durable
        return {name: cursor for name, cursor in durable.items() if name not in internal}

    def slowest_subscription_mark_delete(self) -> Position | None:
        """The slowest mark-delete among :meth:`subscription_cursors` (backlog sizes and quotas)."""
        marks = [cursor.mark_delete for cursor in self.subscription_cursors().values()]
        return min(marks) if marks else None

    @property
    def non_durable_cursors(self) -> list[ManagedCursor]:
        return self.cursor_registry.non_durable

    # -- state --------------------------------------------------------------------------------------------

    def _move(self, target: State, why: str) -> None:
        """Every change of :attr:`state` comes here: checked against :data:`.ledger_state.MOVES`."""
        self.state = move(self.name, self.state, target, why)

    def fence(self, why: str) -> None:
        """Another owner took over (a fenced ledger, a lost compare-and-set): never write again."""
        if self.state in (State.FENCED, State.CLOSED):  # a closed ledger writes nothing either: stays closed
            return
        log.warning("managed ledger %s fenced: %s", self.name, why)
        self._move(State.FENCED, why)
        self.adds.fail_pending(ManagedLedgerFencedError(f"managed ledger {self.name} is fenced"))
        self.adds.signal_entries_added()

    def fence_from_cursor(self, why: str) -> None:
        self.fence(why)

    # -- appends (see :mod:`.add_pipeline`) and rollover (see :mod:`.ledger_switch`) ----------------------

    async def add_entry(self, data: bytes, messages: int = 1) -> Position:
        """Append one entry holding ``messages`` messages and wait for its acknowledgement."""
        return await self.adds.add_entry(data, messages)

    async def wait_for_capacity(self) -> None:
        """Back-pressure: wait while ``pending_adds_max`` adds are queued or in flight."""
        await self.adds.wait_for_capacity()

    def add_entry_nowait(self, data: bytes, callback: AddCallback, messages: int = 1) -> None:
        """Append one entry holding ``messages`` messages (a batch: more than one); ``callback`` gets its
        position or the error, in add order.

        Callers that add without waiting must respect :meth:`wait_for_capacity` themselves.
        """
        self.adds.add_entry_nowait(data, callback, messages)

    async def wait_for_entries_after(self, position: Position) -> None:
        """Return once an entry after ``position`` exists (or the ledger stops being writable)."""
        await self.adds.wait_for_entries_after(position)

    def check_rollover(self) -> None:
        """The periodic idle check: roll a non-empty ledger that is due even if no add arrives."""
        self.switcher.check_rollover()

    async def create_ledger(self) -> LedgerHandle:
        return await self.switcher.create_ledger()

    # -- cursors (see :mod:`.cursor_registry`) ------------------------------------------------------------

    async def open_cursor(self, name: str, *, start_at_earliest: bool = False) -> ManagedCursor:
        """Open (or create) a durable cursor; a new one starts at the latest or the earliest entry.

        Concurrent opens of one name coalesce: the first creates (or recovers) the cursor, the others wait
        for it and get the same cursor."""
        return await self.cursor_registry.open_cursor(name, start_at_earliest=start_at_earliest)

    def open_non_durable_cursor(self, start: Position) -> ManagedCursor:
        """A reader's cursor: in memory only, starting so that ``start`` is the first entry read."""
        return self.cursor_registry.open_non_durable_cursor(start)

    def close_non_durable_cursor(self, cursor: ManagedCursor) -> None:
        self.cursor_registry.close_non_durable_cursor(cursor)

    async def delete_cursor(self, name: str) -> None:
        await self.cursor_registry.delete_cursor(name)

    def attach_recovered_cursor(self, name: str, store: CursorStore, snapshot: CursorSnapshot) -> None:
        self.cursor_registry.attach_recovered_cursor(name, store, snapshot)

    def on_cursor_persisted(self, cursor: ManagedCursor) -> None:
        self.cursor_registry.on_cursor_persisted(cursor)

    def slowest_durable_mark_delete(self) -> Position | None:
        return self.cursor_registry.slowest_durable_mark_delete()

    # -- trimming, termination, close ------------------------------------------------------------------

    async def trim(self, policy: RetentionPolicy, *, truncate: bool = False) -> list[int]:
        """Delete the consumed ledgers retention allows (see :mod:`.trim`); returns their ids."""
        return await self.trimmer.trim(policy, truncate=truncate)

    async def terminate(self) -> Position:
        """No more writes; readers reach the end of the topic at the returned position."""
        if self.metadata.terminated_at is not None:
            return self.metadata.terminated_at
        if self.state in (State.FENCED, State.CLOSED):
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is {self.state.value}")
        await self.switcher.wait_done()
        await self.adds.drain_inflight()
        await self.switcher.close_current()
        async with self.metadata.lock:
            await self.metadata.write(list(self.ledgers), terminated=self.last_confirmed)
        self.metadata.terminated_at = self.last_confirmed
        if self.state not in (State.FENCED, State.CLOSED):  # fenced or closed meanwhile: that state stays
            self._move(State.TERMINATED, f"terminated at {self.last_confirmed}")
        self.adds.fail_pending(ManagedLedgerTerminatedError(f"managed ledger {self.name} is terminated"))
        self.adds.signal_entries_added()
        return self.last_confirmed

    async def set_properties(self, update: Mapping[str, str], remove: Iterable[str] = ()) -> dict[str, str]:
        """Add or replace ``update`` and drop ``remove`` in the managed ledger's properties (Pulsar's
        ``asyncSetProperties`` / ``asyncDeleteProperty``, where topic properties live); persisted with the
        ledger list before this returns. Returns the properties now."""
        if self.state in (State.FENCED, State.CLOSED):
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is {self.state.value}")
        metadata = self.metadata
        async with metadata.lock:
            previous = metadata.properties
            changed = {k: v for k, v in previous.items() if k not in set(remove)} | dict(update)
            if changed != previous:
                metadata.properties = changed
                try:
                    await metadata.write(list(self.ledgers))
                except BaseException:
                    metadata.properties = previous
                    raise
        return dict(metadata.properties)

    async def delete(self) -> None:
        """Delete the managed ledger: its ledgers, cursors and metadata."""
        await self.close()
        for cursor in list(self.cursors.values()):
            await cursor.delete()
        self.cursors.clear()
        for info in list(self.ledgers):
            await self.trimmer.delete_bk_ledger(info.ledger_id)
        await self._ctx.meta.delete_ledger_info(self.name)

    async def close(self) -> None:
        """Close cleanly: persist cursor snapshots, close the current ledger, stop background tasks."""
        if self.state is State.CLOSED:
            return
        writable = self.state is not State.FENCED
        if writable:
            await self.adds.drain_inflight()
        for cursor in list(self.cursors.values()):
            await cursor.close(persist=writable)
        if writable and self.current is not None:
            with contextlib.suppress(ManagedLedgerFencedError):
                await self.switcher.close_current()
        # listed by a rollover that did not switch: an empty ledger, closed
        await self.switcher.close_unswitched()
        self.adds.fail_pending(ManagedLedgerClosedError(f"managed ledger {self.name} is closed"))
        self._move(State.CLOSED, "closed by its owner")
        self.adds.signal_entries_added()
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
                    self._learn(indexing, entry)
        return entries

    def _learn(self, indexing: EntryIndexing, entry: Entry) -> None:
        position, first = entry.position, entry.first_index
        if first is None:
            return
        try:
            messages = indexing.messages_in(entry.data)
        except ValueError as exc:
            log.warning(
                "managed ledger %s: entry %s has no readable message index: %s", self.name, position, exc
            )
            return
        try:
            self.message_index.learn(position, first, messages)
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

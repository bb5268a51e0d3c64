"""A persistent topic's message deduplication, its I/O side: the ``pulsar.dedup`` cursor that holds the
snapshot of the sans-IO state (:mod:`.dedup`), the recovery on load, the snapshots and their timer.

:meth:`TopicDedup.check` brings the topic in line with its policy. Turning on: the cursor is opened (created
at the end of the topic if new), the state restored from its properties and mark-delete, and every entry
after the mark-delete read again - each stored message's producer name and sequence id - before the state is
handed to the topic's producers; the topic load waits for this. Turning off: the producers forget the state
and the cursor is deleted (a cursor left from before is deleted on load too: it would hold back trimming).

Snapshots (:meth:`TopicDedup.take_snapshot`) move the cursor's mark-delete to the last entry the state
covers, with the state as the cursor's properties, persisted together by the cursor. One falls due every
``broker_deduplication_entries_interval`` stored entries (taken at the next scheduling step, once every
request of the entry being answered was counted), on the timer when entries were stored since the last, and
when the topic closes.

Inactive producers: :meth:`TopicDedup.purge_inactive` (called by the broker every third of
``broker_deduplication_producer_inactivity_timeout_minutes``) drops the state of names without a producer for
that long (:meth:`.dedup.DedupState.purge_inactive`) and takes a snapshot, so the ``pulsar.dedup`` cursor's
properties - what internal stats show - no longer hold them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Protocol

import trio

from magnetar.bookkeeper.client import BKError
from magnetar.bookkeeper.metadata import MetadataStoreError
from magnetar.broker.core.dedup import DEDUP_CURSOR, DedupState
from magnetar.broker.core.errors import ServiceUnitNotReadyError
from magnetar.broker.core.producer import Producer
from magnetar.broker.wire import decode_entry
from magnetar.managed_ledger.errors import ManagedLedgerError
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.position import Position

log = logging.getLogger(__name__)

REPLAY_READ_ENTRIES = 100
"""Entries read at once while recovering."""


class DedupSettings(Protocol):
    @property
    def broker_deduplication_entries_interval(self) -> int: ...

    @property
    def broker_deduplication_max_number_of_producers(self) -> int: ...


class TopicDedup:
    """The deduplication of one persistent topic (see the module docstring)."""

    def __init__(
        self,
        name: str,
        ml: ManagedLedger,
        settings: DedupSettings,
        producers: Callable[[], Iterable[Producer]],
        nursery: Callable[[], trio.Nursery | None],
        time_ms: Callable[[], int],
    ) -> None:
        self._name = name
        self._time_ms = time_ms
        """Epoch milliseconds (the topic's clock)."""
        self._ml = ml
        self._settings = settings
        self._producers = producers
        self._nursery = nursery
        """The topic's nursery (None before it runs): the snapshot tasks and the timer live there."""
        self.state: DedupState | None = None
        """The state while the topic deduplicates."""
        self.status = "Disabled"
        """Pulsar's ``deduplicationStatus``: Disabled, Recovering, Enabled, Removing or Failed."""
        self._lock = trio.Lock()
        self._timer: trio.CancelScope | None = None

    async def check(self, enabled: bool, interval_s: int, *, closed: bool) -> None:
        """Turn deduplication on or off as ``enabled`` says, with a snapshot timer of ``interval_s`` seconds
        (0: none); raises :class:`ServiceUnitNotReadyError` when the state cannot be recovered."""
        async with self._lock:
            self._ml.internal_cursors.add(DEDUP_CURSOR)  # no subscription: no backlog, expiry or eviction
            if enabled and self.state is None and not closed:
                await self._enable()
            elif not enabled and (self.state is not None or DEDUP_CURSOR in self._ml.cursors):
                await self._disable()
            self._restart_timer(interval_s)

    async def _enable(self) -> None:
        self.status = "Recovering"
        settings = self._settings
        state = DedupState(
            settings.broker_deduplication_max_number_of_producers,
            settings.broker_deduplication_entries_interval,
        )
        try:
            cursor = self._ml.cursors.get(DEDUP_CURSOR)
            if cursor is None:
                cursor = await self._ml.open_cursor(DEDUP_CURSOR, start_at_earliest=False)
            mark = cursor.mark_delete
            state.restore(dict(cursor.properties), (mark.ledger_id, mark.entry_id))
            replayed = await self._replay(state, mark)
        except (ManagedLedgerError, BKError, MetadataStoreError) as exc:
            self.status = "Failed"
            reason = f"recovering the deduplication state of {self._name}: {exc}"
            raise ServiceUnitNotReadyError(reason) from exc
        state.snapshot_due = self._snapshot_soon
        self.state = state
        now_ms = self._time_ms()
        for name in [*state.pushed, *state.persisted]:  # recovered: idle from now until a producer comes
            state.producer_left(name, now_ms)
        for producer in self._producers():
            producer.attach_dedup(state)
        self.status = "Enabled"
        if replayed > state.entries_interval:
            self.take_snapshot()
        log.info("topic %s: deduplication enabled (%d entries replayed)", self._name, replayed)

    async def _replay(self, state: DedupState, after: Position) -> int:
        """Every message stored after ``after`` (the snapshot's position), into ``state``; returns the
        entries read."""
        ml = self._ml
        replayed = 0
        position = ml.ledgers.next_position(after)
        while position <= ml.last_confirmed:
            entries = await ml.read_entries(position, REPLAY_READ_ENTRIES)
            if not entries:
                break
            for entry in entries:
                replayed += 1
                at = entry.position
                try:
                    decoded = decode_entry(entry.data)
                except ValueError:
                    log.warning("topic %s: entry %s unreadable for deduplication", self._name, at)
                    continue
                highest: dict[str, int] = {}
                for message in decoded.messages:
                    name = message.producer_name
                    if message.sequence_id > highest.get(name, -1):
                        highest[name] = message.sequence_id
                for name, sequence_id in highest.items():
                    state.replay(name, sequence_id, at.ledger_id, at.entry_id)
            position = ml.ledgers.next_position(entries[-1].position)
        return replayed

    async def _disable(self) -> None:
        self.status = "Removing"
        self.state = None
        for producer in self._producers():
            producer.dedup = None
        try:
            if DEDUP_CURSOR in self._ml.cursors:
                await self._ml.delete_cursor(DEDUP_CURSOR)
        except (ManagedLedgerError, BKError, MetadataStoreError) as exc:
            log.warning("topic %s: deleting the deduplication cursor failed: %s", self._name, exc)
        self.status = "Disabled"

    def _snapshot_soon(self) -> None:
        """A snapshot is due. Taken once the entry being answered is answered whole (the next scheduling
        step): the requests of one entry are answered in one step, and the snapshot's position must cover
        every one of them."""
        nursery = self._nursery()
        if nursery is not None:
            nursery.start_soon(self._snapshot_task)

    async def _snapshot_task(self) -> None:
        self.take_snapshot()

    def take_snapshot(self) -> None:
        """Store the state as the ``pulsar.dedup`` cursor's mark-delete and properties (the cursor persists
        them)."""
        state = self.state
        cursor = self._ml.cursors.get(DEDUP_CURSOR)
        if state is None or cursor is None or cursor.closed:
            return
        position, properties = state.snapshot()
        if position is None:
            return
        try:
            cursor.mark_delete_with_properties(Position(*position), properties)
        except ValueError as exc:  # the position is gone (trimmed meanwhile): the next snapshot moves on
            log.warning("topic %s: deduplication snapshot at %s: %s", self._name, position, exc)

    def purge_inactive(self, before_ms: int) -> list[str]:
        """Forget the names without a producer since before ``before_ms`` (epoch ms) and, if any, take a
        snapshot; the names forgotten."""
        state = self.state
        if state is None:
            return []
        gone = state.purge_inactive(before_ms)
        if gone:
            log.info("topic %s: deduplication state of %d inactive producers purged", self._name, len(gone))
            self.take_snapshot()
        return gone

    def _restart_timer(self, interval_s: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        nursery = self._nursery()
        if self.state is None or interval_s <= 0 or nursery is None:
            return
        scope = self._timer = trio.CancelScope()

        async def tick() -> None:
            with scope:
                while True:
                    await trio.sleep(interval_s)
                    state = self.state
                    if state is not None and state.snapshot_behind:
                        self.take_snapshot()

        nursery.start_soon(tick, name=f"dedup snapshots {self._name}")

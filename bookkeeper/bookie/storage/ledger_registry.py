"""The ledger records held in memory: BookKeeper's ``LedgerMetadataIndex`` cache (docs/upstream.md, BookKeeper
§5.3).

Every ledger this bookie stores has a :class:`LedgerState` (master key, fenced flag, explicit LAC) and, once
a checkpoint indexed some of its entries, an :class:`EntryRange` (first and last entry id indexed, and how
many). All of them are loaded at startup, as BookKeeper does, so the request path answers "which key, is it
fenced" with a dict lookup. Changes apply here at once, mark the ledger *dirty*, and reach RocksDB at the
next checkpoint; their durability until then comes from the journal.

``LedgerState`` is immutable: a change replaces it, so a reader never sees half an update.

The entry range is what lets a read miss be classified honestly (invariant 8 of docs/architecture.md §3): an
entry outside the range, or inside the gaps of a ledger whose index still holds ``count`` entries, was never
stored here (NoEntry); a missing entry of a contiguous range, or of a range whose index lost entries, is an
I/O error.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from magnetar.bookkeeper.bookie.storage.entry_index import EntryIndex, EntryRange
from magnetar.bookkeeper.bookie.storage.errors import BookieError, NoEntryError, NoLedgerError, StorageIOError
from magnetar.bookkeeper.bookie.storage.ledger_store import LedgerState

log = logging.getLogger(__name__)


class LedgerRegistry:
    def __init__(self, states: dict[int, LedgerState], ranges: dict[int, EntryRange]) -> None:
        self.states = states
        """``ledgerId -> LedgerState`` of every ledger stored here (read it directly on hot paths)."""
        self.ranges = ranges
        """``ledgerId -> EntryRange`` as the index holds it (updated after each checkpoint)."""
        self._verified: dict[int, EntryRange] = {}
        self._dirty: set[int] = set()

    def known(self, ledger_id: int) -> LedgerState:
        state = self.states.get(ledger_id)
        if state is None:
            raise NoLedgerError(f"ledger {ledger_id} is unknown here")
        return state

    # -- changes (each marks the ledger dirty for the next checkpoint) -----------------------------------

    def create(self, ledger_id: int, master_key: bytes, *, replaying: bool = False) -> None:
        state = self.states.get(ledger_id)
        if state is None:
            self.states[ledger_id] = LedgerState(master_key=bytes(master_key), fenced=False)
            self._dirty.add(ledger_id)
        elif state.master_key != master_key:
            if not replaying:
                raise ValueError(f"ledger {ledger_id} exists with another master key")
            log.warning("replay: ledger %d journaled with another master key; keeping the first", ledger_id)

    def fence(self, ledger_id: int) -> None:
        state = self.states.get(ledger_id)
        if state is not None and not state.fenced:
            self.states[ledger_id] = replace(state, fenced=True)
            self._dirty.add(ledger_id)

    def set_explicit_lac(self, ledger_id: int, body: bytes) -> None:
        state = self.states.get(ledger_id)
        if state is not None:
            self.states[ledger_id] = replace(state, explicit_lac_body=bytes(body))
            self._dirty.add(ledger_id)

    def forget(self, ledger_id: int) -> None:
        self.states.pop(ledger_id, None)
        self.ranges.pop(ledger_id, None)
        self._verified.pop(ledger_id, None)
        self._dirty.discard(ledger_id)

    def take_dirty(self) -> set[int]:
        """The ledgers changed since the last call (their records go into the next checkpoint)."""
        dirty, self._dirty = self._dirty, set()
        return dirty

    def install_ranges(self, ranges: Mapping[int, EntryRange]) -> None:
        """Ranges a checkpoint wrote to the index; those of ledgers deleted meanwhile are dropped."""
        for ledger_id, rng in ranges.items():
            if ledger_id in self.states:
                self.ranges[ledger_id] = rng

    # -- classifying what the index lacks ------------------------------------------------------------------

    def absent_error(self, index: EntryIndex, ledger_id: int, entry_id: int) -> BookieError:
        """NoEntry if the entry was never stored here; StorageIOError if the index lost it."""
        rng = self.ranges.get(ledger_id)
        if rng is None or entry_id not in rng:
            return NoEntryError(f"entry {ledger_id}:{entry_id} was never stored here")
        if not rng.contiguous and self._verified.get(ledger_id) != rng:
            try:
                held = index.count_entries(ledger_id, rng.first, rng.last)
            except Exception as exc:
                return StorageIOError(f"index scan of ledger {ledger_id} failed: {exc}")
            if held >= rng.count:
                self._verified[ledger_id] = rng
        if self._verified.get(ledger_id) == rng:
            return NoEntryError(f"entry {ledger_id}:{entry_id} was never stored here")
        log.error(
            "entry %d:%d is missing from the index, which should hold it (%s)", ledger_id, entry_id, rng
        )
        return StorageIOError(f"entry {ledger_id}:{entry_id} should be here but the index lost it")

    def check_last_indexed(self, ledger_id: int, indexed_last: int | None) -> None:
        """Raise StorageIOError if the index ends before the last entry it is known to hold."""
        rng = self.ranges.get(ledger_id)
        if rng is not None and (indexed_last is None or indexed_last < rng.last):
            log.error(
                "ledger %d: index ends at %s but entry %d was indexed", ledger_id, indexed_last, rng.last
            )
            raise StorageIOError(f"ledger {ledger_id}: the index lost its last entries")

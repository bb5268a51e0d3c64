"""An in-memory :class:`~.ledger_store.LedgerStore` for in-process bookies and the simulation.

It keeps two copies of the state: the *live* state every operation changes at once (what reads and checks
see), and the *durable* state that only changes when :meth:`MemoryLedgerStore.sync` runs - the moral
equivalent of the journal fsync. Durability callbacks fire in :meth:`sync`, in the order the operations were
made. :meth:`crash` throws the live state away and restarts from the durable one, dropping pending callbacks
(their requests never get an answer, as with a real crash), which is how the simulation models a bookie that
loses its unsynced writes.

With ``auto_sync=True`` (the default) :meth:`run` syncs every ``sync_interval_s`` while operations are
pending, which keeps in-process bookies usable without a manual driver; the simulation instead calls
:meth:`sync` on its own schedule (slow disks) and :meth:`crash` for faults.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import trio

from magnetar.bookkeeper.bookie.storage.errors import (
    DiskFullError,
    NoEntryError,
    NoLedgerError,
    StorageClosedError,
)
from magnetar.bookkeeper.bookie.storage.ledger_store import DiskUsage, DurableCallback, LedgerState

_Mutation = Callable[["_State"], None]


@dataclass(slots=True)
class _Ledger:
    master_key: bytes
    fenced: bool = False
    explicit_lac_body: bytes | None = None
    entries: dict[int, bytes] = field(default_factory=dict)
    entry_ids: list[int] = field(default_factory=list)  # sorted, for "last entry"

    def put(self, entry_id: int, body: bytes) -> None:
        if entry_id not in self.entries:
            bisect.insort(self.entry_ids, entry_id)
        self.entries[entry_id] = body


@dataclass(slots=True)
class _State:
    ledgers: dict[int, _Ledger] = field(default_factory=dict)
    used_bytes: int = 0


class MemoryLedgerStore:
    def __init__(
        self,
        *,
        capacity_bytes: int = 1 << 40,
        auto_sync: bool = True,
        sync_interval_s: float = 0.001,
    ) -> None:
        self.capacity_bytes = capacity_bytes
        self.auto_sync = auto_sync
        self.sync_interval_s = sync_interval_s
        self._live = _State()
        self._durable = _State()
        self._pending: list[tuple[_Mutation, DurableCallback]] = []
        self._wakeup = trio.Event()
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Background syncer for ``auto_sync``; run it in the owner's nursery."""
        while not self._closed:
            if not self._pending:
                self._wakeup = trio.Event()
                await self._wakeup.wait()
                continue
            await trio.sleep(self.sync_interval_s)
            if self.auto_sync:
                self.sync()

    def sync(self) -> None:
        """Make every pending operation durable and fire its callback, in order."""
        pending, self._pending = self._pending, []
        for mutation, _ in pending:
            mutation(self._durable)
        for _, callback in pending:
            callback(None)

    def crash(self) -> None:
        """Lose everything not yet synced; pending callbacks never fire."""
        self._pending = []
        self._live = copy.deepcopy(self._durable)

    def close(self) -> None:
        self._closed = True
        self._wakeup.set()

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    # -- LedgerStore -------------------------------------------------------------------------------------

    def ledger_state(self, ledger_id: int) -> LedgerState | None:
        ledger = self._live.ledgers.get(ledger_id)
        if ledger is None:
            return None
        return LedgerState(ledger.master_key, ledger.fenced, ledger.explicit_lac_body)

    def create_ledger(self, ledger_id: int, master_key: bytes, on_durable: DurableCallback) -> None:
        def mutation(state: _State) -> None:
            state.ledgers.setdefault(ledger_id, _Ledger(master_key))

        self._apply(mutation, on_durable)

    def begin_burst(self) -> None:
        """Nothing to do: syncs follow ``auto_sync`` or :meth:`sync`."""

    def end_burst(self) -> None:
        """Nothing to do: syncs follow ``auto_sync`` or :meth:`sync`."""

    def add_entry(self, ledger_id: int, entry_id: int, body: bytes, on_durable: DurableCallback) -> None:
        if self._live.used_bytes + len(body) > self.capacity_bytes:
            raise DiskFullError(f"memory store full ({self.capacity_bytes} bytes)")
        if ledger_id not in self._live.ledgers:
            raise NoLedgerError(f"ledger {ledger_id} has no master key here")

        def mutation(state: _State) -> None:
            ledger = state.ledgers.get(ledger_id)
            if ledger is not None:  # deleted meanwhile
                ledger.put(entry_id, body)
                state.used_bytes += len(body)

        self._apply(mutation, on_durable)

    def fence(self, ledger_id: int, on_durable: DurableCallback) -> None:
        def mutation(state: _State) -> None:
            ledger = state.ledgers.get(ledger_id)
            if ledger is not None:
                ledger.fenced = True

        self._apply(mutation, on_durable)

    def set_explicit_lac(self, ledger_id: int, body: bytes, on_durable: DurableCallback) -> None:
        def mutation(state: _State) -> None:
            ledger = state.ledgers.get(ledger_id)
            if ledger is not None:
                ledger.explicit_lac_body = body

        self._apply(mutation, on_durable)

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        self._check_open()
        ledger = self._live.ledgers.get(ledger_id)
        if ledger is None:
            raise NoLedgerError(f"no ledger {ledger_id}")
        if entry_id < 0:
            if not ledger.entry_ids:
                raise NoEntryError(f"ledger {ledger_id} has no entries")
            entry_id = ledger.entry_ids[-1]
        body = ledger.entries.get(entry_id)
        if body is None:
            raise NoEntryError(f"no entry {ledger_id}:{entry_id}")
        return body

    def delete_ledger(self, ledger_id: int) -> None:
        for state in (self._live, self._durable):
            ledger = state.ledgers.pop(ledger_id, None)
            if ledger is not None:
                state.used_bytes -= sum(len(b) for b in ledger.entries.values())

    def ledgers(self) -> Iterable[int]:
        return sorted(self._live.ledgers)

    def disk_usage(self) -> DiskUsage:
        return DiskUsage(self.capacity_bytes, self.capacity_bytes - self._live.used_bytes)

    def journal_disk_usage(self) -> DiskUsage:
        return self.disk_usage()  # one pretend volume

    # -- internals ---------------------------------------------------------------------------------------

    def _apply(self, mutation: _Mutation, on_durable: DurableCallback) -> None:
        self._check_open()
        mutation(self._live)
        self._pending.append((mutation, on_durable))
        self._wakeup.set()

    def _check_open(self) -> None:
        if self._closed:
            raise StorageClosedError("memory ledger store is closed")

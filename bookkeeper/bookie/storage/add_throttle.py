"""Adds that wait for room in the write cache: BookKeeper's write throttle, bounded in time and bytes.

BookKeeper's ``DbLedgerStorage`` does not refuse an add that finds its write cache full while the other
half is still being flushed: ``triggerFlushAndAddEntry`` retries for up to ``dbStorage_maxThrottleTimeMs``
and only then throws. Here the engine's adds run on the event loop and must not block it, so such an add
joins a queue instead: :class:`AddThrottle` serves the queue in arrival order as room appears (a completed
flush, a drained journal) and refuses with :class:`StorageBusyError` (ETOOMANYREQUESTS) an add still waiting
after ``write_throttle_ms_max``. Adds that arrive while others wait queue behind them, so a ledger's entries
keep their order. The queue holds at most ``bytes_max`` (half of ``write_cache_bytes_max``), counted as the
write cache counts; beyond it an add is refused at once, as with ``write_throttle_ms_max = 0``.

A fence fails the waiting adds of its ledger (EFENCED) - none was acknowledged, and a recovery that fenced
the ledger must not meet one of them after its fence - and a closing store fails them all.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Protocol

import trio

from magnetar.bookkeeper.bookie.storage.errors import (
    BookieError,
    NoLedgerError,
    StorageBusyError,
    StorageClosedError,
)
from magnetar.bookkeeper.bookie.storage.ledger_store import DurableCallback
from magnetar.bookkeeper.bookie.storage.write_cache import ENTRY_OVERHEAD_BYTES


@dataclass(slots=True)
class WaitingAdd:
    ledger_id: int
    entry_id: int
    body: bytes
    on_durable: DurableCallback
    deadline: float = 0.0


class ThrottledStore(Protocol):
    """What the throttle needs of the storage engine."""

    @property
    def accepting(self) -> bool: ...

    def knows(self, ledger_id: int) -> bool: ...

    def has_room(self, size: int) -> bool:
        """Whether an add of ``size`` bytes can go in now."""
        ...

    def add_now(self, ledger_id: int, entry_id: int, body: bytes, on_durable: DurableCallback) -> None: ...

    async def wait_writable(self, size: int) -> None: ...


class AddThrottle:
    def __init__(self, store: ThrottledStore, *, wait_ms: int, bytes_max: int) -> None:
        self._store = store
        self._wait_s = wait_ms / 1000
        self._bytes_max = bytes_max
        self._waiting: deque[WaitingAdd] = deque()
        self.bytes = 0
        """Bytes of the waiting adds (entry bytes plus the write cache's per-entry overhead)."""
        self.throttled = 0
        """Adds that had to wait, since start."""
        self._wakeup = trio.Event()

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def submit(self, add: WaitingAdd) -> None:
        """Queue ``add`` until there is room, or refuse it now (:class:`StorageBusyError`)."""
        size = len(add.body) + ENTRY_OVERHEAD_BYTES
        if not self._wait_s or self.bytes + size > self._bytes_max:
            raise StorageBusyError(
                f"write cache full while flushing: {self.bytes} bytes of adds already wait for room (at most "
                f"{self._bytes_max}, half of write_cache_bytes_max; write_throttle_ms_max="
                f"{round(self._wait_s * 1000)})"
            )
        add.deadline = trio.current_time() + self._wait_s
        self._waiting.append(add)
        self.bytes += size
        self.throttled += 1
        self._wakeup.set()

    def fail(self, ledger_id: int | None, error: BookieError) -> None:
        """Fail the waiting adds of ``ledger_id`` (of every ledger when None) with ``error``."""
        if not self._waiting:
            return
        kept: deque[WaitingAdd] = deque()
        for add in self._waiting:
            if ledger_id is None or add.ledger_id == ledger_id:
                self.bytes -= len(add.body) + ENTRY_OVERHEAD_BYTES
                add.on_durable(error)
            else:
                kept.append(add)
        self._waiting = kept

    async def run(self) -> None:
        """Serve the waiting adds in order as room appears; refuse those whose wait ran out."""
        while True:
            if not self._waiting:
                self._wakeup = trio.Event()
                await self._wakeup.wait()
                continue
            head = self._waiting[0]
            with trio.move_on_at(head.deadline):
                await self._store.wait_writable(len(head.body))
            self._serve()
            await trio.lowlevel.checkpoint()

    def _serve(self) -> None:
        store = self._store
        now = trio.current_time()
        waiting = self._waiting
        while waiting:
            head = waiting[0]
            size = len(head.body)
            error: BookieError | None = None
            if not store.accepting:
                error = StorageClosedError("the ledger store is not accepting writes")
            elif not store.knows(head.ledger_id):
                error = NoLedgerError(f"ledger {head.ledger_id} was deleted while its add waited")
            elif not store.has_room(size):
                if now < head.deadline:
                    return
                wait_ms = round(self._wait_s * 1000)
                error = StorageBusyError(f"no room in the write cache for write_throttle_ms_max={wait_ms}")
            waiting.popleft()
            self.bytes -= size + ENTRY_OVERHEAD_BYTES
            if error is None:
                try:
                    store.add_now(head.ledger_id, head.entry_id, head.body, head.on_durable)
                    continue
                except BookieError as exc:
                    error = exc
            head.on_durable(error)

"""The add pipeline of one ledger: BookKeeper's ``PendingAddOp`` + the add half of ``LedgerHandle``.

Theory of operation (docs/upstream.md, BookKeeper §2.1-§2.4, invariants 1, 2 and 5 of docs/architecture.md
§3):

* Entry ids are ``lastAddPushed + 1``. A normal add is packaged with the current LAC (piggybacked) and the
  cumulative length, and sent to its write set ``[(e + i) mod E]`` of the *last* ensemble. Every pending
  entry is above the LAC and every ensemble change starts at LAC + 1, so pending entries always live in the
  last ensemble.
* An entry is *completed* once AQ bookies of its write set acknowledged it. Completed entries are
  acknowledged (callback, LAC, length) strictly in id order, and never while an ensemble change is in flight.
* A response is counted only if it answers the latest send of that entry to that index (a per-index
  generation): answers from a replaced bookie, or to a superseded send, are ignored.
* EFENCED / EUA / EBADREQ are unrecoverable: every pending add fails (outcome unknown) and the writer stops.
  Any other failure (timeout, EIO, EREADONLY, connection) triggers an ensemble change; failures reported
  while one is in flight are queued and handled when it ends.
* The ensemble change itself is delegated to an :class:`EnsembleChanger`: the writer's handle writes the new
  ensemble to metadata (compare-and-set); ledger recovery keeps it locally until the closing write. When it
  returns, every pending entry whose write set touches a replaced index loses that index's ack and is re-sent
  (same bytes) to the replacement; then acknowledgements resume.

Everything here runs on the trio thread from transport callbacks; nothing blocks and no task is started per
add. Recovery uses the same pipeline with RECOVERY_ADD requests carrying the recovered bytes unchanged.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

import trio

from magnetar.bookkeeper.client.bookie_client import Answer
from magnetar.bookkeeper.client.context import ClientContext
from magnetar.bookkeeper.client.distribution import write_set
from magnetar.bookkeeper.client.errors import BKError, BKWriteError, TooManyRequestsError, error_for_status
from magnetar.bookkeeper.client.transport import BookieId, next_request_id
from magnetar.bookkeeper.protocol import (
    AddRequest,
    AddResponse,
    BookieStatus,
    Digester,
    Payload,
    payload_size,
)

log = logging.getLogger(__name__)

AddCallback = Callable[[int | BKError], None]
"""Called once per add with the entry id (acknowledged) or the error (failed or outcome unknown)."""

_UNRECOVERABLE = (BookieStatus.EFENCED, BookieStatus.EUA, BookieStatus.EBADREQ)


class EnsembleChanger(Protocol):
    async def change(self, writer: LedgerWriter, failed: dict[int, BookieId]) -> tuple[int, list[BookieId]]:
        """Replace the failed bookies; return the new last ensemble (first entry id, bookies)."""
        ...


class PendingAddOp:
    __slots__ = (
        "acked", "body", "callback", "completed", "entry_id", "finished", "generations", "length", "started",
        "tail",
    )  # fmt: skip

    def __init__(
        self,
        entry_id: int,
        body: bytes,
        length: int,
        callback: AddCallback,
        started: float = 0.0,
        tail: tuple[bytes | memoryview, ...] = (),
    ) -> None:
        self.entry_id = entry_id
        self.started = started
        self.body = body
        """The packaged entry, or its head (header and digest) when ``tail`` holds the payload's parts."""
        self.tail = tail
        self.length = length
        self.callback = callback
        self.acked: set[int] = set()
        self.generations: dict[int, int] = {}
        self.completed = False
        self.finished = False


class LedgerWriter:
    def __init__(
        self,
        ctx: ClientContext,
        ledger_id: int,
        quorums: tuple[int, int, int],
        last_ensemble: tuple[int, list[BookieId]],
        *,
        master_key: bytes,
        digester: Digester,
        last_add_confirmed: int,
        length: int,
        changer: EnsembleChanger,
        recovery: bool = False,
    ) -> None:
        self.ctx = ctx
        self.ledger_id = ledger_id
        self.ensemble_size, self.write_quorum, self.ack_quorum = quorums
        self.ensemble_first, self.ensemble = last_ensemble[0], list(last_ensemble[1])
        self.master_key = master_key
        self.digester = digester
        self.last_add_confirmed = last_add_confirmed
        self.last_add_pushed = last_add_confirmed
        self.length = length
        self.pushed_length = length
        self.recovery = recovery
        self.changer = changer
        self.pending: deque[PendingAddOp] = deque()
        self.changing_ensemble = False
        self.ensemble_changes = 0
        self.error: BKError | None = None
        self._delayed_failures: dict[int, BookieId] = {}
        self._room = trio.lowlevel.ParkingLot()
        self._idle = trio.lowlevel.ParkingLot()
        self.on_error: Callable[[BKError], None] | None = None
        self.on_ack: Callable[[int], None] | None = None
        ctx.track_writer(self)

    # -- pushing adds ------------------------------------------------------------------------------------

    @property
    def has_failed(self) -> bool:
        return self.error is not None

    @property
    def has_room(self) -> bool:
        return len(self.pending) < self.ctx.settings.pending_adds_max

    async def wait_for_room(self) -> None:
        while self.error is None and not self.has_room:
            await self._room.park()

    async def wait_idle(self) -> None:
        """Until nothing is pending (all acknowledged or failed)."""
        while self.pending:
            await self._idle.park()

    def push(self, payload: Payload, callback: AddCallback) -> int:
        """Package and send the next entry; its outcome goes to ``callback``. Returns the entry id.

        The payload (one buffer or its parts in order) is not copied: the packaged entry is a head (header
        and digest, computed over the parts) followed by the parts, each sent to every bookie as it is."""
        if self.error is not None:
            self.ctx.call_soon(callback, self.error)
            return -1
        if not self.has_room:
            raise TooManyRequestsError(
                f"pending_adds_max={self.ctx.settings.pending_adds_max} adds in flight"
            )
        entry_id = self.last_add_pushed + 1
        parts = (payload,) if isinstance(payload, bytes) else payload
        length = self.pushed_length + payload_size(parts)
        head = self.digester.package_head(self.ledger_id, entry_id, self.last_add_confirmed, length, parts)
        self._start(PendingAddOp(entry_id, head, length, callback, trio.current_time(), parts))
        return entry_id

    def push_packaged(self, entry_id: int, body: bytes, length: int, callback: AddCallback) -> None:
        """Recovery: re-add an entry read back from bookies, bytes unchanged (must be the next id)."""
        if entry_id != self.last_add_pushed + 1:
            raise BKWriteError(f"recovery add of entry {entry_id}, expected {self.last_add_pushed + 1}")
        if self.error is not None:
            self.ctx.call_soon(callback, self.error)
            return
        self._start(PendingAddOp(entry_id, body, length, callback, trio.current_time()))

    def _start(self, op: PendingAddOp) -> None:
        self.last_add_pushed = op.entry_id
        self.pushed_length = op.length
        self.pending.append(op)
        for index in write_set(op.entry_id, self.ensemble_size, self.write_quorum):
            self._send(op, index)

    def _send(self, op: PendingAddOp, index: int) -> None:
        bookie = self.ensemble[index]
        generation = op.generations.get(index, 0) + 1
        op.generations[index] = generation
        request = AddRequest(
            next_request_id(),
            self.ledger_id,
            op.entry_id,
            self.master_key,
            op.body,
            recovery=self.recovery,
            high_priority=self.recovery,
            tail=op.tail,
        )
        self.ctx.rpc.send(
            bookie,
            request,
            self.ctx.rpc.adds,
            lambda answer: self._on_answer(op, index, bookie, generation, answer),
        )

    # -- answers -------------------------------------------------------------------------------------------

    def _on_answer(
        self, op: PendingAddOp, index: int, bookie: BookieId, generation: int, answer: Answer
    ) -> None:
        if op.generations.get(index) != generation or self.ensemble[index] != bookie:
            return  # superseded send, or the bookie was replaced meanwhile
        if isinstance(answer, AddResponse) and answer.status is BookieStatus.EOK:
            if op.finished or op.completed:
                op.acked.add(index)
                return
            op.acked.add(index)
            if len(op.acked) >= self.ack_quorum:
                op.completed = True
                self._send_callbacks()
            return
        if isinstance(answer, AddResponse) and answer.status in _UNRECOVERABLE:
            self.fail(error_for_status(answer.status, f"add {self.ledger_id}:{op.entry_id} on {bookie}"))
            return
        log.debug("ledger %d: add %d failed on %s: %s", self.ledger_id, op.entry_id, bookie, answer)
        self.handle_bookie_failure({index: bookie})

    def _send_callbacks(self) -> None:
        """Acknowledge completed entries in id order (BookKeeper's ``sendAddSuccessCallbacks``)."""
        pending = self.pending
        stats = self.ctx.stats
        now = trio.current_time() if pending else 0.0
        while pending and not self.changing_ensemble and self.error is None:
            op = pending[0]
            if not op.completed:
                break
            stats.record_add(now - op.started)
            assert op.entry_id == self.last_add_confirmed + 1, "LAC must never skip an entry"
            pending.popleft()
            self.last_add_confirmed = op.entry_id
            self.length = op.length
            op.finished = True
            if self.on_ack is not None:
                self.on_ack(op.entry_id)
            _notify(op.callback, op.entry_id)
        self._wake()

    def _wake(self) -> None:
        if self._room:
            self._room.unpark_all()
        if self._idle and not self.pending:
            self._idle.unpark_all()

    # -- failures ------------------------------------------------------------------------------------------

    def fail(self, error: BKError) -> None:
        """Unrecoverable: fail every pending add with ``error`` and accept no more."""
        if self.error is not None:
            return
        self.error = error
        failed = list(self.pending)
        self.pending.clear()
        self.ctx.stats.add_failures += len(failed)
        for op in failed:
            op.finished = True
            _notify(op.callback, error)
        self._wake()
        if self.on_error is not None:
            self.on_error(error)

    def handle_bookie_failure(self, failed: dict[int, BookieId]) -> None:
        if self.error is not None:
            return
        failed = {i: b for i, b in failed.items() if self.ensemble[i] == b}
        if not failed:
            return
        for bookie in failed.values():
            self.ctx.placement.quarantine(bookie)
        if self.changing_ensemble:
            self._delayed_failures.update(failed)
            return
        self.changing_ensemble = True
        self.ctx.spawn(self._ensemble_change_loop, failed)

    async def _ensemble_change_loop(self, failed: dict[int, BookieId]) -> None:
        try:
            while failed and self.error is None:
                if self.ensemble_changes >= self.ctx.settings.ensemble_changes_max:
                    raise BKWriteError(
                        f"ensemble_changes_max={self.ctx.settings.ensemble_changes_max} reached"
                    )
                self.ensemble_changes += 1
                self.ctx.stats.ensemble_changes += 1
                first, ensemble = await self.changer.change(self, failed)
                if self.has_failed:
                    return
                self._install_ensemble(first, ensemble)
                failed = {i: b for i, b in self._delayed_failures.items() if self.ensemble[i] == b}
                self._delayed_failures.clear()
        except BKError as exc:
            log.warning("ledger %d: ensemble change failed: %s", self.ledger_id, exc)
            self.fail(exc)
        finally:
            self.changing_ensemble = False
        self._send_callbacks()

    def _install_ensemble(self, first: int, ensemble: list[BookieId]) -> None:
        assert first <= self.last_add_confirmed + 1, "pending entries must all fall in the new ensemble"
        replaced = [i for i in range(self.ensemble_size) if ensemble[i] != self.ensemble[i]]
        log.info("ledger %d: ensemble from %d is now %s", self.ledger_id, first, ensemble)
        self.ensemble_first, self.ensemble = first, list(ensemble)
        for op in list(self.pending):
            touched = [
                i for i in write_set(op.entry_id, self.ensemble_size, self.write_quorum) if i in replaced
            ]
            for index in touched:
                op.acked.discard(index)
            op.completed = len(op.acked) >= self.ack_quorum
            for index in touched:
                self._send(op, index)


def _notify(callback: AddCallback, outcome: int | BKError) -> None:
    try:
        callback(outcome)
    except Exception:
        log.exception("add callback failed")

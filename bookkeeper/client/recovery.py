"""Fencing and ledger recovery (BookKeeper's ``LedgerRecoveryOp`` with the 4.14 fixes), docs/upstream.md,
BookKeeper §3.

1. Compare-and-set OPEN -> IN_RECOVERY (already IN_RECOVERY: a concurrent or crashed recoverer - proceed,
   recovery is idempotent; CLOSED: nothing to do).
2. Fence: a fencing READ_ENTRY(-1) to every bookie of the last ensemble until the coverage rule holds
   (:class:`~.read_lac.ReadLastConfirmedOp`). From then on the old writer cannot gather AQ acks.
3. ``LAC = max(maxLAC, firstEntry(lastEnsemble) - 1)`` - the floor is the fix for #2615 (an ensemble whose
   bookies all answer "no entry" must not pull the LAC below entries acknowledged in earlier ensembles).
4. Read forward from LAC + 1, ``recovery_read_batch_size`` reads in flight, with **fencing** recovery reads
   (fix for #2614: a bookie that answered "no such entry" is fenced and can never accept that entry from the
   old writer afterwards). Per entry: *found* on one OK answer with a valid digest; *absent* on
   ``WQ - AQ + 1`` NoSuchEntry/NoSuchLedger answers from its write set; anything else is *unknown* and
   aborts recovery (:class:`LedgerRecoveryError`; the ledger stays IN_RECOVERY for a later attempt).
   The first absent entry ends the ledger.
5. Every found entry is written back in order with RECOVERY_ADD (same bytes) to its write set in the current
   ensemble and needs AQ acks; a bookie failure is handled with a replacement ensemble kept locally.
6. Close: compare-and-set IN_RECOVERY -> CLOSED with lastEntryId = last re-written entry, its length, and
   the recovery ensembles. If another client closed it meanwhile, adopt its metadata.

``INJECTED_BUGS`` is a test-only switch that re-introduces the upstream defects so tests can prove that the
simulation's checkers catch them. Nothing outside tests may set it.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import trio

from magnetar.bookkeeper.client.bookie_client import Answer
from magnetar.bookkeeper.client.context import ClientContext
from magnetar.bookkeeper.client.distribution import negative_answers_needed, write_set
from magnetar.bookkeeper.client.ensemble_change import LocalEnsembleChanger
from magnetar.bookkeeper.client.errors import (
    BKError,
    LedgerRecoveryError,
    UnauthorizedError,
)
from magnetar.bookkeeper.client.metadata import LedgerMetadata, LedgerState, Versioned
from magnetar.bookkeeper.client.read_lac import ReadLastConfirmedOp
from magnetar.bookkeeper.client.read_op import ReadEntriesOp
from magnetar.bookkeeper.client.transport import next_request_id
from magnetar.bookkeeper.client.update_loop import MetadataUpdateLoop
from magnetar.bookkeeper.client.writer import LedgerWriter
from magnetar.bookkeeper.protocol import (
    BookieStatus,
    Digester,
    DigestError,
    PackagedEntry,
    ReadRequest,
    ReadResponse,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class InjectedBugs:
    """Test-only: re-introduce known recovery defects. Never set outside tests."""

    unfenced_recovery_reads: bool = False
    """BookKeeper < 4.14: recovery reads without the fence flag (BookKeeper #2614)."""
    negative_answers: int | None = None
    """Declare an entry absent after this many NoSuchEntry answers instead of WQ - AQ + 1."""
    no_lac_floor: bool = False
    """BookKeeper < 4.14: recovery LAC not floored at the last ensemble's first entry - 1 (its #2615)."""


INJECTED_BUGS = InjectedBugs()


class ReadOutcome(enum.Enum):
    FOUND = "found"
    ABSENT = "absent"
    UNKNOWN = "unknown"


class _RecoveryRead:
    """One fencing recovery read of one entry from its whole write set (answers in any order)."""

    def __init__(self, op: LedgerRecoveryOp, entry_id: int, bookies: list[str], needed_absent: int) -> None:
        self.entry_id = entry_id
        self.outcome: ReadOutcome | None = None
        self.entry: PackagedEntry | None = None
        self.body = b""
        self.errors: list[str] = []
        self._op = op
        self._absent = 0
        self._outstanding = len(bookies)
        self._needed_absent = needed_absent
        self.done = trio.Event()
        fence = not INJECTED_BUGS.unfenced_recovery_reads
        for bookie in bookies:
            request = ReadRequest(
                next_request_id(),
                op.ledger_id,
                entry_id,
                fence=fence,
                master_key=op.master_key if fence else None,
                high_priority=True,
            )
            op.ctx.rpc.send(bookie, request, op.ctx.rpc.reads, self._answer_handler(bookie))

    def _answer_handler(self, bookie: str) -> Callable[[Answer], None]:
        return lambda answer: self._on_answer(bookie, answer)

    def _on_answer(self, bookie: str, answer: Answer) -> None:
        self._outstanding -= 1
        if self.outcome is not None:
            return
        if isinstance(answer, ReadResponse) and answer.status is BookieStatus.EOK:
            try:
                self.entry = self._op.digester.unpack(answer.body, self._op.ledger_id, self.entry_id)
            except DigestError as exc:
                self.errors.append(f"{bookie}: {exc}")
            else:
                self.body = answer.body
                self._finish(ReadOutcome.FOUND)
                return
        elif isinstance(answer, ReadResponse) and answer.status in (
            BookieStatus.ENOENTRY,
            BookieStatus.ENOLEDGER,
        ):
            self._absent += 1
            if self._absent >= self._needed_absent:
                self._finish(ReadOutcome.ABSENT)
                return
        else:
            self.errors.append(f"{bookie}: {answer}")
        if self._outstanding == 0:
            self._finish(ReadOutcome.UNKNOWN)

    def _finish(self, outcome: ReadOutcome) -> None:
        self.outcome = outcome
        self.done.set()


class LedgerRecoveryOp:
    def __init__(
        self, ctx: ClientContext, ledger_id: int, versioned: Versioned, digester: Digester, master_key: bytes
    ) -> None:
        self.ctx = ctx
        self.ledger_id = ledger_id
        self.versioned = versioned
        self.digester = digester
        self.master_key = master_key

    async def run(self) -> Versioned:
        versioned = await self._mark_in_recovery()
        if versioned.metadata.is_closed:
            return versioned
        md = versioned.metadata
        first, ensemble = md.last_ensemble
        fence = ReadLastConfirmedOp(
            self.ctx, self.ledger_id, md, self.digester, fence=True, master_key=self.master_key
        )
        try:
            max_lac = await fence.run()
        except UnauthorizedError:
            raise
        except BKError as exc:
            raise LedgerRecoveryError(
                f"ledger {self.ledger_id}: fencing did not reach coverage: {exc}"
            ) from exc
        lac = max_lac if INJECTED_BUGS.no_lac_floor else max(max_lac, first - 1)
        log.info("ledger %d: fenced; recovering from entry %d", self.ledger_id, lac + 1)
        changer = LocalEnsembleChanger(self.ctx)
        writer = LedgerWriter(
            self.ctx,
            self.ledger_id,
            (md.ensemble_size, md.write_quorum, md.ack_quorum),
            (first, list(ensemble)),
            master_key=self.master_key,
            digester=self.digester,
            last_add_confirmed=lac,
            length=0,
            changer=changer,
            recovery=True,
        )
        await self._read_and_rewrite(writer, md)
        if writer.last_add_confirmed < lac:  # the replay half of "the LAC never goes back" (§3 rules 2 and 9)
            raise AssertionError(
                f"internal error: ledger {self.ledger_id}: recovery would close at entry "
                f"{writer.last_add_confirmed}, below the LAC {lac} it started from"
            )
        if writer.last_add_confirmed == lac:
            length = await self._length_at(md, lac)
        else:
            length = writer.length
        return await self._close(versioned, changer, writer.last_add_confirmed, length)

    async def _mark_in_recovery(self) -> Versioned:
        loop = MetadataUpdateLoop(
            self.ctx.manager,
            self.ledger_id,
            self.versioned,
            lambda md: md.state is LedgerState.OPEN,
            lambda md: md.in_recovery(),
            retries_max=self.ctx.settings.metadata_retries_max,
        )
        return await loop.run()

    async def _read_and_rewrite(self, writer: LedgerWriter, md: LedgerMetadata) -> None:
        failures: list[BKError] = []

        def on_added(outcome: int | BKError) -> None:
            if isinstance(outcome, BKError):
                failures.append(outcome)

        needed = INJECTED_BUGS.negative_answers or negative_answers_needed(md.write_quorum, md.ack_quorum)
        window = self.ctx.settings.recovery_read_batch_size
        next_read = writer.last_add_confirmed + 1
        reads: deque[_RecoveryRead] = deque()
        # A sliding window of fencing reads; outcomes are consumed strictly in entry order, so the first
        # entry proven absent ends the ledger whatever the reads beyond it found.
        while True:
            while len(reads) < window:
                reads.append(self._read(writer, md, next_read, needed))
                next_read += 1
            read = reads.popleft()
            await read.done.wait()
            if read.outcome is ReadOutcome.ABSENT:
                break
            if read.outcome is ReadOutcome.UNKNOWN:
                raise LedgerRecoveryError(
                    f"ledger {self.ledger_id}: entry {read.entry_id} neither found nor proven absent "
                    f"({'; '.join(read.errors) or 'no answers'})"
                )
            assert read.entry is not None
            await writer.wait_for_room()
            if writer.error is not None:
                break
            writer.push_packaged(read.entry_id, read.body, read.entry.length, on_added)
        await writer.wait_idle()
        error = writer.error or (failures[0] if failures else None)
        if error is not None:
            raise LedgerRecoveryError(
                f"ledger {self.ledger_id}: writing recovered entries failed: {error}"
            ) from error

    def _read(self, writer: LedgerWriter, md: LedgerMetadata, entry_id: int, needed: int) -> _RecoveryRead:
        # Recovered entries are above the recovery LAC, hence in the last ensemble as it was at the fence.
        ensemble = md.last_ensemble[1]
        bookies = [ensemble[i] for i in write_set(entry_id, md.ensemble_size, md.write_quorum)]
        return _RecoveryRead(self, entry_id, bookies, needed)

    async def _length_at(self, md: LedgerMetadata, entry_id: int) -> int:
        """The ledger length after ``entry_id`` (from that entry's header); 0 for an empty ledger."""
        if entry_id < 0:
            return 0
        op = ReadEntriesOp(
            self.ctx, self.ledger_id, md, self.digester, first_entry_id=entry_id, last_entry_id=entry_id
        )
        try:
            (entry,) = await op.run()
        except BKError as exc:
            raise LedgerRecoveryError(
                f"ledger {self.ledger_id}: cannot read entry {entry_id}: {exc}"
            ) from exc
        return entry.length

    async def _close(
        self, versioned: Versioned, changer: LocalEnsembleChanger, last: int, length: int
    ) -> Versioned:
        def needs_update(md: LedgerMetadata) -> bool:
            if md.state is LedgerState.OPEN:
                raise LedgerRecoveryError(f"ledger {self.ledger_id} went back to OPEN during recovery")
            return md.state is LedgerState.IN_RECOVERY

        loop = MetadataUpdateLoop(
            self.ctx.manager,
            self.ledger_id,
            versioned,
            needs_update,
            lambda md: changer.apply(md).closed(last, length),
            retries_max=self.ctx.settings.metadata_retries_max,
        )
        closed = await loop.run()
        log.info(
            "ledger %d: recovered and closed at entry %d",
            self.ledger_id,
            closed.metadata.last_entry_id,
        )
        return closed

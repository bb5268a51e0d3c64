"""Reading entries (BookKeeper's ``PendingReadOp``, sequential-replica mode).

Each entry is read from the replicas of its write set (in the ensemble that stores it) one after another:
the first replica, then the next one when a replica answers with an error, times out, or returns bytes
whose digest does not verify. The entry fails only when every replica failed: with
:class:`DigestMismatchError` if every replica returned corrupt bytes, :class:`NoSuchEntryError` if every
replica said it has no such entry, else the last error seen.

Many entries are in flight at once (``reads_in_flight_max``), each driven by callbacks - reading 10,000
entries costs about 10,000 / window round trips, not 10,000 - and the results come back in entry order.
The caller guarantees the range is readable (at most the LAC, or the closed last entry).
"""

from __future__ import annotations

import trio

from magnetar.bookkeeper.client.bookie_client import Answer
from magnetar.bookkeeper.client.context import ClientContext
from magnetar.bookkeeper.client.distribution import write_set
from magnetar.bookkeeper.client.errors import (
    BKError,
    BKReadError,
    BKTimeoutError,
    DigestMismatchError,
    NoSuchEntryError,
    NoSuchLedgerError,
    error_for_status,
)
from magnetar.bookkeeper.client.metadata import LedgerMetadata
from magnetar.bookkeeper.client.transport import FailureReason, TransportFailure, next_request_id
from magnetar.bookkeeper.protocol import (
    BookieStatus,
    Digester,
    DigestError,
    PackagedEntry,
    ReadRequest,
    ReadResponse,
)


def answer_error(answer: Answer) -> BKError:
    """The client error an unsuccessful answer stands for."""
    if not isinstance(answer, TransportFailure):
        return error_for_status(answer.status)
    if answer.reason is FailureReason.TIMEOUT:
        return BKTimeoutError(f"bookie {answer.bookie} timed out")
    return BKReadError(f"bookie {answer.bookie} unreachable ({answer.reason.value})")


class _EntryRead:
    __slots__ = ("entry_id", "errors", "next_replica", "replicas")

    def __init__(self, entry_id: int, replicas: list[str]) -> None:
        self.entry_id = entry_id
        self.replicas = replicas
        self.next_replica = 0
        self.errors: list[BKError] = []


class ReadEntriesOp:
    def __init__(
        self,
        ctx: ClientContext,
        ledger_id: int,
        metadata: LedgerMetadata,
        digester: Digester,
        *,
        first_entry_id: int,
        last_entry_id: int,
    ) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._metadata = metadata
        self._digester = digester
        self._first = first_entry_id
        self._last = last_entry_id
        self._results: list[PackagedEntry | None] = [None] * (last_entry_id - first_entry_id + 1)
        self._next = first_entry_id
        self._in_flight = 0
        self._remaining = len(self._results)
        self._error: BKError | None = None
        self._done = trio.Event()

    async def run(self) -> list[PackagedEntry]:
        if self._remaining == 0:
            return []
        self._issue()
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return [entry for entry in self._results if entry is not None]

    def _issue(self) -> None:
        window = self._ctx.settings.reads_in_flight_max
        while self._error is None and self._in_flight < window and self._next <= self._last:
            entry_id = self._next
            self._next += 1
            ensemble = self._metadata.ensemble_for(entry_id)
            md = self._metadata
            replicas = [ensemble[i] for i in write_set(entry_id, md.ensemble_size, md.write_quorum)]
            self._in_flight += 1
            self._try_next(_EntryRead(entry_id, replicas))

    def _try_next(self, read: _EntryRead) -> None:
        if read.next_replica >= len(read.replicas):
            self._finish_failed(read)
            return
        bookie = read.replicas[read.next_replica]
        read.next_replica += 1
        request = ReadRequest(next_request_id(), self._ledger_id, read.entry_id)
        self._ctx.rpc.send(bookie, request, self._ctx.rpc.reads, lambda answer: self._on_answer(read, answer))

    def _on_answer(self, read: _EntryRead, answer: Answer) -> None:
        if self._error is not None:
            return
        if isinstance(answer, ReadResponse) and answer.status is BookieStatus.EOK:
            try:
                entry = self._digester.unpack(answer.body, self._ledger_id, read.entry_id)
            except DigestError as exc:
                read.errors.append(DigestMismatchError(str(exc)))
                self._try_next(read)
                return
            self._results[read.entry_id - self._first] = entry
            self._in_flight -= 1
            self._remaining -= 1
            if self._remaining == 0:
                self._done.set()
            else:
                self._issue()
            return
        read.errors.append(answer_error(answer))
        self._try_next(read)

    def _finish_failed(self, read: _EntryRead) -> None:
        errors = read.errors
        if errors and all(isinstance(e, DigestMismatchError) for e in errors):
            error: BKError = DigestMismatchError(
                f"entry {self._ledger_id}:{read.entry_id}: every replica corrupt"
            )
        elif errors and all(isinstance(e, (NoSuchEntryError, NoSuchLedgerError)) for e in errors):
            error = NoSuchEntryError(f"entry {self._ledger_id}:{read.entry_id} is on no replica")
        else:
            last = errors[-1] if errors else BKReadError("no replica")
            error = type(last)(f"entry {self._ledger_id}:{read.entry_id} unreadable on every replica: {last}")
        self._error = error
        self._done.set()

"""Reading the last add confirmed, optionally fencing (BookKeeper's ``ReadLastConfirmedOp``).

A READ_ENTRY for entry ``-1`` (the last entry each bookie stores) goes to every bookie of the last
ensemble. With ``fence=True`` it carries the fence flag and the master key: each bookie durably fences the
ledger before it answers (docs/upstream.md, BookKeeper §3 steps 2-3, invariants 6-7 of docs/architecture.md
§3).

An answer *covers* its bookie when it is OK (even if the entry's digest is bad: the bookie did fence) or
NoSuchEntry / NoSuchLedger (the bookie has nothing, e.g. the writer crashed before writing). The op
completes as soon as at least one such answer arrived and the covered bookies satisfy the coverage rule
(:func:`~.distribution.is_covered`); the result is the highest LAC piggybacked on a valid last entry
(``-1`` if none). EUA fails at once. When every bookie answered and coverage is still missing, the op fails
with the last error seen; for recovery the ledger then stays IN_RECOVERY.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from magnetar.bookkeeper.client.bookie_client import Answer
from magnetar.bookkeeper.client.context import ClientContext
from magnetar.bookkeeper.client.distribution import is_covered
from magnetar.bookkeeper.client.errors import BKError, BKReadError, UnauthorizedError
from magnetar.bookkeeper.client.metadata import LedgerMetadata
from magnetar.bookkeeper.client.read_op import answer_error
from magnetar.bookkeeper.client.transport import next_request_id
from magnetar.bookkeeper.protocol import (
    ENTRY_ID_LAST,
    BookieStatus,
    Digester,
    DigestError,
    ReadRequest,
    ReadResponse,
)

_ABSENT = (BookieStatus.ENOENTRY, BookieStatus.ENOLEDGER)


class ReadLastConfirmedOp:
    def __init__(
        self,
        ctx: ClientContext,
        ledger_id: int,
        metadata: LedgerMetadata,
        digester: Digester,
        *,
        fence: bool,
        master_key: bytes | None = None,
    ) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._metadata = metadata
        self._digester = digester
        self._fence = fence
        self._master_key = master_key
        self._covered: set[int] = set()
        self._outstanding = metadata.ensemble_size
        self._heard_valid = False
        self._max_lac = -1
        self._last_error: BKError | None = None
        self._result: int | BKError | None = None
        self._done = trio.Event()

    async def run(self) -> int:
        ensemble = self._metadata.last_ensemble[1]
        for index, bookie in enumerate(ensemble):
            request = ReadRequest(
                next_request_id(),
                self._ledger_id,
                ENTRY_ID_LAST,
                fence=self._fence,
                master_key=self._master_key if self._fence else None,
                high_priority=self._fence,
            )
            self._ctx.rpc.send(bookie, request, self._ctx.rpc.reads, self._answer_handler(index))
        await self._done.wait()
        assert self._result is not None
        if isinstance(self._result, BKError):
            raise self._result
        return self._result

    def _answer_handler(self, index: int) -> Callable[[Answer], None]:
        return lambda answer: self._on_answer(index, answer)

    def _on_answer(self, index: int, answer: Answer) -> None:
        self._outstanding -= 1
        if self._result is not None:
            return
        valid = False
        if isinstance(answer, ReadResponse) and answer.status is BookieStatus.EOK:
            self._covered.add(index)
            try:
                entry = self._digester.unpack(answer.body, self._ledger_id)
            except DigestError as exc:
                self._last_error = BKReadError(f"last entry from bookie {index} is corrupt: {exc}")
            else:
                self._max_lac = max(self._max_lac, entry.lac)
                valid = True
        elif isinstance(answer, ReadResponse) and answer.status in _ABSENT:
            self._covered.add(index)
            valid = True
        elif isinstance(answer, ReadResponse) and answer.status is BookieStatus.EUA:
            self._complete(UnauthorizedError(f"ledger {self._ledger_id}: wrong master key (EUA)"))
            return
        else:
            self._last_error = answer_error(answer)
        self._heard_valid = self._heard_valid or valid
        md = self._metadata
        if self._heard_valid and is_covered(md.ensemble_size, md.write_quorum, md.ack_quorum, self._covered):
            self._complete(self._max_lac)
        elif self._outstanding == 0:
            self._complete(self._last_error or BKReadError(f"ledger {self._ledger_id}: LAC not covered"))

    def _complete(self, result: int | BKError) -> None:
        self._result = result
        self._done.set()

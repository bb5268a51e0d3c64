"""The bookie's request logic: BookKeeper's ``BookieImpl`` + request processors, without any I/O.

Theory of operation (docs/upstream.md, BookKeeper §3, §4 and invariants 6-8 of docs/architecture.md §3):

* **Adds.** A read-only bookie refuses normal adds with EREADONLY but accepts recovery and high-priority adds
  (ledger recovery must be able to finish on a nearly full bookie). The first add of an unknown ledger records
  the ledger with the request's master key; later adds must present the same key (else EUA). A fenced ledger
  refuses normal adds with EFENCED and accepts RECOVERY_ADD. The answer EOK is sent only when the store
  reports the entry durable (journal fsync).
* **Fencing.** A READ_ENTRY with the fence flag checks the key (EUA on mismatch), records the ledger if it is
  unknown here (so a late add of the old writer still meets the fence), marks it fenced and waits until the
  fence is *durable* before it answers - in every case, including when the bookie has no entry (BookKeeper
  answers that case before the journal write; we do not). Fencing is sticky: nothing unfences.
* **Reads.** ENOLEDGER when the ledger is unknown, ENOENTRY only when the store knows the entry is absent, EIO
  when data that should exist cannot be read (never a false "no entry": invariant 8).

Responses go through ``respond`` callbacks so that the TCP server and the simulation's fake network drive
this class the same way. Each call answers exactly once.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable

from magnetar.bookkeeper.bookie.storage import (
    BookieError,
    DiskUsage,
    LedgerFencedError,
    LedgerStore,
    NoLedgerError,
    StorageBusyError,
)
from magnetar.bookkeeper.protocol import (
    BOOKIE_INFO_FREE_DISK,
    BOOKIE_INFO_TOTAL_DISK,
    AddRequest,
    AddResponse,
    BookieStatus,
    DigestError,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    WriteLacRequest,
    WriteLacResponse,
    peek_ids,
)

log = logging.getLogger(__name__)

Respond = Callable[[Response], None]

OK = BookieStatus.EOK


class BookieCore:
    def __init__(self, store: LedgerStore, *, is_readonly: Callable[[], bool] = lambda: False) -> None:
        self.store = store
        self._is_readonly = is_readonly

    def handle(self, request: Request, respond: Respond) -> None:
        """Dispatch one request; ``respond`` is called exactly once, now or when durability is reached."""
        if isinstance(request, AddRequest):
            self.handle_add(request, respond)
        elif isinstance(request, ReadRequest):
            self.handle_read(request, respond)
        elif isinstance(request, ReadLacRequest):
            self.handle_read_lac(request, respond)
        elif isinstance(request, WriteLacRequest):
            self.handle_write_lac(request, respond)
        else:
            self.handle_bookie_info(request, respond)

    def begin_burst(self) -> None:
        """The requests until :meth:`end_burst` were read together; see ``LedgerStore.begin_burst``."""
        self.store.begin_burst()

    def end_burst(self) -> None:
        """May answer requests of the burst (their durability callbacks) before it returns."""
        self.store.end_burst()

    # -- ADD_ENTRY -------------------------------------------------------------------------------------

    def handle_add(self, req: AddRequest, respond: Respond) -> None:
        def answer(status: BookieStatus) -> None:
            respond(AddResponse(req.request_id, status, req.ledger_id, req.entry_id))

        if self._is_readonly() and not (req.recovery or req.high_priority):
            answer(BookieStatus.EREADONLY)
            return
        try:
            body_ids = peek_ids(req.body)
        except DigestError:
            answer(BookieStatus.EBADREQ)
            return
        if body_ids != (req.ledger_id, req.entry_id):
            answer(BookieStatus.EBADREQ)
            return
        status = self._check_key_or_create(req.ledger_id, req.master_key)
        if status is not OK:
            answer(status)
            return
        state = self.store.ledger_state(req.ledger_id)
        if state is not None and state.fenced and not req.recovery:
            answer(BookieStatus.EFENCED)
            return

        def on_durable(error: BaseException | None) -> None:
            if error is not None:
                # A refusal after waiting (busy, fenced meanwhile) is the client's business; a failed write
                # is the operator's.
                level = (
                    logging.WARNING
                    if isinstance(error, StorageBusyError | LedgerFencedError)
                    else logging.ERROR
                )
                log.log(level, "add %d:%d could not be made durable: %s", req.ledger_id, req.entry_id, error)
            answer(OK if error is None else _status_of(error))

        # An in-process client hands the payload over in parts (``AddRequest.tail``): joined here, once.
        body = b"".join((req.body, *req.tail)) if req.tail else req.body
        try:
            self.store.add_entry(req.ledger_id, req.entry_id, body, on_durable)
        except BookieError as exc:
            log.warning("add %d:%d refused by storage: %s", req.ledger_id, req.entry_id, exc)
            answer(exc.status)

    # -- READ_ENTRY (optionally fencing) --------------------------------------------------------------

    def handle_read(self, req: ReadRequest, respond: Respond) -> None:
        if not req.fence:
            respond(self._read(req))
            return
        assert req.master_key is not None  # guaranteed by ReadRequest validation
        status = self._check_key_or_create(req.ledger_id, req.master_key)
        if status is not OK:
            respond(ReadResponse(req.request_id, status, req.ledger_id, req.entry_id))
            return

        def on_fence_durable(error: BaseException | None) -> None:
            if error is not None:
                log.error("fence of ledger %d could not be made durable: %s", req.ledger_id, error)
                respond(ReadResponse(req.request_id, BookieStatus.EIO, req.ledger_id, req.entry_id))
                return
            respond(self._read(req))

        try:
            self.store.fence(req.ledger_id, on_fence_durable)
        except BookieError as exc:
            respond(ReadResponse(req.request_id, exc.status, req.ledger_id, req.entry_id))

    def _read(self, req: ReadRequest) -> ReadResponse:
        try:
            body = self.store.read_entry(req.ledger_id, req.entry_id)
        except BookieError as exc:
            return ReadResponse(req.request_id, exc.status, req.ledger_id, req.entry_id)
        entry_id = req.entry_id if req.entry_id >= 0 else peek_ids(body)[1]
        return ReadResponse(req.request_id, OK, req.ledger_id, entry_id, body)

    # -- LAC --------------------------------------------------------------------------------------------

    def handle_read_lac(self, req: ReadLacRequest, respond: Respond) -> None:
        state = self.store.ledger_state(req.ledger_id)
        if state is None:
            respond(ReadLacResponse(req.request_id, BookieStatus.ENOLEDGER, req.ledger_id))
            return
        try:
            last = self.store.read_entry(req.ledger_id, -1)
        except NoLedgerError:
            last = b""
        except BookieError as exc:
            if exc.status is not BookieStatus.ENOENTRY:
                respond(ReadLacResponse(req.request_id, exc.status, req.ledger_id))
                return
            last = b""
        respond(ReadLacResponse(req.request_id, OK, req.ledger_id, state.explicit_lac_body or b"", last))

    def handle_write_lac(self, req: WriteLacRequest, respond: Respond) -> None:
        def answer(status: BookieStatus) -> None:
            respond(WriteLacResponse(req.request_id, status, req.ledger_id))

        state = self.store.ledger_state(req.ledger_id)
        if state is None:
            answer(BookieStatus.ENOLEDGER)
            return
        if not hmac.compare_digest(state.master_key, req.master_key):
            answer(BookieStatus.EUA)
            return
        try:
            self.store.set_explicit_lac(
                req.ledger_id, req.body, lambda err: answer(OK if err is None else _status_of(err))
            )
        except BookieError as exc:
            answer(exc.status)

    # -- GET_BOOKIE_INFO --------------------------------------------------------------------------------

    def handle_bookie_info(self, req: GetBookieInfoRequest, respond: Respond) -> None:
        try:
            usage = self.store.disk_usage()
        except (BookieError, OSError) as exc:
            log.warning("disk usage unavailable: %s", exc)
            respond(GetBookieInfoResponse(req.request_id, BookieStatus.EIO))
            return
        respond(_bookie_info(req, usage))

    # -- helpers ----------------------------------------------------------------------------------------

    def _check_key_or_create(self, ledger_id: int, master_key: bytes) -> BookieStatus:
        state = self.store.ledger_state(ledger_id)
        if state is None:
            try:
                self.store.create_ledger(ledger_id, master_key, _log_failure(ledger_id))
            except BookieError as exc:
                return exc.status
            return OK
        if not hmac.compare_digest(state.master_key, master_key):
            log.warning("ledger %d: request with a wrong master key (EUA)", ledger_id)
            return BookieStatus.EUA
        return OK


def _status_of(error: BaseException) -> BookieStatus:
    return error.status if isinstance(error, BookieError) else BookieStatus.EIO


def _log_failure(ledger_id: int) -> Callable[[BaseException | None], None]:
    def callback(error: BaseException | None) -> None:
        # The key record shares the journal with the add or fence that follows it; that operation's own
        # durability callback reports the failure to the client. Here we only leave a trace.
        if error is not None:
            log.error("ledger %d: master key record not durable: %s", ledger_id, error)

    return callback


def _bookie_info(req: GetBookieInfoRequest, usage: DiskUsage) -> GetBookieInfoResponse:
    total = usage.total_bytes if req.requested & BOOKIE_INFO_TOTAL_DISK else 0
    free = usage.free_bytes if req.requested & BOOKIE_INFO_FREE_DISK else 0
    return GetBookieInfoResponse(req.request_id, OK, total, free)

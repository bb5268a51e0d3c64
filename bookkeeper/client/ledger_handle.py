"""The writer's handle on a ledger (BookKeeper's ``LedgerHandle``): add, read, close.

Adds go through the :class:`~.writer.LedgerWriter` pipeline; ensemble changes write metadata through
:class:`~.ensemble_change.MetadataEnsembleChanger`. :meth:`LedgerHandle.add_entry_nowait` is the pipelined
form (the callback gets the entry id or the error, always in entry order); :meth:`LedgerHandle.add_entry`
awaits the acknowledgement and, when ``pending_adds_max`` adds are already in flight, first waits for room.

Close (``doAsyncCloseInternal``, docs/upstream.md, BookKeeper §1.2, invariant 10 of docs/architecture.md §3):
pending adds fail with :class:`LedgerClosedError` (their outcome is unknown), then a compare-and-set writes
CLOSED with ``lastEntryId = LAC`` and the length acknowledged so far. Finding the ledger already CLOSED with
the same end is success; CLOSED at another end raises :class:`MetadataVersionError`; IN_RECOVERY (a recovering
client owns the close) raises :class:`LedgerFencedError`. BookKeeper's code would overwrite IN_RECOVERY with
the writer's LAC; its protocol document says the writer must fail instead - we follow the document (both are
safe).

After EFENCED the handle is fenced: every later add fails with :class:`LedgerFencedError` and no entry the
writer could not prove is ever reported as written. When no bookie can replace a failed one the handle
closes itself at its LAC (:class:`NotEnoughBookiesError` to the pending adds).
"""

from __future__ import annotations

import logging

import trio

from magnetar.bookkeeper.client.context import ClientContext
from magnetar.bookkeeper.client.ensemble_change import MetadataEnsembleChanger
from magnetar.bookkeeper.client.errors import (
    BKError,
    IncorrectParameterError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataVersionError,
    NotEnoughBookiesError,
)
from magnetar.bookkeeper.client.metadata import LedgerMetadata, LedgerState, Versioned
from magnetar.bookkeeper.client.read_handle import LedgerEntry, read_range
from magnetar.bookkeeper.client.update_loop import MetadataUpdateLoop
from magnetar.bookkeeper.client.writer import AddCallback, LedgerWriter
from magnetar.bookkeeper.protocol import Digester, Payload, payload_size

log = logging.getLogger(__name__)


class LedgerHandle:
    def __init__(
        self,
        ctx: ClientContext,
        ledger_id: int,
        versioned: Versioned,
        digester: Digester,
        master_key: bytes,
    ) -> None:
        self._ctx = ctx
        self.ledger_id = ledger_id
        self.versioned = versioned
        self._digester = digester
        md = versioned.metadata
        first, members = md.last_ensemble
        self._writer = LedgerWriter(
            ctx,
            ledger_id,
            (md.ensemble_size, md.write_quorum, md.ack_quorum),
            (first, list(members)),
            master_key=master_key,
            digester=digester,
            last_add_confirmed=-1,
            length=0,
            changer=MetadataEnsembleChanger(ctx, ledger_id, self),
        )
        self._writer.on_error = self._on_writer_error
        self._closed = False
        self._fenced = False
        self._close_lock = trio.Lock()

    # -- state -------------------------------------------------------------------------------------------

    @property
    def metadata(self) -> LedgerMetadata:
        return self.versioned.metadata

    @property
    def last_add_confirmed(self) -> int:
        return self._writer.last_add_confirmed

    @property
    def last_add_pushed(self) -> int:
        return self._writer.last_add_pushed

    @property
    def length(self) -> int:
        return self._writer.length

    @property
    def pending_add_count(self) -> int:
        return len(self._writer.pending)

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def is_fenced(self) -> bool:
        return self._fenced

    # -- adds --------------------------------------------------------------------------------------------

    def add_entry_nowait(self, payload: Payload, callback: AddCallback) -> int:
        """Pipelined add of ``payload`` (one buffer, or its parts in order: sent as they are, never joined):
        returns the entry id it will have (-1 if the handle already failed); ``callback``
        gets that id once acknowledged, or the error. Raises :class:`TooManyRequestsError` when
        ``pending_adds_max`` adds are in flight (use :meth:`add_entry` to wait instead)."""
        self._check_payload(payload)
        return self._writer.push(payload, callback)

    async def wait_for_room(self) -> None:
        """Until fewer than ``pending_adds_max`` adds are in flight (or the handle failed)."""
        await self._writer.wait_for_room()

    async def add_entry(self, payload: Payload) -> int:
        """Add and wait for the acknowledgement; returns the entry id."""
        self._check_payload(payload)
        await self._writer.wait_for_room()
        done = trio.Event()
        outcome: list[int | BKError] = []

        def on_done(result: int | BKError) -> None:
            outcome.append(result)
            done.set()

        self._writer.push(payload, on_done)
        await done.wait()
        if isinstance(outcome[0], BKError):
            raise outcome[0]
        return outcome[0]

    def _check_payload(self, payload: Payload) -> None:
        self._ctx.check_open()
        limit = self._ctx.settings.entry_payload_bytes_max
        size = len(payload) if isinstance(payload, bytes) else payload_size(payload)
        if size > limit:
            raise IncorrectParameterError(f"entry of {size} bytes; entry_payload_bytes_max={limit}")

    def _on_writer_error(self, error: BKError) -> None:
        if isinstance(error, LedgerFencedError):
            self._fenced = True
        elif isinstance(error, NotEnoughBookiesError):
            self._ctx.spawn(self._close_after_failure)

    async def _close_after_failure(self) -> None:
        try:
            await self.close()
        except BKError as exc:
            log.warning("ledger %d: close after running out of bookies failed: %s", self.ledger_id, exc)

    # -- reads -------------------------------------------------------------------------------------------

    async def read_entries(self, first_entry_id: int, last_entry_id: int) -> list[LedgerEntry]:
        """Entries ``first..last`` inclusive; ``last`` must not exceed :attr:`last_add_confirmed`."""
        return await read_range(
            self._ctx,
            ledger_id=self.ledger_id,
            metadata=self.metadata,
            digester=self._digester,
            first_entry_id=first_entry_id,
            last_entry_id=last_entry_id,
            last_add_confirmed=self.last_add_confirmed,
        )

    # -- close -------------------------------------------------------------------------------------------

    async def close(self) -> None:
        async with self._close_lock:
            if self._closed and self.metadata.is_closed:
                return
            self._closed = True
            closed = LedgerClosedError(f"ledger {self.ledger_id} is closed")
            self._writer.fail(closed)
            if not self._fenced:
                self._writer.error = closed  # later adds say "closed", whatever failed the writer first
            lac, length = self._writer.last_add_confirmed, self._writer.length
            self.versioned = await self._close_metadata(lac, length)

    async def _close_metadata(self, lac: int, length: int) -> Versioned:
        ledger_id = self.ledger_id

        def needs_update(metadata: LedgerMetadata) -> bool:
            if metadata.state is LedgerState.CLOSED:
                if (metadata.last_entry_id, metadata.length) == (lac, length):
                    return False
                raise MetadataVersionError(
                    f"ledger {ledger_id} was closed at entry {metadata.last_entry_id} (length "
                    f"{metadata.length}) by another client; this writer's LAC is {lac} (length {length})"
                )
            if metadata.state is LedgerState.IN_RECOVERY:
                self._fenced = True
                raise LedgerFencedError(
                    f"ledger {ledger_id} is being recovered; the recovering client closes it"
                )
            return True

        loop = MetadataUpdateLoop(
            self._ctx.manager,
            ledger_id,
            self.versioned,
            needs_update,
            lambda metadata: metadata.closed(lac, length),
            retries_max=self._ctx.settings.metadata_retries_max,
        )
        return await loop.run()

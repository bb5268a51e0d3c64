"""Read-only access to a ledger (BookKeeper's ``ReadOnlyLedgerHandle``) and the entry type reads return.

A :class:`ReadHandle` comes from ``open_ledger``. For a CLOSED ledger its LAC is the closed last entry. For
a ledger still OPEN (opened without recovery, e.g. a tailing reader) the LAC starts at -1 and advances with
:meth:`ReadHandle.read_last_add_confirmed`, which first refreshes the metadata (the writer may have changed
ensembles) and then asks the last ensemble with the coverage rule - without fencing. Reads never go past
the handle's LAC (invariant 3 of docs/architecture.md §3).
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.bookkeeper.client.context import ClientContext
from magnetar.bookkeeper.client.errors import BKReadError, IncorrectParameterError
from magnetar.bookkeeper.client.metadata import LedgerMetadata, Versioned
from magnetar.bookkeeper.client.read_lac import ReadLastConfirmedOp
from magnetar.bookkeeper.client.read_op import ReadEntriesOp
from magnetar.bookkeeper.protocol import Digester


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    ledger_id: int
    entry_id: int
    payload: bytes

    @property
    def length(self) -> int:
        """Payload bytes (BookKeeper's ``LedgerEntry.getLength``)."""
        return len(self.payload)


async def read_range(
    ctx: ClientContext,
    *,
    ledger_id: int,
    metadata: LedgerMetadata,
    digester: Digester,
    first_entry_id: int,
    last_entry_id: int,
    last_add_confirmed: int,
) -> list[LedgerEntry]:
    """Entries ``first..last`` (inclusive), which must lie at or below ``last_add_confirmed``."""
    ctx.check_open()
    if first_entry_id < 0 or last_entry_id < first_entry_id:
        raise IncorrectParameterError(f"bad entry range {first_entry_id}..{last_entry_id}")
    if last_entry_id > last_add_confirmed:
        raise BKReadError(
            f"ledger {ledger_id}: entry {last_entry_id} is beyond the last add confirmed {last_add_confirmed}"
        )
    count = last_entry_id - first_entry_id + 1
    limit = ctx.settings.read_entries_per_call_max
    if count > limit:
        raise IncorrectParameterError(f"{count} entries requested; read_entries_per_call_max={limit}")
    op = ReadEntriesOp(
        ctx, ledger_id, metadata, digester, first_entry_id=first_entry_id, last_entry_id=last_entry_id
    )
    return [LedgerEntry(ledger_id, e.entry_id, e.payload) for e in await op.run()]


class ReadHandle:
    def __init__(self, ctx: ClientContext, ledger_id: int, versioned: Versioned, digester: Digester) -> None:
        self._ctx = ctx
        self.ledger_id = ledger_id
        self.versioned = versioned
        self._digester = digester
        md = versioned.metadata
        self.last_add_confirmed = md.last_entry_id if md.is_closed else -1
        self.length = md.length if md.is_closed else 0

    @property
    def metadata(self) -> LedgerMetadata:
        return self.versioned.metadata

    @property
    def is_closed(self) -> bool:
        return self.metadata.is_closed

    async def read_entries(self, first_entry_id: int, last_entry_id: int) -> list[LedgerEntry]:
        return await read_range(
            self._ctx,
            ledger_id=self.ledger_id,
            metadata=self.metadata,
            digester=self._digester,
            first_entry_id=first_entry_id,
            last_entry_id=last_entry_id,
            last_add_confirmed=self.last_add_confirmed,
        )

    async def read_last_add_confirmed(self) -> int:
        """The LAC as the bookies know it (never fences); the handle's LAC only moves forward."""
        self._ctx.check_open()
        if not self.metadata.is_closed:
            self.versioned = await self._ctx.manager.read(self.ledger_id)
        md = self.metadata
        if md.is_closed:
            self.last_add_confirmed = md.last_entry_id
            self.length = md.length
            return self.last_add_confirmed
        op = ReadLastConfirmedOp(self._ctx, self.ledger_id, md, self._digester, fence=False)
        # Every entry before the last ensemble was acknowledged before the writer moved to it
        # (BookKeeper #2615).
        floor = md.last_ensemble[0] - 1
        self.last_add_confirmed = max(self.last_add_confirmed, await op.run(), floor)
        return self.last_add_confirmed

    async def close(self) -> None:
        """Nothing to release (kept for symmetry with the writer's handle)."""

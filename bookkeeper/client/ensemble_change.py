"""Ensemble change (BookKeeper's ``LedgerHandle.ensembleChangeLoop`` and recovery's local variant).

:class:`MetadataEnsembleChanger` - the writer's change, a metadata compare-and-set (docs/upstream.md,
BookKeeper §2.4, §1.2):

* predicate: the ledger is OPEN and at least one failed bookie is still at its index of the last ensemble;
  CLOSED -> :class:`LedgerClosedError`, IN_RECOVERY -> :class:`LedgerFencedError` (the writer was fenced);
* transform: replace the failed bookies (placement, excluding them) in a new ensemble starting at LAC + 1,
  replacing the last ensemble if it already starts there;
* the result is whatever last ensemble the store holds afterwards, so a change already made (e.g. a write
  whose outcome was unknown and is found applied on re-read) is adopted rather than repeated.

:class:`LocalEnsembleChanger` - during recovery the ledger is IN_RECOVERY and its metadata must not change
before the closing write: the replacement ensemble is kept locally (``newEnsemblesFromRecovery``) and added by
the closing compare-and-set.
"""

from __future__ import annotations

from typing import Protocol

from magnetar.bookkeeper.client.context import ClientContext
from magnetar.bookkeeper.client.errors import LedgerClosedError, LedgerFencedError
from magnetar.bookkeeper.client.metadata import LedgerMetadata, LedgerState, Versioned
from magnetar.bookkeeper.client.transport import BookieId
from magnetar.bookkeeper.client.update_loop import MetadataUpdateLoop
from magnetar.bookkeeper.client.writer import LedgerWriter


class MetadataHolder(Protocol):
    versioned: Versioned


class MetadataEnsembleChanger:
    def __init__(self, ctx: ClientContext, ledger_id: int, holder: MetadataHolder) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._holder = holder

    async def change(self, writer: LedgerWriter, failed: dict[int, BookieId]) -> tuple[int, list[BookieId]]:
        available = await self._ctx.placement.candidates()

        def needs_update(metadata: LedgerMetadata) -> bool:
            if metadata.state is LedgerState.CLOSED:
                raise LedgerClosedError(f"ledger {self._ledger_id} was closed during an ensemble change")
            if metadata.state is LedgerState.IN_RECOVERY:
                raise LedgerFencedError(f"ledger {self._ledger_id} is being recovered by another client")
            last = metadata.last_ensemble[1]
            return any(last[i] == bookie for i, bookie in failed.items())

        def transform(metadata: LedgerMetadata) -> LedgerMetadata:
            start = writer.last_add_confirmed + 1
            first, last = metadata.last_ensemble
            assert first <= start, "a new ensemble never starts before the last one"
            new = self._ctx.placement.replace(last, failed, available, write_quorum=metadata.write_quorum)
            return metadata.with_ensemble(start, new)

        loop = MetadataUpdateLoop(
            self._ctx.manager,
            self._ledger_id,
            self._holder.versioned,
            needs_update,
            transform,
            retries_max=self._ctx.settings.metadata_retries_max,
        )
        self._holder.versioned = await loop.run()
        first, members = self._holder.versioned.metadata.last_ensemble
        return first, list(members)


class LocalEnsembleChanger:
    def __init__(self, ctx: ClientContext) -> None:
        self._ctx = ctx
        self.new_ensembles: dict[int, list[BookieId]] = {}

    async def change(self, writer: LedgerWriter, failed: dict[int, BookieId]) -> tuple[int, list[BookieId]]:
        available = await self._ctx.placement.candidates()
        new = self._ctx.placement.replace(
            writer.ensemble, failed, available, write_quorum=writer.write_quorum
        )
        start = writer.last_add_confirmed + 1
        self.new_ensembles[start] = new
        return start, new

    def apply(self, metadata: LedgerMetadata) -> LedgerMetadata:
        for start in sorted(self.new_ensembles):
            metadata = metadata.with_ensemble(start, self.new_ensembles[start])
        return metadata

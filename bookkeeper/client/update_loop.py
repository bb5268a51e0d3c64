"""BookKeeper's ``MetadataUpdateLoop``: every ledger-metadata mutation is a versioned compare-and-set.

1. ``needs_update(current)`` - is a change needed on the local copy? (It may raise to abort: e.g. close
   finding the ledger CLOSED at another end.) If not, the current value is the result.
2. ``transform(current)`` builds the new value.
3. Conditional write with the version the local copy was read at.
4. On a version conflict, re-read the stored value, replace the local copy and go to 1 - the predicate is
   re-evaluated against what others wrote, so a concurrent close, recovery or ensemble change is seen.
   The move from the current to the new value is checked against the state table
   (:data:`~magnetar.bookkeeper.client.metadata.LEDGER_STATE_MOVES`) before the write.
5. On success the written value (with its new version) is the result.

Attempts are bounded by ``metadata_retries_max``; running out raises :class:`MetadataVersionError`.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.bookkeeper.client.errors import MetadataVersionError
from magnetar.bookkeeper.client.ledger_manager import LedgerManager
from magnetar.bookkeeper.client.metadata import LedgerMetadata, Versioned

NeedsUpdate = Callable[[LedgerMetadata], bool]
Transform = Callable[[LedgerMetadata], LedgerMetadata]


class MetadataUpdateLoop:
    def __init__(
        self,
        manager: LedgerManager,
        ledger_id: int,
        current: Versioned,
        needs_update: NeedsUpdate,
        transform: Transform,
        *,
        retries_max: int,
    ) -> None:
        self._manager = manager
        self._ledger_id = ledger_id
        self._current = current
        self._needs_update = needs_update
        self._transform = transform
        self._retries_max = retries_max
        self.conflicts = 0

    async def run(self) -> Versioned:
        current = self._current
        for _ in range(self._retries_max):
            if not self._needs_update(current.metadata):
                return current
            new = self._transform(current.metadata)
            current.metadata.check_successor(self._ledger_id, new)
            try:
                return await self._manager.write(self._ledger_id, new, current.version)
            except MetadataVersionError:
                self.conflicts += 1
                current = await self._manager.read(self._ledger_id)
        raise MetadataVersionError(
            f"ledger {self._ledger_id}: metadata update gave up after "
            f"metadata_retries_max={self._retries_max} conflicting attempts"
        )

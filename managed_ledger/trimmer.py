"""Deleting a managed ledger's consumed ledgers: retention's trim and the deletes it leaves to retry.

Theory of operation (Pulsar's ``internalTrimLedgers``; the pure rule of *which* ledgers go is :mod:`.trim`):
:meth:`Trimmer.trim` applies the rule to the ledger list, the slowest durable cursor's mark-delete position
and the retention policy, then deletes the chosen ledgers - first from the ledger list (a compare-and-set
under the metadata lock, see :mod:`.ledger_metadata`), then from the message index, the entry cache, every
cursor's view and the reader's open handles, and last from the bookies. Nothing changes in memory unless the
stored list no longer names the ledgers; a delete on the bookies that fails is remembered and retried by the
next trim. A fenced or closed managed ledger trims nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.bookkeeper.client import BKError
from magnetar.managed_ledger.ledger_state import State
from magnetar.managed_ledger.trim import RetentionPolicy, ledgers_to_trim

if TYPE_CHECKING:
    from magnetar.managed_ledger.context import Context
    from magnetar.managed_ledger.ledger import ManagedLedger

log = logging.getLogger(__name__)


class Trimmer:
    """The ledger deletions of one managed ledger."""

    def __init__(self, ml: ManagedLedger, ctx: Context) -> None:
        self._ml = ml
        self._ctx = ctx
        self._undeleted_ledgers: set[int] = set()
        """Ledgers gone from the list whose delete on the bookies failed: retried by the next trim."""

    async def trim(self, policy: RetentionPolicy, *, truncate: bool = False) -> list[int]:
        """Delete the consumed ledgers retention allows (see :mod:`.trim`); returns their ids."""
        ml = self._ml
        if ml.state in (State.FENCED, State.CLOSED):
            return []
        for ledger_id in sorted(self._undeleted_ledgers):
            await self.delete_bk_ledger(ledger_id)
        async with ml.metadata.lock:
            doomed = ledgers_to_trim(
                ml.ledgers.infos(),
                ml.current_ledger_id,
                ml.slowest_durable_mark_delete(),
                policy,
                self._ctx.clock.time_ms(),
                truncate=truncate,
            )
            if not doomed:
                return []
            keep = [info for info in ml.ledgers if info.ledger_id not in doomed]
            await ml.metadata.write(keep)
            for ledger_id in doomed:
                ml.ledgers.remove(ledger_id)
                ml.message_index.remove_ledger(ledger_id)
                self._ctx.cache.invalidate_ledger(ml.name, ledger_id)
        for cursor in [*ml.cursors.values(), *ml.non_durable_cursors]:
            cursor.on_ledgers_trimmed()
        for ledger_id in doomed:
            await ml.reader.forget(ledger_id)
            await self.delete_bk_ledger(ledger_id)
        log.info("managed ledger %s: trimmed ledgers %s", ml.name, doomed)
        return doomed

    async def delete_bk_ledger(self, ledger_id: int) -> None:
        """Delete ``ledger_id`` on the bookies; a failure is logged and retried by the next trim."""
        try:
            await self._ctx.bk.delete_ledger(ledger_id)
            self._undeleted_ledgers.discard(ledger_id)
        except BKError as exc:
            log.warning(
                "managed ledger %s: deleting ledger %d failed (will retry): %s", self._ml.name, ledger_id, exc
            )
            self._undeleted_ledgers.add(ledger_id)

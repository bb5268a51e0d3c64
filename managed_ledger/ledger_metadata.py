"""A managed ledger's stored metadata: the ledger list, its properties and its end, as it writes them.

Theory of operation. Everything a managed ledger keeps in the metadata store is one record
(:class:`~.info.ManagedLedgerInfo`): the ledgers in order, each with its entry count, size, close time and
first message index; the position it was terminated at, if any; and its properties. :class:`LedgerMetadata`
composes that record from the in-memory state and writes it:

* **What is stored.** Each ledger carries the first message index the message index knows for it. While a
  rollover lists the next ledger and the current one is still written (:mod:`.ledger_switch`), the current
  ledger is stored as *open* (no entry count) and the next ledger follows it, so an open of the managed
  ledger recovers both (:mod:`.opener`).
* **How it is written.** A compare-and-set on the version last written, through :mod:`.list_writer`, which
  settles writes whose outcome is unknown. A lost compare-and-set means another owner took the managed ledger
  over: this instance fences itself. Writers hold :attr:`LedgerMetadata.lock` so that one write at a time
  composes and stores the list.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import trio

from magnetar.managed_ledger.errors import (
    ManagedLedgerFencedError,
    MetadataConflictError,
    MetadataUnavailableError,
)
from magnetar.managed_ledger.info import LedgerInfo, ManagedLedgerInfo
from magnetar.managed_ledger.list_writer import LedgerListWriter
from magnetar.managed_ledger.position import Position

if TYPE_CHECKING:
    from magnetar.managed_ledger.context import Context
    from magnetar.managed_ledger.ledger import ManagedLedger


class LedgerMetadata:
    """The metadata record of one managed ledger: composed from its state, CAS-written."""

    def __init__(
        self,
        ml: ManagedLedger,
        ctx: Context,
        version: int,
        terminated_at: Position | None,
        properties: dict[str, str],
    ) -> None:
        self._ml = ml
        self._settings = ctx.settings
        self._health = ctx.health
        self._writer = LedgerListWriter(ml.name, ctx.meta, version, ctx.settings.metadata_operation_timeout_s)
        self.lock = trio.Lock()
        """Held by whoever composes and writes the record."""
        self.terminated_at = terminated_at
        self.properties = properties

    def _persisted(self, ledgers: list[LedgerInfo]) -> list[LedgerInfo]:
        """The list as stored: while a next ledger is listed, the current one is open (no entry count), so an
        open of the managed ledger recovers both."""
        ledgers = [self._with_first_index(info) for info in ledgers]
        next_ledger = self._ml.switcher.next
        if next_ledger is None:
            return ledgers
        current = self._ml.current_ledger_id
        listed = [
            LedgerInfo(i.ledger_id, first_index=i.first_index) if i.ledger_id == current else i
            for i in ledgers
        ]
        return [*listed, LedgerInfo(next_ledger.ledger_id)]

    def _with_first_index(self, info: LedgerInfo) -> LedgerInfo:
        first = self._ml.message_index.ledger_first_index(info.ledger_id)
        return info if first is None or first == info.first_index else replace(info, first_index=first)

    async def write(self, ledgers: list[LedgerInfo], terminated: Position | None = None) -> None:
        """CAS-write the ledger list (caller holds :attr:`lock`); a conflict fences the managed ledger. An
        unknown outcome raises :class:`MetadataUnavailableError` or :class:`trio.TooSlowError`."""
        info = ManagedLedgerInfo(
            tuple(self._persisted(ledgers)), terminated or self.terminated_at, self.properties
        )
        try:
            await self._writer.write(info)
        except MetadataConflictError as exc:
            self._ml.fence(f"metadata version conflict: {exc}")
            raise ManagedLedgerFencedError(f"managed ledger {self._ml.name} is fenced: {exc}") from exc

    async def write_settled(self, ledgers: list[LedgerInfo]) -> None:
        """As :meth:`write`, retried (the store answering again) for at most
        ``metadata_operation_timeout_s`` when its outcome is unknown."""
        deadline = trio.current_time() + self._settings.metadata_operation_timeout_s
        pause_s = self._settings.rollover_retry_interval_ms / 1000
        while True:
            try:
                await self.write(ledgers)
                return
            except (MetadataUnavailableError, trio.TooSlowError):
                if trio.current_time() >= deadline:
                    raise
            health = self._health
            remaining = max(0.0, deadline - trio.current_time())
            if health is not None and not health.healthy:
                await health.wait_healthy(remaining)
            else:
                await trio.sleep(min(pause_s, remaining))

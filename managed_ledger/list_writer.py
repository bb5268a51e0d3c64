"""Writing a managed ledger's ledger list: compare-and-set writes whose unknown outcomes are settled.

Every write is a CAS on the version last written (see :mod:`.meta_store`). A write that fails because the
store became unreachable - the connection dropped while it was in flight - may or may not have happened; the
version to compare against next is then unknown. :class:`LedgerListWriter` remembers such a write and settles
it before the next one, once the store answers: it reads the list back and finds

* the version it knew - the write did not happen: go on;
* the next version holding exactly what it wrote - it did: adopt the version (and skip writing the same list
  again);
* anything else - another owner wrote the list meanwhile: :class:`~.errors.MetadataConflictError`, as for a
  lost compare-and-set (the managed ledger fences itself).

Reading back is sound because a list names this instance's ledgers: another owner's list differs from ours at
least in the ledger it created when it opened the managed ledger.
"""

from __future__ import annotations

import logging

import trio

from magnetar.managed_ledger.errors import MetadataConflictError, MetadataUnavailableError
from magnetar.managed_ledger.info import ManagedLedgerInfo
from magnetar.managed_ledger.meta_store import MetaStore

log = logging.getLogger(__name__)


class LedgerListWriter:
    def __init__(self, name: str, meta: MetaStore, version: int, timeout_s: float) -> None:
        self.name = name
        self._meta = meta
        self.version = version
        self._timeout_s = timeout_s
        self.unsettled: ManagedLedgerInfo | None = None
        """The last write, while its outcome is unknown."""

    async def write(self, info: ManagedLedgerInfo) -> None:
        """CAS-write ``info``. Raises :class:`MetadataConflictError` when another owner wrote the list, and
        :class:`MetadataUnavailableError` or :class:`trio.TooSlowError` when the store did not answer (then
        the outcome is unknown and settled by the next call)."""
        if self.unsettled is not None:
            tried = self.unsettled
            if await self._settle() and tried == info:
                return  # it happened after all: nothing left to write
        try:
            with trio.fail_after(self._timeout_s):
                self.version = await self._meta.put_ledger_info(self.name, info, self.version)
        except (MetadataUnavailableError, trio.TooSlowError) as exc:
            log.warning("managed ledger %s: ledger list write, outcome unknown: %s", self.name, exc)
            self.unsettled = info
            raise

    async def _settle(self) -> bool:
        """Whether the unsettled write happened (raises while the store is still unavailable)."""
        tried = self.unsettled
        assert tried is not None
        with trio.fail_after(self._timeout_s):
            stored = await self._meta.get_ledger_info(self.name)
        if stored is not None and stored.version == self.version:
            applied = False
        elif stored is not None and stored.version == self.version + 1 and stored.value == tried:
            self.version = stored.version
            applied = True
        else:
            found = "no list" if stored is None else f"version {stored.version}"
            raise MetadataConflictError(
                f"managed ledger {self.name}: the ledger list changed ({found}, ours was {self.version}) "
                "while the outcome of our write was unknown"
            )
        self.unsettled = None
        log.info(
            "managed ledger %s: the ledger list write of unknown outcome %s",
            self.name,
            "happened" if applied else "did not happen",
        )
        return applied

"""The managed-ledger factory: opens, caches and closes the managed ledgers of one broker.

It owns the nursery in which every managed ledger runs its background tasks, the shared entry cache, and the
periodic rollover check that rolls idle topics' ledgers once they are due (so retention can delete data of
quiet topics). Concurrent opens of the same name share one open sequence.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

from magnetar.bookkeeper.client import BookKeeper
from magnetar.bookkeeper.metadata import MetadataStore
from magnetar.bookkeeper.runtime import Clock, SystemClock
from magnetar.managed_ledger.context import Context, Quorum
from magnetar.managed_ledger.entry_cache import EntryCache
from magnetar.managed_ledger.entry_prefix import EntryIndexing
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.ledger_state import State
from magnetar.managed_ledger.meta_store import MetaStore
from magnetar.managed_ledger.opener import open_managed_ledger
from magnetar.managed_ledger.settings import ManagedLedgerSettings

log = logging.getLogger(__name__)


class ManagedLedgerFactory:
    def __init__(self, ctx: Context, nursery: trio.Nursery) -> None:
        self._ctx = ctx
        self._nursery = nursery
        self._ledgers: dict[str, ManagedLedger] = {}
        self._opening: dict[str, trio.Event] = {}
        self._open_errors: dict[str, BaseException] = {}

    @property
    def settings(self) -> ManagedLedgerSettings:
        return self._ctx.settings

    @property
    def bk(self) -> BookKeeper:
        return self._ctx.bk

    @property
    def meta(self) -> MetaStore:
        return self._ctx.meta

    @property
    def cache(self) -> EntryCache:
        return self._ctx.cache

    def get(self, name: str) -> ManagedLedger | None:
        return self._ledgers.get(name)

    def opened(self) -> list[ManagedLedger]:
        return list(self._ledgers.values())

    async def open(self, name: str, *, create: bool = True, quorum: Quorum | None = None) -> ManagedLedger:
        """The open managed ledger ``name``, opened if need be; ``quorum``: of its new ledgers (None: the
        settings'; an already open ledger takes it for its next rollover)."""
        while True:
            ml = self._ledgers.get(name)
            if ml is not None and ml.state not in (State.CLOSED, State.FENCED):
                ml.quorum = quorum
                return ml
            if ml is not None:
                self._ledgers.pop(name, None)
            pending = self._opening.get(name)
            if pending is None:
                break
            await pending.wait()
            error = self._open_errors.get(name)
            if error is not None and name not in self._ledgers:
                raise error
        done = self._opening[name] = trio.Event()
        self._open_errors.pop(name, None)
        try:
            ml = await open_managed_ledger(name, self._ctx, create=create, quorum=quorum)
            await self._nursery.start(ml.run)
            self._ledgers[name] = ml
            return ml
        except BaseException as exc:
            self._open_errors[name] = exc
            raise
        finally:
            del self._opening[name]
            done.set()

    async def close_ledger(self, name: str) -> None:
        ml = self._ledgers.pop(name, None)
        if ml is not None:
            await ml.close()

    async def delete(self, name: str) -> None:
        ml = self._ledgers.pop(name, None) or await open_managed_ledger(name, self._ctx, create=False)
        await ml.delete()

    async def exists(self, name: str) -> bool:
        return await self._ctx.meta.get_ledger_info(name) is not None

    async def _rollover_checks(self) -> None:
        while True:
            await trio.sleep(self._ctx.settings.rollover_check_interval_s)
            for ml in list(self._ledgers.values()):
                ml.check_rollover()

    async def close(self) -> None:
        for name in list(self._ledgers):
            await self.close_ledger(name)


@asynccontextmanager
async def open_managed_ledger_factory(
    bk: BookKeeper,
    store: MetadataStore,
    settings: ManagedLedgerSettings,
    *,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    on_trim_candidate: Callable[[ManagedLedger], None] = lambda ml: None,
    entry_indexing: EntryIndexing | None = None,
) -> AsyncIterator[ManagedLedgerFactory]:
    ctx = Context(
        bk=bk,
        meta=MetaStore(store),
        settings=settings,
        cache=EntryCache(settings.entry_cache_bytes_max),
        clock=clock or SystemClock(),
        rng=rng or random.Random(),
        on_trim_candidate=on_trim_candidate,
        health=store.health,
        entry_indexing=entry_indexing,
    )
    async with trio.open_nursery() as nursery:
        factory = ManagedLedgerFactory(ctx, nursery)
        nursery.start_soon(factory._rollover_checks)
        try:
            yield factory
        finally:
            with trio.CancelScope(shield=True):
                await factory.close()
            nursery.cancel_scope.cancel()

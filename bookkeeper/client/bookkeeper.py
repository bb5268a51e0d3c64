"""The client facade (BookKeeper's ``BookKeeper`` class): create, open, inspect, delete and list ledgers.

:func:`open_bookkeeper` is the entry point: an async context manager that owns the client's nursery - the
dispatcher of deferred callbacks, the request-timeout watchers, and the background work of every ledger
(ensemble changes, closes after failures). Leaving it fails everything in flight with a SHUTDOWN failure
(pending adds see their error) and cancels the background work.

Clock and randomness are injected (``clock``, ``rng``) so a simulation drives every timeout and every
placement decision from its seed.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import trio

from magnetar.bookkeeper.client.bookie_client import BookieClient
from magnetar.bookkeeper.client.call_soon import CallSoon
from magnetar.bookkeeper.client.context import ClientContext
from magnetar.bookkeeper.client.errors import ClientClosedError
from magnetar.bookkeeper.client.ledger_create import LedgerCreateOp
from magnetar.bookkeeper.client.ledger_handle import LedgerHandle
from magnetar.bookkeeper.client.ledger_manager import LedgerManager
from magnetar.bookkeeper.client.ledger_open import LedgerOpenOp
from magnetar.bookkeeper.client.metadata import LedgerMetadata
from magnetar.bookkeeper.client.placement import EnsemblePlacement, RackPolicy
from magnetar.bookkeeper.client.read_handle import ReadHandle
from magnetar.bookkeeper.client.settings import ClientSettings
from magnetar.bookkeeper.client.stats import ClientStats
from magnetar.bookkeeper.client.transport import BookieTransport
from magnetar.bookkeeper.metadata import MetadataStore
from magnetar.bookkeeper.protocol import DigestType
from magnetar.bookkeeper.runtime import Clock, TrioClock


class BookKeeper:
    def __init__(self, ctx: ClientContext) -> None:
        self._ctx = ctx

    @property
    def settings(self) -> ClientSettings:
        return self._ctx.settings

    @property
    def context(self) -> ClientContext:
        """The client's shared parts (metadata access, placement, bookie requests), for operations built
        outside this package on the same client - AutoRecovery's fragment copies."""
        return self._ctx

    @property
    def stats(self) -> ClientStats:
        """Aggregate counters and the add-latency histogram (for metrics)."""
        return self._ctx.stats

    async def create_ledger(
        self,
        *,
        ensemble_size: int | None = None,
        write_quorum: int | None = None,
        ack_quorum: int | None = None,
        digest_type: DigestType | None = None,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> LedgerHandle:
        """A new OPEN ledger; quorums default to the settings' ``ensemble_size``, ``write_quorum``,
        ``ack_quorum``."""
        self._ctx.check_open()
        s = self._ctx.settings
        op = LedgerCreateOp(
            self._ctx,
            ensemble_size=s.ensemble_size if ensemble_size is None else ensemble_size,
            write_quorum=s.write_quorum if write_quorum is None else write_quorum,
            ack_quorum=s.ack_quorum if ack_quorum is None else ack_quorum,
            digest_type=s.digest_type if digest_type is None else digest_type,
            password=password,
            custom_metadata=custom_metadata or {},
        )
        handle = await op.run()
        self._ctx.stats.ledgers_created += 1
        return handle

    async def open_ledger(
        self,
        ledger_id: int,
        password: bytes = b"",
        *,
        recovery: bool = True,
        use_stored_password: bool = False,
    ) -> ReadHandle:
        """Open for reading: ``recovery=True`` fences and recovers an unclosed ledger; ``False`` never
        fences. ``use_stored_password``: the password recorded in the ledger's metadata (BookKeeper's
        administrative open), ``password`` only when it records none; else ``password`` must match it."""
        self._ctx.check_open()
        op = LedgerOpenOp(
            self._ctx, ledger_id, password, recovery=recovery, use_stored_password=use_stored_password
        )
        return await op.run()

    async def get_ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        self._ctx.check_open()
        return (await self._ctx.manager.read(ledger_id)).metadata

    async def delete_ledger(self, ledger_id: int) -> None:
        """Remove the ledger's metadata (bookies reclaim its entries by garbage collection)."""
        self._ctx.check_open()
        await self._ctx.manager.remove(ledger_id)
        self._ctx.stats.ledgers_deleted += 1

    async def list_ledgers(self) -> AsyncIterator[int]:
        """Every ledger id in the metadata store, ascending."""
        self._ctx.check_open()
        async for ledger_id in self._ctx.manager.ledger_ids():
            yield ledger_id

    def _shutdown(self) -> None:
        self._ctx.closed = True
        self._ctx.fail_writers(ClientClosedError("the BookKeeper client was closed"))
        self._ctx.rpc.close()
        self._ctx.call_soon.drain()


def rack_policy(settings: ClientSettings) -> RackPolicy:
    return RackPolicy(
        min_num_racks_per_write_quorum=settings.min_num_racks_per_write_quorum,
        enforce_min_num_racks_per_write_quorum=settings.enforce_min_num_racks_per_write_quorum,
        rack_cache_s=settings.rack_cache_ms / 1000,
    )


@asynccontextmanager
async def open_bookkeeper(
    metadata: MetadataStore,
    transport: BookieTransport,
    settings: ClientSettings,
    *,
    clock: Clock | None = None,
    rng: random.Random | None = None,
) -> AsyncIterator[BookKeeper]:
    clock = clock or TrioClock()
    rng = rng or random.Random()
    call_soon = CallSoon()
    rpc = BookieClient(transport, call_soon, settings.add_timeout_s, settings.read_timeout_s)
    root = settings.ledgers_root_path
    async with trio.open_nursery() as nursery:
        ctx = ClientContext(
            settings=settings,
            manager=LedgerManager(metadata, root),
            placement=EnsemblePlacement(
                metadata, root, rng, clock, settings.bookie_quarantine_ms / 1000, rack_policy(settings)
            ),
            rpc=rpc,
            call_soon=call_soon,
            clock=clock,
            rng=rng,
            nursery=nursery,
        )
        await nursery.start(call_soon.run)
        await nursery.start(rpc.run)
        client = BookKeeper(ctx)
        try:
            yield client
        finally:
            client._shutdown()
            nursery.cancel_scope.cancel()

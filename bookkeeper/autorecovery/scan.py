"""Reading every ledger's metadata (BookKeeper's ``BookieLedgerIndexer`` walk), a bounded number at a time."""

from __future__ import annotations

import trio

from magnetar.bookkeeper.client import BookKeeper, LedgerMetadata, NoSuchLedgerError


async def scan_ledgers(bk: BookKeeper, in_flight_max: int) -> dict[int, LedgerMetadata]:
    """Every ledger's metadata; ledgers deleted while the scan runs are left out."""
    ctx = bk.context
    ledgers: dict[int, LedgerMetadata] = {}
    limiter = trio.CapacityLimiter(in_flight_max)

    async def read(token: object, ledger_id: int) -> None:
        try:
            ledgers[ledger_id] = (await ctx.manager.read(ledger_id)).metadata
        except NoSuchLedgerError:
            pass
        finally:
            limiter.release_on_behalf_of(token)

    async with trio.open_nursery() as nursery:
        async for ledger_id in ctx.manager.ledger_ids():
            token = object()
            await limiter.acquire_on_behalf_of(token)
            nursery.start_soon(read, token, ledger_id)
    return dict(sorted(ledgers.items()))

"""Fencing and recovery cases of BookKeeper's ``LedgerRecoveryTest`` and ``TestFencing``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import pytest
import trio
from fixtures.client import UNHURRIED, InProcessBookies, open_in_process_bookies

from magnetar.bookkeeper.client import (
    BookKeeper,
    ClientSettings,
    LedgerFencedError,
    LedgerRecoveryError,
    LedgerState,
    UnauthorizedError,
    open_bookkeeper,
)
from magnetar.bookkeeper.client.ledger_manager import LedgerManager
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore


@asynccontextmanager
async def setup(
    bookies: int = 3, clients: int = 2, **settings: int
) -> AsyncIterator[tuple[list[BookKeeper], InProcessBookies, MemoryMetadataStore]]:
    metadata = MemoryMetadataStore()
    config = ClientSettings(
        **{**UNHURRIED, "ensemble_size": 3, "write_quorum": 3, "ack_quorum": 2, **settings}
    )
    async with (
        open_in_process_bookies(metadata, bookies) as cluster,
        open_bookkeeper(metadata, cluster.transport, config) as first,
        open_bookkeeper(metadata, cluster.transport, config) as second,
    ):
        yield [first, second][:clients], cluster, metadata


async def test_recovering_an_empty_ledger_closes_it_empty() -> None:
    async with setup() as ([writer, reader], cluster, _):
        lh = await writer.create_ledger()
        rh = await reader.open_ledger(lh.ledger_id)
        assert (rh.metadata.state, rh.last_add_confirmed, rh.length) == (LedgerState.CLOSED, -1, 0)
        with pytest.raises(LedgerFencedError):
            await lh.add_entry(b"too late")
        for store in cluster.stores.values():
            state = store.ledger_state(lh.ledger_id)
            assert state is not None
            assert state.fenced


@pytest.mark.parametrize("batch", [1, 3, 13])
async def test_recovery_closes_at_the_last_acknowledged_entry(batch: int) -> None:
    async with setup(recovery_read_batch_size=batch) as ([writer, reader], _, _):
        lh = await writer.create_ledger()
        for i in range(20):
            await lh.add_entry(b"entry-%d" % i)
        rh = await reader.open_ledger(lh.ledger_id)
        assert (rh.last_add_confirmed, rh.length) == (19, lh.length)
        assert [e.payload for e in await rh.read_entries(0, 19)] == [b"entry-%d" % i for i in range(20)]


async def test_wrong_password_is_unauthorized() -> None:
    async with setup() as ([writer, reader], _, _):
        lh = await writer.create_ledger(password=b"secret")
        await lh.add_entry(b"x")
        with pytest.raises(UnauthorizedError):
            await reader.open_ledger(lh.ledger_id, password=b"wrong")
        assert (await reader.get_ledger_metadata(lh.ledger_id)).state is LedgerState.OPEN


async def test_bookies_refuse_a_fence_with_the_wrong_key() -> None:
    """Metadata without a stored password (old clients): the bookies' EUA is what stops the fence."""
    async with setup() as ([writer, reader], _, metadata):
        lh = await writer.create_ledger(password=b"secret")
        await lh.add_entry(b"x")
        manager = LedgerManager(metadata)
        current = await manager.read(lh.ledger_id)
        anonymous = replace(current.metadata, password=None, digest_type=None)
        await manager.write(lh.ledger_id, anonymous, current.version)
        with pytest.raises(UnauthorizedError):
            await reader.open_ledger(lh.ledger_id, password=b"wrong")
        assert await lh.add_entry(b"still writable") == 1


async def test_recovery_without_enough_bookies_leaves_the_ledger_in_recovery(autojump_clock: object) -> None:
    async with setup() as ([writer, reader], cluster, _):
        lh = await writer.create_ledger()
        for i in range(10):
            await lh.add_entry(b"e%d" % i)
        down = lh.metadata.last_ensemble[1][:2]
        for bookie in down:
            cluster.transport.disconnect(bookie)
        with pytest.raises(LedgerRecoveryError):
            await reader.open_ledger(lh.ledger_id)
        assert (await reader.get_ledger_metadata(lh.ledger_id)).state is LedgerState.IN_RECOVERY
        for bookie in down:
            cluster.transport.reconnect(bookie)
        rh = await reader.open_ledger(lh.ledger_id)
        assert rh.last_add_confirmed == 9


async def test_concurrent_recoveries_agree() -> None:
    async with setup() as ([writer, reader], _, _):
        lh = await writer.create_ledger()
        for i in range(7):
            await lh.add_entry(b"e%d" % i)
        ends: list[tuple[int, int]] = []

        async def recover(client: BookKeeper) -> None:
            rh = await client.open_ledger(lh.ledger_id)
            ends.append((rh.last_add_confirmed, rh.length))

        async with trio.open_nursery() as nursery:
            for client in [writer, reader] * 4:
                nursery.start_soon(recover, client)
        assert ends == [(6, lh.length)] * 8


async def test_fencing_survives_a_bookie_restart() -> None:
    async with setup() as ([writer, reader], cluster, _):
        lh = await writer.create_ledger()
        for i in range(5):
            await lh.add_entry(b"e%d" % i)
        await reader.open_ledger(lh.ledger_id)
        for bookie in cluster.ids:
            cluster.crash(bookie)  # loses only what was not synced; the fence was synced before answering
            cluster.restart(bookie)
            state = cluster.stores[bookie].ledger_state(lh.ledger_id)
            assert state is not None
            assert state.fenced
        with pytest.raises(LedgerFencedError):
            await lh.add_entry(b"after restart")

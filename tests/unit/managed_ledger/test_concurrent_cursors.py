"""Concurrent opens of one durable cursor (many first subscribers of a new subscription at once).

A metadata store that answers over a network (ZooKeeper, RocksDB on a worker thread) lets other tasks run
while a cursor is being created; the in-memory store answers without yielding, so the store here yields
before every call, as a real one does. Before opens were coalesced, the second open found the cursor node
already written, recovered it and so took it over from the first: of 50 concurrent opens, most failed with
``ManagedLedgerFencedError`` and the cursor that won could no longer persist its position.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.lowlevel
from fixtures.client import open_in_process_bookies

from magnetar.bookkeeper.client import ClientSettings, open_bookkeeper
from magnetar.bookkeeper.metadata import GetResult, MemoryMetadataStore, Stat
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.factory import ManagedLedgerFactory, open_managed_ledger_factory
from magnetar.managed_ledger.settings import ManagedLedgerSettings

OPENS = 50
SETTINGS = ManagedLedgerSettings(ensemble_size=3, write_quorum=3, ack_quorum=2, mark_delete_rate_per_s=1000)


class YieldingStore(MemoryMetadataStore):
    """The in-memory store, letting other tasks run before each read and write (as a remote store does)."""

    async def get(self, path: str) -> GetResult | None:
        await trio.lowlevel.checkpoint()
        return await super().get(path)

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Stat:
        await trio.lowlevel.checkpoint()
        return await super().put(path, value, expected_version, ephemeral=ephemeral, sequential=sequential)


@pytest.fixture
async def factory() -> AsyncIterator[ManagedLedgerFactory]:
    store = YieldingStore()
    client_settings = ClientSettings(ensemble_size=3, write_quorum=3, ack_quorum=2)
    async with (
        open_in_process_bookies(store, 3) as bookies,
        open_bookkeeper(store, bookies.transport, client_settings) as bk,
        open_managed_ledger_factory(bk, store, SETTINGS) as opened,
    ):
        yield opened
    await store.aclose()


async def test_concurrent_opens_of_a_new_cursor_get_one_cursor(factory: ManagedLedgerFactory) -> None:
    ml = await factory.open("t/ns/persistent/fresh")
    for i in range(3):
        await ml.add_entry(f"m{i}".encode())
    opened: list[ManagedCursor] = []
    failures: list[BaseException] = []

    async def open_one() -> None:
        try:
            opened.append(await ml.open_cursor("shared-sub", start_at_earliest=True))
        except Exception as exc:  # collected: the assertion below names them
            failures.append(exc)

    async with trio.open_nursery() as nursery:
        for _ in range(OPENS):
            nursery.start_soon(open_one)
    assert failures == []
    assert len(opened) == OPENS
    assert len({id(cursor) for cursor in opened}) == 1
    cursor = opened[0]
    # The cursor that everyone shares still owns its metadata: moving it persists.
    entries = await cursor.read_entries(10)
    cursor.ack_cumulative(entries[-1].position)
    await cursor.flush()
    assert cursor.mark_delete == entries[-1].position
    assert ml.state.value != "fenced"

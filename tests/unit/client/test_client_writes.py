"""The add path over in-process bookies: ordering, pipelining, back-pressure, ensemble change, close."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
from fixtures.client import UNHURRIED, InProcessBookies, open_in_process_bookies

from magnetar.bookkeeper.client import (
    BKError,
    BookKeeper,
    ClientSettings,
    IncorrectParameterError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerState,
    MetadataVersionError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    TooManyRequestsError,
    open_bookkeeper,
)
from magnetar.bookkeeper.client.ledger_manager import LedgerManager
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore


@asynccontextmanager
async def setup(bookies: int = 3, **settings: int) -> AsyncIterator[tuple[BookKeeper, InProcessBookies]]:
    metadata = MemoryMetadataStore()
    config = ClientSettings(
        **{**UNHURRIED, "ensemble_size": 3, "write_quorum": 3, "ack_quorum": 2, **settings}
    )
    async with (
        open_in_process_bookies(metadata, bookies) as cluster,
        open_bookkeeper(metadata, cluster.transport, config) as bk,
    ):
        yield bk, cluster


async def until_true(check: object) -> None:
    for _ in range(10_000):
        if await check():  # type: ignore[operator]
            return
        await trio.sleep(0.001)
    raise AssertionError("never true")


async def test_pipelined_adds_are_acknowledged_in_order(bookkeeper_client: BookKeeper) -> None:
    lh = await bookkeeper_client.create_ledger(custom_metadata={"k": b"v"})
    acked: list[int | BKError] = []
    done = trio.Event()

    def callback(outcome: int | BKError) -> None:
        acked.append(outcome)
        assert lh.last_add_confirmed == outcome, "LAC is set before the callback runs"
        if len(acked) == 2000:
            done.set()

    ids = [lh.add_entry_nowait(b"payload-%d" % i, callback) for i in range(2000)]
    assert ids == list(range(2000))
    await done.wait()
    assert acked == list(range(2000))
    assert lh.length == sum(len(b"payload-%d" % i) for i in range(2000))
    entries = await lh.read_entries(0, 1999)
    assert [e.payload for e in entries] == [b"payload-%d" % i for i in range(2000)]
    assert (entries[5].ledger_id, entries[5].entry_id, entries[5].length) == (lh.ledger_id, 5, 9)
    assert (await bookkeeper_client.get_ledger_metadata(lh.ledger_id)).custom_metadata == {"k": b"v"}


async def test_back_pressure_at_pending_adds_max() -> None:
    async with setup(pending_adds_max=4) as (bk, _):
        lh = await bk.create_ledger()
        for _ in range(4):
            lh.add_entry_nowait(b"x", lambda outcome: None)
        assert lh.pending_add_count == 4
        with pytest.raises(TooManyRequestsError):
            lh.add_entry_nowait(b"x", lambda outcome: None)
        assert await lh.add_entry(b"waited") == 4, "add_entry waits for room instead of failing"


async def test_payload_limit(bookkeeper_client: BookKeeper) -> None:
    lh = await bookkeeper_client.create_ledger()
    limit = bookkeeper_client.settings.entry_payload_bytes_max
    with pytest.raises(IncorrectParameterError, match="entry_payload_bytes_max"):
        await lh.add_entry(b"x" * (limit + 1))


async def test_create_needs_enough_bookies(bookkeeper_client: BookKeeper) -> None:
    with pytest.raises(NotEnoughBookiesError):
        await bookkeeper_client.create_ledger(ensemble_size=4, write_quorum=3, ack_quorum=2)
    with pytest.raises(IncorrectParameterError):
        await bookkeeper_client.create_ledger(ensemble_size=2, write_quorum=3, ack_quorum=2)


async def test_ensemble_change_replaces_a_failed_bookie() -> None:
    async with setup(4) as (bk, cluster):
        lh = await bk.create_ledger()
        for i in range(10):
            await lh.add_entry(b"e%d" % i)
        original = lh.metadata.last_ensemble[1]
        cluster.transport.disconnect(original[1])
        for i in range(10, 20):
            await lh.add_entry(b"e%d" % i)
        (spare,) = [b for b in cluster.ids if b not in original]
        assert lh.metadata.ensembles == ((0, original), (10, (original[0], spare, original[2])))
        stored = await bk.get_ledger_metadata(lh.ledger_id)
        assert stored.ensembles == lh.metadata.ensembles
        assert [e.payload for e in await lh.read_entries(0, 19)] == [b"e%d" % i for i in range(20)]
        assert cluster.stores[spare].read_entry(lh.ledger_id, 10)


async def test_readonly_bookie_triggers_an_ensemble_change() -> None:
    async with setup(4) as (bk, cluster):
        lh = await bk.create_ledger()
        await lh.add_entry(b"first")
        cluster.set_readonly(lh.metadata.last_ensemble[1][0])
        await lh.add_entry(b"second")
        assert [first for first, _ in lh.metadata.ensembles] == [0, 1]


async def test_a_silent_bookie_times_out_and_is_replaced(autojump_clock: object) -> None:
    async with setup(4, add_timeout_ms=2000) as (bk, cluster):
        lh = await bk.create_ledger()
        await lh.add_entry(b"first")
        silent = lh.metadata.last_ensemble[1][2]
        cluster.stores[silent].auto_sync = False  # accepts writes, never makes them durable: no answer
        await lh.add_entry(b"second")  # AQ = 2 of 3: acknowledged without the silent bookie
        assert silent in lh.metadata.last_ensemble[1]
        await trio.sleep(2.5)  # past add_timeout_ms: the silent bookie's request times out
        assert silent not in lh.metadata.last_ensemble[1]
        assert lh.metadata.ensembles[-1][0] == 2


async def test_not_enough_bookies_for_a_change_closes_the_ledger_at_lac() -> None:
    async with setup(3) as (bk, cluster):
        lh = await bk.create_ledger()
        for i in range(5):
            await lh.add_entry(b"e%d" % i)
        cluster.transport.disconnect(lh.metadata.last_ensemble[1][0])
        with pytest.raises(NotEnoughBookiesError):
            await lh.add_entry(b"lost")

        async def closed() -> bool:
            md = await bk.get_ledger_metadata(lh.ledger_id)
            return md.is_closed

        await until_true(closed)
        md = await bk.get_ledger_metadata(lh.ledger_id)
        assert (md.last_entry_id, md.length) == (4, lh.length)
        with pytest.raises(LedgerClosedError):
            await lh.add_entry(b"after")


async def test_close_is_idempotent_and_stops_adds(bookkeeper_client: BookKeeper) -> None:
    lh = await bookkeeper_client.create_ledger()
    for i in range(3):
        await lh.add_entry(b"e%d" % i)
    await lh.close()
    await lh.close()
    md = await bookkeeper_client.get_ledger_metadata(lh.ledger_id)
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.CLOSED, 2, 6)
    with pytest.raises(LedgerClosedError):
        await lh.add_entry(b"late")
    assert [e.payload for e in await lh.read_entries(0, 2)] == [b"e0", b"e1", b"e2"]


async def test_close_fails_pending_adds_as_outcome_unknown() -> None:
    async with setup(3) as (bk, cluster):
        lh = await bk.create_ledger()
        await lh.add_entry(b"acked")
        for store in cluster.stores.values():
            store.auto_sync = False
        outcomes: list[int | BKError] = []
        lh.add_entry_nowait(b"pending", outcomes.append)
        await lh.close()
        await until_true(lambda: _async_bool(bool(outcomes)))
        assert isinstance(outcomes[0], LedgerClosedError)
        assert lh.metadata.last_entry_id == 0


async def _async_bool(value: bool) -> bool:
    return value


@pytest.mark.parametrize(("closed_at", "ok"), [(2, True), (1, False)])
async def test_close_after_someone_else_closed(
    bookkeeper_client: BookKeeper, closed_at: int, ok: bool
) -> None:
    lh = await bookkeeper_client.create_ledger()
    for i in range(3):
        await lh.add_entry(b"e%d" % i)
    manager = LedgerManager(bookkeeper_client._ctx.manager.store)
    current = await manager.read(lh.ledger_id)
    await manager.write(
        lh.ledger_id, current.metadata.closed(closed_at, 2 * (closed_at + 1)), current.version
    )
    if ok:
        await lh.close()
    else:
        with pytest.raises(MetadataVersionError):
            await lh.close()


async def test_fenced_writer_fails_every_add_and_may_close_at_the_same_end(
    bookkeeper_client: BookKeeper,
) -> None:
    lh = await bookkeeper_client.create_ledger()
    for i in range(3):
        await lh.add_entry(b"e%d" % i)
    rh = await bookkeeper_client.open_ledger(lh.ledger_id)
    assert rh.last_add_confirmed == 2
    with pytest.raises(LedgerFencedError):
        await lh.add_entry(b"after fence")
    assert lh.is_fenced
    with pytest.raises(LedgerFencedError):
        await lh.add_entry(b"again")
    await lh.close()  # the recovering client closed at this writer's LAC: consistent


async def test_delete_and_list(bookkeeper_client: BookKeeper) -> None:
    handles = [await bookkeeper_client.create_ledger() for _ in range(3)]
    ids = [lh.ledger_id for lh in handles]
    assert [i async for i in bookkeeper_client.list_ledgers()] == sorted(ids)
    await bookkeeper_client.delete_ledger(ids[1])
    assert [i async for i in bookkeeper_client.list_ledgers()] == sorted([ids[0], ids[2]])
    with pytest.raises(NoSuchLedgerError):
        await bookkeeper_client.open_ledger(ids[1])
    with pytest.raises(NoSuchLedgerError):
        await bookkeeper_client.delete_ledger(ids[1])

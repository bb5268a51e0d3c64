"""Reads: LAC bound, replica failover, digest errors, pipelining, LAC reads, opening without recovery."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace

import pytest
import trio
from fixtures.client import UNHURRIED, InProcessBookies, open_in_process_bookies

from magnetar.bookkeeper.bookie.core import BookieCore
from magnetar.bookkeeper.client import (
    BKError,
    BKReadError,
    BookKeeper,
    ClientSettings,
    DigestMismatchError,
    IncorrectParameterError,
    LedgerEntry,
    open_bookkeeper,
)
from magnetar.bookkeeper.client.local_transport import LocalTransport
from magnetar.bookkeeper.client.transport import ResponseCallback
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.protocol.messages import ReadRequest, ReadResponse, Request, Response


class CountingTransport:
    """Counts read requests in flight (to prove reads are pipelined)."""

    def __init__(self, inner: LocalTransport) -> None:
        self.inner = inner
        self.in_flight = 0
        self.max_in_flight = 0
        self.reads = 0

    def send(self, bookie: str, request: Request, callback: ResponseCallback) -> None:
        if not isinstance(request, ReadRequest):
            self.inner.send(bookie, request, callback)
            return
        self.reads += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

        def done(answer: object) -> None:
            self.in_flight -= 1
            callback(answer)  # type: ignore[arg-type]

        self.inner.send(bookie, request, done)


class CorruptingHandler:
    """A bookie that flips a byte in the entries it returns."""

    def __init__(self, core: BookieCore) -> None:
        self.core = core

    def handle(self, request: Request, respond: Callable[[Response], None]) -> None:
        def corrupt(response: Response) -> None:
            if isinstance(response, ReadResponse) and response.body:
                body = bytearray(response.body)
                body[-1] ^= 0xFF
                response = replace(response, body=bytes(body))
            respond(response)

        self.core.handle(request, corrupt)

    def begin_burst(self) -> None:
        self.core.begin_burst()

    def end_burst(self) -> None:
        self.core.end_burst()


@asynccontextmanager
async def setup(**settings: int) -> AsyncIterator[tuple[BookKeeper, InProcessBookies, CountingTransport]]:
    metadata = MemoryMetadataStore()
    config = ClientSettings(
        **{**UNHURRIED, "ensemble_size": 3, "write_quorum": 3, "ack_quorum": 2, **settings}
    )
    async with open_in_process_bookies(metadata, 3) as cluster:
        counting = CountingTransport(cluster.transport)
        async with open_bookkeeper(metadata, counting, config) as bk:
            yield bk, cluster, counting


async def test_reads_stop_at_the_lac(bookkeeper_client: BookKeeper) -> None:
    lh = await bookkeeper_client.create_ledger()
    for i in range(3):
        await lh.add_entry(b"e%d" % i)
    with pytest.raises(BKReadError, match="beyond the last add confirmed"):
        await lh.read_entries(0, 3)
    with pytest.raises(IncorrectParameterError):
        await lh.read_entries(2, 1)
    assert await lh.read_entries(1, 1) == [LedgerEntry(lh.ledger_id, 1, b"e1")]


async def test_reads_fail_over_to_other_replicas(
    bookkeeper_client: BookKeeper, in_process_bookies: InProcessBookies
) -> None:
    lh = await bookkeeper_client.create_ledger()
    for i in range(6):
        await lh.add_entry(b"e%d" % i)
    in_process_bookies.transport.disconnect(lh.metadata.last_ensemble[1][0])
    in_process_bookies.transport.disconnect(lh.metadata.last_ensemble[1][1])
    assert [e.payload for e in await lh.read_entries(0, 5)] == [b"e%d" % i for i in range(6)]


async def test_corrupt_replicas_are_skipped_and_all_corrupt_is_a_digest_error(
    bookkeeper_client: BookKeeper, in_process_bookies: InProcessBookies
) -> None:
    lh = await bookkeeper_client.create_ledger()
    for i in range(4):
        await lh.add_entry(b"e%d" % i)
    ensemble = lh.metadata.last_ensemble[1]
    for bookie in ensemble[:2]:
        in_process_bookies.transport.add_bookie(bookie, CorruptingHandler(in_process_bookies.cores[bookie]))
    assert [e.payload for e in await lh.read_entries(0, 3)] == [b"e%d" % i for i in range(4)]
    in_process_bookies.transport.add_bookie(
        ensemble[2], CorruptingHandler(in_process_bookies.cores[ensemble[2]])
    )
    with pytest.raises(DigestMismatchError):
        await lh.read_entries(0, 0)


async def test_ten_thousand_entries_are_read_pipelined() -> None:
    async with setup(reads_in_flight_max=256) as (bk, _, counting):
        lh = await bk.create_ledger()
        done = trio.Event()
        count = 10_000

        def acked(outcome: int | BKError) -> None:
            if outcome == count - 1:
                done.set()

        for i in range(count):
            lh.add_entry_nowait(b"%d" % i, acked)
        await done.wait()
        entries = await lh.read_entries(0, count - 1)
        assert [e.payload for e in entries] == [b"%d" % i for i in range(count)]
        assert counting.reads == count
        assert counting.max_in_flight >= 200, "reads must overlap, not be sequential round trips"


async def test_open_without_recovery_reads_lac_and_never_fences(
    bookkeeper_client: BookKeeper, in_process_bookies: InProcessBookies
) -> None:
    lh = await bookkeeper_client.create_ledger()
    for i in range(10):
        await lh.add_entry(b"e%d" % i)
    rh = await bookkeeper_client.open_ledger(lh.ledger_id, recovery=False)
    assert rh.last_add_confirmed == -1
    assert not rh.is_closed
    # The last entry carries LAC 8 (its predecessor); without explicit LAC that is what readers can know.
    assert await rh.read_last_add_confirmed() == 8
    assert [e.payload for e in await rh.read_entries(0, 8)] == [b"e%d" % i for i in range(9)]
    with pytest.raises(BKReadError):
        await rh.read_entries(9, 9)
    assert await lh.add_entry(b"e10") == 10, "the writer is not fenced"
    assert await rh.read_last_add_confirmed() == 9
    for store in in_process_bookies.stores.values():
        state = store.ledger_state(lh.ledger_id)
        assert state is not None
        assert not state.fenced
    await lh.close()
    assert await rh.read_last_add_confirmed() == 10
    assert rh.is_closed


async def test_tailing_reader_follows_an_ensemble_change() -> None:
    metadata = MemoryMetadataStore()
    config = ClientSettings(**UNHURRIED, ensemble_size=2, write_quorum=2, ack_quorum=2)
    async with (
        open_in_process_bookies(metadata, 3) as cluster,
        open_bookkeeper(metadata, cluster.transport, config) as bk,
    ):
        lh = await bk.create_ledger()
        for i in range(5):
            await lh.add_entry(b"e%d" % i)
        rh = await bk.open_ledger(lh.ledger_id, recovery=False)
        cluster.transport.disconnect(lh.metadata.last_ensemble[1][0])
        await lh.add_entry(b"e5")
        assert lh.metadata.ensembles[-1][0] == 5
        assert await rh.read_last_add_confirmed() == 4
        assert [e.payload for e in await rh.read_entries(0, 4)] == [b"e%d" % i for i in range(5)]

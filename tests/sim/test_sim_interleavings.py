"""Scripted interleavings BookKeeper pins down with mock bookies and hooks (``LedgerRecovery2Test``,
``ParallelLedgerRecoveryTest``, ``HandleFailuresTest``), on real bookie logic with held requests/responses.

Each test builds the exact schedule of the upstream case; the two TLA+ defects (#2614, #2615) also run with
the defect re-introduced (``INJECTED_BUGS``) to show that the schedule really exercises it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
import trio
from fixtures.client import InProcessBookies, open_in_process_bookies
from sim.sim_scripted import GatedMetadataStore, ScriptedTransport, add_of, adds_from, read_of

from magnetar.bookkeeper.client import (
    BKError,
    BookKeeper,
    ClientSettings,
    LedgerClosedError,
    LedgerFencedError,
    LedgerHandle,
    LedgerState,
    open_bookkeeper,
    recovery,
)
from magnetar.bookkeeper.client.ledger_manager import LedgerManager
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore


async def until(condition: Callable[[], bool], limit: int = 10_000) -> None:
    """Wait for an observable condition of the in-process bookies (runs on the autojump clock)."""
    for _ in range(limit):
        if condition():
            return
        await trio.sleep(0.001)
    raise AssertionError("condition never became true")


@dataclass
class Client:
    bk: BookKeeper
    transport: ScriptedTransport
    store: GatedMetadataStore


@dataclass
class Cluster:
    metadata: MemoryMetadataStore
    bookies: InProcessBookies

    @asynccontextmanager
    async def client(self, **settings: int) -> AsyncIterator[Client]:
        transport = ScriptedTransport(self.bookies.transport)
        store = GatedMetadataStore(self.metadata)
        config = ClientSettings(**{"ensemble_size": 3, "write_quorum": 3, "ack_quorum": 2, **settings})
        async with open_bookkeeper(store, transport, config) as bk:
            yield Client(bk, transport, store)

    def has_entry(self, bookie: str, ledger_id: int, entry_id: int) -> bool:
        try:
            self.bookies.stores[bookie].read_entry(ledger_id, entry_id)
        except Exception:
            return False
        return True


@asynccontextmanager
async def cluster(count: int = 3) -> AsyncIterator[Cluster]:
    metadata = MemoryMetadataStore()
    async with open_in_process_bookies(metadata, count) as bookies:
        yield Cluster(metadata, bookies)


async def write(lh: LedgerHandle, count: int) -> None:
    for i in range(count):
        await lh.add_entry(b"entry-%d" % i)


class Outcomes:
    def __init__(self) -> None:
        self.got: dict[int, int | BKError] = {}

    def callback(self, entry_id: int) -> Callable[[int | BKError], None]:
        return lambda outcome: self.got.__setitem__(entry_id, outcome)


# -- recovery vs a writer closing --------------------------------------------------------------------------


async def test_writer_close_before_recovery_means_no_fencing(autojump_clock: object) -> None:
    async with cluster() as c, c.client() as writer, c.client() as other:
        lh = await writer.bk.create_ledger()
        await write(lh, 5)
        await lh.close()
        rh = await other.bk.open_ledger(lh.ledger_id)
        assert (rh.last_add_confirmed, rh.metadata.length) == (4, lh.length)
        for store in c.bookies.stores.values():
            state = store.ledger_state(lh.ledger_id)
            assert state is not None
            assert not state.fenced


async def test_recovery_in_flight_makes_writer_close_fail_then_closes_at_writer_lac(
    autojump_clock: object,
) -> None:
    async with cluster() as c, c.client() as writer, c.client() as other:
        lh = await writer.bk.create_ledger()
        await write(lh, 5)
        holds = [other.transport.hold(b, read_of(-1, fence=True)) for b in c.bookies.ids]
        async with trio.open_nursery() as nursery:
            result: list[int] = []

            async def recover() -> None:
                rh = await other.bk.open_ledger(lh.ledger_id)
                result.append(rh.last_add_confirmed)

            nursery.start_soon(recover)
            for hold in holds:
                await hold.arrived.wait()
            assert (await writer.bk.get_ledger_metadata(lh.ledger_id)).state is LedgerState.IN_RECOVERY
            with pytest.raises(LedgerFencedError):
                await lh.close()
            for hold in holds:
                hold.release()
        assert result == [4]
        with pytest.raises(LedgerClosedError):
            await lh.add_entry(b"late")


# -- TLA+ defect 1 (BookKeeper #2614): the first writer must not commit after the second one closes ----


@pytest.mark.parametrize("defect", [False, True], ids=["fixed", "unfenced-recovery-reads"])
async def test_first_writer_cannot_commit_after_second_writer_closes(
    autojump_clock: object, monkeypatch: pytest.MonkeyPatch, defect: bool
) -> None:
    if defect:
        monkeypatch.setattr(recovery, "INJECTED_BUGS", recovery.InjectedBugs(unfenced_recovery_reads=True))
    async with cluster() as c, c.client() as writer, c.client() as second:
        lh = await writer.bk.create_ledger()
        a, b, cc = lh.metadata.last_ensemble[1]
        await write(lh, 1)
        # Entry 1 reaches A only: its adds to B and C are held in the network.
        held_b = writer.transport.hold(b, add_of(1))
        held_c = writer.transport.hold(cc, add_of(1))
        outcomes = Outcomes()
        lh.add_entry_nowait(b"entry-1", outcomes.callback(1))
        await until(lambda: c.has_entry(a, lh.ledger_id, 1))
        # The fence never reaches C; A's answer to the recovery read of entry 1 is slow.
        second.transport.hold(cc, read_of(-1, fence=True))
        slow_a = second.transport.hold(a, read_of(1), responses=True)
        rh = await second.bk.open_ledger(lh.ledger_id)
        assert rh.metadata.last_entry_id == 0, "B and C said 'no entry 1': the second writer closes at 0"
        held_c.release()  # the first writer's add of entry 1 finally reaches C
        await until(lambda: 1 in outcomes.got)
        if defect:
            assert outcomes.got[1] == 1, "without fencing reads, C took the add: an acked entry is lost"
        else:
            assert isinstance(outcomes.got[1], LedgerFencedError)
        held_b.drop()
        slow_a.drop()


# -- TLA+ defect 2 (BookKeeper #2615): the last ensemble has no entries, its bookies answer LAC -1 ------


@pytest.mark.parametrize("defect", [False, True], ids=["fixed", "no-lac-floor"])
async def test_recovery_when_second_ensemble_returns_lac_minus_one(
    autojump_clock: object, monkeypatch: pytest.MonkeyPatch, defect: bool
) -> None:
    if defect:
        monkeypatch.setattr(recovery, "INJECTED_BUGS", recovery.InjectedBugs(no_lac_floor=True))
    async with cluster(4) as c, c.client(ensemble_size=2, write_quorum=2, ack_quorum=2) as writer:
        lh = await writer.bk.create_ledger()
        await write(lh, 5)
        # The writer moved to a second ensemble at entry 5 and died before writing to it.
        manager = LedgerManager(c.metadata)
        current = await manager.read(lh.ledger_id)
        spare = [x for x in c.bookies.ids if x not in current.metadata.last_ensemble[1]]
        await manager.write(lh.ledger_id, current.metadata.with_ensemble(5, spare), current.version)
        async with c.client(ensemble_size=2, write_quorum=2, ack_quorum=2) as second:
            rh = await second.bk.open_ledger(lh.ledger_id)
            if defect:
                assert rh.metadata.last_entry_id == -1, (
                    "without the floor, acknowledged entries 0..4 are cut off"
                )
            else:
                assert rh.metadata.last_entry_id == 4
                assert [e.payload for e in await rh.read_entries(0, 4)] == [b"entry-%d" % i for i in range(5)]


# -- ensemble change during recovery ---------------------------------------------------------------------


async def test_ensemble_change_during_recovery_is_written_only_by_the_closing_cas(
    autojump_clock: object,
) -> None:
    async with cluster(4) as c, c.client() as writer:
        lh = await writer.bk.create_ledger()
        a, b, cc = lh.metadata.last_ensemble[1]
        (d,) = [x for x in c.bookies.ids if x not in (a, b, cc)]
        await write(lh, 5)
        writer.transport.hold(b, adds_from(5))
        writer.transport.hold(cc, adds_from(5))
        for i in range(5, 8):
            lh.add_entry_nowait(b"entry-%d" % i, lambda outcome: None)
        await until(lambda: c.has_entry(a, lh.ledger_id, 7))
        c.bookies.transport.disconnect(cc)  # C is gone for the recovering client's re-adds
        async with c.client() as second:
            rh = await second.bk.open_ledger(lh.ledger_id)
            assert second.store.ledger_writes == ["IN_RECOVERY", "CLOSED"]
            md = rh.metadata
            assert md.last_entry_id == 7
            assert md.ensembles == ((0, (a, b, cc)), (5, (a, b, d)))
            assert [e.payload for e in await rh.read_entries(5, 7)] == [b"entry-%d" % i for i in range(5, 8)]
            assert c.has_entry(d, lh.ledger_id, 7)


# -- ensemble change in the writer -------------------------------------------------------------------------


@asynccontextmanager
async def ensemble_change_held(c: Cluster) -> AsyncIterator[tuple[Client, LedgerHandle, Outcomes]]:
    """A writer whose ensemble change (after C disconnects at entry 2) is stuck at its metadata write."""
    async with c.client() as writer:
        lh = await writer.bk.create_ledger()
        await write(lh, 2)
        writer.store.gate = trio.Event()
        c.bookies.transport.disconnect(lh.metadata.last_ensemble[1][2])
        outcomes = Outcomes()
        for i in range(2, 5):
            lh.add_entry_nowait(b"entry-%d" % i, outcomes.callback(i))
        await writer.store.waiting.wait()
        a, b = lh.metadata.last_ensemble[1][:2]
        await until(lambda: all(c.has_entry(x, lh.ledger_id, 4) for x in (a, b)))
        yield writer, lh, outcomes


async def test_no_adds_complete_while_an_ensemble_change_is_in_flight(autojump_clock: object) -> None:
    async with cluster(4) as c, ensemble_change_held(c) as (writer, lh, outcomes):
        await trio.sleep(1.0)
        assert outcomes.got == {}, "entries 2-4 have AQ acks but must wait for the ensemble change"
        assert lh.last_add_confirmed == 1
        assert writer.store.gate is not None
        writer.store.gate.set()
        await until(lambda: len(outcomes.got) == 3)
        assert outcomes.got == {2: 2, 3: 3, 4: 4}
        assert [first for first, _ in lh.metadata.ensembles] == [0, 2]
        assert [e.payload for e in await lh.read_entries(0, 4)] == [b"entry-%d" % i for i in range(5)]


@pytest.mark.parametrize("state", [LedgerState.CLOSED, LedgerState.IN_RECOVERY])
async def test_ensemble_change_finds_metadata_changed_meanwhile(
    autojump_clock: object, state: LedgerState
) -> None:
    async with cluster(4) as c, ensemble_change_held(c) as (writer, lh, outcomes):
        manager = LedgerManager(c.metadata)
        current = await manager.read(lh.ledger_id)
        md = current.metadata
        changed = md.closed(1, lh.length) if state is LedgerState.CLOSED else md.in_recovery()
        await manager.write(lh.ledger_id, changed, current.version)
        assert writer.store.gate is not None
        writer.store.gate.set()
        await until(lambda: len(outcomes.got) == 3)
        expected = LedgerClosedError if state is LedgerState.CLOSED else LedgerFencedError
        assert all(isinstance(outcomes.got[i], expected) for i in (2, 3, 4))
        assert lh.last_add_confirmed == 1
        assert lh.is_fenced == (state is LedgerState.IN_RECOVERY)

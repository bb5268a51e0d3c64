"""Rollovers while the metadata store is away: the current ledger takes entries past its cap (bounded), the
roll happens when the store is back, an unknown outcome of the list write is settled, and a broker that took
the topic over meanwhile fences the old writer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from fixtures.client import UNHURRIED, InProcessBookies, open_in_process_bookies

from magnetar.bookkeeper.client import ClientSettings, open_bookkeeper
from magnetar.bookkeeper.metadata import MemoryMetadataStore, Stat, StoreUnavailableError
from magnetar.bookkeeper.metadata.ledger_paths import ledger_path
from magnetar.managed_ledger.errors import ManagedLedgerFencedError, RolloverDeferredError
from magnetar.managed_ledger.factory import ManagedLedgerFactory, open_managed_ledger_factory
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.meta_store import ROOT
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.settings import ManagedLedgerSettings

CAP = 20
SETTINGS = ManagedLedgerSettings(
    ensemble_size=3,
    write_quorum=3,
    ack_quorum=2,
    max_entries_per_ledger=CAP,
    min_ledger_rollover_time_min=0,
    rollover_retry_interval_ms=50,
)
CLIENT = ClientSettings(**UNHURRIED, ensemble_size=3, write_quorum=3, ack_quorum=2)
_stores = iter(range(1_000_000))


@asynccontextmanager
async def managed_ledgers(
    store: MemoryMetadataStore, settings: ManagedLedgerSettings = SETTINGS
) -> AsyncIterator[tuple[ManagedLedgerFactory, InProcessBookies]]:
    async with (
        open_in_process_bookies(store, 3) as bookies,
        open_bookkeeper(store, bookies.transport, CLIENT) as bk,
        open_managed_ledger_factory(bk, store, settings) as factory,
    ):
        yield factory, bookies


def store_name() -> str:
    return f"rollover-deferred-{next(_stores)}"


async def fill(ml: ManagedLedger, count: int, prefix: str = "m") -> list[Position]:
    return [await ml.add_entry(f"{prefix}{i}".encode()) for i in range(count)]


async def rolled(ml: ManagedLedger, ledger_id: int) -> None:
    with trio.fail_after(10):
        while ml.current_ledger_id == ledger_id or ml.rollover_deferred:
            await trio.sleep(0.01)


async def payloads(ml: ManagedLedger) -> list[bytes]:
    first = ml.ledgers.first_position()
    assert first is not None
    return [entry.data for entry in await ml.read_entries(first, 10_000)]


async def test_entries_go_past_the_cap_during_an_outage_and_the_ledger_rolls_when_it_ends() -> None:
    store = MemoryMetadataStore(store_name())
    async with managed_ledgers(store) as (factory, _):
        ml = await factory.open("t/ns/persistent/past-the-cap")
        first = ml.current_ledger_id
        before = await fill(ml, CAP - 5)
        store.disconnect()
        during = await fill(ml, 30, "outage-")
        assert {p.ledger_id for p in [*before, *during]} == {first}
        assert [p.entry_id for p in during] == list(range(CAP - 5, CAP + 25))
        assert ml.rollover_deferred
        assert ml.entries_past_cap == 25
        store.reconnect()
        await rolled(ml, first)
        after = await fill(ml, 3, "after-")
        assert {p.ledger_id for p in after} == {ml.current_ledger_id}
        closed = ml.ledgers.get(first)
        assert closed is not None
        assert closed.entries == CAP + 25
        expected = [f"m{i}" for i in range(CAP - 5)] + [f"outage-{i}" for i in range(30)]
        assert await payloads(ml) == [e.encode() for e in [*expected, "after-0", "after-1", "after-2"]]
        # the list in the store says so too: a new owner would find every entry
        stored = await factory.meta.get_ledger_info("t/ns/persistent/past-the-cap")
        assert stored is not None
        head = stored.value.ledgers[0]
        assert (head.ledger_id, head.entries) == (first, CAP + 25)


async def test_beyond_the_bound_adds_fail_at_once_and_nothing_is_written() -> None:
    store = MemoryMetadataStore(store_name())
    settings = SETTINGS.model_copy(update={"rollover_deferred_entries_max": 5})
    async with managed_ledgers(store, settings) as (factory, _):
        ml = await factory.open("t/ns/persistent/bounded")
        first = ml.current_ledger_id
        await fill(ml, CAP - 1)
        store.disconnect()
        await fill(ml, 6, "outage-")  # up to the cap and 5 past it
        last = ml.last_confirmed
        with pytest.raises(RolloverDeferredError, match="rollover_deferred_entries_max"):
            await ml.add_entry(b"refused")
        assert ml.last_confirmed == last
        store.reconnect()
        await rolled(ml, first)
        assert (await ml.add_entry(b"accepted")).ledger_id == ml.current_ledger_id
        assert b"refused" not in await payloads(ml)


class SlowLedgerCreation(MemoryMetadataStore):
    """Ledger metadata writes (the replication client's, under ``/ledgers``) wait while ``gate`` is closed."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.gate: trio.Event | None = None

    async def put(self, path: str, value: bytes, expected_version: int | None, **kwargs: Any) -> Stat:
        gate = self.gate
        if gate is not None and path.startswith("/ledgers/") and not path.startswith("/ledgers/available"):
            await gate.wait()
        return await super().put(path, value, expected_version, **kwargs)


async def test_a_slow_store_defers_the_rollover_instead_of_stalling_the_adds() -> None:
    store = SlowLedgerCreation(store_name())
    settings = SETTINGS.model_copy(update={"rollover_create_wait_ms": 100})
    async with managed_ledgers(store, settings) as (factory, _):
        ml = await factory.open("t/ns/persistent/slow-store")
        first = ml.current_ledger_id
        await fill(ml, CAP - 1)
        store.gate = trio.Event()
        with trio.fail_after(5):  # the adds wait rollover_create_wait_ms at most, not for the store
            during = await fill(ml, 10, "slow-")
        assert {p.ledger_id for p in during} == {first}
        assert ml.rollover_deferred
        store.gate.set()
        await rolled(ml, first)
        closed = ml.ledgers.get(first)
        assert closed is not None
        assert closed.entries == CAP + 9


async def test_with_a_healthy_store_ledgers_hold_exactly_the_cap() -> None:
    store = MemoryMetadataStore(store_name())
    async with managed_ledgers(store) as (factory, _):
        ml = await factory.open("t/ns/persistent/exact")
        done = trio.Event()
        results: list[Position | Exception] = []

        def on_added(result: Position | Exception) -> None:
            results.append(result)
            if len(results) == 3 * CAP:
                done.set()

        for i in range(3 * CAP):  # all at once: the adds past the cap queue for the next ledger
            ml.add_entry_nowait(f"m{i}".encode(), on_added)
        with trio.fail_after(10):
            await done.wait()
        assert all(isinstance(r, Position) for r in results)
        assert [info.entries for info in ml.ledgers][:2] == [CAP, CAP]


class LostAnswers(MemoryMetadataStore):
    """The next write of the ledger list is lost on the way back (``applied``: it happened all the same), and
    the connection drops: the writer cannot know whether it happened."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.armed: bool | None = None  # None: off; True/False: the next list write is (not) applied

    async def put(self, path: str, value: bytes, expected_version: int | None, **kwargs: Any) -> Stat:
        applied = self.armed
        if applied is None or not path.startswith(ROOT) or path.count("/") > 5:
            return await super().put(path, value, expected_version, **kwargs)
        self.armed = None
        if applied:
            await super().put(path, value, expected_version, **kwargs)
        self.disconnect()
        raise StoreUnavailableError(f"connection lost during {path}")


@pytest.mark.parametrize("applied", [True, False])
async def test_an_unknown_outcome_of_the_list_write_is_settled_by_reading_it_back(applied: bool) -> None:
    store = LostAnswers(store_name())
    async with managed_ledgers(store) as (factory, _):
        name = "t/ns/persistent/unknown-outcome"
        ml = await factory.open(name)
        first = ml.current_ledger_id
        await fill(ml, CAP - 1)
        store.armed = applied
        # the 20th add starts the rollover, whose list write is lost on the way: the adds go on to the
        # current ledger (both possible lists cover it), past its cap
        during = await fill(ml, 10, "then-")
        assert {p.ledger_id for p in during} == {first}
        assert not store.health.healthy
        store.reconnect()
        await rolled(ml, first)
        assert (await ml.add_entry(b"after")).ledger_id == ml.current_ledger_id
        stored = await factory.meta.get_ledger_info(name)
        assert stored is not None
        assert [i.ledger_id for i in stored.value.ledgers] == [i.ledger_id for i in ml.ledgers]
        closed = ml.ledgers.get(first)
        assert closed is not None
        assert closed.entries == CAP + 9


async def test_a_takeover_while_the_next_ledger_is_listed_fences_both_and_keeps_every_entry() -> None:
    """The list names the next ledger while the current one is still written (listed as open): a broker that
    opens the managed ledger then must recover the current ledger as well as the next one."""
    name = store_name()
    ours, theirs = LostAnswers(name), MemoryMetadataStore(name)
    topic = "t/ns/persistent/listed-next"
    async with (
        open_in_process_bookies(ours, 3) as bookies,
        open_bookkeeper(ours, bookies.transport, CLIENT) as bk_ours,
        open_bookkeeper(theirs, bookies.transport, CLIENT) as bk_theirs,
        open_managed_ledger_factory(bk_ours, ours, SETTINGS) as factory_ours,
        open_managed_ledger_factory(bk_theirs, theirs, SETTINGS) as factory_theirs,
    ):
        old = await factory_ours.open(topic)
        await fill(old, CAP - 1)
        ours.armed = True  # the list naming the next ledger is written; we do not learn it
        await fill(old, 6, "past-")  # entries CAP-1 .. CAP+4 of the current ledger, acknowledged
        ours.expire_session()
        acked = [f"m{i}".encode() for i in range(CAP - 1)] + [f"past-{i}".encode() for i in range(6)]
        new = await factory_theirs.open(topic)
        assert await payloads(new) == acked
        with pytest.raises(ManagedLedgerFencedError):
            await old.add_entry(b"after the takeover")
        assert await payloads(new) == acked


async def test_a_broker_that_takes_the_topic_over_during_the_outage_fences_the_old_writer() -> None:
    """The correctness argument: our session expired, another broker opened the managed ledger (recovering,
    so fencing, our current ledger on the bookies); our next add fails as fenced, and every entry we had
    acknowledged - also those acknowledged during the outage - is in the new owner's managed ledger."""
    name = store_name()
    ours, theirs = MemoryMetadataStore(name), MemoryMetadataStore(name)
    topic = "t/ns/persistent/taken-over"
    async with (
        open_in_process_bookies(ours, 3) as bookies,
        open_bookkeeper(ours, bookies.transport, CLIENT) as bk_ours,
        open_bookkeeper(theirs, bookies.transport, CLIENT) as bk_theirs,
        open_managed_ledger_factory(bk_ours, ours, SETTINGS) as factory_ours,
        open_managed_ledger_factory(bk_theirs, theirs, SETTINGS) as factory_theirs,
    ):
        old = await factory_ours.open(topic)
        acked = [f"m{i}".encode() for i in range(CAP + 5)]  # past the cap during the outage
        await fill(old, 10)
        ours.disconnect()
        ours.expire_session()
        for payload in acked[10:]:
            await old.add_entry(payload)
        assert old.rollover_deferred

        new = await factory_theirs.open(topic)
        with pytest.raises(ManagedLedgerFencedError):
            await old.add_entry(b"after the takeover")
        assert await payloads(new) == acked
        ours.reconnect()
        with pytest.raises(ManagedLedgerFencedError):
            await old.add_entry(b"after the reconnection")
        await new.add_entry(b"the new owner writes")
        assert (await payloads(new))[-1] == b"the new owner writes"


class FailingClose(MemoryMetadataStore):
    """The update that closes ledger ``ledger_id`` in its metadata fails once (the store went away then)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.ledger_id: int | None = None

    async def put(self, path: str, value: bytes, expected_version: int | None, **kwargs: Any) -> Stat:
        target = self.ledger_id
        if (
            target is not None
            and expected_version not in (None, -1)
            and path == ledger_path("/ledgers", target)
        ):
            self.ledger_id = None
            raise StoreUnavailableError(f"connection lost during {path}")
        return await super().put(path, value, expected_version, **kwargs)


async def test_a_ledger_its_writer_could_not_close_is_still_read_to_its_end() -> None:
    store = FailingClose(store_name())
    async with managed_ledgers(store) as (factory, _):
        ml = await factory.open("t/ns/persistent/unclosed")
        first = ml.current_ledger_id
        store.ledger_id = first
        await fill(ml, CAP + 3)  # the rollover's close of the first ledger fails; the roll goes on
        await rolled(ml, first)
        metadata = await factory.bk.get_ledger_metadata(first)
        assert not metadata.is_closed
        factory._ctx.cache.clear(ml.name)
        assert await payloads(ml) == [f"m{i}".encode() for i in range(CAP + 3)]

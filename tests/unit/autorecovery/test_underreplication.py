"""The under-replication records in the metadata store: marks, locks, the switch, the delay, the auditor."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pytest
import trio

from magnetar.bookkeeper.autorecovery.election import AuditorElector
from magnetar.bookkeeper.autorecovery.metrics import AutoRecoveryStats
from magnetar.bookkeeper.autorecovery.signals import ChangeSignal
from magnetar.bookkeeper.autorecovery.underreplication import UnderreplicationManager
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.metadata.underreplication_paths import (
    ledger_id_of_ur_node,
    ur_ledger_path,
    ur_lock_path,
)


def test_paths_follow_bookkeepers_layout() -> None:
    assert ur_ledger_path(1) == "/ledgers/underreplication/ledgers/0000/0000/0000/0001/urL0000000001"
    big = (0x1234 << 48) | (0xABCD << 16) | 7
    assert ur_ledger_path(big).split("/")[4:8] == ["1234", "0000", "abcd", "0007"]
    assert ur_lock_path(42) == "/ledgers/underreplication/locks/urL0000000042"
    assert ledger_id_of_ur_node("urL0000000042") == 42
    assert ledger_id_of_ur_node("V_0000000001") is None
    with pytest.raises(ValueError, match="ledger id"):
        ur_ledger_path(-1)


async def test_marks_merge_bookies_and_are_deleted_only_at_the_version_read() -> None:
    manager = UnderreplicationManager(MemoryMetadataStore())
    assert await manager.mark(7, {"a:1"})
    assert not await manager.mark(7, {"a:1"}), "nothing new: no write"
    read = await manager.get_mark(7)
    assert read is not None
    assert await manager.mark(7, {"b:1"})
    assert not await manager.mark_replicated(read), "the auditor added a bookie since it was read"
    current = await manager.get_mark(7)
    assert current is not None
    assert current.missing == {"a:1", "b:1"}
    assert json.loads(current.to_bytes())["replica"] == ["a:1", "b:1"]
    assert await manager.mark_replicated(current)
    assert [m async for m in manager.marked_ledgers()] == []
    assert await manager.store.get_children("/ledgers/underreplication/ledgers") == [], "empty levels pruned"


async def test_a_bookie_that_comes_back_is_forgotten_from_every_mark() -> None:
    manager = UnderreplicationManager(MemoryMetadataStore())
    await manager.mark(1, {"a:1"})
    await manager.mark(2, {"a:1", "b:1"})
    await manager.mark(3, {"c:1"})
    assert await manager.forget_bookies({"a:1"}) == 1
    assert {m.ledger_id: set(m.missing) for m in await manager.marks()} == {2: {"b:1"}, 3: {"c:1"}}


async def test_locks_are_exclusive_and_ephemeral() -> None:
    store = MemoryMetadataStore("locks-test")
    other = MemoryMetadataStore("locks-test")
    mine, theirs = UnderreplicationManager(store), UnderreplicationManager(other)
    assert await mine.try_lock(5, "w1")
    assert not await theirs.try_lock(5, "w2")
    other.expire_session()
    store.expire_session()  # the holder's session ends: its lock goes with it
    assert await theirs.try_lock(5, "w2")
    await store.aclose()
    await other.aclose()


async def test_switch_delay_and_decommissioning_list() -> None:
    manager = UnderreplicationManager(MemoryMetadataStore())
    assert await manager.is_enabled()
    await manager.set_enabled(False)
    await manager.set_enabled(False)  # idempotent
    assert not await manager.is_enabled()
    await manager.set_enabled(True)
    assert await manager.is_enabled()
    assert await manager.initialize_delay_s(30) == 30
    assert await manager.initialize_delay_s(5) == 30, "an existing live value wins over the default"
    await manager.set_delay_s(0)
    assert await manager.get_delay_s() == 0
    await manager.set_decommissioning("a:1", True)
    assert await manager.decommissioning() == ["a:1"]
    await manager.set_decommissioning("a:1", False)
    assert await manager.decommissioning() == []


async def test_the_lowest_vote_audits_and_the_next_takes_over(autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryMetadataStore()
    manager = UnderreplicationManager(store)
    leading: list[str] = []

    def lead(name: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            leading.append(name)
            await trio.sleep_forever()

        return run

    first, second = AutoRecoveryStats(), AutoRecoveryStats()
    async with trio.open_nursery() as nursery:
        one = trio.CancelScope()

        async def run_one() -> None:
            with one:
                await AuditorElector(store, "/ledgers", "one", first).run(lead("one"))

        nursery.start_soon(run_one)
        await trio.sleep(0.1)
        await nursery.start(AuditorElector(store, "/ledgers", "two", second).run, lead("two"))
        await trio.sleep(0.1)
        assert await manager.current_auditor() == "one"
        assert first.auditor_elected
        assert not second.auditor_elected
        one.cancel()  # the auditor leaves: its vote is withdrawn
        await trio.sleep(0.5)
        assert await manager.current_auditor() == "two"
        assert second.auditor_elected
        assert leading == ["one", "two"]
        nursery.cancel_scope.cancel()


async def test_a_change_that_came_while_busy_is_not_lost_to_an_expired_timeout() -> None:
    """Found by the simulation: the auditor came back from a long check with its deadline already passed and
    a bookie's departure notified meanwhile; that notification must still count."""
    store = MemoryMetadataStore()
    with ChangeSignal(store, ["/ledgers/available"]) as signal:
        assert not await signal.wait(0)
        await store.put("/ledgers/available/a:1", b"", None)  # nobody is waiting
        assert await signal.wait(-1.0), "a pending change counts even when the timeout is already over"
        assert not await signal.wait(0), "and is consumed"
        await store.put("/elsewhere", b"", None)
        assert not await signal.wait(0)

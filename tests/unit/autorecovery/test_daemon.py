"""The AutoRecovery daemon on in-process bookies: a lost bookie's ledgers are healed."""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
from fixtures.autorecovery import FAST, eventually, open_cluster, running_service

from magnetar.bookkeeper.autorecovery.bookie_recovery import RecoveryKind, RecoveryState
from magnetar.bookkeeper.autorecovery.fragments import bookies_of
from magnetar.bookkeeper.autorecovery.service import AutoRecoveryService
from magnetar.bookkeeper.bookie.identity import BookieDirectories, BookieIdentityError, check_bookie_identity
from magnetar.bookkeeper.metadata.bookies import BookieServiceInfo, read_cookie


async def test_a_lost_bookies_closed_ledgers_are_healed(autojump_clock: trio.testing.MockClock) -> None:
    async with open_cluster(4) as cluster:
        handles = [await cluster.write(30) for _ in range(3)]
        victim = handles[0].metadata.ensembles[0][1][0]
        async with running_service(cluster) as service:
            await cluster.lose(victim)
            lost = {victim}

            async def healed() -> bool:
                for lh in handles:
                    md = await cluster.bk.get_ledger_metadata(lh.ledger_id)
                    if victim in bookies_of(md):
                        return False
                return not await service.manager.marks()

            await eventually(healed)
            for lh in handles:
                assert await cluster.under_replicated_entries(lh.ledger_id, lost) == []
            assert service.daemon.stats.ledgers_replicated >= 1
            assert service.daemon.stats.auditor_elected


async def test_an_open_ledger_on_a_lost_bookie_is_recovered_after_the_grace_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_cluster(4) as cluster:
        lh = await cluster.write(20, close=False)
        victim = lh.metadata.last_ensemble[1][1]
        async with running_service(cluster) as service:
            await cluster.lose(victim)
            started = trio.current_time()

            async def healed() -> bool:
                md = await cluster.bk.get_ledger_metadata(lh.ledger_id)
                return md.is_closed and victim not in bookies_of(md) and not await service.manager.marks()

            await eventually(healed)
            assert trio.current_time() - started >= FAST.grace_period_s
            md = await cluster.bk.get_ledger_metadata(lh.ledger_id)
            assert md.last_entry_id == 19
            assert await cluster.under_replicated_entries(lh.ledger_id, {victim}) == []
            assert service.daemon.stats.recoveries == 1


async def test_the_mark_of_a_deleted_ledger_is_dropped(autojump_clock: trio.testing.MockClock) -> None:
    """BookKeeper #3316: a ledger deleted (retention) while marked is not replicated forever."""
    async with open_cluster(4) as cluster:
        lh = await cluster.write(5)
        async with running_service(cluster, FAST.model_copy(update={"enabled": False})) as service:
            await service.manager.mark(lh.ledger_id, {"gone:1"})
            await cluster.bk.delete_ledger(lh.ledger_id)
        async with running_service(cluster) as service:
            await eventually(_no_marks(service))


def _no_marks(service: AutoRecoveryService) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return not await service.manager.marks()

    return check


async def test_a_bookie_that_comes_back_ends_its_marks(autojump_clock: trio.testing.MockClock) -> None:
    """BookKeeper #2766: marks of a bookie that returned with its data end without copying anything."""
    async with open_cluster(4) as cluster:
        lh = await cluster.write(10)
        victim = lh.metadata.ensembles[0][1][0]
        settings = FAST.model_copy(update={"lost_bookie_recovery_delay_s": 0})
        async with running_service(cluster, settings) as service:
            await service.manager.set_enabled(False)
            await cluster.lose(victim)
            await service.manager.mark(lh.ledger_id, {victim})  # as an auditor would have
            cluster.bookies.restart(victim)
            await cluster.bookies.register(victim)
            await service.manager.set_enabled(True)
            await eventually(_no_marks(service))
            md = await cluster.bk.get_ledger_metadata(lh.ledger_id)
            assert victim in bookies_of(md), "nothing needed to move"
            assert service.daemon.stats.bytes_replicated == 0


async def test_the_copy_rate_limit_spaces_out_the_copies(autojump_clock: trio.testing.MockClock) -> None:
    """100 entries copied at 50 entries/s take about 2 s of (mock) time; unlimited, almost none."""
    durations = {}
    for limit in (0, 50):
        async with open_cluster(4) as cluster:
            lh = await cluster.write(100)
            victim = lh.metadata.ensembles[0][1][0]
            settings = FAST.model_copy(update={"rereplication_rate_entries_per_s": limit})
            async with running_service(cluster, settings) as service:
                await cluster.lose(victim)
                started = trio.current_time()
                await eventually(_no_marks_after_copy(service))
                durations[limit] = trio.current_time() - started
                assert service.daemon.stats.entries_replicated == 100
    assert durations[50] >= 100 / 50 - 0.2
    assert durations[0] < 1.0


def _no_marks_after_copy(service: AutoRecoveryService) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return service.daemon.stats.entries_replicated > 0 and not await service.manager.marks()

    return check


async def test_re_replication_keeps_write_sets_on_distinct_racks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Racks z1 z1 z2 z2 z3 z3: the lost bookie of a z1/z2/z3 ensemble is replaced by the other z-one."""
    async with open_cluster(6, rack_cache_ms=0) as cluster:
        racks = {b: f"z{i // 2 + 1}" for i, b in enumerate(cluster.bookies.ids)}
        for bookie, rack in racks.items():
            info = BookieServiceInfo(bookie, bookie.split(":")[0], 3181, rack=rack)
            await cluster.metadata.put(f"/ledgers/available/{bookie}", info.to_json(), None)
        lh = await cluster.write(30)
        members = lh.metadata.ensembles[0][1]
        assert {racks[b] for b in members} == {"z1", "z2", "z3"}, "new ensembles span the racks"
        victim = members[0]
        async with running_service(cluster) as service:
            await cluster.lose(victim)
            await eventually(_no_marks_after_copy(service))
        healed = (await cluster.bk.get_ledger_metadata(lh.ledger_id)).ensembles[0][1]
        assert victim not in healed
        assert {racks[b] for b in healed} == {"z1", "z2", "z3"}


async def test_a_decommissioned_dead_bookies_id_can_be_used_again_after_a_format(tmp_path: Path) -> None:
    """Decommission retires the identity (cookie deleted, off the decommissioning list once the bookie is
    gone); a bookie started on emptied directories under that id is then a new bookie, not refused."""
    async with open_cluster(5) as cluster:
        handles = [await cluster.write(20) for _ in range(2)]
        victim = handles[0].metadata.ensembles[0][1][0]
        dirs = BookieDirectories(journal=(str(tmp_path / "journal"),), ledger=(str(tmp_path / "data"),))
        old = await check_bookie_identity(cluster.metadata, victim, dirs)  # its first start
        assert await read_cookie(cluster.metadata, victim) is not None
        async with running_service(cluster, FAST.model_copy(update={"enabled": False})) as service:
            await cluster.lose(victim)
            progress = service.start_job(RecoveryKind.DECOMMISSION, victim)
            await eventually(lambda: progress.state is not RecoveryState.RUNNING)
            assert progress.state is RecoveryState.DONE, progress.errors
            assert progress.cookie_deleted
            assert await read_cookie(cluster.metadata, victim) is None
            assert await service.manager.decommissioning() == []
            for lh in handles:
                assert victim not in bookies_of(await cluster.bk.get_ledger_metadata(lh.ledger_id))
        with pytest.raises(BookieIdentityError, match="decommissioned or formatted"):
            await check_bookie_identity(cluster.metadata, victim, dirs)  # the old volumes: refused
        shutil.rmtree(tmp_path / "journal")  # magnetar bookie --format
        shutil.rmtree(tmp_path / "data")
        new = await check_bookie_identity(cluster.metadata, victim, dirs)
        assert new.bookie_id == old.bookie_id == victim
        assert await read_cookie(cluster.metadata, victim) is not None


async def test_a_new_bookie_under_a_decommissioned_id_leaves_the_decommissioning_list(tmp_path: Path) -> None:
    """A live bookie drained by decommission stays on the list (new ensembles avoid it while it runs); the
    next bookie to create a cookie under that id takes it off."""
    async with open_cluster(4) as cluster:
        victim = cluster.bookies.ids[0]
        async with running_service(cluster, FAST.model_copy(update={"enabled": False})) as service:
            await service.manager.set_decommissioning(victim, True)
            dirs = BookieDirectories(journal=(str(tmp_path / "j"),), ledger=(str(tmp_path / "d"),))
            await check_bookie_identity(cluster.metadata, victim, dirs)
            assert await service.manager.decommissioning() == []

"""The AutoRecovery daemon on in-process bookies: a lost bookie's ledgers are healed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
from fixtures.autorecovery import FAST, eventually, open_cluster, running_service

from magnetar.bookkeeper.autorecovery.fragments import bookies_of
from magnetar.bookkeeper.autorecovery.service import AutoRecoveryService


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

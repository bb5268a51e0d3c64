"""AutoRecovery through metadata-store outages: nothing is declared lost on a view an outage made partial.

The daemon runs on a store of its own (a session of its own, as in a real process), over the same metadata
tree as the bookies and the writer; its outages are simulated with ``disconnect`` / ``reconnect``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from fixtures.autorecovery import FAST, Cluster, eventually, open_cluster, running_service

from magnetar.bookkeeper.autorecovery.fragments import bookies_of
from magnetar.bookkeeper.autorecovery.service import AutoRecoveryService
from magnetar.bookkeeper.autorecovery.settings import AutoRecoverySettings
from magnetar.bookkeeper.client import ClientSettings, open_bookkeeper
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore

GRACE_S = 30
SETTINGS = FAST.model_copy(
    update={"lost_bookie_recovery_delay_s": 0, "lost_bookie_grace_after_outage_s": GRACE_S}
)


@asynccontextmanager
async def daemon_on_own_store(
    cluster: Cluster, tree: str, settings: AutoRecoverySettings = SETTINGS
) -> AsyncIterator[tuple[AutoRecoveryService, MemoryMetadataStore]]:
    store = MemoryMetadataStore(tree)
    client = ClientSettings(ensemble_size=3, write_quorum=3, ack_quorum=2, add_timeout_ms=2000)
    try:
        async with (
            open_bookkeeper(store, cluster.bookies.transport, client) as bk,
            running_service(cluster, settings, bk=bk) as service,
        ):
            await eventually(lambda: service.daemon.stats.auditor_elected and service.daemon.auditor.audits)
            yield service, store
    finally:
        await store.aclose()


async def ensembles(cluster: Cluster, ledger_ids: list[int]) -> dict[int, set[str]]:
    return {i: bookies_of(await cluster.bk.get_ledger_metadata(i)) for i in ledger_ids}


async def test_a_bookie_whose_registration_went_with_its_session_during_an_outage_is_not_lost(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """ZooKeeper away: the daemon is disconnected, and the session of a bookie that is alive expires (its
    ephemeral registration goes). The daemon is back first; the bookie registers again some seconds later.
    With a lost-bookie delay of 0, a daemon that trusted its first view after the outage would mark the
    bookie's ledgers and copy their data away. A bookie that really dies afterwards is still healed."""
    tree = f"outage-{uuid.uuid4()}"
    async with open_cluster(5, tree=tree) as cluster:
        ledger_ids = [(await cluster.write(20)).ledger_id for _ in range(4)]
        before = await ensembles(cluster, ledger_ids)
        sleeper = sorted(before[ledger_ids[0]])[0]
        async with daemon_on_own_store(cluster, tree) as (service, store):
            stats = service.daemon.stats
            store.disconnect()
            await trio.sleep(1)
            await cluster.bookies.unregister(sleeper)  # its session expired on the server
            await trio.sleep(5)
            store.reconnect()
            await trio.sleep(GRACE_S / 3)
            await cluster.bookies.register(sleeper)  # it reconnected and registered again
            await trio.sleep(3 * GRACE_S)
            assert stats.outage_pauses >= 1, "the daemon saw the outage"
            assert not await service.manager.marks()
            assert stats.ledgers_marked == 0
            assert stats.bytes_replicated == 0
            assert await ensembles(cluster, ledger_ids) == before

            # still the auditor, and a bookie that dies for good now is healed (without the grace)
            victim = sorted(before[ledger_ids[0]])[1]
            await cluster.lose(victim)
            started = trio.current_time()

            async def healed() -> bool:
                now = await ensembles(cluster, ledger_ids)
                return all(victim not in b for b in now.values()) and not await service.manager.marks()

            await eventually(healed)
            assert trio.current_time() - started < GRACE_S
            assert stats.auditor_elected
            for ledger_id in ledger_ids:
                assert await cluster.under_replicated_entries(ledger_id, {victim}) == []


async def test_a_bookie_gone_before_the_outage_keeps_its_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Delay 20 s; a bookie dies for good, then the daemon's store is away for 5 s: the bookie is lost 20 s
    after it went (the outage does not restart its clock), and its ledgers healed."""
    tree = f"outage-{uuid.uuid4()}"
    settings = SETTINGS.model_copy(update={"lost_bookie_recovery_delay_s": 20})
    async with open_cluster(5, tree=tree) as cluster:
        ledger_ids = [(await cluster.write(20)).ledger_id for _ in range(2)]
        victim = sorted((await ensembles(cluster, ledger_ids))[ledger_ids[0]])[0]
        async with daemon_on_own_store(cluster, tree, settings) as (service, store):
            await cluster.lose(victim)
            gone = trio.current_time()
            await trio.sleep(2)
            store.disconnect()
            await trio.sleep(5)
            store.reconnect()
            await eventually(lambda: service.daemon.stats.ledgers_marked > 0)
            marked_after = trio.current_time() - gone
            assert 20 <= marked_after < 20 + GRACE_S

            async def healed() -> bool:
                now = await ensembles(cluster, ledger_ids)
                return all(victim not in b for b in now.values()) and not await service.manager.marks()

            await eventually(healed)

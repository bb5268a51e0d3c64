"""What a bookie's HTTP API (and ``magnetar autorecovery``) offers operators: the AutoRecovery daemon when it
runs here, the cluster's AutoRecovery state in the metadata store, and decommission / recover jobs.

:class:`AutoRecoveryService` owns a daemon (started only when ``settings.enabled``) and the jobs started
through it - at most one per bookie and kind; asking again returns the running one. Jobs run in the
service's nursery and their progress stays readable after they end (the last ``JOBS_KEPT_MAX``).
Everything else reads or writes the metadata store directly, so any bookie answers for the whole cluster.
"""

from __future__ import annotations

import logging
import random
from collections import OrderedDict
from dataclasses import dataclass

import trio

from magnetar.bookkeeper.autorecovery.bookie_recovery import RecoveryKind, RecoveryProgress, RecoveryState
from magnetar.bookkeeper.autorecovery.daemon import AutoRecoveryDaemon
from magnetar.bookkeeper.autorecovery.settings import AutoRecoverySettings
from magnetar.bookkeeper.autorecovery.underreplication import Mark
from magnetar.bookkeeper.client import BookieId, BookKeeper
from magnetar.bookkeeper.metadata import COOKIES_PATH, list_bookies
from magnetar.bookkeeper.runtime import Clock

log = logging.getLogger(__name__)

JOBS_KEPT_MAX = 64


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    auditor_id: str | None
    under_replicated: bool
    replication_enabled: bool
    total_bookies: int
    writable_bookies: int
    readonly_bookies: int

    def to_json(self) -> dict[str, object]:
        """BookKeeper's ``ClusterInfo`` fields."""
        return {
            "auditorElected": self.auditor_id is not None,
            "auditorId": self.auditor_id or "",
            "clusterUnderReplicated": self.under_replicated,
            "ledgerReplicationEnabled": self.replication_enabled,
            "totalBookiesCount": self.total_bookies,
            "writableBookiesCount": self.writable_bookies,
            "readonlyBookiesCount": self.readonly_bookies,
            "unavailableBookiesCount": self.total_bookies - self.writable_bookies - self.readonly_bookies,
        }


class AutoRecoveryService:
    def __init__(
        self,
        bk: BookKeeper,
        settings: AutoRecoverySettings,
        *,
        daemon_id: str,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.daemon = AutoRecoveryDaemon(bk, settings, daemon_id=daemon_id, clock=clock, rng=rng)
        self.bk = bk
        self.manager = self.daemon.manager
        self.clock = self.daemon.clock
        self.jobs: OrderedDict[tuple[RecoveryKind, BookieId], RecoveryProgress] = OrderedDict()
        self._nursery: trio.Nursery | None = None

    @property
    def daemon_running(self) -> bool:
        return self.daemon.settings.enabled

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve jobs (and run the daemon when enabled) until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.daemon.settings.enabled:
                await nursery.start(self.daemon.run)
            else:
                await self.manager.initialize_delay_s(self.daemon.settings.lost_bookie_recovery_delay_s)
            task_status.started()
            await trio.sleep_forever()

    # -- jobs --------------------------------------------------------------------------------------------

    def start_job(self, kind: RecoveryKind, bookie: BookieId) -> RecoveryProgress:
        key = (kind, bookie)
        existing = self.jobs.get(key)
        if existing is not None and existing.state is RecoveryState.RUNNING:
            return existing
        assert self._nursery is not None, "the service is not running"
        progress = RecoveryProgress(bookie, kind, self.clock.monotonic())
        self.jobs[key] = progress
        self.jobs.move_to_end(key)
        while len(self.jobs) > JOBS_KEPT_MAX:
            self.jobs.popitem(last=False)
        log.info("starting %s of bookie %s", kind.value, bookie)
        self._nursery.start_soon(self.daemon.recovery().run, progress)
        return progress

    def job(self, kind: RecoveryKind, bookie: BookieId) -> RecoveryProgress | None:
        return self.jobs.get((kind, bookie))

    # -- cluster state -------------------------------------------------------------------------------------

    async def marks(self) -> list[Mark]:
        return await self.manager.marks()

    async def cluster_info(self) -> ClusterInfo:
        store = self.manager.store
        lists = await list_bookies(store)
        known = set(lists.writable) | set(lists.readonly)
        known |= set(await store.get_children(COOKIES_PATH))
        known |= set(await self.manager.decommissioning())
        return ClusterInfo(
            auditor_id=await self.manager.current_auditor(),
            under_replicated=bool([m async for m in self.manager.marked_ledgers()][:1]),
            replication_enabled=await self.manager.is_enabled(),
            total_bookies=len(known),
            writable_bookies=len(lists.writable),
            readonly_bookies=len(lists.readonly),
        )

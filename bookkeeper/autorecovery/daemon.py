"""One AutoRecovery daemon (BookKeeper's ``AutoRecoveryMain``): the replication switch, a vote in the auditor
election (auditing while elected) and a replication worker, over one replication client.

It runs inside every bookie by default (``autorecovery.enabled``) or as its own process (``magnetar
autorecovery``); either way the daemons of a cluster coordinate only through the metadata store, so any
number of them may run. ``await nursery.start(daemon.run)`` returns once the daemon has voted and its worker
runs; cancelling it withdraws the vote and drops the locks it held (ephemeral nodes).

:meth:`AutoRecoveryDaemon.recovery` gives the decommission / recover operation (:mod:`.bookie_recovery`),
sharing the daemon's copier - hence its rate limit.
"""

from __future__ import annotations

import random

import trio

from magnetar.bookkeeper.autorecovery.auditor import Auditor
from magnetar.bookkeeper.autorecovery.bookie_recovery import BookieRecovery
from magnetar.bookkeeper.autorecovery.copier import FragmentCopier
from magnetar.bookkeeper.autorecovery.election import AuditorElector
from magnetar.bookkeeper.autorecovery.ledger_replication import LedgerReplicator
from magnetar.bookkeeper.autorecovery.metrics import AutoRecoveryStats
from magnetar.bookkeeper.autorecovery.pacing import CopyPacer
from magnetar.bookkeeper.autorecovery.settings import AutoRecoverySettings
from magnetar.bookkeeper.autorecovery.signals import ReplicationSwitch
from magnetar.bookkeeper.autorecovery.underreplication import UnderreplicationManager
from magnetar.bookkeeper.autorecovery.worker import ReplicationWorker
from magnetar.bookkeeper.client import BookKeeper
from magnetar.bookkeeper.runtime import Clock, TrioClock


class AutoRecoveryDaemon:
    def __init__(
        self,
        bk: BookKeeper,
        settings: AutoRecoverySettings,
        *,
        daemon_id: str,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        ctx = bk.context
        self.bk = bk
        self.settings = settings
        self.daemon_id = daemon_id
        self.clock = clock or ctx.clock or TrioClock()
        self.stats = AutoRecoveryStats()
        self.manager = UnderreplicationManager(ctx.manager.store, ctx.settings.ledgers_root_path, self.clock)
        self.switch = ReplicationSwitch(self.manager)
        self.pacer = CopyPacer(
            settings.rereplication_rate_bytes_per_s, settings.rereplication_rate_entries_per_s, self.clock
        )
        copier = FragmentCopier(
            ctx,
            self.pacer,
            self.stats,
            batch_size=settings.rereplication_entry_batch_size,
            should_stop=lambda: not self.switch.enabled,
        )
        self.replicator = LedgerReplicator(bk, copier)
        self.auditor = Auditor(bk, self.manager, self.switch, settings, self.stats, self.clock)
        self.elector = AuditorElector(self.manager.store, self.manager.root, daemon_id, self.stats)
        self.worker = ReplicationWorker(
            bk, self.manager, self.switch, self.replicator, settings, self.stats, owner=daemon_id, rng=rng
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.switch.run)
            await nursery.start(self.elector.run, self.auditor.run)
            await nursery.start(self.worker.run)
            task_status.started()

    def recovery(self) -> BookieRecovery:
        return BookieRecovery(
            self.bk,
            self.manager,
            self.replicator,
            self.clock,
            owner=self.daemon_id,
            scan_in_flight_max=self.settings.metadata_walk_in_flight_max,
        )

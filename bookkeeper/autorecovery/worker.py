"""The replication worker of one AutoRecovery daemon (BookKeeper's ``ReplicationWorker``).

Loop: wait while replication is disabled; take a marked ledger by creating its lock (another worker holds
the others); decide which of its bookies are *bad*; heal its closed fragments
(:class:`~.ledger_replication.LedgerReplicator`); then, by outcome:

* healed, or nothing was bad - delete the mark at the version read (an auditor that added a bookie
  meanwhile keeps it), release the lock;
* the ledger was deleted - drop the mark (BookKeeper #3316: never retry a deleted ledger forever);
* only the open last fragment names a bad bookie - keep the lock for
  ``open_ledger_rereplication_grace_period_ms`` (the writer replaces a failed bookie of its own ensemble as
  soon as an add fails), then, if it still names one, recover the ledger (fence and close it) and release
  the lock: its fragments are all closed now and the next pass heals them;
* failed (no bookie to move to, a survivor unreadable, the store down) - keep the lock for
  ``lock_release_of_failed_ledger_grace_period_ms`` so that no worker spins on it, and back off
  ``rereplicate_backoff_ms``.

Bad bookies: those the mark names that are not registered (writable or read-only); they are replaced. (A
bookie of the ledger that is gone but not named by the mark is not lost yet - the auditor's delay, or the
grace after a metadata outage that took its registration with its session - so it is left alone.) A
registered bookie the mark names is probed (:mod:`.probe`): one that came back with its data needs nothing,
so its marks end (BookKeeper #2766); one that lacks entries (an add that never reached it before the others
acknowledged the entry, or a disk that lost data) gets them copied back - BookKeeper would replace it, which
needs a spare bookie that a small cluster may not have. The LAC of an open ledger is never read from a failed
bookie (BookKeeper #2755): an open last fragment is only ever ended by ledger recovery, which needs answers
from a quorum, not from all.

Metadata-store outages (``store.health``): the worker takes no ledger while the store is unhealthy, and a
ledger whose view of the registered bookies was read across the start of an outage is released untouched. A
replication that failed because an outage began during it is not a failure of the ledger: its lock is
released once the store is back, without the failed ledger's grace period.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable

import trio

from magnetar.bookkeeper.autorecovery import injected
from magnetar.bookkeeper.autorecovery.copier import LedgerKeys, ReplicationStopped, call
from magnetar.bookkeeper.autorecovery.fragments import bookies_of
from magnetar.bookkeeper.autorecovery.ledger_replication import LedgerReplicator, Outcome
from magnetar.bookkeeper.autorecovery.metrics import AutoRecoveryStats
from magnetar.bookkeeper.autorecovery.probe import Verdict, probe_bookie
from magnetar.bookkeeper.autorecovery.settings import AutoRecoverySettings
from magnetar.bookkeeper.autorecovery.signals import ChangeSignal, ReplicationSwitch
from magnetar.bookkeeper.autorecovery.underreplication import Mark, UnderreplicationManager
from magnetar.bookkeeper.client import (
    BKError,
    BKReadError,
    BookieId,
    BookKeeper,
    LedgerMetadata,
    NoSuchLedgerError,
    next_request_id,
)
from magnetar.bookkeeper.metadata import MetadataStoreError, list_bookies, ur_ledgers_path, ur_locks_path
from magnetar.bookkeeper.protocol import ENTRY_ID_LAST, BookieStatus, Digester, ReadRequest, ReadResponse

log = logging.getLogger(__name__)


class ReplicationWorker:
    def __init__(
        self,
        bk: BookKeeper,
        manager: UnderreplicationManager,
        switch: ReplicationSwitch,
        replicator: LedgerReplicator,
        settings: AutoRecoverySettings,
        stats: AutoRecoveryStats,
        *,
        owner: str,
        rng: random.Random | None = None,
    ) -> None:
        self._bk = bk
        self._manager = manager
        self._switch = switch
        self._replicator = replicator
        self._settings = settings
        self._stats = stats
        self._owner = owner
        self._rng = rng or random.Random()
        self._held: set[int] = set()
        """Ledgers whose lock this worker keeps while it waits (grace period, failure back-off)."""
        self._pending: list[int] = []
        """Marked ledgers listed but not tried yet: the marks' tree is walked again only once they are
        used up, so a backlog of N marks costs N lock attempts, not N walks of the tree."""
        self._nursery: trio.Nursery | None = None
        self._health = manager.store.health

    async def _pause_for_outage(self) -> None:
        self._stats.outage_pauses += 1
        log.warning("replication worker: paused while the metadata store is %s", self._health.state.value)
        while not await self._health.wait_healthy(self._settings.underreplicated_poll_ms / 1000):
            pass

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        root = self._manager.root
        with ChangeSignal(self._manager.store, [ur_ledgers_path(root), ur_locks_path(root)]) as signal:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                while True:
                    await self._switch.wait_enabled()
                    if not self._health.healthy:
                        await self._pause_for_outage()
                        continue
                    try:
                        ledger_id = await self._take_next()
                    except MetadataStoreError as exc:
                        log.warning("cannot list under-replicated ledgers: %s", exc)
                        await trio.sleep(self._settings.rereplicate_backoff_ms / 1000)
                        continue
                    if ledger_id is None:
                        await signal.wait(self._settings.underreplicated_poll_ms / 1000)
                        continue
                    await self._process(ledger_id)

    async def _take_next(self) -> int | None:
        """Lock a marked ledger (in random order, so that workers spread over the backlog), or None."""
        listed_now = False
        while True:
            while self._pending:
                ledger_id = self._pending.pop()
                if ledger_id not in self._held and await self._manager.try_lock(ledger_id, self._owner):
                    return ledger_id
            if listed_now:
                return None
            self._pending = [ledger_id async for ledger_id in self._manager.marked_ledgers()]
            self._rng.shuffle(self._pending)
            listed_now = True

    # -- one ledger ----------------------------------------------------------------------------------------

    async def _process(self, ledger_id: int) -> None:
        generation = self._health.generation
        try:
            release = await self._replicate(ledger_id, generation)
        except ReplicationStopped:
            log.info("ledger %d: replication disabled while copying; released", ledger_id)
            release = True
        except (BKError, MetadataStoreError) as exc:
            if not self._health.uninterrupted_since(generation):
                log.info("ledger %d: a metadata outage began during its replication: %s", ledger_id, exc)
                if not self._health.healthy:
                    await self._pause_for_outage()
                await self._release(ledger_id)
                return
            log.warning("ledger %d: replication failed, retried later: %s", ledger_id, exc)
            self._stats.replication_failures += 1
            self._hold_after_failure(ledger_id)
            await trio.sleep(self._settings.rereplicate_backoff_ms / 1000)
            return
        if release:
            await self._release(ledger_id)

    async def _replicate(self, ledger_id: int, generation: int) -> bool:
        """Work on a locked ledger; True when its lock is to be released now."""
        mark = await self._manager.get_mark(ledger_id)
        if mark is None:
            return True
        try:
            metadata = await self._bk.get_ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            await self._drop_deleted(ledger_id)
            return True
        bad, lacking, undecided = await self._bad_bookies(ledger_id, metadata, mark)
        if not self._health.uninterrupted_since(generation):
            log.info("ledger %d: released untouched: a metadata outage began while it was read", ledger_id)
            return True
        report = await self._replicator.replicate(ledger_id, bad, refill=lacking, placement_check=True)
        outcome = report.outcome
        if outcome is Outcome.DELETED:
            await self._drop_deleted(ledger_id)
            return True
        if outcome is Outcome.OPEN_FRAGMENT:
            self._hold(ledger_id, self._grace_then_recover, ledger_id, bad)
            return False
        if outcome is Outcome.FAILED or undecided:
            reason = report.detail or f"no verdict on {sorted(undecided)}"
            raise BKReadError(f"ledger {ledger_id} not healed: {reason}")
        if outcome is Outcome.NOTHING_TO_DO and injected.INJECTED_BUGS.keep_marks_of_returned_bookies:
            return True
        if outcome is Outcome.HEALED:
            self._stats.ledgers_replicated += 1
            log.info("ledger %d healed: %d entries, %d bytes copied", ledger_id, report.entries, report.bytes)
        await self._manager.mark_replicated(mark)
        return True

    async def _bad_bookies(
        self, ledger_id: int, metadata: LedgerMetadata, mark: Mark
    ) -> tuple[set[BookieId], set[BookieId], set[BookieId]]:
        """(bad bookies: gone; live suspects that lack entries: to refill; suspects without a verdict)."""
        lists = await list_bookies(self._manager.store)
        registered = set(lists.writable) | set(lists.readonly)
        bookies = bookies_of(metadata)
        bad = {b for b in mark.missing & bookies if b not in registered}
        lacking: set[BookieId] = set()
        undecided: set[BookieId] = set()
        ctx = self._bk.context
        keys = LedgerKeys.of(ledger_id, metadata, Digester(ctx.settings.digest_type))
        percentage = max(1, self._settings.auditor_ledger_verification_percentage)
        for suspect in sorted(mark.missing & bookies & registered):
            verdict = await probe_bookie(ctx, keys, metadata, suspect, percentage)
            if verdict is Verdict.MISSING:
                lacking.add(suspect)
            elif verdict is Verdict.UNKNOWN:
                undecided.add(suspect)
        return bad, lacking, undecided

    async def _drop_deleted(self, ledger_id: int) -> None:
        if injected.INJECTED_BUGS.keep_marks_of_deleted_ledgers:
            return
        log.info("ledger %d was deleted: dropping its under-replication mark", ledger_id)
        await self._manager.delete_mark(ledger_id)

    # -- held locks ----------------------------------------------------------------------------------------

    def _hold(self, ledger_id: int, work: Callable[..., Awaitable[None]], *args: object) -> None:
        assert self._nursery is not None
        self._held.add(ledger_id)
        self._nursery.start_soon(work, *args)

    def _hold_after_failure(self, ledger_id: int) -> None:
        self._hold(ledger_id, self._release_later, ledger_id)

    async def _release_later(self, ledger_id: int) -> None:
        await trio.sleep(self._settings.lock_release_of_failed_ledger_grace_period_ms / 1000)
        await self._release(ledger_id)

    async def _release(self, ledger_id: int) -> None:
        self._held.discard(ledger_id)
        try:
            await self._manager.release(ledger_id)
        except MetadataStoreError as exc:  # the lock is ephemeral: the session's end releases it
            log.warning("ledger %d: could not release its lock: %s", ledger_id, exc)

    async def _grace_then_recover(self, ledger_id: int, bad: set[BookieId]) -> None:
        """After the grace period, recover the ledger if its open last fragment still names a bad bookie."""
        try:
            await trio.sleep(self._settings.grace_period_s)
            metadata = await self._bk.get_ledger_metadata(ledger_id)
            still = set(metadata.last_ensemble[1]) & bad
            if not metadata.is_closed and still:
                if injected.INJECTED_BUGS.read_lac_from_failed_bookie:
                    await self._read_lac_from_every_bookie(ledger_id, metadata)
                log.info("ledger %d: open with %s after the grace period: recovering it", ledger_id, still)
                await self._bk.open_ledger(ledger_id, metadata.password or b"", recovery=True)
                self._stats.recoveries += 1
        except NoSuchLedgerError:
            await self._drop_deleted(ledger_id)
        except (BKError, MetadataStoreError) as exc:
            log.warning("ledger %d: recovery for re-replication failed: %s", ledger_id, exc)
            self._stats.replication_failures += 1
        finally:
            with trio.CancelScope(shield=True):
                await self._release(ledger_id)

    async def _read_lac_from_every_bookie(self, ledger_id: int, metadata: LedgerMetadata) -> None:
        """The injected #2755 defect: insist on an answer from every bookie of the last ensemble."""
        ctx = self._bk.context
        for bookie in metadata.last_ensemble[1]:
            request = ReadRequest(next_request_id(), ledger_id, ENTRY_ID_LAST)
            answer = await call(ctx, bookie, request, ctx.rpc.reads)
            ok = (BookieStatus.EOK, BookieStatus.ENOENTRY, BookieStatus.ENOLEDGER)
            if not (isinstance(answer, ReadResponse) and answer.status in ok):
                raise BKReadError(f"ledger {ledger_id}: no LAC from {bookie}")

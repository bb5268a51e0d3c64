"""The auditor (BookKeeper's ``Auditor`` with its bookie, all-ledgers and placement-policy check tasks).

It runs in the elected daemon only (:mod:`.election`) and follows three things through store notifications:
the registered bookies (``/ledgers/available`` and its ``readonly`` child), the live
``lostBookieRecoveryDelay`` and the replication switch.

* **Bookie audit.** A bookie that disappears is *missing* from then on; once it has been missing for the
  recovery delay it is *lost* (:func:`~.audit.lost_bookies`): every ledger whose ensembles name it is
  marked under-replicated with it (:func:`~.audit.under_replicated`). The audit runs when a bookie leaves or
  returns, when a missing bookie's delay expires, every ``auditor_periodic_bookie_check_interval_s``, and at
  once on ``trigger_audit`` (a rewrite of the delay node with the same value - then every missing bookie
  counts as lost, as BookKeeper's ``triggerAudit``). A changed delay applies to the bookies already missing.
  A bookie that comes back is removed from every mark (BookKeeper #2766): if its data is intact nothing
  needs copying.
* **Periodic check** (``auditor_periodic_check_interval_s``): the same marking over all ledgers, plus the
  read check - with ``auditor_ledger_verification_percentage`` > 0 a sample of every closed fragment's
  entries is read from each live replica, and a replica that answers "no such entry" is marked missing.
* **Placement check** (``auditor_periodic_placement_policy_check_interval_s``): closed fragments whose
  write sets span fewer racks than the policy asks while more racks are available are marked with the member
  to move; the worker moves it if that improves the spread.

While replication is disabled the auditor marks nothing; it audits as soon as it is enabled again.

**Metadata-store outages** (``store.health``). The auditor acts on *absence* - a registration not found, a
bookie no ledger should name - and a view read across an outage can be partial, so:

* it audits nothing while the store is unhealthy;
* every pass notes the store's outage generation its view of the registered bookies belongs to and is
  discarded, marking nothing more, as soon as an outage began since (``uninterrupted_since``);
* after an outage, a bookie found missing counts as missing only from ``lost_bookie_grace_after_outage_s``
  after the store came back: a ZooKeeper session that expired during the outage took the bookie's ephemeral
  registration with it, and the bookie writes it again only once it has reconnected itself - with the
  default delay of 0 it would otherwise be declared lost and its data copied away. A bookie already missing
  before the outage keeps its clock. An auditor elected after an outage of its own store (its vote may have
  gone with its session) starts with the grace too.
"""

from __future__ import annotations

import logging
import math

import trio

from magnetar.bookkeeper.autorecovery import injected
from magnetar.bookkeeper.autorecovery.audit import (
    bookie_ledger_index,
    lost_bookies,
    placement_repairs,
    under_replicated,
)
from magnetar.bookkeeper.autorecovery.copier import LedgerKeys
from magnetar.bookkeeper.autorecovery.fragments import bookies_of
from magnetar.bookkeeper.autorecovery.metrics import AutoRecoveryStats
from magnetar.bookkeeper.autorecovery.probe import Verdict, probe_bookie
from magnetar.bookkeeper.autorecovery.scan import scan_ledgers
from magnetar.bookkeeper.autorecovery.settings import AutoRecoverySettings
from magnetar.bookkeeper.autorecovery.signals import ChangeSignal, ReplicationSwitch
from magnetar.bookkeeper.autorecovery.underreplication import UnderreplicationManager
from magnetar.bookkeeper.client import BKError, BookieId, BookKeeper, LedgerMetadata
from magnetar.bookkeeper.metadata import (
    AVAILABLE_PATH,
    MetadataStoreError,
    StoreUnavailableError,
    list_bookies,
    lost_bookie_recovery_delay_path,
)
from magnetar.bookkeeper.protocol import Digester
from magnetar.bookkeeper.runtime import Clock

log = logging.getLogger(__name__)

RETRY_S = 2.0


def _every(interval_s: int, now: float) -> float:
    return now + interval_s if interval_s > 0 else math.inf


class Auditor:
    def __init__(
        self,
        bk: BookKeeper,
        manager: UnderreplicationManager,
        switch: ReplicationSwitch,
        settings: AutoRecoverySettings,
        stats: AutoRecoveryStats,
        clock: Clock,
    ) -> None:
        self._bk = bk
        self._manager = manager
        self._store = manager.store
        self._switch = switch
        self._settings = settings
        self._stats = stats
        self._clock = clock
        self.registered: set[BookieId] = set()
        self.missing_since: dict[BookieId, float] = {}
        self.delay_s = settings.lost_bookie_recovery_delay_s
        self._delay_version = -1
        self._next_expiry = math.inf
        self._health = self._store.health
        self._generation = self._health.generation
        """The outage generation of the view in ``registered``; the store's moving past it means an outage
        began since."""
        self._grace_until = -math.inf
        """Bookies found missing count as missing from no earlier than this (after an outage)."""
        self.audits = 0
        """Bookie audits completed (for tests)."""

    async def run(self) -> None:
        """Audit until cancelled (the election cancels it when this daemon stops being the auditor)."""
        paths = [AVAILABLE_PATH, lost_bookie_recovery_delay_path(self._manager.root)]
        with ChangeSignal(self._store, paths) as signal:
            while True:
                try:
                    await self._audit_loop(signal)
                except (MetadataStoreError, BKError) as exc:
                    log.warning("auditor: %s; auditing again in %.0f s", exc, RETRY_S)
                    await trio.sleep(RETRY_S)

    async def _audit_loop(self, signal: ChangeSignal) -> None:
        s = self._settings
        await self._through_outage()
        self.delay_s = await self._manager.initialize_delay_s(s.lost_bookie_recovery_delay_s)
        await self._read_delay()
        registered = await self._registered()
        if not self._health.uninterrupted_since(self._generation):
            raise StoreUnavailableError("an outage of the metadata store began while the bookies were read")
        self.registered = registered
        now = self._clock.monotonic()
        next_bookie_check = now  # audit at once when elected
        next_full = _every(s.auditor_periodic_check_interval_s, now)
        next_placement = _every(s.auditor_periodic_placement_policy_check_interval_s, now)
        trigger = False
        while True:
            if not self._switch.enabled:
                await self._switch.wait_enabled()
                next_bookie_check = self._clock.monotonic()
            if await self._through_outage():
                next_bookie_check = self._clock.monotonic()
            now = self._clock.monotonic()
            if now >= min(next_bookie_check, self._next_expiry) or trigger:
                await self.audit_bookies(trigger=trigger)
                trigger = False
                next_bookie_check = _every(
                    s.auditor_periodic_bookie_check_interval_s, self._clock.monotonic()
                )
            if now >= next_full:
                await self.check_all_ledgers()
                next_full = _every(s.auditor_periodic_check_interval_s, self._clock.monotonic())
            if now >= next_placement:
                await self.check_placement()
                next_placement = _every(
                    s.auditor_periodic_placement_policy_check_interval_s, self._clock.monotonic()
                )
            deadline = min(next_bookie_check, self._next_expiry, next_full, next_placement)
            if await signal.wait(deadline - self._clock.monotonic()):
                changed, trigger = await self._refresh()
                if changed:
                    next_bookie_check = self._clock.monotonic()

    # -- metadata-store outages ---------------------------------------------------------------------------

    async def _through_outage(self) -> bool:
        """Wait while the store is unhealthy; True when an outage began since the last view (the bookies are
        then read again, and those found missing get the grace period)."""
        health = self._health
        if health.uninterrupted_since(self._generation):
            return False
        if not health.healthy:
            self._stats.outage_pauses += 1
            log.warning("auditor: paused while the metadata store is %s", health.state.value)
            while not await health.wait_healthy(RETRY_S):
                pass
        self._grace_until = self._clock.monotonic() + self._settings.lost_bookie_grace_after_outage_s
        self._generation = health.generation
        log.info(
            "auditor: the metadata store is back; bookies missing now count as missing from %d s on",
            self._settings.lost_bookie_grace_after_outage_s,
        )
        await self._refresh()
        return True

    def _uninterrupted(self, what: str) -> bool:
        """Whether the view of the current generation still holds; counts and logs a discarded pass."""
        if self._health.uninterrupted_since(self._generation):
            return True
        self._stats.audit_passes_discarded += 1
        log.warning("auditor: %s discarded: an outage of the metadata store began during it", what)
        return False

    def _missing_from(self, now: float) -> float:
        return max(now, self._grace_until)

    # -- following the bookies and the delay --------------------------------------------------------------

    async def _registered(self) -> set[BookieId]:
        lists = await list_bookies(self._store)
        return set(lists.writable) | set(lists.readonly)

    async def _read_delay(self) -> tuple[bool, bool]:
        """Re-read the delay node: (its value changed, it was rewritten with the same value = trigger)."""
        got = await self._store.get(lost_bookie_recovery_delay_path(self._manager.root))
        if got is None:
            return False, False
        rewritten = got.stat.version != self._delay_version and self._delay_version >= 0
        self._delay_version = got.stat.version
        new = await self._manager.get_delay_s(self.delay_s)
        if new != self.delay_s:
            log.info("auditor: lost bookie recovery delay is now %d s", new)
            self.delay_s = new
            return True, False
        return False, rewritten

    async def _refresh(self) -> tuple[bool, bool]:
        """(bookies changed, audit triggered)."""
        delay_changed, trigger = await self._read_delay()
        registered = await self._registered()
        if not self._uninterrupted("reading the bookies"):
            return False, False
        now = self._clock.monotonic()
        left = self.registered - registered
        returned = registered - self.registered
        self.registered = registered
        for bookie in left:
            self.missing_since.setdefault(bookie, self._missing_from(now))
            log.info("auditor: bookie %s is gone (lost after %d s)", bookie, self.delay_s)
        back = {b for b in returned if b in self.missing_since}
        for bookie in returned:
            self.missing_since.pop(bookie, None)
        if back and not injected.INJECTED_BUGS.keep_marks_of_returned_bookies:
            dropped = await self._manager.forget_bookies(back)
            log.info("auditor: %s came back; %d marks ended", sorted(back), dropped)
        return bool(left or returned or delay_changed), trigger

    # -- the audits ----------------------------------------------------------------------------------------

    async def scan(self) -> dict[int, LedgerMetadata]:
        return await scan_ledgers(self._bk, self._settings.metadata_walk_in_flight_max)

    def _lost(self, ledgers: dict[int, LedgerMetadata], *, trigger: bool) -> set[BookieId]:
        now = self._clock.monotonic()
        known = set(bookie_ledger_index(ledgers))
        for bookie in known - self.registered:
            self.missing_since.setdefault(bookie, self._missing_from(now))
        delay = 0.0 if trigger else float(self.delay_s)
        lost = lost_bookies(known, self.registered, self.missing_since, now, delay)
        pending = [self.missing_since[b] + delay for b in known - self.registered - lost]
        self._next_expiry = min(pending, default=math.inf)
        self._stats.lost_bookies = len(lost)
        return lost

    async def audit_bookies(self, *, trigger: bool = False) -> set[BookieId]:
        """Mark the ledgers of the lost bookies; returns the lost bookies."""
        ledgers = await self.scan()
        if not self._uninterrupted("bookie audit"):
            return set()
        lost = self._lost(ledgers, trigger=trigger)
        if lost and self._switch.enabled:
            log.info("auditor: lost bookies %s: marking their ledgers", sorted(lost))
            await self._mark(ledgers, lost)
        self.audits += 1
        await self._count_marks()
        return lost

    async def _mark(self, ledgers: dict[int, LedgerMetadata], lost: set[BookieId]) -> None:
        alive = set(bookie_ledger_index(ledgers)) - lost
        for ledger_id, missing in sorted(under_replicated(ledgers, alive).items()):
            if not self._uninterrupted("marking"):
                return
            if await self._manager.mark(ledger_id, missing):
                self._stats.ledgers_marked += 1

    async def _count_marks(self) -> None:
        self._stats.under_replicated_ledgers = len([m async for m in self._manager.marked_ledgers()])

    async def check_all_ledgers(self) -> None:
        """The periodic check: lost bookies' ledgers, then the read check of the live replicas."""
        if not self._switch.enabled:
            return
        ledgers = await self.scan()
        if not self._uninterrupted("periodic check"):
            return
        lost = self._lost(ledgers, trigger=False)
        if lost:
            await self._mark(ledgers, lost)
        percentage = self._settings.auditor_ledger_verification_percentage
        if percentage > 0:
            await self._read_check(ledgers, percentage)
        await self._count_marks()

    async def _read_check(self, ledgers: dict[int, LedgerMetadata], percentage: int) -> None:
        ctx = self._bk.context
        default = Digester(ctx.settings.digest_type)
        for ledger_id, metadata in sorted(ledgers.items()):
            keys = LedgerKeys.of(ledger_id, metadata, default)
            for bookie in sorted(bookies_of(metadata) & self.registered):
                if not self._uninterrupted("read check"):
                    return
                if await probe_bookie(ctx, keys, metadata, bookie, percentage) is Verdict.MISSING:
                    log.warning("auditor: %s lacks entries of ledger %d: marking it", bookie, ledger_id)
                    if await self._manager.mark(ledger_id, {bookie}):
                        self._stats.ledgers_marked += 1

    async def check_placement(self) -> None:
        if not self._switch.enabled:
            return
        placement = self._bk.context.placement
        writable = await placement.candidates()
        racks_available = len(set(writable.values()))
        if racks_available <= 1:
            return
        min_racks = placement.policy.min_num_racks_per_write_quorum
        for ledger_id, metadata in sorted((await self.scan()).items()):
            members = sorted(bookies_of(metadata) & self.registered)
            racks = await placement.racks_of(members)
            moves = placement_repairs(metadata, racks, min_racks, racks_available)
            if not self._uninterrupted("placement check"):
                return
            if moves and await self._manager.mark(ledger_id, {b for _, b in moves.values()}):
                self._stats.ledgers_marked += 1

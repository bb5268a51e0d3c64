"""Healing one ledger: move every closed fragment off the bad bookies (BookKeeper's
``ReplicationWorker.rereplicate`` + ``BookKeeperAdmin.replicateLedgerFragment``).

For each closed fragment that names a bad bookie, the placement policy picks a new bookie for each bad index
(rack-aware, never one already in that ensemble, never a bad one), the copier writes the entries those
indices store to the new bookies, and only then a compare-and-set on the ledger's metadata swaps the bookies
in that one ensemble (``replaceEnsembleEntry``):

* predicate: the ensemble still names the bad bookie at that index (else someone else fixed it: nothing to
  do); transform: replace it there, nothing else. The loop re-reads on a version conflict and re-applies the
  swap to whatever the writer, a recovery or another worker wrote meanwhile - a writer's new ensemble, a
  recovery's close - so neither side's change is lost.
* A closed fragment never changes otherwise (the writer only ever touches the last ensemble of an open
  ledger; a close only adds an ensemble at the recovery point), so the copied entries are exactly what the
  swapped ensemble must hold.
* A ledger deleted meanwhile (retention) ends the work with ``DELETED``: its mark is to be dropped, not
  retried forever (BookKeeper #3316).

The open last fragment is left alone (``OPEN_FRAGMENT``): the writer replaces failed bookies of its own
ensemble; the worker waits a grace period and then recovers (fences and closes) the ledger first.

With ``placement_check`` a closed fragment whose write sets span fewer racks than the policy asks, while
more racks are available, moves one member (the one whose rack repeats most) if that improves it.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from magnetar.bookkeeper.autorecovery.audit import placement_repairs
from magnetar.bookkeeper.autorecovery.copier import FragmentCopier, LedgerKeys
from magnetar.bookkeeper.autorecovery.fragments import Repair, bookies_of, fragments_of, repairs_for
from magnetar.bookkeeper.client import (
    DEFAULT_RACK,
    BookieId,
    BookKeeper,
    LedgerMetadata,
    MetadataUpdateLoop,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    Versioned,
    write_set_racks,
)
from magnetar.bookkeeper.protocol import Digester

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    HEALED = "healed"
    """Bad bookies were replaced; no fragment names one any more."""
    NOTHING_TO_DO = "nothing-to-do"
    """No fragment named a bad bookie."""
    OPEN_FRAGMENT = "open-fragment"
    """Only the open last fragment still names a bad bookie."""
    DELETED = "deleted"
    """The ledger no longer exists."""
    FAILED = "failed"
    """Some closed fragment could not be healed (see ``detail``)."""


@dataclass(slots=True)
class LedgerReport:
    ledger_id: int
    outcome: Outcome
    entries: int = 0
    bytes: int = 0
    fragments: int = 0
    detail: str = ""
    metadata: LedgerMetadata | None = field(default=None, repr=False)


def repairs_bad(repairs: list[Repair]) -> set[BookieId]:
    return {b for r in repairs for b in r.bad.values()}


class LedgerReplicator:
    def __init__(self, bk: BookKeeper, copier: FragmentCopier) -> None:
        self._bk = bk
        self._ctx = bk.context
        self._copier = copier

    async def replicate(
        self,
        ledger_id: int,
        bad: set[BookieId],
        *,
        refill: Collection[BookieId] = (),
        placement_check: bool = False,
    ) -> LedgerReport:
        """Heal ``ledger_id``: move its closed fragments off ``bad``; copy back onto the live ``refill``
        bookies the entries they lack; with ``placement_check``, spread badly placed fragments."""
        ctx = self._ctx
        try:
            versioned = await ctx.manager.read(ledger_id)
        except NoSuchLedgerError:
            return LedgerReport(ledger_id, Outcome.DELETED)
        report = LedgerReport(ledger_id, Outcome.NOTHING_TO_DO, metadata=versioned.metadata)
        available = {b: r for b, r in (await ctx.placement.candidates()).items() if b not in bad}
        members = await ctx.placement.racks_of(sorted(bookies_of(versioned.metadata)))
        repairs = repairs_for(versioned.metadata, bad)
        if placement_check:
            repairs += self._placement_repairs(versioned.metadata, repairs, members, available)
        refills = repairs_for(versioned.metadata, set(refill) - bad)
        if not repairs and not refills:
            return report
        keys = LedgerKeys.of(ledger_id, versioned.metadata, Digester(ctx.settings.digest_type))
        for repair in refills:
            if repair.fragment.is_closed:
                copied = await self._copier.copy(
                    keys, versioned.metadata, repair.fragment, repair.bad, bad, only_missing=True
                )
                report.entries += copied.entries
                report.bytes += copied.bytes
                report.fragments += 1
        for repair in repairs:
            if not repair.fragment.is_closed:
                continue
            try:
                versioned = await self._heal(keys, versioned, repair, bad, available, members, report)
            except NoSuchLedgerError:
                report.outcome = Outcome.DELETED
                return report
            except NotEnoughBookiesError as exc:
                report.detail = str(exc)
        report.metadata = versioned.metadata
        remaining = repairs_for(versioned.metadata, bad)
        if not remaining:
            report.outcome = Outcome.HEALED if report.fragments else Outcome.NOTHING_TO_DO
        elif all(not r.fragment.is_closed for r in remaining):
            report.outcome = Outcome.OPEN_FRAGMENT
        else:
            report.outcome = Outcome.FAILED
            report.detail = report.detail or f"{len(remaining)} fragments still name {sorted(bad)}"
        return report

    def _placement_repairs(
        self,
        metadata: LedgerMetadata,
        repairs: list[Repair],
        members: Mapping[BookieId, str],
        available: Mapping[BookieId, str],
    ) -> list[Repair]:
        policy = self._ctx.placement.policy
        live = {b: r for b, r in members.items() if b not in repairs_bad(repairs)}
        racks_available = len(set(available.values()))
        moves = placement_repairs(metadata, live, policy.min_num_racks_per_write_quorum, racks_available)
        taken = {r.fragment.position for r in repairs}
        fragments = fragments_of(metadata)
        return [Repair(fragments[p], {i: b}) for p, (i, b) in moves.items() if p not in taken]

    async def _heal(
        self,
        keys: LedgerKeys,
        versioned: Versioned,
        repair: Repair,
        bad: set[BookieId],
        available: Mapping[BookieId, str],
        members: Mapping[BookieId, str],
        report: LedgerReport,
    ) -> Versioned:
        fragment = repair.fragment
        md = versioned.metadata
        new = self._ctx.placement.replace(
            fragment.ensemble, repair.bad, available, exclude=bad, write_quorum=md.write_quorum,
            member_racks=members,
        )  # fmt: skip
        targets = {i: new[i] for i in repair.bad if new[i] != fragment.ensemble[i]}
        if not self._improves(fragment.ensemble, new, repair, bad, {**members, **available}, md.write_quorum):
            return versioned
        if fragment.entry_count() > 0:
            copied = await self._copier.copy(keys, md, fragment, targets, bad)
            report.entries += copied.entries
            report.bytes += copied.bytes
        versioned = await self._swap(keys.ledger_id, versioned, fragment.first_entry_id, repair.bad, targets)
        report.fragments += 1
        log.info(
            "ledger %d: fragment from entry %d moved from %s to %s",
            keys.ledger_id, fragment.first_entry_id, sorted(repair.bad.values()), sorted(targets.values()),
        )  # fmt: skip
        return versioned

    @staticmethod
    def _improves(
        old: tuple[BookieId, ...],
        new: list[BookieId],
        repair: Repair,
        bad: set[BookieId],
        racks: Mapping[BookieId, str],
        write_quorum: int,
    ) -> bool:
        """A bad bookie replaced is always progress; a placement move only when it spans more racks."""
        if any(b in bad for b in repair.bad.values()):
            return new != list(old)
        before = min(write_set_racks([racks.get(b, DEFAULT_RACK) for b in old], write_quorum))
        after = min(write_set_racks([racks.get(b, DEFAULT_RACK) for b in new], write_quorum))
        return after > before

    async def _swap(
        self,
        ledger_id: int,
        versioned: Versioned,
        first_entry_id: int,
        old: Mapping[int, BookieId],
        targets: Mapping[int, BookieId],
    ) -> Versioned:
        def swaps(md: LedgerMetadata) -> dict[int, BookieId]:
            members = dict(md.ensembles).get(first_entry_id)
            if members is None:
                return {}
            return {
                i: target for i, target in targets.items() if members[i] == old[i] and target not in members
            }

        loop = MetadataUpdateLoop(
            self._ctx.manager,
            ledger_id,
            versioned,
            lambda md: bool(swaps(md)),
            lambda md: md.with_bookies_replaced(first_entry_id, swaps(md)),
            retries_max=self._ctx.settings.metadata_retries_max,
        )
        return await loop.run()

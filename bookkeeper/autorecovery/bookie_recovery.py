"""Moving everything off one bookie on request: ``decommission`` and ``recover`` (BookKeeper's
``BookKeeperAdmin.decommissionBookie`` / ``recoverBookieData``).

Both run in the process that received the request (the bookie REST API) and copy the data themselves -
through the same fragment copier, placement and compare-and-set as the workers, under the same per-ledger
locks, so they never race a worker on one ledger:

* **recover** - one pass over the ledgers whose ensembles name the bookie: each closed fragment is copied to
  a new bookie and swapped in; a ledger still open on it is recovered (fenced and closed) first, as
  ``recoverBookieData`` does (waiting would leave the data on one fewer replica). Ledgers that could not be
  healed in the pass are reported.
* **decommission** - the bookie may be alive or dead. It is first listed under
  ``/ledgers/underreplication/decommissioning``, so that no new ensemble and no ensemble change picks it;
  then passes like *recover* repeat until no ledger names it any more, after which the bookie can be removed.
  (BookKeeper insists that the bookie be down and waits for AutoRecovery; here a running bookie is drained
  while it still serves reads.) Its identity is then retired, as BookKeeper's decommission does: its cookie
  (``/ledgers/cookies/<bookieId>``) is deleted, so that the id can be used again by a bookie started on
  emptied directories (``magnetar bookie --format``), and the old data, should it come back, is refused at
  start-up. A bookie that is no longer registered also leaves the decommissioning list; one still running
  stays on it (new ensembles keep avoiding it) until a new bookie with that id creates its cookie.

:class:`RecoveryProgress` is what the REST API reports and ``magnetar admin bookies decommission`` prints
every interval: ledgers done of those found, bytes and entries copied, the copy rate, and an ETA from the
bytes still to copy (estimated from the closed ledgers' lengths and the share of their entries the bookie
stores).
"""

from __future__ import annotations

import contextlib
import enum
import logging
from dataclasses import dataclass, field
from typing import Any

import trio

from magnetar.bookkeeper.autorecovery.fragments import count_on_index, fragments_of
from magnetar.bookkeeper.autorecovery.ledger_replication import LedgerReplicator, Outcome
from magnetar.bookkeeper.autorecovery.scan import scan_ledgers
from magnetar.bookkeeper.autorecovery.underreplication import UnderreplicationManager
from magnetar.bookkeeper.client import BKError, BookieId, BookKeeper, LedgerMetadata, NoSuchLedgerError
from magnetar.bookkeeper.metadata import (
    MetadataStoreError,
    NotFoundError,
    cookie_path,
    list_bookies,
    read_cookie,
)
from magnetar.bookkeeper.runtime import Clock

log = logging.getLogger(__name__)

PASS_BACKOFF_S = 2.0
"""Pause between two decommission passes that left ledgers (locked by a worker, or not healable yet)."""


class RecoveryKind(enum.Enum):
    DECOMMISSION = "decommission"
    RECOVER = "recover"


class RecoveryState(enum.Enum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


def bytes_on_bookie(metadata: LedgerMetadata, bookie: BookieId) -> int:
    """An estimate of the entry bytes ``bookie`` stores for a closed ledger (0 when not closed)."""
    if not metadata.is_closed or metadata.last_entry_id < 0:
        return 0
    entries = 0
    for fragment in fragments_of(metadata):
        if bookie in fragment.ensemble and fragment.last_entry_id is not None:
            index = fragment.ensemble.index(bookie)
            entries += count_on_index(
                fragment.first_entry_id, fragment.last_entry_id, index, metadata.ensemble_size,
                metadata.write_quorum,
            )  # fmt: skip
    return metadata.length * entries // (metadata.last_entry_id + 1)


@dataclass
class RecoveryProgress:
    bookie: BookieId
    kind: RecoveryKind
    started_s: float
    state: RecoveryState = RecoveryState.RUNNING
    ledgers_total: int = 0
    ledgers_done: int = 0
    bytes_copied: int = 0
    entries_copied: int = 0
    bytes_estimated: int = 0
    passes: int = 0
    ended_s: float | None = None
    cookie_deleted: bool = False
    """Decommission: the bookie's cookie was deleted from the metadata store (its identity retired)."""
    errors: list[str] = field(default_factory=list)

    def rate_bytes_per_s(self, now: float) -> float:
        elapsed = (self.ended_s or now) - self.started_s
        return self.bytes_copied / elapsed if elapsed > 0 else 0.0

    def eta_s(self, now: float) -> float | None:
        if self.state is not RecoveryState.RUNNING:
            return 0.0
        rate = self.rate_bytes_per_s(now)
        if rate <= 0:
            return None
        return max(0.0, self.bytes_estimated - self.bytes_copied) / rate

    def to_json(self, now: float) -> dict[str, Any]:
        eta = self.eta_s(now)
        return {
            "bookie": self.bookie,
            "operation": self.kind.value,
            "state": self.state.value,
            "ledgersTotal": self.ledgers_total,
            "ledgersDone": self.ledgers_done,
            "bytesCopied": self.bytes_copied,
            "entriesCopied": self.entries_copied,
            "bytesEstimated": max(self.bytes_estimated, self.bytes_copied),
            "rateBytesPerSecond": round(self.rate_bytes_per_s(now), 1),
            "etaSeconds": None if eta is None else round(eta, 1),
            "elapsedSeconds": round((self.ended_s or now) - self.started_s, 1),
            "passes": self.passes,
            "cookieDeleted": self.cookie_deleted,
            "errors": self.errors[-5:],
        }


class BookieRecovery:
    def __init__(
        self,
        bk: BookKeeper,
        manager: UnderreplicationManager,
        replicator: LedgerReplicator,
        clock: Clock,
        *,
        owner: str,
        scan_in_flight_max: int = 32,
    ) -> None:
        self._bk = bk
        self._manager = manager
        self._replicator = replicator
        self._scan_in_flight_max = scan_in_flight_max
        self._clock = clock
        self._owner = owner

    async def run(self, progress: RecoveryProgress) -> None:
        """Drive ``progress`` to DONE (or FAILED for a recover pass that left ledgers)."""
        bookie = progress.bookie
        try:
            if progress.kind is RecoveryKind.DECOMMISSION:
                await self._manager.set_decommissioning(bookie, True)
            while True:
                left = await self._pass(progress)
                if not left:
                    if progress.kind is RecoveryKind.DECOMMISSION:
                        await self._retire(progress)
                    progress.state = RecoveryState.DONE
                    break
                if progress.kind is RecoveryKind.RECOVER:
                    progress.state = RecoveryState.FAILED
                    progress.errors.append(f"ledgers still on {bookie}: {sorted(left)[:20]}")
                    break
                await trio.sleep(PASS_BACKOFF_S)
        except (BKError, MetadataStoreError) as exc:
            progress.state = RecoveryState.FAILED
            progress.errors.append(str(exc))
        finally:
            progress.ended_s = self._clock.monotonic()
            log.info("%s of %s: %s", progress.kind.value, bookie, progress.to_json(progress.ended_s))

    async def _retire(self, progress: RecoveryProgress) -> None:
        """Delete the drained bookie's cookie; drop it from the decommissioning list unless it still runs."""
        store = self._manager.store
        bookie = progress.bookie
        node = await read_cookie(store, bookie)
        if node is not None:
            with contextlib.suppress(NotFoundError):  # formatted meanwhile
                await store.delete(cookie_path(bookie), node.stat.version)
            progress.cookie_deleted = True
            log.warning("decommission of %s: its cookie is deleted (the id may be used again)", bookie)
        lists = await list_bookies(store)
        if bookie not in lists.writable and bookie not in lists.readonly:
            await self._manager.set_decommissioning(bookie, False)

    async def _pass(self, progress: RecoveryProgress) -> set[int]:
        """One pass over the ledgers naming the bookie; returns those that still do."""
        bookie = progress.bookie
        progress.passes += 1
        ledgers = {
            i: md
            for i, md in (await scan_ledgers(self._bk, self._scan_in_flight_max)).items()
            if _names(md, bookie)
        }
        progress.ledgers_total = progress.ledgers_done + len(ledgers)
        progress.bytes_estimated = progress.bytes_copied + sum(
            bytes_on_bookie(md, bookie) for md in ledgers.values()
        )
        left: set[int] = set()
        for ledger_id in sorted(ledgers):
            if not await self._manager.try_lock(ledger_id, self._owner):
                left.add(ledger_id)  # a worker is on it: look again next pass
                continue
            try:
                if not await self._heal(ledger_id, progress):
                    left.add(ledger_id)
            finally:
                await self._manager.release(ledger_id)
        return left

    async def _heal(self, ledger_id: int, progress: RecoveryProgress) -> bool:
        bookie = progress.bookie
        for attempt in range(2):
            try:
                report = await self._replicator.replicate(ledger_id, {bookie})
            except BKError as exc:
                progress.errors.append(f"ledger {ledger_id}: {exc}")
                return False
            progress.bytes_copied += report.bytes
            progress.entries_copied += report.entries
            if report.outcome in (Outcome.HEALED, Outcome.NOTHING_TO_DO, Outcome.DELETED):
                progress.ledgers_done += 1
                return True
            if report.outcome is Outcome.OPEN_FRAGMENT and attempt == 0:
                try:
                    metadata = report.metadata
                    password = metadata.password if metadata is not None and metadata.password else b""
                    await self._bk.open_ledger(ledger_id, password, recovery=True)
                except NoSuchLedgerError:
                    progress.ledgers_done += 1
                    return True
                except BKError as exc:
                    progress.errors.append(f"ledger {ledger_id}: recovery failed: {exc}")
                    return False
                continue
            progress.errors.append(f"ledger {ledger_id}: {report.outcome.value} {report.detail}".strip())
            return False
        return False


def _names(metadata: LedgerMetadata, bookie: BookieId) -> bool:
    return any(bookie in members for _, members in metadata.ensembles)

"""AutoRecovery in the simulation: permanent bookie loss, auditor and workers, and what they must achieve.

In the seeds that draw it, a World also runs ``daemons`` AutoRecovery daemons (each its own client on the
fake network and the conflict-injecting metadata store, so their compare-and-sets race the writer's, the
recoverers' and each other's), loses ``permanent_losses`` bookies for good (the first at a random time, the
second only once the first is healed), and may keep a *scratch* ledger that a retention actor deletes once it
is marked under-replicated. Bookies' registrations follow their crashes (gone after the session timeout,
back on restart), so the auditor sees transient outages too - longer than the lost-bookie delay, they are
marked, and the marks must end when the bookie returns.

Checks (violations):

* after healing, AutoRecovery converges within ``CONVERGE_S``: no ledger names a lost bookie, no mark is
  left - neither of a deleted ledger nor of a bookie that came back (BookKeeper #3316, #2766) - and a ledger
  left open by an idle writer on a lost bookie is recovered rather than waited on forever (BookKeeper #2755);
* at the end, every entry of every closed ledger - every acknowledged one included - is on exactly W live
  replicas (its write set per the final metadata), none of them a lost bookie.
"""

from __future__ import annotations

import logging
import random
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from magnetar.bookkeeper.autorecovery.daemon import AutoRecoveryDaemon
from magnetar.bookkeeper.autorecovery.distribution_check import replicas_of
from magnetar.bookkeeper.autorecovery.fragments import bookies_of
from magnetar.bookkeeper.autorecovery.settings import AutoRecoverySettings
from magnetar.bookkeeper.autorecovery.underreplication import UnderreplicationManager
from magnetar.bookkeeper.client import BKError
from magnetar.bookkeeper.client.ledger_manager import LedgerManager
from magnetar.bookkeeper.client.metadata import LedgerMetadata

if TYPE_CHECKING:
    from sim.sim_world import World

AUTORECOVERY_LOGGER = "magnetar.bookkeeper.autorecovery"
CONVERGE_S = 60.0
"""Simulated time AutoRecovery gets to heal everything after the faults stop."""
SESSION_TIMEOUT_S = 0.3
"""A crashed bookie's registration disappears this long after the crash."""


@dataclass(frozen=True)
class RecoveryPlan:
    daemons: int
    permanent_losses: int
    lost_bookie_delay_s: int
    scratch_ledger: bool
    rate_limited: bool
    idle_ledger: bool = False


def draw_plan(rng: random.Random, bookies: int, ensemble: int) -> RecoveryPlan | None:
    """Drawn after the base scenario, from its own stream, so base scenarios keep their shape."""
    if rng.random() < 0.35:
        return None
    losses_max = min(2, bookies - ensemble)
    return RecoveryPlan(
        daemons=rng.choice([1, 2, 2]),
        permanent_losses=rng.randint(0, losses_max) if losses_max > 0 else 0,
        lost_bookie_delay_s=rng.choice([0, 0, 1]),
        scratch_ledger=rng.random() < 0.5,
        rate_limited=rng.random() < 0.25,
        idle_ledger=rng.random() < 0.5,
    )


def daemon_settings(plan: RecoveryPlan) -> AutoRecoverySettings:
    return AutoRecoverySettings(
        lost_bookie_recovery_delay_s=plan.lost_bookie_delay_s,
        auditor_periodic_check_interval_s=2,
        auditor_periodic_bookie_check_interval_s=5,
        auditor_periodic_placement_policy_check_interval_s=0,
        auditor_ledger_verification_percentage=100,
        open_ledger_rereplication_grace_period_ms=1000,
        rereplicate_backoff_ms=200,
        lock_release_of_failed_ledger_grace_period_ms=500,
        underreplicated_poll_ms=500,
        rereplication_entry_batch_size=4,
        rereplication_rate_entries_per_s=200 if plan.rate_limited else 0,
        add_timeout_ms=1000,
        read_timeout_ms=1000,
    )


class SimRecovery:
    def __init__(self, world: World, plan: RecoveryPlan) -> None:
        self.world = world
        self.plan = plan
        self.manager = UnderreplicationManager(world.metadata)
        self.scratch_ledger_id: int | None = None
        self.scratch_bookies: set[str] = set()
        self.scratch_deleted = False
        self.idle_bookies: set[str] = set()

    def log(self, text: str) -> None:
        self.world.log(f"autorecovery: {text}")

    # -- daemons ---------------------------------------------------------------------------------------

    async def run_daemons(self) -> None:
        settings = daemon_settings(self.plan)
        async with AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(self.world.client(f"daemon{i}"))
                for i in range(self.plan.daemons)
            ]
            async with trio.open_nursery() as nursery:
                for index, bk in enumerate(clients):
                    rng = random.Random(self.world.rng.getrandbits(64))
                    daemon = AutoRecoveryDaemon(bk, settings, daemon_id=f"daemon{index}", rng=rng)
                    await nursery.start(daemon.run)
                self.log(f"{self.plan.daemons} daemons running")
                await trio.sleep_forever()

    # -- actors ----------------------------------------------------------------------------------------

    async def scratch(self) -> None:
        """A small closed ledger; deleted (as retention would) once it is marked under-replicated."""
        async with self.world.client("scratch") as bk:
            try:
                lh = await bk.create_ledger(ensemble_size=self.world.scenario.ensemble_size,
                                            write_quorum=self.world.scenario.write_quorum,
                                            ack_quorum=self.world.scenario.ack_quorum)  # fmt: skip
                for i in range(5):
                    await lh.add_entry(b"scratch-%d" % i)
                await lh.close()
            except BKError as exc:
                self.log(f"scratch ledger failed {exc!r}")
                return
            self.scratch_ledger_id = lh.ledger_id
            self.scratch_bookies = bookies_of(lh.metadata)
            self.log(f"scratch ledger {lh.ledger_id} on {list(lh.metadata.ensembles[0][1])}")
            while await self.manager.get_mark(lh.ledger_id) is None:
                await trio.sleep(0.05)
            try:
                await bk.delete_ledger(lh.ledger_id)
            except BKError as exc:
                self.log(f"deleting the scratch ledger failed {exc!r}")
                return
            self.scratch_deleted = True
            self.log(f"scratch ledger {lh.ledger_id} deleted while marked")

    async def idle_writer(self) -> None:
        """A ledger written a little and left open by a writer that goes quiet (it never sees a failure, so
        it never replaces a lost bookie itself): AutoRecovery must recover it after the grace period."""
        async with self.world.client("idle") as bk:
            s = self.world.scenario
            try:
                lh = await bk.create_ledger(
                    ensemble_size=s.ensemble_size, write_quorum=s.write_quorum, ack_quorum=s.ack_quorum
                )
                for i in range(4):
                    await lh.add_entry(b"idle-%d" % i)
            except BKError as exc:
                self.log(f"idle ledger failed {exc!r}")
                return
            self.idle_bookies = set(lh.metadata.last_ensemble[1])
            self.log(f"idle ledger {lh.ledger_id} left open on {sorted(self.idle_bookies)}")
            await trio.sleep_forever()

    async def losses(self) -> None:
        world = self.world
        await trio.sleep(world.rng.uniform(0.3, world.scenario.duration_s * 0.5))
        for number in range(self.plan.permanent_losses):
            if number > 0:
                await self.healed_for_a_check()
            candidates = sorted(n for n in world.network.bookies if n not in world.network.lost)
            if number == 0:
                preferred = [b for b in candidates if b in self.scratch_bookies | self.idle_bookies]
                candidates = preferred or candidates
            victim = world.rng.choice(candidates)
            world.lose(victim)

    async def healed_for_a_check(self) -> None:
        """Until converged, and still converged after a periodic check ran (it finds replicas an entry
        never reached)."""
        while True:
            while await self.problems():
                await trio.sleep(0.2)
            await trio.sleep(3.0)
            if not await self.problems():
                return

    # -- checks ----------------------------------------------------------------------------------------

    async def ledgers(self) -> dict[int, LedgerMetadata]:
        manager = LedgerManager(self.world.metadata)
        found = {}
        async for ledger_id in manager.ledger_ids():
            try:
                found[ledger_id] = (await manager.read(ledger_id)).metadata
            except BKError:
                continue
        return found

    async def problems(self) -> list[str]:
        lost = self.world.network.lost
        out = [
            f"ledger {ledger_id} still names lost {sorted(bookies_of(md) & lost)}"
            for ledger_id, md in (await self.ledgers()).items()
            if bookies_of(md) & lost
        ]
        out += [
            f"mark left: ledger {m.ledger_id} missing {sorted(m.missing)}" for m in await self.manager.marks()
        ]
        return out

    async def converge(self, when: str) -> None:
        with trio.move_on_after(CONVERGE_S):
            while problems := await self.problems():
                await trio.sleep(0.25)
            self.log(f"converged {when}")
            return
        for problem in problems[:5]:
            self.world.violation(f"AutoRecovery did not converge {when}: {problem}")

    async def check_replicas(self) -> None:
        """Every entry of every closed ledger on W live replicas, none on a lost bookie."""
        await trio.sleep(5.0)  # two periodic checks: replicas an entry never reached are found
        await self.converge("after the verifier's recovery")
        network = self.world.network
        for ledger_id, md in (await self.ledgers()).items():
            if not md.is_closed:
                continue
            for entry_id in range(md.last_entry_id + 1):
                replicas = replicas_of(md, entry_id)
                for bookie in replicas:
                    if bookie in network.lost:
                        self.world.violation(f"entry {ledger_id}:{entry_id} placed on lost bookie {bookie}")
                    elif not _holds(network.bookies[bookie].store, ledger_id, entry_id):
                        self.world.violation(
                            f"entry {ledger_id}:{entry_id} missing on {bookie} (replicas {replicas})"
                        )
        scratch = self.scratch_ledger_id
        if self.scratch_deleted and scratch is not None and await self.manager.get_mark(scratch) is not None:
            self.world.violation(f"the mark of deleted ledger {scratch} was never dropped")


def _holds(store: object, ledger_id: int, entry_id: int) -> bool:
    try:
        store.read_entry(ledger_id, entry_id)  # type: ignore[attr-defined]
    except Exception:
        return False
    return True


def capture_errors(handler: logging.Handler) -> logging.Logger:
    logger = logging.getLogger(AUTORECOVERY_LOGGER)
    logger.addHandler(handler)
    return logger


__all__ = ["RecoveryPlan", "SimRecovery", "capture_errors", "draw_plan"]

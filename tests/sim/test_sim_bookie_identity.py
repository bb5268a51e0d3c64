"""A wiped bookie rejoining under its old id must not shorten a recovered ledger (bookie cookies).

Seeded runs (:func:`~sim.sim_world.draw_wipe_scenario`): the simulation's usual faults, and once the writer is
done - its ledger still open - one bookie's disk is wiped and it restarts under its old id, through the same
identity check as a real bookie. With the check, it is refused and stays out, and the final recovery keeps
every acknowledged entry; with the check bypassed (the injected fault), the checkers find acknowledged entries
lost. A failing seed prints the command that reproduces it.

A scripted schedule shows the mechanism step by step. The schedule (E = W = 3, A = 2): entries 0-4 reach all
three bookies; entries 5-9 are acknowledged by the victim and the keeper while the lagger never receives them
(its adds are held). The writer stops. The victim's disk is then wiped and the bookie restarts under its old
id. A recovering client fences and reads; the keeper's answers come last (held for a while).

* **Cookies bypassed** (the injected fault: the restart skips the identity check): the empty victim answers
  "no such entry" for 5, so do the lagger, and with W - A + 1 = 2 such answers recovery takes entry 5 for
  never written and closes the ledger at 4: five acknowledged entries are lost. The check below catches it.
* **With the cookie check** the victim is refused - its cookie is in the metadata store, its directories have
  none - and stays out. Recovery gets one "no such entry" (the lagger), waits for the keeper, finds 5-9,
  re-replicates them to the spare bookie in place of the victim and closes the ledger at 9.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
import trio
from fixtures.client import InProcessBookies, open_in_process_bookies
from sim.sim_identity import SimDisk, start_with_identity
from sim.sim_scripted import ScriptedTransport, adds_from, read_of
from sim.sim_world import SimResult, draw_wipe_scenario, repro_command, run_seed

from magnetar.bookkeeper.bookie.core import BookieCore
from magnetar.bookkeeper.bookie.storage.memory_store import MemoryLedgerStore
from magnetar.bookkeeper.client import BKError, BookKeeper, ClientSettings, open_bookkeeper
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore

PAYLOADS = {entry_id: b"entry-%d" % entry_id for entry_id in range(10)}


@dataclass
class Client:
    bk: BookKeeper
    transport: ScriptedTransport


@asynccontextmanager
async def client(bookies: InProcessBookies, metadata: MemoryMetadataStore) -> AsyncIterator[Client]:
    transport = ScriptedTransport(bookies.transport)
    settings = ClientSettings(ensemble_size=3, write_quorum=3, ack_quorum=2)
    async with open_bookkeeper(metadata, transport, settings) as bk:
        yield Client(bk, transport)


def lost_acknowledged(acknowledged: dict[int, bytes], last: int, read: dict[int, bytes]) -> list[str]:
    """The simulation's check: every acknowledged entry is in the closed ledger, unchanged."""
    problems = []
    for entry_id, payload in sorted(acknowledged.items()):
        if entry_id > last:
            problems.append(f"acknowledged entry {entry_id} lost: ledger closed at {last}")
        elif read.get(entry_id) != payload:
            problems.append(f"acknowledged entry {entry_id} changed or unreadable")
    return problems


def wipe(bookies: InProcessBookies, disk: SimDisk, nursery: trio.Nursery) -> MemoryLedgerStore:
    """The bookie's disk is replaced by an empty one (it is down until :func:`rejoin`)."""
    name = disk.name
    bookies.crash(name)
    bookies.stores[name].close()
    store = MemoryLedgerStore()
    nursery.start_soon(store.run)
    bookies.stores[name] = store
    bookies.cores[name] = BookieCore(store)
    bookies.transport.add_bookie(name, bookies.cores[name])
    disk.wipe()
    return store


@pytest.mark.parametrize("cookies", [True, False], ids=["cookie-check", "cookies-bypassed"])
async def test_a_wiped_bookie_rejoining_under_its_old_id_does_not_shorten_a_recovered_ledger(
    autojump_clock: object, cookies: bool
) -> None:
    metadata = MemoryMetadataStore()
    async with open_in_process_bookies(metadata, 4) as bookies, trio.open_nursery() as nursery:
        disks = {name: SimDisk(name) for name in bookies.ids}
        for name, disk in disks.items():  # every bookie's first start writes its cookies
            assert await start_with_identity(metadata, disk, bookies.stores[name]) is None
        spare = bookies.ids[3]
        await bookies.unregister(spare)  # the ledger's ensemble is the other three
        async with client(bookies, metadata) as writer, client(bookies, metadata) as recoverer:
            lh = await writer.bk.create_ledger(password=b"pw")
            victim, keeper, lagger = lh.metadata.last_ensemble[1]
            for entry_id in range(5):
                await lh.add_entry(PAYLOADS[entry_id])
            writer.transport.hold(lagger, adds_from(5))  # the lagger never receives 5-9
            for entry_id in range(5, 10):
                await lh.add_entry(PAYLOADS[entry_id])
            assert lh.last_add_confirmed == 9  # acknowledged by the victim and the keeper

            await bookies.register(spare)
            await bookies.unregister(victim)
            store = wipe(bookies, disks[victim], nursery)
            refusal = await start_with_identity(metadata, disks[victim], store) if cookies else None
            if refusal is None:
                bookies.restart(victim)
                await bookies.register(victim)
            else:
                assert f"a bookie with id {victim} existed" in refusal
                assert "its data is gone" in refusal

            keeper_reads = recoverer.transport.hold(keeper, read_of(), responses=True)
            recovered = []

            async def recover() -> None:
                recovered.append(await recoverer.bk.open_ledger(lh.ledger_id, password=b"pw"))

            nursery.start_soon(recover)
            await trio.sleep(1.0)  # every other answer has arrived by now
            keeper_reads.release()
            with trio.fail_after(30):
                while not recovered:
                    await trio.sleep(0.01)
            rh = recovered[0]
            last = rh.metadata.last_entry_id
            read = {}
            if last >= 0:
                try:
                    read = {e.entry_id: e.payload for e in await rh.read_entries(0, last)}
                except BKError as exc:
                    pytest.fail(f"the recovered ledger is unreadable: {exc!r}")
            problems = lost_acknowledged(PAYLOADS, last, read)
            if cookies:
                assert problems == []
                assert last == 9
                assert victim not in rh.metadata.last_ensemble[1]  # re-replicated to the spare
                assert spare in rh.metadata.last_ensemble[1]
            else:
                assert problems[0] == "acknowledged entry 5 lost: ledger closed at 4"
                assert len(problems) == 5
        nursery.cancel_scope.cancel()


# -- seeded runs -------------------------------------------------------------------------------------------


def _report(test: str, failures: list[SimResult]) -> str:
    lines = [
        f"seed {r.seed}: {r.violations[:3]}\n  reproduce: {repro_command(test, r.seed)}" for r in failures
    ]
    lines.append("last events of the first:")
    lines.extend("  " + event for event in failures[0].trace[-30:])
    return "\n".join(lines)


@pytest.mark.slow
def test_a_wiped_bookie_is_refused_and_no_acknowledged_entry_is_lost(sim_seeds: list[int]) -> None:
    seeds = sim_seeds[: max(1, len(sim_seeds) // 5)]  # 100 of the default 500 seeds
    results = [run_seed(seed, draw_wipe_scenario(seed)) for seed in seeds]
    failures = [r for r in results if r.violations]
    assert not failures, _report("test_a_wiped_bookie_is_refused_and_no_acknowledged_entry_is_lost", failures)
    refused = [r for r in results if any(" lost b" in event for event in r.trace)]
    if len(seeds) >= 10:  # the wipe happened (the writer finished in time) and was refused
        assert len(refused) >= len(seeds) * 0.8


def test_checkers_catch_a_wiped_bookie_rejoining_without_its_cookie_check() -> None:
    for seed in range(100):
        result = run_seed(seed, draw_wipe_scenario(seed, cookie_check=False))
        if any("acknowledged entry" in v and "lost" in v for v in result.violations):
            return
    pytest.fail("a wiped bookie rejoining under its old id went unnoticed for 100 seeds")

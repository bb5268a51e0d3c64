"""One simulated run: bookies, a writer, recovering clients, a tailing reader, faults - then heal, recover,
and check BookKeeper's invariants (as the TLA+ model states them) against everything every client saw.

``run_seed(seed)`` draws a scenario from the seed, runs it on ``trio.testing.MockClock(autojump_threshold=0)``
and returns a :class:`SimResult` with the violations found and the full event trace.

Scheduling determinism: with hypothesis installed, importing it runs trio's hypothesis plugin, which makes
trio's scheduler shuffle each batch of runnable tasks with its private RNG ``trio._core._run._r`` instead of
at random. ``run_seed`` seeds that RNG (a private hook of trio; if it moves, the determinism test fails).
Everything else random comes from the seed: network, faults, placement, creator tokens.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import random
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

import hypothesis  # noqa: F401  - enables trio's deterministic scheduling (its hypothesis plugin)
import trio
import trio._core._run as trio_run
import trio.testing
from sim.sim_autorecovery import SESSION_TIMEOUT_S, RecoveryPlan, SimRecovery, capture_errors, draw_plan
from sim.sim_identity import start_with_identity
from sim.sim_metadata import SimMetadataStore, check_transition
from sim.sim_network import NetConfig, Scheduler, SimNetwork, SimTransport

from magnetar.bookkeeper.client import (
    BKError,
    BookKeeper,
    ClientSettings,
    LedgerFencedError,
    LedgerHandle,
    TooManyRequestsError,
    open_bookkeeper,
)
from magnetar.bookkeeper.client.ledger_manager import ledger_path
from magnetar.bookkeeper.client.metadata import LedgerMetadata
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.runtime.clock import TrioClock

CLIENT_LOGGER = "magnetar.bookkeeper.client"


@dataclass
class Scenario:
    seed: int
    bookies: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    entries: int
    writer_window: int
    writer_closes: bool
    recoverers: list[float]
    reader: bool
    recovery_read_batch_size: int
    fault_interval_s: float
    crash_down_max_s: float
    metadata_conflict: float
    metadata_delay_max_s: float
    toucher: bool
    duration_s: float
    net: NetConfig
    recovery: RecoveryPlan | None = None
    """AutoRecovery daemons, permanent bookie losses, a retention-deleted ledger (sim_autorecovery)."""
    wipe: bool = False
    """One bookie's disk is wiped once the writer is done (the ledger still open), and it restarts under its
    old id - through the identity check (cookies) unless ``cookie_check`` is off (an injected fault)."""
    cookie_check: bool = True


def draw_scenario(seed: int) -> Scenario:
    rng = random.Random(f"scenario-{seed}")
    bookies = rng.randint(3, 5)
    ensemble = rng.randint(2, min(4, bookies))
    write_quorum = rng.randint(2, ensemble)
    ack_quorum = rng.randint(1, write_quorum) if rng.random() < 0.3 else max(1, write_quorum - 1)
    net = NetConfig(
        delay_max_s=rng.choice([0.002, 0.02, 0.1]),
        loss=rng.choice([0.0, 0.0, 0.01, 0.05, 0.1]),
        duplicate=rng.choice([0.0, 0.02, 0.1]),
        timeout_s=rng.choice([1.5, 3.0]),
        slow_sync=rng.choice([0.0, 0.05, 0.2]),
        spike=rng.choice([0.0, 0.02, 0.1, 0.3]),
    )
    recovery = draw_plan(random.Random(f"recovery-{seed}"), bookies, ensemble)
    if recovery is not None and recovery.permanent_losses:
        ack_quorum = max(ack_quorum, 2)  # an entry acknowledged by one bookie dies with it: no protocol helps
    return Scenario(
        seed=seed,
        bookies=bookies,
        ensemble_size=ensemble,
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        entries=rng.randint(5, 60),
        writer_window=rng.choice([1, 4, 16, 64]),
        writer_closes=rng.random() < 0.4,
        recoverers=sorted(
            rng.uniform(0.0, rng.choice([0.3, 1.0, 3.0])) for _ in range(rng.choice([0, 1, 1, 2, 2, 3]))
        ),
        reader=rng.random() < 0.5,
        recovery_read_batch_size=rng.choice([1, 1, 3, 8]),
        fault_interval_s=rng.choice([0.2, 0.5, 2.0, 100.0]),
        crash_down_max_s=rng.choice([0.5, 3.0]),
        metadata_conflict=rng.choice([0.0, 0.1, 0.3]),
        metadata_delay_max_s=rng.choice([0.0, 0.005, 0.05]),
        toucher=rng.random() < 0.3,
        duration_s=8.0,
        net=net,
        recovery=recovery,
    )


def draw_wipe_scenario(seed: int, *, cookie_check: bool = True) -> Scenario:
    """A scenario with a wiped bookie: a spare bookie to replace it, A >= 2 (a lost bookie leaves recovery
    enough answers), and an open ledger for the final recovery to close. No AutoRecovery: the case is the
    identity check's alone (the permanent losses of a recovery plan would take the spare bookie)."""
    base = draw_scenario(seed)
    rng = random.Random(f"wipe-{seed}")
    ack_quorum = max(2, base.ack_quorum)
    return dataclasses.replace(
        base,
        bookies=base.ensemble_size + rng.choice([1, 1, 2]),
        ack_quorum=ack_quorum,
        writer_closes=False,
        wipe=True,
        cookie_check=cookie_check,
        recovery=None,
    )


def payload_for(seed: int, entry_id: int) -> bytes:
    digest = hashlib.sha256(f"{seed}:{entry_id}".encode()).digest()
    return digest[: 1 + entry_id % 32]


@dataclass
class SimResult:
    seed: int
    scenario: Scenario
    violations: list[str]
    trace: list[str]
    acked: int = 0
    closed_at: int | None = None


class _ErrorLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage() + (f" {record.exc_info[1]!r}" if record.exc_info else ""))


@dataclass
class World:
    scenario: Scenario
    trace: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    ledger_id: int | None = None
    acked: dict[int, bytes] = field(default_factory=dict)
    reads: list[tuple[str, int, bytes]] = field(default_factory=list)
    closes_seen: list[tuple[str, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.scenario.seed)
        self.scheduler = Scheduler()
        self.network = SimNetwork(self.rng, self.scheduler, self.trace, self.scenario.net)
        self.metadata = MemoryMetadataStore(clock_ms=lambda: int(trio.current_time() * 1000))
        self.created = trio.Event()
        plan = self.scenario.recovery
        self.recovery = SimRecovery(self, plan) if plan is not None else None
        self.network.on_down = self._bookie_down
        self.network.on_up = self._bookie_up
        self._nursery: trio.Nursery | None = None
        self.writer_done = trio.Event()

    # -- helpers -------------------------------------------------------------------------------------------

    def log(self, text: str) -> None:
        self.network.log(text)

    # -- registrations follow the bookies' lives -------------------------------------------------------------

    def _bookie_down(self, name: str, epoch: int) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(self._unregister_after_session, name, epoch)

    async def _unregister_after_session(self, name: str, epoch: int) -> None:
        await trio.sleep(SESSION_TIMEOUT_S)
        bookie = self.network.bookies[name]
        if (
            not bookie.up
            and bookie.epoch == epoch
            and await self.metadata.exists(f"/ledgers/available/{name}")
        ):
            self.log(f"registration of {name} expired")
            await self.metadata.delete(f"/ledgers/available/{name}")

    def _bookie_up(self, name: str) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(self.metadata.put, f"/ledgers/available/{name}", b"", None)

    def lose(self, name: str) -> None:
        self.network.lose(name)

    def violation(self, text: str) -> None:
        self.log(f"VIOLATION {text}")
        self.violations.append(text)

    def settings(self) -> ClientSettings:
        s = self.scenario
        return ClientSettings(
            ensemble_size=s.ensemble_size,
            write_quorum=s.write_quorum,
            ack_quorum=s.ack_quorum,
            add_timeout_ms=1000,
            read_timeout_ms=1000,
            pending_adds_max=64,
            recovery_read_batch_size=s.recovery_read_batch_size,
            bookie_quarantine_ms=2000,
            ensemble_changes_max=100,
        )

    @asynccontextmanager
    async def client(self, name: str) -> AsyncIterator[BookKeeper]:
        s = self.scenario
        store = SimMetadataStore(
            self.metadata,
            self.rng,
            client=name,
            delay_max_s=s.metadata_delay_max_s,
            conflict=s.metadata_conflict if name != "verifier" else 0.0,
            on_write=self._on_metadata_write,
        )
        rng = random.Random(self.rng.getrandbits(64))
        transport = SimTransport(self.network, name)
        async with open_bookkeeper(store, transport, self.settings(), clock=TrioClock(0), rng=rng) as bk:
            yield bk

    def _on_metadata_write(
        self, client: str, path: str, old: LedgerMetadata | None, new: LedgerMetadata
    ) -> None:
        ensembles = ",".join(f"{f}:{'/'.join(m)}" for f, m in new.ensembles)
        self.log(f"metadata {client} {path} {new.state.name} last={new.last_entry_id} [{ensembles}]")
        problem = check_transition(old, new, client)
        if problem is not None:
            self.violation(f"metadata write by {client}: {problem}")
        main = self.ledger_id is not None and path == ledger_path("/ledgers", self.ledger_id)
        if new.is_closed and main:
            self.closes_seen.append((client, new.last_entry_id, new.length))

    # -- main --------------------------------------------------------------------------------------------

    async def main(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self.scheduler.run)
            for index in range(self.scenario.bookies):
                name = f"b{index}"
                bookie = self.network.add_bookie(name)
                if self.scenario.wipe:  # first start: the bookie writes its cookies
                    assert await start_with_identity(self.metadata, bookie.disk, bookie.store) is None
                await self.metadata.put(f"/ledgers/available/{name}", b"", None)
            if self.recovery is not None:
                nursery.start_soon(self.recovery.run_daemons)
            with trio.move_on_after(self.scenario.duration_s):
                async with trio.open_nursery() as actors:
                    actors.start_soon(self.writer)
                    for index, delay in enumerate(self.scenario.recoverers):
                        actors.start_soon(self.recoverer, index, delay)
                    if self.scenario.reader:
                        actors.start_soon(self.reader)
                    if self.scenario.wipe:
                        actors.start_soon(self.wiper)
                    background = trio.CancelScope()
                    actors.start_soon(self._background, background)
                    await self._actors_done(actors, background)
            self.log("heal")
            self.network.heal()
            await trio.sleep(self.scenario.net.timeout_s + 1.0)
            if self.recovery is not None:
                await self.recovery.converge("after healing")
            await self.verify()
            if self.recovery is not None:
                await self.recovery.check_replicas()
            nursery.cancel_scope.cancel()

    async def _actors_done(self, actors: trio.Nursery, background: trio.CancelScope) -> None:
        # Stop the fault injector once only it is left (writer and readers finished).
        while len(actors.child_tasks) > 1:
            await trio.sleep(0.1)
        background.cancel()

    async def _background(self, scope: trio.CancelScope) -> None:
        with scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.faults)
                if self.scenario.toucher:
                    nursery.start_soon(self.toucher)
                if self.recovery is not None:
                    nursery.start_soon(self.recovery.losses)
                    if self.recovery.plan.scratch_ledger:
                        nursery.start_soon(self.recovery.scratch)
                    if self.recovery.plan.idle_ledger:
                        nursery.start_soon(self.recovery.idle_writer)

    # -- actors --------------------------------------------------------------------------------------------

    async def writer(self) -> None:
        try:
            await self._writer()
        finally:
            self.writer_done.set()

    async def _writer(self) -> None:
        s = self.scenario
        async with self.client("writer") as bk:
            try:
                lh = await bk.create_ledger(
                    ensemble_size=s.ensemble_size, write_quorum=s.write_quorum, ack_quorum=s.ack_quorum
                )
            except BKError as exc:
                self.log(f"writer create failed {exc!r}")
                return
            self.ledger_id = lh.ledger_id
            self.log(f"writer created ledger {lh.ledger_id} {list(lh.metadata.last_ensemble[1])}")
            self.created.set()
            await self._write_entries(lh)
            if s.writer_closes:
                try:
                    await lh.close()
                    self.log(f"writer closed at {lh.last_add_confirmed}")
                except BKError as exc:
                    self.log(f"writer close failed {exc!r}")

    async def _write_entries(self, lh: LedgerHandle) -> None:
        s = self.scenario
        state = {"outstanding": 0, "last_ack": -1, "failed": False}
        wake = trio.lowlevel.ParkingLot()

        def on_done(entry_id: int, outcome: int | BKError) -> None:
            state["outstanding"] -= 1
            wake.unpark_all()
            if isinstance(outcome, BKError):
                if not state["failed"]:
                    self.log(f"writer add {entry_id} failed {type(outcome).__name__}")
                state["failed"] = True
                return
            self.log(f"writer ack {outcome} lac={lh.last_add_confirmed}")
            if state["failed"]:
                self.violation(f"writer got entry {outcome} acknowledged after an add failed")
            if outcome != state["last_ack"] + 1 or outcome != entry_id:
                self.violation(f"writer ack {outcome} out of order (previous {state['last_ack']})")
            if lh.last_add_confirmed != outcome:
                self.violation(f"LAC {lh.last_add_confirmed} != acknowledged entry {outcome}")
            state["last_ack"] = outcome
            self.acked[outcome] = payload_for(s.seed, outcome)

        for entry_id in range(s.entries):
            while state["outstanding"] >= s.writer_window and not state["failed"]:
                await wake.park()
            if state["failed"]:
                break
            try:
                got = lh.add_entry_nowait(
                    payload_for(s.seed, entry_id), lambda outcome, e=entry_id: on_done(e, outcome)
                )
            except TooManyRequestsError:
                await lh.wait_for_room()
                continue
            if got == -1:  # the handle had already failed; the callback reports the error
                state["failed"] = True
                break
            state["outstanding"] += 1
            if got != entry_id:
                self.violation(f"add_entry_nowait returned id {got} for the {entry_id}th add")
            if self.rng.random() < 0.3:
                await trio.sleep(self.rng.uniform(0.0, 0.05))
        while state["outstanding"] > 0:
            await wake.park()

    async def recoverer(self, index: int, delay: float) -> None:
        await self.created.wait()
        await trio.sleep(delay)
        name = f"recoverer{index}"
        assert self.ledger_id is not None
        async with self.client(name) as bk:
            for _ in range(3):
                try:
                    rh = await bk.open_ledger(self.ledger_id, recovery=True)
                    break
                except BKError as exc:
                    self.log(f"{name} recovery failed {exc!r}")
                    await trio.sleep(0.5)
            else:
                return
            last = rh.metadata.last_entry_id
            self.log(f"{name} sees closed at {last}")
            if last >= 0:
                try:
                    for entry in await rh.read_entries(0, last):
                        self.reads.append((name, entry.entry_id, entry.payload))
                except BKError as exc:
                    self.log(f"{name} read failed {exc!r}")

    async def reader(self) -> None:
        await self.created.wait()
        assert self.ledger_id is not None
        async with self.client("reader") as bk:
            rh = None
            while rh is None:
                try:
                    rh = await bk.open_ledger(self.ledger_id, recovery=False)
                except BKError:
                    await trio.sleep(0.2)
            next_entry, last_lac = 0, -1
            while True:
                try:
                    lac = await rh.read_last_add_confirmed()
                    if lac < last_lac:
                        self.violation(f"reader LAC went back from {last_lac} to {lac}")
                    last_lac = lac
                    if lac >= next_entry:
                        upto = min(lac, next_entry + 20)
                        for entry in await rh.read_entries(next_entry, upto):
                            self.reads.append(("reader", entry.entry_id, entry.payload))
                        next_entry = upto + 1
                        continue
                except BKError as exc:
                    self.log(f"reader error {exc!r}")
                if rh.is_closed and next_entry > rh.last_add_confirmed:
                    return
                await trio.sleep(self.rng.uniform(0.05, 0.3))

    async def faults(self) -> None:
        s = self.scenario
        names = sorted(self.network.bookies)
        clients = ["writer", "reader"] + [f"recoverer{i}" for i in range(len(s.recoverers))]
        while True:
            await trio.sleep(self.rng.expovariate(1.0 / s.fault_interval_s))
            kind = self.rng.choice(["crash", "crash", "partition", "readonly"])
            bookie = self.rng.choice(names)
            duration = self.rng.uniform(0.05, s.crash_down_max_s)
            if kind == "crash":
                self.network.crash(bookie)
                self.scheduler.at(duration, self.network.restart, bookie)
            elif kind == "partition":
                pair = (self.rng.choice(clients), bookie)
                self.log(f"partition {pair}")
                self.network.partitions.add(pair)
                self.scheduler.at(duration, self.network.partitions.discard, pair)
            else:
                self.log(f"readonly {bookie}")
                self.network.bookies[bookie].readonly = True
                self.scheduler.at(duration, setattr, self.network.bookies[bookie], "readonly", False)

    async def wiper(self) -> None:
        """Wipe one bookie's disk after the writer is done, then restart it under its old id."""
        await self.writer_done.wait()
        await trio.sleep(self.rng.uniform(0.0, 0.5))
        name = self.rng.choice(sorted(self.network.bookies))
        path = f"/ledgers/available/{name}"
        self.network.wipe(name)
        if await self.metadata.exists(path):  # its session ended with the crash
            await self.metadata.delete(path)
        await trio.sleep(self.rng.uniform(0.05, self.scenario.crash_down_max_s))
        bookie = self.network.bookies[name]
        if self.scenario.cookie_check:
            refusal = await start_with_identity(self.metadata, bookie.disk, bookie.store)
            if refusal is not None:
                self.network.lose(name, refusal)
                return
        self.network.rejoin(name)
        await self.metadata.put(path, b"", None)

    async def toucher(self) -> None:
        await self.created.wait()
        from magnetar.bookkeeper.client.ledger_manager import ledger_path
        from magnetar.bookkeeper.metadata.api import BadVersionError

        assert self.ledger_id is not None
        path = ledger_path("/ledgers", self.ledger_id)
        while True:
            await trio.sleep(self.rng.uniform(0.01, 0.3))
            got = await self.metadata.get(path)
            if got is not None:
                with contextlib.suppress(BadVersionError):
                    await self.metadata.put(path, got.value, got.stat.version)

    # -- verification ---------------------------------------------------------------------------------------

    async def verify(self) -> None:
        if self.ledger_id is None:
            return
        async with self.client("verifier") as bk:
            rh = None
            for _ in range(10):
                try:
                    rh = await bk.open_ledger(self.ledger_id, recovery=True)
                    break
                except BKError as exc:
                    self.log(f"verifier recovery failed {exc!r}")
                    await trio.sleep(1.0)
            if rh is None:
                self.violation("liveness: the ledger could not be recovered after healing")
                return
            last = rh.metadata.last_entry_id
            self.log(f"verifier: closed at {last} length {rh.metadata.length}")
            final: dict[int, bytes] = {}
            if last >= 0:
                try:
                    final = {e.entry_id: e.payload for e in await rh.read_entries(0, last)}
                except BKError as exc:
                    self.violation(f"closed ledger unreadable after healing: {exc!r}")
                    return
            self.check(last, rh.metadata.length, final)

    def check(self, last: int, length: int, final: dict[int, bytes]) -> None:
        seed = self.scenario.seed
        for entry_id, payload in sorted(self.acked.items()):
            if entry_id > last:
                self.violation(f"acknowledged entry {entry_id} lost: ledger closed at {last}")
            elif final.get(entry_id) != payload:
                self.violation(f"acknowledged entry {entry_id} changed or unreadable")
        for entry_id in range(last + 1):
            if final.get(entry_id) != payload_for(seed, entry_id):
                self.violation(f"entry {entry_id} of the closed ledger is not what the writer wrote")
        expected_length = sum(len(payload_for(seed, e)) for e in range(last + 1))
        if length != expected_length:
            self.violation(f"closed length {length} != {expected_length}")
        for who, entry_id, payload in self.reads:
            if entry_id > last:
                self.violation(f"{who} read entry {entry_id} beyond the closed end {last}")
            elif payload != final.get(entry_id):
                self.violation(f"{who} read a different entry {entry_id}")
        for who, closed_last, closed_length in self.closes_seen:
            if (closed_last, closed_length) != (last, length):
                self.violation(f"{who} saw the ledger closed at {closed_last}, the final end is {last}")


def run_seed(seed: int, scenario: Scenario | None = None) -> SimResult:
    world = World(scenario or draw_scenario(seed))
    trio_run._r.seed(seed)
    errors = _ErrorLog()
    logger = logging.getLogger(CLIENT_LOGGER)
    logger.addHandler(errors)
    recovery_logger = capture_errors(errors)
    try:
        trio.run(world.main, clock=trio.testing.MockClock(autojump_threshold=0))
    except Exception as exc:  # a crash of the run is a finding too
        world.violation(f"the run crashed: {exc!r} {getattr(exc, 'exceptions', '')}")
    finally:
        logger.removeHandler(errors)
        recovery_logger.removeHandler(errors)
    for record in errors.records:
        world.violation(f"client logged an error: {record}")
    closed_at = world.closes_seen[-1][1] if world.closes_seen else None
    return SimResult(seed, world.scenario, world.violations, world.trace, len(world.acked), closed_at)


def trace_digest(seed: int) -> str:
    """A fingerprint of a seed's whole event trace (compared across processes)."""
    return hashlib.sha256("\n".join(run_seed(seed).trace).encode()).hexdigest()


def repro_command(test_name: str, seed: int) -> str:
    return f"pytest tests/sim -k {test_name} --sim-seed={seed}"


class _Failed(Protocol):
    seed: int
    violations: list[str]
    trace: list[str]

    @property
    def scenario(self) -> object: ...


def report(test: str, failures: Sequence[_Failed]) -> str:
    """What a failing simulation test prints: each seed's first violations and the command that reproduces
    it, then the first failure's scenario and the end of its trace."""
    lines = []
    for result in failures:
        lines.append(f"seed {result.seed}: {result.violations[:3]}")
        lines.append(f"  reproduce: {repro_command(test, result.seed)}")
    first = failures[0]
    lines.append(f"scenario of seed {first.seed}: {first.scenario}")
    lines.append("last events of the trace:")
    lines.extend("  " + event for event in first.trace[-40:])
    return "\n".join(lines)


__all__ = [
    "LedgerFencedError",
    "SimResult",
    "World",
    "draw_scenario",
    "draw_wipe_scenario",
    "report",
    "repro_command",
    "run_seed",
]

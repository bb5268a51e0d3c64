"""The simulation one layer up: a topic's managed ledger and its subscription's durable cursor, owned by a
succession of brokers, over the simulated network of :mod:`sim.sim_network`.

One run (``run_ml_seed(seed)``), all on ``trio.testing.MockClock`` and driven by the seed:

* **Bookies** on memory stores behind the fake network (delay, loss, reordering); they crash (losing what
  they had not synced) and restart.
* **Brokers.** Each has its own metadata-store session on one shared tree, its own BookKeeper client and its
  own managed-ledger factory. The owner's session is lost from time to time (``disconnect``, often an
  ``expire_session`` while disconnected, then ``reconnect``); a lost session may cost the broker the topic:
  the next broker opens the managed ledger (recovering, hence fencing, the old owner's ledger) and the
  subscription's cursor. The old owner lives on as a zombie until the end, its writes refused.
* **The topic's producer** publishes messages ``0..N-1`` in order to whoever owns the topic, re-sending a
  message whose outcome it did not learn (duplicates are allowed; losses are not). A message is
  *acknowledged* once an add returned its position.
* **The subscription's consumer** reads from the owner's cursor and acknowledges what it read, one by one or
  cumulatively, on whichever cursor it read it from.

At the end the network heals, the sessions come back, and a fresh broker opens the topic and reads it all.
The checkers (:meth:`MlWorld.check`):

1. *No acknowledged message lost*: every acknowledged message is stored, and the consumer got it; and each
   new owner's last confirmed position is at least every position acknowledged before it began to open the
   topic (the managed ledger's LAC never goes back across a failover).
2. *Mark-delete only moves forward*: on each cursor instance after every acknowledgement, and across owners
   (a broker recovers at least every mark-delete an earlier owner had persisted before it began to open the
   cursor; the final verifier at least all of them).
   The one allowed step back is the documented rollback: a cursor whose cursor ledger cannot be read
   starts again from its metadata snapshot (as Pulsar's does), so acknowledgements since are redelivered.
3. *No illegal state move*: the run must not crash (a transition the tables of ``docs/architecture.md`` §3
   refuse raises an internal error, which ends the run).

:func:`run_ml_seed` takes an optional ``inject`` context manager; the tests use it to re-introduce defects
the checkers must catch (see ``test_sim_managed_ledger.py``).
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass, field

import hypothesis  # noqa: F401  - enables trio's deterministic scheduling (its hypothesis plugin)
import pytest
import trio
import trio._core._run as trio_run
import trio.testing
from sim.sim_network import NetConfig, Scheduler, SimNetwork, SimTransport

from magnetar.bookkeeper.client import BKError, ClientSettings, open_bookkeeper
from magnetar.bookkeeper.metadata import MetadataStoreError
from magnetar.bookkeeper.metadata import memory as memory_store
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.runtime.clock import TrioClock
from magnetar.managed_ledger import cursor_store
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.cursor_store import CursorSnapshot
from magnetar.managed_ledger.errors import ManagedLedgerError
from magnetar.managed_ledger.factory import ManagedLedgerFactory, open_managed_ledger_factory
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.settings import ManagedLedgerSettings

TOPIC = "public/default/persistent/sim"
SUBSCRIPTION = "sub"
FAILURES = (ManagedLedgerError, BKError, MetadataStoreError, trio.TooSlowError)
"""What a broker's operation may fail with under faults (anything else ends the run: a finding)."""


@dataclass
class MlScenario:
    seed: int
    bookies: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    messages: int
    entries_per_ledger: int
    brokers: int
    crash_interval_s: float
    crash_down_max_s: float
    session_interval_s: float
    session_down_max_s: float
    takeover: float
    """Probability that a lost session costs the owner the topic."""
    cumulative: float
    """Probability that the consumer acknowledges cumulatively rather than one by one."""
    net: NetConfig


def draw_ml_scenario(seed: int) -> MlScenario:
    rng = random.Random(f"ml-scenario-{seed}")
    bookies = rng.randint(3, 4)
    ensemble = rng.randint(2, 3)
    write_quorum = rng.randint(2, ensemble)
    return MlScenario(
        seed=seed,
        bookies=bookies,
        ensemble_size=ensemble,
        write_quorum=write_quorum,
        ack_quorum=rng.randint(max(1, write_quorum - 1), write_quorum),
        messages=rng.randint(8, 30),
        entries_per_ledger=rng.choice([3, 7, 1000]),
        brokers=rng.randint(2, 3),
        crash_interval_s=rng.choice([0.5, 2.0, 100.0]),
        crash_down_max_s=rng.choice([0.3, 2.0]),
        session_interval_s=rng.choice([0.4, 1.2, 100.0]),
        session_down_max_s=rng.choice([0.2, 1.0]),
        takeover=rng.choice([0.3, 0.7, 1.0]),
        cumulative=rng.choice([0.0, 0.3, 1.0]),
        net=NetConfig(
            delay_max_s=rng.choice([0.002, 0.02]),
            loss=rng.choice([0.0, 0.01, 0.05]),
            timeout_s=1.5,
            spike=rng.choice([0.0, 0.05]),
        ),
    )


def message(seed: int, index: int) -> bytes:
    return f"{seed}:{index}:".encode() + bytes([index % 251]) * (index % 17)


def message_index(data: bytes) -> int:
    return int(data.split(b":", 2)[1])


@dataclass
class MlResult:
    seed: int
    scenario: MlScenario
    violations: list[str]
    trace: list[str]
    acknowledged: int = 0
    owners: int = 0


@dataclass
class Broker:
    name: str
    store: MemoryMetadataStore
    factory: ManagedLedgerFactory
    ml: ManagedLedger
    cursor: ManagedCursor
    recovered_mark: Position


@dataclass
class MlWorld:
    scenario: MlScenario
    trace: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    acknowledged: dict[int, Position] = field(default_factory=dict)
    """Message -> the position its first successful add returned."""
    delivered: set[int] = field(default_factory=set)
    recovered_marks: list[tuple[str, Position]] = field(default_factory=list)
    """Each owner's mark-delete just after it recovered the cursor."""
    persisted_marks: list[Position] = field(default_factory=list)
    """Every mark-delete an owner's cursor store reported persisted."""
    rollbacks: list[str] = field(default_factory=list)
    """Cursor recoveries that fell back to the metadata snapshot since the last owner took over."""
    owners: list[Broker] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.scenario.seed)
        self.scheduler = Scheduler()
        self.network = SimNetwork(self.rng, self.scheduler, self.trace, self.scenario.net)
        self.tree = f"ml-sim-{self.scenario.seed}-{id(self)}"
        self.producer_done = trio.Event()
        self.consumer_done = trio.Event()
        self.owner_changed = trio.Event()
        self._stores: list[MemoryMetadataStore] = []

    def log(self, text: str) -> None:
        self.network.log(text)

    def violation(self, text: str) -> None:
        self.log(f"VIOLATION {text}")
        self.violations.append(text)

    @property
    def owner(self) -> Broker:
        return self.owners[-1]

    def _store(self) -> MemoryMetadataStore:
        store = MemoryMetadataStore(self.tree, clock_ms=lambda: int(trio.current_time() * 1000))
        self._stores.append(store)
        return store

    def client_settings(self) -> ClientSettings:
        s = self.scenario
        return ClientSettings(
            ensemble_size=s.ensemble_size,
            write_quorum=s.write_quorum,
            ack_quorum=s.ack_quorum,
            add_timeout_ms=1000,
            read_timeout_ms=1000,
            bookie_quarantine_ms=1000,
            ensemble_changes_max=100,
        )

    def ml_settings(self) -> ManagedLedgerSettings:
        s = self.scenario
        return ManagedLedgerSettings(
            ensemble_size=s.ensemble_size,
            write_quorum=s.write_quorum,
            ack_quorum=s.ack_quorum,
            max_entries_per_ledger=s.entries_per_ledger,
            min_ledger_rollover_time_min=0,
            rollover_retry_interval_ms=200,
            rollover_create_wait_ms=200,
            metadata_operation_timeout_s=3,
            mark_delete_rate_per_s=20,
            cursor_max_entries_per_ledger=4,
        )

    # -- brokers -------------------------------------------------------------------------------------------

    @asynccontextmanager
    async def broker_factory(
        self, name: str
    ) -> AsyncIterator[tuple[MemoryMetadataStore, ManagedLedgerFactory]]:
        store = self._store()
        rng = random.Random(self.rng.getrandbits(64))
        transport = SimTransport(self.network, name)
        async with (
            open_bookkeeper(store, transport, self.client_settings(), clock=TrioClock(0), rng=rng) as bk,
            open_managed_ledger_factory(bk, store, self.ml_settings(), clock=TrioClock(0), rng=rng) as f,
        ):
            yield store, f

    async def take_over(
        self, name: str, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run broker ``name``: open the topic and its subscription (retrying through faults), become the
        owner, and live until the run ends."""
        async with self.broker_factory(name) as (store, factory):
            while True:
                floor = max(self.persisted_marks, default=None)
                stored = max(self.acknowledged.values(), default=None)
                self.rollbacks.clear()
                try:
                    ml = await factory.open(TOPIC)
                    cursor = await ml.open_cursor(SUBSCRIPTION, start_at_earliest=True)
                    break
                except FAILURES as exc:
                    self.log(f"{name} could not open the topic: {exc!r}")
                    with contextlib.suppress(*FAILURES):
                        await factory.close_ledger(TOPIC)
                    await trio.sleep(0.3)
            if stored is not None and ml.last_confirmed < stored:
                self.violation(
                    f"{name} opened the topic at {ml.last_confirmed}, below the acknowledged {stored}"
                )
            mark = cursor.mark_delete
            self.log(f"{name} owns the topic: ledger {ml.current_ledger_id}, mark-delete {mark}")
            if floor is not None and mark < floor:
                if self._rolled_back(name):  # what was persisted before no longer binds the next owners
                    self.persisted_marks = [mark]
                else:
                    self.violation(
                        f"mark-delete moved back across owners: {floor} persisted, {name} has {mark}"
                    )
            self.recovered_marks.append((name, mark))
            self._record_persists(name, cursor)
            self.owners.append(Broker(name, store, factory, ml, cursor, mark))
            event, self.owner_changed = self.owner_changed, trio.Event()
            event.set()
            task_status.started()
            await trio.sleep_forever()

    def _record_persists(self, name: str, cursor: ManagedCursor) -> None:
        """Note every mark-delete the cursor's store persisted (what the next owner must recover at least)."""
        store = cursor._store
        assert store is not None
        persist = store.persist

        async def persisted(snapshot: CursorSnapshot) -> None:
            await persist(snapshot)
            self.persisted_marks.append(snapshot.mark_delete)
            self.log(f"{name} persisted mark-delete {snapshot.mark_delete}")

        store.persist = persisted  # type: ignore[method-assign]

    def _rolled_back(self, name: str) -> bool:
        """Whether the cursor just recovered rolled back on purpose: its cursor ledger was unreadable, so it
        started again from the metadata snapshot (Pulsar's rollback position; the acknowledgements since are
        redelivered, none is skipped). Consumes the notice."""
        if not self.rollbacks:
            return False
        self.rollbacks.clear()
        self.log(f"{name}: cursor rolled back to the metadata snapshot (its cursor ledger was unreadable)")
        return True

    # -- actors --------------------------------------------------------------------------------------------

    async def producer(self) -> None:
        s = self.scenario
        index = 0
        while index < s.messages:
            owner = self.owner
            with trio.move_on_after(5.0):
                try:
                    position = await owner.ml.add_entry(message(s.seed, index))
                except FAILURES as exc:
                    self.log(f"producer: message {index} on {owner.name} failed: {exc!r}")
                    await trio.sleep(self.rng.uniform(0.05, 0.3))
                    continue
                self.log(f"producer: message {index} stored at {position} by {owner.name}")
                self.acknowledged.setdefault(index, position)
                index += 1
                if self.rng.random() < 0.3:
                    await trio.sleep(self.rng.uniform(0.0, 0.1))
                continue
            self.log(f"producer: message {index} on {owner.name}: no answer, re-sending")
        self.producer_done.set()

    async def consumer(self) -> None:
        while True:
            owner = self.owner
            cursor = owner.cursor
            try:
                entries = await cursor.read_entries(self.rng.randint(1, 5))
            except FAILURES as exc:
                self.log(f"consumer: read on {owner.name} failed: {exc!r}")
                entries = []
            if not entries:
                if self.producer_done.is_set() and self.delivered >= set(self.acknowledged):
                    self.consumer_done.set()
                    return
                with trio.move_on_after(0.1):
                    await self.owner_changed.wait()
                continue
            for entry in entries:
                self.delivered.add(message_index(entry.data))
            before = cursor.mark_delete
            if self.rng.random() < self.scenario.cumulative:
                last = entries[-1].position
                cursor.ack_cumulative(last)
                self.log(f"consumer: acked up to {last} on {owner.name}")
            else:
                for entry in entries:
                    cursor.ack(entry.position)
                self.log(f"consumer: acked {[str(e.position) for e in entries]} on {owner.name}")
            if cursor.mark_delete < before:
                self.violation(
                    f"mark-delete of {owner.name} moved back from {before} to {cursor.mark_delete}"
                )
            await trio.sleep(self.rng.uniform(0.0, 0.05))

    async def crashes(self) -> None:
        s = self.scenario
        names = sorted(self.network.bookies)
        while True:
            await trio.sleep(self.rng.expovariate(1.0 / s.crash_interval_s))
            bookie = self.rng.choice(names)
            self.network.crash(bookie)
            self.scheduler.at(self.rng.uniform(0.05, s.crash_down_max_s), self.network.restart, bookie)

    async def session_losses(self, brokers: trio.Nursery) -> None:
        s = self.scenario
        spare = [f"broker{i}" for i in range(1, s.brokers)]
        while True:
            await trio.sleep(self.rng.expovariate(1.0 / s.session_interval_s))
            if spare and await self.unloaded(brokers, spare):
                continue
            owner = self.owner
            store = owner.store
            self.log(f"{owner.name}: metadata session disconnected")
            store.disconnect()
            expired = self.rng.random() < 0.6
            await trio.sleep(self.rng.uniform(0.05, s.session_down_max_s))
            if expired:
                self.log(f"{owner.name}: metadata session expired")
                store.expire_session()
            if expired and spare and self.rng.random() < s.takeover:
                await brokers.start(self.take_over, spare.pop(0))
            self.scheduler.at(self.rng.uniform(0.0, s.session_down_max_s), store.reconnect)

    async def unloaded(self, brokers: trio.Nursery, spare: list[str]) -> bool:
        """Instead of a session loss, whether the owner unloaded the topic and the next of ``spare`` took it
        (this tier never unloads; the topic tier does)."""
        return False

    # -- the run -------------------------------------------------------------------------------------------

    async def main(self) -> None:
        registrar = self._store()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.scheduler.run)
            for index in range(self.scenario.bookies):
                name = f"b{index}"
                self.network.add_bookie(name)
                await registrar.put(f"/ledgers/available/{name}", b"", None)
            async with trio.open_nursery() as brokers:
                await brokers.start(self.take_over, "broker0")
                brokers.start_soon(self.consumer)
                with trio.move_on_after(20.0):
                    async with trio.open_nursery() as actors:
                        faults = trio.CancelScope()
                        actors.start_soon(self._faults, faults, brokers)
                        await self.producer()
                        await self.consumer_done.wait()
                        faults.cancel()
                self.producer_done.set()  # (also when the time ran out: what was acknowledged is the set)
                self.log("heal")
                self.network.heal()
                for store in self._stores:
                    store.reconnect()
                with trio.move_on_after(20.0):  # the subscription drains the backlog without faults
                    await self.consumer_done.wait()
                await trio.sleep(self.scenario.net.timeout_s + 1.0)
                await self.verify()
                brokers.cancel_scope.cancel()
            nursery.cancel_scope.cancel()

    async def _faults(self, scope: trio.CancelScope, brokers: trio.Nursery) -> None:
        with scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.crashes)
                nursery.start_soon(self.session_losses, brokers)

    async def verify(self) -> None:
        """A fresh broker takes the topic over, reads every entry and recovers the cursor."""
        async with self.broker_factory("verifier") as (_, factory):
            for _ in range(10):
                self.rollbacks.clear()
                try:
                    ml = await factory.open(TOPIC)
                    cursor = await ml.open_cursor(SUBSCRIPTION)
                    break
                except FAILURES as exc:
                    self.log(f"verifier could not open the topic: {exc!r}")
                    with contextlib.suppress(*FAILURES):
                        await factory.close_ledger(TOPIC)
                    await trio.sleep(1.0)
            else:
                self.violation("liveness: the topic could not be opened after healing")
                return
            present: set[int] = set()
            first = ml.ledgers.first_position()
            if first is not None:
                try:
                    for entry in await ml.read_entries(first, 10_000):
                        present.update(self.messages_in(entry.data))
                except FAILURES as exc:
                    self.violation(f"the topic is unreadable after healing: {exc!r}")
                    return
            self.check(present, cursor.mark_delete)

    def messages_in(self, data: bytes) -> list[int]:
        """The messages an entry holds (here: one, the entry's bytes)."""
        return [message_index(data)]

    def check(self, present: set[int], final_mark: Position) -> None:
        for index, position in sorted(self.acknowledged.items()):
            if index not in present:
                self.violation(f"acknowledged message {index} (stored at {position}) lost")
            elif index not in self.delivered:
                self.violation(f"acknowledged message {index} never reached the subscription")
        floor = max(self.persisted_marks, default=None)
        if floor is not None and final_mark < floor and not self._rolled_back("the verifier"):
            self.violation(
                f"mark-delete moved back: {floor} was persisted, the verifier recovered {final_mark}"
            )


class _Rollbacks(logging.Handler):
    """Notes the cursor store's warnings that a cursor ledger (or its last entry) is unreadable and the
    metadata snapshot is used instead."""

    def __init__(self, notes: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.notes = notes

    def emit(self, record: logging.LogRecord) -> None:
        if "unreadable" in str(record.msg) and "using the" in str(record.msg):
            self.notes.append(record.getMessage())


SHARDS = 4
"""The managed-ledger and topic tiers split their seeds into this many tests (``make test``'s workers share
them)."""
SHARE = 2 / 5
"""The part of ``--sim-seeds`` those tiers run (their seeds cost about three times the replication tier's)."""


def shard_seeds(sim_seeds: list[int], shard: int) -> list[int]:
    """Shard ``shard``'s part of :data:`SHARE` of the seeds (or the one ``--sim-seed``); skips when empty."""
    seeds = sim_seeds if len(sim_seeds) == 1 else sim_seeds[: max(1, int(len(sim_seeds) * SHARE))]
    seeds = seeds[shard::SHARDS]
    if not seeds:
        pytest.skip(f"--sim-seed/--sim-seeds left no seed to shard {shard}")
    return seeds


def run_world(world: MlWorld, inject: Callable[[], AbstractContextManager[object]] | None = None) -> None:
    """Run ``world`` under its seed (with ``inject``'s defect, if any); a crash of the run - an illegal state
    move included - is recorded as a violation."""
    trio_run._r.seed(world.scenario.seed)
    notices = _Rollbacks(world.rollbacks)
    store_log = logging.getLogger(cursor_store.__name__)
    saved = store_log.level, store_log.propagate
    store_log.setLevel(logging.WARNING)
    store_log.propagate = False
    store_log.addHandler(notices)
    try:
        with inject() if inject is not None else contextlib.nullcontext():
            trio.run(world.main, clock=trio.testing.MockClock(autojump_threshold=0))
    except Exception as exc:  # a crash of the run (an illegal state move included) is a finding too
        world.violation(f"the run crashed: {exc!r} {getattr(exc, 'exceptions', '')}")
    finally:
        memory_store._shared_trees.pop(world.tree, None)
        store_log.removeHandler(notices)
        store_log.setLevel(saved[0])
        store_log.propagate = saved[1]


def run_ml_seed(seed: int, inject: Callable[[], AbstractContextManager[object]] | None = None) -> MlResult:
    world = MlWorld(draw_ml_scenario(seed))
    run_world(world, inject)
    return MlResult(
        seed, world.scenario, world.violations, world.trace, len(world.acknowledged), len(world.owners)
    )

"""The simulation's world below the client: a discrete-event scheduler, bookies on memory stores, and a fake
network implementing ``BookieTransport`` with loss, delay, reordering, duplication, partitions and crashes.

Determinism: every random choice comes from the world's seeded ``random.Random``; events run in (time, seq)
order from one task, so their order does not depend on trio's scheduler (which the test seeds as well).
A crashed bookie loses its unsynced state (``MemoryLedgerStore.crash``), answers nothing while down, and
every connection to it breaks (pending requests fail with CLOSED), as a real crash would. A *wiped* bookie
crashes and comes back on an empty disk (a new store, its cookies gone: :mod:`sim.sim_identity`). A *lost*
bookie (:meth:`SimNetwork.lose`: destroyed for good, or a wiped one its identity check refused) crashes and
never comes back: no restart (healing included) brings it back.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio
from sim.sim_identity import SimDisk

from magnetar.bookkeeper.bookie.core import BookieCore
from magnetar.bookkeeper.bookie.storage.memory_store import MemoryLedgerStore
from magnetar.bookkeeper.client.transport import FailureReason, ResponseCallback, TransportFailure
from magnetar.bookkeeper.protocol.messages import AddRequest, ReadRequest, Request, Response


class Scheduler:
    """Runs plain callbacks at simulated times; one task, one heap."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._scope: trio.CancelScope | None = None

    def at(self, delay_s: float, fn: Callable[..., Any], *args: Any) -> None:
        when = trio.current_time() + max(0.0, delay_s)
        heapq.heappush(self._heap, (when, next(self._seq), fn, args))
        if self._scope is not None and when < self._scope.deadline:
            self._scope.deadline = when

    async def run(self) -> None:
        while True:
            with trio.CancelScope() as scope:
                self._scope = scope
                scope.deadline = self._heap[0][0] if self._heap else math.inf
                await trio.sleep_forever()
            self._scope = None
            now = trio.current_time()
            while self._heap and self._heap[0][0] <= now:
                _, _, fn, args = heapq.heappop(self._heap)
                fn(*args)


@dataclass
class NetConfig:
    delay_min_s: float = 0.0005
    delay_max_s: float = 0.02
    loss: float = 0.0
    duplicate: float = 0.0
    timeout_s: float = 3.0
    sync_interval_max_s: float = 0.01
    slow_sync: float = 0.0
    """Probability that one sync round stalls (a slow disk)."""
    slow_sync_max_s: float = 0.5
    spike: float = 0.0
    """Probability that one message is held up (a delay spike: heavy reordering)."""
    spike_max_s: float = 0.5


class SimBookie:
    def __init__(self, name: str) -> None:
        self.name = name
        self.store = MemoryLedgerStore(auto_sync=False)
        self.readonly = False
        self.core = BookieCore(self.store, is_readonly=lambda: self.readonly)
        self.disk = SimDisk(name)
        self.up = True
        self.epoch = 0
        self.in_flight: dict[int, _Call] = {}
        self.sync_scheduled = False


class _Call:
    __slots__ = ("answered", "callback")

    def __init__(self, callback: ResponseCallback) -> None:
        self.callback = callback
        self.answered = False

    def answer(self, answer: Response | TransportFailure) -> None:
        if not self.answered:
            self.answered = True
            self.callback(answer)


def describe(request: Request) -> str:
    if isinstance(request, AddRequest):
        return f"add{'R' if request.recovery else ''}:{request.entry_id}"
    if isinstance(request, ReadRequest):
        return f"read{'F' if request.fence else ''}:{request.entry_id}"
    return type(request).__name__


@dataclass
class SimNetwork:
    rng: random.Random
    scheduler: Scheduler
    trace: list[str]
    config: NetConfig = field(default_factory=NetConfig)
    bookies: dict[str, SimBookie] = field(default_factory=dict)
    partitions: set[tuple[str, str]] = field(default_factory=set)
    lost: set[str] = field(default_factory=set)
    """Bookies lost for good, or wiped and not rejoined yet: never restarted."""
    on_down: Callable[[str, int], None] | None = None
    """Called with (bookie, epoch) when a bookie crashes (its registration goes after the session timeout)."""
    on_up: Callable[[str], None] | None = None
    """Called when a crashed bookie restarts (it registers again)."""
    _tokens: itertools.count[int] = field(default_factory=itertools.count)

    def add_bookie(self, name: str) -> SimBookie:
        bookie = self.bookies[name] = SimBookie(name)
        return bookie

    def log(self, text: str) -> None:
        try:
            now = f"{trio.current_time():.6f}"
        except RuntimeError:  # outside the run (final checks)
            now = "end"
        self.trace.append(f"{now} {text}")

    # -- disks ---------------------------------------------------------------------------------------------

    def _schedule_sync(self, bookie: SimBookie) -> None:
        """Journal fsyncs happen only while writes wait for one (keeps idle time cheap)."""
        if bookie.sync_scheduled or not bookie.store.pending_count:
            return
        bookie.sync_scheduled = True
        cfg = self.config
        delay = self.rng.uniform(0.0, cfg.sync_interval_max_s)
        if self.rng.random() < cfg.slow_sync:
            delay += self.rng.uniform(0.0, cfg.slow_sync_max_s)
        self.scheduler.at(delay, self._sync, bookie)

    def _sync(self, bookie: SimBookie) -> None:
        bookie.sync_scheduled = False
        if bookie.up and bookie.store.pending_count:
            bookie.store.sync()
        self._schedule_sync(bookie)

    # -- faults --------------------------------------------------------------------------------------------

    def crash(self, name: str) -> None:
        bookie = self.bookies[name]
        if not bookie.up:
            return
        self.log(f"crash {name}")
        bookie.store.crash()
        bookie.up = False
        bookie.epoch += 1
        calls, bookie.in_flight = bookie.in_flight, {}
        for call in calls.values():
            self.scheduler.at(
                self._delay(), call.answer, TransportFailure(name, FailureReason.CLOSED, "crash")
            )
        if self.on_down is not None:
            self.on_down(name, bookie.epoch)

    def wipe(self, name: str) -> None:
        """Crash the bookie and give it an empty disk; it stays down (restarts skip it) until
        :meth:`rejoin` or :meth:`lose`."""
        self.crash(name)
        self.log(f"wipe {name}")
        bookie = self.bookies[name]
        bookie.store = MemoryLedgerStore(auto_sync=False)
        bookie.core = BookieCore(bookie.store, is_readonly=lambda: bookie.readonly)
        bookie.disk.wipe()
        self.lost.add(name)

    def rejoin(self, name: str) -> None:
        """The wiped bookie starts again under its old id."""
        self.lost.discard(name)
        self.restart(name)

    def lose(self, name: str, why: str = "destroyed for good") -> None:
        """The bookie never comes back: destroyed with its disk, or wiped and refused by its identity
        check. Down now (if it was not already), never restarted."""
        self.log(f"lost {name}: {why[:100]}")
        self.lost.add(name)
        self.crash(name)

    def restart(self, name: str) -> None:
        bookie = self.bookies[name]
        if name in self.lost:
            return
        if not bookie.up:
            self.log(f"restart {name}")
            bookie.up = True
            if self.on_up is not None:
                self.on_up(name)

    def heal(self) -> None:
        self.config.loss = 0.0
        self.config.duplicate = 0.0
        self.config.slow_sync = 0.0
        self.config.spike = 0.0
        self.partitions.clear()
        for name, bookie in self.bookies.items():
            self.restart(name)
            bookie.readonly = False

    def _delay(self) -> float:
        cfg = self.config
        delay = self.rng.uniform(cfg.delay_min_s, cfg.delay_max_s)
        if cfg.spike and self.rng.random() < cfg.spike:
            delay += self.rng.uniform(0.0, cfg.spike_max_s)
        return delay

    # -- the transport ---------------------------------------------------------------------------------------

    def send(self, client: str, name: str, request: Request, callback: ResponseCallback) -> None:
        call = _Call(callback)
        bookie = self.bookies.get(name)
        if bookie is None or not bookie.up:
            failure = TransportFailure(name, FailureReason.CONNECT, "down")
            self.scheduler.at(self._delay(), call.answer, failure)
            return
        if (client, name) in self.partitions or self.rng.random() < self.config.loss:
            timeout = TransportFailure(name, FailureReason.TIMEOUT, "lost")
            self.scheduler.at(self.config.timeout_s, call.answer, timeout)
            return
        self.scheduler.at(self._delay(), self._deliver, client, bookie, bookie.epoch, request, call)
        if self.rng.random() < self.config.duplicate:
            self.scheduler.at(self._delay() * 5, self._deliver, client, bookie, bookie.epoch, request, None)

    def _deliver(
        self, client: str, bookie: SimBookie, epoch: int, request: Request, call: _Call | None
    ) -> None:
        if not bookie.up or bookie.epoch != epoch:
            if call is not None:
                call.answer(TransportFailure(bookie.name, FailureReason.CLOSED, "connection broke"))
            return
        token = next(self._tokens)
        if call is not None:
            bookie.in_flight[token] = call
        self.log(f"{client}->{bookie.name} {describe(request)}{'' if call else ' (dup)'}")

        def respond(response: Response) -> None:
            if bookie.epoch != epoch or call is None:
                return
            if bookie.in_flight.pop(token, None) is None:
                return
            self.log(f"{bookie.name}->{client} {describe(request)} {response.status.name}")
            if (client, bookie.name) in self.partitions or self.rng.random() < self.config.loss:
                failure = TransportFailure(bookie.name, FailureReason.TIMEOUT, "response lost")
                self.scheduler.at(self.config.timeout_s, call.answer, failure)
                return
            self.scheduler.at(self._delay(), call.answer, response)

        bookie.core.handle(request, respond)
        self._schedule_sync(bookie)


@dataclass
class SimTransport:
    """One client's view of the network (``BookieTransport``)."""

    network: SimNetwork
    client: str

    def send(self, bookie: str, request: Request, callback: ResponseCallback) -> None:
        self.network.send(self.client, bookie, request, callback)

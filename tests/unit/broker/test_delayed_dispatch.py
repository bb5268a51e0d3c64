"""Delayed delivery in the dispatcher: a real subscription, cursor and dispatcher task over an in-memory
ledger, under trio's mock clock (time jumps; no test waits). Shared holds a delayed entry back until its
time and re-reads it then, Exclusive delivers at once, a full tracker stops the reading ahead, the policy
turned off releases what was held, and a rewind tracks the entries again without delivering any early."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import pytest
import trio
import trio.testing
from fixtures.subscription_fakes import Sink

from magnetar.bookkeeper.runtime import Clock, TrioClock
from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.delivery import Delivery, FlowControl
from magnetar.broker.core.dispatcher import SubscriptionType
from magnetar.broker.core.subscription import Subscription
from magnetar.broker.wire import StoredMessage, encode_entry
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.cursor_state import CursorState
from magnetar.managed_ledger.entry import Entry
from magnetar.managed_ledger.info import LedgerInfo
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.message_index import MessageIndex
from magnetar.managed_ledger.position import Position

if TYPE_CHECKING:
    from magnetar.managed_ledger.ledger import ManagedLedger

LEDGER = 7
ORIGIN_MS = 1_800_000_000_000
"""The wall clock when the test starts (the mock clock's 0)."""


class MemoryLedger:
    """What a cursor and a subscription ask of a managed ledger: one ledger of the given entries."""

    def __init__(self, entries: Sequence[bytes]) -> None:
        self.data = list(entries)
        self.ledgers = LedgerList([LedgerInfo(LEDGER, len(entries))])
        self.message_index = MessageIndex()
        for entry_id in range(len(entries)):
            self.message_index.append(Position(LEDGER, entry_id), 1)
        self.last_confirmed = Position(LEDGER, len(entries) - 1)
        self.is_terminated = False
        self.reads: list[tuple[int, int]] = []

    def now_ms(self) -> int:
        return 0

    async def read_entries(self, start: Position, count: int) -> list[Entry]:
        await trio.lowlevel.checkpoint()
        first = start.entry_id
        self.reads.append((first, count))
        return [
            Entry(Position(LEDGER, i), self.data[i]) for i in range(first, min(first + count, len(self.data)))
        ]


class Recorder(Sink):
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.got: list[tuple[bytes, int]] = []

    def deliver(self, delivery: Delivery, partition: int, redelivery_count: int) -> None:
        self.got.append((delivery.message.payload, self.clock.time_ms()))

    def deliver_many(
        self, deliveries: Sequence[Delivery], partition: int, redelivery_counts: Sequence[int] | None
    ) -> int:
        for delivery in deliveries:
            self.deliver(delivery, partition, 0)
        return len(deliveries)


def entry(payload: bytes, deliver_at_ms: int = 0) -> bytes:
    message = StoredMessage(payload, "p", 0, ORIGIN_MS)
    return encode_entry([message], ["p"], [0], [ORIGIN_MS], batched=False, deliver_at_ms=deliver_at_ms)


def at(seconds: float) -> int:
    return ORIGIN_MS + int(seconds * 1000)


def setup(
    entries: Sequence[bytes], sub_type: SubscriptionType, *, delayed_max: int = 100, read_max: int = 10
) -> tuple[Subscription, Recorder, MemoryLedger, TrioClock]:
    clock = TrioClock(ORIGIN_MS)
    ml = MemoryLedger(entries)
    cursor = ManagedCursor(
        cast("ManagedLedger", ml), "sub", CursorState(ml.ledgers, Position(LEDGER, -1)), None
    )
    sub = Subscription(
        "persistent://t/n/x", "sub", cursor, partition=-1, clock=clock, durable=True,
        read_entries_max=read_max, redelivery_max=100, delayed_max=delayed_max,
    )  # fmt: skip
    sub.dispatcher.set_delay_policy(True, 100)
    sink = Recorder(clock)
    consumer = Consumer(
        name="c", priority_level=0, partition=-1, flow=FlowControl(1000, pull_mode=False), sink=sink
    )
    sub.add_consumer(consumer, sub_type)
    return sub, sink, ml, clock


async def run_for(sub: Subscription, seconds: float) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sub.dispatcher.run)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()


ENTRIES = [entry(b"a"), entry(b"late", at(5)), entry(b"b"), entry(b"soon", at(2))]


@pytest.mark.parametrize("sub_type", [SubscriptionType.SHARED, SubscriptionType.KEY_SHARED])
async def test_shared_holds_delayed_entries_until_their_time(
    autojump_clock: trio.testing.MockClock, sub_type: SubscriptionType
) -> None:
    sub, sink, _, _ = setup(ENTRIES, sub_type)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sub.dispatcher.run)
        await trio.sleep(1)
        assert [p for p, _ in sink.got] == [b"a", b"b"]
        assert sub.stats()["msgDelayed"] == 2
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    assert [p for p, _ in sink.got] == [b"a", b"b", b"soon", b"late"]
    times = dict(sink.got)
    assert at(2) <= times[b"soon"] <= at(2) + 100  # never early, at most a tick late
    assert at(5) <= times[b"late"] <= at(5) + 100
    assert sub.stats()["msgDelayed"] == 0


@pytest.mark.parametrize("sub_type", [SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER])
async def test_single_active_types_deliver_at_once(
    autojump_clock: trio.testing.MockClock, sub_type: SubscriptionType
) -> None:
    sub, sink, _, _ = setup(ENTRIES, sub_type)
    await run_for(sub, 0.5)
    assert [p for p, _ in sink.got] == [b"a", b"late", b"b", b"soon"]
    assert sub.stats()["msgDelayed"] == 0


async def test_a_full_tracker_stops_the_reading_ahead(autojump_clock: trio.testing.MockClock) -> None:
    entries = [entry(b"d1", at(3)), entry(b"d2", at(4)), entry(b"d3", at(9)), entry(b"plain")]
    sub, sink, ml, _ = setup(entries, SubscriptionType.SHARED, delayed_max=2, read_max=1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sub.dispatcher.run)
        await trio.sleep(1)
        assert sink.got == []
        assert sub.stats()["msgDelayed"] == 2  # full: d3 and what follows are not read yet
        assert [first for first, _ in ml.reads] == [0, 1]
        await trio.sleep(20)
        nursery.cancel_scope.cancel()
    times = dict(sink.got)
    # d1 due: d3 is read (full again); d2 due: plain is read at last
    assert [p for p, _ in sink.got] == [b"d1", b"d2", b"plain", b"d3"]
    assert times[b"plain"] >= at(4)
    assert times[b"d3"] >= at(9)


async def test_turning_the_policy_off_releases_what_is_held(autojump_clock: trio.testing.MockClock) -> None:
    sub, sink, _, _ = setup(ENTRIES, SubscriptionType.SHARED)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sub.dispatcher.run)
        await trio.sleep(1)
        sub.dispatcher.set_delay_policy(False, 100)
        await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert [p for p, _ in sink.got] == [b"a", b"b", b"late", b"soon"]
    assert all(t < at(1.1) for _, t in sink.got)


async def test_a_rewind_tracks_again_and_delivers_nothing_early(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sub, sink, _, _ = setup(ENTRIES, SubscriptionType.SHARED)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sub.dispatcher.run)
        await trio.sleep(1)
        sub.cursor_moved()  # as an admin skip or a reset does: everything in flight dropped, read again
        await trio.sleep(0.5)
        assert sub.stats()["msgDelayed"] == 2
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    late = [t for p, t in sink.got if p in (b"late", b"soon")]
    assert len(late) == 2
    assert min(late) >= at(2)


async def test_an_undelayed_subscription_reads_as_before(autojump_clock: trio.testing.MockClock) -> None:
    sub, sink, ml, _ = setup([entry(b"x"), entry(b"y")], SubscriptionType.SHARED)
    await run_for(sub, 0.5)
    assert [p for p, _ in sink.got] == [b"x", b"y"]
    assert sub.dispatcher.delayed is None  # no tracker made
    assert ml.reads == [(0, 10)]  # one read of up to read_entries_max, as before


class FailingOnce(Recorder):
    """A sink whose first delivery raises: a fault of the broker's own code in a dispatch round."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.failed = False

    def deliver(self, delivery: Delivery, partition: int, redelivery_count: int) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("a bug in a dispatch round")
        super().deliver(delivery, partition, redelivery_count)


async def test_a_fault_in_a_round_disconnects_the_consumers_not_the_broker() -> None:
    """Not specific to delayed delivery: an unexpected exception in a dispatch round ends the subscription's
    sessions (each consumer's ``disconnect``) and rewinds it; the dispatcher task goes on, so the process and
    every other topic stay up, and a consumer that subscribes again gets every message."""
    sub, _, _, clock = setup([entry(b"a"), entry(b"b")], SubscriptionType.SHARED)
    (first,) = sub.consumers
    sub.remove_consumer(first)
    failing = FailingOnce(clock)
    consumer = Consumer(
        name="c1", priority_level=0, partition=-1, flow=FlowControl(1000, pull_mode=False), sink=failing
    )
    reasons: list[str] = []
    consumer.disconnect = reasons.append
    sub.add_consumer(consumer, SubscriptionType.SHARED)
    await run_for(sub, 1)  # would raise out of the nursery without the guard
    assert reasons == ["Internal error while dispatching: subscribe again"]
    sub.remove_consumer(consumer)
    again = Recorder(clock)
    sub.add_consumer(
        Consumer(
            name="c2", priority_level=0, partition=-1, flow=FlowControl(1000, pull_mode=False), sink=again
        ),
        SubscriptionType.SHARED,
    )
    await run_for(sub, 1)
    assert [payload for payload, _ in again.got] == [b"a", b"b"]

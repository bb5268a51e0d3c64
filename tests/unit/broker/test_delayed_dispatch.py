"""Delayed delivery in the dispatcher: a real subscription, cursor and dispatcher task over an in-memory
ledger, under trio's mock clock (time jumps; no test waits). Shared holds a delayed entry back until its
time and re-reads it then, Exclusive delivers at once, a full tracker stops the reading ahead, the policy
turned off releases what was held, and a rewind tracks the entries again without delivering any early."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing
from fixtures.dispatch_harness import Recorder, at, entry, run_for, setup

from magnetar.bookkeeper.runtime import Clock
from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.delivery import Delivery, FlowControl
from magnetar.broker.core.dispatcher import SubscriptionType

if TYPE_CHECKING:
    pass

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

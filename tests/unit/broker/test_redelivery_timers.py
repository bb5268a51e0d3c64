"""The core's redelivery timers (broker/core/redelivery_timers.py): they sleep while no consumer needs them,
a scheduled negative ack wakes them, and while some consumer needs them they call ``redeliver_due`` every
tick (``consumer_ack_timeout_tick_ms``). Virtual time (trio's MockClock), no sockets."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.delivery import FlowControl
from magnetar.broker.core.redelivery_timers import RedeliveryTimers


class _Sink:
    def deliver(self, delivery: Any, partition: int, redelivery_count: int) -> None:
        raise AssertionError("nothing is delivered here")

    def deliver_many(self, deliveries: Any, partition: int, redelivery_counts: Any) -> int:
        raise AssertionError("nothing is delivered here")

    def room(self) -> int:
        return 100

    def add_listener(self, listener: Any) -> None:
        pass


class _Subscriber:
    """What the timers use of a :class:`~magnetar.broker.core.subscriber.Subscriber`."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.due_at: list[float] = []

    @property
    def needs_timers(self) -> bool:
        return self.consumer.needs_timers

    def redeliver_due(self, now: float) -> None:
        self.due_at.append(now)
        self.consumer.due_redeliveries(now)


def _consumer(ack_timeout_ms: int = 0, nack_delay_ms: int = 1000) -> Consumer:
    return Consumer(
        name="c",
        priority_level=0,
        partition=-1,
        flow=FlowControl(10, pull_mode=False),
        sink=_Sink(),  # type: ignore[arg-type]
        ack_timeout_ms=ack_timeout_ms,
        nack_delay_ms=nack_delay_ms,
    )


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_a_negative_ack_wakes_the_timers_and_they_sleep_again_once_it_is_due(
    clock: trio.testing.MockClock,
) -> None:
    subscriber = _Subscriber(_consumer(nack_delay_ms=1000))
    timers = RedeliveryTimers([subscriber], tick_ms=100)  # type: ignore[list-item]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(timers.run)
        await trio.sleep(60)
        assert subscriber.due_at == []  # nothing needs a timer: no tick at all
        start = trio.current_time()
        subscriber.consumer.schedule_nack(object())  # type: ignore[arg-type]
        await trio.sleep(1.05)
        ticks = [round(t - start, 3) for t in subscriber.due_at]
        assert ticks == [round(0.1 * i, 3) for i in range(1, 11)]  # every tick until the nack was due
        assert not subscriber.consumer.nacked
        await trio.sleep(60)
        assert len(subscriber.due_at) == 10  # asleep again
        nursery.cancel_scope.cancel()


async def test_an_ack_timeout_keeps_the_timers_ticking(clock: trio.testing.MockClock) -> None:
    subscriber = _Subscriber(_consumer(ack_timeout_ms=5000))
    timers = RedeliveryTimers([subscriber], tick_ms=250)  # type: ignore[list-item]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(timers.run)
        await trio.sleep(1.1)
        assert len(subscriber.due_at) == 4
        nursery.cancel_scope.cancel()


async def test_timers_hook_every_consumer_of_the_session() -> None:
    subscribers = [_Subscriber(_consumer()) for _ in range(3)]
    timers = RedeliveryTimers(subscribers, tick_ms=100)  # type: ignore[arg-type]
    assert all(s.consumer.wake_timers == timers.wake for s in subscribers)

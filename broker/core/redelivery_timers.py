"""The redelivery timers of one client session: ack timeouts and negative acks, next to the consumers'
redelivery state (:class:`~.consumer.Consumer`), so no protocol adapter runs a timer.

A session's :class:`RedeliveryTimers` runs as one task beside the session. While none of its consumers needs
a timer (no ``ackTimeoutMillis``, nothing negatively acknowledged) it sleeps on an event; a negative ack
wakes it (the consumer calls :attr:`~.consumer.Consumer.wake_timers` when it schedules one). While some
consumer needs one, it checks every ``consumer_ack_timeout_tick_ms``: due negative acks and messages past
their ack timeout go back for redelivery (:meth:`~.subscriber.Subscriber.redeliver_due`).
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from magnetar.broker.core.subscriber import Subscriber


class RedeliveryTimers:
    """Ack-timeout and negative-ack redelivery for the consumers of one session (one per partition)."""

    def __init__(self, subscribers: Sequence[Subscriber], tick_ms: int) -> None:
        self._subscribers = subscribers
        self._tick_s = tick_ms / 1000
        self._wakeup = trio.Event()
        for subscriber in subscribers:
            subscriber.consumer.wake_timers = self.wake

    def wake(self) -> None:
        """Something may need a timer now (a negative ack was scheduled)."""
        self._wakeup.set()

    async def run(self) -> None:
        """Check every tick while some consumer needs it, sleep until woken otherwise; until cancelled."""
        while True:
            if not any(subscriber.needs_timers for subscriber in self._subscribers):
                self._wakeup = trio.Event()
                await self._wakeup.wait()
                continue
            await trio.sleep(self._tick_s)
            now = trio.current_time()
            for subscriber in self._subscribers:
                subscriber.redeliver_due(now)

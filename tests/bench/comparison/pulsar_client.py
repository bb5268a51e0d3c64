"""Apache's ``pulsar-client`` (C++ core, Python binding) as the harness's client over Pulsar's binary
protocol, for every system that speaks it - pulsar-lite and Magnetar's binary port - so they are measured
with the same client, driven the same way.

Publisher: ``send_async`` without batching (each message its own entry, as Magnetar's WebSocket producer
sends them), ``max_pending_messages`` at least the harness's window; the client's callback thread hands each
ack back to the event loop (``call_soon_threadsafe``). Consumer: Exclusive subscription from the earliest
message, receiver queue 1000; a worker thread waits for a message and drains what else is already queued
(up to 1000), the event loop handles the batch and acknowledges each message.

A system subclasses :class:`PulsarClientDriver` and sets :attr:`~PulsarClientDriver.service_url` once its
server serves.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
from bench.comparison.system import AckSink, PayloadSink, Publisher
from fixtures.pulsar_receive import receive_batch

RECEIVE_WAIT_MS = 200
DRAIN_MAX = 1000
RECEIVER_QUEUE_SIZE = 1000
SUBSCRIPTION = "bench"
CONSUME_MODE = "pulsar-client Exclusive subscription, every message acknowledged"


def client_missing() -> str | None:
    """Why the client cannot be used, or None."""
    if importlib.util.find_spec("pulsar") is None:
        return "pulsar-client is not installed (pip install -e '.[bench]')"
    return None


def client_version() -> str:
    from importlib.metadata import version

    return f"pulsar-client {version('pulsar-client')} (Pulsar binary protocol)"


class _PulsarPublisher:
    def __init__(self, producer: Any, on_ack: AckSink, loop: asyncio.AbstractEventLoop) -> None:
        self.producer = producer
        self.on_ack = on_ack
        self.loop = loop

    async def send_many(self, messages: Sequence[tuple[int, bytes]]) -> None:
        for seq, payload in messages:
            self.producer.send_async(payload, partial(self._sent, seq))

    def _sent(self, seq: int, result: Any, _message_id: Any) -> None:
        import pulsar

        self.loop.call_soon_threadsafe(self.on_ack, seq, result == pulsar.Result.Ok)


class PulsarClientDriver:
    """The publisher and consumer of a system served at :attr:`service_url` (see the module docstring)."""

    backend = "asyncio"
    consume_mode = CONSUME_MODE

    def __init__(self, window: int) -> None:
        self.window = window
        self.service_url = ""
        """``pulsar://host:port``, set by the system's ``start``."""

    def _client(self) -> Any:
        import pulsar

        return pulsar.Client(self.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))

    @asynccontextmanager
    async def publisher(self, topic: str, on_ack: AckSink) -> AsyncIterator[Publisher]:
        client = self._client()
        try:
            # The consumer's subscription exists before the first message, as a Pulsar user would have it:
            # without one, a broker that deletes what no subscription needs (Pulsar's rule with no retention,
            # Magnetar's too) drops every ledger rolled over during the publish phase (50,000 unbatched
            # messages each) before the consume phase subscribes.
            await anyio.to_thread.run_sync(_create_subscription, client, topic)
            producer = await anyio.to_thread.run_sync(
                partial(
                    client.create_producer,
                    topic,
                    batching_enabled=False,
                    max_pending_messages=self.window * 2,
                    block_if_queue_full=True,
                )
            )
            yield _PulsarPublisher(producer, on_ack, asyncio.get_running_loop())
            await anyio.to_thread.run_sync(producer.flush)
        finally:
            await anyio.to_thread.run_sync(client.close)

    async def consume(
        self,
        topic: str,
        on_payload: PayloadSink,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        import pulsar

        client = self._client()
        try:
            consumer = await anyio.to_thread.run_sync(
                partial(
                    client.subscribe,
                    topic,
                    SUBSCRIPTION,
                    consumer_type=pulsar.ConsumerType.Exclusive,
                    initial_position=pulsar.InitialPosition.Earliest,
                    receiver_queue_size=RECEIVER_QUEUE_SIZE,
                )
            )
            task_status.started()
            more = True
            while more:
                batch = await anyio.to_thread.run_sync(
                    receive_batch, consumer, RECEIVE_WAIT_MS, DRAIN_MAX, abandon_on_cancel=True
                )
                for message in batch:
                    more = on_payload(message.data())
                    consumer.acknowledge(message)
                    if not more:
                        break
        finally:
            await anyio.to_thread.run_sync(client.close)


def _create_subscription(client: Any, topic: str) -> None:
    """The bench's durable subscription at the earliest position, left without a consumer (already attached,
    as in the end-to-end phase, it exists: nothing to do)."""
    import pulsar

    try:
        consumer = client.subscribe(
            topic,
            SUBSCRIPTION,
            consumer_type=pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Earliest,
        )
    except pulsar.ConsumerBusy:
        return
    consumer.close()

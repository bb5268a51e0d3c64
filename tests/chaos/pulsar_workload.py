"""The failure suite's workload over Pulsar's binary protocol, driven by the official ``pulsar-client``.

The same contract as :class:`~chaos.workload.Workload` (whose bookkeeping it inherits: the checker, the
``subscribed`` events, ``stop_producing``, ``wait_until``), with the client doing what the WebSocket workload
does by hand: it is given every broker's ``pulsar://`` address (a multi-host service URL), looks the topic's
owner up, and reconnects by itself - to the new owner - when its broker dies.

* A producer (one client each) publishes ``rate_per_s`` messages a second, each ``{"p": name, "s": seq}``,
  in the client's batches (at most :data:`BATCH_MESSAGES_MAX` messages or :data:`BATCH_DELAY_MS` each, so
  an owner dies with batches in flight and consumers receive, acknowledge and get redelivered batch
  entries), with up to ``window`` unacknowledged and the client's send timeout ``send_timeout_s``. The
  client's callback (on its own thread) is handed to the trio loop: ``Ok`` is an acknowledged publish, with
  the message id the broker gave; anything else (the send timed out, the producer closed) leaves that
  message with an unknown outcome. What the client resends after a reconnect is its business: a resend
  that gets stored twice is a duplicate, which the checker counts and allows.
* A consumer (one client each) holds one Exclusive durable subscription created at the earliest position;
  a worker thread waits for a message and drains what else is queued, the loop tells the checker and
  acknowledges each. A *late* consumer subscribes at the start, closes, and subscribes again at the drain.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import pulsar
import trio
from chaos.checker import Checker, payload_for
from chaos.workload import ProducerSpec, Workload
from fixtures.pulsar_receive import receive_batch

log = logging.getLogger("chaos.pulsar_workload")

OPERATION_TIMEOUT_S = 10
RECEIVE_WAIT_MS = 200
DRAIN_MAX = 500
BATCH_MESSAGES_MAX = 20
"""Messages of one client batch (the producer publishes a few hundred a second: batches of several)."""
BATCH_DELAY_MS = 10
"""How long the client gathers a batch."""
RETRY_DELAY_S = 0.5
BROKER = "pulsar-client"
"""What the checker records as the acknowledging broker: the client does not say which one stored it."""


class PulsarWorkload(Workload):
    def __init__(
        self,
        checker: Checker,
        binary_urls: Callable[[], list[str]],
        topic: str,
        producers: list[ProducerSpec],
        *,
        idle_s: float = 4.0,
        named: bool = False,
    ) -> None:
        super().__init__(checker, binary_urls, topic, producers, idle_s=idle_s)
        self.full_topic = f"persistent://public/default/{topic}"
        self.named = named
        """Each producer takes its spec's name (the key of message deduplication), sends unbatched with
        explicit sequence ids (``seq + 1``: the Python client sends none for 0) and, once a message is
        acknowledged, sends it again with the same sequence id - a client resending what it never saw
        acknowledged, as after a lost receipt: a deduplicating topic stores none of these copies, before or
        after a failover (the new owner recovers the state). The copies are not the checker's: stored, they
        are duplicates in a late subscription."""

    def _client(self) -> Any:
        hosts = ",".join(url.removeprefix("pulsar://") for url in self.broker_urls())
        return pulsar.Client(
            f"pulsar://{hosts}",
            operation_timeout_seconds=OPERATION_TIMEOUT_S,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
        )

    async def _until_done(self, name: str, attempt: Callable[[], Any]) -> Any:
        """``attempt()`` in a thread until it succeeds (the cluster may not serve yet, or lost a broker)."""
        while True:
            try:
                return await trio.to_thread.run_sync(attempt)
            except pulsar.PulsarException as exc:
                self.stats.count(self.stats.connect_failures, name)
                log.info("%s: %s; retrying", name, exc)
                await trio.sleep(RETRY_DELAY_S)

    # -- producers --------------------------------------------------------------------------------------

    async def run_producer(self, spec: ProducerSpec) -> None:
        token = trio.lowlevel.current_trio_token()
        client = await trio.to_thread.run_sync(self._client)
        pending: set[int] = set()
        room = trio.Event()

        def answered(seq: int, result: Any, message_id: str) -> None:  # on the trio thread
            pending.discard(seq)
            if result == pulsar.Result.Ok:
                self.checker.acked(spec.name, seq, message_id, BROKER)
                if self.named and not self.stop_producing.is_set():
                    resend(seq)
            else:
                self.checker.failed(spec.name, seq, str(result))
            room.set()
            self._notify()

        def resent(result: Any, message_id: Any) -> None:  # on a client thread; any answer will do
            pass

        def resend(seq: int) -> None:
            payload = payload_for(spec.name, seq).encode()
            with contextlib.suppress(pulsar.PulsarException):  # the producer closed meanwhile
                producer.send_async(payload, resent, sequence_id=seq + 1)

        def callback(seq: int, result: Any, message_id: Any) -> None:  # on a client thread
            with contextlib.suppress(trio.RunFinishedError):  # the scenario is over: nobody counts any more
                token.run_sync_soon(answered, seq, result, str(message_id))

        try:
            producer = await self._until_done(
                spec.name,
                partial(
                    client.create_producer,
                    self.full_topic,
                    # acks, ids and redelivery per batch index; unbatched when resending (a batch takes
                    # the sequence ids of its first and last message: a resend inside one would be
                    # stored with the new messages around it)
                    batching_enabled=not self.named,
                    batching_max_messages=BATCH_MESSAGES_MAX,
                    batching_max_publish_delay_ms=BATCH_DELAY_MS,
                    send_timeout_millis=int(spec.send_timeout_s * 1000),
                    block_if_queue_full=False,
                    **({"producer_name": spec.name} if self.named else {}),
                ),
            )
            self.stats.count(self.stats.sessions, spec.name)
            seq = 0
            while not self.stop_producing.is_set():
                while len(pending) >= spec.window:
                    room = trio.Event()
                    await room.wait()
                self.checker.sent(spec.name, seq)
                pending.add(seq)
                payload = payload_for(spec.name, seq).encode()
                explicit = {"sequence_id": seq + 1} if self.named else {}
                producer.send_async(payload, partial(callback, seq), **explicit)
                seq += 1
                await trio.sleep(1 / spec.rate_per_s)
            while pending:  # every message answered: acknowledged, or failed by the client's send timeout
                room = trio.Event()
                await room.wait()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(client.close)

    # -- consumers --------------------------------------------------------------------------------------

    def _subscribe(self, client: Any, subscription: str) -> Any:
        return client.subscribe(
            self.full_topic,
            subscription,
            consumer_type=pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Earliest,
        )

    async def run_consumer(self, subscription: str, late: trio.Event | None = None) -> None:
        client = await trio.to_thread.run_sync(self._client)
        try:
            consumer = await self._until_done(subscription, partial(self._subscribe, client, subscription))
            self.stats.count(self.stats.sessions, subscription)
            self.subscribed[subscription].set()
            if late is not None:
                await trio.to_thread.run_sync(consumer.close)
                await late.wait()
                subscribe = partial(self._subscribe, client, subscription)
                consumer = await self._until_done(subscription, subscribe)
            while True:
                messages = await trio.to_thread.run_sync(
                    receive_batch, consumer, RECEIVE_WAIT_MS, DRAIN_MAX, abandon_on_cancel=True
                )
                for message in messages:
                    self.checker.delivered(subscription, message.data(), str(message.message_id()))
                    consumer.acknowledge(message)
                if messages:
                    self._notify()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(client.close)

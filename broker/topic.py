"""A persistent topic (Pulsar's ``PersistentTopic``): a managed ledger, its producers and subscriptions.

Publishing. Messages are appended in arrival order. Each becomes a :class:`~.entry_format.StoredMessage`
(payload, key, properties, event time, publish time, producer name, sequence id). When nothing is in flight
to the bookies a message is written at once as an entry of its own; otherwise arriving messages gather in
one batch, written as a single entry when an in-flight entry completes, or earlier - pipelined next to the
entries in flight, up to ``publish_inflight_entries_max`` of them - once the batch holds
``publish_pipeline_batch_messages_min`` messages (or a quarter of ``publish_batch_bytes_max``), and at once
when it reaches ``publish_batch_messages_max`` messages or ``publish_batch_bytes_max`` bytes. So a quiet topic
writes one message per entry (lowest latency), a topic at a moderate rate writes one batch per bookie round
trip (little CPU per message, hence a short tail on a busy host), and a saturated one pipelines full batches
(throughput). Every message of a batch keeps its own id ``(ledger, entry, batchIndex)`` and is acknowledged
individually (see :mod:`.subscription`). Binary producers' runs (:mod:`.binary_producer`) follow the same
rules, with consecutive runs of one producer merged into one entry.

Closing. :meth:`PersistentTopic.close` (unload, shutdown) stops accepting messages, writes what it had
accepted (the batch being built included) and waits for those writes, so every message already handed to the
topic is answered as what it is - stored (its receipt) or failed - before the sessions close with 1001 (so
clients look the topic up again) and the managed ledger closes cleanly (cursor positions persisted). A
message that arrives once the close has begun is refused, and only it: a client that resends what was
refused creates no duplicate. :meth:`fence_now` is the synchronous stop for a lost bundle: from that instant
nothing more is accepted or dispatched; messages not yet written fail, writes already in flight are left to
finish (their outcome is unknown: the sessions close without it).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from magnetar.bookkeeper.client import BKError
from magnetar.bookkeeper.metadata import MetadataStoreError
from magnetar.bookkeeper.runtime import Clock
from magnetar.bookkeeper.runtime.http import CLOSE_GOING_AWAY
from magnetar.broker.consumer import Consumer, MsgKey
from magnetar.broker.dispatcher import SubscriptionType
from magnetar.broker.entry_format import decode_entry, encode_batch, encode_compact_batch, encode_message
from magnetar.broker.errors import (
    ProducerBusyError,
    ServiceUnitNotReadyError,
    SubscriptionBusyError,
    TopicClosedError,
    TopicNotFoundError,
    TopicTerminatedError,
)
from magnetar.broker.message_id import EARLIEST, LATEST, MessageId
from magnetar.broker.metrics import TopicMetrics
from magnetar.broker.producer import PendingEntry, PendingMessage, Producer
from magnetar.broker.rates import Rate
from magnetar.broker.settings import BrokerSettings
from magnetar.broker.subscription import BATCH_INDEX_AFTER_ALL, Subscription
from magnetar.broker.topic_name import TopicName
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.errors import (
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerTerminatedError,
)
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.stats import internal_stats

log = logging.getLogger(__name__)


class PersistentTopic:
    def __init__(
        self,
        name: TopicName,
        ml: ManagedLedger,
        settings: BrokerSettings,
        clock: Clock,
        metrics: TopicMetrics,
        *,
        on_fenced: Callable[[PersistentTopic], None] = lambda topic: None,
        close_ml: Callable[[], Awaitable[None]] | None = None,
        metadata_ready: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.name = name
        self.ml = ml
        self._settings = settings
        self._clock = clock
        self.metrics = metrics
        self._on_fenced = on_fenced
        self._close_ml = close_ml or ml.close
        self._metadata_ready = metadata_ready
        """Waits (bounded) for the metadata store during an outage; raises 503 if it stays away."""
        self.partition = name.partition_index
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.rate_in = Rate()
        self._batch: list[PendingMessage] = []
        self._batch_bytes = 0
        self._runs: list[PendingEntry] = []
        """Binary producers' runs waiting to be written (batched as JSON messages are)."""
        self._runs_messages = 0
        self._runs_bytes = 0
        self._inflight = 0
        self._drained = trio.Event()
        self._drained.set()
        self.closed = False
        self._nursery: trio.Nursery | None = None
        self._stopped = trio.Event()

    @property
    def full_name(self) -> str:
        return str(self.name)

    def now_ms(self) -> int:
        return self._clock.time_ms()

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The topic's dispatchers live in this nursery; it ends when the topic is closed."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for cursor_name, cursor in list(self.ml.cursors.items()):
                self._add_subscription(cursor_name, cursor, durable=True)
            task_status.started()
            await self._stopped.wait()
            nursery.cancel_scope.cancel()

    def fence_now(self, reason: str) -> None:
        """Stop at once: refuse messages, stop dispatching, close every session (see the module doc)."""
        if self.closed:
            return
        self.closed = True
        log.info("topic %s closing: %s", self.name, reason)
        self._fail_waiting(reason)
        self._disconnect(reason)

    def _fail_waiting(self, reason: str) -> None:
        """Fail the messages accepted but not written yet (and, per producer, those sent after them)."""
        waiting: list[PendingMessage | PendingEntry] = [*self._batch, *self._runs]
        for pending in waiting:
            pending.producer.on_failed(pending, f"Topic {self.name} is closing: {reason}")
        self._batch, self._runs = [], []
        self._batch_bytes = self._runs_messages = self._runs_bytes = 0

    def _disconnect(self, reason: str) -> None:
        """Close every producer and subscription and end their sessions with 1001."""
        for producer in list(self.producers.values()):
            producer.close()
            if producer.kick is not None:
                producer.kick(CLOSE_GOING_AWAY, reason)
        for subscription in list(self.subscriptions.values()):
            subscription.close()
            for consumer in list(subscription.consumers):
                if consumer.kick is not None:
                    consumer.kick(CLOSE_GOING_AWAY, reason)

    async def close(self, reason: str = "Topic unloaded") -> None:
        """Clean close: write what was accepted and wait for it (each message answered, see the module doc),
        then close the sessions and the managed ledger (cursors persisted)."""
        timeout_s = self._settings.metadata_operation_timeout_ms / 1000
        if not self.closed:
            self.closed = True  # from here on publish() refuses new messages
            log.info("topic %s closing: %s", self.name, reason)
            self._write_waiting()
            with trio.move_on_after(timeout_s):
                await self._drained.wait()
            self._fail_waiting(reason)  # nothing, unless a write could not even be started
            self._disconnect(reason)
        with trio.move_on_after(timeout_s):
            await self._drained.wait()
        try:
            await self._close_ml()
        except (ManagedLedgerError, BKError, MetadataStoreError, trio.TooSlowError) as exc:
            log.warning("topic %s: closing its managed ledger failed: %s", self.name, exc)
        self.stop()

    def stop(self) -> None:
        """End the topic's dispatcher tasks (after :meth:`fence_now`)."""
        self._stopped.set()

    def _check_open(self) -> None:
        if self.closed:
            raise TopicClosedError(f"Topic {self.name} is being unloaded")

    # -- publishing -----------------------------------------------------------------------------

    def add_producer(self, name: str, producer_factory: Callable[[], Producer]) -> Producer:
        self._check_open()
        if self.ml.is_terminated:
            raise TopicTerminatedError(f"Topic {self.name} was terminated")
        if name in self.producers:
            raise ProducerBusyError(f"Producer with name '{name}' is already connected to topic")
        producer = producer_factory()
        self.producers[name] = producer
        return producer

    def remove_producer(self, producer: Producer) -> None:
        producer.close()
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]

    def publish(self, pending: PendingMessage) -> None:
        if self.closed:
            pending.producer.on_failed(pending, f"Topic {self.name} is being unloaded")
            return
        size = len(pending.message.payload)
        settings = self._settings
        if self._batch and self._batch_bytes + size > settings.publish_batch_bytes_max:
            self._flush()
        self._batch.append(pending)
        self._batch_bytes += size
        if self._may_flush() or len(self._batch) >= settings.publish_batch_messages_max:
            self._flush()

    def _may_flush(self) -> bool:
        """Whether the batch being built may be written now (see the module's docstring)."""
        return self._may_write(len(self._batch), self._batch_bytes)

    def _may_write(self, messages: int, payload_bytes: int) -> bool:
        if self._inflight == 0:
            return True
        settings = self._settings
        return self._inflight < settings.publish_inflight_entries_max and (
            messages >= settings.publish_pipeline_batch_messages_min
            or payload_bytes * 4 >= settings.publish_batch_bytes_max
        )

    def _flush(self) -> None:
        batch = [p for p in self._batch if not p.failed]
        self._batch = []
        self._batch_bytes = 0
        if not batch:
            return
        if len(batch) == 1:
            data = encode_message(batch[0].message)
        else:
            data = encode_batch([p.message for p in batch])
        self._inflight += 1
        self._drained = trio.Event() if self._drained.is_set() else self._drained

        def on_added(result: Position | ManagedLedgerError) -> None:
            self._on_added(batch, result, len(data))

        self.ml.add_entry_nowait(data, on_added)

    def publish_entry(self, pending: PendingEntry) -> None:
        """A binary producer's run (messages already laid out as in an entry), batched like JSON messages:
        written at once when nothing is in flight, else merged into one entry with the runs that arrive
        meanwhile - consecutive runs of the same producer, within the batch limits."""
        if self.closed:
            pending.producer.on_failed(pending, f"Topic {self.name} is being unloaded")
            return
        self._runs.append(pending)
        self._runs_messages += pending.run.messages
        self._runs_bytes += pending.run.payload_bytes
        if (
            self._may_write(self._runs_messages, self._runs_bytes)
            or self._runs_messages >= self._settings.publish_batch_messages_max
        ):
            self._write_runs()

    def _write_waiting(self) -> None:
        """Write everything accepted and not written yet, whatever the pipeline holds (closing)."""
        if self._batch:
            self._flush()
        if self._runs:
            self._write_runs(force=True)

    def _write_runs(self, *, force: bool = False) -> None:
        """Write the waiting runs, grouped, in arrival order; a group stops the writing (it and the groups
        after it wait again) unless the pipeline has room for it, it is full, or ``force``."""
        groups = self._group_runs([run for run in self._runs if not run.failed])
        self._runs = []
        self._runs_messages = self._runs_bytes = 0
        for index, (group, messages, payload_bytes, full) in enumerate(groups):
            if not force and not full and not self._may_write(messages, payload_bytes):
                for waiting, count, size, _ in groups[index:]:
                    self._runs += waiting
                    self._runs_messages += count
                    self._runs_bytes += size
                return
            self._write_group(group)

    def _group_runs(self, runs: list[PendingEntry]) -> list[tuple[list[PendingEntry], int, int, bool]]:
        """Consecutive runs of one producer within the batch limits: (runs, messages, bytes, full)."""
        settings = self._settings
        groups: list[tuple[list[PendingEntry], int, int, bool]] = []
        group: list[PendingEntry] = []
        messages = payload_bytes = 0
        for pending in runs:
            count, size = pending.run.messages, pending.run.payload_bytes
            if group:
                over = (
                    messages + count > settings.publish_batch_messages_max
                    or payload_bytes + size > settings.publish_batch_bytes_max
                )
                if over or pending.producer is not group[0].producer:
                    groups.append((group, messages, payload_bytes, over))
                    group, messages, payload_bytes = [], 0, 0
            group.append(pending)
            messages += count
            payload_bytes += size
        if group:
            full = messages >= settings.publish_batch_messages_max
            groups.append((group, messages, payload_bytes, full))
        return groups

    def _write_group(self, group: list[PendingEntry]) -> None:
        """One compact entry for runs of one producer: their sequence ids follow each other (runs queue in
        order), and their messages are stored as they arrived."""
        first = group[0]
        size = sum(pending.run.messages for pending in group)
        data = encode_compact_batch(
            first.producer.name,
            first.first_sequence_id,
            self.now_ms(),
            size,
            [pending.run.body for pending in group],
        )
        self._inflight += 1
        self._drained = trio.Event() if self._drained.is_set() else self._drained

        def on_added(result: Position | ManagedLedgerError) -> None:
            self._on_group_added(group, size, len(data), result)

        self.ml.add_entry_nowait(data, on_added)

    def _on_group_added(
        self, group: list[PendingEntry], size: int, data_bytes: int, result: Position | ManagedLedgerError
    ) -> None:
        self._inflight -= 1
        if isinstance(result, Position):
            index = 0
            for pending in group:
                pending.producer.on_entry_stored(pending, result.ledger_id, result.entry_id, index, size)
                index += pending.run.messages
            latency = trio.current_time() - group[0].received_at
            self.metrics.on_messages_stored(size, data_bytes, latency)
            for subscription in self.subscriptions.values():
                subscription.dispatcher.wake()
        else:
            self._on_add_failed(group, result)
        self._after_add()

    def _on_add_failed(
        self, batch: Sequence[PendingMessage | PendingEntry], result: ManagedLedgerError
    ) -> None:
        reason = _describe_failure(result)
        for pending in batch:
            pending.producer.on_failed(pending, reason)
        if isinstance(result, ManagedLedgerFencedError) and not self.closed:
            log.warning("topic %s: managed ledger fenced by another owner", self.name)
            self._on_fenced(self)

    def _after_add(self) -> None:
        if self._batch and not self.closed and self._may_flush():
            self._flush()
        if self._runs and not self.closed and self._may_write(self._runs_messages, self._runs_bytes):
            self._write_runs()
        if self._inflight == 0:
            self._drained.set()

    def _on_added(
        self, batch: list[PendingMessage], result: Position | ManagedLedgerError, size: int
    ) -> None:
        self._inflight -= 1
        now = trio.current_time()
        if isinstance(result, Position):
            ledger_id, entry_id = result.ledger_id, result.entry_id
            if len(batch) == 1:
                pending = batch[0]
                pending.producer.on_stored(pending, ledger_id, entry_id, -1, 0)
            else:
                count = len(batch)
                for index, pending in enumerate(batch):
                    pending.producer.on_stored(pending, ledger_id, entry_id, index, count)
            self.metrics.on_entry_stored(batch, size, now)
            for subscription in self.subscriptions.values():
                subscription.dispatcher.wake()
        else:
            self._on_add_failed(batch, result)
        self._after_add()

    # -- subscriptions --------------------------------------------------------------------------

    def _add_subscription(
        self, name: str, cursor: ManagedCursor, *, durable: bool, start_after: MsgKey | None = None
    ) -> Subscription:
        subscription = Subscription(
            self,
            name,
            cursor,
            durable=durable,
            read_entries_max=self._settings.dispatch_read_entries_max,
            redelivery_max=self._settings.dispatch_redelivery_messages_max,
            start_after=start_after,
        )
        self.subscriptions[name] = subscription
        assert self._nursery is not None
        self._nursery.start_soon(subscription.dispatcher.run, name=f"dispatcher {self.name}/{name}")
        return subscription

    async def get_or_create_subscription(
        self, name: str, *, durable: bool = True, start_earliest: bool = False
    ) -> Subscription:
        self._check_open()
        subscription = self.subscriptions.get(name)
        if subscription is not None:
            return subscription
        if durable:
            if self._metadata_ready is not None:
                await self._metadata_ready(f"creating subscription {name} on {self.name}")
            try:
                cursor = await self.ml.open_cursor(name, start_at_earliest=start_earliest)
            except (ManagedLedgerError, BKError, MetadataStoreError) as exc:
                raise ServiceUnitNotReadyError(
                    f"Failed to open subscription {name!r} on {self.name}: {exc}"
                ) from exc
        else:
            start = self._first_position() if start_earliest else self._after_last()
            cursor = self.ml.open_non_durable_cursor(start)
        self._check_open()
        existing = self.subscriptions.get(name)
        if existing is not None:
            return existing
        return self._add_subscription(name, cursor, durable=durable)

    async def subscribe(
        self,
        name: str,
        make_consumer: Callable[[Subscription], Consumer],
        sub_type: SubscriptionType,
        *,
        durable: bool,
        start_earliest: bool,
    ) -> Consumer:
        subscription = await self.get_or_create_subscription(
            name, durable=durable, start_earliest=start_earliest
        )
        consumer = make_consumer(subscription)
        try:
            subscription.add_consumer(consumer, sub_type)
        except Exception:
            if not subscription.durable and not subscription.consumers:
                self._drop_subscription(subscription)
            raise
        return consumer

    def create_reader(self, start: MessageId, make_consumer: Callable[[Subscription], Consumer]) -> Consumer:
        """A reader's subscription: non-durable, starting after ``start`` (``earliest``: the first message,
        ``latest``: the next message published)."""
        self._check_open()
        start_after = None
        if start == LATEST:
            position = self._after_last()
        elif start == EARLIEST or start.ledger_id < 0:
            position = self._first_position()
        else:
            position = Position(start.ledger_id, max(start.entry_id, 0))
            index = start.batch_index if start.batch_index >= 0 else BATCH_INDEX_AFTER_ALL
            start_after = (start.ledger_id, start.entry_id, index)
        cursor = self.ml.open_non_durable_cursor(position)
        name = f"reader-{uuid.uuid4().hex[:10]}"
        subscription = self._add_subscription(name, cursor, durable=False, start_after=start_after)
        consumer = make_consumer(subscription)
        subscription.add_consumer(consumer, SubscriptionType.EXCLUSIVE)
        return consumer

    def remove_consumer(self, consumer: Consumer) -> None:
        subscription = consumer.subscription
        subscription.remove_consumer(consumer)
        if not subscription.durable and not subscription.consumers:
            self._drop_subscription(subscription)

    def _drop_subscription(self, subscription: Subscription) -> None:
        subscription.close()
        self.ml.close_non_durable_cursor(subscription.cursor)
        if self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]

    async def unsubscribe(self, consumer: Consumer) -> None:
        """The consumer's ``unsubscribe`` command: allowed when it is the subscription's only consumer."""
        subscription = consumer.subscription
        if [c for c in subscription.consumers if c is not consumer]:
            raise SubscriptionBusyError("Subscription has active connected consumers")
        self.remove_consumer(consumer)
        await self.delete_subscription(subscription.name, force=True)

    async def delete_subscription(self, name: str, *, force: bool = False) -> None:
        subscription = self.subscriptions.get(name)
        if subscription is None:
            raise TopicNotFoundError("Subscription not found")
        if subscription.consumers and not force:
            raise SubscriptionBusyError("Subscription has active connected consumers")
        for consumer in list(subscription.consumers):
            if consumer.kick is not None:
                consumer.kick(CLOSE_GOING_AWAY, "Subscription deleted")
            subscription.remove_consumer(consumer)
        subscription.close()
        del self.subscriptions[name]
        if subscription.durable:
            await self.ml.delete_cursor(name)
        else:
            self.ml.close_non_durable_cursor(subscription.cursor)

    def _first_position(self) -> Position:
        first = self.ml.ledgers.first_position()
        return first if first is not None else self._after_last()

    def _after_last(self) -> Position:
        return self.ml.ledgers.next_position(self.ml.last_confirmed)

    # -- admin operations ------------------------------------------------------------------------

    async def terminate(self) -> MessageId:
        """No more messages: returns the id of the last one (``isEndOfTopic`` turns true once read)."""
        position = await self.ml.terminate()
        for producer in list(self.producers.values()):
            producer.close()
            if producer.kick is not None:
                producer.kick(CLOSE_GOING_AWAY, "Topic was terminated")
        for subscription in self.subscriptions.values():
            subscription.dispatcher.wake()
        return MessageId(position.ledger_id, position.entry_id, self.partition)

    def last_message_id(self) -> MessageId:
        last = self.ml.last_confirmed
        return MessageId(last.ledger_id, last.entry_id, self.partition)

    async def peek(self, subscription: str, count: int) -> list[tuple[MessageId, Any]]:
        """The first ``count`` unacknowledged messages of ``subscription`` (admin ``peek``)."""
        sub = self.subscriptions.get(subscription)
        if sub is None:
            raise TopicNotFoundError("Subscription not found")
        out: list[tuple[MessageId, Any]] = []
        position = self.ml.ledgers.next_position(sub.cursor.mark_delete)
        while len(out) < count and position <= self.ml.last_confirmed:
            entries = await self.ml.read_entries(position, min(100, count))
            if not entries:
                break
            for entry in entries:
                if sub.cursor.is_acked(entry.position):
                    continue
                decoded = decode_entry(entry.data)
                size = len(decoded.messages) if decoded.batched else 0
                for index, message in enumerate(decoded.messages):
                    batch_index = index if decoded.batched else -1
                    mid = MessageId(
                        entry.position.ledger_id, entry.position.entry_id, self.partition, batch_index, size
                    )
                    out.append((mid, message))
            position = self.ml.ledgers.next_position(entries[-1].position)
        return out[:count]

    def is_end_of_topic(self, subscription: Subscription) -> bool:
        return subscription.cursor.is_at_end()

    # -- figures -------------------------------------------------------------------------------

    def update_rates(self, period_s: float) -> None:
        """End of a stats period of ``period_s`` seconds (:mod:`.rates`): every rate of this topic."""
        self.rate_in.update(self.metrics.msg_in, self.metrics.bytes_in, period_s)
        self.metrics.end_period(period_s)
        for producer in self.producers.values():
            producer.rate_in.update(producer.msg_in_counter, producer.bytes_in_counter, period_s)
        for subscription in self.subscriptions.values():
            subscription.update_rates(period_s)

    def stats(self) -> dict[str, Any]:
        """Pulsar's ``TopicStats`` fields Magnetar knows (counters since load; rates of the last stats
        period, see :mod:`.rates`)."""
        msg_in = sum(p.msg_in_counter for p in self.producers.values())
        subscriptions = self.subscriptions.values()
        return {
            "msgRateIn": self.rate_in.msgs_per_s,
            "msgThroughputIn": self.rate_in.bytes_per_s,
            "msgRateOut": sum(s.rate_out.msgs_per_s for s in subscriptions),
            "msgThroughputOut": sum(s.rate_out.bytes_per_s for s in subscriptions),
            "bytesInCounter": self.metrics.bytes_in,
            "msgInCounter": self.metrics.msg_in,
            "bytesOutCounter": sum(s.bytes_out_counter for s in self.subscriptions.values()),
            "msgOutCounter": sum(s.msg_out_counter for s in self.subscriptions.values()),
            "averageMsgSize": self.metrics.bytes_in / self.metrics.msg_in if self.metrics.msg_in else 0.0,
            "msgChunkPublished": False,
            "storageSize": self.ml.total_size(),
            "backlogSize": 0,
            "publishers": [p.stats() for p in self.producers.values()],
            "waitingPublishers": 0,
            "subscriptions": {name: s.stats() for name, s in self.subscriptions.items() if s.durable},
            "replication": {},
            "deduplicationStatus": "Disabled",
            "topicEpoch": None,
            "connectedProducersMessages": msg_in,
        }

    def internal_stats(self) -> dict[str, Any]:
        return internal_stats(self.ml)


def _describe_failure(error: ManagedLedgerError) -> str:
    if isinstance(error, ManagedLedgerTerminatedError):
        return "org.apache.pulsar.client.api.PulsarClientException$TopicTerminatedException: topic terminated"
    if isinstance(error, ManagedLedgerFencedError):
        return "Topic ownership moved to another broker: reconnect"
    return f"Failed to persist message: {error}"

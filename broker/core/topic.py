"""A persistent topic (Pulsar's ``PersistentTopic``): a managed ledger, its producers and subscriptions.

Publishing goes through the topic's one :class:`~.publish_queue.PublishQueue`: every producer's requests,
whatever protocol they came in, are cut into entries by one rule (see :mod:`.publish_queue`). Every message of
a batch keeps its own id ``(ledger, entry, batchIndex)`` and is acknowledged individually (see
:mod:`.subscription`). Delivery goes through one dispatcher per subscription (:mod:`.dispatcher`).

Closing. :meth:`PersistentTopic.close` (unload, shutdown) stops accepting messages, writes what it had
accepted (the group being built included) and waits for those writes, so every message already handed to the
topic is answered as what it is - stored (its receipt) or failed - before the sessions are ended (so
clients look the topic up again) and the managed ledger closes cleanly (cursor positions persisted). A
message that arrives once the close has begun is refused, and only it: a client that resends what was
refused creates no duplicate. :meth:`fence_now` is the synchronous stop for a lost bundle: from that instant
nothing more is accepted or dispatched; messages not yet written fail, writes already in flight are left to
finish (their outcome is unknown: the sessions end without it).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from magnetar.bookkeeper.client import BKError
from magnetar.bookkeeper.metadata import MetadataStoreError
from magnetar.bookkeeper.runtime import Clock
from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.dedup import DedupState, is_reserved_cursor
from magnetar.broker.core.delivery import MsgKey
from magnetar.broker.core.dispatcher import SubscriptionType
from magnetar.broker.core.errors import (
    ReservedSubscriptionError,
    ServiceUnitNotReadyError,
    SubscriptionBusyError,
    TopicNotFoundError,
    TopicTerminatedError,
)
from magnetar.broker.core.producer import Producer
from magnetar.broker.core.producer_access import AccessMode
from magnetar.broker.core.publish import PublishRequest
from magnetar.broker.core.publish_queue import PublishQueue, PublishSettings
from magnetar.broker.core.rates import Rate
from magnetar.broker.core.subscriber import Subscriber
from magnetar.broker.core.subscription import BATCH_INDEX_AFTER_ALL, Subscription
from magnetar.broker.core.throttle import REASON_SUBSCRIPTION, REASON_TOPIC, DispatchLimit, DispatchLimiter
from magnetar.broker.core.topic_base import TopicBase, detach_subscription
from magnetar.broker.core.topic_dedup import DedupSettings, TopicDedup
from magnetar.broker.core.topic_limits import TopicLimits
from magnetar.broker.core.topic_metrics import TopicMetrics
from magnetar.broker.wire import EARLIEST, LATEST, MessageId, TopicName, decode_entry
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.errors import ManagedLedgerError
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.stats import internal_stats

log = logging.getLogger(__name__)


class TopicSettings(PublishSettings, DedupSettings, Protocol):
    """The settings a topic reads (``BrokerSettings`` has them): the publish queue's, dispatch's and the
    close's timeout."""

    @property
    def dispatch_read_entries_max(self) -> int: ...

    @property
    def dispatch_redelivery_messages_max(self) -> int: ...

    @property
    def dispatch_delayed_messages_max(self) -> int: ...

    @property
    def metadata_operation_timeout_ms(self) -> int: ...


class PersistentTopic(TopicBase):
    def __init__(
        self,
        name: TopicName,
        ml: ManagedLedger,
        settings: TopicSettings,
        clock: Clock,
        metrics: TopicMetrics,
        *,
        on_fenced: Callable[[PersistentTopic], None] = lambda topic: None,
        close_ml: Callable[[], Awaitable[None]] | None = None,
        metadata_ready: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(name, clock)
        self.ml = ml
        self._settings = settings
        self.metrics = metrics
        self._on_fenced = on_fenced
        self._close_ml = close_ml or ml.close
        self._metadata_ready = metadata_ready
        """Waits (bounded) for the metadata store during an outage; raises 503 if it stays away."""
        self.subscriptions: dict[str, Subscription] = {}
        self.rate_in = Rate()
        self._queue = PublishQueue(
            str(name),
            ml,
            settings,
            clock,
            metrics,
            on_stored=self._wake_dispatchers,
            on_fenced=self._fenced,
        )
        self._nursery: trio.Nursery | None = None
        self._stopped = trio.Event()
        self._dispatch_limiter: DispatchLimiter | None = None
        """The topic's ``dispatchRate``, shared by its subscriptions (:mod:`.throttle`)."""
        self._dedup = TopicDedup(
            str(name), ml, settings, self.producers.values, lambda: self._nursery, self.now_ms
        )

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The topic's dispatchers live in this nursery; it ends when the topic is closed."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for cursor_name, cursor in list(self.ml.cursors.items()):
                if not is_reserved_cursor(cursor_name):
                    self._add_subscription(cursor_name, cursor, durable=True)
            task_status.started()
            await self._stopped.wait()
            nursery.cancel_scope.cancel()

    def fence_now(self, reason: str) -> None:
        """Stop at once: refuse messages, stop dispatching, close every session (see the module doc)."""
        if self.closed:
            return
        self.closed = self._queue.closed = True
        log.info("topic %s closing: %s", self.name, reason)
        self._queue.fail_waiting(reason)
        self._end_sessions(self.subscriptions.values(), reason)

    async def close(self, reason: str = "Topic unloaded") -> None:
        """Clean close: write what was accepted and wait for it (each message answered, see the module doc),
        then close the sessions and the managed ledger (cursors persisted)."""
        timeout_s = self._settings.metadata_operation_timeout_ms / 1000
        queue = self._queue
        if not self.closed:
            self.closed = queue.closed = True  # from here on publish() refuses new messages
            log.info("topic %s closing: %s", self.name, reason)
            queue.write_waiting()
            with trio.move_on_after(timeout_s):
                await queue.drained.wait()
            queue.fail_waiting(reason)  # nothing, unless a write could not even be started
            self._end_sessions(self.subscriptions.values(), reason)
        with trio.move_on_after(timeout_s):
            await queue.drained.wait()
        self._dedup.take_snapshot()  # persisted by the managed ledger's close, with the cursor
        try:
            await self._close_ml()
        except (ManagedLedgerError, BKError, MetadataStoreError, trio.TooSlowError) as exc:
            log.warning("topic %s: closing its managed ledger failed: %s", self.name, exc)
        self.stop()

    def stop(self) -> None:
        """End the topic's dispatcher tasks (after :meth:`fence_now`)."""
        self._stopped.set()

    # -- publishing -----------------------------------------------------------------------------

    def _check_can_produce(self) -> None:
        super()._check_can_produce()
        if self.ml.is_terminated:
            raise TopicTerminatedError(f"Topic {self.name} was terminated")

    def publish(self, request: PublishRequest) -> None:
        """The one publish path: ``request`` joins the topic's publish queue (:mod:`.publish_queue`) and is
        answered through its producer."""
        self._queue.publish(request)

    def _install(self, name: str, producer_factory: Callable[[], Producer], access: AccessMode,
                 epoch: int | None) -> Producer:  # fmt: skip
        producer = super()._install(name, producer_factory, access, epoch)
        if self.dedup is not None:
            producer.attach_dedup(self.dedup)
        return producer

    def last_sequence_id(self, producer_name: str) -> int:
        """The highest sequence id of ``producer_name`` this topic accepted, -1 if none or when it does not
        deduplicate (Pulsar's PRODUCER_SUCCESS ``last_sequence_id``)."""
        return -1 if self.dedup is None else self.dedup.last_sequence_id(producer_name)

    # -- deduplication (:mod:`.topic_dedup`) -------------------------------------------------------

    @property
    def dedup(self) -> DedupState | None:
        """The deduplication state while the topic deduplicates (:mod:`.dedup`)."""
        return self._dedup.state

    @property
    def dedup_status(self) -> str:
        """Pulsar's ``deduplicationStatus``."""
        return self._dedup.status

    def purge_inactive_producers(self, timeout_ms: int) -> list[str]:
        """Forget the deduplication state of producer names without a producer for ``timeout_ms``
        (:meth:`.topic_dedup.TopicDedup.purge_inactive`)."""
        return self._dedup.purge_inactive(self.now_ms() - timeout_ms)

    async def check_deduplication(self) -> None:
        """Bring deduplication in line with the topic's limits (:meth:`.topic_dedup.TopicDedup.check`). Topic
        load waits for this, so no producer publishes before the state is recovered."""
        limits = self.limits
        await self._dedup.check(
            limits.deduplication_enabled, limits.deduplication_snapshot_interval_s, closed=self.closed
        )

    def _wake_dispatchers(self) -> None:
        for subscription in self.subscriptions.values():
            subscription.dispatcher.wake()

    def _fenced(self) -> None:
        if not self.closed:
            self._on_fenced(self)

    # -- subscriptions --------------------------------------------------------------------------

    def _add_subscription(
        self, name: str, cursor: ManagedCursor, *, durable: bool, start_after: MsgKey | None = None
    ) -> Subscription:
        subscription = Subscription(
            str(self.name),
            name,
            cursor,
            partition=self.partition,
            clock=self._clock,
            durable=durable,
            read_entries_max=self._settings.dispatch_read_entries_max,
            redelivery_max=self._settings.dispatch_redelivery_messages_max,
            delayed_max=self._settings.dispatch_delayed_messages_max,
            start_after=start_after,
        )
        limits = self.limits
        subscription.dispatcher.set_delay_policy(
            limits.delayed_delivery_enabled, limits.delayed_delivery_tick_ms
        )
        subscription.dispatcher.unacked_max = limits.unacked_messages_per_subscription
        self.subscriptions[name] = subscription
        self._set_dispatch_limits(subscription, rebuild=False)
        assert self._nursery is not None
        self._nursery.start_soon(subscription.dispatcher.run, name=f"dispatcher {self.name}/{name}")
        return subscription

    async def get_or_create_subscription(
        self, name: str, *, durable: bool = True, start_earliest: bool = False
    ) -> Subscription:
        self._check_open()
        if is_reserved_cursor(name):
            raise ReservedSubscriptionError("Subscription with reserved subscription name attempted")
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
        make_consumer: Callable[[], Consumer],
        sub_type: SubscriptionType,
        *,
        durable: bool,
        start_earliest: bool,
    ) -> Subscriber:
        """A new consumer of subscription ``name`` (created if need be): the session's handle on it."""
        self._check_open()
        self._check_subscribe(name, self.subscriptions, durable=durable)
        self._check_consumer(self.subscriptions.values(), self.subscriptions.get(name), sub_type)
        consumer = make_consumer()
        self._check_subscribe_rate(consumer)  # before a subscription is created for it
        subscription = await self.get_or_create_subscription(
            name, durable=durable, start_earliest=start_earliest
        )
        unacked_max = self.limits.consumer_unacked_max()
        if unacked_max is not None:
            consumer.unacked_messages_max = unacked_max
        try:
            self._check_consumer(self.subscriptions.values(), subscription, sub_type)
            subscription.add_consumer(consumer, sub_type)
        except Exception:
            if not subscription.durable and not subscription.consumers:
                self._drop_subscription(subscription)
            raise
        return Subscriber(self, subscription, consumer)

    def create_reader(
        self, start: MessageId, make_consumer: Callable[[], Consumer], name: str | None = None
    ) -> Subscriber:
        """A reader's subscription: non-durable, starting after ``start`` (``earliest``: the first message,
        ``latest``: the next message published), named ``name`` (else a generated name)."""
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
        name = name or f"reader-{uuid.uuid4().hex[:10]}"
        subscription = self._add_subscription(name, cursor, durable=False, start_after=start_after)
        consumer = make_consumer()
        subscription.add_consumer(consumer, SubscriptionType.EXCLUSIVE)
        return Subscriber(self, subscription, consumer)

    def remove_consumer(self, subscription: Subscription, consumer: Consumer) -> None:
        subscription.remove_consumer(consumer)
        if not subscription.durable and not subscription.consumers and not subscription.sought:
            self._drop_subscription(subscription)

    def apply_limits(self, limits: TopicLimits) -> None:
        """As the base's, and: the next ledger gets the persistence policy's quorum and the cursors its
        mark-delete rate, every subscription the delayed-delivery policy and its dispatch rates, and the
        consumers already connected the new unacknowledged bound (a higher one lets a held consumer go on); a
        change of the deduplication policy starts or stops deduplicating."""
        previous = self.limits
        super().apply_limits(limits)
        self.ml.quorum = limits.quorum
        self.ml.mark_delete_rate_per_s = limits.mark_delete_rate
        for subscription in self.subscriptions.values():
            subscription.dispatcher.set_delay_policy(
                limits.delayed_delivery_enabled, limits.delayed_delivery_tick_ms
            )
            subscription.dispatcher.set_unacked_max(limits.unacked_messages_per_subscription)
        if (limits.dispatch_rate, limits.subscription_dispatch_rate, limits.subscription_dispatch_rates) != (
            previous.dispatch_rate,
            previous.subscription_dispatch_rate,
            previous.subscription_dispatch_rates,
        ):
            self._rebuild_dispatch_limits()
        if self._nursery is not None and (
            limits.deduplication_enabled != (self.dedup is not None)
            or limits.deduplication_snapshot_interval_s != previous.deduplication_snapshot_interval_s
        ):
            self._nursery.start_soon(self._check_deduplication_logged)
        unacked_max = limits.consumer_unacked_max()
        if unacked_max is None:
            return
        for subscription in self.subscriptions.values():
            for consumer in subscription.consumers:
                if consumer.track_pending:  # a reader acknowledges nothing: it has no such bound
                    consumer.unacked_messages_max = unacked_max
            subscription.dispatcher.wake()

    # -- dispatch rates (:mod:`.throttle`) ---------------------------------------------------------

    def _limiter(
        self, limit: DispatchLimit | None, reason: str = REASON_SUBSCRIPTION
    ) -> DispatchLimiter | None:
        if limit is None:
            return None
        publish_rate = (self.rate_in.msgs_per_s, self.rate_in.bytes_per_s)
        return DispatchLimiter(limit, publish_rate=publish_rate, reason=reason)

    def _rebuild_dispatch_limits(self) -> None:
        """New buckets for the topic's and every subscription's dispatch rate (a rate changed, or the
        publish rate a relative one adds)."""
        self._dispatch_limiter = self._limiter(self.limits.dispatch_rate, REASON_TOPIC)
        for subscription in self.subscriptions.values():
            self._set_dispatch_limits(subscription, rebuild=True)

    def _set_dispatch_limits(self, subscription: Subscription, *, rebuild: bool) -> None:
        dispatcher = subscription.dispatcher
        limit = self.limits.subscription_dispatch(subscription.name)
        own = dispatcher.subscription_limiter
        if rebuild or (own.limit if own is not None else None) != limit:
            own = dispatcher.subscription_limiter = self._limiter(limit)
        chain = tuple(limiter for limiter in (self._dispatch_limiter, own) if limiter is not None)
        dispatcher.throttle = chain or None
        dispatcher.wake()

    def _relative_dispatch(self) -> bool:
        limits = self.limits
        rates = [limits.dispatch_rate, limits.subscription_dispatch_rate]
        rates += [limit for _, limit in limits.subscription_dispatch_rates]
        return any(rate is not None and rate.relative for rate in rates)

    async def _check_deduplication_logged(self) -> None:
        try:
            await self.check_deduplication()
        except ServiceUnitNotReadyError as exc:
            log.warning("topic %s: %s", self.name, exc)

    def _drop_subscription(self, subscription: Subscription) -> None:
        subscription.close()
        self.ml.close_non_durable_cursor(subscription.cursor)
        if self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]

    async def unsubscribe(self, subscription: Subscription, consumer: Consumer) -> None:
        """The consumer's ``unsubscribe`` command: allowed when it is the subscription's only consumer."""
        if [c for c in subscription.consumers if c is not consumer]:
            raise SubscriptionBusyError("Subscription has active connected consumers")
        self.remove_consumer(subscription, consumer)
        await self.delete_subscription(subscription.name, force=True)

    async def delete_subscription(self, name: str, *, force: bool = False) -> None:
        subscription = detach_subscription(self.subscriptions, name, force=force)
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
            producer.go_away("Topic was terminated")
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
        if self._relative_dispatch():
            self._rebuild_dispatch_limits()

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
            "deduplicationStatus": self.dedup_status,
            "topicEpoch": None,
            "publishRateLimitedTimes": self.publish_rate_limited(),
            "connectedProducersMessages": msg_in,
        }

    def internal_stats(self) -> dict[str, Any]:
        return internal_stats(self.ml)

"""A non-persistent topic (Pulsar's ``NonPersistentTopic``): in memory, at most once, no ledgers.

It takes the same :class:`~.publish.PublishRequest` as a persistent topic and delivers through the same
consumers, permits and delivery sinks (:mod:`.delivery`), so every protocol adapter serves it unchanged.
Publishing lays the request out as its layout would store it and reads the messages back
(:mod:`magnetar.broker.wire.entry_format`) - nothing is written anywhere - answers the producer at once with
Pulsar's position for a non-persistent message (ledger 0, entry 0) and hands the messages to every
subscription, which gives each to a consumer that has a permit now or drops it
(:mod:`.non_persistent_subscription`). A message published while no subscription exists goes nowhere.

No backlog, no retention, no cursors. A durable subscription stays, as in Pulsar, until it is unsubscribed
or deleted or the topic goes - while it has no consumer, what is published is dropped on it (and counted);
a non-durable one (a reader's, ``subscriptionMode=NonDurable``) goes with its last consumer. A reader starts
from the next message published whatever start it asks for, and unloading or losing the topic drops
everything (clients look the topic up again and reconnect).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import trio

from magnetar.bookkeeper.runtime import Clock
from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.delivery import Delivery
from magnetar.broker.core.dispatcher import SubscriptionType
from magnetar.broker.core.errors import (
    SubscriptionBusyError,
)
from magnetar.broker.core.non_persistent_subscription import NonPersistentSubscription
from magnetar.broker.core.publish import PublishRequest
from magnetar.broker.core.rates import Rate
from magnetar.broker.core.subscriber import Subscriber
from magnetar.broker.core.topic_base import TopicBase, detach_subscription
from magnetar.broker.core.topic_metrics import TopicMetrics
from magnetar.broker.wire import CorruptEntryError, MessageId, TopicName, decode_entry

log = logging.getLogger(__name__)

NON_PERSISTENT_LEDGER_ID = 0
NON_PERSISTENT_ENTRY_ID = 0
"""Pulsar gives every message of a non-persistent topic the position ``0:0`` (receipts and deliveries)."""


class NonPersistentTopic(TopicBase):
    def __init__(self, name: TopicName, clock: Clock) -> None:
        assert not name.is_persistent
        super().__init__(name, clock)
        self.subscriptions: dict[str, NonPersistentSubscription] = {}
        self.metrics = TopicMetrics()
        """Messages and bytes in, read by ``/metrics`` as a persistent topic's (no entries, no write
        latency: nothing is written)."""
        self.msg_drop_no_subscription = 0
        """Messages published while the topic had no subscription (they reach nobody)."""
        self.rate_in = Rate()
        self._stopped = trio.Event()

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Nothing runs in the background: delivery happens on publish. Ends when the topic is stopped."""
        task_status.started()
        await self._stopped.wait()

    def fence_now(self, reason: str) -> None:
        """Stop at once: refuse messages and end every session (the clients look the topic up again)."""
        if self.closed:
            return
        self.closed = True
        log.info("topic %s closing: %s", self.name, reason)
        self._end_sessions(self.subscriptions.values(), reason)

    async def close(self, reason: str = "Topic unloaded") -> None:
        """Unload: nothing to write or persist - end the sessions and stop."""
        self.fence_now(reason)
        self.stop()

    def stop(self) -> None:
        self._stopped.set()

    # -- publishing -----------------------------------------------------------------------------

    def publish(self, request: PublishRequest) -> None:
        """Answer ``request`` at once (position ``0:0``) and hand its messages to every subscription."""
        if self.closed:
            request.producer.on_failed(request, f"Topic {self.name} is being unloaded")
            return
        data, batched = request.layout.encode([request], request.messages, request.publish_time_ms)
        try:
            messages = decode_entry(data).messages
        except CorruptEntryError as exc:  # the layouts produce well-formed entries: a bug if not
            request.producer.on_failed(request, f"Malformed message: {exc}")
            return
        size = len(messages) if batched else 0
        self.metrics.msg_in += len(messages)
        self.metrics.bytes_in += request.payload_bytes
        request.producer.on_stored(
            request, NON_PERSISTENT_LEDGER_ID, NON_PERSISTENT_ENTRY_ID, 0 if batched else -1, size
        )
        if not self.subscriptions:
            self.msg_drop_no_subscription += len(messages)
            return
        for subscription in self.subscriptions.values():
            subscription.send(
                [
                    Delivery(
                        NON_PERSISTENT_LEDGER_ID,
                        NON_PERSISTENT_ENTRY_ID,
                        index if batched else -1,
                        size,
                        message,
                    )
                    for index, message in enumerate(messages)
                ]
            )

    # -- subscriptions --------------------------------------------------------------------------

    async def subscribe(
        self,
        name: str,
        make_consumer: Callable[[], Consumer],
        sub_type: SubscriptionType,
        *,
        durable: bool,
        start_earliest: bool,
    ) -> Subscriber:
        """A new consumer of subscription ``name``; it gets what is published from now on (whatever the
        initial position: nothing is stored)."""
        self._check_open()
        self._check_subscribe(name, self.subscriptions, durable=False)  # nothing stored: never durable
        subscription = self.subscriptions.get(name)
        self._check_consumer(self.subscriptions.values(), subscription, sub_type)
        if subscription is None:
            subscription = NonPersistentSubscription(
                str(self.name), name, partition=self.partition, durable=durable
            )
        consumer = make_consumer()
        subscription.add_consumer(consumer, sub_type)  # raises before the subscription is registered
        self.subscriptions[name] = subscription
        return Subscriber(self, subscription, consumer)

    def create_reader(self, start: MessageId, make_consumer: Callable[[], Consumer]) -> Subscriber:
        """A reader: it gets what is published from now on, whatever ``start`` (nothing is stored)."""
        self._check_open()
        name = f"reader-{uuid.uuid4().hex[:10]}"
        subscription = NonPersistentSubscription(
            str(self.name), name, partition=self.partition, durable=False
        )
        consumer = make_consumer()
        subscription.add_consumer(consumer, SubscriptionType.EXCLUSIVE)
        self.subscriptions[name] = subscription
        return Subscriber(self, subscription, consumer)

    def remove_consumer(self, subscription: NonPersistentSubscription, consumer: Consumer) -> None:
        subscription.remove_consumer(consumer)
        if not subscription.durable and not subscription.consumers:
            self._forget(subscription)

    def _forget(self, subscription: NonPersistentSubscription) -> None:
        subscription.close()
        if self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]

    async def unsubscribe(self, subscription: NonPersistentSubscription, consumer: Consumer) -> None:
        if [c for c in subscription.consumers if c is not consumer]:
            raise SubscriptionBusyError("Subscription has active connected consumers")
        subscription.remove_consumer(consumer)
        self._forget(subscription)

    async def delete_subscription(self, name: str, *, force: bool = False) -> None:
        detach_subscription(self.subscriptions, name, force=force)

    def is_end_of_topic(self, subscription: NonPersistentSubscription) -> bool:
        return False

    def last_message_id(self) -> MessageId:
        return MessageId(NON_PERSISTENT_LEDGER_ID, NON_PERSISTENT_ENTRY_ID, self.partition)

    # -- figures -------------------------------------------------------------------------------

    @property
    def msg_drop_counter(self) -> int:
        """Messages that reached no consumer: dropped by a subscription (no permit) or published while the
        topic had no subscription."""
        dropped = sum(s.msg_drop_counter for s in self.subscriptions.values())
        return dropped + self.msg_drop_no_subscription

    def update_rates(self, period_s: float) -> None:
        self.rate_in.update(self.metrics.msg_in, self.metrics.bytes_in, period_s)
        self.metrics.end_period(period_s)
        for producer in self.producers.values():
            producer.rate_in.update(producer.msg_in_counter, producer.bytes_in_counter, period_s)
        for subscription in self.subscriptions.values():
            subscription.update_rates(period_s)

    def stats(self) -> dict[str, Any]:
        """Pulsar's ``NonPersistentTopicStats`` fields Magnetar knows (counters since load; rates of the
        last stats period)."""
        subscriptions = self.subscriptions.values()
        msg_in, bytes_in = self.metrics.msg_in, self.metrics.bytes_in
        publishers = []
        for producer in self.producers.values():
            entry = producer.stats()
            entry["msgDropRate"] = 0.0
            publishers.append(entry)
        return {
            "msgRateIn": self.rate_in.msgs_per_s,
            "msgThroughputIn": self.rate_in.bytes_per_s,
            "msgRateOut": sum(s.rate_out.msgs_per_s for s in subscriptions),
            "msgThroughputOut": sum(s.rate_out.bytes_per_s for s in subscriptions),
            "bytesInCounter": bytes_in,
            "msgInCounter": msg_in,
            "bytesOutCounter": sum(s.bytes_out_counter for s in subscriptions),
            "msgOutCounter": sum(s.msg_out_counter for s in subscriptions),
            "averageMsgSize": bytes_in / msg_in if msg_in else 0.0,
            "msgChunkPublished": False,
            "storageSize": 0,
            "backlogSize": 0,
            "offloadedStorageSize": 0,
            "publishers": publishers,
            "waitingPublishers": 0,
            "subscriptions": {name: s.stats() for name, s in self.subscriptions.items() if s.durable},
            "replication": {},
            "deduplicationStatus": "Disabled",
            "topicEpoch": None,
            "publishRateLimitedTimes": self.publish_rate_limited(),
            "nonContiguousDeletedMessagesRanges": 0,
            "nonContiguousDeletedMessagesRangesSerializedSize": 0,
            "msgDropRate": sum(s.rate_drop.msgs_per_s for s in subscriptions),
        }

    def internal_stats(self) -> dict[str, Any]:
        """Pulsar answers a non-persistent topic's internal stats with its (empty) managed-ledger shape."""
        return {
            "entriesAddedCounter": self.metrics.msg_in,
            "numberOfEntries": 0,
            "totalSize": 0,
            "currentLedgerEntries": 0,
            "currentLedgerSize": 0,
            "waitingCursorsCount": 0,
            "pendingAddEntriesCount": 0,
            "ledgers": [],
            "cursors": {},
            "schemaLedgers": [],
        }

"""A subscription of a non-persistent topic (Pulsar's ``NonPersistentSubscription`` and its
``NonPersistentDispatcher*``): no cursor, no backlog, at most once.

A message published on a non-persistent topic is handed at once to every subscription (:meth:`send`); the
subscription gives it to one of its connected consumers that has a permit - by the same subscription-type
rules as a persistent subscription (:mod:`.dispatcher`) - or drops it, counting the drop (``msgDropRate``).
Nothing is kept: not for a consumer that connects later, not for redelivery.

* **Exclusive / Failover** - the active consumer (failover: among the best ``priorityLevel``, sorted by name,
  the one at ``partition % count``) gets the message if it has a permit; otherwise it is dropped, as
  Pulsar's ``NonPersistentDispatcherSingleActiveConsumer`` does.
* **Shared** - round robin over the consumers that have a permit; dropped when none has one
  (``NonPersistentDispatcherMultipleConsumers``).
* **Key_Shared** - the consumer owning the key's slot on the hash ring; dropped when it has no permit
  (``NonPersistentStickyKeyDispatcherMultipleConsumers``): no other consumer takes it, so per-key order holds.

Message ids are Pulsar's for non-persistent topics: ledger 0, entry 0 - every message has the same position
(batch index -1 for a message published alone, ``i`` for message ``i`` of a batch). So an acknowledgement
names no message: it only gives back the place in the consumer's window that the acknowledged message took
(push mode, as Pulsar's WebSocket handler counts pending messages per acknowledgement), and a negative ack or
an ack timeout redelivers nothing. Consumers keep no pending messages (``track_pending`` is off).
"""

from __future__ import annotations

import logging

import trio

from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.delivery import Delivery, MsgKey
from magnetar.broker.core.dispatcher import SubscriptionType, pick_active
from magnetar.broker.core.errors import ConsumerBusyError
from magnetar.broker.core.key_hash import sticky_key_slot
from magnetar.broker.core.key_shared import KeySharedSelector
from magnetar.broker.core.rates import Rate
from magnetar.broker.core.throttle import ThrottledEvents
from magnetar.broker.wire import MessageId

log = logging.getLogger(__name__)


NO_THROTTLED_EVENTS = ThrottledEvents().stats()
"""A non-persistent subscription has no dispatch rate: its throttled-dispatch counters stay 0."""


class EndlessCursor:
    """What :class:`~.subscriber.Subscriber` asks a subscription's cursor: a non-persistent topic never
    ends (it cannot be terminated)."""

    __slots__ = ()

    def is_at_end(self) -> bool:
        return False


class NonPersistentSubscription:
    """One subscription of a non-persistent topic (see the module docstring)."""

    def __init__(self, topic_name: str, name: str, *, partition: int, durable: bool) -> None:
        self.topic_name = topic_name
        self.name = name
        self.partition = partition
        self.durable = durable
        """A reader's subscription is not (it goes away with its reader); none is persisted anyway."""
        self.cursor = EndlessCursor()
        self.type: SubscriptionType | None = None
        self.consumers: list[Consumer] = []
        self.active: Consumer | None = None
        self._ring = KeySharedSelector()
        self._rr = 0
        self.closed = False
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        self.msg_drop_counter = 0
        self.rate_out = Rate()
        self.rate_drop = Rate()
        self.rate_redeliver = Rate()
        """Always 0: nothing is redelivered (read by ``/metrics`` as a persistent subscription's)."""
        self.last_ack_ms = 0
        self.last_consumed_ms = 0

    # -- consumers ----------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer, sub_type: SubscriptionType) -> None:
        if self.consumers and sub_type is not self.type:
            raise ConsumerBusyError("Subscription is of different type")
        if sub_type is SubscriptionType.EXCLUSIVE and self.consumers:
            raise ConsumerBusyError("Exclusive consumer is already connected")
        if sub_type is SubscriptionType.KEY_SHARED:  # may refuse it (mode, ranges): before anything changes
            self._ring.add(consumer.id, consumer.name, consumer.key_shared, consumer)
        consumer.track_pending = False  # at most once: nothing is kept for acks or redelivery
        self.type = sub_type
        self.consumers.append(consumer)
        if sub_type.single_active:
            self._pick_active()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        consumer.detach()
        if self.type is SubscriptionType.KEY_SHARED:
            self._ring.remove(consumer.id)
        if self.type is not None and self.type.single_active:
            self._pick_active()

    def _pick_active(self) -> None:
        self.active = pick_active(self.consumers, self.partition)

    def close(self) -> None:
        self.closed = True

    # -- dispatch -----------------------------------------------------------------------------

    def send(self, deliveries: list[Delivery]) -> None:
        """The messages of one publish: each goes to a consumer with a permit now, or is dropped."""
        if self.closed or not deliveries:
            return
        now = trio.current_time()
        sub_type = self.type
        for delivery in deliveries:
            if not self.consumers or sub_type is None:
                consumer = None
            elif sub_type.single_active:
                consumer = self.active if self.active is not None and self._can_take(self.active) else None
            elif sub_type is SubscriptionType.KEY_SHARED:
                delivery.slot = sticky_key_slot(delivery.message.key)
                chosen = self._ring.select(delivery.slot)
                consumer = chosen if isinstance(chosen, Consumer) and self._can_take(chosen) else None
            else:
                consumer = self._next_shared_consumer()
            if consumer is None:
                self.msg_drop_counter += 1
                continue
            consumer.push(delivery, 0, now)
            self.msg_out_counter += 1
            self.bytes_out_counter += len(delivery.message.payload)

    @staticmethod
    def _can_take(consumer: Consumer) -> bool:
        return consumer.available() > 0 and consumer.sink.bytes < consumer.sink.bytes_max

    def _next_shared_consumer(self) -> Consumer | None:
        count = len(self.consumers)
        for step in range(count):
            consumer = self.consumers[(self._rr + step) % count]
            if self._can_take(consumer):
                self._rr = (self._rr + step + 1) % count
                return consumer
        return None

    # -- what the client says back (see the module docstring) ---------------------------------

    def ack(self, consumer: Consumer, message_id: MessageId) -> bool:
        return self._release(consumer, message_id.partition, 1)

    def ack_fields(
        self,
        consumer: Consumer,
        partition: int,
        ledger_id: int,
        entry_id: int,
        batch_index: int,
    ) -> bool:
        return self._release(consumer, partition, 1)

    def ack_group(self, consumer: Consumer, partition: int, keys: list[MsgKey]) -> int:
        return len(keys) if self._release(consumer, partition, len(keys)) else 0

    def ack_range(self, consumer: Consumer, first: MsgKey, last: MsgKey) -> int:
        """A range of ids of one position: the batch indexes it spans (one for messages published alone)."""
        count = last[2] - first[2] + 1 if first[2] >= 0 and last[2] >= first[2] else 1
        return count if self._release(consumer, consumer.partition, count) else 0

    def _release(self, consumer: Consumer, partition: int, count: int) -> bool:
        if partition != consumer.partition or consumer.closed:
            return False
        consumer.flow.release(count)
        return True

    def nack(self, consumer: Consumer, message_id: MessageId) -> None:
        """Nothing is redelivered on a non-persistent topic; the window place is given back."""
        self._release(consumer, message_id.partition, 1)

    def redeliver_due(self, consumer: Consumer, now: float) -> None:
        """No ack timeouts or negative acks to redeliver (nothing is kept)."""
        consumer.nacked.clear()

    # -- figures --------------------------------------------------------------------------------

    def update_rates(self, period_s: float) -> None:
        self.rate_out.update(self.msg_out_counter, self.bytes_out_counter, period_s)
        self.rate_drop.update(self.msg_drop_counter, 0, period_s)
        for consumer in self.consumers:
            consumer.rate_out.update(consumer.msg_out_counter, consumer.bytes_out_counter, period_s)

    def backlog(self) -> int:
        return 0  # nothing is kept

    def stats(self) -> dict[str, object]:
        """Pulsar's ``NonPersistentSubscriptionStats`` fields Magnetar knows."""
        return {
            "msgRateOut": self.rate_out.msgs_per_s,
            "msgThroughputOut": self.rate_out.bytes_per_s,
            "bytesOutCounter": self.bytes_out_counter,
            "msgOutCounter": self.msg_out_counter,
            "msgRateRedeliver": 0.0,
            "chunkedMessageRate": 0,
            "msgBacklog": 0,
            "backlogSize": 0,
            "msgBacklogNoDelayed": 0,
            "blockedSubscriptionOnUnackedMsgs": False,
            "msgDelayed": 0,
            "unackedMessages": 0,
            "type": str(self.type or SubscriptionType.EXCLUSIVE),
            "activeConsumerName": self.active.name if self.active is not None else None,
            "msgRateExpired": 0.0,
            "totalMsgExpired": 0,
            "lastExpireTimestamp": 0,
            "lastConsumedFlowTimestamp": 0,
            "lastConsumedTimestamp": 0,
            "lastAckedTimestamp": 0,
            "lastMarkDeleteAdvancedTimestamp": 0,
            "consumers": [c.stats() for c in self.consumers],
            "isDurable": self.durable,
            "isReplicated": False,
            "allowOutOfOrderDelivery": False,
            "consumersAfterMarkDeletePosition": {},
            "nonContiguousDeletedMessagesRanges": 0,
            "nonContiguousDeletedMessagesRangesSerializedSize": 0,
            **NO_THROTTLED_EVENTS,
            "subscriptionProperties": {},
            "msgDropRate": self.rate_drop.msgs_per_s,
        }

"""A client session's handle on one subscription of one topic (partition): what comes back from the client.

The core hands messages to the :class:`~.consumer.Consumer` under flow control (:mod:`.delivery`); whatever
the
client says back arrives here, in positions - an acknowledgement of ``(ledgerId, entryId, batchIndex)`` with
its partition, a range of positions, a negative acknowledgement - plus the end-of-topic query,
the ack-timeout tick, ``unsubscribe`` and the session's end. A protocol adapter keeps one :class:`Subscriber`
per partition of its session and parses its frames into these calls; the topic creates them
(:meth:`~.topic.PersistentTopic.subscribe`, :meth:`~.topic.PersistentTopic.create_reader`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol

from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.delivery import MsgKey
from magnetar.broker.core.errors import ServiceError
from magnetar.broker.core.positions import first_at_or_after, last_message
from magnetar.broker.core.subscription import Subscription
from magnetar.broker.wire import MessageId
from magnetar.managed_ledger.position import Position


class EndOfTopic(Protocol):
    def is_at_end(self) -> bool: ...


class SubscriptionPort(Protocol):
    """What a subscriber needs of its subscription: a persistent one (:class:`~.subscription.Subscription`)
    or a non-persistent one (:class:`~.non_persistent_subscription.NonPersistentSubscription`)."""

    @property
    def cursor(self) -> EndOfTopic: ...

    def ack(self, consumer: Consumer, message_id: MessageId) -> bool: ...

    def ack_fields(
        self,
        consumer: Consumer,
        partition: int,
        ledger_id: int,
        entry_id: int,
        batch_index: int,
    ) -> bool: ...

    def ack_range(self, consumer: Consumer, first: MsgKey, last: MsgKey) -> int: ...

    def ack_group(self, consumer: Consumer, partition: int, keys: list[MsgKey]) -> int: ...

    def nack(self, consumer: Consumer, message_id: MessageId) -> None: ...

    def redeliver_due(self, consumer: Consumer, now: float) -> None: ...


class SubscriberTopic(Protocol):
    """What a subscriber needs of its topic (:class:`~.topic.PersistentTopic`,
    :class:`~.non_persistent_topic.NonPersistentTopic`): each takes back its own kind of subscription."""

    def remove_consumer(self, subscription: Any, consumer: Consumer) -> None: ...

    async def unsubscribe(self, subscription: Any, consumer: Consumer) -> None: ...


class Subscriber:
    """One consumer of a session on one topic (partition), with the subscription it consumes."""

    __slots__ = ("_topic", "consumer", "partition", "subscription")

    def __init__(self, topic: SubscriberTopic, subscription: SubscriptionPort, consumer: Consumer) -> None:
        self._topic = topic
        self.subscription = subscription
        self.consumer = consumer
        self.partition = consumer.partition

    def ack(self, message_id: MessageId) -> bool:
        """Acknowledge one message (see :mod:`.subscription`); False when the id was ignored."""
        return self.subscription.ack(self.consumer, message_id)

    def ack_fields(self, partition: int, ledger_id: int, entry_id: int, batch_index: int) -> bool:
        """:meth:`ack` given the id's fields (a client's batch size is never used: :mod:`.subscription`)."""
        return self.subscription.ack_fields(self.consumer, partition, ledger_id, entry_id, batch_index)

    def ack_group(self, keys: list[MsgKey]) -> int:
        """Acknowledge the messages ``keys`` of this partition, as one group (the acks a client sent
        together, in order); returns how many were applied."""
        return self.subscription.ack_group(self.consumer, self.partition, keys)

    def ack_range(self, first: MsgKey, last: MsgKey) -> int:
        """Acknowledge every message pending at this consumer from ``first`` to ``last``."""
        return self.subscription.ack_range(self.consumer, first, last)

    def nack(self, message_id: MessageId) -> None:
        """Negative ack: redeliver after the consumer's ``negativeAckRedeliveryDelay``."""
        self.subscription.nack(self.consumer, message_id)

    def redeliver_due(self, now: float) -> None:
        """Due negative acks and ack timeouts go back for redelivery."""
        if self.consumer.needs_timers and not self.consumer.closed:
            self.subscription.redeliver_due(self.consumer, now)

    @property
    def needs_timers(self) -> bool:
        return self.consumer.needs_timers

    def redeliver_unacked(self, entries: Collection[tuple[int, int]] | None) -> int:
        """The client asks for its unacknowledged messages again: those of ``entries`` (``(ledgerId,
        entryId)``), or all when None, held by this consumer (see :meth:`.Subscription.redeliver_unacked`);
        a non-persistent subscription holds nothing to redeliver."""
        subscription = self.subscription
        if not isinstance(subscription, Subscription):
            return 0
        return subscription.redeliver_unacked(self.consumer, entries)

    def is_stored(self, ledger_id: int, entry_id: int) -> bool:
        """Whether ``ledger_id:entry_id`` is a stored entry of the topic (a non-persistent topic stores
        nothing and answers True: its acknowledgements are not checked against positions)."""
        subscription = self.subscription
        if not isinstance(subscription, Subscription):
            return True
        return subscription.is_stored(ledger_id, entry_id)

    def stored_batch_size(self, ledger_id: int, entry_id: int) -> int:
        """Messages of the stored batch entry ``ledger_id:entry_id`` (0: none, not a batch, not known)."""
        subscription = self.subscription
        if not isinstance(subscription, Subscription):
            return 0
        return subscription.stored_batch_size(ledger_id, entry_id)

    def _persistent(self, what: str) -> Subscription:
        subscription = self.subscription
        if not isinstance(subscription, Subscription):
            raise ServiceError(f"{what} is not supported on a non-persistent topic")
        return subscription

    async def last_message(self) -> tuple[tuple[int, int], int, tuple[int, int] | None]:
        """The topic's last stored message - its ``(ledgerId, entryId)`` and batch index (-1: stored alone;
        an empty topic answers entry -1) - and the subscription's mark-delete position (a non-durable one's
        too: a reader compares it with the last message)."""
        subscription = self._persistent("the last message id")
        position, batch_index = await last_message(subscription.cursor.ml)
        mark = subscription.cursor.mark_delete
        return (position.ledger_id, position.entry_id), batch_index, (mark.ledger_id, mark.entry_id)

    async def seek(self, entry: tuple[int, int] | None = None, *, publish_time_ms: int | None = None) -> None:
        """Reset the subscription to ``entry`` (``(ledgerId, entryId)``, each at least -1; ``-1:-1`` is the
        first stored entry, a position past the end the slot of the next message) or to the first message
        published at or after ``publish_time_ms``; every consumer of the subscription is disconnected
        (:meth:`.Subscription.seek`)."""
        subscription = self._persistent("seek")
        ml = subscription.cursor.ml
        after_last = ml.ledgers.next_position(ml.last_confirmed)
        if publish_time_ms is not None:
            found = await first_at_or_after(ml, publish_time_ms)
            target = found if found is not None else after_last
        else:
            assert entry is not None
            target = min(Position(*entry), after_last)
        if subscription.consumers and self.consumer in subscription.consumers:
            subscription.seek(target)

    def end_of_topic(self) -> bool:
        """Whether everything published was read (the topic terminated and read to its end)."""
        return self.subscription.cursor.is_at_end()

    async def unsubscribe(self) -> None:
        """The client's ``unsubscribe``: allowed when this is the subscription's only consumer."""
        await self._topic.unsubscribe(self.subscription, self.consumer)

    def close(self) -> None:
        """The session ended: the consumer leaves (what it held goes back for redelivery)."""
        self._topic.remove_consumer(self.subscription, self.consumer)

"""What a topic's policies bound, in the core's terms (:class:`TopicLimits`), and the checks made when a
producer, a consumer or a subscription is added - whichever protocol asked.

The broker's composition root resolves each loaded topic's policies (topic, partitioned topic, namespace,
broker; :mod:`magnetar.broker.policies.catalogue`) and hands the topic a :class:`TopicLimits` when it loads
and again whenever the metadata store reports a change of them (:mod:`magnetar.broker.topic_policy_watch`):
a new value applies to the next producer, consumer or subscription, and a consumer's unacknowledged bound
to the consumers already connected, without an unload. The refusals are Pulsar's, as core errors
(:mod:`.errors`) that each adapter answers in its own terms: too many producers is ``ProducerBusy`` (HTTP
409 on a WebSocket upgrade), too many consumers ``ConsumerBusy`` (409), one subscription too many
``NotAllowedError`` (500), a new subscription where automatic creation is off ``SubscriptionNotFound``
(500).

The rates (``publish_rate``, ``dispatch_rate``, ``subscription_dispatch_rate``, ``subscribe_rate``; None: no
limit) are enforced by :mod:`.throttle`; a change replaces a topic's buckets only when the rate changed.

A count of 0 means no limit, as in Pulsar. ``unacked_messages_per_consumer`` 0 means no count bound; the
consumer's byte bound (``consumer_unacked_bytes_max``) still holds, so nothing grows without a limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.broker.core.dispatcher import SubscriptionType
from magnetar.broker.core.errors import (
    DeliveryDelayTooLongError,
    SubscriptionNotFoundError,
    TooManyConsumersError,
    TooManyProducersError,
    TooManySubscriptionsError,
)
from magnetar.broker.core.throttle import DispatchLimit

UNACKED_UNBOUNDED = 2**31 - 1
"""The count bound of a consumer whose policy says 0 (none): the byte bound still applies."""


@dataclass(frozen=True, slots=True)
class TopicLimits:
    max_producers: int = 0
    max_consumers: int = 0
    max_consumers_per_subscription: int = 0
    max_subscriptions: int = 0
    unacked_messages_per_consumer: int | None = None
    """None: the bound the adapter gave the consumer (the broker's setting)."""
    unacked_messages_per_subscription: int = 0
    """Unacknowledged messages of all of a subscription's consumers together at which its dispatcher stops
    (Pulsar's ``maxUnackedMessagesPerSubscription``; it goes on below half of it); 0 = no limit."""
    auto_subscription_creation: bool = True
    quorum: tuple[int, int, int] | None = None
    """Ensemble, write and ack quorum of the topic's next ledger; None: the broker's."""
    delete_while_inactive: bool = False
    """Whether the broker deletes the topic once inactive (``inactiveTopicPolicies``;
    :mod:`magnetar.broker.inactivity` acts on these three)."""
    inactive_mode: str = "delete_when_no_subscriptions"
    max_inactive_s: int = 60
    subscription_expiration_minutes: int = 0
    """Durable subscriptions without consumers for longer are deleted; 0 = never."""
    delayed_delivery_enabled: bool = True
    """Shared and Key_Shared subscriptions hold delayed messages back until their time
    (:mod:`.delayed_tracker`); off, every message is delivered at once."""
    delayed_delivery_tick_ms: int = 1000
    """The tracker's tick: a delayed message is delivered at most this much after its time."""
    delayed_delivery_max_delay_ms: int = 0
    """A message delayed longer than this (deliver-at time minus publish time) is refused; 0 = no cap."""
    publish_rate: tuple[int, int] | None = None
    """Messages and payload bytes a second (a dimension at 0 or below is off)."""
    dispatch_rate: DispatchLimit | None = None
    """Of the whole topic (its subscriptions together)."""
    subscription_dispatch_rate: DispatchLimit | None = None
    """Of each subscription without a rate of its own in ``subscription_dispatch_rates``."""
    subscription_dispatch_rates: tuple[tuple[str, DispatchLimit], ...] = ()
    subscribe_rate: tuple[int, int] | None = None
    """Subscribes per consumer (client address and name), and the period in seconds."""
    mark_delete_rate: float | None = None
    """Mark-delete persistences per second per cursor (0: unthrottled; None: the managed ledger's
    setting)."""

    def subscription_dispatch(self, name: str) -> DispatchLimit | None:
        for subscription, limit in self.subscription_dispatch_rates:
            if subscription == name:
                return limit
        return self.subscription_dispatch_rate

    deduplication_enabled: bool = False
    """Whether the topic deduplicates messages by producer name and sequence id (:mod:`.dedup`)."""
    deduplication_snapshot_interval_s: int = 120
    """Seconds between timer snapshots of the deduplication state (when entries were stored since the
    last); 0 = no timer."""

    def consumer_unacked_max(self) -> int | None:
        value = self.unacked_messages_per_consumer
        if value is None:
            return None
        return UNACKED_UNBOUNDED if value == 0 else value


def check_delivery_delay(limits: TopicLimits, delay_ms: int) -> None:
    """Before storing a message delayed by ``delay_ms`` (Pulsar checks only while delayed delivery is on)."""
    most = limits.delayed_delivery_max_delay_ms
    if limits.delayed_delivery_enabled and 0 < most < delay_ms:
        raise DeliveryDelayTooLongError(f"Exceeds max allowed delivery delay of {most} milliseconds")


def check_producer(limits: TopicLimits, topic: str, producers: int) -> None:
    if 0 < limits.max_producers <= producers:
        raise TooManyProducersError(f"Topic '{topic}' reached max producers limit")


def check_new_subscription(
    limits: TopicLimits, topic: str, name: str, existing: dict[str, object], *, durable: bool
) -> None:
    """Before creating subscription ``name`` (nothing to check when it exists)."""
    if name in existing:
        return
    if durable and not limits.auto_subscription_creation:
        raise SubscriptionNotFoundError("Subscription does not exist")
    if 0 < limits.max_subscriptions <= len(existing):
        raise TooManySubscriptionsError(f"Exceed the maximum number of subscriptions of the topic: {topic}")


def check_consumer(limits: TopicLimits, topic_consumers: int, subscription_consumers: int,
                   sub_type: SubscriptionType) -> None:  # fmt: skip
    if 0 < limits.max_consumers <= topic_consumers:
        raise TooManyConsumersError("Topic reached max consumers limit")
    per_subscription = limits.max_consumers_per_subscription
    if sub_type is not SubscriptionType.EXCLUSIVE and 0 < per_subscription <= subscription_consumers:
        raise TooManyConsumersError("Subscription reached max consumers limit")

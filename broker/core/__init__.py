"""The broker's protocol-neutral core: topics, producers, subscriptions, dispatch and consumers.

It speaks in publish requests (:mod:`.publish`), deliveries under flow control (:mod:`.delivery`) and
acknowledgements as positions (:mod:`.subscriber`); it never sees a frame. Each client protocol is an adapter
in :mod:`magnetar.broker.protocols`; the wire formats clients share are in :mod:`magnetar.broker.wire`.
"""

from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.dedup import is_reserved_cursor
from magnetar.broker.core.delivery import Delivery, FlowControl, deliver_each
from magnetar.broker.core.dispatcher import SubscriptionType
from magnetar.broker.core.errors import (
    AccessError,
    AuthorizationUncheckedError,
    ConsumerAssignError,
    DeliveryDelayTooLongError,
    ErrorKind,
    NotAuthenticatedError,
    NotAuthorizedError,
    NotOwnerError,
    ProducerBusyError,
    ProducerFencedError,
    ReservedSubscriptionError,
    ServiceError,
    ServiceUnitNotReadyError,
    SubscribeRateLimitedError,
    SubscriptionBusyError,
    SubscriptionNotFoundError,
    TooManyConsumersError,
    TooManyProducersError,
    TooManySubscriptionsError,
    TooManyTopicsError,
    TopicNotFoundError,
)
from magnetar.broker.core.key_shared import KeySharedPolicy
from magnetar.broker.core.non_persistent_subscription import NonPersistentSubscription
from magnetar.broker.core.non_persistent_topic import NonPersistentTopic
from magnetar.broker.core.positions import first_at_or_after, last_message, publish_time
from magnetar.broker.core.producer import Capacity, Producer
from magnetar.broker.core.producer_access import AccessMode
from magnetar.broker.core.publish import COMPACT_ALONE, MESSAGES, CompactLayout, PublishRequest
from magnetar.broker.core.redelivery_timers import RedeliveryTimers
from magnetar.broker.core.routing import PartitionRouter
from magnetar.broker.core.subscriber import Subscriber
from magnetar.broker.core.subscription import Subscription
from magnetar.broker.core.throttle import THROTTLED_STATS_FIELDS, DispatchLimit
from magnetar.broker.core.topic import PersistentTopic
from magnetar.broker.core.topic_base import TopicBase
from magnetar.broker.core.topic_limits import TopicLimits
from magnetar.broker.core.topic_metrics import PUBLISH_LATENCY_BUCKETS_S, TopicMetrics

__all__ = [
    "COMPACT_ALONE",
    "MESSAGES",
    "PUBLISH_LATENCY_BUCKETS_S",
    "THROTTLED_STATS_FIELDS",
    "AccessError",
    "AccessMode",
    "AuthorizationUncheckedError",
    "Capacity",
    "CompactLayout",
    "Consumer",
    "ConsumerAssignError",
    "Delivery",
    "DeliveryDelayTooLongError",
    "DispatchLimit",
    "ErrorKind",
    "FlowControl",
    "KeySharedPolicy",
    "NonPersistentSubscription",
    "NonPersistentTopic",
    "NotAuthenticatedError",
    "NotAuthorizedError",
    "NotOwnerError",
    "PartitionRouter",
    "PersistentTopic",
    "Producer",
    "ProducerBusyError",
    "ProducerFencedError",
    "PublishRequest",
    "RedeliveryTimers",
    "ReservedSubscriptionError",
    "ServiceError",
    "ServiceUnitNotReadyError",
    "SubscribeRateLimitedError",
    "Subscriber",
    "Subscription",
    "SubscriptionBusyError",
    "SubscriptionNotFoundError",
    "SubscriptionType",
    "TooManyConsumersError",
    "TooManyProducersError",
    "TooManySubscriptionsError",
    "TooManyTopicsError",
    "TopicBase",
    "TopicLimits",
    "TopicMetrics",
    "TopicNotFoundError",
    "deliver_each",
    "first_at_or_after",
    "is_reserved_cursor",
    "last_message",
    "publish_time",
]

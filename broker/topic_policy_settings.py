"""The broker's defaults of the per-topic policies (:mod:`magnetar.broker.policies.catalogue`): what applies
where neither the topic nor its namespace sets a value. Declared once here; the broker's settings and the
admin API's (which answers ``?applied=true`` with them) inherit them through
:class:`~magnetar.broker.settings.NamespaceDefaultsSettings`.

Pulsar's ``broker.conf`` names: ``max_producers_per_topic`` = ``maxProducersPerTopic`` (and likewise the
other counts), ``consumer_unacked_messages_max`` = ``maxUnackedMessagesPerConsumer``,
``allow_auto_topic_creation`` = ``allowAutoTopicCreation``, ``allow_auto_topic_creation_type`` =
``allowAutoTopicCreationType``, ``default_num_partitions`` = ``defaultNumPartitions``,
``allow_auto_subscription_creation`` = ``allowAutoSubscriptionCreation``,
``subscription_expiration_time_minutes`` = ``subscriptionExpirationTimeMinutes``,
``managed_ledger_max_{ensemble_size,write_quorum,ack_quorum}`` = ``managedLedgerMax{EnsembleSize,...}``,
``broker_delete_inactive_topics_*`` = ``brokerDeleteInactiveTopics*`` (off by default here),
``delayed_delivery_enabled`` = ``delayedDeliveryEnabled``, ``delayed_delivery_tick_time_ms`` =
``delayedDeliveryTickTimeMillis``, ``delayed_delivery_max_delay_ms`` = ``delayedDeliveryMaxDelayInMillis``.
``broker_delete_inactive_topics_*`` = ``brokerDeleteInactiveTopics*`` (off by default here); the rate
defaults keep Pulsar's names in snake case (``max_publish_rate_per_topic_in_messages`` =
``maxPublishRatePerTopicInMessages`` ...). The default mark-delete rate (Pulsar's
``managedLedgerDefaultMarkDeleteRateLimit``) is the managed ledger's ``mark_delete_rate_per_s``.
``broker_deduplication_*`` = ``brokerDeduplication*`` (message deduplication:
:mod:`magnetar.broker.core.dedup`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from magnetar.bookkeeper.client import QuorumSettings
from magnetar.broker.policies import BrokerPolicyDefaults

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
ByteRate = Annotated[int, Field(ge=0, le=INT64_MAX)]
Quorum = Annotated[int, Field(ge=1, le=1024)]


class TopicPolicyDefaults(QuorumSettings):
    max_producers_per_topic: Count = 0
    """Producers of one topic at once; 0 = no limit."""
    max_consumers_per_topic: Count = 0
    """Consumers of one topic at once (all its subscriptions); 0 = no limit."""
    max_consumers_per_subscription: Count = 0
    """Consumers of one subscription at once; 0 = no limit."""
    max_subscriptions_per_topic: Count = 0
    """Subscriptions of one topic; 0 = no limit."""
    consumer_unacked_messages_max: Annotated[int, Field(gt=0, le=INT32_MAX)] = 50_000
    """Messages delivered to one consumer (of one partition) and not yet acknowledged, beyond which it gets
    no more until it acknowledges (Pulsar's ``maxUnackedMessagesPerConsumer``; a namespace or topic policy
    overrides it, 0 there meaning only the byte bound ``consumer_unacked_bytes_max`` applies). Binds
    pull-mode consumers (acknowledging releases no permit there); push mode's window of at most 1,000 is
    smaller."""
    max_unacked_messages_per_subscription: Count = 200_000
    """Unacknowledged messages of all consumers of one Shared or Key_Shared subscription at which it gets no
    more until they are below half of it (Pulsar's ``maxUnackedMessagesPerSubscription``; 0: none)."""
    allow_auto_topic_creation: bool = True
    allow_auto_topic_creation_type: Literal["non-partitioned", "partitioned"] = "non-partitioned"
    """``partitioned``: a client's partition lookup of a missing topic creates it with
    ``default_num_partitions`` partitions."""
    default_num_partitions: Annotated[int, Field(ge=1, le=65_536)] = 1
    allow_auto_subscription_creation: bool = True
    subscription_expiration_time_minutes: Count = 0
    """Minutes after which a durable subscription without consumers is deleted; 0 = never."""
    broker_delete_inactive_topics_enabled: bool = False
    broker_delete_inactive_topics_mode: Literal[
        "delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"
    ] = "delete_when_no_subscriptions"
    broker_delete_inactive_topics_max_inactive_duration_s: Count = 60
    """The defaults of ``inactiveTopicPolicies``: off here (Pulsar's default is on), so only a namespace or
    topic policy deletes topics."""
    broker_delete_inactive_topics_frequency_s: Annotated[int, Field(ge=1, le=86_400)] = 60
    """How often loaded topics are checked for inactivity (Pulsar's
    ``brokerDeleteInactiveTopicsFrequencySeconds``)."""
    subscription_expiry_check_interval_s: Annotated[int, Field(ge=1, le=86_400)] = 300
    """How often subscriptions are checked for expiry (Pulsar's ``subscriptionExpiryCheckIntervalInMinutes``,
    5 min)."""
    delayed_delivery_enabled: bool = True
    """Shared and Key_Shared subscriptions hold a delayed message back until its deliver-at time (off: every
    message is delivered at once). A namespace or topic ``delayedDelivery`` policy overrides it."""
    delayed_delivery_tick_time_ms: Annotated[int, Field(ge=1, le=INT32_MAX)] = 1000
    """The delayed-delivery tracker's tick: a delayed message goes out at most this much after its time."""
    delayed_delivery_max_delay_ms: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    """A message delayed longer than this (deliver-at minus publish time) is refused; 0 = no cap."""
    broker_deduplication_enabled: bool = False
    """Whether topics deduplicate messages where neither the topic nor its namespace says (Pulsar's
    ``brokerDeduplicationEnabled``)."""
    broker_deduplication_entries_interval: Annotated[int, Field(ge=1, le=INT32_MAX)] = 1000
    """Stored entries between two snapshots of a topic's deduplication state (its ``pulsar.dedup`` cursor
    holds back retention by at most about this many entries)."""
    broker_deduplication_max_number_of_producers: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000
    """Producer names a topic's deduplication state tracks at most (count); beyond, the least recently
    active is forgotten."""
    broker_deduplication_producer_inactivity_timeout_minutes: Annotated[float, Field(gt=0, le=INT32_MAX)] = (
        360
    )
    """Minutes after which the deduplication state of a producer name with no producer connected is
    forgotten (Pulsar's ``brokerDeduplicationProducerInactivityTimeoutMinutes``; checked every third of it;
    a fraction of a minute is allowed)."""
    broker_deduplication_snapshot_interval_s: Annotated[int, Field(ge=0, le=INT32_MAX)] = 120
    """Seconds between timer snapshots of the deduplication state, where neither the topic nor its namespace
    says (Pulsar's ``brokerDeduplicationSnapshotIntervalSeconds``); 0 = only every
    ``broker_deduplication_entries_interval`` entries and on close."""
    managed_ledger_max_ensemble_size: Quorum = 5
    """Largest ``bookkeeperEnsemble`` a persistence policy may ask for (Pulsar's
    ``managedLedgerMaxEnsembleSize``)."""
    managed_ledger_max_write_quorum: Quorum = 5
    managed_ledger_max_ack_quorum: Quorum = 5
    max_publish_rate_per_topic_in_messages: Count = 0
    """Messages per second one topic takes where no ``publishRate`` policy says (0 = no limit); beyond it
    the producers' connections are paused."""
    max_publish_rate_per_topic_in_bytes: ByteRate = 0
    """Payload bytes per second one topic takes (0 = no limit)."""
    dispatch_throttling_rate_per_topic_in_msg: Count = 0
    """Messages per second dispatched from one topic, all subscriptions together (0 = no limit)."""
    dispatch_throttling_rate_per_topic_in_byte: ByteRate = 0
    dispatch_throttling_rate_per_subscription_in_msg: Count = 0
    """Messages per second dispatched to one subscription (0 = no limit)."""
    dispatch_throttling_rate_per_subscription_in_byte: ByteRate = 0
    dispatch_throttling_rate_relative_to_publish_rate: bool = False
    """The default dispatch rates add the topic's last publish rate (Pulsar's ``relativeToPublishRate``)."""
    subscribe_throttling_rate_per_consumer: Count = 0
    """Subscribes one consumer (client address and consumer name) may make per
    ``subscribe_rate_period_per_consumer_in_second`` (0 = no limit)."""
    subscribe_rate_period_per_consumer_in_second: Annotated[int, Field(ge=1, le=86_400)] = 30

    def policy_defaults(self) -> BrokerPolicyDefaults:
        return BrokerPolicyDefaults(
            ensemble_size=self.ensemble_size,
            write_quorum=self.write_quorum,
            ack_quorum=self.ack_quorum,
            max_producers_per_topic=self.max_producers_per_topic,
            max_consumers_per_topic=self.max_consumers_per_topic,
            max_consumers_per_subscription=self.max_consumers_per_subscription,
            max_subscriptions_per_topic=self.max_subscriptions_per_topic,
            max_unacked_messages_per_consumer=self.consumer_unacked_messages_max,
            max_unacked_messages_per_subscription=self.max_unacked_messages_per_subscription,
            delete_inactive_topics_enabled=self.broker_delete_inactive_topics_enabled,
            delete_inactive_topics_mode=self.broker_delete_inactive_topics_mode,
            delete_inactive_topics_max_inactive_s=self.broker_delete_inactive_topics_max_inactive_duration_s,
            subscription_expiration_time_minutes=self.subscription_expiration_time_minutes,
            allow_auto_topic_creation=self.allow_auto_topic_creation,
            allow_auto_topic_creation_type=self.allow_auto_topic_creation_type,
            default_num_partitions=self.default_num_partitions,
            allow_auto_subscription_creation=self.allow_auto_subscription_creation,
            delayed_delivery_enabled=self.delayed_delivery_enabled,
            delayed_delivery_tick_time_ms=self.delayed_delivery_tick_time_ms,
            delayed_delivery_max_delay_ms=self.delayed_delivery_max_delay_ms,
            publish_rate_msgs=self.max_publish_rate_per_topic_in_messages,
            publish_rate_bytes=self.max_publish_rate_per_topic_in_bytes,
            dispatch_rate_msgs=self.dispatch_throttling_rate_per_topic_in_msg,
            dispatch_rate_bytes=self.dispatch_throttling_rate_per_topic_in_byte,
            subscription_dispatch_rate_msgs=self.dispatch_throttling_rate_per_subscription_in_msg,
            subscription_dispatch_rate_bytes=self.dispatch_throttling_rate_per_subscription_in_byte,
            dispatch_relative_to_publish_rate=self.dispatch_throttling_rate_relative_to_publish_rate,
            subscribe_rate_per_consumer=self.subscribe_throttling_rate_per_consumer,
            subscribe_rate_period_s=self.subscribe_rate_period_per_consumer_in_second,
            deduplicationEnabled=self.broker_deduplication_enabled,
            deduplicationSnapshotIntervalSeconds=self.broker_deduplication_snapshot_interval_s,
        )

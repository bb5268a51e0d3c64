"""The topic limits and behaviours set per namespace and per topic, declared once (Pulsar's
``maxProducersPerTopic``, ``persistence``, ``autoTopicCreation`` ...).

Each :class:`PolicySpec` names a policy's field in the stored documents (:class:`~.store.Policies`, the
namespace's, with Pulsar's JSON names; :class:`~.store.TopicPolicies`, a topic's), its route segment at
namespace level and, where Pulsar has one, at topic level, and its ``magnetar admin`` verbs. The admin API
(:mod:`magnetar.admin.rest.limit_policies`) builds its GET/POST/DELETE routes from this table and the CLI its
``set-*/get-*/remove-*`` verbs; no policy has routes of its own.

Resolution (:func:`resolve`): the most specific level that sets a value wins - the topic's own, then (for a
partition) its partitioned topic's, then the namespace's, then the broker's setting - and a whole object
(``persistence``, ``inactiveTopicPolicies``) is taken from one level, never merged field by field, as Pulsar
does. The result, :class:`EffectivePolicies`, is what the broker core enforces.

One exception, Pulsar's: ``delayedDelivery`` is one object at namespace level (``delayed_delivery_policies``)
but three fields at topic level (``delayedDeliveryEnabled``, ``delayedDeliveryTickTimeMillis``,
``delayedDeliveryMaxDelayInMillis``, :data:`DELAYED_TOPIC_FIELDS`), each resolved on its own (the topic's,
else the namespace object's, else the broker's). The topic route still takes and answers the object
(:func:`topic_level_value`, :func:`topic_level_update`): a topic's GET answers it only when both
``active`` and ``tickTime`` are set at that level.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from magnetar.broker.policies.store import (
    AutoSubscriptionCreationOverride,
    AutoTopicCreationOverride,
    DelayedDeliveryPolicies,
    DispatchRate,
    InactiveTopicPolicies,
    PersistencePolicies,
    Policies,
    PublishRate,
    SubscribeRate,
    TopicPolicies,
)


@dataclass(frozen=True, slots=True)
class PolicySpec:
    field: str
    """Attribute of :class:`Policies` (and of :class:`TopicPolicies` when ``topic_path`` is set)."""
    ns_path: str
    """Route segment below ``/admin/v2/namespaces/{tenant}/{namespace}/``."""
    topic_path: str | None
    """Route segment below ``/admin/v2/persistent/{tenant}/{namespace}/{topic}/``; None: namespace only."""
    ns_verb: str
    """``magnetar admin namespaces set-<ns_verb>`` / ``get-`` / ``remove-``."""
    topic_verb: str | None
    """``magnetar admin topics set-<topic_verb>`` ..."""
    kind: str
    """``int`` (a JSON number body), ``bool`` (``true``/``false``) or the name of the object body
    (``persistence``, ``inactive``, ``auto_topic``, ``auto_subscription``, ``delayed``, ``publish_rate``,
    ``dispatch_rate``, ``subscribe_rate``)."""
    help: str
    ns_name: str = ""
    """The name in a negative-value refusal at namespace level (Pulsar's wording)."""
    topic_error: str = ""
    """The whole refusal of a negative value at topic level (Pulsar's wording)."""


def _limit(field: str, ns_path: str, topic_path: str, ns_verb: str, topic_verb: str, help_text: str,
           topic_error: str) -> PolicySpec:  # fmt: skip
    return PolicySpec(field, ns_path, topic_path, ns_verb, topic_verb, "int", help_text, ns_path, topic_error)


CATALOGUE: tuple[PolicySpec, ...] = (
    PolicySpec("persistence", "persistence", "persistence", "persistence", "persistence", "persistence",
               "quorum of the topic's new ledgers (ensemble, write, ack) and mark-delete rate"),
    _limit("max_producers_per_topic", "maxProducersPerTopic", "maxProducers", "max-producers-per-topic",
           "max-producers", "producers connected to one topic at once (0 = no limit)",
           "maxProducers must be 0 or more"),
    _limit("max_consumers_per_topic", "maxConsumersPerTopic", "maxConsumers", "max-consumers-per-topic",
           "max-consumers", "consumers of one topic at once (0 = no limit)",
           "maxConsumers must be 0 or more"),
    _limit("max_consumers_per_subscription", "maxConsumersPerSubscription", "maxConsumersPerSubscription",
           "max-consumers-per-subscription", "max-consumers-per-subscription",
           "consumers of one subscription at once (0 = no limit)",
           "Invalid value for maxConsumersPerSubscription"),
    _limit("max_subscriptions_per_topic", "maxSubscriptionsPerTopic", "maxSubscriptionsPerTopic",
           "max-subscriptions-per-topic", "max-subscriptions-per-topic",
           "subscriptions of one topic (0 = no limit)", "maxSubscriptionsPerTopic must be 0 or more"),
    _limit("max_unacked_messages_per_consumer", "maxUnackedMessagesPerConsumer",
           "maxUnackedMessagesOnConsumer", "max-unacked-messages-per-consumer",
           "max-unacked-messages-per-consumer",
           "unacknowledged messages one consumer may hold (0 = only the byte bound)",
           "maxUnackedNum must be 0 or more"),
    _limit("max_unacked_messages_per_subscription", "maxUnackedMessagesPerSubscription",
           "maxUnackedMessagesOnSubscription", "max-unacked-messages-per-subscription",
           "max-unacked-messages-per-subscription",
           "unacknowledged messages of one subscription (Shared and Key_Shared)",
           "maxUnackedNum must be 0 or more"),
    PolicySpec("inactive_topic_policies", "inactiveTopicPolicies", "inactiveTopicPolicies",
               "inactive-topic-policies", "inactive-topic-policies", "inactive",
               "deletion of inactive topics"),
    PolicySpec("subscription_expiration_time_minutes", "subscriptionExpirationTime", None,
               "subscription-expiration-time", None, "int",
               "minutes after which a subscription without consumers is deleted (0 = never)"),
    PolicySpec("autoTopicCreationOverride", "autoTopicCreation", None, "auto-topic-creation", None,
               "auto_topic", "whether using a missing topic creates it"),
    PolicySpec("autoSubscriptionCreationOverride", "autoSubscriptionCreation", "autoSubscriptionCreation",
               "auto-subscription-creation", "auto-subscription-creation", "auto_subscription",
               "whether subscribing with a new name creates the subscription"),
    PolicySpec("delayed_delivery_policies", "delayedDelivery", "delayedDelivery", "delayed-delivery",
               "delayed-delivery", "delayed",
               "delayed delivery: on/off, tick (ms), longest delay a message may ask (ms, 0 = no cap)"),
    PolicySpec("publish_rate", "publishRate", "publishRate", "publish-rate", "publish-rate", "publish_rate",
               "messages and bytes per second a topic takes (producers paused beyond)"),
    PolicySpec("dispatch_rate", "dispatchRate", "dispatchRate", "dispatch-rate", "dispatch-rate",
               "dispatch_rate", "messages and bytes per period dispatched from a topic"),
    PolicySpec("subscription_dispatch_rate", "subscriptionDispatchRate", "subscriptionDispatchRate",
               "subscription-dispatch-rate", "subscription-dispatch-rate", "dispatch_rate",
               "messages and bytes per period dispatched to each subscription"),
    PolicySpec("subscribe_rate", "subscribeRate", "subscribeRate", "subscribe-rate", "subscribe-rate",
               "subscribe_rate", "subscribes per period of one consumer (client address and name)"),
    PolicySpec("deduplicationEnabled", "deduplication", "deduplicationEnabled", "deduplication",
               "deduplication", "bool", "whether messages are deduplicated by producer name and sequence id"),
    PolicySpec("deduplicationSnapshotIntervalSeconds", "deduplicationSnapshotInterval",
               "deduplicationSnapshotInterval", "deduplication-snapshot-interval",
               "deduplication-snapshot-interval", "int",
               "seconds between timer snapshots of the deduplication state (0 = none)",
               "interval must be greater than or equal to 0", "interval must be 0 or more"),
)  # fmt: skip

DELAYED = "delayed_delivery_policies"
DELAYED_TOPIC_FIELDS = {
    "active": "delayedDeliveryEnabled",
    "tickTime": "delayedDeliveryTickTimeMillis",
    "maxDeliveryDelayInMillis": "delayedDeliveryMaxDelayInMillis",
}
"""The namespace object's field -> the topic's own field (see the module docstring)."""

RATE_KINDS = ("publish_rate", "dispatch_rate", "subscribe_rate")
"""Kinds whose value normalises to none (inherit) when it limits nothing (Pulsar's ``normalize``)."""

BY_FIELD = {spec.field: spec for spec in CATALOGUE}


@dataclass(frozen=True, slots=True)
class BrokerPolicyDefaults:
    """The broker's settings behind every policy no level sets (Pulsar's ``broker.conf`` names in the
    docstrings of :class:`magnetar.broker.settings.TopicPolicyDefaults`)."""

    ensemble_size: int = 2
    write_quorum: int = 2
    ack_quorum: int = 2
    mark_delete_rate: float = 1.0
    max_producers_per_topic: int = 0
    max_consumers_per_topic: int = 0
    max_consumers_per_subscription: int = 0
    max_subscriptions_per_topic: int = 0
    max_unacked_messages_per_consumer: int = 50_000
    max_unacked_messages_per_subscription: int = 200_000
    delete_inactive_topics_enabled: bool = False
    delete_inactive_topics_mode: str = "delete_when_no_subscriptions"
    delete_inactive_topics_max_inactive_s: int = 60
    subscription_expiration_time_minutes: int = 0
    allow_auto_topic_creation: bool = True
    allow_auto_topic_creation_type: str = "non-partitioned"
    default_num_partitions: int = 1
    allow_auto_subscription_creation: bool = True
    delayed_delivery_enabled: bool = True
    delayed_delivery_tick_time_ms: int = 1000
    delayed_delivery_max_delay_ms: int = 0
    publish_rate_msgs: int = 0
    publish_rate_bytes: int = 0
    dispatch_rate_msgs: int = 0
    dispatch_rate_bytes: int = 0
    subscription_dispatch_rate_msgs: int = 0
    subscription_dispatch_rate_bytes: int = 0
    dispatch_relative_to_publish_rate: bool = False
    subscribe_rate_per_consumer: int = 0
    subscribe_rate_period_s: int = 30
    deduplicationEnabled: bool = False
    deduplicationSnapshotIntervalSeconds: int = 120

    def value(self, field: str) -> Any:
        """The broker's value of policy ``field``, in the shape the admin API answers."""
        if field == DELAYED:
            return DelayedDeliveryPolicies(
                active=self.delayed_delivery_enabled,
                tickTime=self.delayed_delivery_tick_time_ms,
                maxDeliveryDelayInMillis=self.delayed_delivery_max_delay_ms,
            )
        if field == "persistence":
            return PersistencePolicies(
                bookkeeperEnsemble=self.ensemble_size,
                bookkeeperWriteQuorum=self.write_quorum,
                bookkeeperAckQuorum=self.ack_quorum,
                managedLedgerMaxMarkDeleteRate=self.mark_delete_rate,
            )
        if field == "inactive_topic_policies":
            return InactiveTopicPolicies(
                inactiveTopicDeleteMode=self.delete_inactive_topics_mode,
                maxInactiveDurationSeconds=self.delete_inactive_topics_max_inactive_s,
                deleteWhileInactive=self.delete_inactive_topics_enabled,
            )
        if field == "autoTopicCreationOverride":
            partitioned = self.allow_auto_topic_creation_type == "partitioned"
            return AutoTopicCreationOverride(
                allowAutoTopicCreation=self.allow_auto_topic_creation,
                topicType=self.allow_auto_topic_creation_type,
                defaultNumPartitions=self.default_num_partitions if partitioned else None,
            )
        if field == "autoSubscriptionCreationOverride":
            return AutoSubscriptionCreationOverride(
                allowAutoSubscriptionCreation=self.allow_auto_subscription_creation
            )
        if field == "publish_rate":
            return normalize_publish(PublishRate(
                publishThrottlingRateInMsg=self.publish_rate_msgs,
                publishThrottlingRateInByte=self.publish_rate_bytes,
            ))  # fmt: skip
        if field in ("dispatch_rate", "subscription_dispatch_rate"):
            prefix = "" if field == "dispatch_rate" else "subscription_"
            return normalize_dispatch(DispatchRate(
                dispatchThrottlingRateInMsg=getattr(self, f"{prefix}dispatch_rate_msgs"),
                dispatchThrottlingRateInByte=getattr(self, f"{prefix}dispatch_rate_bytes"),
                relativeToPublishRate=self.dispatch_relative_to_publish_rate,
                ratePeriodInSecond=1,
            ))  # fmt: skip
        if field == "subscribe_rate":
            return normalize_subscribe(SubscribeRate(
                subscribeThrottlingRatePerConsumer=self.subscribe_rate_per_consumer,
                ratePeriodInSecond=self.subscribe_rate_period_s,
            ))  # fmt: skip
        return getattr(self, field)


def normalize_publish(rate: PublishRate) -> PublishRate | None:
    """None (no limit, inherit) when neither dimension is positive."""
    if rate.publishThrottlingRateInMsg <= 0 and rate.publishThrottlingRateInByte <= 0:
        return None
    return rate


def normalize_dispatch(rate: DispatchRate) -> DispatchRate | None:
    if rate.dispatchThrottlingRateInMsg <= 0 and rate.dispatchThrottlingRateInByte <= 0:
        return None
    return rate


def normalize_subscribe(rate: SubscribeRate) -> SubscribeRate | None:
    """None unless both the count and the period are positive."""
    if rate.subscribeThrottlingRatePerConsumer <= 0 or rate.ratePeriodInSecond <= 0:
        return None
    return rate


NORMALIZE: dict[str, Callable[[Any], Any]] = {
    "publish_rate": normalize_publish,
    "dispatch_rate": normalize_dispatch,
    "subscription_dispatch_rate": normalize_dispatch,
    "subscribe_rate": normalize_subscribe,
}
"""The rates are stored as given and read as none (the next level's) when they limit nothing, as Pulsar's
``normalize`` makes them: so a topic's ``-1`` cannot lift its namespace's rate."""


@dataclass(frozen=True, slots=True)
class EffectivePolicies:
    """What applies to one topic now (every value resolved; 0 = no limit for the counts)."""

    persistence: PersistencePolicies
    max_producers_per_topic: int
    max_consumers_per_topic: int
    max_consumers_per_subscription: int
    max_subscriptions_per_topic: int
    max_unacked_messages_per_consumer: int
    max_unacked_messages_per_subscription: int
    inactive_topic_policies: InactiveTopicPolicies
    subscription_expiration_time_minutes: int
    auto_topic_creation: AutoTopicCreationOverride
    auto_subscription_creation: bool
    delayed_delivery: DelayedDeliveryPolicies
    deduplication_enabled: bool
    deduplication_snapshot_interval_s: int
    publish_rate: PublishRate | None = None
    dispatch_rate: DispatchRate | None = None
    subscription_dispatch_rate: DispatchRate | None = None
    subscribe_rate: SubscribeRate | None = None
    """The rates in effect (None: no limit)."""
    subscription_dispatch_rates: tuple[tuple[str, DispatchRate], ...] = ()
    """The topic's per-subscription dispatch rates (override ``subscription_dispatch_rate``)."""


def topic_level_value(field: str, level: TopicPolicies) -> Any:
    """What one topic level sets for policy ``field`` (None: nothing), in the shape the admin API answers."""
    if field != DELAYED:
        return getattr(level, field)
    if level.delayedDeliveryEnabled is None or level.delayedDeliveryTickTimeMillis is None:
        return None
    return DelayedDeliveryPolicies(
        active=level.delayedDeliveryEnabled,
        tickTime=level.delayedDeliveryTickTimeMillis,
        maxDeliveryDelayInMillis=level.delayedDeliveryMaxDelayInMillis or 0,
    )


def topic_level_update(field: str, value: Any) -> dict[str, Any]:
    """The fields of a topic's policies document that setting ``field`` to ``value`` (None: unset) writes."""
    if field != DELAYED:
        return {field: value}
    if value is None:
        return dict.fromkeys(DELAYED_TOPIC_FIELDS.values())
    return {own: getattr(value, name) for name, own in DELAYED_TOPIC_FIELDS.items()}


def _delayed(topic_levels: list[TopicPolicies], namespace: Policies | None,
             defaults: BrokerPolicyDefaults) -> DelayedDeliveryPolicies:  # fmt: skip
    """``delayedDelivery`` resolved field by field (see the module docstring)."""
    fallback = namespace.delayed_delivery_policies if namespace is not None else None
    if fallback is None:
        fallback = defaults.value(DELAYED)
    values: dict[str, Any] = {}
    for name, own in DELAYED_TOPIC_FIELDS.items():
        values[name] = next(
            (v for v in (getattr(level, own) for level in topic_levels) if v is not None),
            getattr(fallback, name),
        )
    return DelayedDeliveryPolicies.model_validate(values)


def first_set(field: str, topic_levels: list[TopicPolicies], namespace: Policies | None,
              defaults: BrokerPolicyDefaults) -> Any:  # fmt: skip
    """Policy ``field`` from the most specific level that sets it (topic levels first, most specific
    first), else the broker's value."""
    if field == DELAYED:
        return _delayed(topic_levels, namespace, defaults)
    normal = NORMALIZE.get(field)
    levels: list[Any] = list(topic_levels) if BY_FIELD[field].topic_path is not None else []
    if namespace is not None:
        levels.append(namespace)
    for level in levels:
        value = getattr(level, field)
        if value is not None and normal is not None:
            value = normal(value)
        if value is not None:
            return value
    return defaults.value(field)


def resolve(topic_levels: list[TopicPolicies], namespace: Policies | None,
            defaults: BrokerPolicyDefaults) -> EffectivePolicies:  # fmt: skip
    def get(field: str) -> Any:
        return first_set(field, topic_levels, namespace, defaults)

    auto_sub: AutoSubscriptionCreationOverride = get("autoSubscriptionCreationOverride")
    return EffectivePolicies(
        persistence=get("persistence"),
        max_producers_per_topic=get("max_producers_per_topic"),
        max_consumers_per_topic=get("max_consumers_per_topic"),
        max_consumers_per_subscription=get("max_consumers_per_subscription"),
        max_subscriptions_per_topic=get("max_subscriptions_per_topic"),
        max_unacked_messages_per_consumer=get("max_unacked_messages_per_consumer"),
        max_unacked_messages_per_subscription=get("max_unacked_messages_per_subscription"),
        inactive_topic_policies=get("inactive_topic_policies"),
        subscription_expiration_time_minutes=get("subscription_expiration_time_minutes"),
        auto_topic_creation=get("autoTopicCreationOverride"),
        auto_subscription_creation=auto_sub.allowAutoSubscriptionCreation,
        delayed_delivery=get(DELAYED),
        publish_rate=get("publish_rate"),
        dispatch_rate=get("dispatch_rate"),
        subscription_dispatch_rate=get("subscription_dispatch_rate"),
        subscribe_rate=get("subscribe_rate"),
        subscription_dispatch_rates=_per_subscription(topic_levels),
        deduplication_enabled=get("deduplicationEnabled"),
        deduplication_snapshot_interval_s=get("deduplicationSnapshotIntervalSeconds"),
    )


def _per_subscription(topic_levels: list[TopicPolicies]) -> tuple[tuple[str, DispatchRate], ...]:
    """Each subscription's own dispatch rate, from the most specific topic level that has one."""
    rates: dict[str, DispatchRate] = {}
    for level in reversed(topic_levels):
        rates.update(level.subscription_dispatch_rates)
    return tuple(sorted(rates.items()))

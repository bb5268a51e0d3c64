"""Each loaded topic's policies, kept current through the metadata store's watch.

When a topic loads, the service asks :meth:`TopicPolicyWatch.limits` for what its policies bound
(:func:`~magnetar.broker.policies.catalogue.resolve`: the topic's own, its partitioned topic's, the
namespace's, the broker's settings) and hands the topic the result (:class:`~.core.TopicLimits`). The watch
listens to the metadata store: a namespace's policies document (``/admin/policies/<tenant>/<namespace>``)
or a topic's (``/admin/topic-policies/<tenant>/<namespace>/<topic>``) created, changed or deleted marks that
namespace, and its loaded topics - of every broker, each watching its own store session - are given their
new limits without an unload. A reconnected session (notifications may have been missed) marks every
namespace. A read that fails (the store away) leaves a topic with what it had; the next change retries.

The same resolution answers whether a missing topic may be created automatically (the namespace's
``autoTopicCreationOverride``, else ``allow_auto_topic_creation``) and whether partitioned, with how many
partitions (``topicType``, ``defaultNumPartitions``; else ``allow_auto_topic_creation_type``,
``default_num_partitions``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable

import trio

from magnetar.bookkeeper.metadata import MetadataStore, MetadataStoreError, Notification, SessionEvent
from magnetar.broker.core import DispatchLimit, ServiceUnitNotReadyError, TopicBase, TopicLimits
from magnetar.broker.policies import (
    POLICIES,
    TOPIC_POLICIES,
    AlreadyExists,
    AutoTopicCreationOverride,
    BrokerPolicyDefaults,
    DispatchRate,
    EffectivePolicies,
    PolicyError,
    PolicyStore,
    normalize_dispatch,
    resolve,
)
from magnetar.broker.wire import TopicName

log = logging.getLogger(__name__)

ALL = "*"
"""Marks every namespace (after a reconnection)."""


def dispatch_limit(rate: DispatchRate | None) -> DispatchLimit | None:
    if rate is None:
        return None
    return DispatchLimit(
        rate.dispatchThrottlingRateInMsg,
        rate.dispatchThrottlingRateInByte,
        max(1, rate.ratePeriodInSecond),
        rate.relativeToPublishRate,
    )


def limits_of(effective: EffectivePolicies) -> TopicLimits:
    p = effective.persistence
    inactive = effective.inactive_topic_policies
    delayed = effective.delayed_delivery
    publish = effective.publish_rate
    subscribe = effective.subscribe_rate
    per_subscription = tuple(
        (name, limit)
        for name, rate in effective.subscription_dispatch_rates
        if (limit := dispatch_limit(normalize_dispatch(rate))) is not None
    )
    return TopicLimits(
        max_producers=effective.max_producers_per_topic,
        max_consumers=effective.max_consumers_per_topic,
        max_consumers_per_subscription=effective.max_consumers_per_subscription,
        max_subscriptions=effective.max_subscriptions_per_topic,
        unacked_messages_per_consumer=effective.max_unacked_messages_per_consumer,
        unacked_messages_per_subscription=effective.max_unacked_messages_per_subscription or 0,
        auto_subscription_creation=effective.auto_subscription_creation,
        quorum=(p.bookkeeperEnsemble, p.bookkeeperWriteQuorum, p.bookkeeperAckQuorum),
        delete_while_inactive=inactive.deleteWhileInactive,
        inactive_mode=inactive.inactiveTopicDeleteMode or "delete_when_no_subscriptions",
        max_inactive_s=inactive.maxInactiveDurationSeconds,
        subscription_expiration_minutes=effective.subscription_expiration_time_minutes,
        delayed_delivery_enabled=delayed.active,
        delayed_delivery_tick_ms=max(1, delayed.tickTime),
        delayed_delivery_max_delay_ms=max(0, delayed.maxDeliveryDelayInMillis),
        publish_rate=None
        if publish is None
        else (publish.publishThrottlingRateInMsg, publish.publishThrottlingRateInByte),
        dispatch_rate=dispatch_limit(effective.dispatch_rate),
        subscription_dispatch_rate=dispatch_limit(effective.subscription_dispatch_rate),
        subscription_dispatch_rates=per_subscription,
        subscribe_rate=None
        if subscribe is None
        else (subscribe.subscribeThrottlingRatePerConsumer, subscribe.ratePeriodInSecond),
        mark_delete_rate=p.managedLedgerMaxMarkDeleteRate,
        deduplication_enabled=effective.deduplication_enabled,
        deduplication_snapshot_interval_s=effective.deduplication_snapshot_interval_s,
    )


def namespace_of_path(path: str) -> str | None:
    """The namespace whose policies a changed metadata node holds, or None for any other node."""
    for root, depth in ((POLICIES, 2), (TOPIC_POLICIES, 3)):
        if path.startswith(root + "/"):
            parts = path[len(root) + 1 :].split("/")
            if len(parts) == depth:
                return f"{parts[0]}/{parts[1]}"
    return None


class TopicPolicyWatch:
    def __init__(
        self,
        store: MetadataStore,
        policies: PolicyStore,
        defaults: BrokerPolicyDefaults,
        loaded: Callable[[], Iterable[TopicBase]],
        *,
        retention_default_min: int = 0,
    ) -> None:
        self._store = store
        self._policies = policies
        self._defaults = defaults
        self._loaded = loaded
        self._retention_default_min = retention_default_min
        self._dirty: set[str] = set()
        self._changed = trio.Event()
        self.changes = 0
        """Notifications seen so far: a load that read the policies before a change re-reads them."""

    async def effective(self, topic: TopicName) -> EffectivePolicies:
        namespace = str(topic.namespace_name)
        levels = [await self._policies.get_topic_policies(namespace, topic.local_name)]
        if topic.is_partition:
            parent = topic.partitioned_topic.local_name
            levels.append(await self._policies.get_topic_policies(namespace, parent))
        return resolve(levels, await self._policies.get_namespace(namespace), self._defaults)

    async def limits(self, topic: TopicName) -> TopicLimits:
        """The topic's limits now; :class:`ServiceUnitNotReadyError` when they cannot be read (the client
        retries)."""
        try:
            return limits_of(await self.effective(topic))
        except (PolicyError, MetadataStoreError) as exc:
            raise ServiceUnitNotReadyError(f"reading the policies of {topic} failed: {exc}") from exc

    async def retention_minutes(self, topic: TopicName) -> int:
        """The retention time (minutes) in effect: topic, partitioned topic, namespace, broker."""
        namespace = str(topic.namespace_name)
        names = [topic.local_name] + ([topic.partitioned_topic.local_name] if topic.is_partition else [])
        for name in names:
            own = (await self._policies.get_topic_policies(namespace, name)).retention_policies
            if own is not None:
                return own.retentionTimeInMinutes
        policies = await self._policies.get_namespace(namespace)
        if policies is not None and policies.retention_policies is not None:
            return policies.retention_policies.retentionTimeInMinutes
        return self._retention_default_min

    async def creation_rule(self, namespace: str) -> AutoTopicCreationOverride:
        """Whether and how a missing topic of ``namespace`` is created on first use: the namespace's
        override as a whole, else the broker's settings."""
        try:
            policies = await self._policies.get_namespace(namespace)
        except (PolicyError, MetadataStoreError) as exc:
            raise ServiceUnitNotReadyError(f"reading the policies of {namespace} failed: {exc}") from exc
        override = policies.autoTopicCreationOverride if policies is not None else None
        if override is not None:
            return override
        rule: AutoTopicCreationOverride = self._defaults.value("autoTopicCreationOverride")
        return rule

    async def auto_partitions(self, topic: TopicName, exists: Callable[[str], Awaitable[bool]]) -> int:
        """Create the missing ``topic`` partitioned when its namespace's rule says ``partitioned`` (as a
        client's partition lookup does in Pulsar); its partitions, 0 when it is not created so."""
        namespace = str(topic.namespace_name)
        rule = await self.creation_rule(namespace)
        if not (
            rule.allowAutoTopicCreation and rule.topicType == "partitioned" and rule.defaultNumPartitions
        ):
            return 0
        if await exists(topic.managed_ledger_name):
            return 0  # an existing non-partitioned topic
        with contextlib.suppress(AlreadyExists):
            await self._policies.create_partitioned(namespace, topic.local_name, rule.defaultNumPartitions)
        return await self._policies.get_partitions(namespace, topic.local_name)

    async def may_create(self, namespace: str) -> bool:
        """Whether a missing topic of ``namespace`` may be created on first use."""
        return (await self.creation_rule(namespace)).allowAutoTopicCreation

    def _on_notification(self, notification: Notification) -> None:
        namespace = namespace_of_path(notification.path)
        if namespace is not None:
            self._mark(namespace)

    def _on_session(self, event: SessionEvent) -> None:
        if event in (SessionEvent.RECONNECTED, SessionEvent.SESSION_REESTABLISHED):
            self._mark(ALL)

    def _mark(self, namespace: str) -> None:
        self.changes += 1
        self._dirty.add(namespace)
        self._changed.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        unregister = self._store.register_listener(self._on_notification)
        unregister_session = self._store.register_session_listener(self._on_session)
        task_status.started()
        try:
            while True:
                await self._changed.wait()
                self._changed = trio.Event()
                dirty, self._dirty = self._dirty, set()
                await self.refresh(dirty)
        finally:
            unregister()
            unregister_session()

    async def refresh(self, namespaces: set[str]) -> None:
        """Give the loaded topics of ``namespaces`` (:data:`ALL`: every one) their current limits."""
        for topic in list(self._loaded()):
            if ALL not in namespaces and str(topic.name.namespace_name) not in namespaces:
                continue
            try:
                topic.apply_limits(await self.limits(topic.name))
            except ServiceUnitNotReadyError as exc:
                log.warning("policies of %s not refreshed (it keeps its limits): %s", topic.name, exc)

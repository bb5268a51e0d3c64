"""Deleting inactive topics and expired subscriptions (Pulsar's inactivity monitor), from each loaded
topic's policies (:class:`~.core.TopicLimits`, kept current by :mod:`.topic_policy_watch`).

Topics, every ``broker_delete_inactive_topics_frequency_s``: a loaded persistent topic is *active* while it
has a producer or a consumer, and - in mode ``delete_when_no_subscriptions`` - while it has any subscription,
in mode ``delete_when_subscriptions_caught_up`` while a subscription has a backlog. Each check that finds it
active (and the first that sees it) notes the time. One whose effective ``inactiveTopicPolicies`` says
``deleteWhileInactive`` is deleted once inactive for ``maxInactiveDurationSeconds`` - unless retention keeps
it: a retention time of -1 keeps it for ever, a positive one until the topic was inactive that long too. The
deletion is the admin API's (refused if a client connected meanwhile; nothing is lost then). A partition's
data goes; its partitioned topic's metadata stays, as in Pulsar by default.

Non-persistent topics, in the same round and by the same policies: one is active while it has a producer or
a consumer, and - in mode ``delete_when_no_subscriptions`` - while it has any subscription (a durable one
outlives its consumers; a non-durable one goes with its last). Inactive for ``maxInactiveDurationSeconds``
it is removed from the broker (nothing is stored, so retention does not keep it), as Pulsar's non-persistent
topics go; a client that comes back later creates it afresh.

Subscriptions, every ``subscription_expiry_check_interval_s``: a durable subscription without consumers
since the first check that saw it so, for longer than the effective ``subscriptionExpirationTime`` (minutes;
0 = never), is deleted. The time is measured between checks, so an expiry can come up to one interval late.

Unlike Pulsar, a namespace or topic policy applies even when the broker's own default
(``broker_delete_inactive_topics_enabled``) is off.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

import trio

from magnetar.bookkeeper.metadata import MetadataStoreError
from magnetar.bookkeeper.runtime import Clock
from magnetar.broker.core import NonPersistentTopic, PersistentTopic, ServiceError
from magnetar.broker.policies import PolicyError, PolicyStore
from magnetar.broker.wire import TopicName

log = logging.getLogger(__name__)

COMPACTION_SUBSCRIPTION = "__compaction"


def is_active(topic: PersistentTopic) -> bool:
    if topic.producers or any(s.consumers for s in topic.subscriptions.values()):
        return True
    if topic.limits.inactive_mode == "delete_when_subscriptions_caught_up":
        return any(s.durable and s.backlog() > 0 for s in topic.subscriptions.values())
    return any(s.durable for s in topic.subscriptions.values())


def is_active_non_persistent(topic: NonPersistentTopic) -> bool:
    if topic.producers or any(s.consumers for s in topic.subscriptions.values()):
        return True
    return topic.limits.inactive_mode != "delete_when_subscriptions_caught_up" and bool(topic.subscriptions)


class InactivityMonitor:
    def __init__(
        self,
        clock: Clock,
        loaded: Callable[[], Iterable[PersistentTopic]],
        retention_minutes: Callable[[TopicName], Awaitable[int]],
        delete_topic: Callable[[TopicName], Awaitable[None]],
        policies: PolicyStore,
        non_persistent: Callable[[], Iterable[NonPersistentTopic]] = list,
        remove_non_persistent: Callable[[TopicName], None] = lambda _: None,
    ) -> None:
        """``non_persistent``: the loaded non-persistent topics; ``remove_non_persistent`` drops one from the
        broker (refused with :class:`~.core.SubscriptionBusyError` while a client is connected)."""
        self._clock = clock
        self._loaded = loaded
        self._non_persistent = non_persistent
        self._remove_non_persistent = remove_non_persistent
        self._retention_minutes = retention_minutes
        self._delete_topic = delete_topic
        self._policies = policies
        self._active_at: dict[str, int] = {}
        self._idle_since: dict[tuple[str, str], int] = {}

    async def run(self, topics_interval_s: float, subscriptions_interval_s: float) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._every, topics_interval_s, self.check_topics)
            nursery.start_soon(self._every, subscriptions_interval_s, self.check_subscriptions)

    @staticmethod
    async def _every(interval_s: float, check: Callable[[], Awaitable[object]]) -> None:
        while True:
            await trio.sleep(interval_s)
            await check()

    async def check_topics(self) -> list[str]:
        """One round over the loaded topics; the names of those deleted."""
        now = self._clock.time_ms()
        deleted: list[str] = []
        loaded = list(self._loaded())
        for topic in loaded:
            key = topic.full_name
            if key not in self._active_at or is_active(topic):
                self._active_at[key] = now
                continue
            limits = topic.limits
            idle_ms = now - self._active_at[key]
            if not limits.delete_while_inactive or idle_ms < limits.max_inactive_s * 1000:
                continue
            try:
                retention = await self._retention_minutes(topic.name)
                if retention < 0 or idle_ms < retention * 60_000:
                    continue
                await self._delete_topic(topic.name)
                await self._policies.delete_topic_policies(
                    str(topic.name.namespace_name), topic.name.local_name
                )
            except (ServiceError, PolicyError, MetadataStoreError) as exc:
                log.info("inactive topic %s not deleted: %s", key, exc)
                continue
            log.info("deleted topic %s: inactive for %d s", key, idle_ms // 1000)
            deleted.append(key)
        non_persistent = list(self._non_persistent())
        for np_topic in non_persistent:
            idle = self._idle_long_enough(np_topic, now, is_active_non_persistent(np_topic))
            if idle and await self._remove_idle_non_persistent(np_topic, now):
                deleted.append(np_topic.full_name)
        names = {t.full_name for t in [*loaded, *non_persistent]} - set(deleted)
        self._active_at = {k: v for k, v in self._active_at.items() if k in names}
        return deleted

    def _idle_long_enough(self, topic: NonPersistentTopic, now: int, active: bool) -> bool:
        key = topic.full_name
        if key not in self._active_at or active:
            self._active_at[key] = now
            return False
        limits = topic.limits
        return limits.delete_while_inactive and now - self._active_at[key] >= limits.max_inactive_s * 1000

    async def _remove_idle_non_persistent(self, topic: NonPersistentTopic, now: int) -> bool:
        key = topic.full_name
        try:
            self._remove_non_persistent(topic.name)
            await self._policies.delete_topic_policies(str(topic.name.namespace_name), topic.name.local_name)
        except (ServiceError, PolicyError, MetadataStoreError) as exc:
            log.info("inactive topic %s not removed: %s", key, exc)
            return False
        log.info("removed topic %s: inactive for %d s", key, (now - self._active_at[key]) // 1000)
        return True

    async def check_subscriptions(self) -> list[tuple[str, str]]:
        """One round over the loaded topics' subscriptions; (topic, subscription) of those deleted."""
        now = self._clock.time_ms()
        deleted: list[tuple[str, str]] = []
        seen: set[tuple[str, str]] = set()
        for topic in list(self._loaded()):
            minutes = topic.limits.subscription_expiration_minutes
            for name, subscription in list(topic.subscriptions.items()):
                key = (topic.full_name, name)
                if subscription.consumers or not subscription.durable or name == COMPACTION_SUBSCRIPTION:
                    continue
                seen.add(key)
                since = self._idle_since.setdefault(key, now)
                if minutes <= 0 or now - since <= minutes * 60_000:
                    continue
                try:
                    await topic.delete_subscription(name)
                except (ServiceError, MetadataStoreError) as exc:
                    log.info("expired subscription %s of %s not deleted: %s", name, topic.full_name, exc)
                    continue
                log.info("deleted subscription %s of %s: no consumer for %d min", name, topic.full_name,
                         (now - since) // 60_000)  # fmt: skip
                deleted.append(key)
                seen.discard(key)
        self._idle_since = {k: v for k, v in self._idle_since.items() if k in seen}
        return deleted

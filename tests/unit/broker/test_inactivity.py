"""Deletion of inactive topics and expired subscriptions (:mod:`magnetar.broker.inactivity`) over stand-in
topics and a fake clock: what counts as activity in each mode, the inactive duration, retention keeping a
topic, and a subscription's expiry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fixtures.auth import FakeClock

from magnetar.bookkeeper.metadata import MemoryMetadataStore
from magnetar.broker.core import SubscriptionBusyError
from magnetar.broker.core.topic_limits import TopicLimits
from magnetar.broker.inactivity import InactivityMonitor
from magnetar.broker.policies import PolicyStore
from magnetar.broker.wire import TopicName, parse_topic_name


@dataclass
class Sub:
    durable: bool = True
    consumers: list[object] = field(default_factory=list)
    messages_behind: int = 0

    def backlog(self) -> int:
        return self.messages_behind


@dataclass
class Topic:
    name: TopicName
    limits: TopicLimits
    producers: dict[str, object] = field(default_factory=dict)
    subscriptions: dict[str, Sub] = field(default_factory=dict)

    @property
    def full_name(self) -> str:
        return str(self.name)

    async def delete_subscription(self, name: str, *, force: bool = False) -> None:
        del self.subscriptions[name]


class World:
    def __init__(self, *topics: Topic, retention_min: int = 0) -> None:
        self.clock = FakeClock()
        self.topics = {t.full_name: t for t in topics if t.name.is_persistent}
        self.non_persistent = {t.full_name: t for t in topics if not t.name.is_persistent}
        self.deleted: list[str] = []
        self.retention_min = retention_min
        self.busy = False

        async def retention(_: TopicName) -> int:
            return self.retention_min

        async def delete(name: TopicName) -> None:
            if self.busy:
                raise SubscriptionBusyError("Topic has active producers/subscriptions")
            self.deleted.append(str(name))
            del self.topics[str(name)]

        def remove(name: TopicName) -> None:
            if self.busy:
                raise SubscriptionBusyError("Topic has active producers/subscriptions")
            self.deleted.append(str(name))
            del self.non_persistent[str(name)]

        loaded: Any = lambda: list(self.topics.values())  # noqa: E731 - stand-in topics
        non_persistent: Any = lambda: list(self.non_persistent.values())  # noqa: E731
        self.monitor = InactivityMonitor(
            self.clock, loaded, retention, delete, PolicyStore(MemoryMetadataStore()), non_persistent, remove
        )


def topic(local: str, **limits: Any) -> Topic:
    return Topic(parse_topic_name(f"persistent://t/ns/{local}"), TopicLimits(**limits))


async def test_an_idle_topic_goes_after_its_inactive_duration_only_if_the_policy_says_so() -> None:
    kept, idle = topic("kept"), topic("idle", delete_while_inactive=True, max_inactive_s=60)
    world = World(kept, idle)
    assert await world.monitor.check_topics() == []  # first sight counts as activity
    world.clock.advance(59)
    assert await world.monitor.check_topics() == []
    world.clock.advance(2)
    assert await world.monitor.check_topics() == ["persistent://t/ns/idle"]
    world.clock.advance(3600)
    assert await world.monitor.check_topics() == []  # deleteWhileInactive false: kept for ever
    assert list(world.topics) == ["persistent://t/ns/kept"]


async def test_activity_by_mode() -> None:
    subscribed = topic("subscribed", delete_while_inactive=True, max_inactive_s=10)
    subscribed.subscriptions["s"] = Sub()
    caught_up = topic("caught-up", delete_while_inactive=True, max_inactive_s=10,
                      inactive_mode="delete_when_subscriptions_caught_up")  # fmt: skip
    caught_up.subscriptions["s"] = Sub()
    behind = topic("behind", delete_while_inactive=True, max_inactive_s=10,
                   inactive_mode="delete_when_subscriptions_caught_up")  # fmt: skip
    behind.subscriptions["s"] = Sub(messages_behind=5)
    producing = topic("producing", delete_while_inactive=True, max_inactive_s=10)
    producing.producers["p"] = object()
    world = World(subscribed, caught_up, behind, producing)
    await world.monitor.check_topics()
    world.clock.advance(11)
    assert await world.monitor.check_topics() == ["persistent://t/ns/caught-up"]
    producing.producers.clear()
    world.clock.advance(5)
    assert await world.monitor.check_topics() == []  # the producer was there 5 s ago, at the last check
    world.clock.advance(6)
    assert await world.monitor.check_topics() == ["persistent://t/ns/producing"]


def np_topic(local: str, **limits: Any) -> Topic:
    name = parse_topic_name(f"non-persistent://t/ns/{local}", allow_non_persistent=True)
    return Topic(name, TopicLimits(**limits))


async def test_an_idle_non_persistent_topic_is_removed_by_the_same_policies() -> None:
    idle = np_topic("idle", delete_while_inactive=True, max_inactive_s=10)
    kept = np_topic("kept")  # deleteWhileInactive false
    subscribed = np_topic("subscribed", delete_while_inactive=True, max_inactive_s=10)
    subscribed.subscriptions["s"] = Sub()
    caught_up = np_topic("caught-up", delete_while_inactive=True, max_inactive_s=10,
                         inactive_mode="delete_when_subscriptions_caught_up")  # fmt: skip
    caught_up.subscriptions["s"] = Sub()
    producing = np_topic("producing", delete_while_inactive=True, max_inactive_s=10)
    producing.producers["p"] = object()
    world = World(idle, kept, subscribed, caught_up, producing, retention_min=-1)  # retention: not asked
    assert await world.monitor.check_topics() == []
    world.clock.advance(9)
    assert await world.monitor.check_topics() == []
    world.clock.advance(1)
    assert sorted(await world.monitor.check_topics()) == [
        "non-persistent://t/ns/caught-up",
        "non-persistent://t/ns/idle",
    ]
    producing.producers.clear()
    world.busy = True  # a client connected meanwhile: refused, tried again at the next round
    world.clock.advance(10)
    assert await world.monitor.check_topics() == []
    world.busy = False
    world.clock.advance(10)
    assert await world.monitor.check_topics() == ["non-persistent://t/ns/producing"]
    assert sorted(world.non_persistent) == ["non-persistent://t/ns/kept", "non-persistent://t/ns/subscribed"]


async def test_retention_keeps_an_inactive_topic() -> None:
    idle = topic("idle", delete_while_inactive=True, max_inactive_s=1)
    world = World(idle, retention_min=-1)
    await world.monitor.check_topics()
    world.clock.advance(86_400)
    assert await world.monitor.check_topics() == []  # infinite retention
    world.retention_min = 10
    assert await world.monitor.check_topics() == ["persistent://t/ns/idle"]  # inactive 1 day > 10 min


async def test_a_refused_deletion_is_retried_later() -> None:
    idle = topic("idle", delete_while_inactive=True, max_inactive_s=1)
    world = World(idle)
    await world.monitor.check_topics()
    world.clock.advance(2)
    world.busy = True
    assert await world.monitor.check_topics() == []
    world.busy = False
    assert await world.monitor.check_topics() == ["persistent://t/ns/idle"]


async def test_subscriptions_expire_without_consumers() -> None:
    t = topic("subs", subscription_expiration_minutes=5)
    t.subscriptions.update(idle=Sub(), busy=Sub(consumers=[object()]), reader=Sub(durable=False),
                           __compaction=Sub())  # fmt: skip
    never = topic("never")
    never.subscriptions["idle"] = Sub()
    world = World(t, never)
    assert await world.monitor.check_subscriptions() == []
    world.clock.advance(5 * 60)
    assert await world.monitor.check_subscriptions() == []  # not more than 5 minutes yet
    world.clock.advance(1)
    assert await world.monitor.check_subscriptions() == [("persistent://t/ns/subs", "idle")]
    assert sorted(t.subscriptions) == ["__compaction", "busy", "reader"]
    world.clock.advance(3600)
    assert await world.monitor.check_subscriptions() == []
    assert list(never.subscriptions) == ["idle"]  # expiry 0: never

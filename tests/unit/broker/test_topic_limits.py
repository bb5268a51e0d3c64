"""The core's checks of a topic's policy limits (:mod:`magnetar.broker.core.topic_limits`), the resolution
of the effective policies (topic > partitioned topic > namespace > broker) and the watch that hands loaded
topics their new limits when the metadata store reports a change."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import trio

from magnetar.bookkeeper.metadata import MemoryMetadataStore
from magnetar.broker.core import (
    SubscriptionNotFoundError,
    TooManyConsumersError,
    TooManyProducersError,
    TooManySubscriptionsError,
)
from magnetar.broker.core.dispatcher import SubscriptionType
from magnetar.broker.core.errors import ErrorKind
from magnetar.broker.core.topic_limits import (
    UNACKED_UNBOUNDED,
    TopicLimits,
    check_consumer,
    check_new_subscription,
    check_producer,
)
from magnetar.broker.policies import Policies, PolicyStore, TopicPolicies
from magnetar.broker.policies.catalogue import BrokerPolicyDefaults, resolve
from magnetar.broker.policies.store import (
    AutoSubscriptionCreationOverride,
    DelayedDeliveryPolicies,
    PersistencePolicies,
)
from magnetar.broker.protocols.http_status import http_status
from magnetar.broker.topic_policy_watch import TopicPolicyWatch, limits_of, namespace_of_path
from magnetar.broker.wire import TopicName, parse_topic_name


def test_zero_means_no_limit() -> None:
    none = TopicLimits()
    check_producer(none, "t", 10_000)
    check_new_subscription(none, "t", "s", {str(i): i for i in range(10_000)}, durable=True)
    check_consumer(none, 10_000, 10_000, SubscriptionType.SHARED)
    assert none.consumer_unacked_max() is None
    assert TopicLimits(unacked_messages_per_consumer=0).consumer_unacked_max() == UNACKED_UNBOUNDED


def test_refusals_carry_pulsars_words_and_kinds() -> None:
    limits = TopicLimits(
        max_producers=2, max_consumers=3, max_consumers_per_subscription=1, max_subscriptions=1
    )
    check_producer(limits, "persistent://t/n/x", 1)
    with pytest.raises(
        TooManyProducersError, match=r"^Topic 'persistent://t/n/x' reached max producers limit$"
    ):
        check_producer(limits, "persistent://t/n/x", 2)
    with pytest.raises(TooManySubscriptionsError) as refused:
        check_new_subscription(limits, "persistent://t/n/x", "b", {"a": 1}, durable=True)
    assert str(refused.value) == "Exceed the maximum number of subscriptions of the topic: persistent://t/n/x"
    assert (refused.value.kind, http_status(refused.value)) == (ErrorKind.NOT_ALLOWED, 500)
    check_new_subscription(limits, "t", "a", {"a": 1}, durable=True)  # an existing one is no new one
    with pytest.raises(TooManyConsumersError, match=r"^Topic reached max consumers limit$"):
        check_consumer(limits, 3, 0, SubscriptionType.SHARED)
    with pytest.raises(TooManyConsumersError, match=r"^Subscription reached max consumers limit$") as busy:
        check_consumer(limits, 1, 1, SubscriptionType.KEY_SHARED)
    assert http_status(busy.value) == 409
    check_consumer(limits, 1, 1, SubscriptionType.EXCLUSIVE)  # Exclusive refuses in its own words


def test_auto_subscription_creation_off_refuses_only_new_durable_names() -> None:
    off = TopicLimits(auto_subscription_creation=False)
    check_new_subscription(off, "t", "known", {"known": 1}, durable=True)
    check_new_subscription(off, "t", "reader-ish", {}, durable=False)
    with pytest.raises(SubscriptionNotFoundError, match=r"^Subscription does not exist$") as refused:
        check_new_subscription(off, "t", "new", {"known": 1}, durable=True)
    assert refused.value.kind is ErrorKind.NO_SUBSCRIPTION


def test_resolution_takes_the_most_specific_level_whole() -> None:
    defaults = BrokerPolicyDefaults(max_producers_per_topic=7)
    ns = Policies(max_producers_per_topic=5, max_consumers_per_topic=4,
                  persistence=PersistencePolicies(bookkeeperEnsemble=3, bookkeeperWriteQuorum=3))  # fmt: skip
    partition = TopicPolicies()
    parent = TopicPolicies(max_producers_per_topic=2, persistence=PersistencePolicies(bookkeeperEnsemble=1,
                           bookkeeperWriteQuorum=1, bookkeeperAckQuorum=1))  # fmt: skip
    effective = resolve([partition, parent], ns, defaults)
    assert effective.max_producers_per_topic == 2
    assert effective.max_consumers_per_topic == 4
    assert effective.max_subscriptions_per_topic == 0
    assert effective.persistence.bookkeeperEnsemble == 1  # the parent's object, not merged with the ns's
    assert resolve([], None, defaults).max_producers_per_topic == 7
    off = Policies(autoSubscriptionCreationOverride=AutoSubscriptionCreationOverride())
    assert resolve([], off, defaults).auto_subscription_creation is False
    # subscriptionExpirationTime has no topic level: a topic document cannot set it
    assert resolve([TopicPolicies()], Policies(subscription_expiration_time_minutes=3),
                   defaults).subscription_expiration_time_minutes == 3  # fmt: skip


@pytest.mark.parametrize(
    ("path", "namespace"),
    [
        ("/admin/policies/t/ns", "t/ns"),
        ("/admin/topic-policies/t/ns/x%2Fy", "t/ns"),
        ("/admin/policies/t", None),
        ("/admin/topic-policies/t/ns", None),
        ("/admin/policies/t/ns/extra", None),
        ("/ledgers/00/0000/L0001", None),
        ("/admin/policiesX/t/ns", None),
    ],
)
def test_which_changes_concern_which_namespace(path: str, namespace: str | None) -> None:
    assert namespace_of_path(path) == namespace


@dataclass
class FakeTopic:
    name: TopicName
    applied: list[TopicLimits] = field(default_factory=list)

    def apply_limits(self, limits: TopicLimits) -> None:
        self.applied.append(limits)


async def test_watch_hands_loaded_topics_their_new_limits() -> None:
    store = MemoryMetadataStore()
    policies = PolicyStore(store)
    await store.put("/admin/policies/t", b"{}", -1)
    await store.put("/admin/policies/t/ns", Policies().model_dump_json().encode(), -1)
    await store.put("/admin/policies/t/other", Policies().model_dump_json().encode(), -1)
    mine = FakeTopic(parse_topic_name("persistent://t/ns/a"))
    elsewhere = FakeTopic(parse_topic_name("persistent://t/other/b"))
    watch = TopicPolicyWatch(store, policies, BrokerPolicyDefaults(), lambda: [mine, elsewhere])  # type: ignore[list-item]
    async with trio.open_nursery() as nursery:
        await nursery.start(watch.run)
        await policies.update_namespace("t/ns", lambda p: p.model_copy(update={"max_producers_per_topic": 3}))
        with trio.fail_after(5):
            while not mine.applied:
                await trio.sleep(0.01)
        assert mine.applied[-1].max_producers == 3
        await policies.update_topic_policies(
            "t/ns", "a", lambda p: p.model_copy(update={"max_producers_per_topic": 1})
        )
        with trio.fail_after(5):
            while mine.applied[-1].max_producers != 1:
                await trio.sleep(0.01)
        assert elsewhere.applied == []  # another namespace's topics are left alone
        assert await watch.may_create("t/ns") is True
        nursery.cancel_scope.cancel()


def test_delayed_delivery_resolves_field_by_field_into_the_limits() -> None:
    defaults = BrokerPolicyDefaults(delayed_delivery_tick_time_ms=500)
    assert limits_of(resolve([], None, defaults)) == limits_of(
        resolve([TopicPolicies()], Policies(), defaults)
    )
    base = limits_of(resolve([], None, defaults))
    assert (
        base.delayed_delivery_enabled,
        base.delayed_delivery_tick_ms,
        base.delayed_delivery_max_delay_ms,
    ) == (
        True,
        500,
        0,
    )
    ns = Policies(delayed_delivery_policies=DelayedDeliveryPolicies(active=False, tickTime=0,
                                                                    maxDeliveryDelayInMillis=-3))  # fmt: skip
    partition = TopicPolicies(delayedDeliveryMaxDelayInMillis=9000)
    parent = TopicPolicies(delayedDeliveryEnabled=True, delayedDeliveryMaxDelayInMillis=1)
    limits = limits_of(resolve([partition, parent], ns, defaults))
    # enabled from the parent, the tick from the namespace (0 acts as 1 ms), the max from the partition
    assert (limits.delayed_delivery_enabled, limits.delayed_delivery_tick_ms,
            limits.delayed_delivery_max_delay_ms) == (True, 1, 9000)  # fmt: skip
    stored_negative = limits_of(resolve([], ns, defaults))
    assert stored_negative.delayed_delivery_max_delay_ms == 0  # a negative one stored unchecked: no cap
    assert stored_negative.delayed_delivery_enabled is False

"""Non-persistent topics' dispatch semantics: delivered to consumers with permits, dropped otherwise, at most
once, ids ``0:0`` (Pulsar's ``NonPersistentTopic`` / ``NonPersistentDispatcher*``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import trio

from magnetar.bookkeeper.runtime.clock import SystemClock
from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.delivery import Delivery, FlowControl, deliver_each
from magnetar.broker.core.dispatcher import SubscriptionType
from magnetar.broker.core.errors import (
    ConsumerAssignError,
    ConsumerBusyError,
    SubscriptionBusyError,
    TooManyTopicsError,
    TopicClosedError,
    TopicNotFoundError,
)
from magnetar.broker.core.key_hash import sticky_key_slot
from magnetar.broker.core.key_shared import KeySharedPolicy
from magnetar.broker.core.non_persistent_topic import NonPersistentTopic
from magnetar.broker.core.producer import Capacity, Producer
from magnetar.broker.core.publish import MESSAGES, PublishRequest
from magnetar.broker.core.subscriber import Subscriber
from magnetar.broker.non_persistent_service import NonPersistentTopics
from magnetar.broker.ownership.load_manager import bundle_stats
from magnetar.broker.wire.entry_format import StoredMessage
from magnetar.broker.wire.message_id import MessageId
from magnetar.broker.wire.topic_name import TopicName, parse_topic_name


class Sink:
    """A delivery sink with plenty of room, recording what it was handed."""

    def __init__(self, room: int = 1000) -> None:
        self.bytes = 0
        self.bytes_max = 1 << 20
        self._room = room
        self.delivered: list[tuple[Delivery, int]] = []

    def room(self) -> int:
        return self._room - len(self.delivered)

    def add_listener(self, listener: Callable[[], None]) -> None:
        pass

    def deliver(self, delivery: Delivery, partition: int, redelivery_count: int) -> None:
        self.delivered.append((delivery, partition))

    def deliver_many(
        self, deliveries: Sequence[Delivery], partition: int, redelivery_counts: Sequence[int] | None
    ) -> int:
        return deliver_each(self, deliveries, partition, redelivery_counts)

    @property
    def payloads(self) -> list[bytes]:
        return [d.message.payload for d, _ in self.delivered]


class Receipts:
    def __init__(self) -> None:
        self.receipts: list[tuple[int, int, int, int, int]] = []
        self.failures: list[str] = []

    def stored(
        self, request: PublishRequest, partition: int, ledger: int, entry: int, first: int, size: int
    ) -> None:
        self.receipts.append((partition, ledger, entry, first, size))

    def failed(self, request: PublishRequest, reason: str) -> None:
        self.failures.append(reason)


def message(payload: bytes, key: str | None = None) -> StoredMessage:
    return StoredMessage(payload, "", 0, 0, key=key)


def new_topic(name: str = "non-persistent://public/default/np") -> tuple[NonPersistentTopic, Producer]:
    topic = NonPersistentTopic(parse_topic_name(name, allow_non_persistent=True), SystemClock())
    producer = topic.add_producer(
        "p", lambda: Producer(topic, "p", Capacity(100), partition=topic.partition, clock=SystemClock())
    )
    return topic, producer


def publish(producer: Producer, receipts: Receipts, *payloads: bytes, key: str | None = None) -> None:
    for payload in payloads:
        producer.publish(MESSAGES, message(payload, key), 1, len(payload), receipts, None, 0.0)


async def subscribe(
    topic: NonPersistentTopic,
    sub: str,
    window: int = 10,
    sub_type: SubscriptionType = SubscriptionType.EXCLUSIVE,
    *,
    name: str = "c",
    pull: bool = False,
    key_shared: KeySharedPolicy | None = None,
) -> tuple[Subscriber, Sink]:
    sink = Sink()

    def make() -> Consumer:
        return Consumer(
            name=name, priority_level=0, partition=topic.partition, flow=FlowControl(window, pull_mode=pull),
            sink=sink, key_shared=key_shared,
        )  # fmt: skip

    subscriber = await topic.subscribe(sub, make, sub_type, durable=True, start_earliest=True)
    return subscriber, sink


async def test_published_before_subscribing_is_not_delivered_and_counts_as_dropped() -> None:
    topic, producer = new_topic()
    receipts = Receipts()
    publish(producer, receipts, b"early")
    _, sink = await subscribe(topic, "s")  # start_earliest asked: nothing is stored
    publish(producer, receipts, b"late")
    assert sink.payloads == [b"late"]
    assert receipts.receipts == [(-1, 0, 0, -1, 0), (-1, 0, 0, -1, 0)]  # Pulsar's 0:0 for every message
    assert topic.msg_drop_counter == 1
    assert topic.stats()["msgInCounter"] == 2


async def test_no_permits_means_dropped_not_queued() -> None:
    topic, producer = new_topic()
    receipts = Receipts()
    subscriber, sink = await subscribe(topic, "s", window=2)
    publish(producer, receipts, b"1", b"2", b"3", b"4")
    assert sink.payloads == [b"1", b"2"]
    assert topic.subscriptions["s"].msg_drop_counter == 2
    # an ack gives a window place back: the next message is delivered, the dropped ones never come
    assert subscriber.ack(MessageId(0, 0, -1))
    publish(producer, receipts, b"5")
    assert sink.payloads == [b"1", b"2", b"5"]
    assert len(receipts.receipts) == 5  # every publish succeeds, delivered or not


async def test_pull_mode_delivers_only_with_granted_permits() -> None:
    topic, producer = new_topic()
    receipts = Receipts()
    subscriber, sink = await subscribe(topic, "s", pull=True)
    publish(producer, receipts, b"a")
    subscriber.consumer.flow.grant(1)
    publish(producer, receipts, b"b", b"c")
    assert sink.payloads == [b"b"]
    assert topic.msg_drop_counter == 2


async def test_nack_and_ack_timeout_redeliver_nothing() -> None:
    topic, producer = new_topic()
    receipts = Receipts()
    subscriber, sink = await subscribe(topic, "s")
    publish(producer, receipts, b"x")
    subscriber.nack(MessageId(0, 0, -1))
    subscriber.redeliver_due(1e9)
    publish(producer, receipts, b"y")
    assert sink.payloads == [b"x", b"y"]
    assert subscriber.consumer.pending == {}
    assert not subscriber.end_of_topic()


async def test_each_subscription_gets_its_copy() -> None:
    topic, producer = new_topic()
    receipts = Receipts()
    _, first = await subscribe(topic, "a")
    _, second = await subscribe(topic, "b")
    publish(producer, receipts, b"m")
    assert first.payloads == second.payloads == [b"m"]
    assert topic.stats()["msgOutCounter"] == 2


async def test_shared_round_robin_over_consumers_with_permits() -> None:
    topic, producer = new_topic()
    receipts = Receipts()
    _, one = await subscribe(topic, "s", 1, SubscriptionType.SHARED, name="one")
    _, two = await subscribe(topic, "s", 5, SubscriptionType.SHARED, name="two")
    publish(producer, receipts, b"1", b"2", b"3", b"4")
    assert one.payloads == [b"1"]
    assert two.payloads == [b"2", b"3", b"4"]
    assert topic.msg_drop_counter == 0


async def test_exclusive_refuses_a_second_consumer_and_types_must_match() -> None:
    topic, _ = new_topic()
    await subscribe(topic, "s")
    with pytest.raises(ConsumerBusyError):
        await subscribe(topic, "s", name="other")
    await subscribe(topic, "f", sub_type=SubscriptionType.FAILOVER)
    with pytest.raises(ConsumerBusyError):
        await subscribe(topic, "f", sub_type=SubscriptionType.SHARED)


async def test_failover_delivers_to_the_active_consumer_only() -> None:
    topic, producer = new_topic()
    receipts = Receipts()
    _, b_sink = await subscribe(topic, "f", sub_type=SubscriptionType.FAILOVER, name="b")
    a_sub, a_sink = await subscribe(topic, "f", sub_type=SubscriptionType.FAILOVER, name="a")
    publish(producer, receipts, b"1")
    assert (a_sink.payloads, b_sink.payloads) == ([b"1"], [])
    a_sub.close()
    publish(producer, receipts, b"2")
    assert b_sink.payloads == [b"2"]


async def test_key_shared_keeps_a_key_on_one_consumer_and_drops_when_it_has_no_permit() -> None:
    topic, producer = new_topic()
    receipts = Receipts()
    _, one = await subscribe(topic, "k", 100, SubscriptionType.KEY_SHARED, name="one")
    _, two = await subscribe(topic, "k", 100, SubscriptionType.KEY_SHARED, name="two")
    for key in ("a", "b", "c", "d", "e", "f"):
        publish(producer, receipts, key.encode(), key.encode(), key=key)
    for sink in (one, two):
        keys = [d.message.key for d, _ in sink.delivered]
        assert all(keys.count(k) == 2 for k in keys)
    assert len(one.delivered) + len(two.delivered) == 12


async def test_key_shared_sticky_ranges_split_keys_and_drop_what_nobody_covers() -> None:
    topic, producer = new_topic()
    receipts = Receipts()
    keys = [f"k{i}" for i in range(30)]
    low_keys = [k for k in keys if sticky_key_slot(k) <= 32767]
    _, low = await subscribe(
        topic, "k", 100, SubscriptionType.KEY_SHARED, name="low", key_shared=KeySharedPolicy(((0, 32767),))
    )
    with pytest.raises(ConsumerAssignError, match="Range conflict with consumer low"):
        await subscribe(
            topic,
            "k",
            100,
            SubscriptionType.KEY_SHARED,
            name="x",
            key_shared=KeySharedPolicy(((100, 40000),)),
        )
    for key in keys:
        publish(producer, receipts, key.encode(), key=key)
    assert [d.message.key for d, _ in low.delivered] == low_keys  # the others: no consumer covers them


async def test_reader_starts_at_the_next_message_and_goes_with_its_consumer() -> None:
    topic, producer = new_topic()
    receipts = Receipts()
    publish(producer, receipts, b"before")
    sink = Sink()
    reader = topic.create_reader(
        MessageId(0, 0, -1),
        lambda: Consumer(
            name="r", priority_level=0, partition=-1, flow=FlowControl(5, pull_mode=False), sink=sink,
            track_pending=False,
        ),
    )  # fmt: skip
    publish(producer, receipts, b"after")
    assert sink.payloads == [b"after"]
    assert topic.subscriptions
    reader.close()
    assert not topic.subscriptions


async def test_unsubscribe_refused_while_others_are_connected() -> None:
    topic, _ = new_topic()
    first, _ = await subscribe(topic, "s", sub_type=SubscriptionType.SHARED, name="one")
    await subscribe(topic, "s", sub_type=SubscriptionType.SHARED, name="two")
    with pytest.raises(SubscriptionBusyError):
        await first.unsubscribe()
    await topic.delete_subscription("s", force=True)
    assert "s" not in topic.subscriptions


async def test_a_durable_subscription_stays_without_consumers_and_drops_meanwhile() -> None:
    topic, producer = new_topic()
    receipts = Receipts()
    subscriber, _ = await subscribe(topic, "s")
    subscriber.close()
    assert "s" in topic.subscriptions
    publish(producer, receipts, b"nobody")
    assert topic.subscriptions["s"].msg_drop_counter == 1
    again, sink = await subscribe(topic, "s")
    publish(producer, receipts, b"back")
    assert sink.payloads == [b"back"]
    await again.unsubscribe()
    assert "s" not in topic.subscriptions


async def test_close_ends_sessions_and_refuses_publishes() -> None:
    topic, producer = new_topic()
    receipts = Receipts()
    kicked: list[str] = []
    producer.disconnect = kicked.append
    subscriber, _ = await subscribe(topic, "s")
    subscriber.consumer.disconnect = kicked.append
    await topic.close("Bundle unloaded")
    assert kicked == ["Bundle unloaded", "Bundle unloaded"]
    publish(producer, receipts, b"late")
    assert receipts.failures == ["Producer is closed"]
    with pytest.raises(TopicClosedError):
        await subscribe(topic, "t")


async def test_partition_ids_and_stats_shape() -> None:
    topic, producer = new_topic("non-persistent://public/default/np-partition-3")
    receipts = Receipts()
    _, sink = await subscribe(topic, "s", window=1)
    publish(producer, receipts, b"1", b"2")
    assert receipts.receipts[0][:3] == (3, 0, 0)
    assert sink.delivered[0][0].key == (0, 0, -1)
    assert sink.delivered[0][1] == 3
    stats = topic.stats()
    assert stats["subscriptions"]["s"]["msgDropRate"] == 0.0  # a rate: counted, reported per stats period
    topic.update_rates(1.0)
    stats = topic.stats()
    assert stats["msgDropRate"] == 1.0
    assert stats["subscriptions"]["s"]["msgDropRate"] == 1.0
    assert stats["publishers"][0]["msgDropRate"] == 0.0
    assert stats["msgRateIn"] == 2.0


async def test_the_broker_bounds_its_non_persistent_topics(nursery: trio.Nursery) -> None:
    topics = NonPersistentTopics(SystemClock(), topics_max=2)
    topics.bind(nursery)

    async def owned(topic: TopicName) -> tuple[str, str]:
        return str(topic.namespace_name), "0x00000000_0xffffffff"

    def name(local: str, namespace: str = "default") -> TopicName:
        return parse_topic_name(f"non-persistent://public/{namespace}/{local}", allow_non_persistent=True)

    first = await topics.get(name("a"), owned, may_create=True)
    assert await topics.get(name("a"), owned, may_create=True) is first
    with pytest.raises(TopicNotFoundError):
        await topics.get(name("b"), owned, may_create=False)

    def one_per_namespace(loaded: int) -> None:
        if loaded >= 1:
            raise TooManyTopicsError("namespace full")

    with pytest.raises(TooManyTopicsError, match="namespace full"):
        await topics.get(name("b"), owned, may_create=True, check_count=one_per_namespace)
    await topics.get(name("b", "other"), owned, may_create=True, check_count=one_per_namespace)
    with pytest.raises(TooManyTopicsError, match="non_persistent_topics_max=2"):
        await topics.get(name("c", "third"), owned, may_create=True)
    assert topics.names_in_bundle(name("a").namespace_name, "0x00000000_0xffffffff") == [str(name("a"))]
    topics.drop_bundles({("public/default", "0x00000000_0xffffffff")}, "Bundle unloaded")
    assert first.closed
    assert topics.names_in(name("a").namespace_name) == []
    topics.drop_all("Broker shutting down")


async def test_non_persistent_traffic_counts_in_its_bundles_load(nursery: trio.Nursery) -> None:
    """The load reports see a non-persistent topic's rates, topics, producers and consumers, as a persistent
    topic's: a broker busy with non-persistent traffic does not look idle to the load manager."""
    topics = NonPersistentTopics(SystemClock(), topics_max=4)
    topics.bind(nursery)
    bundle = ("public/default", "0x00000000_0xffffffff")

    async def owned(topic: TopicName) -> tuple[str, str]:
        return bundle

    loaded = await topics.get(
        parse_topic_name("non-persistent://public/default/busy", allow_non_persistent=True),
        owned,
        may_create=True,
    )
    producer = loaded.add_producer(
        "p", lambda: Producer(loaded, "p", Capacity(100), partition=loaded.partition, clock=SystemClock())
    )
    await subscribe(loaded, "s", window=100)
    publish(producer, Receipts(), *[b"x" * 10] * 20)
    loaded.update_rates(2.0)
    [(reported_bundle, stats)] = bundle_stats(topics.by_bundle())
    assert reported_bundle == bundle
    assert (stats.topics, stats.producer_count, stats.consumer_count) == (1, 1, 1)
    assert (stats.msg_rate_in, stats.msg_throughput_in) == (10.0, 100.0)
    assert (stats.msg_rate_out, stats.msg_throughput_out) == (10.0, 100.0)
    topics.drop_all("done")
    assert bundle_stats(topics.by_bundle()) == []

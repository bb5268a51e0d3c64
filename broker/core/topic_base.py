"""What both topic kinds share (:class:`~.topic.PersistentTopic`,
:class:`~.non_persistent_topic.NonPersistentTopic`): their name and clock, the open check, their producers
by name and their access modes (:mod:`.producer_access`), how their sessions are ended, and how a
subscription is taken out for deletion."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

from magnetar.bookkeeper.runtime import Clock
from magnetar.broker.core.consumer import Consumer
from magnetar.broker.core.dispatcher import SubscriptionType
from magnetar.broker.core.errors import (
    ProducerBusyError,
    ServiceError,
    SubscribeRateLimitedError,
    SubscriptionBusyError,
    TopicClosedError,
    TopicNotFoundError,
)
from magnetar.broker.core.producer import Producer
from magnetar.broker.core.producer_access import AccessMode, ProducerAccess, Waiter
from magnetar.broker.core.throttle import PublishThrottle, SubscribeLimiter
from magnetar.broker.core.topic_limits import (
    TopicLimits,
    check_consumer,
    check_new_subscription,
    check_producer,
)
from magnetar.broker.wire import TopicName


class _Detachable(Protocol):
    @property
    def consumers(self) -> list[Consumer]: ...

    def remove_consumer(self, consumer: Consumer) -> None: ...

    def close(self) -> None: ...


SubscriptionT = TypeVar("SubscriptionT", bound=_Detachable)


def detach_subscription(subscriptions: dict[str, SubscriptionT], name: str, *, force: bool) -> SubscriptionT:
    """Take subscription ``name`` out for deletion: 404 if there is none, 412 while it has consumers unless
    ``force`` (they are then told ``Subscription deleted`` and removed), and closed. The topic kind then
    drops what it keeps for it (a persistent topic: its cursor)."""
    subscription = subscriptions.get(name)
    if subscription is None:
        raise TopicNotFoundError("Subscription not found")
    if subscription.consumers and not force:
        raise SubscriptionBusyError("Subscription has active connected consumers")
    for consumer in list(subscription.consumers):
        if consumer.disconnect is not None:
            consumer.disconnect("Subscription deleted")
        subscription.remove_consumer(consumer)
    subscription.close()
    del subscriptions[name]
    return subscription


class TopicBase:
    def __init__(self, name: TopicName, clock: Clock) -> None:
        self.name = name
        self._clock = clock
        self.partition = name.partition_index
        self.producers: dict[str, Producer] = {}
        self.access = ProducerAccess()
        """Who may publish at once (access modes, the topic epoch): :mod:`.producer_access`."""
        self.closed = False
        self.limits = TopicLimits()
        """What the topic's policies bound (:mod:`.topic_limits`), set at load and on every change."""
        self.publish_throttle: PublishThrottle | None = None
        """Its ``publishRate`` (:mod:`.throttle`), shared by its producers; None: no limit."""
        self.publish_rate_limited_times = 0
        """Publishes that found the topic over its rate, under every throttle it had (a stat)."""
        self.subscribe_limiter: SubscribeLimiter | None = None

    @property
    def full_name(self) -> str:
        return str(self.name)

    @property
    def clock(self) -> Clock:
        return self._clock

    def now_ms(self) -> int:
        return self._clock.time_ms()

    def _check_open(self) -> None:
        if self.closed:
            raise TopicClosedError(f"Topic {self.name} is being unloaded")

    def _check_can_produce(self) -> None:
        """Refuse a new producer (a topic kind adds its own reasons)."""
        self._check_open()
        check_producer(self.limits, self.full_name, len(self.producers))

    def apply_limits(self, limits: TopicLimits) -> None:
        """The topic's policies changed (or were first read): they apply from the next request on; a rate
        that changed gets new buckets (full), and the producers the new publish throttle."""
        previous, self.limits = self.limits, limits
        if limits.publish_rate != previous.publish_rate or (
            limits.publish_rate is not None and self.publish_throttle is None
        ):
            old = self.publish_throttle
            if old is not None:
                self.publish_rate_limited_times += old.limited_times
            rate = limits.publish_rate
            self.publish_throttle = None if rate is None else PublishThrottle(*rate)
            for producer in self.producers.values():
                producer.throttle = self.publish_throttle
        if limits.subscribe_rate != previous.subscribe_rate or (
            limits.subscribe_rate is not None and self.subscribe_limiter is None
        ):
            subscribe = limits.subscribe_rate
            self.subscribe_limiter = None if subscribe is None else SubscribeLimiter(*subscribe)

    def publish_rate_limited(self) -> int:
        """Pulsar's ``publishRateLimitedTimes``: publishes that found the topic over its publish rate."""
        throttle = self.publish_throttle
        return self.publish_rate_limited_times + (throttle.limited_times if throttle is not None else 0)

    def _check_subscribe_rate(self, consumer: Consumer) -> None:
        """Refuse a subscribe beyond the topic's ``subscribeRate`` for this consumer (its client's host and
        its name)."""
        limiter = self.subscribe_limiter
        if limiter is None:
            return
        host = consumer.address.rsplit(":", 1)[0] if consumer.address.count(":") == 1 else consumer.address
        if not limiter.try_subscribe(f"{host}/{consumer.name}", self._clock.monotonic()):
            raise SubscribeRateLimitedError("Subscribe limited by subscribe rate limit per consumer.")

    def _check_subscribe(self, name: str, subscriptions: dict[str, SubscriptionT], *, durable: bool) -> None:
        """Before subscribing to ``name``: may the subscription be created (if new)?"""
        check_new_subscription(self.limits, self.full_name, name, dict(subscriptions), durable=durable)

    def _check_consumer(self, subscriptions: Iterable[_Detachable], joining: _Detachable | None,
                        sub_type: SubscriptionType) -> None:  # fmt: skip
        """Before adding a consumer to ``joining`` (None: a subscription not created yet)."""
        total = sum(len(s.consumers) for s in subscriptions)
        check_consumer(self.limits, total, len(joining.consumers) if joining else 0, sub_type)

    def _check_name(self, name: str) -> None:
        if name in self.producers:
            raise ProducerBusyError(f"Producer with name '{name}' is already connected to topic")

    def add_producer(
        self,
        name: str,
        producer_factory: Callable[[], Producer],
        *,
        access: AccessMode = AccessMode.SHARED,
        topic_epoch: int | None = None,
    ) -> Producer:
        """Add producer ``name`` now, in ``access`` mode (:mod:`.producer_access`); a mode that may wait
        (``WAIT_FOR_EXCLUSIVE``) goes through :meth:`wait_for_producer`."""
        if access is AccessMode.WAIT_FOR_EXCLUSIVE:
            raise ValueError("WAIT_FOR_EXCLUSIVE producers are added with wait_for_producer")
        self._check_can_produce()
        self._check_name(name)
        admitted = self.access.admit(access, name, topic_epoch, self.producers, self._fence_producers)
        assert not isinstance(admitted, Waiter)
        return self._install(name, producer_factory, access, admitted)

    async def wait_for_producer(
        self,
        name: str,
        producer_factory: Callable[[], Producer],
        *,
        access: AccessMode,
        topic_epoch: int | None,
        queued: Callable[[Callable[[], None]], None],
    ) -> Producer:
        """As :meth:`add_producer`, for every mode: a ``WAIT_FOR_EXCLUSIVE`` producer that finds the topic
        taken calls ``queued(leave)`` and waits for its turn. Cancelling the wait leaves the line; so does
        ``leave()`` at once (then cancel the wait), before another producer could be given the turn."""
        self._check_can_produce()
        self._check_name(name)
        admitted = self.access.admit(access, name, topic_epoch, self.producers, self._fence_producers)
        if isinstance(admitted, Waiter):
            waiter = admitted
            queued(lambda: self.access.withdraw(waiter, self.producers))
            try:
                await waiter.granted.wait()
            except BaseException:
                self.access.withdraw(waiter, self.producers)
                raise
            if waiter.error is not None:
                raise waiter.error
            try:
                self._check_can_produce()
                self._check_name(name)
            except ServiceError:
                self.access.withdraw(waiter, self.producers)
                raise
            admitted = waiter.epoch
        return self._install(name, producer_factory, access, admitted)

    def _install(
        self, name: str, producer_factory: Callable[[], Producer], access: AccessMode, epoch: int | None
    ) -> Producer:
        producer = producer_factory()
        producer.access_mode = access.title
        producer.topic_epoch = epoch
        producer.throttle = self.publish_throttle
        self.producers[name] = producer
        return producer

    def _fence_producers(self) -> None:
        """An ``EXCLUSIVE_WITH_FENCING`` producer takes the topic: every connected producer goes."""
        for producer in list(self.producers.values()):
            producer.go_away("Fenced out by an exclusive producer")
            self.remove_producer(producer)

    def _end_sessions(self, subscriptions: Iterable[_Detachable], reason: str) -> None:
        """Close every producer and the given subscriptions and end their sessions (the clients look the
        topic up again)."""
        self.access.fail_waiting(TopicClosedError(reason))
        for producer in list(self.producers.values()):
            producer.go_away(reason)
        for subscription in list(subscriptions):
            subscription.close()
            for consumer in list(subscription.consumers):
                if consumer.disconnect is not None:
                    consumer.disconnect(reason)

    def remove_producer(self, producer: Producer) -> None:
        producer.close()
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
            self.access.released(producer.name, self.producers)
            if producer.dedup is not None:  # its name's deduplication state may be purged from now on
                producer.dedup.producer_left(producer.name, self.now_ms())

"""The broker's non-persistent topics: which are loaded, in which bundle, and their loading and dropping.

Ownership is the persistent topics' (:mod:`.service`): a non-persistent topic belongs to the namespace bundle
holding the hash of its name, and only the broker owning that bundle serves it (others redirect). Loading
one takes no storage: the first producer, consumer or reader creates it in memory (when topic auto-creation
is allowed, as Pulsar creates a non-persistent topic on first use), and it lives until its bundle is unloaded
or lost, the broker stops, or an admin deletes it - then its sessions end and its clients reconnect to
whichever broker owns the bundle next, which starts the topic afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator

import trio

from magnetar.bookkeeper.runtime import Clock
from magnetar.broker.core import (
    NonPersistentTopic,
    SubscriptionBusyError,
    TooManyTopicsError,
    TopicNotFoundError,
)
from magnetar.broker.wire import NamespaceName, TopicName

log = logging.getLogger(__name__)

Bundle = tuple[str, str]


class NonPersistentTopics:
    """The loaded non-persistent topics of one broker."""

    def __init__(self, clock: Clock, topics_max: int) -> None:
        self._clock = clock
        self._topics_max = topics_max
        """``non_persistent_topics_max``: the topics held at once."""
        self.topics: dict[str, NonPersistentTopic] = {}
        self._bundles: dict[str, Bundle] = {}
        self._nursery: trio.Nursery | None = None

    def bind(self, nursery: trio.Nursery) -> None:
        """The service's nursery, where each topic's task lives."""
        self._nursery = nursery

    def loaded(self, topic: TopicName) -> NonPersistentTopic | None:
        found = self.topics.get(str(topic))
        return found if found is not None and not found.closed else None

    async def get(
        self,
        topic: TopicName,
        check_owner: Callable[[TopicName], Awaitable[Bundle]],
        *,
        may_create: bool,
        check_count: Callable[[int], None] = lambda loaded: None,
    ) -> NonPersistentTopic:
        """The loaded topic, created on first use (after checking this broker owns its bundle, and the
        bounds: ``non_persistent_topics_max`` here, ``check_count`` given the namespace's loaded ones)."""
        loaded = self.loaded(topic)
        if loaded is not None:
            return loaded
        bundle = await check_owner(topic)
        loaded = self.loaded(topic)  # created meanwhile by a concurrent request
        if loaded is not None:
            return loaded
        if not may_create:
            raise TopicNotFoundError(f"Topic {topic} does not exist")
        if len(self.topics) >= self._topics_max:
            raise TooManyTopicsError(
                f"Cannot create {topic}: this broker holds {len(self.topics)} non-persistent topics "
                f"(non_persistent_topics_max={self._topics_max})"
            )
        check_count(len(self.names_in(topic.namespace_name)))
        created = NonPersistentTopic(topic, self._clock)
        assert self._nursery is not None, "the broker is not serving"
        await self._nursery.start(created.run)
        existing = self.loaded(topic)
        if existing is not None:  # another request created it while this one started its task
            created.stop()
            return existing
        self.topics[str(topic)] = created
        self._bundles[str(topic)] = bundle
        log.info("loaded non-persistent topic %s", topic)
        return created

    def by_bundle(self) -> Iterator[tuple[Bundle, NonPersistentTopic]]:
        """Each open topic with its bundle (for the load reports)."""
        for name, bundle in self._bundles.items():
            topic = self.topics.get(name)
            if topic is not None and not topic.closed:
                yield bundle, topic

    def names_in(self, namespace: NamespaceName) -> list[str]:
        """Full names of the namespace's loaded non-persistent topics (partitions included)."""
        return sorted(
            name
            for name, topic in self.topics.items()
            if not topic.closed and topic.name.namespace_name == namespace
        )

    def names_in_bundle(self, namespace: NamespaceName, bundle: str) -> list[str]:
        """Full names of the loaded non-persistent topics of one bundle (``0xLOW_0xHIGH``) of the
        namespace."""
        key = (str(namespace), bundle)
        return sorted(name for name in self.names_in(namespace) if self._bundles.get(name) == key)

    def drop(self, name: str, reason: str) -> NonPersistentTopic | None:
        topic = self.topics.pop(name, None)
        self._bundles.pop(name, None)
        if topic is not None:
            topic.fence_now(reason)
            topic.stop()
        return topic

    def drop_bundles(self, bundles: set[Bundle], reason: str) -> None:
        """The bundles were unloaded or lost: their topics go (their clients reconnect)."""
        for name, bundle in list(self._bundles.items()):
            if bundle in bundles:
                self.drop(name, reason)

    def drop_all(self, reason: str) -> None:
        for name in list(self.topics):
            self.drop(name, reason)

    def delete(self, topic: TopicName, *, force: bool) -> None:
        """Admin delete: refused (412) while the topic has producers or consumers, unless ``force``."""
        loaded = self.loaded(topic)
        if loaded is None:
            raise TopicNotFoundError(f"Topic {topic} not found")
        busy = loaded.producers or any(s.consumers for s in loaded.subscriptions.values())
        if busy and not force:
            raise SubscriptionBusyError("Topic has active producers/subscriptions")
        self.drop(str(topic), "Topic deleted")

"""What both topic kinds share (:class:`~.topic.PersistentTopic`,
:class:`~.non_persistent_topic.NonPersistentTopic`): their name and clock, the open check, and their producers
by name."""

from __future__ import annotations

from collections.abc import Callable

from magnetar.bookkeeper.runtime import Clock
from magnetar.broker.core.errors import ProducerBusyError, TopicClosedError
from magnetar.broker.core.producer import Producer
from magnetar.broker.wire.topic_name import TopicName


class TopicBase:
    def __init__(self, name: TopicName, clock: Clock) -> None:
        self.name = name
        self._clock = clock
        self.partition = name.partition_index
        self.producers: dict[str, Producer] = {}
        self.closed = False

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

    def add_producer(self, name: str, producer_factory: Callable[[], Producer]) -> Producer:
        self._check_can_produce()
        if name in self.producers:
            raise ProducerBusyError(f"Producer with name '{name}' is already connected to topic")
        producer = producer_factory()
        self.producers[name] = producer
        return producer

    def remove_producer(self, producer: Producer) -> None:
        producer.close()
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]

"""Partitioned topics: which partition's producer a message goes to.

A session publishing to a partitioned topic has one :class:`~.producer.Producer` per partition; the
:class:`PartitionRouter` picks one per message - by the hash of its key (``hashingScheme``: Java's
``String.hashCode`` by default, or Murmur3), else by ``messageRoutingMode``: ``SinglePartition`` (one
partition picked at random for the session) or ``RoundRobinPartition`` (the next partition for each
message). A protocol adapter that publishes several messages at once routes them with
:meth:`~PartitionRouter.route`
and :meth:`~PartitionRouter.for_key`. The router picks among any per-partition targets: the producers of a
session served here, or the owner proxy's per-partition upstream sessions (partition indexes).
"""

from __future__ import annotations

import random
from typing import Generic, TypeVar

from magnetar.broker.core.key_hash import partition_for_key

T = TypeVar("T")


class PartitionRouter(Generic[T]):
    """Routes a session's messages over the targets of a partitioned topic's partitions (one per partition,
    in partition order)."""

    def __init__(
        self,
        producers: list[T],
        *,
        routing_mode: str,
        hashing_scheme: str | None,
        rng: random.Random,
    ) -> None:
        self.producers = producers
        self._round_robin = routing_mode == "RoundRobinPartition"
        self._hashing_scheme = hashing_scheme
        self._single = rng.randrange(len(producers))
        self._next = rng.randrange(len(producers))

    def route(self, key: str | None) -> T:
        """The target of a message with ``key`` (None: keyless, by the routing mode)."""
        if key is not None:
            return self.for_key(key)
        if self._round_robin:
            producer = self.producers[self._next % len(self.producers)]
            self._next += 1
            return producer
        return self.producers[self._single]

    def for_key(self, key: str) -> T:
        return self.producers[partition_for_key(key, len(self.producers), self._hashing_scheme)]

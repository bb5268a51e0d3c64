"""Which topic partitions a query reads, and their current state, through the admin REST API.

As Pulsar's connector (docs/upstream.md, Pulsar §7.2): ``GET .../partitions`` tells a partitioned topic
(``N > 0``: partitions ``<topic>-partition-0..N-1``) from a plain one (``0``: the topic itself); a
``topicsPattern`` lists the namespace's topics (``GET /admin/v2/persistent/{tenant}/{ns}`` and
``.../partitioned``), matches the regex against each topic's full name (a partition counts under its
partitioned topic's name) and expands partitioned topics the same way. Resolution runs at every trigger, so
new topics and added partitions are picked up (they start at the earliest entry).

A partition of a partitioned topic may not exist as a managed ledger yet (partitions are created on first
use); :func:`fetch_state` answers None for it. A topic named in ``topic``/``topics`` that does not exist is an
error.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.admin.spark.client import AdminClient, TopicNotFoundError
from magnetar.admin.spark.options import SourceOptions, TopicPattern
from magnetar.admin.spark.planner import PartitionState, state_from_stats
from magnetar.broker.wire import InvalidTopicNameError, TopicName, parse_topic_name


@dataclass(frozen=True, slots=True)
class TopicPartition:
    name: str
    """The partition's full name (the topic's own name when it is not partitioned): the offsets key."""
    topic: str
    """The ``topic`` column: the partitioned topic's full name."""
    index: int
    """The ``partition`` column: -1 for a non-partitioned topic."""
    named: bool = False
    """A topic the user named (not found is an error) rather than a partition or a pattern match."""

    @property
    def topic_name(self) -> TopicName:
        return parse_topic_name(self.name)


def subscription_name(prefix: str, partition: TopicPartition) -> str:
    """Pulsar's connector names the subscription ``<prefix>-<topic partition>``; the local name suffices."""
    return f"{prefix}-{partition.topic_name.local_name}"


def _expand(client: AdminClient, topic: TopicName, *, named: bool) -> list[TopicPartition]:
    count = client.partitions(topic)
    if count == 0:
        return [TopicPartition(str(topic), str(topic), -1, named)]
    return [TopicPartition(str(topic.partition(i)), str(topic), i) for i in range(count)]


def _matching(client: AdminClient, pattern: TopicPattern) -> list[TopicName]:
    bases: dict[str, TopicName] = {}
    for listed in client.list_topics(pattern.tenant, pattern.namespace):
        try:
            base = parse_topic_name(listed).partitioned_topic
        except InvalidTopicNameError:
            continue
        if pattern.matches(str(base)):
            bases[str(base)] = base
    return [bases[name] for name in sorted(bases)]


def resolve(client: AdminClient, options: SourceOptions) -> list[TopicPartition]:
    """The partitions to read, sorted by name."""
    out: dict[str, TopicPartition] = {}
    if options.pattern is not None:
        topics, named = _matching(client, options.pattern), False
    else:
        topics, named = list(options.topics), True
    for topic in topics:
        for partition in _expand(client, topic, named=named):
            out[partition.name] = partition
    return [out[name] for name in sorted(out)]


def fetch_state(
    client: AdminClient, partition: TopicPartition, subscription: str | None = None
) -> PartitionState | None:
    """The partition's ledgers and last entry (and the cursor of ``subscription``); None if the partition
    does not exist yet. Raises :class:`TopicNotFoundError` for a named topic that does not exist."""
    try:
        stats = client.internal_stats(partition.topic_name)
    except TopicNotFoundError:
        if partition.named:
            raise
        return None
    return state_from_stats(stats, subscription)


def check_topics(client: AdminClient, options: SourceOptions) -> None:
    """Fail fast (at ``load()``): the broker answers and every named topic exists."""
    for partition in resolve(client, options):
        if partition.named:
            fetch_state(client, partition)

"""Stats of a partitioned topic, addressed by its base name (Pulsar's ``getPartitionedStats`` and
``getPartitionedInternalStats``).

``GET /admin/v2/persistent/{t}/{ns}/{topic}/partitioned-stats?perPartition=true`` answers the topic stats of
every partition added up (Pulsar's ``PartitionedTopicStatsImpl``: the fields of ``stats``, plus
``"metadata": {"partitions": N, ...}`` and ``"partitions": {"<partition name>": <its stats>}`` - empty unless
``perPartition``, the default). ``.../partitioned-internalStats`` answers ``{"metadata": ...,
"partitions": {"<partition name>": <its internalStats>}}``. A topic that is not partitioned is 404
"Partitioned Topic not found".

Each partition's figures come from the broker that owns it: this broker's own managed ledger when it serves
the partition, otherwise the owner's ``stats`` / ``internalStats`` over HTTP (:mod:`.peer_http`), asked one
partition after the other. A partition that has no managed ledger yet (never used) or whose owner does not
answer is left out, as Pulsar leaves out the partitions whose call failed; when none is left,
``partitioned-stats`` answers the partitions as one empty entry under the topic's own name (with
``perPartition``) and ``partitioned-internalStats`` 404 "Internal topics have not been generated yet".

Adding up follows Pulsar's ``TopicStatsImpl.add``: rates, counters, sizes and backlogs are summed,
``averageMsgSize`` is the mean over the partitions, per-broker fields (``ownerBroker``,
``deduplicationStatus``, ``topicEpoch``) and timestamps are left empty. Subscriptions of the same name are
added up the same way (their consumers position by position, as Pulsar does); publishers position by
position (the i-th publisher of every partition), keeping rates and the mean message size only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from magnetar.admin.rest.framework import AdminError, AuthoritativeQuery, Call, Endpoint, QueryModel, ok
from magnetar.admin.rest.names import namespace_of, partition_count, require_namespace, topic_of
from magnetar.admin.rest.peer_http import PeerRequestError, get_json_for
from magnetar.admin.rest.served import host_of
from magnetar.admin.rest.topics import topic_stats
from magnetar.bookkeeper.runtime.http import HttpResponse
from magnetar.broker.core import THROTTLED_STATS_FIELDS
from magnetar.broker.wire import TopicName
from magnetar.managed_ledger.stats import internal_stats

log = logging.getLogger(__name__)

TAG = "topics"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"

TOPIC_SUMS = (
    "msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "bytesInCounter", "msgInCounter",
    "bytesOutCounter", "msgOutCounter", "waitingPublishers", "storageSize", "backlogSize",
    "offloadedStorageSize", "nonContiguousDeletedMessagesRanges",
    "nonContiguousDeletedMessagesRangesSerializedSize", "publishRateLimitedTimes",
    "delayedMessageIndexSizeInBytes",
)  # fmt: skip
SUBSCRIPTION_SUMS = (
    "msgRateOut", "msgThroughputOut", "bytesOutCounter", "msgOutCounter", "msgRateRedeliver",
    "chunkedMessageRate", "msgBacklog", "backlogSize", "msgBacklogNoDelayed", "msgDelayed",
    "unackedMessages", "msgRateExpired", "totalMsgExpired", "nonContiguousDeletedMessagesRanges",
    "nonContiguousDeletedMessagesRangesSerializedSize", *THROTTLED_STATS_FIELDS,
)  # fmt: skip
SUBSCRIPTION_ORS = ("isReplicated", "isDurable", "allowOutOfOrderDelivery")
CONSUMER_SUMS = (
    "msgRateOut", "msgThroughputOut", "bytesOutCounter", "msgOutCounter", "msgRateRedeliver",
    "availablePermits", "unackedMessages",
)  # fmt: skip
PUBLISHER_SUMS = ("msgRateIn", "msgThroughputIn")


EMPTY_TOPIC_STATS: dict[str, Any] = {
    "msgRateIn": 0.0, "msgThroughputIn": 0.0, "msgRateOut": 0.0, "msgThroughputOut": 0.0,
    "bytesInCounter": 0, "msgInCounter": 0, "bytesOutCounter": 0, "msgOutCounter": 0,
    "averageMsgSize": 0.0, "msgChunkPublished": False, "storageSize": 0, "backlogSize": 0,
    "earliestMsgPublishTimeInBacklogs": 0, "offloadedStorageSize": 0, "lastOffloadLedgerId": 0,
    "lastOffloadSuccessTimeStamp": 0, "lastOffloadFailureTimeStamp": 0, "publishers": [],
    "waitingPublishers": 0, "subscriptions": {}, "replication": {}, "deduplicationStatus": None,
    "topicEpoch": None, "nonContiguousDeletedMessagesRanges": 0,
    "nonContiguousDeletedMessagesRangesSerializedSize": 0,
    "compaction": {"lastCompactionRemovedEventCount": 0, "lastCompactionSucceedTimestamp": 0},
    "ownerBroker": None,
}  # fmt: skip
"""Topic stats of nothing: what a new Pulsar ``TopicStatsImpl`` holds, in the fields of :mod:`.topics`."""


class PartitionedStatsQuery(QueryModel):
    perPartition: bool = True
    authoritative: bool = False
    getPreciseBacklog: bool = False
    subscriptionBacklogSize: bool = True
    getEarliestTimeInBacklog: bool = False
    excludePublishers: bool = False
    excludeConsumers: bool = False


# -- adding up -----------------------------------------------------------------------------------------


def _empty(value: Any) -> Any:
    """The value a field of that type has in a freshly made Pulsar stats object."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0
    if isinstance(value, float):
        return 0.0
    if isinstance(value, dict):
        return {}
    if isinstance(value, list):
        return []
    return None


def _blank(template: dict[str, Any]) -> dict[str, Any]:
    return {key: _empty(value) for key, value in template.items()}


def _add(total: dict[str, Any], part: dict[str, Any], keys: Iterable[str]) -> None:
    for key in keys:
        value = part.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value


def _mean(total: dict[str, Any], part: dict[str, Any], key: str, count: int) -> None:
    """``key`` becomes the mean of the ``count`` values seen so far (Pulsar's running average)."""
    value = part.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool):
        total[key] = (float(total.get(key) or 0.0) * (count - 1) + value) / count


def _add_consumers(total: list[dict[str, Any]], part: list[Any]) -> None:
    for index, consumer in enumerate(c for c in part if isinstance(c, dict)):
        if index == len(total):
            total.append(_blank(consumer))
        _add(total[index], consumer, CONSUMER_SUMS)
        total[index]["blockedConsumerOnUnackedMsgs"] = consumer.get("blockedConsumerOnUnackedMsgs", False)


def _add_subscription(total: dict[str, Any] | None, part: dict[str, Any]) -> dict[str, Any]:
    if total is None:
        total = _blank(part)
    _add(total, part, SUBSCRIPTION_SUMS)
    for key in SUBSCRIPTION_ORS:
        total[key] = bool(total.get(key)) or bool(part.get(key))
    total["type"] = part.get("type")
    if isinstance(part.get("consumersAfterMarkDeletePosition"), dict):
        total["consumersAfterMarkDeletePosition"] = {
            **(total.get("consumersAfterMarkDeletePosition") or {}),
            **part["consumersAfterMarkDeletePosition"],
        }
    consumers = total.setdefault("consumers", [])
    _add_consumers(consumers, part.get("consumers") or [])
    return total


def empty_topic_stats() -> dict[str, Any]:
    return {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
            for k, v in EMPTY_TOPIC_STATS.items()}  # fmt: skip


class StatsSum:
    """Topic stats of several partitions added up (see the module docstring)."""

    def __init__(self) -> None:
        self.count = 0
        self.total: dict[str, Any] = empty_topic_stats()
        self._publisher_counts: list[int] = []

    def add(self, part: dict[str, Any]) -> None:
        self.count += 1
        total = self.total
        _add(total, part, TOPIC_SUMS)
        _mean(total, part, "averageMsgSize", self.count)
        self._add_publishers(part.get("publishers") or [])
        subscriptions = total.setdefault("subscriptions", {})
        for name, sub in (part.get("subscriptions") or {}).items():
            if isinstance(sub, dict):
                subscriptions[name] = _add_subscription(subscriptions.get(name), sub)

    def _add_publishers(self, publishers: list[Any]) -> None:
        total = self.total.setdefault("publishers", [])
        for index, publisher in enumerate(p for p in publishers if isinstance(p, dict)):
            if index == len(total):
                total.append(_blank(publisher))
                self._publisher_counts.append(0)
            self._publisher_counts[index] += 1
            _add(total[index], publisher, PUBLISHER_SUMS)
            _mean(total[index], publisher, "averageMsgSize", self._publisher_counts[index])


# -- fetching ------------------------------------------------------------------------------------------


async def _partition_figures(call: Call, partition: TopicName, what: str) -> dict[str, Any] | None:
    """``stats`` or ``internalStats`` of one partition, from whoever owns it; None when it has none."""
    host = host_of(call)
    owner = await host.owner_url(partition, authoritative=False)
    if owner is None:
        ml = await host.load(partition, create=False)
        if ml is None:
            return None
        return topic_stats(ml, host.traffic(partition)) if what == "stats" else internal_stats(ml)
    url = f"{owner.rstrip('/')}/admin/v2/{partition.rest_path}/{what}?authoritative=true"
    try:
        answer = await get_json_for(call, url)
    except PeerRequestError as exc:
        log.warning("%s of %s left out: %s", what, partition, exc)
        return None
    return answer if isinstance(answer, dict) else None


async def _partitioned(call: Call) -> tuple[TopicName, int]:
    topic = topic_of(call)
    namespace_of(call)
    await require_namespace(call.context, topic.namespace_name)
    count = await partition_count(call.context, topic)
    if count == 0:
        raise AdminError(404, "Partitioned Topic not found")
    return topic, count


async def get_partitioned_stats(call: Call) -> HttpResponse:
    topic, count = await _partitioned(call)
    per_partition = call.query_as(PartitionedStatsQuery).perPartition
    summed = StatsSum()
    partitions: dict[str, Any] = {}
    for index in range(count):
        partition = topic.partition(index)
        figures = await _partition_figures(call, partition, "stats")
        if figures is None:
            continue
        summed.add(figures)
        if per_partition:
            partitions[str(partition)] = figures
    if per_partition and not partitions:
        partitions[str(topic)] = empty_topic_stats()
    body = summed.total | {"metadata": {"partitions": count, "deleted": False}, "partitions": partitions}
    return ok(body)


async def get_partitioned_internal_stats(call: Call) -> HttpResponse:
    topic, count = await _partitioned(call)
    partitions: dict[str, Any] = {}
    for index in range(count):
        partition = topic.partition(index)
        figures = await _partition_figures(call, partition, "internalStats")
        if figures is not None:
            partitions[str(partition)] = figures
    if not partitions:
        raise AdminError(404, "Internal topics have not been generated yet")
    return ok({"metadata": {"partitions": count, "deleted": False}, "partitions": partitions})


def endpoints() -> list[Endpoint]:
    e = {404: "Partitioned topic not found", 412: "Topic name is not valid"}
    return [
        Endpoint("GET", f"{TOPIC}/partitioned-stats", get_partitioned_stats,
                 "Stats of a partitioned topic, added up over its partitions", TAG,
                 query=PartitionedStatsQuery, response=dict[str, Any], status=200, errors=e),
        Endpoint("GET", f"{TOPIC}/partitioned-internalStats", get_partitioned_internal_stats,
                 "Internal stats of every partition of a partitioned topic", TAG, query=AuthoritativeQuery,
                 response=dict[str, Any], status=200, errors=e),
    ]  # fmt: skip

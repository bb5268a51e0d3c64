"""Topic routes served by the owning broker: ``/admin/v2/persistent/{tenant}/{namespace}/{topic}[/...]``.

Pulsar's ``PersistentTopics`` for one topic: create (non-partitioned, with the properties the Java client
sends as the body), delete (412 while clients are connected unless ``force``), unload (every partition of a
partitioned topic), terminate (405 for a partitioned topic), truncate, ``stats``, ``internalStats`` (the open
ledger listed with ``entries: 0``, the live count in ``currentLedgerEntries``), ``lastMessageId``, the message
readers of :mod:`.messages`, and the topic's properties. Each resolves the topic through
:func:`.served.served_topic` (412 / 404 / 307).

Properties (``getProperties`` / ``updateProperties`` / ``removeProperties``) live where Pulsar keeps them:
a topic's in its managed ledger's properties (written with its ledger list), a partitioned topic's in its
partitioned-topic metadata - and an update of those is applied to every partition's managed ledger too, as
Pulsar does. An update adds or replaces the given names and keeps the others.

Compaction: Magnetar has no topic compaction. ``PUT .../compaction`` (``triggerCompaction``) is 405 "Topic
compaction is not supported" - the answer Pulsar gives for an operation a topic does not support - and
``GET .../compaction`` (``compactionStatus``) answers ``{"status": "NOT_RUN"}``, which is true.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from magnetar.admin.rest.framework import (
    AdminError,
    AuthoritativeQuery,
    Call,
    Endpoint,
    QueryModel,
    no_content,
    number_param,
    ok,
)
from magnetar.admin.rest.messages import entry_response, last_message_id_with_batch, message_response
from magnetar.admin.rest.models import TopicProperties
from magnetar.admin.rest.names import (
    managed_ledger_exists,
    namespace_of,
    partition_count,
    require_namespace,
    topic_of,
)
from magnetar.admin.rest.partitions import combined, each_partition
from magnetar.admin.rest.served import ensure_served, host_of, served_named, served_topic
from magnetar.admin.rest.subscriptions import subscription_cursors
from magnetar.admin.rest.topic_host import TopicTraffic
from magnetar.bookkeeper.runtime.http import HttpResponse
from magnetar.broker.core import THROTTLED_STATS_FIELDS, first_at_or_after
from magnetar.broker.policies import PartitionedTopicMetadata
from magnetar.broker.wire import MessageId, TopicName
from magnetar.gc import backlog_bytes
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.stats import internal_stats
from magnetar.managed_ledger.trim import RetentionPolicy

TAG = "topics"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"


class DeleteQuery(QueryModel):
    force: bool = False
    authoritative: bool = False
    deleteSchema: bool = False


class StatsQuery(QueryModel):
    authoritative: bool = False
    getPreciseBacklog: bool = False
    subscriptionBacklogSize: bool = True
    getEarliestTimeInBacklog: bool = False
    excludePublishers: bool = False
    excludeConsumers: bool = False


class InternalStatsQuery(QueryModel):
    authoritative: bool = False
    metadata: bool = False


class ExamineQuery(QueryModel):
    initialPosition: Literal["earliest", "latest"] = "latest"
    messagePosition: int = Field(default=1, ge=1, le=2**31 - 1)
    authoritative: bool = False


# -- lifecycle -----------------------------------------------------------------------------------------


async def create_topic(call: Call) -> HttpResponse:
    topic = topic_of(call)
    namespace_of(call)
    await require_namespace(call.context, topic.namespace_name)
    if await partition_count(call.context, topic) > 0 or await managed_ledger_exists(
        call.context.metadata, topic
    ):
        raise AdminError(409, "This topic already exists")
    await _check_partition_in_range(call, topic)
    await ensure_served(call, topic)
    ml = await host_of(call).load(topic, create=True)
    if ml is None:
        raise AdminError(404, "Topic not found")
    properties: dict[str, str] | None = call.body
    if properties:
        await ml.set_properties(properties)
    return no_content()


async def _check_partition_in_range(call: Call, topic: TopicName) -> None:
    """Pulsar answers 412 to creating ``x-partition-<i>`` when ``x`` has ``i`` or fewer partitions."""
    if not topic.is_partition:
        return
    base = topic.partitioned_topic
    count = await partition_count(call.context, base)
    if count and topic.partition_index >= count:
        raise AdminError(
            412,
            f"Can't create topic {topic.full_name}: {base.full_name} has {count} partitions "
            f"(0 to {count - 1})",
        )


async def delete_topic(call: Call) -> HttpResponse:
    topic = topic_of(call)
    if await partition_count(call.context, topic) > 0:
        raise AdminError(
            409,
            "Topic is a partitioned topic; delete it with delete-partitioned-topic (magnetar admin topics)",
        )
    topic, _ = await served_topic(call)
    await host_of(call).delete(topic, force=call.query_as(DeleteQuery).force)
    await call.context.policies.delete_topic_policies(str(topic.namespace_name), topic.local_name)
    return no_content()


async def unload_topic(call: Call) -> HttpResponse:
    topic = topic_of(call)
    namespace_of(call)
    await require_namespace(call.context, topic.namespace_name)
    count = await partition_count(call.context, topic)

    async def unload_on(partition: TopicName) -> None:
        await served_named(call, partition)
        await host_of(call).unload(partition)

    if count == 0:
        await unload_on(topic)
    else:
        combined(await each_partition(call, topic, count, unload_on), "Topic not found")
    return no_content()


async def terminate_topic(call: Call) -> HttpResponse:
    if await partition_count(call.context, topic_of(call)) > 0:
        raise AdminError(405, "Termination of a partitioned topic is not allowed")
    topic, ml = await served_topic(call)
    last = await ml.terminate()
    return ok(MessageId(last.ledger_id, last.entry_id, topic.partition_index).to_admin_json())


async def truncate_topic(call: Call) -> HttpResponse:
    _, ml = await served_topic(call)
    await ml.trim(RetentionPolicy(-1, -1), truncate=True)
    return no_content()


# -- stats ---------------------------------------------------------------------------------------------


def _subscription_stats(ml: ManagedLedger, traffic: TopicTraffic) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, cursor in sorted(subscription_cursors(ml).items()):
        sub = traffic.subscriptions.get(name)
        backlog = cursor.message_backlog()
        out[name] = {
            "msgRateOut": sub.msgRateOut if sub else 0.0,
            "msgThroughputOut": sub.msgThroughputOut if sub else 0.0,
            "bytesOutCounter": sub.bytesOutCounter if sub else 0,
            "msgOutCounter": sub.msgOutCounter if sub else 0,
            "msgRateRedeliver": sub.msgRateRedeliver if sub else 0.0,
            "chunkedMessageRate": 0.0,
            "msgBacklog": backlog,
            "backlogSize": backlog_bytes(ml, cursor.mark_delete),
            "msgBacklogNoDelayed": max(0, backlog - (sub.msgDelayed if sub else 0)),
            "blockedSubscriptionOnUnackedMsgs": sub.blockedSubscriptionOnUnackedMsgs if sub else False,
            "msgDelayed": sub.msgDelayed if sub else 0,
            "unackedMessages": sub.unackedMessages if sub else 0,
            "type": sub.type if sub else "Exclusive",
            "msgRateExpired": 0.0,
            "totalMsgExpired": 0,
            "lastExpireTimestamp": 0,
            "lastConsumedFlowTimestamp": 0,
            "lastConsumedTimestamp": 0,
            "lastAckedTimestamp": cursor.last_active_ms,
            "lastMarkDeleteAdvancedTimestamp": cursor.last_active_ms,
            "consumers": list(sub.consumers) if sub else [],
            "isDurable": True,
            "isReplicated": False,
            "allowOutOfOrderDelivery": False,
            "consumersAfterMarkDeletePosition": {},
            "nonContiguousDeletedMessagesRanges": len(cursor.acked_ranges),
            "nonContiguousDeletedMessagesRangesSerializedSize": 0,
            **{key: sub.dispatchThrottled.get(key, 0) if sub else 0 for key in THROTTLED_STATS_FIELDS},
        }
    return out


def topic_stats(ml: ManagedLedger, traffic: TopicTraffic) -> dict[str, Any]:
    entries = ml.number_of_entries()
    slowest = ml.slowest_subscription_mark_delete()
    return {
        "msgRateIn": traffic.msgRateIn,
        "msgThroughputIn": traffic.msgThroughputIn,
        "msgRateOut": traffic.msgRateOut,
        "msgThroughputOut": traffic.msgThroughputOut,
        "bytesInCounter": traffic.bytesInCounter,
        "msgInCounter": traffic.msgInCounter,
        "bytesOutCounter": traffic.bytesOutCounter,
        "msgOutCounter": traffic.msgOutCounter,
        "averageMsgSize": ml.total_size() / entries if entries else 0.0,
        "msgChunkPublished": False,
        "storageSize": ml.total_size(),
        "backlogSize": backlog_bytes(ml, slowest) if slowest is not None else 0,
        "earliestMsgPublishTimeInBacklogs": 0,
        "offloadedStorageSize": 0,
        "lastOffloadLedgerId": 0,
        "lastOffloadSuccessTimeStamp": 0,
        "lastOffloadFailureTimeStamp": 0,
        "publishers": list(traffic.publishers),
        "waitingPublishers": 0,
        "subscriptions": _subscription_stats(ml, traffic),
        "replication": {},
        "deduplicationStatus": traffic.deduplicationStatus,
        "topicEpoch": None,
        "publishRateLimitedTimes": traffic.publishRateLimitedTimes,
        "nonContiguousDeletedMessagesRanges": sum(len(c.acked_ranges) for c in ml.cursors.values()),
        "nonContiguousDeletedMessagesRangesSerializedSize": 0,
        "compaction": {"lastCompactionRemovedEventCount": 0, "lastCompactionSucceedTimestamp": 0},
        "ownerBroker": traffic.ownerBroker,
    }


async def get_stats(call: Call) -> HttpResponse:
    topic, ml = await served_topic(call)
    return ok(topic_stats(ml, host_of(call).traffic(topic)))


async def get_internal_stats(call: Call) -> HttpResponse:
    _, ml = await served_topic(call)
    return ok(internal_stats(ml))


async def get_last_message_id(call: Call) -> HttpResponse:
    topic, ml = await served_topic(call, partitioned="GetLastMessageId on a partitioned topic is not allowed")
    return ok(await last_message_id_with_batch(ml, topic.partition_index))


# -- messages ------------------------------------------------------------------------------------------


async def get_message_by_id(call: Call) -> HttpResponse:
    position = Position(number_param(call, "ledger"), number_param(call, "entry"))
    _, ml = await served_topic(call, partitioned="Get message by ID on a partitioned topic is not allowed")
    entry = await ml.read_entry(position) if position <= ml.last_confirmed else None
    if entry is None:
        raise AdminError(404, f"Message not found: {position}")
    return entry_response(entry)


async def examine_message(call: Call) -> HttpResponse:
    query = call.query_as(ExamineQuery)
    if query.messagePosition < 1:
        raise AdminError(412, "Invalid message position: it must be 1 or more")
    _, ml = await served_topic(call, partitioned="Examine messages on a partitioned topic is not allowed")
    index = ml.message_index
    first, end = index.first_stored_index(), index.next_index
    if ml.ledgers.first_position() is None or end <= first:
        raise AdminError(404, "Could not examine messages due to the topic is empty")
    total = end - first  # messages, an entry holding a batch counting its messages
    if query.messagePosition > total:
        raise AdminError(
            404, f"Message position {query.messagePosition} is beyond the {total} stored messages"
        )
    earliest = query.initialPosition == "earliest"
    wanted = first + query.messagePosition - 1 if earliest else end - query.messagePosition
    location = await ml.locate_message(wanted)
    entry = None if location is None else await ml.read_entry(location.position)
    if location is None or entry is None:
        raise AdminError(
            404, f"Message not found: message {query.messagePosition} from the {query.initialPosition}"
        )
    return message_response(entry, location.offset, location.messages)


async def message_id_by_time(call: Call) -> HttpResponse:
    timestamp = number_param(call, "timestamp")
    topic, ml = await served_topic(call)
    position = await first_at_or_after(ml, timestamp)
    if position is None:
        raise AdminError(404, "Message ID not found")
    return ok(MessageId(position.ledger_id, position.entry_id, topic.partition_index).to_admin_json())


# -- properties and compaction -------------------------------------------------------------------------


class PropertyKeyQuery(QueryModel):
    key: str | None = None
    authoritative: bool = False


async def _partitioned_metadata(call: Call, topic: TopicName) -> PartitionedTopicMetadata | None:
    metadata = await call.context.policies.get_partitioned(str(topic.namespace_name), topic.local_name)
    return metadata if metadata is not None and metadata.partitions > 0 else None


async def get_properties(call: Call) -> HttpResponse:
    topic = topic_of(call)
    namespace_of(call)
    await require_namespace(call.context, topic.namespace_name)
    metadata = await _partitioned_metadata(call, topic)
    if metadata is not None:
        return ok(dict(metadata.properties or {}))
    _, ml = await served_topic(call)
    return ok(ml.properties)


async def _change_properties(call: Call, update: dict[str, str], remove: list[str]) -> HttpResponse:
    topic = topic_of(call)
    namespace_of(call)
    await require_namespace(call.context, topic.namespace_name)
    metadata = await _partitioned_metadata(call, topic)
    if metadata is None:
        _, ml = await served_topic(call)
        await ml.set_properties(update, remove)
        return no_content()
    await call.context.policies.update_partitioned_properties(
        str(topic.namespace_name),
        topic.local_name,
        lambda current: {k: v for k, v in current.items() if k not in remove} | update,
    )

    async def change_on(partition: TopicName) -> None:
        _, ml = await served_named(call, partition)
        await ml.set_properties(update, remove)

    outcomes = await each_partition(call, topic, metadata.partitions, change_on)
    refused = [o for o in outcomes if not o.ok and o.status != 404]  # a partition never used has no ledger
    if refused:
        raise AdminError(refused[0].status, refused[0].reason)
    return no_content()


async def update_properties(call: Call) -> HttpResponse:
    properties: dict[str, str] | None = call.body
    return await _change_properties(call, dict(properties or {}), [])


async def remove_property(call: Call) -> HttpResponse:
    key = call.query_as(PropertyKeyQuery).key
    if not key:
        raise AdminError(412, "The key of the property to remove is required (query parameter key)")
    return await _change_properties(call, {}, [key])


async def trigger_compaction(call: Call) -> HttpResponse:
    await served_topic(call)
    raise AdminError(405, "Topic compaction is not supported")


async def compaction_status(call: Call) -> HttpResponse:
    await served_topic(call)
    return ok({"status": "NOT_RUN", "lastError": ""})


def endpoints() -> list[Endpoint]:
    e = {307: "Redirect to the owning broker", 404: "Topic not found", 412: "Topic name is not valid"}
    msg_id = dict[str, int]
    return [
        Endpoint("PUT", TOPIC, create_topic, "Create a non-partitioned topic", TAG, query=AuthoritativeQuery,
                 body=TopicProperties, errors={**e, 409: "This topic already exists"}),
        Endpoint("DELETE", TOPIC, delete_topic, "Delete a topic", TAG, query=DeleteQuery,
                 errors={**e, 409: "Partitioned topic", 412: "Topic has active producers/subscriptions"}),
        Endpoint("PUT", f"{TOPIC}/unload", unload_topic, "Unload a topic", TAG, query=AuthoritativeQuery,
                 errors=e),
        Endpoint("POST", f"{TOPIC}/terminate", terminate_topic, "Terminate a topic", TAG,
                 query=AuthoritativeQuery, response=msg_id, status=200,
                 errors={**e, 405: "Termination of a partitioned topic is not allowed"}),
        Endpoint("DELETE", f"{TOPIC}/truncate", truncate_topic, "Delete every consumed closed ledger", TAG,
                 query=AuthoritativeQuery, errors=e),
        Endpoint("GET", f"{TOPIC}/stats", get_stats, "Topic stats", TAG, query=StatsQuery,
                 response=dict[str, Any], status=200, errors=e),
        Endpoint("GET", f"{TOPIC}/internalStats", get_internal_stats, "Managed-ledger internal stats", TAG,
                 query=InternalStatsQuery, response=dict[str, Any], status=200, errors=e),
        Endpoint("GET", f"{TOPIC}/lastMessageId", get_last_message_id, "Last message id", TAG,
                 query=AuthoritativeQuery, response=msg_id, status=200, errors=e),
        Endpoint("GET", f"{TOPIC}/ledger/{{ledger}}/entry/{{entry}}", get_message_by_id,
                 "Get a message by ledger and entry id", TAG, query=AuthoritativeQuery, status=200,
                 content_type="application/octet-stream", errors=e),
        Endpoint("GET", f"{TOPIC}/examinemessage", examine_message, "Examine the n-th message", TAG,
                 query=ExamineQuery, status=200, content_type="application/octet-stream", errors=e),
        Endpoint("GET", f"{TOPIC}/messageid/{{timestamp}}", message_id_by_time,
                 "Message id of the first message at or after a time (ms)", TAG, query=AuthoritativeQuery,
                 response=msg_id, status=200, errors=e),
        Endpoint("GET", f"{TOPIC}/properties", get_properties, "Topic properties", TAG,
                 query=AuthoritativeQuery, response=dict[str, str], status=200, errors=e),
        Endpoint("PUT", f"{TOPIC}/properties", update_properties, "Add or replace topic properties", TAG,
                 query=AuthoritativeQuery, body=TopicProperties, errors=e),
        Endpoint("DELETE", f"{TOPIC}/properties", remove_property, "Remove a topic property", TAG,
                 query=PropertyKeyQuery, errors=e),
        Endpoint("PUT", f"{TOPIC}/compaction", trigger_compaction, "Trigger compaction (not supported: 405)",
                 TAG, query=AuthoritativeQuery, errors={**e, 405: "Topic compaction is not supported"}),
        Endpoint("GET", f"{TOPIC}/compaction", compaction_status, "Compaction status (never run)", TAG,
                 query=AuthoritativeQuery, response=dict[str, str], status=200, errors=e),
    ]  # fmt: skip

"""Topic routes that are pure metadata: listings, partitioned-topic metadata and topic-level policies.

* ``GET /admin/v2/persistent/{t}/{ns}`` lists the namespace's persistent topics (partitions appear as
  ``x-partition-N``); ``.../partitioned`` lists partitioned topics.
* ``PUT/GET/POST/DELETE .../{topic}/partitions``: create a partitioned topic (``N`` in the body, or Pulsar's
  ``PartitionedTopicMetadata`` ``{"partitions": N, "properties": {...}}`` when the Java client passes
  properties; 406 when out of range), read its metadata (``{"partitions":0}`` for a non-partitioned or
  unknown topic, as Pulsar answers with automatic topic creation on; ``properties`` when it has some), grow it
  (only increase: 422 otherwise), delete it: every partition's data first, each by the broker that owns it
  (412 "Topic has active producers/subscriptions" while clients are connected to one, unless ``force``,
  which disconnects them), then the metadata.
* Topic-level retention, message TTL and backlog quota override the namespace's (topic > namespace > broker
  default, ``?applied=true`` answers the effective value); 405 while ``topic_level_policies_enabled`` is off,
  404 for a topic that does not exist. Pulsar applies them asynchronously through a system topic; Magnetar
  writes them to the metadata store at once (``/admin/topic-policies/...``), read by the retention service.
"""

from __future__ import annotations

from magnetar.admin.rest.context import PARTITIONS_MAX, AdminContext
from magnetar.admin.rest.framework import (
    AdminError,
    Call,
    Endpoint,
    QueryModel,
    no_content,
    ok,
    ok_or_empty,
)
from magnetar.admin.rest.models import (
    BacklogQuotaBody,
    BacklogQuotaType,
    Int32,
    PartitionedTopicMetadataBody,
    RetentionBody,
)
from magnetar.admin.rest.names import (
    list_partitioned_topics,
    list_topics,
    managed_ledger_exists,
    namespace_of,
    partition_count,
    require_namespace,
    require_topic,
    topic_of,
)
from magnetar.admin.rest.partitions import each_partition
from magnetar.admin.rest.policy_rules import (
    backlog_quota_error,
    quota_within_retention,
    quotas_within_retention,
    retention_error,
    ttl_error,
)
from magnetar.admin.rest.served import served_named
from magnetar.bookkeeper.runtime.http import HttpResponse
from magnetar.broker.policies import (
    AlreadyExists,
    BacklogQuota,
    NotFound,
    Policies,
    RetentionPolicies,
    TopicPolicies,
)
from magnetar.broker.wire import PARTITIONED_TOPIC_SUFFIX, InvalidTopicNameError, TopicName

TAG = "topics"
PREFIX = "/admin/v2/persistent/{tenant}/{namespace}"
TOPIC = PREFIX + "/{topic}"


class ListQuery(QueryModel):
    bundle: str | None = None
    includeSystemTopic: bool = False


class PartitionsQuery(QueryModel):
    authoritative: bool = False
    checkAllowAutoCreation: bool = False


class CreatePartitionedQuery(QueryModel):
    createLocalTopicOnly: bool = False
    authoritative: bool = False


class UpdatePartitionsQuery(QueryModel):
    updateLocalTopicOnly: bool = False
    authoritative: bool = False
    force: bool = False


class DeletePartitionedQuery(QueryModel):
    force: bool = False
    authoritative: bool = False
    deleteSchema: bool = False


class PolicyGetQuery(QueryModel):
    applied: bool = False
    isGlobal: bool = False
    authoritative: bool = False


class PolicySetQuery(QueryModel):
    isGlobal: bool = False
    authoritative: bool = False


class TtlSetQuery(PolicySetQuery):
    messageTTL: Int32 | None = None


class QuotaGetQuery(PolicyGetQuery):
    pass


class QuotaSetQuery(PolicySetQuery):
    backlogQuotaType: BacklogQuotaType = "destination_storage"


# -- listings ------------------------------------------------------------------------------------------


async def list_namespace_topics(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    await require_namespace(call.context, namespace)
    return ok(await list_topics(call.context, namespace))


async def list_partitioned(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    await require_namespace(call.context, namespace)
    return ok(await list_partitioned_topics(call.context, namespace))


# -- partitioned topics --------------------------------------------------------------------------------


def _partition_limit(ctx: AdminContext) -> int:
    configured = ctx.settings.max_num_partitions_per_partitioned_topic
    return min(configured, PARTITIONS_MAX) if configured > 0 else PARTITIONS_MAX


async def create_partitioned(call: Call) -> HttpResponse:
    topic = topic_of(call)
    body: int | PartitionedTopicMetadataBody = call.body
    count = body if isinstance(body, int) else body.partitions
    properties = None if isinstance(body, int) else body.properties
    ctx = call.context
    if PARTITIONED_TOPIC_SUFFIX in topic.local_name:
        raise AdminError(412, "Partitioned Topic Name should not contain '-partition-'")
    limit = _partition_limit(ctx)
    if not 0 < count <= limit:
        raise AdminError(406, f"Number of partitions should be more than 0 and less than or equal to {limit}")
    _check_partition_names(topic, count)
    await require_namespace(ctx, topic.namespace_name)
    if await managed_ledger_exists(ctx.metadata, topic):
        raise AdminError(409, "This topic already exists")
    if ctx.security is not None and ctx.security.limits.topics_per_namespace_max:
        existing = len(await list_topics(ctx, topic.namespace_name))
        ctx.security.check_topic_count(str(topic.namespace_name), existing, adding=count)
    try:
        await ctx.policies.create_partitioned(str(topic.namespace_name), topic.local_name, count, properties)
    except AlreadyExists:
        raise AdminError(409, "This topic already exists") from None
    return no_content()


def _check_partition_names(topic: TopicName, count: int) -> None:
    """Every partition's name must be valid too: the ``-partition-<i>`` suffix can take a long base name
    beyond the length bounds (412, before anything is written)."""
    try:
        topic.partition(count - 1)
    except InvalidTopicNameError as exc:
        raise AdminError(412, f"Topic name is not valid: {exc}") from None


async def get_partitions(call: Call) -> HttpResponse:
    topic = topic_of(call)
    await require_namespace(call.context, topic.namespace_name)
    metadata = await call.context.policies.get_partitioned(str(topic.namespace_name), topic.local_name)
    answer: dict[str, object] = {"partitions": metadata.partitions if metadata else 0, "deleted": False}
    if metadata is not None and metadata.properties:
        answer["properties"] = dict(metadata.properties)
    return ok(answer)


async def update_partitions(call: Call) -> HttpResponse:
    topic = topic_of(call)
    count: int = call.body
    ctx = call.context
    await require_namespace(ctx, topic.namespace_name)
    current = await partition_count(ctx, topic)
    if current == 0:
        raise AdminError(404, "Partitioned topic does not exist")
    limit = _partition_limit(ctx)
    if count > limit:
        raise AdminError(406, f"Number of partitions should be less than or equal to {limit}")
    if count <= current:
        raise AdminError(
            422, "The number of new partitions must be greater than existing number of partitions"
        )
    _check_partition_names(topic, count)
    await ctx.policies.update_partitions(str(topic.namespace_name), topic.local_name, count)
    return no_content()


async def delete_partitioned(call: Call) -> HttpResponse:
    topic = topic_of(call)
    ctx = call.context
    if topic.is_partition:
        raise AdminError(412, "Partitioned Topic Name should not contain '-partition-'")
    await require_namespace(ctx, topic.namespace_name)
    count = await partition_count(ctx, topic)
    if count == 0:
        raise AdminError(404, "Partitioned topic does not exist")
    await _delete_partitions(call, topic, count)
    try:
        await ctx.policies.delete_partitioned(str(topic.namespace_name), topic.local_name)
    except NotFound:
        raise AdminError(404, "Partitioned topic does not exist") from None
    await ctx.policies.delete_topic_policies(str(topic.namespace_name), topic.local_name)
    return no_content()


async def _delete_partitions(call: Call, topic: TopicName, count: int) -> None:
    """Delete every partition's managed ledger, as Pulsar deletes each partition topic (a partition never
    used has none: nothing to do). Without a topic host (a metadata-only server) partitions holding data
    cannot be deleted here: 412."""
    ctx = call.context
    if ctx.topics is None:
        for index in range(count):
            if await managed_ledger_exists(ctx.metadata, topic.partition(index)):
                raise AdminError(412, "Topic has active producers/subscriptions")
        return
    host = ctx.topics
    force = call.query_as(DeletePartitionedQuery).force

    async def delete_on(partition: TopicName) -> None:
        if not await managed_ledger_exists(ctx.metadata, partition):
            return
        await served_named(call, partition)
        await host.delete(partition, force=force)
        await ctx.policies.delete_topic_policies(str(partition.namespace_name), partition.local_name)

    outcomes = await each_partition(call, topic, count, delete_on, suffix="")
    refused = [o for o in outcomes if not o.ok and o.status != 404]
    if refused:
        first = refused[0]
        reason = "Topic has active producers/subscriptions" if first.status == 412 else first.reason
        raise AdminError(first.status, reason)


# -- topic-level policies ------------------------------------------------------------------------------


async def _policy_target(call: Call) -> tuple[TopicName, Policies]:
    if not call.context.settings.topic_level_policies_enabled:
        raise AdminError(405, "Topic level policies is disabled, to enable the topic level policy and retry.")
    topic = topic_of(call)
    namespace_policies = await require_namespace(call.context, topic.namespace_name)
    await require_topic(call.context, topic)
    return topic, namespace_policies


async def _topic_policies(ctx: AdminContext, topic: TopicName) -> TopicPolicies:
    return await ctx.policies.get_topic_policies(str(topic.namespace_name), topic.local_name)


async def _update(ctx: AdminContext, topic: TopicName, update: dict[str, object]) -> None:
    await ctx.policies.update_topic_policies(
        str(topic.namespace_name), topic.local_name, lambda p: p.model_copy(update=update)
    )


def effective_retention(ctx: AdminContext, topic: TopicPolicies, ns: Policies) -> RetentionPolicies:
    if topic.retention_policies is not None:
        return topic.retention_policies
    if ns.retention_policies is not None:
        return ns.retention_policies
    s = ctx.settings
    return RetentionPolicies(
        retentionTimeInMinutes=s.default_retention_time_min, retentionSizeInMB=s.default_retention_size_mb
    )


async def get_topic_retention(call: Call) -> HttpResponse:
    topic, ns = await _policy_target(call)
    policies = await _topic_policies(call.context, topic)
    if call.query_as(PolicyGetQuery).applied:
        return ok(effective_retention(call.context, policies, ns))
    return ok_or_empty(policies.retention_policies)


async def set_topic_retention(call: Call) -> HttpResponse:
    body: RetentionBody = call.body
    retention = body.to_policies()
    error = retention_error(retention)
    if error is not None:
        raise AdminError(412, error)
    topic, ns = await _policy_target(call)
    policies = await _topic_policies(call.context, topic)
    quotas = policies.backlog_quota_map or ns.backlog_quota_map
    if not quotas_within_retention(quotas, retention):
        raise AdminError(412, "Retention Quota must exceed configured backlog quota for topic. "
                         "Please increase retention quota and retry")  # fmt: skip
    await _update(call.context, topic, {"retention_policies": retention})
    return no_content()


async def remove_topic_retention(call: Call) -> HttpResponse:
    topic, _ = await _policy_target(call)
    await _update(call.context, topic, {"retention_policies": None})
    return no_content()


async def get_topic_ttl(call: Call) -> HttpResponse:
    topic, ns = await _policy_target(call)
    policies = await _topic_policies(call.context, topic)
    if call.query_as(PolicyGetQuery).applied:
        for value in (policies.message_ttl_in_seconds, ns.message_ttl_in_seconds):
            if value is not None:
                return ok(value)
        return ok(call.context.settings.ttl_duration_default_s)
    return ok_or_empty(policies.message_ttl_in_seconds)


async def set_topic_ttl(call: Call) -> HttpResponse:
    query = call.query_as(TtlSetQuery)
    seconds = query.messageTTL if query.messageTTL is not None else call.body
    # Pulsar passes a missing value on as null: the topic-level TTL is unset (as DELETE does).
    if seconds is not None and ttl_error(seconds) is not None:
        raise AdminError(412, "Invalid TTL")
    topic, _ = await _policy_target(call)
    await _update(call.context, topic, {"message_ttl_in_seconds": seconds})
    return no_content()


async def remove_topic_ttl(call: Call) -> HttpResponse:
    topic, _ = await _policy_target(call)
    await _update(call.context, topic, {"message_ttl_in_seconds": None})
    return no_content()


async def get_topic_quota_map(call: Call) -> HttpResponse:
    topic, ns = await _policy_target(call)
    policies = await _topic_policies(call.context, topic)
    quotas = policies.backlog_quota_map
    if call.query_as(QuotaGetQuery).applied and not quotas:
        quotas = ns.backlog_quota_map
    return ok({kind: quota.model_dump() for kind, quota in sorted(quotas.items())})


async def set_topic_quota(call: Call) -> HttpResponse:
    kind = call.query_as(QuotaSetQuery).backlogQuotaType
    body: BacklogQuotaBody = call.body
    quota: BacklogQuota = body.to_quota()
    error = backlog_quota_error(quota)
    if error is not None:
        raise AdminError(412, error)
    topic, ns = await _policy_target(call)
    policies = await _topic_policies(call.context, topic)
    retention = policies.retention_policies or ns.retention_policies
    if kind == "destination_storage" and not quota_within_retention(quota, retention):
        raise AdminError(412, "Backlog Quota exceeds configured retention quota for topic. "
                         "Please increase retention quota and retry")  # fmt: skip
    await _update(call.context, topic, {"backlog_quota_map": {**policies.backlog_quota_map, kind: quota}})
    return no_content()


async def remove_topic_quota(call: Call) -> HttpResponse:
    kind = call.query_as(QuotaSetQuery).backlogQuotaType
    topic, _ = await _policy_target(call)
    policies = await _topic_policies(call.context, topic)
    remaining = {k: v for k, v in policies.backlog_quota_map.items() if k != kind}
    await _update(call.context, topic, {"backlog_quota_map": remaining})
    return no_content()


def endpoints() -> list[Endpoint]:
    e404 = {404: "Namespace or topic does not exist", 412: "Topic name is not valid"}
    e_pol = {**e404, 405: "Topic level policies are disabled"}
    e_set = {**e_pol, 409: "Concurrent modification", 412: "Invalid policy"}
    return [
        Endpoint("GET", PREFIX, list_namespace_topics, "List persistent topics", TAG, query=ListQuery,
                 response=list[str], status=200, errors={404: "Namespace does not exist"}),
        Endpoint("GET", f"{PREFIX}/partitioned", list_partitioned, "List partitioned topics", TAG,
                 query=ListQuery, response=list[str], status=200, errors={404: "Namespace does not exist"}),
        Endpoint("PUT", f"{TOPIC}/partitions", create_partitioned, "Create a partitioned topic", TAG,
                 query=CreatePartitionedQuery, body=Int32 | PartitionedTopicMetadataBody, body_required=True,
                 errors={**e404, 406: "Number of partitions out of range", 409: "This topic already exists"}),
        Endpoint("GET", f"{TOPIC}/partitions", get_partitions, "Partitioned-topic metadata", TAG,
                 query=PartitionsQuery, response=dict[str, object], status=200, errors=e404),
        Endpoint("POST", f"{TOPIC}/partitions", update_partitions, "Increase the number of partitions", TAG,
                 query=UpdatePartitionsQuery, body=Int32, body_required=True,
                 errors={**e404, 406: "Number of partitions out of range", 422: "Partitions can only grow"}),
        Endpoint("DELETE", f"{TOPIC}/partitions", delete_partitioned, "Delete a partitioned topic", TAG,
                 query=DeletePartitionedQuery,
                 errors={**e404, 412: "Topic has active producers/subscriptions"}),
        Endpoint("GET", f"{TOPIC}/retention", get_topic_retention, "Get topic retention", TAG,
                 query=PolicyGetQuery, response=RetentionPolicies, status=200, errors=e_pol),
        Endpoint("POST", f"{TOPIC}/retention", set_topic_retention, "Set topic retention", TAG,
                 query=PolicySetQuery, body=RetentionBody, body_required=True, errors=e_set),
        Endpoint("DELETE", f"{TOPIC}/retention", remove_topic_retention, "Remove topic retention", TAG,
                 query=PolicySetQuery, errors=e_set),
        Endpoint("GET", f"{TOPIC}/messageTTL", get_topic_ttl, "Get topic message TTL", TAG,
                 query=PolicyGetQuery, response=int, status=200, errors=e_pol),
        Endpoint("POST", f"{TOPIC}/messageTTL", set_topic_ttl, "Set topic message TTL (seconds)", TAG,
                 query=TtlSetQuery, body=Int32, errors=e_set),
        Endpoint("DELETE", f"{TOPIC}/messageTTL", remove_topic_ttl, "Remove topic message TTL", TAG,
                 query=PolicySetQuery, errors=e_set),
        Endpoint("GET", f"{TOPIC}/backlogQuotaMap", get_topic_quota_map, "Get topic backlog quotas", TAG,
                 query=QuotaGetQuery, response=dict[str, BacklogQuota], status=200, errors=e_pol),
        Endpoint("POST", f"{TOPIC}/backlogQuota", set_topic_quota, "Set a topic backlog quota", TAG,
                 query=QuotaSetQuery, body=BacklogQuotaBody, body_required=True, errors=e_set),
        Endpoint("DELETE", f"{TOPIC}/backlogQuota", remove_topic_quota, "Remove a topic backlog quota", TAG,
                 query=QuotaSetQuery, errors=e_set),
    ]  # fmt: skip

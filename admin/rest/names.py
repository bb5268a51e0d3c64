"""Names taken from admin paths, validated as Pulsar validates them, and existence checks.

A name that breaks Pulsar's rules, or Magnetar's (no control characters, bounded lengths: see
:mod:`magnetar.broker.wire.topic_name`), is 412 with Pulsar's reason ("Tenant name is not valid", "Namespace
name
is not valid", "Topic name is not valid: <why>", "Subscription name is not valid: <why>"), before anything
reaches the metadata store. The topic segment of a path is ``@Encoded`` in Pulsar: it is the
local name encoded like Java's ``URLEncoder``, so it is decoded here from the *raw* path (``+`` is a space,
``%XX`` a byte) rather than from the router's already-decoded value.
"""

from __future__ import annotations

from magnetar.admin.rest.context import AdminContext
from magnetar.admin.rest.framework import AdminError, Call
from magnetar.bookkeeper.metadata import MetadataStore
from magnetar.broker.policies import Policies
from magnetar.broker.wire import (
    InvalidTopicNameError,
    NamespaceName,
    TopicName,
    check_named_entity,
    check_subscription_name,
    url_decode,
)
from magnetar.managed_ledger.meta_store import ledger_path


def tenant_of(call: Call) -> str:
    tenant = call.param("tenant")
    try:
        check_named_entity("tenant", tenant)
    except InvalidTopicNameError:
        raise AdminError(412, "Tenant name is not valid") from None
    return tenant


def namespace_of(call: Call) -> NamespaceName:
    try:
        return NamespaceName(call.param("tenant"), call.param("namespace"))
    except InvalidTopicNameError:
        raise AdminError(412, "Namespace name is not valid") from None


def _raw_topic_segment(call: Call) -> str:
    # /admin/v2/persistent/{tenant}/{namespace}/{topic}/...: segment 6 of the still-encoded path.
    segments = call.request.path.split("/")
    if len(segments) < 7:
        raise AdminError(412, "Topic name is not valid")
    return segments[6]


def topic_of(call: Call) -> TopicName:
    try:
        local = url_decode(_raw_topic_segment(call))
        return TopicName.of(call.param("tenant"), call.param("namespace"), local)
    except InvalidTopicNameError as exc:
        raise AdminError(412, f"Topic name is not valid: {exc}") from None


def subscription_of(call: Call) -> str:
    """The ``{subscription}`` path parameter, validated as :func:`check_subscription_name` (412)."""
    name = call.param("subscription")
    try:
        check_subscription_name(name)
    except InvalidTopicNameError as exc:
        raise AdminError(412, f"Subscription name is not valid: {exc}") from None
    return name


async def require_tenant(ctx: AdminContext, tenant: str) -> None:
    if await ctx.policies.get_tenant(tenant) is None:
        raise AdminError(404, "Tenant does not exist")


async def require_namespace(ctx: AdminContext, namespace: NamespaceName) -> Policies:
    policies = await ctx.policies.get_namespace(str(namespace))
    if policies is None:
        raise AdminError(404, "Namespace does not exist")
    return policies


async def managed_ledger_exists(store: MetadataStore, topic: TopicName) -> bool:
    return await store.exists(ledger_path(topic.managed_ledger_name))


async def partition_count(ctx: AdminContext, topic: TopicName) -> int:
    return await ctx.policies.get_partitions(str(topic.namespace_name), topic.local_name)


async def topic_exists(ctx: AdminContext, topic: TopicName) -> bool:
    """A non-partitioned topic (its managed ledger exists), a partitioned topic, or a partition of one."""
    if await managed_ledger_exists(ctx.metadata, topic) or await partition_count(ctx, topic) > 0:
        return True
    if topic.is_partition:
        return topic.partition_index < await partition_count(ctx, topic.partitioned_topic)
    return False


async def require_topic(ctx: AdminContext, topic: TopicName) -> None:
    await require_namespace(ctx, topic.namespace_name)
    if not await topic_exists(ctx, topic):
        raise AdminError(404, "Topic not found")


async def list_topics(ctx: AdminContext, namespace: NamespaceName) -> list[str]:
    """Persistent topics of ``namespace``: managed ledgers plus every partition of its partitioned topics."""
    prefix = f"{namespace}/persistent"
    names: set[str] = set()
    limit = ctx.settings.topics_listed_max
    for child in await ctx.metadata.get_children(ledger_path(prefix)):
        try:
            names.add(str(TopicName.from_managed_ledger_name(f"{prefix}/{child}")))
        except InvalidTopicNameError:
            continue  # not a topic of ours (a foreign node); never fail the listing for it
    for local in await ctx.policies.partitioned_topics(str(namespace)):
        try:
            base = TopicName.of(namespace.tenant, namespace.namespace, local)
        except InvalidTopicNameError:
            continue
        count = await partition_count(ctx, base)
        names.update(str(base.partition(i)) for i in range(min(count, limit)))
    return sorted(names)[:limit]


async def list_partitioned_topics(ctx: AdminContext, namespace: NamespaceName) -> list[str]:
    out = []
    for local in await ctx.policies.partitioned_topics(str(namespace)):
        try:
            out.append(str(TopicName.of(namespace.tenant, namespace.namespace, local)))
        except InvalidTopicNameError:
            continue
    return sorted(out)

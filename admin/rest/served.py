"""Finding the topic a route works on: name, namespace, ownership (307) and its managed ledger.

Every topic route that touches a topic's data goes through :func:`served_topic`: the name is validated (412),
the namespace must exist (404), the broker must serve the topic - otherwise the answer is a 307 to the owner
with ``authoritative=true`` added to the query, as Pulsar redirects admin calls (clients follow it; the
second hop is authoritative, so it is never redirected again) - and the topic must exist (404) unless the
route creates it.
"""

from __future__ import annotations

from urllib.parse import urlencode

from magnetar.admin.rest.framework import AdminError, Call
from magnetar.admin.rest.names import namespace_of, partition_count, require_namespace, topic_of
from magnetar.admin.rest.topic_host import TopicHost
from magnetar.bookkeeper.runtime.http import HttpError
from magnetar.broker.wire import TopicName
from magnetar.managed_ledger.ledger import ManagedLedger


def host_of(call: Call) -> TopicHost:
    host = call.context.topics
    assert host is not None, "topic routes are registered only with a TopicHost"
    return host


def redirect_location(call: Call, owner_url: str) -> str:
    pairs = [(k, v) for k, v in call.request.query.pairs if k != "authoritative"]
    pairs.append(("authoritative", "true"))
    return f"{owner_url.rstrip('/')}{call.request.path}?{urlencode(pairs)}"


async def ensure_served(call: Call, topic: TopicName) -> None:
    """Raise the 307 to the owner unless this broker serves ``topic``."""
    authoritative = call.request.query.get("authoritative", "false").lower() == "true"
    owner = await host_of(call).owner_url(topic, authoritative=authoritative, tls=call.request.head.tls)
    if owner is not None:
        location = redirect_location(call, owner)
        raise HttpError(
            307, "Current broker doesn't serve the namespace of this topic", (("location", location),)
        )


async def served_topic(
    call: Call, *, create: bool = False, partitioned: str | None = None
) -> tuple[TopicName, ManagedLedger]:
    """The topic of the call's path, served here (``partitioned``: the 405 reason for a partitioned topic,
    Pulsar's wording for the operation)."""
    namespace_of(call)
    return await served_named(call, topic_of(call), create=create, partitioned=partitioned)


async def served_named(
    call: Call, topic: TopicName, *, create: bool = False, partitioned: str | None = None
) -> tuple[TopicName, ManagedLedger]:
    """``topic`` (the call's own, or one partition of it) served here, as :func:`served_topic`."""
    await require_namespace(call.context, topic.namespace_name)
    if await partition_count(call.context, topic) > 0:
        address = f"address a partition ({topic}-partition-0, ...)"
        raise AdminError(405, partitioned or f"Operation not allowed on a partitioned topic; {address}")
    await ensure_served(call, topic)
    ml = await host_of(call).load(topic, create=create)
    if ml is None:
        raise AdminError(404, "Topic not found")
    return topic, ml

"""The non-persistent domain: ``/admin/v2/non-persistent/{tenant}/{namespace}[/{topic}/...]``.

Listings. Pulsar's Java admin client lists a namespace's topics from both domains: ``topics().getList(ns)``
and ``getPartitionedTopicList(ns)`` send the ``persistent`` and the ``non-persistent`` request and merge the
answers (failing as a whole when either fails). A non-persistent topic exists while it is loaded (it has no
storage to be listed from), so the listing answers the namespace's non-persistent topics loaded on this broker
(:class:`~.context.NonPersistentDirectory`), and 404 "Namespace does not exist" for a missing namespace, as
Pulsar's ``NonPersistentTopics`` does. Magnetar has no partitioned non-persistent topics: ``.../partitioned``
answers ``[]``.

One topic (Pulsar's ``NonPersistentTopics`` answers the same paths as the persistent domain): ``stats``
(``NonPersistentTopicStats``: the persistent fields plus ``msgDropRate`` at the topic, each publisher and
each subscription), ``internalStats`` (a managed ledger's shape, empty: nothing is stored) and ``DELETE``
(412 while producers or consumers are connected unless ``force=true``; the sessions end and the clients may
reconnect, creating the topic afresh). Each is served by the broker owning the topic's bundle: another broker
answers 307 to it, as for persistent topics; a topic not loaded there is 404 "Topic not found".
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from magnetar.admin.rest.framework import AdminError, AuthoritativeQuery, Call, Endpoint, no_content, ok
from magnetar.admin.rest.names import namespace_of, require_namespace
from magnetar.admin.rest.served import ensure_served
from magnetar.admin.rest.topic_metadata import ListQuery
from magnetar.admin.rest.topics import StatsQuery
from magnetar.bookkeeper.runtime.http import HttpResponse
from magnetar.broker.wire.errors import InvalidTopicNameError
from magnetar.broker.wire.topic_name import TopicDomain, TopicName, url_decode

TAG = "topics"
PREFIX = "/admin/v2/non-persistent/{tenant}/{namespace}"
TOPIC = f"{PREFIX}/{{topic}}"


class DeleteQuery(AuthoritativeQuery):
    force: bool = False
    deleteSchema: bool = Field(default=False)


async def list_topics(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    await require_namespace(call.context, namespace)
    return ok(sorted(await call.context.non_persistent.topics(namespace)))


async def list_partitioned(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    await require_namespace(call.context, namespace)
    return ok(sorted(await call.context.non_persistent.partitioned_topics(namespace)))


async def _served(call: Call) -> TopicName:
    namespace_of(call)
    try:
        segments = call.request.path.split("/")  # segment 6: the topic, still encoded
        local = url_decode(segments[6])
        topic = TopicName.of(call.param("tenant"), call.param("namespace"), local, TopicDomain.NON_PERSISTENT)
    except InvalidTopicNameError as exc:
        raise AdminError(412, f"Topic name is not valid: {exc}") from None
    await require_namespace(call.context, topic.namespace_name)
    if call.context.topics is not None:
        await ensure_served(call, topic)
    return topic


async def get_stats(call: Call) -> HttpResponse:
    stats = call.context.non_persistent.stats(await _served(call))
    if stats is None:
        raise AdminError(404, "Topic not found")
    return ok(stats)


async def get_internal_stats(call: Call) -> HttpResponse:
    stats = call.context.non_persistent.internal_stats(await _served(call))
    if stats is None:
        raise AdminError(404, "Topic not found")
    return ok(stats)


async def delete_topic(call: Call) -> HttpResponse:
    topic = await _served(call)
    if not call.context.non_persistent.delete(topic, force=call.query_as(DeleteQuery).force):
        raise AdminError(404, "Topic not found")
    return no_content()


def endpoints() -> list[Endpoint]:
    e404 = {404: "Namespace does not exist", 412: "Namespace name is not valid"}
    topic_errors = {307: "Served by another broker", 404: "Topic not found", 412: "Topic name is not valid"}
    return [
        Endpoint("GET", PREFIX, list_topics, "List non-persistent topics", TAG, query=ListQuery,
                 response=list[str], status=200, errors=e404),
        Endpoint("GET", f"{PREFIX}/partitioned", list_partitioned, "List partitioned non-persistent topics",
                 TAG, query=ListQuery, response=list[str], status=200, errors=e404),
        Endpoint("GET", f"{TOPIC}/stats", get_stats, "Non-persistent topic stats", TAG, query=StatsQuery,
                 response=dict[str, Any], status=200, errors=topic_errors),
        Endpoint("GET", f"{TOPIC}/internalStats", get_internal_stats, "Non-persistent topic internal stats",
                 TAG, query=AuthoritativeQuery, response=dict[str, Any], status=200, errors=topic_errors),
        Endpoint("DELETE", TOPIC, delete_topic, "Delete a non-persistent topic", TAG, query=DeleteQuery,
                 status=204, errors={**topic_errors, 412: "Topic has active producers/subscriptions"}),
    ]  # fmt: skip

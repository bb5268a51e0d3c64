"""The non-persistent domain: ``/admin/v2/non-persistent/{tenant}/{namespace}[/{topic}/...]``.

Listings. Pulsar's Java admin client lists a namespace's topics from both domains: ``topics().getList(ns)``
and ``getPartitionedTopicList(ns)`` send the ``persistent`` and the ``non-persistent`` request and merge the
answers (failing as a whole when either fails). A non-persistent topic exists while it is loaded (it has no
storage to be listed from), so - as Pulsar's ``NonPersistentTopics.getList`` - the listing asks the owner of
each of the namespace's bundles for the topics it has loaded there (``getListInBundle``:
``GET .../non-persistent/{tenant}/{namespace}/{bundle}``, answered by this broker for its own bundles), and
answers 404 "Namespace does not exist" for a missing namespace. Magnetar has no partitioned non-persistent
topics: ``.../partitioned`` answers ``[]``.

One topic (Pulsar's ``NonPersistentTopics`` answers the same paths as the persistent domain): ``stats``
(``NonPersistentTopicStats``: the persistent fields plus ``msgDropRate`` at the topic, each publisher and
each subscription), ``internalStats`` (a managed ledger's shape, empty: nothing is stored) and ``DELETE``
(412 while producers or consumers are connected unless ``force=true``; the sessions end and the clients may
reconnect, creating the topic afresh). Each is served by the broker owning the topic's bundle: another broker
answers 307 to it, as for persistent topics; a topic not loaded there is 404 "Topic not found".
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import Field

from magnetar.admin.rest.framework import AdminError, AuthoritativeQuery, Call, Endpoint, no_content, ok
from magnetar.admin.rest.names import namespace_of, require_namespace
from magnetar.admin.rest.peer_http import PeerRequestError, get_json_for
from magnetar.admin.rest.served import ensure_served
from magnetar.admin.rest.topic_metadata import ListQuery
from magnetar.admin.rest.topics import StatsQuery
from magnetar.bookkeeper.runtime.http import HttpResponse
from magnetar.broker.ownership import NamespaceBundle
from magnetar.broker.wire import InvalidTopicNameError, TopicDomain, TopicName, url_decode

log = logging.getLogger(__name__)

TAG = "topics"
PREFIX = "/admin/v2/non-persistent/{tenant}/{namespace}"
TOPIC = f"{PREFIX}/{{topic}}"


class DeleteQuery(AuthoritativeQuery):
    force: bool = False
    deleteSchema: bool = Field(default=False)


async def list_topics(call: Call) -> HttpResponse:
    """Every bundle's topics: this broker's own, each other owner's asked over HTTP (an owner that does
    not answer is left out, logged), an unowned bundle has none."""
    namespace = namespace_of(call)
    await require_namespace(call.context, namespace)
    directory = call.context.non_persistent
    names: set[str] = set(await directory.topics(namespace))
    for bundle, owner in await directory.bundles(namespace):
        if not owner:
            continue
        url = f"{owner.rstrip('/')}/admin/v2/non-persistent/{namespace}/{bundle}?authoritative=true"
        try:
            answer = await get_json_for(call, url)
        except PeerRequestError as exc:
            log.warning("non-persistent topics of %s/%s left out: %s", namespace, bundle, exc)
            continue
        if isinstance(answer, list):
            names.update(name for name in answer if isinstance(name, str))
    return ok(sorted(names))


async def list_in_bundle(call: Call) -> HttpResponse:
    """``getListInBundle``: the bundle's non-persistent topics loaded on this broker."""
    namespace = namespace_of(call)
    await require_namespace(call.context, namespace)
    bundle = call.param("bundle")
    try:
        NamespaceBundle.parse(bundle)
    except InvalidTopicNameError as exc:
        raise AdminError(412, str(exc)) from None
    return ok(call.context.non_persistent.topics_in_bundle(namespace, bundle))


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
        Endpoint("GET", f"{PREFIX}/{{bundle}}", list_in_bundle, "List a bundle's non-persistent topics", TAG,
                 query=AuthoritativeQuery, response=list[str], status=200,
                 errors={**e404, 412: "Invalid bundle range"}),
        Endpoint("GET", f"{TOPIC}/stats", get_stats, "Non-persistent topic stats", TAG, query=StatsQuery,
                 response=dict[str, Any], status=200, errors=topic_errors),
        Endpoint("GET", f"{TOPIC}/internalStats", get_internal_stats, "Non-persistent topic internal stats",
                 TAG, query=AuthoritativeQuery, response=dict[str, Any], status=200, errors=topic_errors),
        Endpoint("DELETE", TOPIC, delete_topic, "Delete a non-persistent topic", TAG, query=DeleteQuery,
                 status=204, errors={**topic_errors, 412: "Topic has active producers/subscriptions"}),
    ]  # fmt: skip

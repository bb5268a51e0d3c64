"""The non-persistent domain's namespace listings: ``GET /admin/v2/non-persistent/{tenant}/{namespace}`` and
``.../partitioned``.

Pulsar's Java admin client lists a namespace's topics from both domains: ``topics().getList(ns)`` and
``getPartitionedTopicList(ns)`` send the ``persistent`` and the ``non-persistent`` request and fail as a whole
when either fails, so both must answer. Magnetar has no non-persistent topics yet: the listings answer what
:class:`~.context.NonPersistentDirectory` knows - nothing, with :class:`~.context.NoNonPersistentTopics` -
for a namespace that exists, and 404 "Namespace does not exist" otherwise, as Pulsar's
``NonPersistentTopics`` does. Non-persistent topics, when they come, implement the directory (and are passed
in :class:`~.context.AdminContext`).
"""

from __future__ import annotations

from magnetar.admin.rest.framework import Call, Endpoint, ok
from magnetar.admin.rest.names import namespace_of, require_namespace
from magnetar.admin.rest.topic_metadata import ListQuery
from magnetar.bookkeeper.runtime.http import HttpResponse

TAG = "topics"
PREFIX = "/admin/v2/non-persistent/{tenant}/{namespace}"


async def list_topics(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    await require_namespace(call.context, namespace)
    return ok(sorted(await call.context.non_persistent.topics(namespace)))


async def list_partitioned(call: Call) -> HttpResponse:
    namespace = namespace_of(call)
    await require_namespace(call.context, namespace)
    return ok(sorted(await call.context.non_persistent.partitioned_topics(namespace)))


def endpoints() -> list[Endpoint]:
    e404 = {404: "Namespace does not exist", 412: "Namespace name is not valid"}
    return [
        Endpoint("GET", PREFIX, list_topics, "List non-persistent topics", TAG, query=ListQuery,
                 response=list[str], status=200, errors=e404),
        Endpoint("GET", f"{PREFIX}/partitioned", list_partitioned, "List partitioned non-persistent topics",
                 TAG, query=ListQuery, response=list[str], status=200, errors=e404),
    ]  # fmt: skip

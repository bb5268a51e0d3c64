"""Pulsar's admin REST API v2, served by the broker's HTTP server.

``register_admin_routes(router, context)`` adds every admin route (and ``GET /admin/v2/openapi.json``) to a
:class:`~magnetar.bookkeeper.runtime.http.Router`; :class:`AdminContext` carries what the routes need. See
:mod:`.framework` for validation and error mapping, :mod:`.openapi` for the generated document.
"""

from __future__ import annotations

from magnetar.admin.rest import (
    clusters,
    limit_policies,
    load_balance,
    namespaces,
    non_persistent,
    partitioned_stats,
    permissions,
    range_read,
    schema_routes,
    subscriptions,
    topic_metadata,
    topics,
)
from magnetar.admin.rest.context import AdminContext, AdminSettings, BrokerDirectory, StaticBrokers
from magnetar.admin.rest.framework import AdminError, Call, Endpoint, NoQuery, ok, register
from magnetar.admin.rest.openapi import OpenApiDocument
from magnetar.admin.rest.topic_host import SubscriptionTraffic, TopicHost, TopicTraffic
from magnetar.bookkeeper.runtime.http import HttpResponse, Router

OPENAPI_PATH = "/admin/v2/openapi.json"


def admin_endpoints(*, with_topics: bool = False, with_bundles: bool = False) -> list[Endpoint]:
    """Every admin endpoint, in registration order; the topic data routes only ``with_topics``, the bundle
    and load-manager routes only ``with_bundles`` (first: ``brokers/leaderBroker`` before
    ``brokers/{cluster}``)."""
    endpoints = [
        *(load_balance.endpoints() if with_bundles else []),
        *clusters.endpoints(),
        *namespaces.endpoints(),
        *limit_policies.endpoints(),
        *permissions.endpoints(),
        *topic_metadata.endpoints(),
        *non_persistent.endpoints(),
        *schema_routes.endpoints(),
    ]
    if with_topics:
        endpoints += [
            *topics.endpoints(),
            *partitioned_stats.endpoints(),
            *subscriptions.endpoints(),
            *range_read.endpoints(),
        ]
    return endpoints


def register_admin_routes(
    router: Router, context: AdminContext, extra: list[Endpoint] | None = None
) -> OpenApiDocument:
    """Register the admin API (plus ``extra`` endpoints, e.g. the broker's topic routes) on ``router``.

    Returns the OpenAPI document (built when first used), which is also served at :data:`OPENAPI_PATH`."""
    endpoints = [
        *admin_endpoints(with_topics=context.topics is not None, with_bundles=context.bundles is not None),
        *(extra or []),
    ]
    document = OpenApiDocument(endpoints)

    async def openapi(call: Call) -> HttpResponse:
        return ok(document.built())

    spec = Endpoint("GET", OPENAPI_PATH, openapi, "This document", "meta", query=NoQuery, status=200)
    register(router, [spec, *endpoints], context)
    return document


__all__ = [
    "OPENAPI_PATH",
    "AdminContext",
    "AdminError",
    "AdminSettings",
    "BrokerDirectory",
    "OpenApiDocument",
    "StaticBrokers",
    "SubscriptionTraffic",
    "TopicHost",
    "TopicTraffic",
    "admin_endpoints",
    "register_admin_routes",
]

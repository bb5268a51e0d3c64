"""Pulsar's admin REST API v2, served by the broker's HTTP server.

``register_admin_routes(router, context)`` adds every admin route (and ``GET /admin/v2/openapi.json``) to a
:class:`~magnetar.bookkeeper.runtime.http.Router`; :class:`AdminContext` carries what the routes need. See
:mod:`.framework` for validation and error mapping, :mod:`.openapi` for the generated document.
"""

from __future__ import annotations

from magnetar.admin.rest import clusters, namespaces, topic_metadata
from magnetar.admin.rest.context import AdminContext, AdminSettings, BrokerDirectory, StaticBrokers
from magnetar.admin.rest.framework import Call, Endpoint, NoQuery, ok, register
from magnetar.admin.rest.openapi import build_document
from magnetar.bookkeeper.runtime.http import HttpResponse, Router

OPENAPI_PATH = "/admin/v2/openapi.json"


def admin_endpoints() -> list[Endpoint]:
    """Every admin endpoint, in registration order (more specific paths first)."""
    return [*clusters.endpoints(), *namespaces.endpoints(), *topic_metadata.endpoints()]


def register_admin_routes(
    router: Router, context: AdminContext, extra: list[Endpoint] | None = None
) -> dict[str, object]:
    """Register the admin API (plus ``extra`` endpoints, e.g. the broker's topic routes) on ``router``.

    Returns the OpenAPI document, which is also served at :data:`OPENAPI_PATH`."""
    endpoints = [*admin_endpoints(), *(extra or [])]
    document = build_document(endpoints)

    async def openapi(call: Call) -> HttpResponse:
        return ok(document)

    spec = Endpoint("GET", OPENAPI_PATH, openapi, "This document", "meta", query=NoQuery, status=200)
    register(router, [spec, *endpoints], context)
    return document


__all__ = [
    "OPENAPI_PATH",
    "AdminContext",
    "AdminSettings",
    "BrokerDirectory",
    "StaticBrokers",
    "admin_endpoints",
    "register_admin_routes",
]

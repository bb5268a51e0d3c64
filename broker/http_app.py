"""The broker's HTTP application: one :class:`Router` with the WebSocket API, lookup, health and metrics.

The admin layer registers its REST routes into the same router (``register_routes`` of
:func:`~.run.run_broker`), so one port serves everything, as Pulsar's broker web service does.
``GET /admin/v2/brokers/health`` answers 200 ``ok`` once the broker serves (503 before and while stopping).

Security: the WebSocket endpoints and lookup authenticate and authorize every request (:mod:`.security`).
Health stays open - it is the readiness probe, reveals nothing and Pulsar's equivalent for probes
(``/status.html``) is open too; ``/metrics`` is open unless ``authenticate_metrics_endpoint`` is set
(Pulsar's ``authenticateMetricsEndpoint``, default false), and then needs a superuser's token. ``/metrics``
is streamed a chunk at a time (:mod:`.metrics.exposition`), gzip-compressed when the scraper accepts it.
"""

from __future__ import annotations

from magnetar.bookkeeper.runtime.http import (
    HttpError,
    HttpRequest,
    HttpResponse,
    RequestHead,
    Router,
    error_response,
    text_response,
)
from magnetar.broker.metrics import CONTENT_TYPE
from magnetar.broker.ownership import LookupHandlers
from magnetar.broker.service import BrokerService
from magnetar.broker.sessions.front_door import SessionFrontDoor

PROMETHEUS_CONTENT_TYPE = CONTENT_TYPE


def build_router(service: BrokerService) -> Router:
    router = Router()
    ws = SessionFrontDoor(service)
    service.metrics.add_source(ws.proxy_metrics)
    router.websocket("/ws/v2/producer/{domain}/{tenant}/{namespace}/{topic:path}", ws.producer)
    router.websocket("/ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic:path}/{subscription}", ws.consumer)
    router.websocket("/ws/v2/reader/{domain}/{tenant}/{namespace}/{topic:path}", ws.reader)
    router.websocket("/ws/{rest:path}", ws.invalid)
    lookup = LookupHandlers(service)
    router.get(
        "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle", lookup.bundle, check=lookup.check
    )
    router.get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", lookup.lookup, check=lookup.check)

    async def health(request: HttpRequest) -> HttpResponse:
        if not service.ready:
            return error_response(503, "broker is not serving")
        return text_response("ok")

    async def metrics_access(head: RequestHead) -> None:
        """Decided on the head (``authenticate_metrics_endpoint``: a superuser's token)."""
        if service.settings.authenticate_metrics_endpoint:
            principal = service.security.authenticate_http(head)
            if not service.security.authorization.is_superuser(principal.role):
                raise HttpError(403, "This operation requires super-user access")

    async def metrics(request: HttpRequest) -> HttpResponse:
        gzip = "gzip" in (request.head.header("accept-encoding") or "").lower()
        headers = [("content-type", PROMETHEUS_CONTENT_TYPE)]
        if gzip:
            headers.append(("content-encoding", "gzip"))
        return HttpResponse(200, headers, service.metrics.exposition(gzip=gzip))

    router.get("/admin/v2/brokers/health", health)
    router.get("/metrics", metrics, check=metrics_access)
    return router

"""The bookie's HTTP endpoints (BookKeeper's bookie HTTP service, the parts operators and probes use).

* ``GET /metrics`` - Prometheus text format, this bookie's own registry.
* ``GET /api/v1/bookie/is_ready`` - 200 once the bookie serves and is registered (writable or read-only),
  503 before that, while shutting down and while its journal volume is full: the Kubernetes readiness probe.
* ``GET /api/v1/bookie/state`` - ``{"running", "readOnly", "shuttingDown", "availableForHighPriorityWrites"}``
  as BookKeeper's ``/api/v1/bookie/state``.
* ``GET /api/v1/bookie/info`` - bookie id and disk figures (BookKeeper's ``freeSpace`` / ``totalSpace``, the
  used fraction and the read-only state; ``journalFreeSpace`` / ``journalTotalSpace`` for the journal's).

Garbage-collection endpoints (``magnetar.gc.http_api``) are added by the composition root when a garbage
collector runs inside the bookie.
"""

from __future__ import annotations

from magnetar.bookkeeper.bookie.server import Bookie
from magnetar.bookkeeper.runtime.http import (
    HttpRequest,
    HttpResponse,
    Router,
    error_response,
    json_response,
)

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def bookie_router(bookie: Bookie) -> Router:
    router = Router()

    async def metrics(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, (("content-type", PROMETHEUS_CONTENT_TYPE),), bookie.render_metrics())

    async def is_ready(request: HttpRequest) -> HttpResponse:
        if bookie.is_ready:
            return json_response("OK")
        if bookie.monitor.journal_full:
            return error_response(503, "the journal volume is full (disk_usage_threshold): read-only")
        return error_response(503, "bookie is not serving or not registered")

    async def state(request: HttpRequest) -> HttpResponse:
        return json_response(
            {
                "running": bookie.endpoint is not None and not bookie.stopped.is_set(),
                "readOnly": bookie.state.readonly,
                "shuttingDown": bookie.stopping,
                "availableForHighPriorityWrites": True,
            }
        )

    async def info(request: HttpRequest) -> HttpResponse:
        usage = bookie.store.disk_usage()
        journal = bookie.store.journal_disk_usage()
        return json_response(
            {
                "journalTotalSpace": journal.total_bytes,
                "journalFreeSpace": journal.free_bytes,
                "bookieId": bookie.endpoint.bookie_id if bookie.endpoint else None,
                "totalDiskSpace": usage.total_bytes,
                "totalSpace": usage.total_bytes,
                "freeSpace": usage.free_bytes,
                "diskUsage": round(usage.used_fraction, 6),
                "readOnly": bookie.state.readonly,
            }
        )

    router.get("/metrics", metrics)
    router.get("/api/v1/bookie/is_ready", is_ready)
    router.get("/api/v1/bookie/state", state)
    router.get("/api/v1/bookie/info", info)
    return router

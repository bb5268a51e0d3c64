"""The standalone's bookies' HTTP API, served on the standalone's own HTTP port beside the broker's routes.

A bookie process serves BookKeeper's bookie endpoints on its own ``--http-port``
(:mod:`magnetar.bookkeeper.bookie.http_api`, :mod:`.gc_http_api`). The standalone's bookies have no
port of their own; the same endpoints are on the standalone's port:

* at BookKeeper's paths (``/api/v1/bookie/info``, ``state``, ``is_ready``, ``gc``, ``gc_details``,
  ``gc/suspend_compaction``, ``gc/resume_compaction``, ``list_disk_file``, ``entry_log_usage``) for all its
  bookies together: with one bookie (the default) each answers exactly as that bookie's own port would; with
  ``--bookies N`` the read-only ones answer a list with a ``bookieId`` each, ``is_ready`` is 200 once every
  bookie is, and the GC actions act on every bookie;
* under ``/bookies/{bookieId}`` (``/bookies/127.0.0.1:3182/api/v1/bookie/gc``, ``.../metrics``) for one of
  them, exactly as its own port would answer;
* metrics: ``/metrics`` is the broker's (Pulsar's ``/metrics``) and holds the bookies' metrics too, each
  sample labelled ``bookie="<bookieId>"``, so one scrape has everything; ``/bookies/{bookieId}/metrics`` is
  one bookie's page without the label, as a bookie's own ``/metrics``.

Access is the broker's (the same port, the same tokens; with the standalone's flat settings the broker and
the bookies share ``super_user_roles`` anyway): ``is_ready`` is open, ``/metrics`` follows
``authenticate_metrics_endpoint``, every other bookie endpoint needs a superuser when authentication is on.
"""

from __future__ import annotations

from collections.abc import Sequence

from magnetar.admin.processes.gc_http_api import add_gc_routes
from magnetar.admin.processes.metrics import CollectorSource
from magnetar.bookkeeper.bookie import (
    BOOKIE_PREFIX,
    SUPERUSER_REQUIRED,
    Bookie,
    LabelledBookieMetrics,
    add_bookie_routes,
    all_of,
    by_bookie_id,
)
from magnetar.bookkeeper.runtime.http import HttpError, HttpRequest, Router
from magnetar.broker.service import BrokerService
from magnetar.gc import BookieGarbageCollector


class BrokerHttpAccess:
    """The bookie endpoints' rules (:mod:`magnetar.bookkeeper.bookie.http_api`) with the broker's security."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service

    def check_operator(self, request: HttpRequest) -> None:
        security = self._service.security
        principal = security.authenticate_http(request.head)
        if not security.authorization.is_superuser(principal.role):
            raise HttpError(403, f"{SUPERUSER_REQUIRED} (role {principal.role!r} is not in super_user_roles)")

    def check_metrics(self, request: HttpRequest) -> None:
        if self._service.settings.authenticate_metrics_endpoint:
            self.check_operator(request)


def add_standalone_bookie_routes(
    router: Router,
    service: BrokerService,
    bookies: Sequence[Bookie],
    collectors: Sequence[BookieGarbageCollector],
) -> None:
    """Serve ``bookies`` (and their garbage ``collectors``) on the broker's router as the module says."""
    access = BrokerHttpAccess(service)

    def bookie_ids() -> dict[str, Bookie]:
        return {bookie.endpoint.bookie_id: bookie for bookie in bookies if bookie.endpoint is not None}

    add_bookie_routes(router, all_of(lambda: bookies), access, metrics_route=False)
    add_gc_routes(router, all_of(lambda: collectors), access)
    add_bookie_routes(router, by_bookie_id(bookie_ids), access, BOOKIE_PREFIX)
    bookie_collectors = by_bookie_id(lambda: {gc.name: gc for gc in collectors})

    def collector_of(request: HttpRequest) -> Sequence[BookieGarbageCollector]:
        if request.path_params["bookie_id"] in bookie_ids() and not collectors:
            raise HttpError(404, "no garbage collector runs in this standalone's bookies (gc.gc_enabled)")
        return bookie_collectors(request)

    add_gc_routes(router, collector_of, access, BOOKIE_PREFIX)
    service.metrics.add_source(
        CollectorSource(
            LabelledBookieMetrics(
                lambda: [(bookie_id, b.metrics.registry) for bookie_id, b in bookie_ids().items()]
            )
        )
    )

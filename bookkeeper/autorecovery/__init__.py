"""AutoRecovery: an auditor, elected among the daemons, that finds under-replicated ledgers (lost bookies,
placement, a periodic read check) and replication workers that heal them by copying fragments; the
jobs that move everything off one bookie (decommission, recover), its REST routes and metrics. It runs inside
bookies or on its own (:mod:`.daemon`, :mod:`.service`)."""

from magnetar.bookkeeper.autorecovery.http_api import (
    BookieRoute,
    RouteGuard,
    add_bookie_routes,
    autorecovery_routes,
)
from magnetar.bookkeeper.autorecovery.metrics import EMBEDDED_SCOPE, AutoRecoveryCollector
from magnetar.bookkeeper.autorecovery.service import AutoRecoveryService
from magnetar.bookkeeper.autorecovery.settings import AutoRecoverySettings

__all__ = [
    "EMBEDDED_SCOPE",
    "AutoRecoveryCollector",
    "AutoRecoveryService",
    "AutoRecoverySettings",
    "BookieRoute",
    "RouteGuard",
    "add_bookie_routes",
    "autorecovery_routes",
]

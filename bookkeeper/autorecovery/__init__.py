"""AutoRecovery: an auditor that finds under-replicated ledgers and replication workers that heal them."""

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

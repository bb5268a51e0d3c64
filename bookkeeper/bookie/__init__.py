"""The bookie: a storage node serving the BookKeeper protocol.

The server side lives here: :mod:`.server` and :mod:`.connection` (the listener, connections, the wire
protocol, TLS and authentication per connection), :mod:`.core` (the request logic without I/O),
:mod:`.auth`, :mod:`.identity` and :mod:`.cookie` (who the bookie is and which directories are its),
:mod:`.registration` (the ephemeral node in the metadata store), :mod:`.disk_monitor` (read-only mode),
:mod:`.http_api`, :mod:`.metrics` and :mod:`.settings`. The storage engine (journal, entry logs, RocksDB
index, caches, checkpoint, replay, the errors it raises, and the seam garbage collection reaches it through)
is :mod:`.storage`; the server reaches it only through the :class:`~.storage.ledger_store.LedgerStore`
contract.
"""

from magnetar.bookkeeper.bookie.http_api import (
    BOOKIE_PREFIX,
    SUPERUSER_REQUIRED,
    BookieHttpAccess,
    HttpAccess,
    Select,
    add_bookie_routes,
    all_of,
    bookie_router,
    by_bookie_id,
    head_check,
)
from magnetar.bookkeeper.bookie.identity import (
    BookieIdentityError,
    bookie_directories,
    find_identity_error,
    format_bookie,
    verify_bookie_identity,
)
from magnetar.bookkeeper.bookie.metrics import LabelledBookieMetrics
from magnetar.bookkeeper.bookie.server import Bookie, open_bookie_listener
from magnetar.bookkeeper.bookie.settings import BookieServerSettings, BookKeeperServiceSettings, bookie_id_for

__all__ = [
    "BOOKIE_PREFIX",
    "SUPERUSER_REQUIRED",
    "BookKeeperServiceSettings",
    "Bookie",
    "BookieHttpAccess",
    "BookieIdentityError",
    "BookieServerSettings",
    "HttpAccess",
    "LabelledBookieMetrics",
    "Select",
    "add_bookie_routes",
    "all_of",
    "bookie_directories",
    "bookie_id_for",
    "bookie_router",
    "by_bookie_id",
    "find_identity_error",
    "format_bookie",
    "head_check",
    "open_bookie_listener",
    "verify_bookie_identity",
]

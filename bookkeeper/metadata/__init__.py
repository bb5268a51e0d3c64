"""The metadata store: one interface, three backends chosen by URL (see :mod:`.api` and :mod:`.factory`),
its health signal (:mod:`.health`), and the layout BookKeeper keeps in it: bookies' registrations and cookies
(:mod:`.bookies`), ledger paths, under-replication marks and locks."""

from magnetar.bookkeeper.metadata.api import (
    METADATA_PATH_BYTES_MAX,
    METADATA_VALUE_BYTES_MAX,
    BadVersionError,
    GetResult,
    InvalidPathError,
    MetadataStore,
    MetadataStoreError,
    NotEmptyError,
    NotFoundError,
    Notification,
    NotificationType,
    SessionEvent,
    Stat,
    StoreInUseError,
    StoreUnavailableError,
    ValueTooLargeError,
    join,
)
from magnetar.bookkeeper.metadata.bookies import (
    AVAILABLE_PATH,
    COOKIES_PATH,
    BookieServiceInfo,
    cookie_path,
    ensure_instance_id,
    list_bookies,
    read_cookie,
    readonly_path,
    writable_path,
)
from magnetar.bookkeeper.metadata.factory import InvalidMetadataUrlError, open_metadata_store
from magnetar.bookkeeper.metadata.health import HealthChange, HealthState, MetadataHealth
from magnetar.bookkeeper.metadata.ledger_paths import (
    LEDGERS_ROOT,
    SHORT_ID_LIMIT,
    ledger_id_of,
    ledger_path,
    split_ledger_path,
)
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.metadata.settings import (
    MetadataConnectionSettings,
    MetadataStoreSettings,
    ProcessMetadataSettings,
)
from magnetar.bookkeeper.metadata.underreplication_paths import (
    VOTE_PREFIX,
    auditor_election_path,
    decommissioning_path,
    disable_path,
    ledger_id_of_ur_node,
    lost_bookie_recovery_delay_path,
    ur_ledger_path,
    ur_ledgers_path,
    ur_lock_path,
    ur_locks_path,
)

_OWN_FACES = ("zk_store",)
"""Imported by its own name (its ``PROBE_TIMEOUT_S``): the face does not load kazoo for what only names
the store's errors."""

__all__ = [
    "AVAILABLE_PATH",
    "COOKIES_PATH",
    "LEDGERS_ROOT",
    "METADATA_PATH_BYTES_MAX",
    "METADATA_VALUE_BYTES_MAX",
    "SHORT_ID_LIMIT",
    "VOTE_PREFIX",
    "BadVersionError",
    "BookieServiceInfo",
    "GetResult",
    "HealthChange",
    "HealthState",
    "InvalidMetadataUrlError",
    "InvalidPathError",
    "MemoryMetadataStore",
    "MetadataConnectionSettings",
    "MetadataHealth",
    "MetadataStore",
    "MetadataStoreError",
    "MetadataStoreSettings",
    "NotEmptyError",
    "NotFoundError",
    "Notification",
    "NotificationType",
    "ProcessMetadataSettings",
    "SessionEvent",
    "Stat",
    "StoreInUseError",
    "StoreUnavailableError",
    "ValueTooLargeError",
    "auditor_election_path",
    "cookie_path",
    "decommissioning_path",
    "disable_path",
    "ensure_instance_id",
    "join",
    "ledger_id_of",
    "ledger_id_of_ur_node",
    "ledger_path",
    "list_bookies",
    "lost_bookie_recovery_delay_path",
    "open_metadata_store",
    "read_cookie",
    "readonly_path",
    "split_ledger_path",
    "ur_ledger_path",
    "ur_ledgers_path",
    "ur_lock_path",
    "ur_locks_path",
    "writable_path",
]

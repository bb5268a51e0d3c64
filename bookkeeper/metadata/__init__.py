"""The metadata store: one interface, three backends chosen by URL (see :mod:`.api` and :mod:`.factory`)."""

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
    StoreUnavailableError,
    ValueTooLargeError,
)
from magnetar.bookkeeper.metadata.factory import InvalidMetadataUrlError, open_metadata_store
from magnetar.bookkeeper.metadata.health import HealthChange, HealthState, MetadataHealth
from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.metadata.settings import MetadataStoreSettings

__all__ = [
    "METADATA_PATH_BYTES_MAX",
    "METADATA_VALUE_BYTES_MAX",
    "BadVersionError",
    "GetResult",
    "HealthChange",
    "HealthState",
    "InvalidMetadataUrlError",
    "InvalidPathError",
    "MemoryMetadataStore",
    "MetadataHealth",
    "MetadataStore",
    "MetadataStoreError",
    "MetadataStoreSettings",
    "NotEmptyError",
    "NotFoundError",
    "Notification",
    "NotificationType",
    "SessionEvent",
    "Stat",
    "StoreUnavailableError",
    "ValueTooLargeError",
    "open_metadata_store",
]

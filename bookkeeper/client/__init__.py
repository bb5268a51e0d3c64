"""The replication client: the BookKeeper ledger API (create, add, read, close, fencing and recovery).

Entry point: :func:`open_bookkeeper`. See :mod:`.bookkeeper` for the facade, :mod:`.writer` for the add
pipeline, :mod:`.recovery` for fencing and recovery, :mod:`.local_transport` for in-process bookies.
"""

from magnetar.bookkeeper.client.bookkeeper import BookKeeper, open_bookkeeper
from magnetar.bookkeeper.client.errors import (
    BKError,
    BKReadError,
    BKTimeoutError,
    BKWriteError,
    ClientClosedError,
    DigestMismatchError,
    IncorrectParameterError,
    LedgerClosedError,
    LedgerExistsError,
    LedgerFencedError,
    LedgerRecoveryError,
    MetadataVersionError,
    MetaStoreError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    TooManyRequestsError,
    UnauthorizedError,
)
from magnetar.bookkeeper.client.ledger_handle import LedgerHandle
from magnetar.bookkeeper.client.metadata import LedgerMetadata, LedgerState
from magnetar.bookkeeper.client.read_handle import LedgerEntry, ReadHandle
from magnetar.bookkeeper.client.settings import (
    BookieClientSecurity,
    ClientOptions,
    ClientSettings,
    QuorumSettings,
)
from magnetar.bookkeeper.protocol.digest import DigestType

__all__ = [
    "BKError",
    "BKReadError",
    "BKTimeoutError",
    "BKWriteError",
    "BookKeeper",
    "BookieClientSecurity",
    "ClientClosedError",
    "ClientOptions",
    "ClientSettings",
    "DigestMismatchError",
    "DigestType",
    "IncorrectParameterError",
    "LedgerClosedError",
    "LedgerEntry",
    "LedgerExistsError",
    "LedgerFencedError",
    "LedgerHandle",
    "LedgerMetadata",
    "LedgerRecoveryError",
    "LedgerState",
    "MetaStoreError",
    "MetadataVersionError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NotEnoughBookiesError",
    "QuorumSettings",
    "ReadHandle",
    "TooManyRequestsError",
    "UnauthorizedError",
    "open_bookkeeper",
]

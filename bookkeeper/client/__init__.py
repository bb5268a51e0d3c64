"""The replication client: the BookKeeper ledger API (create, add, read, close, fencing and recovery).

Entry point: :func:`open_bookkeeper`. See :mod:`.bookkeeper` for the facade, :mod:`.writer` for the add
pipeline, :mod:`.recovery` for fencing and recovery, :mod:`.local_transport` for in-process bookies.
"""

from magnetar.bookkeeper.client.bookie_client import Answer, TimeoutQueue
from magnetar.bookkeeper.client.bookkeeper import BookKeeper, open_bookkeeper
from magnetar.bookkeeper.client.context import ClientContext
from magnetar.bookkeeper.client.distribution import write_set
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
from magnetar.bookkeeper.client.local_transport import LocalTransport
from magnetar.bookkeeper.client.metadata import Ensemble, LedgerMetadata, LedgerState, Versioned
from magnetar.bookkeeper.client.placement import DEFAULT_RACK, racks_needed, write_set_racks
from magnetar.bookkeeper.client.read_handle import LedgerEntry, ReadHandle
from magnetar.bookkeeper.client.settings import (
    BookieClientSecurity,
    ClientOptions,
    ClientSettings,
    LedgerDigestSettings,
    QuorumSettings,
    RackPlacementSettings,
    RequestTimeouts,
)
from magnetar.bookkeeper.client.stats import ADD_LATENCY_BUCKETS_S, ClientStats
from magnetar.bookkeeper.client.tcp_transport import TcpTransport, TcpTransportSettings, open_tcp_transport
from magnetar.bookkeeper.client.transport import BookieId, TransportFailure, next_request_id
from magnetar.bookkeeper.client.update_loop import MetadataUpdateLoop
from magnetar.bookkeeper.protocol import DigestType

__all__ = [
    "ADD_LATENCY_BUCKETS_S",
    "DEFAULT_RACK",
    "Answer",
    "BKError",
    "BKReadError",
    "BKTimeoutError",
    "BKWriteError",
    "BookKeeper",
    "BookieClientSecurity",
    "BookieId",
    "ClientClosedError",
    "ClientContext",
    "ClientOptions",
    "ClientSettings",
    "ClientStats",
    "DigestMismatchError",
    "DigestType",
    "Ensemble",
    "IncorrectParameterError",
    "LedgerClosedError",
    "LedgerDigestSettings",
    "LedgerEntry",
    "LedgerExistsError",
    "LedgerFencedError",
    "LedgerHandle",
    "LedgerMetadata",
    "LedgerRecoveryError",
    "LedgerState",
    "LocalTransport",
    "MetaStoreError",
    "MetadataUpdateLoop",
    "MetadataVersionError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NotEnoughBookiesError",
    "QuorumSettings",
    "RackPlacementSettings",
    "ReadHandle",
    "RequestTimeouts",
    "TcpTransport",
    "TcpTransportSettings",
    "TimeoutQueue",
    "TooManyRequestsError",
    "TransportFailure",
    "UnauthorizedError",
    "Versioned",
    "next_request_id",
    "open_bookkeeper",
    "open_tcp_transport",
    "racks_needed",
    "write_set",
    "write_set_racks",
]

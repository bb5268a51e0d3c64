"""Replication-client settings (BookKeeper's ``ClientConfiguration``), one pydantic model with named limits.

Every timeout, window, queue and retry count the client uses is here, named with its unit last. Defaults
follow BookKeeper where it has one (``readTimeout`` 5 s, ``addEntryTimeoutSec`` = read timeout,
``recoveryReadBatchSize`` 1, ``bookieQuarantineTimeSeconds`` 1800, ``maxNumEnsembleChanges`` unbounded -
here 2^31 - 1) and otherwise are sized for one broker process. The default quorum
(``ensemble_size``/``write_quorum``/``ack_quorum``) is used when ``create_ledger`` is not told otherwise.
Rack-aware placement: ``min_num_racks_per_write_quorum`` (BookKeeper's ``minNumRacksPerWriteQuorum``, 2) and
``enforce_min_num_racks_per_write_quorum`` (``enforceMinNumRacksPerWriteQuorum``, false).
"""

from __future__ import annotations

from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from magnetar.bookkeeper.protocol import DigestType


class QuorumSettings(BaseModel):
    """The default quorum of new ledgers: BookKeeper's ``E >= WQ >= AQ >= 1``. Declared once here; the client,
    the managed ledger and the broker inherit it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ensemble_size: int = Field(2, ge=1, description="default E for new ledgers")
    write_quorum: int = Field(2, ge=1, description="default WQ for new ledgers")
    ack_quorum: int = Field(2, ge=1, description="default AQ for new ledgers")

    @model_validator(mode="after")
    def _check_quorums(self) -> Self:
        check_quorums(self.ensemble_size, self.write_quorum, self.ack_quorum)
        return self


REQUEST_TIMEOUT_MS_MAX = 600_000
"""Bound on a per-bookie request timeout (10 minutes)."""


class RequestTimeouts(BaseModel):
    """The timeout of one request to a bookie, by kind (BookKeeper's ``addEntryTimeoutSec`` and
    ``readTimeout``). Declared once here: the client's options, the TCP transport's settings and
    AutoRecovery's inherit them. The client hands its values to the transport it runs on, which tracks each
    request's deadline (one timeout tracker per request)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    add_timeout_ms: int = Field(
        5000, ge=1, le=REQUEST_TIMEOUT_MS_MAX, description="per-bookie add request timeout"
    )
    read_timeout_ms: int = Field(
        5000, ge=1, le=REQUEST_TIMEOUT_MS_MAX, description="per-bookie read / fence / read-LAC timeout"
    )

    @property
    def add_timeout_s(self) -> float:
        return self.add_timeout_ms / 1000

    @property
    def read_timeout_s(self) -> float:
        return self.read_timeout_ms / 1000


class RackPlacementSettings(BaseModel):
    """Rack-aware placement of write sets (BookKeeper's ``minNumRacksPerWriteQuorum``,
    ``enforceMinNumRacksPerWriteQuorum``). Declared once here: the client's options and AutoRecovery's (which
    places replacement bookies) inherit them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_num_racks_per_write_quorum: int = Field(
        2, ge=1, le=64, description="racks each write set should span (capped at WQ and the racks there are)"
    )
    enforce_min_num_racks_per_write_quorum: bool = Field(
        False, description="refuse an ensemble (or replacement) below min_num_racks_per_write_quorum"
    )


class LedgerDigestSettings(BaseModel):
    """The digest of new ledgers' entries (BookKeeper's ``digestType``; existing ledgers keep the one their
    metadata records). Declared once here: the client's and the managed ledger's settings inherit it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    digest_type: DigestType = DigestType.CRC32C


class ClientOptions(RequestTimeouts, RackPlacementSettings):
    """Every limit, timeout and placement rule of the client (what a process composes as its ``client``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pending_adds_max: int = Field(10_000, ge=1, description="adds in flight per ledger; more wait")
    entry_payload_bytes_max: int = Field(5 * 1024 * 1024 - 1024, ge=1, description="one entry's payload")
    ensemble_changes_max: int = Field(2**31 - 1, ge=0, description="ensemble changes per ledger handle")
    reads_in_flight_max: int = Field(256, ge=1, description="entries a batch read keeps in flight")
    read_entries_per_call_max: int = Field(65_536, ge=1, description="entries one read_entries may return")
    recovery_read_batch_size: int = Field(
        64,
        ge=1,
        description="fencing recovery reads kept in flight (BookKeeper: 1, reading serially; a window makes "
        "recovering thousands of unacknowledged entries take milliseconds, not seconds)",
    )
    metadata_retries_max: int = Field(64, ge=1, description="compare-and-set attempts per metadata update")
    ledger_id_retries_max: int = Field(16, ge=1, description="create attempts on a ledger-id collision")
    bookie_quarantine_ms: int = Field(1_800_000, ge=0, description="how long a failed bookie is avoided")
    rack_cache_ms: int = Field(
        60_000, ge=0, description="how long a bookie's rack (from its registration) is kept"
    )


class ClientSettings(QuorumSettings, ClientOptions, LedgerDigestSettings):
    """The client's settings: its options, the default quorum and the digest of new ledgers."""

    ledgers_root_path: str = Field("/ledgers", pattern=r"^/[^/].*[^/]$|^/[^/]$")
    """Where ledgers' metadata lives in the metadata store (the bookies' and every client's: not a broker
    setting)."""


class BookieClientSecurity(BaseModel):
    """How a client process reaches bookies that require a token or TLS (BookKeeper's
    ``clientAuthProviderFactoryClass`` and ``tls*`` client settings). Declared once here; the broker's and
    AutoRecovery's settings inherit it, so each keeps these flat names."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bookkeeper_auth_token: str | None = None
    """The token presented to bookies that require one: ``token:<jwt>`` or ``file:///path``."""
    bookkeeper_tls_enabled: bool = False
    """Reach the bookies over TLS (when they serve it)."""
    bookkeeper_tls_trust_certs_file: Path | None = None
    """PEM CA certificates the bookies' certificates are checked against (None: the system's)."""
    bookkeeper_tls_certificate_file: Path | None = None
    """PEM certificate presented to bookies that require client certificates (with
    ``bookkeeper_tls_key_file``)."""
    bookkeeper_tls_key_file: Path | None = None
    """PEM private key of ``bookkeeper_tls_certificate_file``."""

    @model_validator(mode="after")
    def _check_bookie_client_tls(self) -> Self:
        if (self.bookkeeper_tls_certificate_file is None) != (self.bookkeeper_tls_key_file is None):
            raise ValueError("bookkeeper_tls_certificate_file and bookkeeper_tls_key_file go together")
        return self


def check_quorums(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    """BookKeeper's rule ``E >= WQ >= AQ >= 1`` (raises ValueError)."""
    if not (ensemble_size >= write_quorum >= ack_quorum >= 1):
        raise ValueError(
            "quorums must satisfy ack_quorum <= write_quorum <= ensemble_size (all >= 1); got "
            f"ensemble_size={ensemble_size} write_quorum={write_quorum} ack_quorum={ack_quorum}"
        )

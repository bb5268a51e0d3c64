"""Settings of a bookie process: one pydantic-settings model, every field also ``MAGNETAR_<NAME>``.

Names follow docs/architecture.md §4 (unit last) and map to BookKeeper's ``bk_server.conf`` where one exists:
``port`` = ``bookiePort``, ``advertised_address`` = ``advertisedAddress``, ``frame_bytes_max`` =
``nettyMaxFrameSizeBytes``, ``inflight_requests_max`` ~ ``maxAddsInProgressLimit`` (per connection here),
``disk_check_interval_ms`` = ``diskCheckInterval``, ``disk_usage_threshold`` = ``diskUsageThreshold``,
``disk_usage_warn_threshold`` = ``diskUsageWarnThreshold``, ``disk_usage_lwm_threshold`` =
``diskUsageLwmThreshold`` (BookKeeper validates lwm <= threshold since PR #3285; so do we).

Security (off by default): ``authentication_enabled`` makes every connection start with an AUTH carrying a
token signed with the cluster's key (``token_secret_key`` or ``token_public_key``, as the brokers'), whose
role is one of the bookie's clients: ``auth_allowed_roles`` (the brokers' role, the subject of their
``bookkeeper_auth_token``) or ``super_user_roles`` (BookKeeper's ``bookieAuthProviderFactoryClass`` with
Pulsar's practice of admitting only the brokers' own credentials and superusers). Any other role - a
tenant's application token included - is refused, and so is everyone when both lists are empty. Until its
AUTH is accepted a connection may send at most ``unauthenticated_bytes_max`` bytes, and at most
``unauthenticated_connections_max`` connections wait for their AUTH at once (the oldest is closed to admit a
new one), so connections without a token hold at most the product of the two. Once
authentication is on, the HTTP endpoints other than ``is_ready`` need a token of one of ``super_user_roles``
(``/metrics`` only with ``authenticate_metrics_endpoint``, see :mod:`.http_api`).
``tls_certificate_file`` + ``tls_key_file`` serve the protocol over TLS (BookKeeper's ``tlsCertificatePath``,
``tlsKeyStore``), with client certificates required when ``tls_require_trusted_client_cert`` is set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from magnetar.bookkeeper.bookie.storage import BookieDirectories, BookieStorageSettings
from magnetar.bookkeeper.metadata import ProcessMetadataSettings
from magnetar.bookkeeper.protocol import FRAME_BYTES_MAX_DEFAULT
from magnetar.bookkeeper.runtime import AdvertisedAddressSettings, advertised_host_for
from magnetar.bookkeeper.runtime.auth.authentication import (
    MetricsAccessSettings,
    Roles,
    SuperUserSettings,
    TokenKeySettings,
)
from magnetar.bookkeeper.runtime.auth.tls import ServerTlsSettings

Fraction = Annotated[float, Field(gt=0.0, le=1.0)]
PositiveInt = Annotated[int, Field(gt=0)]


class BookKeeperServiceSettings(
    ProcessMetadataSettings, TokenKeySettings, MetricsAccessSettings, SuperUserSettings
):
    """What every process serving the BookKeeper cluster reads - a bookie, ``magnetar autorecovery`` -
    declared once: the way to the metadata store, the cluster's token key and superusers (who may use its
    HTTP endpoints once authentication is on), where it listens and where it reports its ports."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bind_address: str = "0.0.0.0"
    """Address the process listens on (every IPv4 interface by default: it serves the cluster)."""
    http_port: Annotated[int, Field(ge=0, le=65535)] | None = None
    """Port of the process's HTTP endpoints (``/metrics``; a bookie's ``/api/v1/bookie/...``, published in
    its registration; AutoRecovery's REST API) on ``bind_address``; 0 picks a free one; unset serves no
    HTTP."""
    port_file: Path | None = None
    """Once serving (a bookie: and registered), write its ports as JSON here (atomically; a bookie's
    ``{"bookieId", "host", "port"}``)."""


class BookieServerSettings(
    BaseSettings, BookKeeperServiceSettings, ServerTlsSettings, BookieDirectories, AdvertisedAddressSettings
):
    """What a bookie server reads. A bookie process's settings (``BookieSettings``, composed by
    ``magnetar.admin.processes``) add its garbage collector's; the token key, the TLS files and the way to
    the metadata store are the shared models this one inherits, under the names the brokers use too."""

    model_config = SettingsConfigDict(
        env_prefix="MAGNETAR_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )

    # data_dir, journal_dir: BookieDirectories'
    storage: Literal["disk", "memory"] = "disk"
    """Ledger storage engine: ``disk`` (journal + entry logs + RocksDB index, durable) or ``memory``
    (everything in RAM, lost on exit: tests and demos only)."""
    storage_engine: BookieStorageSettings = BookieStorageSettings()
    """Tuning of the disk engine, e.g. ``MAGNETAR_STORAGE_ENGINE__JOURNAL_GROUP_WAIT_MS=1``."""
    memory_store_bytes_max: PositiveInt = 1024 * 1024 * 1024
    """Capacity of the ``memory`` engine (what ``disk_usage`` reports as the disk size)."""

    port: Annotated[int, Field(ge=0, le=65535)] = 3181
    """TCP port of the bookie protocol; 0 picks a free port (see ``port_file``)."""
    # advertised_address (the host part of the bookie id): AdvertisedAddressSettings'
    rack: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^\s]+$")] | None = None
    """The bookie's rack or zone (e.g. Kubernetes' ``topology.kubernetes.io/zone``), published in its
    registration: rack-aware placement spreads each write set over as many racks as it can. Empty is no
    rack (the Helm chart passes a pod label that may be absent)."""

    frame_bytes_max: Annotated[int, Field(ge=1024)] = FRAME_BYTES_MAX_DEFAULT
    inflight_requests_max: PositiveInt = 10_000
    """Requests of one connection being processed at once; more are answered ETOOMANYREQUESTS."""
    connections_max: PositiveInt = 1024
    receive_chunk_bytes: PositiveInt = 256 * 1024
    outgoing_bytes_max: PositiveInt = 8 * 1024 * 1024
    """Unsent response bytes of one connection above which it stops reading requests (slow reader)."""
    write_timeout_ms: PositiveInt = 60_000
    """A connection whose client accepts no response bytes for this long is closed."""
    drain_timeout_ms: PositiveInt = 5_000

    disk_check_interval_ms: PositiveInt = 10_000
    disk_usage_threshold: Fraction = 0.95
    disk_usage_warn_threshold: Fraction = 0.90
    disk_usage_lwm_threshold: Fraction = 0.90

    registration_timeout_ms: PositiveInt = 30_000
    """How long to wait for a stale registration of the same bookie id (a previous session) to expire."""
    registration_retry_ms: PositiveInt = 500

    auth_allowed_roles: Roles = ()
    """The brokers' roles (comma-separated): the subject of the ``bookkeeper_auth_token`` they present.
    With ``super_user_roles`` the only roles admitted; both empty admits nobody."""
    # super_user_roles (allowed everything, as the brokers'; admitted too): SuperUserSettings'
    auth_timeout_ms: PositiveInt = 10_000
    """A connection that has not authenticated within this is closed (it would hold a connection slot)."""
    unauthenticated_bytes_max: Annotated[int, Field(ge=1024, le=1024 * 1024)] = 16 * 1024
    """Bytes a connection may send before its AUTH is accepted (the AUTH frame included: a token of the
    brokers' default ``token_bytes_max`` fits); one that needs to send more is answered EUA and closed."""
    unauthenticated_connections_max: Annotated[int, Field(ge=1, le=65536)] = 128
    """Connections waiting for their AUTH at once; a new one closes the oldest of them."""

    tls_handshake_timeout_ms: PositiveInt = 10_000

    @field_validator("rack", mode="before")
    @classmethod
    def _empty_rack_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _check_security(self) -> Self:
        if self.unauthenticated_bytes_max > self.frame_bytes_max:
            raise ValueError("unauthenticated_bytes_max must be <= frame_bytes_max")
        return self

    @property
    def bookie_client_roles(self) -> frozenset[str]:
        """The roles admitted when authentication is on: ``auth_allowed_roles`` and ``super_user_roles``."""
        return frozenset((*self.auth_allowed_roles, *self.super_user_roles))

    @property
    def tls_enabled(self) -> bool:
        return self.tls_certificate_file is not None

    @model_validator(mode="after")
    def _check_thresholds(self) -> Self:
        if self.disk_usage_lwm_threshold > self.disk_usage_threshold:
            raise ValueError("disk_usage_lwm_threshold must be <= disk_usage_threshold")
        if self.disk_usage_warn_threshold > self.disk_usage_threshold:
            raise ValueError("disk_usage_warn_threshold must be <= disk_usage_threshold")
        return self

    def storage_settings(self) -> BookieStorageSettings:
        """The disk engine's settings, with this bookie's directories."""
        return self.storage_engine.model_copy(
            update={"data_dir": self.data_dir, "journal_dir": self.journal_dir}
        )

    def advertised_host(self) -> str:
        return advertised_host_for(self.advertised_address, self.bind_address)


def bookie_id_for(host: str, port: int) -> str:
    """BookKeeper's default bookie id: ``host:port`` (IPv6 literals in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

"""Settings of the metadata-store backends (the named limits of :mod:`.zk_store` and friends).

Process settings (broker, bookie, standalone) carry these under their own names and build one
:class:`MetadataStoreSettings` to pass to :func:`~.factory.open_metadata_store`. Defaults follow Pulsar:
``metadataStoreSessionTimeoutMillis`` = 30 s and ``metadataStoreOperationTimeoutSeconds`` = 30 s.

TLS to ZooKeeper (ZooKeeper's ``zookeeper.client.secure`` with ``zookeeper.ssl.keyStore`` /
``trustStore``, which Pulsar passes through ``metadataStoreConfigPath``): ``zk_tls_enabled`` connects with
TLS; ``zk_tls_trust_certs_file`` holds the CA certificates (PEM) the server's certificate is checked
against, and ``zk_tls_certificate_file`` + ``zk_tls_key_file`` the client certificate a ZooKeeper server with
``ssl.clientAuth=need`` (its default) asks for. Kazoo does the TLS (``use_ssl``, ``ca``, ``certfile``,
``keyfile``, ``verify_certs``, ``check_hostname``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


@dataclass(frozen=True, slots=True)
class MetadataStoreSettings:
    session_timeout_ms: int = 30_000
    """ZooKeeper session timeout asked of the server (it clamps it to its min/max session timeout)."""

    operation_timeout_ms: int = 30_000
    """Bound on one ZooKeeper request, and on the first connection when the store opens."""

    zk_blocking_calls_max: int = 8
    """Worker threads one ZooKeeper store may occupy with blocking kazoo calls at once."""

    zk_reconnect_delay_max_ms: int = 1_000
    """Longest back-off between two attempts to reach a ZooKeeper server after the connection dropped."""

    zk_tls_enabled: bool = False
    """Connect to ZooKeeper over TLS (its ``secureClientPort``)."""
    zk_tls_trust_certs_file: Path | None = None
    """PEM CA certificates to verify the server with (None: the system's CAs)."""
    zk_tls_certificate_file: Path | None = None
    """PEM client certificate, with ``zk_tls_key_file`` (mutual TLS)."""
    zk_tls_key_file: Path | None = None
    zk_tls_hostname_verification: bool = True
    """Check that the server's certificate names the host connected to."""

    def __post_init__(self) -> None:
        for name in (
            "session_timeout_ms",
            "operation_timeout_ms",
            "zk_blocking_calls_max",
            "zk_reconnect_delay_max_ms",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)}")
        if (self.zk_tls_certificate_file is None) != (self.zk_tls_key_file is None):
            raise ValueError("zk_tls_certificate_file and zk_tls_key_file go together")
        tls_files = (self.zk_tls_trust_certs_file, self.zk_tls_certificate_file)
        if not self.zk_tls_enabled and any(path is not None for path in tls_files):
            raise ValueError("TLS files for ZooKeeper are set but zk_tls_enabled is off")

    def kazoo_tls_options(self) -> dict[str, object]:
        """The ``KazooClient`` keyword arguments for these TLS settings (empty when TLS is off)."""
        if not self.zk_tls_enabled:
            return {}

        def text(path: Path | None) -> str | None:
            return None if path is None else str(path)

        return {
            "use_ssl": True,
            "ca": text(self.zk_tls_trust_certs_file),
            "certfile": text(self.zk_tls_certificate_file),
            "keyfile": text(self.zk_tls_key_file),
            "verify_certs": True,
            "check_hostname": self.zk_tls_hostname_verification,
        }


class MetadataConnectionSettings(BaseModel):
    """How a process reaches the metadata store, under the names every process kind uses (brokers, bookies,
    the cluster-metadata commands): each process's settings model inherits these fields, so each is a flag
    name, a ``MAGNETAR_<NAME>`` variable and a config key of that process, declared once here."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metadata_session_timeout_ms: Annotated[int, Field(gt=0)] = 30_000
    """Metadata-store (ZooKeeper) session timeout: how long a crashed process's ephemeral nodes (a bookie's
    registration, a broker's bundle ownership) linger (Pulsar's ``metadataStoreSessionTimeoutMillis``)."""
    metadata_operation_timeout_ms: Annotated[int, Field(gt=0)] = 30_000
    """Bound on one metadata-store request, and on reaching the store at start-up."""
    zk_tls_enabled: bool = False
    """Reach ZooKeeper over TLS, with the ``zk_tls_*`` files below (see :class:`MetadataStoreSettings`)."""
    zk_tls_trust_certs_file: Path | None = None
    zk_tls_certificate_file: Path | None = None
    zk_tls_key_file: Path | None = None

    def metadata_settings(self) -> MetadataStoreSettings:
        """The backends' settings (:func:`~.factory.open_metadata_store`) for these."""
        return MetadataStoreSettings(
            session_timeout_ms=self.metadata_session_timeout_ms,
            operation_timeout_ms=self.metadata_operation_timeout_ms,
            zk_tls_enabled=self.zk_tls_enabled,
            zk_tls_trust_certs_file=self.zk_tls_trust_certs_file,
            zk_tls_certificate_file=self.zk_tls_certificate_file,
            zk_tls_key_file=self.zk_tls_key_file,
        )


class ProcessMetadataSettings(MetadataConnectionSettings):
    """A process's metadata store and how it reaches it, declared once: a broker's, a bookie's and
    ``magnetar autorecovery``'s settings inherit it (the metadata commands, which have no default store,
    take :class:`MetadataConnectionSettings` and name the store themselves)."""

    metadata_url: str = "memory://"
    """The metadata store: ``zk:HOST:PORT[,HOST:PORT][/chroot]``, ``rocksdb:///PATH``, or ``memory://`` (in
    the process: nothing shared, nothing kept)."""

"""The security settings of a broker: authentication, authorization, TLS and protective limits.

:class:`BrokerSettings <magnetar.broker.settings.BrokerSettings>` inherits these fields (and they, the
shared models of the token key, authorization, limits and server TLS), so each is a flag
and a ``MAGNETAR_<NAME>`` variable like every other broker setting. Names are Pulsar's ``broker.conf`` names
in snake case: ``authentication_enabled`` = ``authenticationEnabled``, ``token_secret_key`` =
``tokenSecretKey``, ``super_user_roles`` = ``superUserRoles``, ``http_port_tls`` = ``webServicePortTls``,
``tls_certificate_file`` = ``tlsCertificateFilePath``, ``tls_trust_certs_file`` = ``tlsTrustCertsFilePath``,
``tls_require_trusted_client_cert`` = ``tlsRequireTrustedClientCertOnConnect``,
``topics_per_namespace_max`` =
``maxTopicsPerNamespace``, ``bookkeeper_auth_token`` ~ ``bookkeeperClientAuthenticationParameters``,
``bookkeeper_tls_*`` = ``bookkeeperTLS*``, ``zk_tls_*`` ~ ZooKeeper's ``zookeeper.ssl.*``,
``managed_ledger_password`` = ``managedLedgerPassword``, ``managed_ledger_digest_type`` =
``managedLedgerDigestType``. ``http_connections_per_ip_max`` (``brokerMaxConnectionsPerIp``) is the HTTP
server's (:class:`~magnetar.bookkeeper.runtime.http.HttpSettings`, the broker's ``http``).

Everything is off by default, as in Pulsar's standalone. ``authentication_enabled=true`` with a key is the
one setting that turns authentication *and* authorization on (``authorization_enabled`` follows it unless
set); superusers come from ``super_user_roles``.

Bookies admit only the brokers' role (the subject of ``bookkeeper_auth_token``, which the bookies list in
their ``auth_allowed_roles``) and superusers. The ledgers a broker creates get ``managed_ledger_password``,
whose master key the bookies require on every add and fencing read: unset, each broker draws a random
password when it starts. A ledger records its password in its metadata (as BookKeeper's does) and brokers
open existing ledgers with the recorded one, so brokers need not share a password, changing it applies to new
ledgers, and ledgers of earlier versions (the empty password) stay readable.
"""

from __future__ import annotations

import ssl
from typing import Annotated, Literal, Self

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from magnetar.bookkeeper.client import BookieClientSecurity
from magnetar.bookkeeper.protocol import DigestType
from magnetar.bookkeeper.runtime import Clock
from magnetar.bookkeeper.runtime.auth.authentication import (
    AuthenticationService,
    AuthenticationSettings,
    MetricsAccessSettings,
)
from magnetar.bookkeeper.runtime.auth.keys import read_secret_setting, read_token_setting
from magnetar.bookkeeper.runtime.auth.tls import ServerTlsSettings, client_ssl_context, server_ssl_context
from magnetar.broker.policies import PolicyStore
from magnetar.broker.security.authorization import AuthorizationService, AuthorizationSettings
from magnetar.broker.security.broker_security import BrokerSecurity, SecurityLimits


class SecuritySettings(
    BaseSettings,
    BookieClientSecurity,
    AuthenticationSettings,
    MetricsAccessSettings,
    AuthorizationSettings,
    SecurityLimits,
    ServerTlsSettings,
):
    """A broker's security settings. The token settings (:class:`AuthenticationSettings`), authorization
    (:class:`AuthorizationSettings`), the limits (:class:`SecurityLimits`) and the TLS files of the HTTPS port
    (:class:`ServerTlsSettings`) are declared, bounded and checked in their own models, which this one
    inherits; the services take this model itself (it *is* each of them), so nothing is copied."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid")

    # -- TLS of the HTTP/WebSocket port (the files: ServerTlsSettings) --------------------------------
    http_port_tls: Annotated[int, Field(ge=0, le=65535)] | None = None
    """Serve the same routes over TLS on this port too (0: any free port); needs the certificate files."""

    # -- re-authentication of long-lived connections (Pulsar's binary protocol) -----------------------
    authentication_refresh_check_seconds: Annotated[int, Field(ge=1, le=86_400)] = 60
    """Pulsar's ``authenticationRefreshCheckSeconds``: how often a binary-protocol connection's token is
    checked for expiry; once expired, the broker asks the client for a fresh one (AUTH_CHALLENGE) and closes
    the connection when the next check finds no valid answer."""

    # -- as a client of the bookies and of ZooKeeper -------------------------------------------------
    # bookkeeper_auth_token and bookkeeper_tls_* (the token and TLS files): BookieClientSecurity's
    bookkeeper_tls_hostname_verification: bool = True

    # -- ledger passwords (Pulsar's managedLedgerPassword / managedLedgerDigestType) ---------------------
    managed_ledger_password: SecretStr | None = None
    """Password of the ledgers this broker creates: ``file:///path`` (the file's text, stripped) or the text
    itself; never shown by ``magnetar config show``. Unset: a random password drawn when the broker starts
    (recorded, like any, in each ledger's metadata). The empty text is the password of earlier versions."""
    managed_ledger_digest_type: Literal["CRC32C", "CRC32", "MAC", "DUMMY"] = "CRC32C"
    """Digest of new ledgers' entries (``MAC`` = HMAC-SHA1 keyed by the password)."""

    @model_validator(mode="after")
    def _check_security(self) -> Self:
        if self.http_port_tls is not None and self.tls_certificate_file is None:
            raise ValueError("http_port_tls needs tls_certificate_file and tls_key_file")
        return self

    def web_ssl_context(self) -> ssl.SSLContext | None:
        """The server context of the TLS port (None without ``http_port_tls``)."""
        if self.http_port_tls is None or self.tls_certificate_file is None or self.tls_key_file is None:
            return None
        return server_ssl_context(
            self.tls_certificate_file,
            self.tls_key_file,
            trust_certs_file=self.tls_trust_certs_file,
            require_client_cert=self.tls_require_trusted_client_cert,
        )

    def bookkeeper_ssl_context(self) -> ssl.SSLContext | None:
        if not self.bookkeeper_tls_enabled:
            return None
        return client_ssl_context(
            trust_certs_file=self.bookkeeper_tls_trust_certs_file,
            certificate_file=self.bookkeeper_tls_certificate_file,
            key_file=self.bookkeeper_tls_key_file,
            check_hostname=self.bookkeeper_tls_hostname_verification,
        )

    def bookkeeper_token(self) -> str | None:
        """The token for bookies, read now (``KeyConfigError`` when its file cannot be read)."""
        if not self.bookkeeper_auth_token:
            return None
        return read_token_setting(self.bookkeeper_auth_token, "bookkeeper_auth_token")

    def ledger_password(self) -> bytes | None:
        """``managed_ledger_password`` as bytes, read now (``KeyConfigError`` when its file cannot be read);
        None when unset."""
        if self.managed_ledger_password is None:
            return None
        return read_secret_setting(self.managed_ledger_password.get_secret_value(), "managed_ledger_password")

    def ledger_digest_type(self) -> DigestType:
        name = self.managed_ledger_digest_type
        return DigestType.HMAC if name == "MAC" else DigestType[name]


def build_security(settings: SecuritySettings, policies: PolicyStore, clock: Clock) -> BrokerSecurity:
    """The broker's security front; reads key files now (``KeyConfigError`` stops the start-up)."""
    authentication = AuthenticationService(settings, clock)
    authorization = AuthorizationService(
        policies, settings, authentication_enabled=settings.authentication_enabled
    )
    return BrokerSecurity(authentication, authorization, settings, clock)

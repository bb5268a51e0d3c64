"""The security settings of a broker: authentication, authorization, TLS and protective limits.

:class:`BrokerSettings <magnetar.broker.settings.BrokerSettings>` inherits these fields, so each is a flag
and a ``MAGNETAR_<NAME>`` variable like every other broker setting. Names are Pulsar's ``broker.conf`` names
in snake case: ``authentication_enabled`` = ``authenticationEnabled``, ``token_secret_key`` =
``tokenSecretKey``, ``super_user_roles`` = ``superUserRoles``, ``http_port_tls`` = ``webServicePortTls``,
``tls_certificate_file`` = ``tlsCertificateFilePath``, ``tls_trust_certs_file`` = ``tlsTrustCertsFilePath``,
``tls_require_trusted_client_cert`` = ``tlsRequireTrustedClientCertOnConnect``,
``http_connections_per_ip_max`` = ``brokerMaxConnectionsPerIp``, ``topics_per_namespace_max`` =
``maxTopicsPerNamespace``, ``bookkeeper_auth_token`` ~ ``bookkeeperClientAuthenticationParameters``,
``bookkeeper_tls_*`` = ``bookkeeperTLS*``, ``zk_tls_*`` ~ ZooKeeper's ``zookeeper.ssl.*``,
``managed_ledger_password`` = ``managedLedgerPassword``, ``managed_ledger_digest_type`` =
``managedLedgerDigestType``.

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
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode

from magnetar.bookkeeper.protocol.digest import DigestType
from magnetar.bookkeeper.runtime.auth.authentication import AuthenticationService, AuthenticationSettings
from magnetar.bookkeeper.runtime.auth.keys import read_secret_setting, read_token_setting
from magnetar.bookkeeper.runtime.auth.tls import client_ssl_context, server_ssl_context
from magnetar.bookkeeper.runtime.auth.tokens import TOKEN_BYTES_MAX_DEFAULT
from magnetar.bookkeeper.runtime.clock import Clock
from magnetar.broker.authorization import AuthorizationService, AuthorizationSettings
from magnetar.broker.policies import PolicyStore
from magnetar.broker.security import BrokerSecurity, SecurityLimits

Roles = Annotated[tuple[str, ...], NoDecode]


class SecuritySettings(BaseSettings):
    # -- authentication (Pulsar's token provider) --------------------------------------------------
    authentication_enabled: bool = False
    token_secret_key: str | None = None
    """``file:///path``, ``data:;base64,...`` or base64 (HS256/384/512)."""
    token_public_key: str | None = None
    """The public key of a key pair (RS*/PS*/ES*), same forms."""
    token_auth_claim: str = "sub"
    token_audience_claim: str | None = None
    token_audience: str | None = None
    token_allowed_clock_skew_seconds: Annotated[float, Field(ge=0, le=3600)] = 0.0
    token_bytes_max: Annotated[int, Field(ge=64, le=65536)] = TOKEN_BYTES_MAX_DEFAULT
    anonymous_user_role: str | None = None
    authenticate_metrics_endpoint: bool = False
    """Pulsar ``authenticateMetricsEndpoint``: require a token on ``/metrics`` too."""

    # -- authorization --------------------------------------------------------------------------------
    authorization_enabled: bool | None = None
    """None: follows ``authentication_enabled``."""
    super_user_roles: Roles = ()
    authorization_allow_wildcards_matching: bool = False

    # -- TLS of the HTTP/WebSocket port ---------------------------------------------------------------
    http_port_tls: Annotated[int, Field(ge=0, le=65535)] | None = None
    """Serve the same routes over TLS on this port too (0: any free port); needs the certificate files."""
    tls_certificate_file: Path | None = None
    tls_key_file: Path | None = None
    tls_trust_certs_file: Path | None = None
    tls_require_trusted_client_cert: bool = False

    # -- limits -------------------------------------------------------------------------------------
    http_connections_per_ip_max: Annotated[int, Field(ge=0)] = 0
    admin_requests_per_role_per_s: Annotated[float, Field(ge=0)] = 0.0
    admin_requests_per_connection_per_s: Annotated[float, Field(ge=0)] = 0.0
    admin_requests_burst: Annotated[int, Field(ge=1)] = 100
    publish_messages_per_connection_per_s: Annotated[float, Field(ge=0)] = 0.0
    publish_messages_per_role_per_s: Annotated[float, Field(ge=0)] = 0.0
    publish_messages_burst: Annotated[int, Field(ge=1)] = 1000
    topics_per_namespace_max: Annotated[int, Field(ge=0)] = 0

    # -- as a client of the bookies and of ZooKeeper -------------------------------------------------
    bookkeeper_auth_token: str | None = None
    """The token the broker presents to bookies that require one: ``token:<jwt>`` or ``file:///path``."""
    bookkeeper_tls_enabled: bool = False
    bookkeeper_tls_trust_certs_file: Path | None = None
    bookkeeper_tls_certificate_file: Path | None = None
    bookkeeper_tls_key_file: Path | None = None
    bookkeeper_tls_hostname_verification: bool = True
    zk_tls_enabled: bool = False
    zk_tls_trust_certs_file: Path | None = None
    zk_tls_certificate_file: Path | None = None
    zk_tls_key_file: Path | None = None

    # -- ledger passwords (Pulsar's managedLedgerPassword / managedLedgerDigestType) ---------------------
    managed_ledger_password: SecretStr | None = None
    """Password of the ledgers this broker creates: ``file:///path`` (the file's text, stripped) or the text
    itself; never shown by ``magnetar config show``. Unset: a random password drawn when the broker starts
    (recorded, like any, in each ledger's metadata). The empty text is the password of earlier versions."""
    managed_ledger_digest_type: Literal["CRC32C", "CRC32", "MAC", "DUMMY"] = "CRC32C"
    """Digest of new ledgers' entries (``MAC`` = HMAC-SHA1 keyed by the password)."""

    @field_validator("super_user_roles", mode="before")
    @classmethod
    def _split_roles(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(role.strip() for role in value.split(",") if role.strip())
        return value

    @model_validator(mode="after")
    def _check_security(self) -> Self:
        try:
            self.authentication_settings()  # validates the token settings together
        except ValidationError as exc:
            raise ValueError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
        if (self.tls_certificate_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_certificate_file and tls_key_file go together")
        if self.http_port_tls is not None and self.tls_certificate_file is None:
            raise ValueError("http_port_tls needs tls_certificate_file and tls_key_file")
        if self.tls_require_trusted_client_cert and self.tls_trust_certs_file is None:
            raise ValueError("tls_require_trusted_client_cert needs tls_trust_certs_file")
        if (self.bookkeeper_tls_certificate_file is None) != (self.bookkeeper_tls_key_file is None):
            raise ValueError("bookkeeper_tls_certificate_file and bookkeeper_tls_key_file go together")
        return self

    def authentication_settings(self) -> AuthenticationSettings:
        return AuthenticationSettings(
            authentication_enabled=self.authentication_enabled,
            token_secret_key=self.token_secret_key,
            token_public_key=self.token_public_key,
            token_auth_claim=self.token_auth_claim,
            token_audience_claim=self.token_audience_claim,
            token_audience=self.token_audience,
            token_allowed_clock_skew_seconds=self.token_allowed_clock_skew_seconds,
            token_bytes_max=self.token_bytes_max,
            anonymous_user_role=self.anonymous_user_role,
        )

    def authorization_settings(self) -> AuthorizationSettings:
        return AuthorizationSettings(
            authorization_enabled=self.authorization_enabled,
            super_user_roles=self.super_user_roles,
            authorization_allow_wildcards_matching=self.authorization_allow_wildcards_matching,
        )

    def security_limits(self) -> SecurityLimits:
        return SecurityLimits(
            admin_requests_per_role_per_s=self.admin_requests_per_role_per_s,
            admin_requests_per_connection_per_s=self.admin_requests_per_connection_per_s,
            admin_requests_burst=self.admin_requests_burst,
            publish_messages_per_connection_per_s=self.publish_messages_per_connection_per_s,
            publish_messages_per_role_per_s=self.publish_messages_per_role_per_s,
            publish_messages_burst=self.publish_messages_burst,
            topics_per_namespace_max=self.topics_per_namespace_max,
        )

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

    def zk_tls_options(self) -> dict[str, Any]:
        """The ``zk_tls_*`` fields of the metadata store's settings (``MetadataStoreSettings``)."""
        return {
            "zk_tls_enabled": self.zk_tls_enabled,
            "zk_tls_trust_certs_file": self.zk_tls_trust_certs_file,
            "zk_tls_certificate_file": self.zk_tls_certificate_file,
            "zk_tls_key_file": self.zk_tls_key_file,
        }


def build_security(settings: SecuritySettings, policies: PolicyStore, clock: Clock) -> BrokerSecurity:
    """The broker's security front; reads key files now (``KeyConfigError`` stops the start-up)."""
    authentication = AuthenticationService(settings.authentication_settings(), clock)
    authorization = AuthorizationService(
        policies, settings.authorization_settings(), authentication_enabled=settings.authentication_enabled
    )
    return BrokerSecurity(authentication, authorization, settings.security_limits(), clock)

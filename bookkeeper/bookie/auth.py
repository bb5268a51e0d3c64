"""Who may talk to a bookie: the AUTH exchange's server side and the TLS context, from the settings.

Theory of operation (BookKeeper's ``AuthHandler.ServerSideHandler`` with a token provider). With
``authentication_enabled`` a connection is unauthenticated until an AUTH request with the ``token`` plugin
carries a token that the cluster key verifies and whose role is one of the bookie's clients: the brokers'
roles (``auth_allowed_roles``) and the superusers (``super_user_roles``). The bookie protocol is the
brokers' storage interface, below every tenant check: a role that may use it can read any ledger, so a token
that is valid for the cluster is not enough - the tokens the brokers hand out to applications are valid
too. With both lists empty nobody is admitted. The connection code (:mod:`.server`) answers every other
request EUA until then, closes the connection after a refused AUTH, and closes a connection that has not
authenticated within ``auth_timeout_ms``. Without ``authentication_enabled`` an AUTH is accepted as is (a
client configured with a token still works against an open bookie).

Adds, fencing reads and recovery adds also carry the ledger's master key, which the bookie compares with the
one recorded at the ledger's first add (:mod:`.core`): an admitted role still needs the ledger's password to
change a ledger.
"""

from __future__ import annotations

import ssl

from magnetar.bookkeeper.bookie.settings import BookieServerSettings
from magnetar.bookkeeper.protocol import AUTH_PLUGIN_TOKEN, AuthRequest
from magnetar.bookkeeper.runtime import Clock, SystemClock
from magnetar.bookkeeper.runtime.auth.errors import AuthenticationError, AuthorizationError
from magnetar.bookkeeper.runtime.auth.keys import verification_key
from magnetar.bookkeeper.runtime.auth.tls import server_ssl_context
from magnetar.bookkeeper.runtime.auth.tokens import TokenVerifier


class BookieAuthenticator:
    """Checks the token of an AUTH request: returns the role or raises (401/403-like faults)."""

    def __init__(self, verifier: TokenVerifier, allowed_roles: frozenset[str]) -> None:
        self._verifier = verifier
        self.allowed_roles = allowed_roles

    @classmethod
    def from_settings(
        cls, settings: BookieServerSettings, clock: Clock | None = None
    ) -> BookieAuthenticator | None:
        """None when authentication is off; reads the key now (``KeyConfigError`` at startup)."""
        if not settings.authentication_enabled:
            return None
        verifier = TokenVerifier(
            verification_key(settings.token_secret_key, settings.token_public_key),
            clock=clock or SystemClock(),
            allowed_clock_skew_s=settings.token_allowed_clock_skew_seconds,
        )
        return cls(verifier, settings.bookie_client_roles)

    def authenticate(self, request: AuthRequest) -> str:
        if request.plugin_name != AUTH_PLUGIN_TOKEN:
            name = request.plugin_name[:40]
            raise AuthenticationError(
                f"unsupported auth plugin {name!r} (this bookie takes {AUTH_PLUGIN_TOKEN!r})"
            )
        try:
            token = request.payload.decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationError("the token is not ASCII text") from None
        role = self._verifier.verify(token).role
        if role not in self.allowed_roles:
            raise AuthorizationError(
                f"role {role[:100]!r} may not connect to this bookie "
                "(only the roles in its auth_allowed_roles and super_user_roles may)"
            )
        return role


def bookie_ssl_context(settings: BookieServerSettings) -> ssl.SSLContext | None:
    """The server TLS context of the bookie protocol, or None when TLS is off."""
    if settings.tls_certificate_file is None or settings.tls_key_file is None:
        return None
    return server_ssl_context(
        settings.tls_certificate_file,
        settings.tls_key_file,
        trust_certs_file=settings.tls_trust_certs_file,
        require_client_cert=settings.tls_require_trusted_client_cert,
    )

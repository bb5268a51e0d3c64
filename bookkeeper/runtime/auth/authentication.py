"""Authentication of HTTP requests and WebSocket upgrades with tokens (Pulsar's ``AuthenticationService``
with the token provider).

Theory of operation. When ``authentication_enabled`` is off (the default, as in Pulsar's standalone) every
request is anonymous: :meth:`AuthenticationService.authenticate` returns :data:`ANONYMOUS` (role None) and
authorization is not consulted. When it is on, a request must carry a token:

* ``Authorization: Bearer <token>`` (RFC 6750; Pulsar's ``AuthenticationProviderToken``), on HTTP requests and
  WebSocket upgrades alike;
* on a WebSocket upgrade only, when that header is absent, the ``token`` query parameter - browsers cannot
  set headers on a WebSocket (Pulsar's WebSocket servlet turns the parameter into the header the same way).

The token is verified by :class:`~.tokens.TokenVerifier`; its role claim is the caller's role. A request
without a token is refused unless ``anonymous_user_role`` names a role to give it (Pulsar's
``anonymousUserRole``). Every refusal is an :class:`~.errors.AuthenticationError` whose ``reason`` the
transport turns into a 401: ``{"reason": "Authentication required: <why>"}`` on HTTP, a 401 answer to a
WebSocket upgrade, EUA on the bookie protocol. Counters of successes and failures by cause are kept for the
metrics endpoint.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from magnetar.bookkeeper.runtime import Clock, SystemClock
from magnetar.bookkeeper.runtime.auth.errors import (
    AuthenticationError,
    MalformedTokenError,
    MissingCredentialsError,
)
from magnetar.bookkeeper.runtime.auth.keys import verification_key
from magnetar.bookkeeper.runtime.auth.tokens import TOKEN_BYTES_MAX_DEFAULT, TokenVerifier

TOKEN_QUERY_PARAMETER = "token"
BEARER_PREFIX = "bearer "


def split_roles(value: Any) -> Any:
    """``"a,b"`` -> ``("a", "b")`` for role lists given as one comma-separated flag or variable."""
    if isinstance(value, str):
        return tuple(role.strip() for role in value.split(",") if role.strip())
    return value


Roles = Annotated[tuple[str, ...], NoDecode, BeforeValidator(split_roles)]
"""A list of roles: a tuple in a config file, comma-separated as a flag or a variable."""


class TokenKeySettings(BaseModel):
    """The cluster's token key, under the names brokers and bookies share (Pulsar's names in snake case).
    Each process's settings model inherits these fields, so each is a flag name, a ``MAGNETAR_<NAME>``
    variable and a config key of that process, declared and checked once here."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    authentication_enabled: bool = False
    """Pulsar ``authenticationEnabled``: require a valid token on every protected request (a bookie: refuse
    every request of a connection, EUA, until it has presented one with AUTH)."""
    token_secret_key: str | None = None
    """Pulsar ``tokenSecretKey``: ``data:;base64,...``, ``file:///path`` or base64 (HS256/384/512)."""
    token_public_key: str | None = None
    """Pulsar ``tokenPublicKey``: the public half of a key pair (RS*/PS*/ES*), same forms."""
    token_allowed_clock_skew_seconds: Annotated[float, Field(ge=0, le=3600)] = 0.0
    """Leeway on ``exp`` and ``nbf`` (Pulsar's jjwt parser allows none)."""

    @field_validator("token_secret_key", "token_public_key")
    @classmethod
    def _blank_key_is_unset(cls, value: str | None) -> str | None:
        return value if value and value.strip() else None

    @model_validator(mode="after")
    def _check_key(self) -> Self:
        if self.authentication_enabled and not (self.token_secret_key or self.token_public_key):
            raise ValueError("authentication_enabled needs token_secret_key or token_public_key")
        if self.token_secret_key and self.token_public_key:
            raise ValueError("set token_secret_key or token_public_key, not both")
        return self

    def authentication_settings(self) -> AuthenticationSettings:
        """The full authentication settings of a process that has only the key (a bookie): the other
        settings keep their defaults."""
        if isinstance(self, AuthenticationSettings):
            return self
        return AuthenticationSettings.model_validate(
            {name: getattr(self, name) for name in TokenKeySettings.model_fields}
        )


class SuperUserSettings(BaseModel):
    """The superusers, declared once for every process that has them: a broker (Pulsar's ``superUserRoles``:
    everything), a bookie (its protocol, its HTTP endpoints) and ``magnetar autorecovery`` (its REST API)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    super_user_roles: Roles = ()
    """Pulsar ``superUserRoles``: roles allowed everything (comma-separated as a flag or variable)."""


class MetricsAccessSettings(BaseModel):
    """Who may read ``/metrics``, declared once for every process that serves it: a broker, a standalone
    (its ``/metrics`` and each bookie's ``/bookies/<id>/metrics``), a bookie's own HTTP port and
    ``magnetar autorecovery``'s."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    authenticate_metrics_endpoint: bool = False
    """Pulsar ``authenticateMetricsEndpoint``: ``/metrics`` needs a superuser's token too (with
    ``authentication_enabled``). Off by default, as in Pulsar: a Prometheus scraper needs no token."""


class AuthenticationSettings(TokenKeySettings):
    """The token settings of a broker: the key (:class:`TokenKeySettings`) and how tokens are read. A
    broker's settings model inherits them."""

    token_auth_claim: str = "sub"
    """Pulsar ``tokenAuthClaim``: the claim holding the role."""
    token_audience_claim: str | None = None
    """Pulsar ``tokenAudienceClaim``: when set, tokens must carry ``token_audience`` in this claim."""
    token_audience: str | None = None
    """Pulsar ``tokenAudience``."""
    token_bytes_max: Annotated[int, Field(ge=64, le=65536)] = TOKEN_BYTES_MAX_DEFAULT
    """Longest token accepted."""
    anonymous_user_role: str | None = None
    """Pulsar ``anonymousUserRole``: the role of a request without a token (None: refuse it with 401)."""

    @field_validator("token_audience_claim", "anonymous_user_role")
    @classmethod
    def _blank_is_unset(cls, value: str | None) -> str | None:
        return value if value and value.strip() else None

    @model_validator(mode="after")
    def _check(self) -> Self:
        if (self.token_audience_claim is None) != (self.token_audience is None):
            raise ValueError("token_audience_claim and token_audience go together")
        return self

    def verifier(self, clock: Clock | None = None) -> TokenVerifier:
        """A verifier for the configured key (reads key files now; :class:`~.errors.KeyConfigError`)."""
        return TokenVerifier(
            verification_key(self.token_secret_key, self.token_public_key),
            clock=clock or SystemClock(),
            allowed_clock_skew_s=self.token_allowed_clock_skew_seconds,
            role_claim=self.token_auth_claim,
            audience_claim=self.token_audience_claim,
            audience=self.token_audience,
            token_bytes_max=self.token_bytes_max,
        )


@dataclass(frozen=True, slots=True)
class Principal:
    """Who made a request. ``role`` None: authentication is off, so the caller is anonymous and unchecked."""

    role: str | None
    expires_at_ms: int | None = None
    """When the token stops being valid (None: never, or no token)."""

    @property
    def authenticated(self) -> bool:
        return self.role is not None


ANONYMOUS = Principal(None)


class RequestHead(Protocol):
    """What authentication reads of a request head (the HTTP server's ``RequestHead`` has it; the HTTP
    package imports this one for TLS, so this one names only what it needs)."""

    @property
    def query(self) -> Mapping[str, str]: ...
    def header(self, name: str, default: str | None = None) -> str | None: ...


def bearer_token(head: RequestHead) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None without the header.

    A header with another scheme is refused (Pulsar: "Invalid HTTP Authorization header")."""
    value = head.header("authorization")
    if value is None:
        return None
    if value[: len(BEARER_PREFIX)].lower() != BEARER_PREFIX:
        raise MalformedTokenError("invalid Authorization header: expected 'Bearer <token>'")
    token = value[len(BEARER_PREFIX) :].strip()
    if not token:
        raise MalformedTokenError("blank token in the Authorization header")
    return token


def presented_token(head: RequestHead, *, allow_query_token: bool) -> str | None:
    """The header's token, else (WebSocket upgrades) the ``token`` query parameter, else None."""
    token = bearer_token(head)
    if token is None and allow_query_token:
        token = head.query.get(TOKEN_QUERY_PARAMETER) or None
    return token


class AuthenticationService:
    """Turns a request head into a :class:`Principal` or an :class:`~.errors.AuthenticationError`."""

    def __init__(self, settings: AuthenticationSettings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.enabled = settings.authentication_enabled
        self._verifier = settings.verifier(clock) if self.enabled else None
        self.successes = 0
        self.failures: Counter[str] = Counter()
        """Refusals by cause (the error class name, e.g. ``TokenExpiredError``)."""

    def authenticate_token(self, token: str) -> Principal:
        """Verify a token presented by other means (the bookie protocol's AUTH)."""
        if self._verifier is None:
            return ANONYMOUS
        try:
            verified = self._verifier.verify(token)
        except AuthenticationError as exc:
            self.failures[type(exc).__name__] += 1
            raise
        self.successes += 1
        return Principal(verified.role, verified.expires_at_ms)

    def authenticate(self, head: RequestHead, *, allow_query_token: bool = False) -> Principal:
        """The caller of an HTTP request (``allow_query_token`` for WebSocket upgrades)."""
        if self._verifier is None:
            return ANONYMOUS
        try:
            token = presented_token(head, allow_query_token=allow_query_token)
        except AuthenticationError as exc:
            self.failures[type(exc).__name__] += 1
            raise
        if token is None:
            anonymous = self.settings.anonymous_user_role
            if anonymous is not None:
                self.successes += 1
                return Principal(anonymous)
            self.failures[MissingCredentialsError.__name__] += 1
            where = "an 'Authorization: Bearer <token>' header"
            if allow_query_token:
                where += " or a 'token' query parameter"
            raise MissingCredentialsError(f"no token: send {where}")
        return self.authenticate_token(token)


def http_reason(error: AuthenticationError) -> str:
    """The ``{"reason": ...}`` of a 401 answer."""
    return f"Authentication required: {error.reason}"

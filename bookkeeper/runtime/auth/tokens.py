"""JSON Web Tokens as Pulsar's ``AuthenticationProviderToken`` uses them: create and verify.

Theory of operation. A token is a compact JWS, ``base64url(header).base64url(claims).base64url(signature)``
(RFC 7515/7519), signed with a secret key (HS256/384/512) or a private key (RS*/PS*/ES*). The role is the
``sub`` claim (``tokenAuthClaim`` changes the claim; a list claim yields its first string, as Pulsar). ``exp``
and ``nbf`` are seconds since the epoch; a token without ``exp`` never expires.

:class:`TokenVerifier` is what a broker or bookie runs on every presented token:

1. bounds and shape: at most ``token_bytes_max`` bytes, ASCII, three ``.``-separated parts;
2. signature, by PyJWT, with the *key's own* list of algorithms (:class:`~.keys.TokenKey`): ``alg: none``
   and algorithm confusion are refused before any cryptography runs;
3. claims, checked here against the injected :class:`~magnetar.bookkeeper.runtime.clock.Clock` (so tests
   control time): ``exp``/``nbf`` within ``allowed_clock_skew_s`` (Pulsar's jjwt parser allows none by
   default), the role claim, and the audience when ``token_audience_claim`` is configured.

Every refusal is a :class:`~.errors.TokenError` subclass whose ``reason`` says what was wrong; nothing else
escapes :meth:`TokenVerifier.verify`, whatever bytes it is given (a hypothesis test holds it to that).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import jwt

from magnetar.bookkeeper.runtime import Clock
from magnetar.bookkeeper.runtime.auth.errors import (
    InvalidClaimsError,
    InvalidSignatureError,
    KeyConfigError,
    MalformedTokenError,
    TokenAlgorithmError,
    TokenExpiredError,
    TokenNotYetValidError,
)
from magnetar.bookkeeper.runtime.auth.keys import TokenKey

TOKEN_BYTES_MAX_DEFAULT = 8192
"""Longest token accepted (Jetty's default request-header limit is 8 KiB, so a longer one cannot arrive)."""
ROLE_BYTES_MAX = 1024
"""Longest role (``sub``) accepted; roles end up in metadata (grants) and logs."""
_COMPACT_JWS = re.compile(r"[A-Za-z0-9_\-=]+\.[A-Za-z0-9_\-=]+\.[A-Za-z0-9_\-=]*")
_RELATIVE_TIME = re.compile(r"(\d+)([smhdwy]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    role: str
    claims: Mapping[str, Any] = field(repr=False)
    expires_at_ms: int | None
    """``exp`` in milliseconds, or None for a token that never expires."""


def _iso(seconds: float) -> str:
    try:
        return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return f"{seconds} s after the epoch"


def _numeric_date(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    problem = InvalidClaimsError(f"the '{name}' claim must be a number of seconds since the epoch")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise problem
    try:
        number = float(value)
    except OverflowError:  # an integer beyond a float's range
        raise problem from None
    if not math.isfinite(number):
        raise problem
    return number


class TokenVerifier:
    """Verifies tokens with one key; thread-safe and cheap to call (no I/O)."""

    def __init__(
        self,
        key: TokenKey,
        *,
        clock: Clock,
        allowed_clock_skew_s: float = 0.0,
        role_claim: str = "sub",
        audience_claim: str | None = None,
        audience: str | None = None,
        token_bytes_max: int = TOKEN_BYTES_MAX_DEFAULT,
    ) -> None:
        if key.kind == "private":
            raise KeyConfigError("tokens are verified with a secret or a public key, not a private key")
        if (audience_claim is None) != (audience is None):
            raise KeyConfigError("token_audience_claim and token_audience go together")
        self.key = key
        self._clock = clock
        self._skew_s = allowed_clock_skew_s
        self._role_claim = role_claim
        self._audience_claim = audience_claim
        self._audience = audience
        self._token_bytes_max = token_bytes_max
        self._jws = jwt.PyJWS(options={"enforce_minimum_key_length": True})

    def verify(self, token: str) -> VerifiedToken:
        """The role the token names, or a :class:`~.errors.TokenError` saying why it is refused."""
        payload = self._verify_signature(token)
        try:
            claims = json.loads(payload)
        except (ValueError, RecursionError):
            raise MalformedTokenError("the token's claims are not JSON") from None
        if not isinstance(claims, dict):
            raise MalformedTokenError("the token's claims are not a JSON object")
        expires_at_s = self._check_times(claims)
        self._check_audience(claims)
        role = self._role(claims)
        expires_at_ms = None if expires_at_s is None else int(expires_at_s * 1000)
        return VerifiedToken(role, claims, expires_at_ms)

    # -- steps -----------------------------------------------------------------------------------------------

    def _verify_signature(self, token: str) -> bytes:
        if not isinstance(token, str):
            raise MalformedTokenError("a token is text")
        if len(token) > self._token_bytes_max:
            raise MalformedTokenError(f"token of {len(token)} bytes exceeds {self._token_bytes_max} bytes")
        if not _COMPACT_JWS.fullmatch(token):
            raise MalformedTokenError("not a JWT: expected three base64url parts separated by '.'")
        try:
            decoded = self._jws.decode_complete(token, self.key.key, algorithms=list(self.key.algorithms))
        except jwt.InvalidAlgorithmError:
            raise TokenAlgorithmError(self._algorithm_reason(token)) from None
        except jwt.InvalidKeyError:
            raise TokenAlgorithmError(self._algorithm_reason(token)) from None
        except jwt.InvalidSignatureError:
            raise InvalidSignatureError("the token's signature does not match the configured key") from None
        except jwt.PyJWTError as exc:
            raise MalformedTokenError(f"not a valid JWT: {exc}") from None
        payload = decoded["payload"]
        assert isinstance(payload, bytes)
        return payload

    def _algorithm_reason(self, token: str) -> str:
        try:
            alg = self._jws.get_unverified_header(token).get("alg")
        except jwt.PyJWTError:
            alg = None
        shown = repr(alg)[:40] if alg is not None else "none given"
        allowed = ", ".join(self.key.algorithms)
        return f"token algorithm {shown} is not accepted with the configured {self.key.kind} key ({allowed})"

    def _check_times(self, claims: Mapping[str, Any]) -> float | None:
        now_s = self._clock.time_ms() / 1000
        expires_at = _numeric_date(claims, "exp")
        not_before = _numeric_date(claims, "nbf")
        skew = self._skew_s
        context = f"(now {_iso(now_s)}, allowed clock skew {skew:g} s)"
        if expires_at is not None and now_s >= expires_at + skew:
            raise TokenExpiredError(f"token expired at {_iso(expires_at)} {context}")
        if not_before is not None and now_s < not_before - skew:
            raise TokenNotYetValidError(f"token not valid before {_iso(not_before)} {context}")
        return expires_at

    def _check_audience(self, claims: Mapping[str, Any]) -> None:
        if self._audience_claim is None:
            return
        value = claims.get(self._audience_claim)
        audiences = [value] if isinstance(value, str) else value if isinstance(value, list) else None
        if audiences is None:
            raise InvalidClaimsError(f"token has no '{self._audience_claim}' audience claim")
        if self._audience not in audiences:
            raise InvalidClaimsError(f"token audience does not include {self._audience!r}")

    def _role(self, claims: Mapping[str, Any]) -> str:
        value = claims.get(self._role_claim)
        if isinstance(value, list) and value and isinstance(value[0], str):
            value = value[0]  # Pulsar takes the first entry of a list claim
        if not isinstance(value, str) or not value:
            raise InvalidClaimsError(f"token has no '{self._role_claim}' claim naming a role")
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:  # JSON can carry lone surrogates ("\ud800")
            raise InvalidClaimsError(f"the role in '{self._role_claim}' is not valid Unicode") from None
        if size > ROLE_BYTES_MAX:
            raise InvalidClaimsError(f"the role in '{self._role_claim}' exceeds {ROLE_BYTES_MAX} bytes")
        return value


def create_token(
    key: TokenKey,
    subject: str,
    *,
    expires_at_s: int | None = None,
    claims: Mapping[str, Any] | None = None,
    algorithm: str | None = None,
) -> str:
    """A signed token for role ``subject`` (``pulsar tokens create``); ``expires_at_s`` sets ``exp``."""
    if not subject:
        raise KeyConfigError("a token needs a subject (role)")
    alg = algorithm or key.signing_algorithm
    if key.kind == "public":
        raise KeyConfigError("a public key cannot sign tokens")
    if alg not in key.algorithms:
        raise KeyConfigError(f"{alg} cannot sign with this {key.kind} key ({', '.join(key.algorithms)})")
    payload: dict[str, Any] = dict(claims or {})
    payload["sub"] = subject
    if expires_at_s is not None:
        payload["exp"] = int(expires_at_s)
    return jwt.encode(payload, key.key, algorithm=alg)


def parse_relative_time_s(text: str) -> int:
    """``30s``, ``10m``, ``1h``, ``3d``, ``2w``, ``10y`` (or bare seconds) -> seconds, as Pulsar's
    ``RelativeTimeUtil`` reads ``--expiry-time``."""
    match = _RELATIVE_TIME.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"invalid relative time {text!r}: use a number with s, m, h, d, w or y")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]

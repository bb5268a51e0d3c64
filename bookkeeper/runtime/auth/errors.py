"""Errors of authentication and authorization, by fault, each carrying the HTTP status it becomes.

* :class:`AuthenticationError` (401): who the caller is could not be established - no credentials, or a
  token that is malformed, wrongly signed, signed with a refused algorithm, expired or not yet valid. The
  ``reason`` is written for the caller (it never contains key material) and ends up in Pulsar's
  ``{"reason": ...}`` body, in the refusal of a WebSocket upgrade or in a bookie's EUA answer.
* :class:`AuthorizationError` (403): the caller is known but its role may not do this.
* :class:`KeyConfigError`: a key or token *setting* cannot be used (missing file, not base64, a weak HMAC
  key, a public key where a secret was expected). It is a configuration fault found at startup, never an
  answer to a request.
"""

from __future__ import annotations


class AuthenticationError(Exception):
    """The caller could not be authenticated (HTTP 401, WebSocket upgrade refused with 401)."""

    http_status = 401

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MissingCredentialsError(AuthenticationError):
    """No token was presented (no ``Authorization: Bearer`` header, no ``token`` query parameter)."""


class TokenError(AuthenticationError):
    """A token was presented and refused."""


class MalformedTokenError(TokenError):
    """Not a compact JWS ``header.payload.signature`` with JSON header and claims."""


class TokenAlgorithmError(TokenError):
    """The token names an algorithm the configured key does not allow (``none``, or HS256 against a public
    key: the algorithm-confusion attack)."""


class InvalidSignatureError(TokenError):
    """The signature does not verify with the configured key."""


class TokenExpiredError(TokenError):
    """``exp`` is in the past (beyond the allowed clock skew)."""


class TokenNotYetValidError(TokenError):
    """``nbf`` is in the future (beyond the allowed clock skew)."""


class InvalidClaimsError(TokenError):
    """The claims are unusable: no role claim, a non-numeric ``exp``, a missing audience..."""


class AuthorizationError(Exception):
    """The authenticated role may not perform this operation (HTTP 403)."""

    http_status = 403

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class KeyConfigError(ValueError):
    """A key or token setting cannot be used; raised at startup, naming the setting."""

"""Fuzzing the token parser: whatever text arrives, the verifier answers a role or a typed TokenError.

Four generators: arbitrary text; arbitrary bytes; single and multiple mutations of a valid token (which must
never yield other claims than the original's); and well-formed JWS structures with random headers, claims
and signatures - including random JSON claims correctly signed, which exercises the claim checks.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest
from fixtures.auth import FakeClock, TokenKeys
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.bookkeeper.runtime.auth.errors import TokenError
from magnetar.bookkeeper.runtime.auth.tokens import TokenVerifier, VerifiedToken

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=."
HS256_HEADER = b'{"alg":"HS256"}'

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def outcome(check: TokenVerifier, token: str) -> VerifiedToken | TokenError:
    """The verifier's answer; any exception other than a TokenError fails the test."""
    try:
        return check.verify(token)
    except TokenError as exc:
        return exc


@pytest.fixture(scope="module")
def checks(token_keys: TokenKeys) -> dict[str, TokenVerifier]:
    return {
        kind: TokenVerifier(token_keys.verifier_key(kind), clock=FakeClock())
        for kind in ("secret", "rsa", "ec")
    }


@FUZZ
@given(text=st.text(max_size=300))
def test_arbitrary_text(checks: dict[str, TokenVerifier], text: str) -> None:
    for check in checks.values():
        result = outcome(check, text)
        assert isinstance(result, TokenError)
        assert result.reason


@FUZZ
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_as_text(checks: dict[str, TokenVerifier], data: bytes) -> None:
    for check in checks.values():
        assert isinstance(outcome(check, data.decode("latin-1")), TokenError)


@FUZZ
@given(
    kind=st.sampled_from(["secret", "rsa", "ec"]),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["replace", "insert", "delete"]),
            st.integers(0, 10_000),
            st.sampled_from(ALPHABET),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_mutated_tokens_never_yield_other_claims(
    token_keys: TokenKeys, checks: dict[str, TokenVerifier], kind: str, edits: list[tuple[str, int, str]]
) -> None:
    original = token_keys.token("alice", kind=kind, expires_in_s=3600)
    token = list(original)
    for operation, position, char in edits:
        index = position % (len(token) + 1)
        if operation == "insert":
            token.insert(index, char)
        elif token and index < len(token):
            if operation == "replace":
                token[index] = char
            else:
                del token[index]
    result = outcome(checks[kind], "".join(token))
    if isinstance(result, VerifiedToken):
        # Only re-encodings of the same signed bytes (e.g. '=' padding on the signature) may still verify.
        assert result.role == "alice"
        assert dict(result.claims) == dict(checks[kind].verify(original).claims)


@FUZZ
@given(
    alg=st.sampled_from(["none", "HS256", "HS384", "RS256", "ES256", "PS512", "EdDSA", ""])
    | st.integers()
    | st.lists(st.text(max_size=3)),
    extra_header=st.dictionaries(
        st.sampled_from(["typ", "kid", "crit", "b64", "jku"]), json_values, max_size=3
    ),
    claims=json_values,
    signature=st.binary(max_size=80),
)
def test_structured_forgeries(
    checks: dict[str, TokenVerifier], alg: Any, extra_header: dict[str, Any], claims: Any, signature: bytes
) -> None:
    header = {**extra_header, "alg": alg}
    token = ".".join(
        (b64url(json.dumps(header).encode()), b64url(json.dumps(claims).encode()), b64url(signature))
    )
    for check in checks.values():
        assert isinstance(outcome(check, token), TokenError)


@FUZZ
@given(claims=json_values | st.dictionaries(st.sampled_from(["sub", "exp", "nbf", "aud", "x"]), json_values))
def test_correctly_signed_random_claims(token_keys: TokenKeys, claims: Any) -> None:
    check = TokenVerifier(token_keys.verifier_key(), clock=FakeClock(), audience_claim="aud", audience="m")
    payload = json.dumps(claims).encode()
    signing_input = f"{b64url(HS256_HEADER)}.{b64url(payload)}"
    signature = hmac.new(token_keys.secret, signing_input.encode(), hashlib.sha256).digest()
    result = outcome(check, f"{signing_input}.{b64url(signature)}")
    if isinstance(result, VerifiedToken):
        assert isinstance(claims, dict)
        assert result.role

"""Token creation and verification: algorithms, claims, time, and every refusal with its typed error."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from fixtures.auth import NOW_MS, FakeClock, TokenKeys

from magnetar.bookkeeper.runtime.auth.errors import (
    InvalidClaimsError,
    InvalidSignatureError,
    KeyConfigError,
    MalformedTokenError,
    TokenAlgorithmError,
    TokenError,
    TokenExpiredError,
    TokenNotYetValidError,
)
from magnetar.bookkeeper.runtime.auth.keys import create_key_pair, private_key, public_key, secret_key
from magnetar.bookkeeper.runtime.auth.tokens import (
    TokenVerifier,
    create_token,
    parse_relative_time_s,
)

NOW_S = NOW_MS // 1000
ADMIN = b'{"sub":"admin"}'
HS256_HEADER = b'{"alg":"HS256"}'


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs256_token(key: bytes, header: dict[str, Any], claims: Any) -> str:
    """A token signed by hand (independent of PyJWT): jjwt writes headers like ``{"alg":"HS256"}``."""
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


def verifier(token_keys: TokenKeys, kind: str = "secret", **kwargs: Any) -> TokenVerifier:
    kwargs.setdefault("clock", FakeClock())
    return TokenVerifier(token_keys.verifier_key(kind), **kwargs)


@pytest.mark.parametrize("kind", ["secret", "rsa", "ec"])
def test_round_trip(token_keys: TokenKeys, kind: str) -> None:
    token = token_keys.token("alice", kind=kind, expires_in_s=60)
    verified = verifier(token_keys, kind).verify(token)
    assert verified.role == "alice"
    assert verified.expires_at_ms == (NOW_S + 60) * 1000
    assert verified.claims["sub"] == "alice"


def test_a_token_without_exp_never_expires(token_keys: TokenKeys) -> None:
    clock = FakeClock()
    check = verifier(token_keys, clock=clock)
    token = token_keys.token("alice")
    clock.advance(10 * 365 * 86400)
    assert check.verify(token).expires_at_ms is None


def test_jjwt_style_token_verifies(token_keys: TokenKeys) -> None:
    token = hs256_token(token_keys.secret, {"alg": "HS256"}, {"sub": "Joe"})
    assert verifier(token_keys).verify(token).role == "Joe"


def test_pss_and_larger_hmac_algorithms(token_keys: TokenKeys) -> None:
    token = create_token(private_key(token_keys.rsa_private), "alice", algorithm="PS256")
    assert verifier(token_keys, "rsa").verify(token).role == "alice"
    big = secret_key(bytes(range(64)))
    token = create_token(big, "bob")  # HS512: the strongest the key allows
    assert json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))["alg"] == "HS512"
    assert TokenVerifier(big, clock=FakeClock()).verify(token).role == "bob"


def test_expiry_is_checked_against_the_clock_with_skew(token_keys: TokenKeys) -> None:
    clock = FakeClock()
    token = token_keys.token("alice", expires_in_s=10)
    strict = verifier(token_keys, clock=clock)
    lenient = verifier(token_keys, clock=clock, allowed_clock_skew_s=5)
    clock.advance(9.999)
    assert strict.verify(token).role == "alice"
    clock.advance(0.001)
    with pytest.raises(TokenExpiredError, match=r"expired at 2023-11-14T22:13:30Z") as caught:
        strict.verify(token)
    assert "clock skew 0 s" in caught.value.reason
    assert lenient.verify(token).role == "alice"
    clock.advance(5)
    with pytest.raises(TokenExpiredError):
        lenient.verify(token)


def test_not_before(token_keys: TokenKeys) -> None:
    clock = FakeClock()
    token = create_token(token_keys.signer(), "alice", claims={"nbf": NOW_S + 30})
    with pytest.raises(TokenNotYetValidError, match="not valid before"):
        verifier(token_keys, clock=clock).verify(token)
    assert verifier(token_keys, clock=clock, allowed_clock_skew_s=30).verify(token).role == "alice"
    clock.advance(30)
    assert verifier(token_keys, clock=clock).verify(token).role == "alice"


def test_role_claims(token_keys: TokenKeys) -> None:
    signer = token_keys.signer()
    listed = create_token(signer, "ignored", claims={"roles": ["admin", "other"]})
    assert verifier(token_keys, role_claim="roles").verify(listed).role == "admin"
    for claims in ({"sub": ""}, {"sub": 7}, {"sub": [7]}, {"sub": []}, {}):
        token = hs256_token(token_keys.secret, {"alg": "HS256"}, claims)
        with pytest.raises(InvalidClaimsError, match="'sub'"):
            verifier(token_keys).verify(token)
    long_role = create_token(signer, "r" * 1025)
    with pytest.raises(InvalidClaimsError, match="exceeds"):
        verifier(token_keys).verify(long_role)


def test_audience(token_keys: TokenKeys) -> None:
    check = verifier(token_keys, audience_claim="aud", audience="magnetar")
    signer = token_keys.signer()
    assert check.verify(create_token(signer, "a", claims={"aud": "magnetar"})).role == "a"
    assert check.verify(create_token(signer, "a", claims={"aud": ["x", "magnetar"]})).role == "a"
    with pytest.raises(InvalidClaimsError, match="does not include"):
        check.verify(create_token(signer, "a", claims={"aud": "pulsar"}))
    with pytest.raises(InvalidClaimsError, match="no 'aud'"):
        check.verify(create_token(signer, "a"))
    with pytest.raises(KeyConfigError):
        TokenVerifier(token_keys.verifier_key(), clock=FakeClock(), audience_claim="aud")


def test_alg_none_is_refused(token_keys: TokenKeys) -> None:
    for alg in ("none", "None", "NONE", ""):
        token = f"{b64url(json.dumps({'alg': alg}).encode())}.{b64url(ADMIN)}."
        with pytest.raises(TokenAlgorithmError):
            verifier(token_keys).verify(token)
    no_alg = f"{b64url(b'{}')}.{b64url(ADMIN)}.c2ln"
    with pytest.raises(TokenAlgorithmError, match="none given"):
        verifier(token_keys).verify(no_alg)


@pytest.mark.parametrize("encoding", ["der", "pem"])
def test_algorithm_confusion_is_refused(token_keys: TokenKeys, encoding: str) -> None:
    """An attacker who knows the public key signs an HS256 token with the key's bytes as HMAC secret."""
    public = serialization.load_der_public_key(token_keys.rsa_public)
    key_bytes = public.public_bytes(
        serialization.Encoding.PEM if encoding == "pem" else serialization.Encoding.DER,
        serialization.PublicFormat.SubjectPublicKeyInfo,
    )
    forged = hs256_token(key_bytes, {"alg": "HS256", "typ": "JWT"}, {"sub": "admin"})
    with pytest.raises(TokenAlgorithmError, match="'HS256' is not accepted with the configured public key"):
        verifier(token_keys, "rsa").verify(forged)


def test_cross_family_and_too_strong_algorithms_are_refused(token_keys: TokenKeys) -> None:
    rsa_token = token_keys.token("alice", kind="rsa")
    with pytest.raises(TokenAlgorithmError):
        verifier(token_keys, "ec").verify(rsa_token)
    with pytest.raises(TokenAlgorithmError):
        verifier(token_keys, "secret").verify(rsa_token)
    hs512 = create_token(secret_key(token_keys.secret + bytes(32)), "alice")
    with pytest.raises(TokenAlgorithmError, match="HS512"):
        verifier(token_keys).verify(hs512)  # a 32-byte key verifies HS256 only


def test_wrong_key_and_tampering_fail_the_signature(token_keys: TokenKeys) -> None:
    other = secret_key(bytes(32))
    with pytest.raises(InvalidSignatureError):
        verifier(token_keys).verify(create_token(other, "alice"))
    _, other_public = create_key_pair("ES256")
    with pytest.raises(InvalidSignatureError):
        TokenVerifier(public_key(other_public), clock=FakeClock()).verify(token_keys.token("a", kind="ec"))
    header, _, signature = token_keys.token("alice").split(".")
    forged = f"{header}.{b64url(ADMIN)}.{signature}"
    with pytest.raises(InvalidSignatureError):
        verifier(token_keys).verify(forged)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "abc",
        "a.b",
        "a.b.c.d",
        "é.b.c",
        "a b.c.d",
        "eyJhbGciOiJIUzI1NiJ9.!!!.c2ln",
        "x" * 9000,
    ],
)
def test_malformed_tokens(token_keys: TokenKeys, token: str) -> None:
    with pytest.raises(MalformedTokenError):
        verifier(token_keys).verify(token)


@pytest.mark.parametrize(
    ("claims_json", "error"),
    [
        (b"not json", MalformedTokenError),
        (b"[1, 2]", MalformedTokenError),
        (b'{"sub": "a", "exp": "tomorrow"}', InvalidClaimsError),
        (b'{"sub": "a", "exp": true}', InvalidClaimsError),
        (b'{"sub": "a", "nbf": [1]}', InvalidClaimsError),
        (b'{"sub": "a", "exp": 1e999}', InvalidClaimsError),
        (b'{"sub": "a", "exp": 1' + b"0" * 400 + b"}", InvalidClaimsError),
        (b'{"sub": "\\ud800"}', InvalidClaimsError),
    ],
)
def test_signed_but_unusable_claims(token_keys: TokenKeys, claims_json: bytes, error: type) -> None:
    signing_input = f"{b64url(HS256_HEADER)}.{b64url(claims_json)}"
    signature = hmac.new(token_keys.secret, signing_input.encode(), hashlib.sha256).digest()
    with pytest.raises(error):
        verifier(token_keys).verify(f"{signing_input}.{b64url(signature)}")


def test_refusals_are_token_errors_with_reasons(token_keys: TokenKeys) -> None:
    with pytest.raises(TokenError) as caught:
        verifier(token_keys).verify("a.b.c")
    assert caught.value.http_status == 401
    assert caught.value.reason


def test_keys_that_cannot_do_the_job(token_keys: TokenKeys) -> None:
    with pytest.raises(KeyConfigError):
        TokenVerifier(token_keys.signer("rsa"), clock=FakeClock())
    with pytest.raises(KeyConfigError, match="cannot sign"):
        create_token(token_keys.verifier_key("rsa"), "alice")
    with pytest.raises(KeyConfigError, match="subject"):
        create_token(token_keys.signer(), "")
    with pytest.raises(KeyConfigError, match="cannot sign"):
        create_token(token_keys.signer(), "alice", algorithm="RS256")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30),
        ("30s", 30),
        ("10m", 600),
        ("1h", 3600),
        ("3d", 259200),
        ("2w", 1209600),
        ("10y", 315360000),
    ],
)
def test_relative_time(text: str, seconds: int) -> None:
    assert parse_relative_time_s(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "-1h", "1.5h", "1x", "1 h h"])
def test_bad_relative_time(text: str) -> None:
    with pytest.raises(ValueError, match="relative time"):
        parse_relative_time_s(text)

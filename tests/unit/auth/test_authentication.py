"""AuthenticationService: from a request head (header or WebSocket query token) to a role or a 401 reason."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from fixtures.auth import FakeClock, TokenKeys

from magnetar.bookkeeper.runtime.auth.authentication import (
    ANONYMOUS,
    AuthenticationService,
    AuthenticationSettings,
    Principal,
    http_reason,
)
from magnetar.bookkeeper.runtime.auth.errors import (
    AuthenticationError,
    KeyConfigError,
    MalformedTokenError,
    MissingCredentialsError,
    TokenExpiredError,
)
from magnetar.bookkeeper.runtime.http import QueryParams, RequestHead


def head(headers: dict[str, str] | None = None, query: str = "") -> RequestHead:
    return RequestHead(
        method="GET",
        target="/x",
        path="/x",
        query=QueryParams.parse(query),
        headers=tuple((name.lower(), value) for name, value in (headers or {}).items()),
        path_params={},
        client=("127.0.0.1", 5000),
    )


def service(token_keys: TokenKeys, clock: FakeClock | None = None, **overrides: Any) -> AuthenticationService:
    values: dict[str, Any] = {"authentication_enabled": True, "token_secret_key": token_keys.secret_setting}
    values.update(overrides)
    return AuthenticationService(AuthenticationSettings(**values), clock or FakeClock())


def test_disabled_means_anonymous_and_unchecked() -> None:
    auth = AuthenticationService(AuthenticationSettings())
    assert not auth.enabled
    assert auth.authenticate(head({"Authorization": "Bearer garbage"})) is ANONYMOUS
    assert auth.authenticate_token("garbage") is ANONYMOUS
    assert not ANONYMOUS.authenticated


def test_bearer_header(token_keys: TokenKeys) -> None:
    auth = service(token_keys)
    token = token_keys.token("alice", expires_in_s=60)
    principal = auth.authenticate(head({"Authorization": f"Bearer {token}"}))
    assert principal == Principal("alice", principal.expires_at_ms)
    assert principal.authenticated
    assert principal.expires_at_ms is not None
    assert auth.authenticate(head({"Authorization": f"bearer   {token} "})).role == "alice"
    assert auth.successes == 2


def test_public_key_settings_verify_key_pair_tokens(token_keys: TokenKeys) -> None:
    auth = service(token_keys, token_secret_key=None, token_public_key=token_keys.ec_public_setting)
    token = token_keys.token("bob", kind="ec")
    assert auth.authenticate(head({"Authorization": f"Bearer {token}"})).role == "bob"


def test_query_token_only_where_allowed_and_the_header_wins(token_keys: TokenKeys) -> None:
    auth = service(token_keys)
    alice, bob = token_keys.token("alice"), token_keys.token("bob")
    with pytest.raises(MissingCredentialsError, match=r"'Authorization: Bearer <token>' header$"):
        auth.authenticate(head(query=f"token={alice}"))
    assert auth.authenticate(head(query=f"token={alice}"), allow_query_token=True).role == "alice"
    both = head({"Authorization": f"Bearer {bob}"}, query=f"token={alice}")
    assert auth.authenticate(both, allow_query_token=True).role == "bob"


def test_refusals_are_counted_by_cause(token_keys: TokenKeys) -> None:
    clock = FakeClock()
    auth = service(token_keys, clock)
    with pytest.raises(MissingCredentialsError, match="or a 'token' query parameter"):
        auth.authenticate(head(), allow_query_token=True)
    with pytest.raises(MalformedTokenError, match="Bearer"):
        auth.authenticate(head({"Authorization": "Basic YWxpY2U6c2VjcmV0"}))
    with pytest.raises(MalformedTokenError, match="blank"):
        auth.authenticate(head({"Authorization": "Bearer  "}))
    expiring = token_keys.token("alice", expires_in_s=1)
    clock.advance(2)
    with pytest.raises(TokenExpiredError) as caught:
        auth.authenticate(head({"Authorization": f"Bearer {expiring}"}))
    assert http_reason(caught.value).startswith("Authentication required: token expired at ")
    assert auth.failures == {"MissingCredentialsError": 1, "MalformedTokenError": 2, "TokenExpiredError": 1}


def test_anonymous_user_role(token_keys: TokenKeys) -> None:
    auth = service(token_keys, anonymous_user_role="guest")
    assert auth.authenticate(head()) == Principal("guest")
    with pytest.raises(AuthenticationError):  # a bad token is still refused
        auth.authenticate(head({"Authorization": "Bearer a.b.c"}))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"authentication_enabled": True}, "needs token_secret_key"),
        ({"token_secret_key": "a", "token_public_key": "b"}, "not both"),
        ({"token_audience_claim": "aud"}, "go together"),
        ({"token_allowed_clock_skew_seconds": -1}, "greater than or equal"),
    ],
)
def test_settings_validation(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=message):
        AuthenticationSettings(**overrides)


def test_blank_settings_are_unset_and_bad_keys_fail_at_startup(tmp_path: Any) -> None:
    assert AuthenticationSettings(token_secret_key="  ").token_secret_key is None
    settings = AuthenticationSettings(authentication_enabled=True, token_secret_key="file:///no/such/key")
    with pytest.raises(KeyConfigError, match="cannot read"):
        AuthenticationService(settings)

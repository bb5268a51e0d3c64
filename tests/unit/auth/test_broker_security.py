"""BrokerSecurity: the 401/403/429 answers HTTP routes and WebSocket upgrades get, and the publish limits."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fixtures.auth import FakeClock, TokenKeys

from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.runtime.auth.authentication import AuthenticationService, AuthenticationSettings
from magnetar.bookkeeper.runtime.http import HttpError, QueryParams, RequestHead
from magnetar.broker.core.errors import NotAuthenticatedError, NotAuthorizedError, TooManyTopicsError
from magnetar.broker.policies.store import Policies, PolicyStore, TenantInfo
from magnetar.broker.protocols.http_status import http_status
from magnetar.broker.security.authorization import AuthAction, AuthorizationService, AuthorizationSettings
from magnetar.broker.security.broker_security import BrokerSecurity, SecurityLimits
from magnetar.broker.wire.topic_name import NamespaceName, parse_topic_name

TOPIC = parse_topic_name("persistent://acme/ns/orders")


def head(token: str | None = None, query: str = "", client: str = "10.0.0.1") -> RequestHead:
    headers = (("authorization", f"Bearer {token}"),) if token else ()
    return RequestHead("GET", "/x", "/x", QueryParams.parse(query), headers, {}, (client, 4000))


@pytest.fixture
async def policies() -> AsyncIterator[PolicyStore]:
    metadata = MemoryMetadataStore(f"security-{uuid.uuid4().hex}")
    store = PolicyStore(metadata)
    await store.create_tenant("acme", TenantInfo(adminRoles=["acme-admin"]))
    await store.create_namespace("acme/ns", Policies())
    yield store
    await metadata.aclose()


def security(token_keys: TokenKeys, policies: PolicyStore, clock: FakeClock, **limits: Any) -> BrokerSecurity:
    authentication = AuthenticationService(
        AuthenticationSettings(authentication_enabled=True, token_secret_key=token_keys.secret_setting), clock
    )
    authorization = AuthorizationService(
        policies, AuthorizationSettings(super_user_roles=("root",)), authentication_enabled=True
    )
    return BrokerSecurity(authentication, authorization, SecurityLimits(**limits), clock)


async def test_http_authentication_answers_401_with_a_reason(
    token_keys: TokenKeys, policies: PolicyStore
) -> None:
    guard = security(token_keys, policies, FakeClock())
    assert guard.authenticate_http(head(token_keys.token("alice"))).role == "alice"
    for bad in (head(), head("a.b.c"), head(token_keys.token("alice", expires_in_s=-1))):
        with pytest.raises(HttpError) as caught:
            guard.authenticate_http(bad)
        assert caught.value.status == 401
        assert caught.value.reason.startswith("Authentication required: ")
        assert ("www-authenticate", 'Bearer realm="magnetar"') in caught.value.headers
    with pytest.raises(HttpError, match="401"):  # the query parameter is for WebSocket upgrades only
        guard.authenticate_http(head(query=f"token={token_keys.token('alice')}"))


async def test_upgrade_authentication_and_authorization(token_keys: TokenKeys, policies: PolicyStore) -> None:
    guard = security(token_keys, policies, FakeClock())
    principal = guard.authenticate_upgrade(head(query=f"token={token_keys.token('alice')}"))
    assert principal.role == "alice"
    with pytest.raises(NotAuthenticatedError) as refused:
        guard.authenticate_upgrade(head(query="token=garbage"))
    assert http_status(refused.value) == 401
    assert str(refused.value).startswith("Failed to authenticate: ")
    with pytest.raises(NotAuthorizedError) as forbidden:
        await guard.authorize_producer(principal, TOPIC)
    assert http_status(forbidden.value) == 403
    with pytest.raises(NotAuthorizedError):
        await guard.authorize_lookup(principal, TOPIC)  # a topic's schema: produce or consume needed
    assert "'alice' is not authorized to produce" in str(forbidden.value)
    await guard.authorization.grant_namespace_permission(
        NamespaceName("acme", "ns"), "alice", [AuthAction.CONSUME]
    )
    await guard.authorize_consumer(principal, TOPIC, "sub")
    await guard.authorize_reader(principal, TOPIC)
    await guard.authorize_lookup(principal, TOPIC)
    with pytest.raises(NotAuthorizedError, match="Not authorized"):
        await guard.authorize_producer(principal, TOPIC)


async def test_admin_rate_limit_per_role(token_keys: TokenKeys, policies: PolicyStore) -> None:
    clock = FakeClock()
    guard = security(token_keys, policies, clock, admin_requests_per_role_per_s=1, admin_requests_burst=2)
    noisy = guard.authenticate_http(head(token_keys.token("noisy")))
    quiet = guard.authenticate_http(head(token_keys.token("quiet")))
    guard.check_admin_rate(noisy, head())
    guard.check_admin_rate(noisy, head())
    with pytest.raises(HttpError) as caught:
        guard.check_admin_rate(noisy, head())
    assert caught.value.status == 429
    assert "admin_requests_per_role_per_s" in caught.value.reason
    assert ("retry-after", "1") in caught.value.headers
    guard.check_admin_rate(quiet, head())  # another role is not affected
    clock.advance(1)
    guard.check_admin_rate(noisy, head())
    per_connection = security(
        token_keys, policies, clock, admin_requests_per_connection_per_s=1, admin_requests_burst=1
    )
    per_connection.check_admin_rate(quiet, head(client="10.0.0.9"))
    with pytest.raises(HttpError, match="admin_requests_per_connection_per_s"):
        per_connection.check_admin_rate(quiet, head(client="10.0.0.9"))
    per_connection.check_admin_rate(quiet, head(client="10.0.0.8"))  # another connection
    unlimited = security(token_keys, policies, clock)
    for _ in range(1000):
        unlimited.check_admin_rate(noisy, head())


async def test_publish_limits_per_connection_and_role(token_keys: TokenKeys, policies: PolicyStore) -> None:
    clock = FakeClock()
    guard = security(
        token_keys,
        policies,
        clock,
        publish_messages_per_connection_per_s=10,
        publish_messages_per_role_per_s=15,
        publish_messages_burst=10,
    )
    alice = guard.authenticate_http(head(token_keys.token("alice")))
    first, second = guard.publish_limiter(alice, head()), guard.publish_limiter(alice, head())
    assert all(first.try_publish() is None for _ in range(10))
    reason = first.try_publish()
    assert reason is not None
    assert "publish_messages_per_connection_per_s=10" in reason
    # The role's shared bucket (burst 10) is already empty: the second session of alice is refused too.
    reason = second.try_publish()
    assert reason is not None
    assert "publish_messages_per_role_per_s=15 exceeded for alice" in reason
    bob = guard.publish_limiter(guard.authenticate_http(head(token_keys.token("bob"))), head())
    assert bob.try_publish() is None
    clock.advance(1)
    assert second.try_publish() is None


async def test_topic_count_limit(token_keys: TokenKeys, policies: PolicyStore) -> None:
    guard = security(token_keys, policies, FakeClock(), topics_per_namespace_max=2)
    guard.check_topic_count("acme/ns", 1)
    with pytest.raises(
        TooManyTopicsError, match="Exceed maximum number of topics in namespace acme/ns"
    ) as caught:
        guard.check_topic_count("acme/ns", 2)
    assert http_status(caught.value) == 412  # the HTTP answer of its kind
    security(token_keys, policies, FakeClock()).check_topic_count("acme/ns", 10**6)  # 0: no limit

"""AuthorizationService over a real PolicyStore (memory metadata): superusers, tenant admins, namespace
and topic grants, subscription roles, wildcards, tenant isolation, the permission maps of the admin API."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from magnetar.bookkeeper.metadata.memory import MemoryMetadataStore
from magnetar.bookkeeper.runtime.auth.errors import AuthorizationError
from magnetar.broker.policies.store import NotFound, Policies, PolicyStore, PreconditionFailed, TenantInfo
from magnetar.broker.security.authorization import (
    AuthAction,
    AuthorizationService,
    AuthorizationSettings,
    NamespaceOperation,
    TopicOperation,
    parse_actions,
)
from magnetar.broker.wire.topic_name import NamespaceName, TopicName, parse_topic_name

PRODUCE, CONSUME = AuthAction.PRODUCE, AuthAction.CONSUME
A_NS = NamespaceName("tenant-a", "ns")
B_NS = NamespaceName("tenant-b", "ns")
A_TOPIC = parse_topic_name("persistent://tenant-a/ns/orders")
B_TOPIC = parse_topic_name("persistent://tenant-b/ns/orders")


@pytest.fixture
async def store() -> AsyncIterator[PolicyStore]:
    metadata = MemoryMetadataStore(f"authz-{uuid.uuid4().hex}")
    policies = PolicyStore(metadata)
    await policies.create_tenant(
        "tenant-a", TenantInfo(adminRoles=["admin-a"], allowedClusters=["standalone"])
    )
    await policies.create_tenant(
        "tenant-b", TenantInfo(adminRoles=["admin-b"], allowedClusters=["standalone"])
    )
    await policies.create_namespace(str(A_NS), Policies())
    await policies.create_namespace(str(B_NS), Policies())
    yield policies
    await metadata.aclose()


def service(store: PolicyStore, **settings: object) -> AuthorizationService:
    values: dict[str, object] = {"super_user_roles": "root, ops"}
    values.update(settings)
    return AuthorizationService(store, AuthorizationSettings(**values), authentication_enabled=True)


async def test_disabled_authorization_allows_everything(store: PolicyStore) -> None:
    for authz in (
        AuthorizationService(store, AuthorizationSettings(), authentication_enabled=False),
        AuthorizationService(
            store, AuthorizationSettings(authorization_enabled=False), authentication_enabled=True
        ),
    ):
        assert not authz.enabled
        assert await authz.can_produce(A_TOPIC, None)
        await authz.check_topic_operation(A_TOPIC, "anyone", TopicOperation.TERMINATE)
        authz.check_superuser(None)
    # Authorization cannot run without authentication (there is no role to check).
    assert not AuthorizationSettings(authorization_enabled=True).active(authentication_enabled=False)
    assert AuthorizationSettings().active(authentication_enabled=True)


async def test_superuser_and_tenant_admin(store: PolicyStore) -> None:
    authz = service(store)
    assert authz.is_superuser("ops")
    assert not authz.is_superuser("admin-a")
    assert await authz.is_tenant_admin("tenant-b", "root")
    assert await authz.is_tenant_admin("tenant-a", "admin-a")
    assert not await authz.is_tenant_admin("tenant-b", "admin-a")
    assert not await authz.is_tenant_admin("missing", "admin-a")
    for operation in TopicOperation:
        assert await authz.allow_topic_operation(A_TOPIC, "admin-a", operation)
        assert not await authz.allow_topic_operation(B_TOPIC, "admin-a", operation)
    with pytest.raises(AuthorizationError, match="requires super-user access") as caught:
        authz.check_superuser("admin-a")
    assert caught.value.http_status == 403
    with pytest.raises(AuthorizationError, match="administrate resources on this tenant"):
        await authz.check_tenant_admin("tenant-b", "admin-a")


async def test_namespace_grants(store: PolicyStore) -> None:
    authz = service(store)
    await authz.grant_namespace_permission(A_NS, "producer", [PRODUCE])
    await authz.grant_namespace_permission(A_NS, "consumer", [CONSUME])
    assert await authz.namespace_permissions(A_NS) == {"consumer": ["consume"], "producer": ["produce"]}
    assert await authz.can_produce(A_TOPIC, "producer")
    assert not await authz.can_consume(A_TOPIC, "producer")
    assert await authz.can_consume(A_TOPIC, "consumer", "sub")
    assert not await authz.can_produce(A_TOPIC, "consumer")
    for role in ("producer", "consumer"):
        assert await authz.can_lookup(A_TOPIC, role)
        assert await authz.allow_topic_operation(A_TOPIC, role, TopicOperation.GET_STATS)
        assert await authz.allow_namespace_operation(A_NS, role, NamespaceOperation.GET_TOPICS)
        assert not await authz.allow_topic_operation(A_TOPIC, role, TopicOperation.TERMINATE)
        assert not await authz.allow_namespace_operation(A_NS, role, NamespaceOperation.SET_POLICIES)
    assert await authz.allow_topic_operation(A_TOPIC, "consumer", TopicOperation.RESET_CURSOR, "sub")
    assert not await authz.allow_topic_operation(A_TOPIC, "producer", TopicOperation.SKIP, "sub")
    assert not await authz.can_lookup(A_TOPIC, "stranger")
    await authz.revoke_namespace_permission(A_NS, "producer")
    assert not await authz.can_produce(A_TOPIC, "producer")
    await authz.revoke_namespace_permission(A_NS, "never-granted")  # as Pulsar: nothing to do, no error
    with pytest.raises(AuthorizationError, match="'producer' is not authorized to produce on topic"):
        await authz.check_topic_operation(A_TOPIC, "producer", TopicOperation.PRODUCE)


async def test_tenant_isolation(store: PolicyStore) -> None:
    authz = service(store)
    await authz.grant_namespace_permission(A_NS, "role-a", [PRODUCE, CONSUME])
    for operation in TopicOperation:
        assert not await authz.allow_topic_operation(B_TOPIC, "role-a", operation, "s")
    for operation in NamespaceOperation:
        assert not await authz.allow_namespace_operation(B_NS, "role-a", operation)
    assert await authz.allow_topic_operation(A_TOPIC, "role-a", TopicOperation.GET_STATS)


async def test_topic_grants_cover_partitions_and_merge_with_the_namespace(store: PolicyStore) -> None:
    authz = service(store)
    other = TopicName.of("tenant-a", "ns", "other")
    await store.create_partitioned(str(A_NS), A_TOPIC.local_name, 4)
    await authz.grant_namespace_permission(A_NS, "reader", [CONSUME])
    await authz.grant_topic_permission(A_TOPIC, "reader", [PRODUCE])
    await authz.grant_topic_permission(A_TOPIC, "writer", [PRODUCE])
    assert await authz.can_produce(A_TOPIC, "writer")
    assert await authz.can_produce(A_TOPIC.partition(3), "writer")
    assert not await authz.can_produce(A_TOPIC.partition(4), "writer")  # beyond the count: no such topic
    assert await authz.topic_permissions(A_TOPIC.partition(4)) == {"reader": ["consume"]}
    assert not await authz.can_produce(other, "writer")
    assert await authz.topic_permissions(A_TOPIC) == {"reader": ["produce", "consume"], "writer": ["produce"]}
    assert await authz.topic_permissions(other) == {"reader": ["consume"]}
    await authz.revoke_topic_permission(A_TOPIC, "writer")
    assert not await authz.can_produce(A_TOPIC, "writer")
    with pytest.raises(PreconditionFailed, match="not set at the topic level"):
        await authz.revoke_topic_permission(A_TOPIC, "writer")
    with pytest.raises(NotFound):
        await authz.topic_permissions(TopicName.of("tenant-a", "missing", "t"))
    with pytest.raises(NotFound):
        await authz.grant_namespace_permission(NamespaceName("tenant-a", "missing"), "x", [PRODUCE])


async def test_subscription_roles(store: PolicyStore) -> None:
    authz = service(store)
    await authz.grant_namespace_permission(A_NS, "app", [CONSUME])
    await authz.grant_namespace_permission(A_NS, "other", [CONSUME])
    await authz.grant_subscription_permission(A_NS, "billing", ["app"])
    assert await authz.can_consume(A_TOPIC, "app", "billing")
    assert not await authz.can_consume(A_TOPIC, "other", "billing")
    assert await authz.can_consume(A_TOPIC, "other", "anything-else")
    await authz.revoke_subscription_permission(A_NS, "billing", "app")
    assert await authz.can_consume(A_TOPIC, "other", "billing")


async def test_wildcard_roles(store: PolicyStore) -> None:
    strict, wild = service(store), service(store, authorization_allow_wildcards_matching=True)
    await strict.grant_namespace_permission(A_NS, "team.*", [PRODUCE])
    await strict.grant_namespace_permission(A_NS, "*.svc", [CONSUME])
    assert not await strict.can_produce(A_TOPIC, "team.blue")
    assert await wild.can_produce(A_TOPIC, "team.blue")
    assert await wild.can_consume(A_TOPIC, "billing.svc")
    assert not await wild.can_consume(A_TOPIC, "team.blue")


async def test_grants_are_validated_and_stored_as_pulsar_does(store: PolicyStore) -> None:
    authz = service(store)
    assert parse_actions(["consume", "produce"]) == {CONSUME, PRODUCE}
    with pytest.raises(ValueError, match="Invalid auth action 'write'"):
        parse_actions(["write"])
    with pytest.raises(PreconditionFailed, match="role name"):
        await authz.grant_namespace_permission(A_NS, "", [PRODUCE])
    await authz.grant_namespace_permission(A_NS, "r", [CONSUME, PRODUCE, AuthAction.FUNCTIONS])
    policies = await store.get_namespace(str(A_NS))
    assert policies is not None
    assert policies.auth_policies["namespace_auth"] == {"r": ["produce", "consume", "functions"]}
    assert await authz.can_functions(A_NS, "r")
    await authz.grant_topic_permission(A_TOPIC, "t", [CONSUME])
    policies = await store.get_namespace(str(A_NS))
    assert policies is not None
    assert policies.auth_policies["destination_auth"] == {
        "persistent://tenant-a/ns/orders": {"t": ["consume"]}
    }


async def test_unknown_stored_actions_are_ignored(store: PolicyStore) -> None:
    authz = service(store)

    def corrupt(policies: Policies) -> Policies:
        auth = dict(policies.auth_policies)
        auth["namespace_auth"] = {"r": ["produce", "teleport"], "bad": "consume"}
        return policies.model_copy(update={"auth_policies": auth})

    await store.update_namespace(str(A_NS), corrupt)
    assert await authz.namespace_permissions(A_NS) == {"bad": [], "r": ["produce"]}
    assert await authz.can_produce(A_TOPIC, "r")
    assert not await authz.can_consume(A_TOPIC, "bad")


async def test_a_grant_on_a_non_partitioned_topic_does_not_cover_look_alike_names(store: PolicyStore) -> None:
    authz = service(store)
    solo = TopicName.of("tenant-a", "ns", "solo")
    await authz.grant_topic_permission(solo, "app", [PRODUCE, CONSUME])
    assert await authz.can_produce(solo, "app")
    for look_alike in (solo.partition(0), solo.partition(7), solo.partition(2**31 - 1)):
        assert not await authz.can_produce(look_alike, "app")
        assert not await authz.can_consume(look_alike, "app")
        assert not await authz.can_lookup(look_alike, "app")
        assert await authz.topic_permissions(look_alike) == {}

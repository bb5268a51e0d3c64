"""PolicyStore over the memory metadata store: CRUD, CAS conflicts, Pulsar's JSON names."""

from __future__ import annotations

import json

import pytest

from magnetar.bookkeeper.metadata import MemoryMetadataStore, StoreUnavailableError
from magnetar.broker.policies.store import (
    AlreadyExists,
    ConcurrentModificationError,
    NotFound,
    Policies,
    PolicyStore,
    PreconditionFailed,
    RetentionPolicies,
    TenantInfo,
    ensure,
)


@pytest.fixture
def policies() -> PolicyStore:
    return PolicyStore(MemoryMetadataStore())


async def test_tenant_and_namespace_lifecycle(policies: PolicyStore) -> None:
    await policies.create_tenant("acme", TenantInfo(adminRoles=["ops"], allowedClusters=["standalone"]))
    with pytest.raises(AlreadyExists):
        await policies.create_tenant("acme", TenantInfo())
    await ensure(lambda: policies.create_tenant("acme", TenantInfo()))
    with pytest.raises(NotFound):
        await policies.create_namespace("nobody/ns", Policies())
    await policies.create_namespace("acme/orders", Policies())
    assert await policies.namespaces("acme") == ["acme/orders"]
    with pytest.raises(AlreadyExists, match="active namespaces"):
        await policies.delete_tenant("acme")
    await policies.delete_namespace("acme/orders")
    await policies.delete_tenant("acme")
    assert await policies.tenants() == []
    with pytest.raises(NotFound):
        await policies.delete_tenant("acme")


async def test_namespace_policies_use_pulsar_field_names(policies: PolicyStore) -> None:
    await policies.create_tenant("t", TenantInfo())
    await policies.create_namespace("t/ns", Policies())

    def set_retention(p: Policies) -> Policies:
        return p.model_copy(update={"retention_policies": RetentionPolicies(retentionTimeInMinutes=60)})

    await policies.update_namespace("t/ns", set_retention)
    stored = await policies.store.get("/admin/policies/t/ns")
    assert stored is not None
    body = json.loads(stored.value)
    assert body["retention_policies"] == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 0}
    assert "backlog_quota_map" in body
    assert "auth_policies" in body


async def test_concurrent_update_is_a_conflict(policies: PolicyStore) -> None:
    await policies.create_tenant("t", TenantInfo())
    await policies.create_namespace("t/ns", Policies())
    store = policies.store
    assert isinstance(store, MemoryMetadataStore)

    def change_while_another_admin_writes(p: Policies) -> Policies:
        # Between our read and our compare-and-set, another admin writes the node.
        node = store._tree.nodes["/admin/policies/t/ns"]
        node.version += 1
        return p.model_copy(update={"message_ttl_in_seconds": 5})

    with pytest.raises(ConcurrentModificationError):
        await policies.update_namespace("t/ns", change_while_another_admin_writes)
    unchanged = await policies.get_namespace("t/ns")
    assert unchanged is not None
    assert unchanged.message_ttl_in_seconds is None


async def test_partitioned_topics_only_grow(policies: PolicyStore) -> None:
    await policies.create_partitioned("t/ns", "orders", 4)
    assert await policies.get_partitions("t/ns", "orders") == 4
    assert await policies.get_partitions("t/ns", "missing") == 0
    with pytest.raises(PreconditionFailed):
        await policies.update_partitions("t/ns", "orders", 2)
    await policies.update_partitions("t/ns", "orders", 6)
    assert await policies.partitioned_topics("t/ns") == ["orders"]
    await policies.delete_partitioned("t/ns", "orders")
    with pytest.raises(NotFound):
        await policies.delete_partitioned("t/ns", "orders")


@pytest.mark.parametrize(
    ("time", "size", "valid"),
    [
        (-1, -1, True),
        (-1, 10, True),
        (10, -1, True),
        (0, 0, True),
        (0, 10, False),
        (10, 0, False),
        (10, 10, True),
        (-2, 5, False),
    ],
)
def test_retention_validity_table(time: int, size: int, valid: bool) -> None:
    policy = RetentionPolicies(retentionTimeInMinutes=time, retentionSizeInMB=size)
    assert (policy.validity_error() is None) is valid


async def test_during_an_outage_reads_answer_the_last_known_policies() -> None:
    store = MemoryMetadataStore()
    policies = PolicyStore(store, last_known_max=2)
    await policies.create_tenant("acme", TenantInfo(allowedClusters=["standalone"]))
    await policies.create_namespace("acme/a", Policies(message_ttl_in_seconds=30))
    await policies.create_namespace("acme/b", Policies())
    await policies.create_namespace("acme/c", Policies())
    for namespace in ("acme/a", "acme/b", "acme/c"):
        assert await policies.get_namespace(namespace) is not None
    assert await policies.get_partitions("acme/b", "never-partitioned") == 0  # absent is known too
    store.disconnect()
    assert await policies.get_partitions("acme/b", "never-partitioned") == 0
    known = await policies.get_namespace("acme/c")
    assert known is not None
    with pytest.raises(StoreUnavailableError):  # beyond last_known_max: forgotten, least recent first
        await policies.get_namespace("acme/a")
    with pytest.raises(StoreUnavailableError):  # writes are not answered from memory
        await policies.update_namespace("acme/c", lambda p: p)
    store.reconnect()
    await policies.delete_namespace("acme/c")
    store.disconnect()
    with pytest.raises(StoreUnavailableError):  # a deleted document is not remembered
        await policies.get_namespace("acme/c")
    store.reconnect()

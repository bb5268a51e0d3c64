"""The effective policies the retention service gets: topic > partitioned topic > namespace > default."""

from __future__ import annotations

import pytest

from magnetar.admin.processes.retention_policies import StoredPolicySource, entry_publish_time
from magnetar.bookkeeper.metadata import MemoryMetadataStore
from magnetar.broker.policies.store import BacklogQuota, Policies, PolicyStore, RetentionPolicies, TenantInfo
from magnetar.broker.wire.entry_format import StoredMessage, encode_batch, encode_message
from magnetar.gc.policies import BacklogPolicy
from magnetar.gc.settings import RetentionSettings
from magnetar.managed_ledger.trim import RetentionPolicy


async def test_precedence_of_policies() -> None:
    store = PolicyStore(MemoryMetadataStore())
    await store.create_tenant("t", TenantInfo(allowedClusters=["standalone"]))
    await store.create_namespace("t/ns", Policies())
    source = StoredPolicySource(
        store, RetentionSettings(default_retention_time_min=5, default_retention_size_mb=7)
    )
    name = "t/ns/persistent/p-partition-1"
    first = await source.policies_for(name)
    assert first.retention == RetentionPolicy(5, 7)
    assert first.message_ttl_s == 0
    assert first.size_quota is None

    def ns_change(p: Policies) -> Policies:
        return p.model_copy(
            update={
                "retention_policies": RetentionPolicies(retentionTimeInMinutes=60, retentionSizeInMB=-1),
                "message_ttl_in_seconds": 30,
                "backlog_quota_map": {"destination_storage": BacklogQuota(limitSize=10)},
            }
        )

    await store.update_namespace("t/ns", ns_change)
    second = await source.policies_for(name)
    assert second.retention == RetentionPolicy(60, -1)
    assert second.message_ttl_s == 30
    assert second.size_quota is not None
    assert second.size_quota.limit_bytes == 10
    assert second.size_quota.policy is BacklogPolicy.PRODUCER_REQUEST_HOLD

    retention = RetentionPolicies(retentionTimeInMinutes=-1, retentionSizeInMB=-1)
    await store.update_topic_policies(
        "t/ns", "p", lambda p: p.model_copy(update={"retention_policies": retention})
    )
    assert (await source.policies_for(name)).retention == RetentionPolicy(
        -1, -1
    )  # from the partitioned topic
    own = RetentionPolicies(retentionTimeInMinutes=0, retentionSizeInMB=0)
    await store.update_topic_policies(
        "t/ns",
        "p-partition-1",
        lambda p: p.model_copy(update={"retention_policies": own, "message_ttl_in_seconds": 0}),
    )
    third = await source.policies_for(name)
    assert third.retention == RetentionPolicy(0, 0)
    assert third.message_ttl_s == 0
    assert (await source.policies_for("t/ns/persistent/other")).retention == RetentionPolicy(60, -1)


def test_entry_publish_time_is_the_newest_in_a_batch() -> None:
    single = encode_message(StoredMessage(b"a", "p", 0, publish_time_ms=1000))
    assert entry_publish_time(single) == 1000
    batch = encode_batch(
        [StoredMessage(b"a", "p", 0, publish_time_ms=1000), StoredMessage(b"b", "p", 1, publish_time_ms=3000)]
    )
    assert entry_publish_time(batch) == 3000
    with pytest.raises(ValueError, match=r"magic|short|truncated|entry"):
        entry_publish_time(b"garbage")

"""Wiring of the retention service to broker metadata: effective policies and entry publish times.

``gc`` may not read broker metadata or the broker's entry format, so the composition root hands it:

* :class:`StoredPolicySource` - the effective policies of a topic from the ``PolicyStore``: topic-level,
  then (for a partition) the partitioned topic's topic-level policies, then the namespace's, then the broker
  defaults - Pulsar's precedence;
* :func:`entry_publish_time` - the newest publish time of the messages in a stored entry.
"""

from __future__ import annotations

from magnetar.broker.policies import BacklogQuota, Policies, PolicyStore, TopicPolicies
from magnetar.broker.wire import CorruptEntryError, TopicName, decode_entry
from magnetar.gc import BacklogPolicy, BacklogQuotaLimit, RetentionSettings, TopicRetentionPolicies
from magnetar.managed_ledger.trim import RetentionPolicy


def entry_publish_time(data: bytes | memoryview) -> int:
    """Newest publish time (epoch ms) of the entry's messages; ``ValueError`` for foreign bytes."""
    try:
        messages = decode_entry(data).messages
    except CorruptEntryError as exc:
        raise ValueError(str(exc)) from exc
    if not messages:
        raise ValueError("entry holds no message")
    return max(message.publish_time_ms for message in messages)


def _limit(quota: BacklogQuota) -> BacklogQuotaLimit:
    return BacklogQuotaLimit(quota.limitSize, quota.limitTime, BacklogPolicy(quota.policy))


class StoredPolicySource:
    def __init__(self, policies: PolicyStore, settings: RetentionSettings) -> None:
        self._policies = policies
        self._settings = settings

    async def _topic_levels(self, topic: TopicName) -> list[TopicPolicies]:
        namespace = str(topic.namespace_name)
        levels = [await self._policies.get_topic_policies(namespace, topic.local_name)]
        if topic.is_partition:
            parent = topic.partitioned_topic
            levels.append(await self._policies.get_topic_policies(namespace, parent.local_name))
        return levels

    async def policies_for(self, ml_name: str) -> TopicRetentionPolicies:
        topic = TopicName.from_managed_ledger_name(ml_name)
        levels = await self._topic_levels(topic)
        namespace = await self._policies.get_namespace(str(topic.namespace_name)) or Policies()
        s = self._settings
        retention = next((lv.retention_policies for lv in levels if lv.retention_policies), None)
        retention = retention or namespace.retention_policies
        effective = (
            RetentionPolicy(retention.retentionTimeInMinutes, retention.retentionSizeInMB)
            if retention is not None
            else RetentionPolicy(s.default_retention_time_min, s.default_retention_size_mb)
        )
        ttls = [lv.message_ttl_in_seconds for lv in levels] + [namespace.message_ttl_in_seconds]
        ttl = next((t for t in ttls if t is not None), s.ttl_duration_default_s)
        quotas = next((lv.backlog_quota_map for lv in levels if lv.backlog_quota_map), None)
        quotas = quotas or namespace.backlog_quota_map
        size = quotas.get("destination_storage")
        age = quotas.get("message_age")
        return TopicRetentionPolicies(
            retention=effective,
            message_ttl_s=ttl,
            size_quota=_limit(size) if size is not None else None,
            age_quota=_limit(age) if age is not None else None,
        )

"""Pulsar's validity rules for retention, backlog quotas and TTL (pure functions, tested by table).

Retention (docs "Message retention and expiry", ``AdminResource.validateRetentionPolicies``):

=====  =====  ==================================
time   size   meaning
=====  =====  ==================================
-1     -1     infinite retention
-1     >0     size-bounded
>0     -1     time-bounded
0      0      retention disabled (the default)
0      !=0    invalid
!=0    0      invalid
>0     >0     acked data goes when either limit is reached
=====  =====  ==================================

and no value below -1. A backlog quota must stay below the retention limits (``checkBacklogQuota``): with a
positive retention size, ``limitSize`` must be smaller than it; with a positive retention time,
``limitTime`` smaller than it - otherwise retention would delete what the quota still protects.
"""

from __future__ import annotations

from magnetar.broker.policies import BacklogQuota, RetentionPolicies

MIB = 1024 * 1024

RETENTION_ZERO_MIX = (
    "Invalid retention policy: Setting a single time or size limit to 0 is invalid when one of the limits "
    "has a non-zero value. Use the value of -1 instead of 0 to ignore a specific limit. To disable retention "
    "both limits must be set to 0."
)


def retention_error(retention: RetentionPolicies) -> str | None:
    """Why ``retention`` is invalid, or None."""
    if retention.retentionSizeInMB < -1:
        return "Invalid retention policy: size limit must be >= -1"
    if retention.retentionTimeInMinutes < -1:
        return "Invalid retention policy: time limit must be >= -1"
    if (retention.retentionTimeInMinutes == 0) != (retention.retentionSizeInMB == 0):
        return RETENTION_ZERO_MIX
    return None


def quota_within_retention(quota: BacklogQuota | None, retention: RetentionPolicies | None) -> bool:
    """Pulsar's ``checkBacklogQuota``: False when the quota reaches past what retention keeps."""
    if quota is None or retention is None:
        return True
    size_mb, time_min = retention.retentionSizeInMB, retention.retentionTimeInMinutes
    if size_mb <= 0 and time_min <= 0:
        return True
    if size_mb > 0 and quota.limitSize >= size_mb * MIB:
        return False
    return not (time_min > 0 and quota.limitTime >= time_min * 60)


def quotas_within_retention(quotas: dict[str, BacklogQuota], retention: RetentionPolicies | None) -> bool:
    return all(quota_within_retention(q, retention) for q in quotas.values())


def backlog_quota_error(quota: BacklogQuota) -> str | None:
    if quota.limitSize < -1:
        return "Invalid backlog quota: limitSize must be >= -1"
    if quota.limitTime < -1:
        return "Invalid backlog quota: limitTime must be >= -1"
    return None


def ttl_error(seconds: int) -> str | None:
    return "Invalid TTL" if seconds < 0 else None

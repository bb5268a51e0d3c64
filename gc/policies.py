"""The policies the retention service applies to one topic, and where it gets them.

The effective policy of a topic is resolved by whoever owns the policy metadata (the broker's
``PolicyStore``: topic-level > namespace > broker default) and handed to the retention service through
:class:`PolicySource`, so ``gc`` never reads broker metadata itself. :class:`FixedPolicies` is the trivial
source (one policy for every topic) for tests and tools.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol

from magnetar.managed_ledger.trim import RetentionPolicy


class BacklogPolicy(enum.StrEnum):
    """What happens when a backlog quota is exceeded (Pulsar's ``BacklogQuota.RetentionPolicy``)."""

    PRODUCER_REQUEST_HOLD = "producer_request_hold"
    PRODUCER_EXCEPTION = "producer_exception"
    CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"


@dataclass(frozen=True, slots=True)
class BacklogQuotaLimit:
    """``destination_storage`` uses ``limit_bytes``, ``message_age`` uses ``limit_time_s``; -1 = no limit."""

    limit_bytes: int = -1
    limit_time_s: int = -1
    policy: BacklogPolicy = BacklogPolicy.PRODUCER_REQUEST_HOLD


@dataclass(frozen=True, slots=True)
class TopicRetentionPolicies:
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    message_ttl_s: int = 0
    """0 = messages never expire."""
    size_quota: BacklogQuotaLimit | None = None
    age_quota: BacklogQuotaLimit | None = None


class PolicySource(Protocol):
    async def policies_for(self, ml_name: str) -> TopicRetentionPolicies:
        """The effective policies of the topic stored in managed ledger ``ml_name``."""
        ...


@dataclass(frozen=True, slots=True)
class FixedPolicies:
    policies: TopicRetentionPolicies = field(default_factory=TopicRetentionPolicies)

    async def policies_for(self, ml_name: str) -> TopicRetentionPolicies:
        return self.policies

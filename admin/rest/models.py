"""Request and response bodies of the admin API, with Pulsar's exact JSON names.

Stored shapes (``TenantInfo``, namespace ``Policies``, ``RetentionPolicies``, ``BacklogQuota``) live in
:mod:`magnetar.broker.policies.store` and are answered as they are. Request models here add what a request
needs beyond the stored shape: Java's integer ranges (a Java ``int`` is 32-bit, a ``long`` 64-bit: a larger
number is a 400, as Jackson refuses it), bounded list and string sizes, and Pulsar's legacy spellings
(``limit`` for a backlog quota's ``limitSize``). Unknown JSON fields are ignored, as Pulsar's Jackson mapper
is configured.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
)

from magnetar.broker.policies import BacklogQuota, ClusterData, RetentionPolicies, TenantInfo
from magnetar.broker.wire import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, parse_long

LIST_ITEMS_MAX = 1000
STRING_CHARS_MAX = 1024
PROPERTIES_MAX = 1000


def _java_number(value: object, info: ValidationInfo) -> object:
    """A number in a JSON string is read as Jackson reads it: trimmed, then as Java's ``Long.parseLong``
    (``"1_0"`` or digits of other scripts are no number); a boolean is no number."""
    if isinstance(value, bool):
        raise ValueError(f"Invalid {info.field_name or 'number'} {str(value).lower()}: a number is expected")
    if isinstance(value, str):
        return parse_long(info.field_name or "number", value.strip())
    return value


Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX), BeforeValidator(_java_number)]
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX), BeforeValidator(_java_number)]


def _java_boolean(value: object) -> object:
    """A Java ``boolean`` body: ``true``/``false``, or the same words in a string (Jackson's coercion); no
    number, no other text."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip() in ("true", "false"):
        return value.strip() == "true"
    raise ValueError("Invalid boolean: true or false is expected")


StrictBool = Annotated[bool, BeforeValidator(_java_boolean)]


def _java_double(value: object, info: ValidationInfo) -> object:
    """A Java ``double``: a number (or a number in a string), finite - JSON has no NaN or infinity, and a
    policy of either is no policy."""
    if isinstance(value, bool):
        raise ValueError(f"Invalid {info.field_name or 'number'} {str(value).lower()}: a number is expected")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError(f"Invalid {info.field_name or 'number'}: a number is expected") from None
    if isinstance(value, int | float) and not math.isfinite(float(value)):
        raise ValueError(f"Invalid {info.field_name or 'number'}: a finite number is expected")
    return value


JavaDouble = Annotated[float, BeforeValidator(_java_double)]
ShortText = Annotated[str, StringConstraints(max_length=STRING_CHARS_MAX)]

BacklogPolicyName = Literal["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]
BacklogQuotaType = Literal["destination_storage", "message_age"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class TenantInfoBody(_Body):
    adminRoles: list[ShortText] | None = Field(default=None, max_length=LIST_ITEMS_MAX)
    allowedClusters: list[ShortText] | None = Field(default=None, max_length=LIST_ITEMS_MAX)

    def to_info(self) -> TenantInfo:
        return TenantInfo(adminRoles=self.adminRoles or [], allowedClusters=self.allowedClusters or [])


class ClusterDataBody(_Body):
    serviceUrl: ShortText = ""
    serviceUrlTls: ShortText = ""
    brokerServiceUrl: ShortText = ""
    brokerServiceUrlTls: ShortText = ""

    def to_data(self) -> ClusterData:
        return ClusterData(**self.model_dump())


class RetentionBody(_Body):
    retentionTimeInMinutes: Int32 = 0
    retentionSizeInMB: Int64 = 0

    def to_policies(self) -> RetentionPolicies:
        return RetentionPolicies(
            retentionTimeInMinutes=self.retentionTimeInMinutes, retentionSizeInMB=self.retentionSizeInMB
        )


class BacklogQuotaBody(_Body):
    limit: Int64 | None = None
    """Legacy name of ``limitSize`` (older Pulsar docs and clients)."""
    limitSize: Int64 | None = None
    limitTime: Int32 | None = None
    policy: BacklogPolicyName | None = None

    def to_quota(self) -> BacklogQuota:
        size = self.limitSize if self.limitSize is not None else self.limit
        return BacklogQuota(
            limitSize=-1 if size is None else size,
            limitTime=-1 if self.limitTime is None else self.limitTime,
            policy=self.policy or "producer_request_hold",
        )


class PersistenceBody(_Body):
    """Pulsar's ``PersistencePolicies`` as the Java admin sends it; an absent field takes the no-argument
    constructor's value (2/2/2/0.0), as Jackson fills it."""

    bookkeeperEnsemble: Int32 = 2
    bookkeeperWriteQuorum: Int32 = 2
    bookkeeperAckQuorum: Int32 = 2
    managedLedgerMaxMarkDeleteRate: JavaDouble = 0.0


class InactiveTopicPoliciesBody(_Body):
    inactiveTopicDeleteMode: str | None = None
    """An unknown mode is read as none (Jackson's unknown enum values become null)."""
    maxInactiveDurationSeconds: Int32 = 0
    deleteWhileInactive: bool = False


class AutoTopicCreationBody(_Body):
    allowAutoTopicCreation: bool = False
    topicType: ShortText | None = None
    defaultNumPartitions: Int32 | None = None


class AutoSubscriptionCreationBody(_Body):
    allowAutoSubscriptionCreation: bool = False


class DelayedDeliveryBody(_Body):
    """Pulsar's ``DelayedDeliveryPolicies`` (a missing field is Java's default, as Jackson leaves it)."""

    active: bool = False
    tickTime: Int64 = 0
    maxDeliveryDelayInMillis: Int64 = 0


class PublishRateBody(_Body):
    """Pulsar's ``PublishRate``; absent fields take its constructor's -1 (off)."""

    publishThrottlingRateInMsg: Int32 = -1
    publishThrottlingRateInByte: Int64 = -1


class DispatchRateBody(_Body):
    """Pulsar's ``DispatchRateImpl`` as Jackson fills it: absent fields are 0 / false (not the builder's
    -1 and 1)."""

    dispatchThrottlingRateInMsg: Int32 = 0
    dispatchThrottlingRateInByte: Int64 = 0
    relativeToPublishRate: bool = False
    ratePeriodInSecond: Int32 = 0


class SubscribeRateBody(_Body):
    subscribeThrottlingRatePerConsumer: Int32 = -1
    ratePeriodInSecond: Int32 = 30


class NamespacePoliciesBody(_Body):
    """The optional body of a namespace create: the policies a user may set at creation."""

    replication_clusters: list[ShortText] | None = Field(default=None, max_length=LIST_ITEMS_MAX)
    bundles: dict[str, Int32 | list[ShortText]] | None = None
    backlog_quota_map: dict[BacklogQuotaType, BacklogQuotaBody] | None = None
    message_ttl_in_seconds: Int32 | None = None
    retention_policies: RetentionBody | None = None
    # the catalogue's policies (magnetar.broker.policies.catalogue), checked as their own routes check them
    subscription_expiration_time_minutes: Int32 | None = None
    persistence: PersistenceBody | None = None
    max_producers_per_topic: Int32 | None = None
    max_consumers_per_topic: Int32 | None = None
    max_consumers_per_subscription: Int32 | None = None
    max_subscriptions_per_topic: Int32 | None = None
    max_unacked_messages_per_consumer: Int32 | None = None
    max_unacked_messages_per_subscription: Int32 | None = None
    inactive_topic_policies: InactiveTopicPoliciesBody | None = None
    autoTopicCreationOverride: AutoTopicCreationBody | None = None
    autoSubscriptionCreationOverride: AutoSubscriptionCreationBody | None = None
    delayed_delivery_policies: DelayedDeliveryBody | None = None
    deduplicationEnabled: StrictBool | None = None
    deduplicationSnapshotIntervalSeconds: Int32 | None = None


TopicProperties = Annotated[dict[ShortText, ShortText], Field(max_length=PROPERTIES_MAX)]


class PartitionedTopicMetadataBody(_Body):
    """The body ``createPartitionedTopic(topic, n, properties)`` sends (``PartitionedTopicMetadata``, media
    type ``application/vnd.partitioned-topic-metadata+json``); without properties the client sends the bare
    number."""

    partitions: Int32
    properties: TopicProperties | None = None


class PartitionedTopicMetadataOut(BaseModel):
    partitions: int
    deleted: bool = False

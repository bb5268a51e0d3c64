"""Tenants, namespaces, clusters and their policies, as Pulsar stores them in the metadata store.

JSON field names follow Pulsar's admin API exactly (``TenantInfo`` camelCase, namespace ``Policies`` in
snake_case) so the admin REST API can return these models as they are. Every write is a compare-and-set on
the version read, so two admins changing one namespace at the same time cannot lose an update: the loser
gets :class:`ConcurrentModificationError` (HTTP 409 in the admin API).

Metadata outages: every document read is remembered (up to ``last_known_max`` of them, least recently used
dropped first), and while the store is unavailable a read answers the last known document instead of failing
- the broker goes on with the policies it had (Pulsar's metadata caches do the same). Only reads do: a write
during an outage fails as the store's error.

Paths: ``/admin/clusters/<cluster>``, ``/admin/policies/<tenant>``, ``/admin/policies/<tenant>/<namespace>``,
``/admin/partitioned-topics/<tenant>/<namespace>/persistent/<topic>`` and topic-level policies at
``/admin/topic-policies/<tenant>/<namespace>/<topic>``; ``<topic>`` is the local name URL-encoded as Pulsar
encodes it (callers pass the plain local name).
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from magnetar.bookkeeper.metadata import (
    BadVersionError,
    GetResult,
    MetadataStore,
    NotEmptyError,
    NotFoundError,
    StoreUnavailableError,
)
from magnetar.broker.wire import url_decode, url_encode

CLUSTERS = "/admin/clusters"
POLICIES = "/admin/policies"
PARTITIONED = "/admin/partitioned-topics"
TOPIC_POLICIES = "/admin/topic-policies"
LAST_KNOWN_MAX = 10_000
"""Default bound on the documents remembered for reads during an outage (``policies_last_known_max``)."""

log = logging.getLogger(__name__)


class PolicyError(Exception):
    status = 500


class NotFound(PolicyError):
    status = 404


class AlreadyExists(PolicyError):
    status = 409


class ConcurrentModificationError(PolicyError):
    status = 409


class PreconditionFailed(PolicyError):
    status = 412


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class ClusterData(_Model):
    serviceUrl: str = ""
    serviceUrlTls: str = ""
    brokerServiceUrl: str = ""
    brokerServiceUrlTls: str = ""


class TenantInfo(_Model):
    adminRoles: list[str] = Field(default_factory=list)
    allowedClusters: list[str] = Field(default_factory=list)


class RetentionPolicies(_Model):
    retentionTimeInMinutes: int = 0
    retentionSizeInMB: int = 0

    def validity_error(self) -> str | None:
        """Pulsar's table: 0 with a non-zero other limit is invalid; negatives other than -1 too."""
        t, s = self.retentionTimeInMinutes, self.retentionSizeInMB
        if t < -1 or s < -1:
            return "Retention time and size must be >= -1"
        if (t == 0) != (s == 0):
            return "Invalid retention policy: size and time must be both zero or both non-zero"
        return None


BacklogPolicy = Literal["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]


class BacklogQuota(_Model):
    limitSize: int = -1
    limitTime: int = -1
    policy: BacklogPolicy = "producer_request_hold"


class PersistencePolicies(_Model):
    """Pulsar's ``PersistencePolicies``: the quorum of a topic's new ledgers, and how often a cursor's
    mark-delete position may be persisted (per second, 0 = unthrottled)."""

    bookkeeperEnsemble: int = 2
    bookkeeperWriteQuorum: int = 2
    bookkeeperAckQuorum: int = 2
    managedLedgerMaxMarkDeleteRate: float = 0.0


class PublishRate(_Model):
    """Pulsar's ``PublishRate``: messages and bytes a topic may take per second (a dimension at 0 or below
    is off; a rate with both off is stored as no rate at all)."""

    publishThrottlingRateInMsg: int = -1
    publishThrottlingRateInByte: int = -1


class DispatchRate(_Model):
    """Pulsar's ``DispatchRateImpl``: messages and bytes dispatched per ``ratePeriodInSecond`` (at least 1);
    ``relativeToPublishRate`` adds the topic's last publish rate to the limits."""

    dispatchThrottlingRateInMsg: int = -1
    dispatchThrottlingRateInByte: int = -1
    relativeToPublishRate: bool = False
    ratePeriodInSecond: int = 1


class SubscribeRate(_Model):
    """Pulsar's ``SubscribeRate``: subscribes one consumer (client address and consumer name) may make per
    ``ratePeriodInSecond``."""

    subscribeThrottlingRatePerConsumer: int = -1
    ratePeriodInSecond: int = 30


InactiveTopicDeleteMode = Literal["delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"]


class InactiveTopicPolicies(_Model):
    """Pulsar's ``InactiveTopicPolicies`` (taken whole from the most specific level that has one)."""

    inactiveTopicDeleteMode: InactiveTopicDeleteMode | None = None
    maxInactiveDurationSeconds: int = 0
    deleteWhileInactive: bool = False


class AutoTopicCreationOverride(_Model):
    """Pulsar's ``AutoTopicCreationOverride``: replaces the broker's auto-creation settings as a whole."""

    allowAutoTopicCreation: bool = False
    topicType: str | None = None
    defaultNumPartitions: int | None = None


class AutoSubscriptionCreationOverride(_Model):
    allowAutoSubscriptionCreation: bool = False


class DelayedDeliveryPolicies(_Model):
    """Pulsar's ``DelayedDeliveryPolicies`` (a namespace's ``delayed_delivery_policies``; a topic stores its
    three fields apart, see :class:`TopicPolicies`)."""

    active: bool = True
    tickTime: int = 1000
    """Milliseconds."""
    maxDeliveryDelayInMillis: int = 0
    """0 = no cap."""


class BundlesData(_Model):
    boundaries: list[str] = Field(default_factory=list)
    numBundles: int = 0


def _empty_auth_policies() -> dict[str, dict[str, Any]]:
    return {"namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}}


class Policies(_Model):
    """A namespace's policies (subset of Pulsar's ``Policies`` with its snake_case JSON names)."""

    auth_policies: dict[str, dict[str, Any]] = Field(default_factory=_empty_auth_policies)
    replication_clusters: list[str] = Field(default_factory=list)
    bundles: BundlesData = Field(default_factory=BundlesData)
    backlog_quota_map: dict[str, BacklogQuota] = Field(default_factory=dict)
    message_ttl_in_seconds: int | None = None
    retention_policies: RetentionPolicies | None = None
    deleted: bool = False
    is_allow_auto_update_schema: bool = True
    # The policies of :mod:`.catalogue` (one generic set of routes, verbs and resolution serves them all).
    persistence: PersistencePolicies | None = None
    max_producers_per_topic: int | None = None
    max_consumers_per_topic: int | None = None
    max_consumers_per_subscription: int | None = None
    max_subscriptions_per_topic: int | None = None
    max_unacked_messages_per_consumer: int | None = None
    max_unacked_messages_per_subscription: int | None = None
    inactive_topic_policies: InactiveTopicPolicies | None = None
    subscription_expiration_time_minutes: int | None = None
    autoTopicCreationOverride: AutoTopicCreationOverride | None = None
    autoSubscriptionCreationOverride: AutoSubscriptionCreationOverride | None = None
    delayed_delivery_policies: DelayedDeliveryPolicies | None = None
    # Rates: Pulsar keeps them in maps by cluster; Magnetar serves one cluster, so one value each.
    publish_rate: PublishRate | None = None
    dispatch_rate: DispatchRate | None = None
    subscription_dispatch_rate: DispatchRate | None = None
    subscribe_rate: SubscribeRate | None = None
    deduplicationEnabled: bool | None = None
    deduplicationSnapshotIntervalSeconds: int | None = None


class TopicPolicies(_Model):
    """A topic's own policies (stored by Magnetar in the metadata store, with the namespace's field names)."""

    retention_policies: RetentionPolicies | None = None
    message_ttl_in_seconds: int | None = None
    backlog_quota_map: dict[str, BacklogQuota] = Field(default_factory=dict)
    persistence: PersistencePolicies | None = None
    max_producers_per_topic: int | None = None
    max_consumers_per_topic: int | None = None
    max_consumers_per_subscription: int | None = None
    max_subscriptions_per_topic: int | None = None
    max_unacked_messages_per_consumer: int | None = None
    max_unacked_messages_per_subscription: int | None = None
    inactive_topic_policies: InactiveTopicPolicies | None = None
    autoSubscriptionCreationOverride: AutoSubscriptionCreationOverride | None = None
    # ``delayedDelivery`` split as Pulsar's ``TopicPolicies`` stores it: each resolved on its own.
    delayedDeliveryEnabled: bool | None = None
    delayedDeliveryTickTimeMillis: int | None = None
    delayedDeliveryMaxDelayInMillis: int | None = None
    publish_rate: PublishRate | None = None
    dispatch_rate: DispatchRate | None = None
    subscription_dispatch_rate: DispatchRate | None = None
    subscribe_rate: SubscribeRate | None = None
    subscription_dispatch_rates: dict[str, DispatchRate] = Field(default_factory=dict)
    """Per-subscription overrides of ``subscription_dispatch_rate`` (by subscription name; at most
    ``SUBSCRIPTION_RATES_MAX``)."""

    deduplicationEnabled: bool | None = None
    deduplicationSnapshotIntervalSeconds: int | None = None


SUBSCRIPTION_RATES_MAX = 1000
"""Subscriptions of one topic that may have a dispatch rate of their own."""


class PartitionedTopicMetadata(_Model):
    partitions: int = 0
    properties: dict[str, str] | None = None
    """The partitioned topic's own properties (Pulsar's ``PartitionedTopicMetadata.properties``)."""


M = TypeVar("M", bound=_Model)


class PolicyStore:
    def __init__(self, store: MetadataStore, *, last_known_max: int = LAST_KNOWN_MAX) -> None:
        self.store = store
        self._last_known_max = last_known_max
        self._last_known: OrderedDict[str, GetResult | None] = OrderedDict()
        self._answered_from_memory_in = -1
        """The outage (health generation) in which a read was last answered from memory (logged once)."""

    # -- generic versioned access ---------------------------------------------------------------

    async def _read(self, path: str) -> GetResult | None:
        """The node at ``path``; during an outage the last one read, if any (see the module's docstring)."""
        try:
            result = await self.store.get(path)
        except StoreUnavailableError:
            if path not in self._last_known:
                raise
            self._last_known.move_to_end(path)
            generation = self.store.health.generation
            if self._answered_from_memory_in != generation:
                self._answered_from_memory_in = generation
                log.warning("metadata store unavailable: answering policy reads with the last known ones")
            return self._last_known[path]
        if self._last_known_max > 0:
            self._last_known[path] = result
            self._last_known.move_to_end(path)
            while len(self._last_known) > self._last_known_max:
                self._last_known.popitem(last=False)
        return result

    def _forget(self, path: str) -> None:
        """A deleted document (and what was below it) must not be answered from memory."""
        for known in [p for p in self._last_known if p == path or p.startswith(path + "/")]:
            del self._last_known[known]

    async def _get(self, path: str, model: type[M]) -> tuple[M, int] | None:
        result = await self._read(path)
        if result is None:
            return None
        try:
            return model.model_validate_json(result.value or b"{}"), result.stat.version
        except ValidationError as exc:
            raise PolicyError(f"corrupt metadata at {path}: {exc.error_count()} errors") from exc

    async def _create(self, path: str, value: _Model, what: str) -> None:
        try:
            await self.store.put(path, value.model_dump_json().encode(), -1)
        except BadVersionError as exc:
            raise AlreadyExists(f"{what} already exists") from exc

    async def _update(self, path: str, model: type[M], change: Callable[[M], M], what: str) -> M:
        current = await self._get(path, model)
        if current is None:
            raise NotFound(f"{what} does not exist")
        value, version = current
        updated = change(value)
        try:
            await self.store.put(path, updated.model_dump_json().encode(), version)
        except BadVersionError as exc:
            raise ConcurrentModificationError(f"{what} was modified concurrently") from exc
        return updated

    # -- clusters -----------------------------------------------------------------------------

    async def clusters(self) -> list[str]:
        return await self.store.get_children(CLUSTERS)

    async def create_cluster(self, name: str, data: ClusterData) -> None:
        await self._create(f"{CLUSTERS}/{name}", data, f"Cluster {name}")

    async def update_cluster(self, name: str, data: ClusterData) -> None:
        await self._update(f"{CLUSTERS}/{name}", ClusterData, lambda _: data, "Cluster")

    async def get_cluster(self, name: str) -> ClusterData | None:
        found = await self._get(f"{CLUSTERS}/{name}", ClusterData)
        return None if found is None else found[0]

    # -- tenants ------------------------------------------------------------------------------

    async def tenants(self) -> list[str]:
        return await self.store.get_children(POLICIES)

    async def get_tenant(self, tenant: str) -> TenantInfo | None:
        found = await self._get(f"{POLICIES}/{tenant}", TenantInfo)
        return None if found is None else found[0]

    async def create_tenant(self, tenant: str, info: TenantInfo) -> None:
        await self._create(f"{POLICIES}/{tenant}", info, "Tenant")

    async def update_tenant(self, tenant: str, info: TenantInfo) -> None:
        await self._update(f"{POLICIES}/{tenant}", TenantInfo, lambda _: info, "Tenant")

    async def delete_tenant(self, tenant: str) -> None:
        if await self.namespaces(tenant):
            raise AlreadyExists("The tenant still has active namespaces")
        try:
            await self.store.delete(f"{POLICIES}/{tenant}")
        except NotFoundError as exc:
            raise NotFound("Tenant does not exist") from exc
        except NotEmptyError as exc:
            raise AlreadyExists("The tenant still has active namespaces") from exc
        finally:
            self._forget(f"{POLICIES}/{tenant}")

    # -- namespaces ---------------------------------------------------------------------------

    async def namespaces(self, tenant: str) -> list[str]:
        return [f"{tenant}/{ns}" for ns in await self.store.get_children(f"{POLICIES}/{tenant}")]

    async def get_namespace(self, namespace: str) -> Policies | None:
        found = await self._get(f"{POLICIES}/{namespace}", Policies)
        return None if found is None else found[0]

    async def create_namespace(self, namespace: str, policies: Policies) -> None:
        tenant = namespace.split("/", 1)[0]
        if await self.get_tenant(tenant) is None:
            raise NotFound("Tenant does not exist")
        await self._create(f"{POLICIES}/{namespace}", policies, "Namespace")

    async def update_namespace(self, namespace: str, change: Callable[[Policies], Policies]) -> Policies:
        return await self._update(f"{POLICIES}/{namespace}", Policies, change, "Namespace")

    async def delete_namespace(self, namespace: str) -> None:
        try:
            await self.store.delete_recursive(f"{POLICIES}/{namespace}")
        except NotFoundError as exc:
            raise NotFound("Namespace does not exist") from exc
        finally:
            self._forget(f"{POLICIES}/{namespace}")

    # -- partitioned topics ---------------------------------------------------------------

    @staticmethod
    def _partitioned_path(namespace: str, local_name: str) -> str:
        """The local name is URL-encoded (as in the managed-ledger name) so any topic name makes a valid
        metadata path segment."""
        return f"{PARTITIONED}/{namespace}/persistent/{url_encode(local_name)}"

    async def get_partitions(self, namespace: str, local_name: str) -> int:
        found = await self._get(self._partitioned_path(namespace, local_name), PartitionedTopicMetadata)
        return 0 if found is None else found[0].partitions

    async def get_partitioned(self, namespace: str, local_name: str) -> PartitionedTopicMetadata | None:
        found = await self._get(self._partitioned_path(namespace, local_name), PartitionedTopicMetadata)
        return None if found is None else found[0]

    async def update_partitioned_properties(
        self, namespace: str, local_name: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> None:
        """Change a partitioned topic's properties in one compare-and-set of its metadata."""

        def apply(current: PartitionedTopicMetadata) -> PartitionedTopicMetadata:
            return current.model_copy(update={"properties": change(dict(current.properties or {}))})

        path = self._partitioned_path(namespace, local_name)
        await self._update(path, PartitionedTopicMetadata, apply, "Partitioned topic")

    async def partitioned_topics(self, namespace: str) -> list[str]:
        """Local names of the namespace's partitioned topics (decoded)."""
        return [
            url_decode(name)
            for name in await self.store.get_children(f"{PARTITIONED}/{namespace}/persistent")
        ]

    async def create_partitioned(
        self, namespace: str, local_name: str, partitions: int, properties: dict[str, str] | None = None
    ) -> None:
        await self._create(
            self._partitioned_path(namespace, local_name),
            PartitionedTopicMetadata(partitions=partitions, properties=properties or None),
            "Partitioned topic",
        )

    async def update_partitions(self, namespace: str, local_name: str, partitions: int) -> None:
        def grow(current: PartitionedTopicMetadata) -> PartitionedTopicMetadata:
            if partitions <= current.partitions:
                raise PreconditionFailed(
                    f"Number of partitions can only be increased ({current.partitions} -> {partitions})"
                )
            return current.model_copy(update={"partitions": partitions})

        await self._update(
            self._partitioned_path(namespace, local_name), PartitionedTopicMetadata, grow, "Partitioned topic"
        )

    async def delete_partitioned(self, namespace: str, local_name: str) -> None:
        try:
            await self.store.delete(self._partitioned_path(namespace, local_name))
        except NotFoundError as exc:
            raise NotFound("Partitioned topic does not exist") from exc
        finally:
            self._forget(self._partitioned_path(namespace, local_name))

    # -- topic-level policies ------------------------------------------------------------

    @staticmethod
    def _topic_policies_path(namespace: str, local_name: str) -> str:
        return f"{TOPIC_POLICIES}/{namespace}/{url_encode(local_name)}"

    async def delete_topic_policies(self, namespace: str, local_name: str) -> None:
        self._forget(self._topic_policies_path(namespace, local_name))
        with contextlib.suppress(NotFoundError):
            await self.store.delete(self._topic_policies_path(namespace, local_name))

    async def get_topic_policies(self, namespace: str, local_name: str) -> TopicPolicies:
        found = await self._get(f"{TOPIC_POLICIES}/{namespace}/{url_encode(local_name)}", TopicPolicies)
        return TopicPolicies() if found is None else found[0]

    async def update_topic_policies(
        self, namespace: str, local_name: str, change: Callable[[TopicPolicies], TopicPolicies]
    ) -> TopicPolicies:
        path = f"{TOPIC_POLICIES}/{namespace}/{url_encode(local_name)}"
        for _ in range(3):
            found = await self._get(path, TopicPolicies)
            value, version = found if found is not None else (TopicPolicies(), -1)
            updated = change(value)
            try:
                await self.store.put(path, updated.model_dump_json().encode(), version)
            except BadVersionError:
                continue
            return updated
        raise ConcurrentModificationError("Topic policies were modified concurrently")


async def ensure(create: Callable[[], Awaitable[None]]) -> None:
    """Run a create call and ignore "already exists" (idempotent initialization)."""
    with contextlib.suppress(AlreadyExists):
        await create()


async def initialize_cluster_metadata(policies: PolicyStore, cluster: str, http_url: str = "") -> None:
    """Create the cluster, tenant ``public`` and namespace ``public/default`` if missing (idempotent), as
    ``pulsar initialize-cluster-metadata`` / standalone do."""
    await ensure(lambda: policies.create_cluster(cluster, ClusterData(serviceUrl=http_url)))
    await ensure(lambda: policies.create_tenant("public", TenantInfo(allowedClusters=[cluster])))
    with contextlib.suppress(AlreadyExists):
        await policies.create_namespace("public/default", Policies(replication_clusters=[cluster]))

"""What the admin routes need from the process that serves them: :class:`AdminContext`.

The composition root (``magnetar standalone`` / ``broker``) builds one context and calls
:func:`magnetar.admin.rest.register_admin_routes` with the broker's router. Routes that manage metadata only
(clusters, tenants, namespaces and their policies, partitioned-topic metadata, topic-level policies) need the
:class:`~magnetar.broker.policies.store.PolicyStore` and the metadata store; broker-facing routes (brokers
list and health) go through :class:`BrokerDirectory`, a small protocol the broker implements.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ConfigDict, Field

from magnetar.admin.rest.bundle_host import BundleHost
from magnetar.admin.rest.topic_host import TopicHost
from magnetar.bookkeeper.metadata import MetadataStore
from magnetar.bookkeeper.runtime import SystemClock
from magnetar.broker.policies import PolicyStore
from magnetar.broker.schemas import SchemaRegistry, SchemaSettings
from magnetar.broker.security import BrokerSecurity
from magnetar.broker.settings import NamespaceDefaultsSettings
from magnetar.broker.wire import NamespaceName, TopicName


class AdminSettings(NamespaceDefaultsSettings):
    """Broker settings the admin API consults (Pulsar's names, unit last); the defaults of a namespace
    (bundles, retention, TTL, topic-level policies) are the broker's :class:`NamespaceDefaultsSettings`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster_name: str = "standalone"
    max_num_partitions_per_partitioned_topic: int = Field(default=0, ge=0)
    """0 = unlimited (Pulsar's ``maxNumPartitionsPerPartitionedTopic``); bounded by :data:`PARTITIONS_MAX`."""
    max_tenants: int = Field(default=0, ge=0)
    """0 = unlimited (Pulsar's ``maxTenants``)."""
    force_delete_tenant_allowed: bool = False
    force_delete_namespace_allowed: bool = False
    backlog_quota_default_limit_bytes: int = Field(default=-1, ge=-1)
    backlog_quota_default_limit_s: int = Field(default=-1, ge=-1)
    topics_listed_max: int = Field(default=100_000, ge=1)
    """Most topics one namespace listing returns (a bound on the answer's size)."""
    peer_request_timeout_ms: int = Field(default=10_000, ge=100, le=600_000)
    """Bound on one request to another broker's admin API (a partition's stats for ``partitioned-stats``),
    from connecting to the last byte of the answer."""
    peer_response_bytes_max: int = Field(default=16 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    """Largest answer accepted from another broker's admin API."""


PARTITIONS_MAX = 65_536
"""Magnetar's hard bound on partitions of one topic (each partition is a managed ledger)."""


class BrokerDirectory(Protocol):
    """The broker side of ``/admin/v2/brokers``: live brokers, this broker's identity, health, the bundles it
    owns and its settings."""

    async def active_brokers(self) -> list[str]:
        """Every live broker's id (``host:port`` of its HTTP service)."""
        ...

    async def healthy(self) -> bool: ...

    def broker_id(self) -> str:
        """This broker's id (``host:port``); empty when it serves no topics (a metadata-only tool)."""
        ...

    def owned_bundles(self) -> list[tuple[str, str]]:
        """``(namespace, bundle range)`` of every bundle this broker owns."""
        ...

    def runtime_configuration(self) -> dict[str, str]:
        """This broker's effective settings as text, secrets left out."""
        ...


@dataclass
class StaticBrokers:
    """A :class:`BrokerDirectory` for a single process (tests, tools): fixed brokers (the first is this one),
    always healthy unless ``health`` says otherwise."""

    broker_ids: list[str] = field(default_factory=list)
    health: Callable[[], Awaitable[bool]] | None = None
    bundles: list[tuple[str, str]] = field(default_factory=list)
    configuration: dict[str, str] = field(default_factory=dict)

    async def active_brokers(self) -> list[str]:
        return list(self.broker_ids)

    async def healthy(self) -> bool:
        return True if self.health is None else await self.health()

    def broker_id(self) -> str:
        return self.broker_ids[0] if self.broker_ids else ""

    def owned_bundles(self) -> list[tuple[str, str]]:
        return list(self.bundles)

    def runtime_configuration(self) -> dict[str, str]:
        return dict(self.configuration)


class NonPersistentDirectory(Protocol):
    """The non-persistent topics the ``/admin/v2/non-persistent/...`` routes answer: the ones loaded on
    this broker (:mod:`.non_persistent`)."""

    async def topics(self, namespace: NamespaceName) -> list[str]:
        """Full names (``non-persistent://...``) of the namespace's non-persistent topics loaded here."""
        ...

    async def bundles(self, namespace: NamespaceName) -> list[tuple[str, str | None]]:
        """The namespace's bundles, each with the HTTP URL of the broker owning it - ``""`` for this
        broker, None when nobody owns it (then it has no topic loaded anywhere)."""
        ...

    def topics_in_bundle(self, namespace: NamespaceName, bundle: str) -> list[str]:
        """Full names of the non-persistent topics of one bundle loaded here."""
        ...

    async def partitioned_topics(self, namespace: NamespaceName) -> list[str]:
        """Full names of the namespace's partitioned non-persistent topics."""
        ...

    def stats(self, topic: TopicName) -> dict[str, Any] | None:
        """Pulsar's ``NonPersistentTopicStats`` of a loaded topic; None when it is not loaded here."""
        ...

    def internal_stats(self, topic: TopicName) -> dict[str, Any] | None:
        """Pulsar's internal stats of a loaded topic (no ledgers); None when it is not loaded here."""
        ...

    def delete(self, topic: TopicName, *, force: bool) -> bool:
        """Drop a loaded topic (its sessions end); False when it is not loaded here. Raises
        ``AdminError`` 412 while it has clients and ``force`` is false."""
        ...


class NoNonPersistentTopics:
    """The directory of a process that serves no topics (metadata-only admin): nothing is loaded."""

    async def topics(self, namespace: NamespaceName) -> list[str]:
        return []

    async def bundles(self, namespace: NamespaceName) -> list[tuple[str, str | None]]:
        return []

    def topics_in_bundle(self, namespace: NamespaceName, bundle: str) -> list[str]:
        return []

    async def partitioned_topics(self, namespace: NamespaceName) -> list[str]:
        return []

    def stats(self, topic: TopicName) -> dict[str, Any] | None:
        return None

    def internal_stats(self, topic: TopicName) -> dict[str, Any] | None:
        return None

    def delete(self, topic: TopicName, *, force: bool) -> bool:
        return False


@dataclass
class AdminContext:
    """Everything the admin routes read or change."""

    metadata: MetadataStore
    settings: AdminSettings = field(default_factory=AdminSettings)
    brokers: BrokerDirectory = field(default_factory=StaticBrokers)
    topics: TopicHost | None = None
    """The broker's side of the topic routes; without it only metadata routes are served."""
    bundles: BundleHost | None = None
    """The broker's side of the bundle and load-manager routes (:mod:`.load_balance`)."""
    security: BrokerSecurity | None = None
    """Authentication, authorization and rate limits (:mod:`.access`); None: every call is allowed."""
    non_persistent: NonPersistentDirectory = field(default_factory=NoNonPersistentTopics)
    """The non-persistent topics the ``non-persistent`` routes answer (a broker's loaded ones)."""
    schema_registry: SchemaRegistry | None = None
    """The broker's schema registry; without one (an admin process without a broker) one with the default
    schema settings over the same metadata store."""
    policies: PolicyStore = field(init=False)
    schemas: SchemaRegistry = field(init=False)

    def __post_init__(self) -> None:
        self.policies = PolicyStore(self.metadata)
        self.schemas = self.schema_registry or SchemaRegistry(
            self.metadata, SchemaSettings().schema_limits(), SystemClock().time_ms
        )

"""Wiring the admin API, the retention service and the storage metrics into a running broker.

The broker's composition (:func:`magnetar.broker.run.run_broker`) takes three hooks; :class:`BrokerAdmin`
provides them from one set of broker settings:

* ``register_routes`` - the admin REST routes on the broker's router, with :class:`BrokerTopicHost` (the
  :class:`~magnetar.admin.rest.TopicHost` over the ``BrokerService``) and :class:`BrokerDirectoryAdapter`;
  the storage metrics join the broker's own metrics;
* ``on_trim_candidate`` and ``factory_services`` - the :class:`~magnetar.gc.retention.RetentionService`,
  fed by the stored policies and the broker's entry format.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr

from magnetar.admin.processes.metrics import register_storage_metrics
from magnetar.admin.processes.retention_policies import StoredPolicySource, entry_publish_time
from magnetar.admin.rest import (
    AdminContext,
    AdminError,
    AdminSettings,
    SubscriptionTraffic,
    TopicTraffic,
    register_admin_routes,
)
from magnetar.bookkeeper.metadata import MetadataStoreError
from magnetar.bookkeeper.runtime.http import Router
from magnetar.broker.core import (
    THROTTLED_STATS_FIELDS,
    NotOwnerError,
    PersistentTopic,
    ServiceError,
    SubscriptionBusyError,
    TopicNotFoundError,
)
from magnetar.broker.policies import PolicyError
from magnetar.broker.protocols.http_status import http_status
from magnetar.broker.service import BrokerService
from magnetar.broker.settings import BrokerSettings, NamespaceDefaultsSettings
from magnetar.broker.wire import InvalidTopicNameError, NamespaceName, TopicName
from magnetar.gc import BacklogQuotaMonitor, RetentionService, RetentionSettings, TopicRetentionPolicies
from magnetar.managed_ledger.ledger import ManagedLedger


class BrokerDirectoryAdapter:
    def __init__(self, service: BrokerService) -> None:
        self._service = service

    async def active_brokers(self) -> list[str]:
        return await self._service.ownership.active_brokers()

    async def healthy(self) -> bool:
        return self._service.ready

    def broker_id(self) -> str:
        return self._service.broker_id

    def owned_bundles(self) -> list[tuple[str, str]]:
        return sorted(self._service.ownership.owned) if self._service.ready else []

    def runtime_configuration(self) -> dict[str, str]:
        return runtime_configuration(self._service.settings)


SECRET_SETTINGS = frozenset({"token_secret_key", "token_public_key", "bookkeeper_auth_token"})
"""Settings whose value may be key or token material itself (not only a ``file://`` path)."""


def runtime_configuration(settings: BrokerSettings) -> dict[str, str]:
    """Pulsar's ``brokers/configuration/runtime``: every setting as text (JSON for what is not a string),
    by Magnetar's names; secrets are left out."""
    out: dict[str, str] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if name in SECRET_SETTINGS or isinstance(value, SecretStr):
            continue
        dumped = settings.model_dump(mode="json", include={name})[name]
        out[name] = dumped if isinstance(dumped, str) else json.dumps(dumped)
    return out


class BrokerBundleHost:
    """:class:`~magnetar.admin.rest.bundle_host.BundleHost` over the broker service and its load manager."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service

    async def owner_url(self, namespace: str, bundle: str) -> str | None:
        ownership = self._service.ownership
        if ownership.owns(namespace, bundle):
            return ""
        try:
            owner = await ownership.get_owner(namespace, bundle)
        except MetadataStoreError as exc:
            raise AdminError(503, f"reading the owner of {namespace}/{bundle} failed: {exc}") from None
        return None if owner is None else owner.httpUrl

    async def unload(self, namespace: str, bundle: str) -> None:
        try:
            await self._service.unload_bundle(namespace, bundle)
        except MetadataStoreError as exc:
            raise AdminError(503, f"unloading {namespace}/{bundle} failed: {exc}") from None

    async def split(self, namespace: str, bundle: str, unload: bool) -> tuple[str, str]:
        service = self._service
        try:
            if not service.ownership.owns(namespace, bundle):
                await service.ownership.acquire(namespace, bundle)
            return await service.split_bundle(namespace, bundle, unload)
        except NotOwnerError as exc:
            raise AdminError(409, str(exc)) from None
        except ServiceError as exc:
            raise AdminError(http_status(exc), str(exc)) from None
        except MetadataStoreError as exc:
            raise AdminError(503, f"splitting {namespace}/{bundle} failed: {exc}") from None

    async def unload_namespace(self, namespace: str) -> int:
        """Unload every owned bundle of the namespace: here, or by asking its owner through the load manager
        (the owner is read from the bundle's ownership node, so a bundle taken a moment ago is not missed)."""
        service = self._service
        try:
            policies = await service.policies.get_namespace(namespace)
            if policies is None:
                raise AdminError(404, "Namespace does not exist")
            count = 0
            for bundle in await service.bundle_names(namespace):
                owner = await self.owner_url(namespace, bundle)
                if owner == "":
                    await self.unload(namespace, bundle)
                elif owner is not None and service.load_manager is not None:
                    broker = owner.removeprefix("http://").removeprefix("https://")
                    await service.load_manager.request(broker, f"{namespace}/{bundle}", {"op": "unload"})
                else:
                    continue
                count += 1
        except ServiceError as exc:
            raise AdminError(http_status(exc), str(exc)) from None
        except (MetadataStoreError, PolicyError) as exc:
            raise AdminError(503, f"unloading {namespace} failed: {exc}") from None
        return count

    async def leader(self) -> dict[str, str] | None:
        manager = self._service.load_manager
        if manager is None:
            return None
        try:
            leader = await manager.leader()
        except MetadataStoreError as exc:
            raise AdminError(503, f"reading the leader broker failed: {exc}") from None
        return None if leader is None else {"serviceUrl": leader[1], "brokerId": leader[0]}

    def load_report(self) -> dict[str, Any]:
        manager = self._service.load_manager
        if manager is None:
            raise AdminError(404, "The load manager is off (load_balancer_enabled=false)")
        return manager.sample().to_json()


class BrokerTopicHost:
    """:class:`~magnetar.admin.rest.TopicHost` over the broker service."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service

    async def owner_url(self, topic: TopicName, *, authoritative: bool, tls: bool = False) -> str | None:
        owner = await self._service.owner_of(topic)
        if owner.httpUrl == self._service.http_url:
            return None
        return owner.httpUrlTls if tls and owner.httpUrlTls else owner.httpUrl

    async def load(self, topic: TopicName, *, create: bool) -> ManagedLedger | None:
        try:
            loaded = await self._service.get_topic(topic, create=create)
        except TopicNotFoundError:
            return None
        except NotOwnerError as exc:
            raise AdminError(503, f"Topic ownership moved: {exc}") from None
        return loaded.ml

    def _loaded(self, topic: TopicName) -> PersistentTopic | None:
        return self._service.topic_if_loaded(topic)

    async def delete(self, topic: TopicName, *, force: bool) -> None:
        try:
            await self._service.delete_topic(topic, force=force)
        except SubscriptionBusyError as exc:
            raise AdminError(412, str(exc)) from None
        except TopicNotFoundError:
            raise AdminError(404, "Topic not found") from None

    async def delete_subscription(self, topic: TopicName, subscription: str, *, force: bool) -> None:
        loaded = self._loaded(topic)
        if loaded is not None and subscription in loaded.subscriptions:
            try:
                await loaded.delete_subscription(subscription, force=force)
            except SubscriptionBusyError as exc:
                raise AdminError(412, str(exc)) from None
            return
        if loaded is not None:
            await loaded.ml.delete_cursor(subscription)

    async def cursor_moved(self, topic: TopicName, subscription: str) -> None:
        loaded = self._loaded(topic)
        sub = loaded.subscriptions.get(subscription) if loaded is not None else None
        if sub is not None:
            sub.cursor_moved()

    async def unload(self, topic: TopicName) -> None:
        await self._service.unload_topic(topic)

    def traffic(self, topic: TopicName) -> TopicTraffic:
        loaded = self._loaded(topic)
        if loaded is None:
            return TopicTraffic(ownerBroker=self._service.broker_id)
        stats = loaded.stats()
        subscriptions = {
            name: SubscriptionTraffic(
                type=str(sub.get("type", "Exclusive")),
                msgRateOut=float(sub.get("msgRateOut", 0.0)),
                msgThroughputOut=float(sub.get("msgThroughputOut", 0.0)),
                msgRateRedeliver=float(sub.get("msgRateRedeliver", 0.0)),
                msgOutCounter=int(sub.get("msgOutCounter", 0)),
                bytesOutCounter=int(sub.get("bytesOutCounter", 0)),
                unackedMessages=int(sub.get("unackedMessages", 0)),
                msgDelayed=int(sub.get("msgDelayed", 0)),
                blockedSubscriptionOnUnackedMsgs=bool(sub.get("blockedSubscriptionOnUnackedMsgs", False)),
                consumers=list(sub.get("consumers", [])),
                dispatchThrottled={key: int(sub.get(key, 0)) for key in THROTTLED_STATS_FIELDS},
            )
            for name, sub in stats["subscriptions"].items()
        }
        return TopicTraffic(
            msgRateIn=float(stats["msgRateIn"]),
            msgThroughputIn=float(stats["msgThroughputIn"]),
            msgRateOut=float(stats["msgRateOut"]),
            msgThroughputOut=float(stats["msgThroughputOut"]),
            bytesInCounter=int(stats["bytesInCounter"]),
            msgInCounter=int(stats["msgInCounter"]),
            bytesOutCounter=int(stats["bytesOutCounter"]),
            msgOutCounter=int(stats["msgOutCounter"]),
            publishers=list(stats["publishers"]),
            subscriptions=subscriptions,
            ownerBroker=self._service.broker_id,
            publishRateLimitedTimes=int(stats.get("publishRateLimitedTimes", 0)),
            deduplicationStatus=str(stats["deduplicationStatus"]),
        )


def retention_settings(settings: BrokerSettings) -> RetentionSettings:
    """The retention service's settings: the broker's own (they inherit :class:`RetentionSettings`)."""
    return settings


def admin_settings(settings: BrokerSettings) -> AdminSettings:
    defaults = {name: getattr(settings, name) for name in NamespaceDefaultsSettings.model_fields}
    return AdminSettings.model_validate({**defaults, "cluster_name": settings.cluster})


@dataclass
class BrokerAdmin:
    """Everything admin-side a broker needs; pass its members to ``run_broker``."""

    settings: BrokerSettings
    retention: RetentionService = field(init=False)
    context: AdminContext | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.retention = RetentionService(
            _LazyPolicies(self),
            retention_settings(self.settings),
            publish_time_of=entry_publish_time,
        )

    def register_routes(self, router: Router, service: BrokerService) -> None:
        self.retention.on_cursor_moved = functools.partial(_cursor_moved, service)
        service.publish_gate = QuotaGate(self.retention.quota)
        self.context = AdminContext(
            service.metadata,
            admin_settings(self.settings),
            BrokerDirectoryAdapter(service),
            topics=BrokerTopicHost(service),
            bundles=BrokerBundleHost(service),
            security=service.security,
            non_persistent=LoadedNonPersistentTopics(service),
            schema_registry=service.schemas,
        )
        register_admin_routes(router, self.context)
        register_storage_metrics(service.metrics, service.ml_factory, self.retention, self.settings.cluster)

    def run_kwargs(self) -> dict[str, Any]:
        """``run_broker(..., **admin.run_kwargs())``."""
        services: list[Callable[..., Awaitable[None]]] = [self.retention.run]
        return {
            "register_routes": self.register_routes,
            "on_trim_candidate": self.retention.on_trim_candidate,
            "factory_services": services,
        }


class LoadedNonPersistentTopics:
    """The admin routes' view of the broker's loaded non-persistent topics
    (:class:`~magnetar.admin.rest.context.NonPersistentDirectory`)."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service
        self._topics = service.non_persistent

    async def topics(self, namespace: NamespaceName) -> list[str]:
        return self._topics.names_in(namespace)

    async def bundles(self, namespace: NamespaceName) -> list[tuple[str, str | None]]:
        service = self._service
        try:
            names = await service.bundle_names(str(namespace))
            out: list[tuple[str, str | None]] = []
            for bundle in names:
                owner = await service.ownership.get_owner(str(namespace), bundle)
                if owner is None:
                    out.append((bundle, None))
                else:
                    out.append((bundle, "" if owner.httpUrl == service.http_url else owner.httpUrl))
        except (ServiceError, MetadataStoreError) as exc:
            raise AdminError(503, f"Failed to read the bundles of {namespace}: {exc}") from None
        return out

    def topics_in_bundle(self, namespace: NamespaceName, bundle: str) -> list[str]:
        return self._topics.names_in_bundle(namespace, bundle)

    async def partitioned_topics(self, namespace: NamespaceName) -> list[str]:
        return []  # Magnetar has no partitioned non-persistent topics

    def stats(self, topic: TopicName) -> dict[str, Any] | None:
        loaded = self._topics.loaded(topic)
        return None if loaded is None else loaded.stats()

    def internal_stats(self, topic: TopicName) -> dict[str, Any] | None:
        loaded = self._topics.loaded(topic)
        return None if loaded is None else loaded.internal_stats()

    def delete(self, topic: TopicName, *, force: bool) -> bool:
        try:
            self._topics.delete(topic, force=force)
        except SubscriptionBusyError as exc:
            raise AdminError(412, str(exc)) from None
        except TopicNotFoundError:
            return False
        return True


class QuotaGate:
    """The broker's :class:`~magnetar.broker.policies.publish_gate.PublishGate` over the retention service's
    quotas."""

    def __init__(self, quota: BacklogQuotaMonitor) -> None:
        self._quota = quota

    @property
    def any_exceeded(self) -> bool:
        return self._quota.any_exceeded

    def admission(self, ml_name: str) -> str:
        return self._quota.verdict(ml_name).value

    async def wait_until_within_quota(self, ml_name: str) -> None:
        await self._quota.wait_until_within_quota(ml_name)


def _cursor_moved(service: BrokerService, ml: ManagedLedger, cursor: str) -> None:
    try:
        topic = TopicName.from_managed_ledger_name(ml.name)
    except InvalidTopicNameError:
        return
    loaded = service.topic_if_loaded(topic)
    subscription = loaded.subscriptions.get(cursor) if loaded is not None else None
    if subscription is not None:
        subscription.cursor_moved()


class _LazyPolicies:
    """The policy source exists once the routes are registered (the metadata store comes with the service)."""

    def __init__(self, admin: BrokerAdmin) -> None:
        self._admin = admin
        self._source: StoredPolicySource | None = None

    async def policies_for(self, ml_name: str) -> TopicRetentionPolicies:
        if self._source is None:
            context = self._admin.context
            assert context is not None, "the retention service runs only after the routes are registered"
            self._source = StoredPolicySource(context.policies, self._admin.retention.settings)
        return await self._source.policies_for(ml_name)

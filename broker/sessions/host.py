"""What the session front door needs of the broker that runs it, as protocols: the broker's service
(:mod:`magnetar.broker.service`) satisfies :class:`SessionHost`; the HTTP application composes the front door,
which never imports the service, so the folders stay a line and not a circle. The front door
also hands the host to the owner proxy, so a session host is a proxy host too."""

from __future__ import annotations

from typing import Protocol

from magnetar.broker.core import NonPersistentTopic, PersistentTopic
from magnetar.broker.owner_proxy.host import ProxyHost, ProxyHostSettings
from magnetar.broker.policies import PublishGate
from magnetar.broker.schemas import SchemaRegistry
from magnetar.broker.security import BrokerSecurity
from magnetar.broker.wire import NamespaceName, TopicName


class SessionSettings(ProxyHostSettings, Protocol):
    @property
    def producer_pending_messages_max(self) -> int: ...
    @property
    def publish_batch_messages_max(self) -> int: ...
    @property
    def publish_batch_bytes_max(self) -> int: ...
    @property
    def consumer_unacked_messages_max(self) -> int: ...
    @property
    def consumer_unacked_bytes_max(self) -> int: ...
    @property
    def consumer_ack_timeout_tick_ms(self) -> int: ...
    @property
    def ws_close_flush_timeout_ms(self) -> int: ...
    @property
    def authentication_refresh_check_seconds(self) -> int: ...


class SessionHost(ProxyHost, Protocol):
    """The broker's service, as the front door sees it."""

    @property
    def settings(self) -> SessionSettings: ...
    @property
    def security(self) -> BrokerSecurity: ...
    @property
    def schemas(self) -> SchemaRegistry: ...
    @property
    def publish_gate(self) -> PublishGate | None:
        """Backlog-quota admission, when the composition root set one."""
        ...

    def next_producer_name(self) -> str: ...
    async def live_broker_native_urls(self) -> dict[str, str]:
        """The binary addresses the cluster's live brokers registered (this broker's included, advertised
        listeners' too), each with the address a relay to it dials (the broker's own URL of that kind)."""
        ...

    async def partitions(self, topic: TopicName) -> int:
        """Partitions of a partitioned topic (0: not partitioned)."""
        ...

    async def namespace_topics(
        self, namespace: NamespaceName, *, persistent: bool, non_persistent: bool
    ) -> list[str]:
        """Full names of the namespace's topics (GET_TOPICS_OF_NAMESPACE)."""
        ...

    async def serve_topic(
        self, topic: TopicName, *, create: bool = True
    ) -> PersistentTopic | NonPersistentTopic: ...

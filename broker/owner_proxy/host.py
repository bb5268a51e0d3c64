"""What the owner proxy needs of the broker that runs it, as protocols: the proxy is composed by the broker's
service (:mod:`magnetar.broker.service` satisfies :class:`ProxyHost`) and never imports it, so the folders
stay a line and not a circle (``tests/unit/test_architecture.py``).

:class:`RelaySettings` are the bounds a relay reads (:class:`~.settings.ProxySettings` has them);
:class:`ProxyHostSettings` adds the broker-wide settings the proxy reads to reach an owner (the cluster, the
bind address, the trusted certificates, the WebSocket frame bound)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Protocol

from magnetar.bookkeeper.runtime.http import HttpLimits
from magnetar.broker.ownership import Resolution
from magnetar.broker.wire import TopicName


class RelaySettings(Protocol):
    @property
    def ws_proxy_connect_timeout_ms(self) -> int: ...
    @property
    def ws_proxy_reconnect_backoff_initial_ms(self) -> int: ...
    @property
    def ws_proxy_reconnect_backoff_max_ms(self) -> int: ...
    @property
    def ws_proxy_reconnect_deadline_ms(self) -> int: ...
    @property
    def ws_proxy_buffer_messages_max(self) -> int: ...
    @property
    def ws_proxy_buffer_bytes_max(self) -> int: ...
    @property
    def ws_proxy_pending_messages_max(self) -> int: ...


class ProxyHostSettings(RelaySettings, Protocol):
    @property
    def cluster(self) -> str: ...
    @property
    def bind_address(self) -> str: ...
    @property
    def tls_trust_certs_file(self) -> Path | None: ...
    @property
    def http(self) -> HttpLimits: ...
    @property
    def broker_client_tls_enabled(self) -> bool: ...
    @property
    def broker_client_tls_hostname_verification(self) -> bool: ...
    @property
    def broker_client_tls_trust_certs_file(self) -> Path | None: ...
    @property
    def ws_proxy_enabled(self) -> bool: ...
    @property
    def ws_proxy_sessions_max(self) -> int: ...
    @property
    def ws_proxy_redirects_max(self) -> int: ...
    @property
    def ws_proxy_partition_opens_max(self) -> int: ...
    @property
    def ws_proxy_partition_prefetch_messages(self) -> int: ...


class ProxyHost(Protocol):
    """The broker's service, as the proxy sees it."""

    @property
    def settings(self) -> ProxyHostSettings: ...
    @property
    def http_url(self) -> str:
        """This broker's HTTP URL (the ``x-magnetar-proxied-by`` mark of an upstream session)."""
        ...

    @property
    def rng(self) -> random.Random: ...
    async def lookup(self, topic: TopicName) -> Resolution:
        """Where ``topic`` is served (the owner to relay to)."""
        ...

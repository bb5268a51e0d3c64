"""Settings of the owner proxy (:mod:`magnetar.broker.owner_proxy`): a WebSocket session opened on
a broker that does not own its topic is served through that broker, relayed to the owner.

Every bound of the proxy is here, with its unit last. Pulsar's names where Pulsar has the concept
(``brokerClientTrustCertsFilePath`` is ``broker_client_tls_trust_certs_file``). The proxy has no credentials
of its own: an upstream session carries the client's (:mod:`magnetar.broker.owner_proxy.upstream`),
so the owner authorizes the client's role, and no broker role needs rights on tenants' topics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings

Millis = Annotated[int, Field(ge=1, le=3_600_000)]


class ProxySettings(BaseSettings):
    ws_proxy_enabled: bool = True
    """Serve a WebSocket session for a topic owned by another broker through this broker (off: answer it
    307 to the owner, as before)."""
    ws_proxy_sessions_max: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000
    """Upstream sessions (connections to owners) this broker's proxy holds at once: one per proxied session,
    one per partition for a session on a partitioned topic; a session that would pass it is answered 503."""
    ws_proxy_connect_timeout_ms: Millis = 5_000
    """One attempt to open the session on the owner: TCP connect, TLS, upgrade (redirects included)."""
    ws_proxy_redirects_max: Annotated[int, Field(ge=0, le=20)] = 5
    """307s an attempt follows (the lookup may name the leader, which names the broker it chose)."""
    ws_proxy_reconnect_backoff_initial_ms: Millis = 100
    """Wait after the first failed attempt to reach the topic's (new) owner; doubled after each failure."""
    ws_proxy_reconnect_backoff_max_ms: Millis = 2_000
    """Longest wait between two attempts."""
    ws_proxy_reconnect_deadline_ms: Millis = 60_000
    """How long the proxy tries to reach the topic's owner after the owner's session ended (or, for a new
    session, before answering 503). It must outlast the metadata session timeout: after an owner's crash its
    bundles are free again only when its session expires. When it passes the client's session is closed
    with 1001, so the client looks the topic up again."""
    ws_proxy_buffer_messages_max: Annotated[int, Field(ge=0, le=1_000_000)] = 1_000
    """Client frames held while the proxy reconnects, forwarded once it has (then in order). A producer's
    message that finds the buffer full is answered with an error; a consumer's frame waits for room."""
    ws_proxy_buffer_bytes_max: Annotated[int, Field(ge=0, le=1 << 30)] = 8 << 20
    """The same buffer's bound in bytes."""
    ws_proxy_pending_messages_max: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000
    """A producer's messages forwarded to the owner and not yet answered; at the bound the proxy reads no
    more from the client until answers come (TCP carries the back-pressure to the client)."""
    ws_proxy_partition_prefetch_messages: Annotated[int, Field(ge=1, le=100_000)] = 100
    """A pull-mode consumer of a partitioned topic served through the proxy (one upstream session per
    partition): the permits the proxy keeps granted to each partition's session, as Pulsar's multi-topic
    consumer prefetches per partition. Deliveries beyond the client's own permits wait in the proxy, so it
    holds at most this many messages per partition."""
    ws_proxy_partition_opens_max: Annotated[int, Field(ge=1, le=1_000)] = 16
    """A session on a partitioned topic opens its upstream sessions (one per partition) this many at a
    time."""
    binary_proxy_enabled: bool = False
    """Pulsar binary clients that can reach one address only (a Kubernetes Service, a load balancer): lookups
    answer ``proxy_through_service_url``, so the client keeps connecting to its service address and names the
    owner in CONNECT, and this broker relays such a connection to the owner it names - a live broker of the
    cluster, never another address - after authenticating the client as it would itself
    (:mod:`magnetar.broker.sessions.binary_relay`). Off: lookups name the owner to connect to directly, as
    Pulsar's brokers do, and a CONNECT naming another broker is refused."""
    binary_proxy_connections_max: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000
    """Binary connections this broker relays to owners at once; a CONNECT beyond it is refused
    (``ServiceNotReady``)."""
    binary_proxy_connect_timeout_ms: Millis = 5_000
    """Reaching the owner of a relayed binary connection: TCP connect and TLS handshake."""
    broker_client_tls_enabled: bool = False
    """Open upstream sessions over TLS (``wss://``, the owner's ``httpUrlTls``) even when the owner also
    serves plain HTTP. An owner that serves only TLS is always reached over TLS."""
    broker_client_tls_trust_certs_file: Path | None = None
    """The CA certificates the upstream sessions trust; unset: ``tls_trust_certs_file``, else the system's."""
    broker_client_tls_hostname_verification: bool = True

    @model_validator(mode="after")
    def _check_proxy(self) -> Self:
        if self.ws_proxy_reconnect_backoff_initial_ms > self.ws_proxy_reconnect_backoff_max_ms:
            raise ValueError(
                "ws_proxy_reconnect_backoff_initial_ms must not exceed ws_proxy_reconnect_backoff_max_ms"
            )
        if self.ws_proxy_reconnect_backoff_max_ms > self.ws_proxy_reconnect_deadline_ms:
            raise ValueError(
                "ws_proxy_reconnect_backoff_max_ms must not exceed ws_proxy_reconnect_deadline_ms"
            )
        return self

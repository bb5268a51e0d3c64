"""Limits and addresses of the HTTP/WebSocket server.

Every buffer, queue and timeout of :mod:`magnetar.bookkeeper.runtime.http` is named here, unit last. The
defaults follow the Jetty/Pulsar settings they stand for where one exists (``http_header_bytes_max`` is
Jetty's 8 KiB request-header limit, ``http_connections_max`` Pulsar's ``maxHttpServerConnections``,
``ws_idle_timeout_ms`` Pulsar's ``webSocketSessionIdleTimeoutMillis``). The limits (:class:`HttpLimits`)
are a plain pydantic model that a process's settings model composes whole (the broker's ``http``), each field
still reached by its flat name as a config key and a ``MAGNETAR_<NAME>`` environment variable;
:class:`HttpSettings` adds the address and port of one server, which each process sets from its own
(``bind_address``, ``http_port``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

MIB = 1024 * 1024


class HttpLimits(BaseModel):
    """Every limit and timeout of an HTTP/WebSocket server (not its address)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    http_header_bytes_max: int = Field(default=8192, ge=256)
    """Request line plus headers; a larger head is answered 431."""
    http_body_bytes_max: int = Field(default=10 * MIB, ge=0)
    """Request body; a larger body is answered 413 (before it is read when Content-Length says so)."""
    http_bodies_in_flight_bytes_max: int = Field(default=64 * MIB, ge=0)
    """Request bodies being read or handled at once, across the connections of a server (a port); a body
    that does not fit waits (unread) until its request's deadline, then is answered 503. At least
    ``http_body_bytes_max``."""
    http_bodies_in_flight_bytes_per_role_max: int = Field(default=16 * MIB, ge=0)
    """The share of ``http_bodies_in_flight_bytes_max`` one caller may hold: the role its token names, or
    its address when the route takes no token; beyond it the caller's next body waits like one that does not
    fit the budget. Taken as at least ``http_body_bytes_max`` (a caller can always send one body) and at most
    ``http_bodies_in_flight_bytes_max`` (:meth:`body_share_bytes`)."""
    http_idle_timeout_ms: int = Field(default=30_000, gt=0)
    """A keep-alive connection with no request in progress is closed after this long."""
    http_request_timeout_ms: int = Field(default=30_000, gt=0)
    """Once a request has started arriving, all of it (head and body) must arrive within this; else 408."""
    http_send_timeout_ms: int = Field(default=30_000, gt=0)
    """One write to a peer's socket; a peer that reads nothing for this long is disconnected."""
    http_connections_max: int = Field(default=2048, ge=1)
    """Open connections (HTTP and WebSocket); beyond it a new connection is answered 503 and closed."""
    http_connections_per_ip_max: int = Field(default=256, ge=0)
    """Open connections from one client address; beyond it a new one is answered 429 and closed. 0: no
    limit (Pulsar's ``brokerMaxConnectionsPerIp`` default, under which one address could hold every
    connection and every descriptor). 256 leaves an eighth of the default ``http_connections_max`` to one
    address: raise it for a proxy or load balancer that brings many clients from one address. A broker does
    not count connections from its cluster's other live brokers (their owner proxies) here."""
    http_tls_handshake_timeout_ms: int = Field(default=10_000, gt=0)
    """When serving TLS, a new connection must complete its handshake within this, else it is closed."""

    ws_frame_bytes_max: int = Field(default=5 * MIB, ge=125)
    """One received WebSocket message, reassembled from its fragments; larger closes with 1009."""
    ws_message_fragments_max: int = Field(default=4096, ge=1, le=1 << 20)
    """Frames one received WebSocket message may arrive in; more closes with 1008 (a 5 MiB message still
    fits in fragments of 1,280 bytes)."""
    ws_received_bytes_in_flight_max: int = Field(default=128 * MIB, ge=125)
    """Received WebSocket bytes not handled yet (unfinished messages and receive queues), across the sessions
    of a server (a port); over it the session holding the largest unfinished message is closed with 1013 and
    its message dropped, and when complete messages alone fill it every session stops reading until the
    broker has taken some (:mod:`.ws_budget`). At least ``ws_frame_bytes_max``."""
    ws_message_timeout_ms: int = Field(default=30_000, gt=0)
    """A received WebSocket message (or frame) that has started arriving must be complete within this, else
    the session is closed with 1008; the time the broker makes it wait (reading paused) does not count."""
    ws_idle_timeout_ms: int = Field(default=300_000, gt=0)
    """A WebSocket with no frame received or sent for this long is closed with 1001."""
    ws_send_queue_bytes_max: int = Field(default=1 * MIB, ge=1)
    """Encoded frames waiting for the socket; a sender waits while the queue holds more than this, and the
    socket is not read meanwhile (a peer that does not read cannot make us queue pongs without end). The
    broker applies it a second time to a session's outbound queue of messages (its dispatchers stop and its
    handlers wait while the queue holds more)."""
    ws_send_queue_messages_max: int = Field(default=4096, ge=1)
    """Messages an application queues for a session before it waits (the broker's outbound queue of a
    WebSocket session); the bytes are bounded by ``ws_send_queue_bytes_max``."""
    ws_receive_queue_bytes_max: int = Field(default=1 * MIB, ge=1)
    """Received messages waiting for ``receive()``; the socket is not read while it holds more."""
    ws_receive_queue_messages_max: int = Field(default=4096, ge=1)
    """Received messages waiting for ``receive()``, counted (an empty message counts as one); the socket is
    not read while more are waiting."""
    ws_close_timeout_ms: int = Field(default=5_000, gt=0)
    """After sending a Close frame, how long to wait for the peer's Close before dropping the socket."""

    shutdown_grace_ms: int = Field(default=10_000, ge=0)
    """On shutdown, in-flight requests and WebSocket closing handshakes get this long before cancellation."""

    def body_share_bytes(self) -> int:
        """The share of the body budget one caller may hold, as applied."""
        share = max(self.http_bodies_in_flight_bytes_per_role_max, self.http_body_bytes_max)
        return min(share, self.http_bodies_in_flight_bytes_max)

    @model_validator(mode="after")
    def _check_relations(self) -> HttpLimits:
        if self.ws_close_timeout_ms > self.ws_idle_timeout_ms:
            raise ValueError("ws_close_timeout_ms must not exceed ws_idle_timeout_ms")
        if self.http_bodies_in_flight_bytes_max < self.http_body_bytes_max:
            raise ValueError("http_bodies_in_flight_bytes_max must be at least http_body_bytes_max")
        if self.ws_received_bytes_in_flight_max < self.ws_frame_bytes_max:
            raise ValueError("ws_received_bytes_in_flight_max must be at least ws_frame_bytes_max")
        return self


class HttpPortSettings(BaseModel):
    """The port of a process's HTTP server, declared once: one server's settings (:class:`HttpSettings`),
    a broker's and ``magnetar standalone``'s inherit it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    http_port: int = Field(default=8080, ge=0, le=65535)
    """TCP port of the HTTP server (a broker's: WebSocket API, admin REST, lookup and ``/metrics``; the
    standalone's serves its bookies' HTTP API too); 0 picks a free one (the bound port is reported by
    ``serve_http``)."""


class HttpListenSettings(HttpPortSettings):
    """Where a broker (or ``magnetar standalone``) listens: its address and its HTTP port, declared once."""

    bind_address: str = "127.0.0.1"
    """Address the process listens on (loopback by default: a developer's machine; ``0.0.0.0`` for every
    IPv4 interface)."""


class HttpSettings(HttpLimits, HttpPortSettings):
    """The settings of one server: its limits and where it listens."""

    http_bind_address: str = "0.0.0.0"
    """Address to listen on; ``0.0.0.0`` for every IPv4 interface, ``127.0.0.1`` in tests."""

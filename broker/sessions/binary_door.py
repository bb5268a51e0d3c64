"""The front door of Pulsar's binary protocol: the ``pulsar://`` listener (``broker_service_port``).

One connection carries any number of producers and consumers, each named by the client's id. This module
does for a connection what :mod:`.front_door` does for a WebSocket session - authentication (a token in
CONNECT's ``auth_data``, method ``token``), authorization, binding producers and subscriptions to topics
(the core's :class:`~magnetar.broker.core.Producer` and ``subscribe``), and closing them when the client or
the topic goes away - and hands the rest to the adapter (:mod:`magnetar.broker.protocols.pulsar_binary`):
frames, the SEND payloads as publish requests, deliveries as MESSAGE commands, acknowledgements as
positions. A malformed frame ends its connection only (with an ERROR naming the fault when the stream can
still carry one); commands Magnetar does not serve are answered with an error that names them.
The same door serves the TLS port (``broker_service_port_tls``, ``pulsar+ssl://``): each connection's TLS
handshake runs in its own task, bounded in time, before the first command is read; a client that fails it
(plain text, garbage, a stalled handshake) loses that connection only.
``docs/binary-protocol.md`` describes the protocol as served.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import trio

from magnetar.bookkeeper.runtime.auth.authentication import Principal
from magnetar.bookkeeper.runtime.auth.errors import AuthenticationError
from magnetar.bookkeeper.runtime.auth.tls import TlsHandshakeError, client_ssl_context, handshake
from magnetar.broker.core import (
    COMPACT_ALONE,
    Consumer,
    DeliveryDelayTooLongError,
    FlowControl,
    KeySharedPolicy,
    ServiceError,
    Subscriber,
    SubscriptionType,
)
from magnetar.broker.protocols.pulsar_binary.commands import (
    NO_REQUEST,
    PROTOCOL_VERSION_MAX,
    Ack,
    AckType,
    AuthResponse,
    CloseHandle,
    Command,
    Connect,
    CreateProducer,
    Flow,
    Lookup,
    PartitionedMetadata,
    Ping,
    Pong,
    Redeliver,
    Send,
    ServerError,
    Subscribe,
    Unsubscribe,
    UnsupportedCommand,
    decode_command,
)
from magnetar.broker.protocols.pulsar_binary.connection import (
    ConsumerDeliveries,
    Outbound,
    SendCompletion,
    SendRefused,
    compact_messages,
)
from magnetar.broker.protocols.pulsar_binary.consumer_commands import GetLastMessageId, Seek
from magnetar.broker.protocols.pulsar_binary.encoders import (
    encode_ack_response,
    encode_auth_challenge,
    encode_close_consumer,
    encode_connected,
    encode_error,
    encode_lookup_failed,
    encode_lookup_response,
    encode_partitions,
    encode_partitions_failed,
    encode_ping,
    encode_pong,
    encode_send_error,
    encode_success,
)
from magnetar.broker.protocols.pulsar_binary.errors import server_error_of
from magnetar.broker.protocols.pulsar_binary.framing import (
    CHUNKED_MESSAGE_BYTES_MAX_DEFAULT,
    FRAME_PADDING,
    MAX_MESSAGE_SIZE_DEFAULT,
    Frame,
    FrameDecoder,
    FrameError,
    PayloadError,
    encode_frame,
)
from magnetar.broker.protocols.pulsar_binary.protobuf import ProtobufError
from magnetar.broker.protocols.pulsar_binary.schema_commands import GetOrCreateSchema, GetSchema
from magnetar.broker.protocols.pulsar_binary.topic_list import GetTopics
from magnetar.broker.sessions import binary_consumers
from magnetar.broker.sessions.binary_producers import PendingProducer, ProducerRequests
from magnetar.broker.sessions.binary_producers import ProducerHandle as _ProducerHandle
from magnetar.broker.sessions.binary_relay import (
    LIVE_URLS_TTL_S,
    BinaryRelay,
    RelayRefused,
    RelayTarget,
    broker_address,
)
from magnetar.broker.sessions.binary_schemas import (
    SchemaRefusal,
    answer_get_or_create_schema,
    answer_get_schema,
    consumer_schema,
)
from magnetar.broker.sessions.binary_topics import answer_get_topics
from magnetar.broker.wire import (
    InvalidTopicNameError,
    TopicName,
    compact_entry_bytes,
    listener_named,
    parse_topic_name,
    unknown_listener,
)

if TYPE_CHECKING:
    from magnetar.broker.sessions.host import SessionHost, SessionSettings


ENTRY_FIELDS_MAX = 4 * 1024
"""An entry's bytes beyond its compact messages, at most: head, producer name (1 KiB), chunk head and uuid
(2 KiB). A SEND further than this below the bound needs no exact count."""
ENTRY_ROOM = 8 * 1024
"""Bytes kept free in an entry beyond the ``max_message_size`` CONNECTED announces: the entry's head, the
producer name and a chunk's uuid (each at most 1 KiB or 2 KiB), the key and properties of a message of usual
size, and the managed ledger's prefix."""

log = logging.getLogger(__name__)

TLS_HANDSHAKE_TIMEOUT_S = 10.0
"""A connection to the TLS port completes its TLS handshake within this, else it is closed."""
HANDLES_MAX = 10_000
SEQUENCE_ID_MAX = 2**63 - 1
"""A SEND's sequence ids are Java ``long`` values: a ``uint64`` beyond is refused (NotAllowedError, which a
client does not retry) instead of failing as a write would, over and over."""
"""Producers plus consumers one connection may hold."""
RECEIVE_BYTES = 64 * 1024
_SUB_TYPES = {
    0: SubscriptionType.EXCLUSIVE,
    1: SubscriptionType.SHARED,
    2: SubscriptionType.FAILOVER,
    3: SubscriptionType.KEY_SHARED,
}


_AUTO_SPLIT, _STICKY = 0, 1
"""KeySharedMeta's ``keySharedMode`` values."""


class _Closed(Exception):
    """The connection ends (the reason is logged)."""


@dataclass
class _ConsumerHandle:
    subscriber: Subscriber
    sink: ConsumerDeliveries
    flow: FlowControl
    sub_type: SubscriptionType

    def close(self) -> None:
        self.subscriber.close()  # first: what the sink holds unsent goes back to the subscription
        self.sink.close()


@dataclass
class _Connection:
    stream: trio.abc.Stream
    address: str
    tls: bool = False
    outbound: Outbound = field(default_factory=Outbound)
    principal: Principal | None = None
    protocol_version: int = 0
    producers: dict[int, _ProducerHandle] = field(default_factory=dict)
    pending_producers: dict[int, PendingProducer] = field(default_factory=dict)
    nursery: trio.Nursery | None = None
    consumers: dict[int, _ConsumerHandle] = field(default_factory=dict)
    received_since_tick: bool = True
    challenged: bool = False
    """An AUTH_CHALLENGE is out and unanswered."""
    ping_outstanding: bool = False
    relaying: bool = False
    """The connection is relayed to its owner (:mod:`.binary_relay`): this broker sends nothing of its own."""
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    def send(self, command: bytes) -> None:
        self.outbound.push(encode_frame(command))


class BinaryFrontDoor:
    """Serves Pulsar binary-protocol connections for one broker (see the module docstring)."""

    def __init__(
        self,
        service: SessionHost,
        *,
        broker_url: Callable[[], str],
        broker_url_tls: Callable[[], str] = lambda: "",
        ssl_context: ssl.SSLContext | None = None,
        keepalive_s: float = 30.0,
        max_message_size: int = MAX_MESSAGE_SIZE_DEFAULT,
        chunked_message_bytes_max: int = CHUNKED_MESSAGE_BYTES_MAX_DEFAULT,
        entry_bytes_max: int = MAX_MESSAGE_SIZE_DEFAULT,
    ) -> None:
        """``keepalive_s``: the setting ``keep_alive_interval_seconds`` (Pulsar's
        ``keepAliveIntervalSeconds``), also the time a connection has from its start (after TLS) to its
        CONNECT, as Pulsar's. ``max_message_size`` (bytes: the setting) bounds a frame at itself plus
        :data:`FRAME_PADDING`; ``chunked_message_bytes_max`` (bytes) the whole message a chunk claims;
        ``entry_bytes_max`` (bytes) the broker's entry a SEND is stored as (what the managed ledger accepts).
        CONNECTED announces the smaller of ``max_message_size`` and ``entry_bytes_max`` less
        :data:`ENTRY_ROOM` (room for the entry's own fields), so that what an official client sends - a whole
        message, or a chunk it sized by that figure - fits an entry; a SEND whose entry would not fit anyway
        (large keys or properties, a forged client) is answered ``SEND_ERROR NotAllowedError`` before it is
        published."""
        self._service = service
        self._broker_url = broker_url
        self._broker_url_tls = broker_url_tls
        self._ssl_context = ssl_context
        self._frame_bytes_max = max_message_size + FRAME_PADDING
        self._max_message_size = min(max_message_size, entry_bytes_max - ENTRY_ROOM)
        self._entry_bytes_max = entry_bytes_max
        self._chunked_message_bytes_max = chunked_message_bytes_max
        self._keepalive_s = keepalive_s
        self._producers = ProducerRequests(service, self._topic)
        self.connections = 0
        self._relay: BinaryRelay | None = None
        self._live_urls_read: tuple[float, dict[str, str]] | None = None

    async def serve_tls(self, stream: trio.SocketStream) -> None:
        """One client connection to the TLS port: the handshake (bounded), then as :meth:`serve`."""
        assert self._ssl_context is not None
        address = _address(stream)
        wrapped = trio.SSLStream(stream, self._ssl_context, server_side=True)
        try:
            await handshake(wrapped, TLS_HANDSHAKE_TIMEOUT_S)
        except TlsHandshakeError as exc:
            log.info("binary TLS connection %s: %s", address, exc)
            await trio.aclose_forcefully(stream)
            return
        await self._serve(wrapped, address, tls=True)

    async def serve(self, stream: trio.SocketStream) -> None:
        """One client connection, until either side ends it."""
        await self._serve(stream, _address(stream), tls=False)

    async def _serve(self, stream: trio.abc.Stream, address: str, *, tls: bool) -> None:
        conn = _Connection(stream, address, tls)
        self.connections += 1
        try:
            async with trio.open_nursery() as nursery:
                conn.nursery = nursery
                nursery.start_soon(self._write, conn)
                nursery.start_soon(self._keepalive, conn)
                nursery.start_soon(self._refresh, conn)
                with conn.scope:
                    try:
                        await self._read(conn)
                    except _Closed as exc:
                        log.info("binary connection %s closed: %s", address, exc)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                # what is queued (an ERROR naming the fault) goes out before the close, bounded in time
                with trio.move_on_after(1.0):
                    while conn.outbound.bytes:  # noqa: ASYNC110 (the writer owns the queue)
                        await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
        finally:
            self.connections -= 1
            conn.outbound.closed = True
            self._release(conn)
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()

    # -- I/O ---------------------------------------------------------------------------------------

    async def _write(self, conn: _Connection) -> None:
        try:
            while True:
                frames = await conn.outbound.take()
                data = b"".join(frames)
                await conn.stream.send_all(data)
                conn.outbound.written(len(data))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            conn.scope.cancel()

    async def _keepalive(self, conn: _Connection) -> None:
        with trio.move_on_after(self._keepalive_s):
            while conn.principal is None:  # noqa: ASYNC110 (the reader sets it)
                await trio.sleep(0.1)
        if conn.principal is None:
            log.info(
                "binary connection %s: no CONNECT within keep_alive_interval_seconds=%s",
                conn.address,
                self._keepalive_s,
            )
            conn.scope.cancel()
            return
        while True:
            await trio.sleep(self._keepalive_s)
            if conn.relaying:
                return  # the owner keeps the relayed connection alive
            if conn.received_since_tick:
                conn.received_since_tick = False
                conn.ping_outstanding = False
                continue
            if conn.ping_outstanding:
                log.info("binary connection %s: no answer to PING", conn.address)
                conn.scope.cancel()
                return
            conn.ping_outstanding = True
            conn.send(encode_ping())

    async def _refresh(self, conn: _Connection) -> None:
        """Pulsar's authentication refresh: an expired token gets one AUTH_CHALLENGE; still expired (no valid
        AUTH_RESPONSE) at the next check, the connection ends."""
        interval = self._service.settings.authentication_refresh_check_seconds
        while True:
            await trio.sleep(interval)
            if conn.relaying:
                return  # the owner refreshes the relayed connection's credentials
            principal = conn.principal
            if principal is None or principal.expires_at_ms is None:
                continue
            if time.time() * 1000 < principal.expires_at_ms:
                conn.challenged = False
                continue
            if conn.challenged:
                log.info("binary connection %s: token expired, not refreshed", conn.address)
                conn.send(
                    encode_error(
                        NO_REQUEST, ServerError.AuthenticationError, "Failed to authenticate: token expired"
                    )
                )
                conn.scope.cancel()
                return
            conn.challenged = True
            conn.send(encode_auth_challenge("token", conn.protocol_version))

    async def _read(self, conn: _Connection) -> None:
        decoder = FrameDecoder(self._frame_bytes_max)
        while True:
            # A client that does not read its answers (PONGs, receipts, errors) stops being read once its
            # outbound queue is full, else every command it sends would queue one more answer without bound
            # (a flood of 34 MiB of PINGs held 165 MB); TCP then holds its sender back, the keepalive ends it.
            while conn.outbound.bytes >= conn.outbound.bytes_max:  # noqa: ASYNC110 (the writer drains it)
                await trio.sleep(0.01)
            data = await conn.stream.receive_some(RECEIVE_BYTES)
            if not data:
                raise _Closed("the client closed the connection")
            decoder.receive_data(data)
            while True:
                try:
                    frame = decoder.next_frame()
                except FrameError as exc:
                    conn.send(encode_error(NO_REQUEST, ServerError.UnknownError, f"Invalid frame: {exc}"))
                    raise _Closed(f"invalid frame: {exc}") from None
                if frame is None:
                    break
                conn.received_since_tick = True
                try:
                    command = decode_command(frame.command)
                except ProtobufError as exc:
                    conn.send(encode_error(NO_REQUEST, ServerError.UnknownError, f"Invalid command: {exc}"))
                    raise _Closed(f"invalid command: {exc}") from None
                if isinstance(command, Connect) and command.proxy_to_broker_url and conn.principal is None:
                    outcome = await self._relayed(conn, command, frame, decoder)
                    if outcome == "relayed":
                        raise _Closed(f"relayed connection to {command.proxy_to_broker_url} ended")
                    if outcome == "answered":
                        continue  # it named one of this broker's listeners: authenticated and answered
                await self._handle(conn, command, frame)

    async def _relayed(
        self, conn: _Connection, command: Connect, frame: Frame, decoder: FrameDecoder
    ) -> Literal["here", "answered", "relayed"]:
        """A CONNECT naming a broker (``proxy_to_broker_url``): ``here`` when it names this broker's own
        address (:meth:`_handle` serves it), ``answered`` when it names one of this broker's advertised
        listeners (found once the client was authenticated: CONNECTED sent here), else the client is
        authenticated here and its connection relayed to that broker until either side ends it
        (:mod:`.binary_relay`): ``relayed`` once the relay is over."""
        url = command.proxy_to_broker_url
        assert url is not None
        own = {broker_address(mine) for mine in (self._broker_url(), self._broker_url_tls()) if mine}
        if broker_address(url) in own:
            return "here"
        settings = self._service.settings
        if not settings.binary_proxy_enabled:
            reason = (
                "this broker does not relay connections (binary_proxy_enabled=false): "
                f"connect to {url} directly"
            )
            conn.send(encode_error(NO_REQUEST, ServerError.NotAllowedError, reason))
            raise _Closed(f"CONNECT to relay to {url} refused: binary_proxy_enabled=false")
        self._connect(conn, command, answer=False)  # the client is checked here first, as for itself
        try:
            target = RelayTarget.among(url, await self._live_urls())
            if broker_address(target.url) in own:
                conn.send(encode_connected(conn.protocol_version, self._max_message_size))
                return "answered"
            relay = self._relay_of(settings)
            owner = await relay.open(target)
        except (RelayRefused, ServiceError) as exc:
            conn.send(encode_error(NO_REQUEST, ServerError.ServiceNotReady, str(exc)))
            raise _Closed(f"relay refused: {exc}") from None
        conn.relaying = True
        log.info("binary connection %s (role %s) relayed to %s", conn.address, _role(conn), url)
        first = encode_frame(frame.command, frame.rest) + decoder.take_unread()
        await relay.relay(conn.stream, owner, first)
        return "relayed"

    async def _live_urls(self) -> dict[str, str]:
        """The live brokers' binary addresses (:meth:`SessionHost.live_broker_native_urls`), read again at
        most every :data:`LIVE_URLS_TTL_S`: relayed connections do not cost metadata reads each."""
        now = trio.current_time()
        if self._live_urls_read is None or now - self._live_urls_read[0] > LIVE_URLS_TTL_S:
            self._live_urls_read = (now, await self._service.live_broker_native_urls())
        return self._live_urls_read[1]

    def _relay_of(self, settings: SessionSettings) -> BinaryRelay:
        if self._relay is None:
            trust = settings.broker_client_tls_trust_certs_file or settings.tls_trust_certs_file
            context = client_ssl_context(
                trust_certs_file=trust, check_hostname=settings.broker_client_tls_hostname_verification
            )
            self._relay = BinaryRelay(
                connections_max=settings.binary_proxy_connections_max,
                connect_timeout_s=settings.binary_proxy_connect_timeout_ms / 1000,
                ssl_context=context,
            )
        return self._relay

    # -- commands ----------------------------------------------------------------------------------

    async def _handle(self, conn: _Connection, command: Command, frame: Frame) -> None:
        if isinstance(command, Connect):
            self._connect(conn, command)
            return
        if conn.principal is None:
            conn.send(encode_error(NO_REQUEST, ServerError.NotAllowedError, "CONNECT first"))
            raise _Closed("a command before CONNECT")
        if isinstance(command, Ping):
            conn.send(encode_pong())
        elif isinstance(command, Pong):
            conn.ping_outstanding = False
        elif isinstance(command, Send):
            await self._send(conn, command, frame)
        elif isinstance(command, Flow):
            handle = conn.consumers.get(command.consumer_id)
            if handle is not None:
                handle.flow.grant(command.permits)
        elif isinstance(command, Ack):
            self._ack(conn, command)
        elif isinstance(command, Lookup):
            await self._lookup(conn, command)
        elif isinstance(command, PartitionedMetadata):
            await self._partitions(conn, command)
        elif isinstance(command, CreateProducer):
            await self._producer(conn, command)
        elif isinstance(command, Subscribe):
            await self._subscribe(conn, command)
        elif isinstance(command, CloseHandle):
            self._close_handle(conn, command)
        elif isinstance(command, Unsubscribe):
            await self._unsubscribe(conn, command)
        elif isinstance(command, Redeliver):
            binary_consumers.redeliver(conn.consumers, command)
        elif isinstance(command, GetLastMessageId):
            await binary_consumers.get_last_message_id(conn.consumers, command, conn.send)
        elif isinstance(command, Seek):
            await binary_consumers.seek(conn.consumers, command, conn.send)
        elif isinstance(command, AuthResponse):
            self._auth_response(conn, command)
        elif isinstance(command, GetTopics | GetSchema | GetOrCreateSchema):
            conn.send(await self._query(conn.principal, command))
        else:
            assert isinstance(command, UnsupportedCommand)
            reason = f"{command.name} is not supported by Magnetar yet"
            if command.request_id is None:
                conn.send(encode_error(NO_REQUEST, ServerError.NotAllowedError, reason))
                raise _Closed(reason)
            conn.send(encode_error(command.request_id, ServerError.NotAllowedError, reason))

    async def _query(self, principal: Principal, command: GetTopics | GetSchema | GetOrCreateSchema) -> bytes:
        """The answer to a request about topics or schemas (no handle is created)."""
        if isinstance(command, GetTopics):
            return await answer_get_topics(self._service, principal, command)
        if isinstance(command, GetSchema):
            return await answer_get_schema(self._service, principal, command)
        return await answer_get_or_create_schema(self._service, principal, command)

    def _connect(self, conn: _Connection, command: Connect, *, answer: bool = True) -> None:
        """Authenticate the CONNECT; ``answer``: reply CONNECTED (a relayed connection's owner replies)."""
        if conn.principal is not None:
            conn.send(encode_error(NO_REQUEST, ServerError.NotAllowedError, "CONNECT twice"))
            raise _Closed("CONNECT twice")
        authentication = self._service.security.authentication
        try:
            if not authentication.enabled:
                principal = authentication.authenticate_token("")
            elif command.auth_method_name == "token" and command.auth_data:
                principal = authentication.authenticate_token(command.auth_data.decode("utf-8", "replace"))
            elif authentication.settings.anonymous_user_role is not None:
                principal = Principal(authentication.settings.anonymous_user_role)
            else:
                raise _NoToken
        except (AuthenticationError, _NoToken) as exc:
            reason = getattr(exc, "reason", "no token: CONNECT with auth_method_name 'token'")
            conn.send(
                encode_error(NO_REQUEST, ServerError.AuthenticationError, f"Failed to authenticate: {reason}")
            )
            raise _Closed("authentication failed") from None
        conn.principal = principal
        conn.protocol_version = min(command.protocol_version, PROTOCOL_VERSION_MAX)
        if answer:
            conn.send(encode_connected(conn.protocol_version, self._max_message_size))

    def _auth_response(self, conn: _Connection, command: AuthResponse) -> None:
        """Fresh credentials after AUTH_CHALLENGE: a valid token of the same role renews the connection's."""
        if not conn.challenged:
            conn.send(
                encode_error(NO_REQUEST, ServerError.NotAllowedError, "AUTH_RESPONSE without AUTH_CHALLENGE")
            )
            raise _Closed("AUTH_RESPONSE without AUTH_CHALLENGE")
        assert conn.principal is not None
        reason = "no token: AUTH_RESPONSE with auth_method_name 'token'"
        principal: Principal | None = None
        if command.auth_method_name == "token" and command.auth_data:
            try:
                principal = self._service.security.authentication.authenticate_token(
                    command.auth_data.decode("utf-8", "replace")
                )
            except AuthenticationError as exc:
                reason = exc.reason
        if principal is not None and principal.role != conn.principal.role:
            reason, principal = f"the role changed from {conn.principal.role} to {principal.role}", None
        if principal is None:
            conn.send(
                encode_error(NO_REQUEST, ServerError.AuthenticationError, f"Failed to authenticate: {reason}")
            )
            raise _Closed(f"authentication refresh failed: {reason}")
        conn.principal = principal
        conn.challenged = False
        log.debug("binary connection %s: credentials refreshed", conn.address)

    @staticmethod
    def _topic(name: str) -> TopicName:
        return parse_topic_name(name, allow_non_persistent=True)

    async def _lookup(self, conn: _Connection, command: Lookup) -> None:
        try:
            topic = self._topic(command.topic)
            resolution = await self._service.lookup(topic)
        except (InvalidTopicNameError, ServiceError) as exc:
            conn.send(encode_lookup_failed(command.request_id, server_error_of(exc), str(exc)))
            return
        owner = resolution.owner
        url = owner.nativeUrl or (self._broker_url() if not resolution.redirect else "")
        url_tls = owner.nativeUrlTls or (self._broker_url_tls() if not resolution.redirect else "")
        # Relaying: the client keeps dialing its service address and names the broker in CONNECT; a redirect
        # is answered as that broker's to connect to, whose own lookup then answers (through the relay).
        through = self._service.settings.binary_proxy_enabled
        name = (command.listener_name or "").strip()
        if name:  # as Pulsar: a blank name is none; the owner's address on the named listener, else refused
            listener = listener_named(owner.advertisedListeners, name)
            if listener is None:
                conn.send(
                    encode_lookup_failed(
                        command.request_id, ServerError.ServiceNotReady, unknown_listener(name)
                    )
                )
                return
            url, url_tls = listener.url, listener.url_tls
        if not (url_tls if conn.tls else url):
            kind = "TLS binary URL" if conn.tls else "binary URL"
            conn.send(
                encode_lookup_failed(
                    command.request_id, ServerError.ServiceNotReady, f"no {kind} for {owner.httpUrl}"
                )
            )
            return
        conn.send(
            encode_lookup_response(
                command.request_id,
                url=url,
                url_tls=url_tls,
                redirect=resolution.redirect and not through,
                authoritative=resolution.authoritative if resolution.redirect and not through else True,
                proxy_through_service_url=through,
            )
        )

    async def _partitions(self, conn: _Connection, command: PartitionedMetadata) -> None:
        try:
            topic = self._topic(command.topic)
            partitions = await self._service.partitions(topic)
        except (InvalidTopicNameError, ServiceError) as exc:
            conn.send(encode_partitions_failed(command.request_id, server_error_of(exc), str(exc)))
            return
        conn.send(encode_partitions(command.request_id, partitions))

    def _room_for_handle(self, conn: _Connection, request_id: int) -> bool:
        if len(conn.producers) + len(conn.pending_producers) + len(conn.consumers) >= HANDLES_MAX:
            conn.send(
                encode_error(request_id, ServerError.NotAllowedError, f"more than {HANDLES_MAX} handles")
            )
            return False
        return True

    async def _producer(self, conn: _Connection, command: CreateProducer) -> None:
        """Access modes, names and waiting producers: :mod:`.binary_producers`."""
        if self._producers.answered_again(conn, command) or not self._room_for_handle(
            conn, command.request_id
        ):
            return
        await self._producers.create(conn, command)

    async def _send(self, conn: _Connection, command: Send, frame: Frame) -> None:
        handle = conn.producers.get(command.producer_id)
        if handle is None:
            raise _Closed(f"SEND for unknown producer {command.producer_id}")
        highest = max(command.highest_sequence_id, command.sequence_id)
        try:
            if command.txn:
                raise SendRefused(ServerError.NotAllowedError, "transactions are not supported by Magnetar")
            if highest > SEQUENCE_ID_MAX:
                raise SendRefused(ServerError.NotAllowedError, f"sequence id {highest} out of range")
            section = frame.payload_section()
            send = compact_messages(section, self._max_message_size, self._chunked_message_bytes_max)
            if len(send.body) > self._entry_bytes_max - ENTRY_FIELDS_MAX:  # near the bound: the exact size
                name = handle.producer.name
                delayed = send.deliver_at_ms > 0
                size = compact_entry_bytes(
                    len(send.body),
                    name,
                    delayed=delayed,
                    chunk=send.chunk,
                    versioned=handle.producer.schema_version >= 0,
                )
            else:
                size = 0
            if size > self._entry_bytes_max:
                raise SendRefused(
                    ServerError.NotAllowedError,
                    f"Exceed maximum message size: stored, it would take {size} bytes, "
                    f"more than the {self._entry_bytes_max} an entry holds",
                )
            if send.chunk is not None and handle.producer.dedup is not None:
                raise SendRefused(
                    ServerError.NotAllowedError,
                    "chunked messages on a topic with deduplication are not supported by Magnetar yet",
                )
        except PayloadError as exc:
            conn.send(
                encode_send_error(
                    command.producer_id,
                    command.sequence_id,
                    ServerError.MetadataError,
                    f"Invalid payload: {exc}",
                )
            )
            return
        except SendRefused as exc:
            conn.send(encode_send_error(command.producer_id, command.sequence_id, exc.error, exc.message))
            return
        body, messages, payload_bytes, deliver_at_ms, chunk = send
        producer = handle.producer
        await producer.capacity.wait_for(messages)
        tag = (command.producer_id, command.sequence_id, highest)
        if deliver_at_ms or chunk is not None:
            # delayed (Pulsar's clients never batch these) or a chunk: an entry of its own with its time
            # and its chunk head
            try:
                producer.publish_delayed(
                    COMPACT_ALONE,
                    body,
                    messages,
                    payload_bytes,
                    SendCompletion(conn.outbound),
                    tag,
                    trio.current_time(),
                    deliver_at_ms=deliver_at_ms,
                    sequence_id=command.sequence_id,
                    highest_sequence_id=highest,
                    chunk=chunk,
                )
            except DeliveryDelayTooLongError as exc:
                error = server_error_of(exc)
                conn.send(encode_send_error(command.producer_id, command.sequence_id, error, str(exc)))
            return
        producer.publish(
            COMPACT_ALONE,  # one entry per SEND: the client numbers a batch's messages from 0
            body,
            messages,
            payload_bytes,
            SendCompletion(conn.outbound),
            tag,
            trio.current_time(),
            command.sequence_id,
            highest,
        )

    async def _subscribe(self, conn: _Connection, command: Subscribe) -> None:
        if command.consumer_id in conn.consumers:
            conn.send(encode_success(command.request_id))
            return
        if not self._room_for_handle(conn, command.request_id):
            return
        settings = self._service.settings
        sink = ConsumerDeliveries(command.consumer_id, conn.outbound)
        flow = FlowControl(0, pull_mode=True)
        sub_type = _SUB_TYPES[command.sub_type]
        try:
            key_shared = _key_shared_policy(command) if sub_type is SubscriptionType.KEY_SHARED else None
            topic_name = self._topic(command.topic)
            assert conn.principal is not None
            await self._service.security.authorize_consumer(conn.principal, topic_name, command.subscription)
            if await self._service.partitions(topic_name) > 0:
                raise _Refusal(
                    ServerError.NotAllowedError, "subscribe to each partition of a partitioned topic"
                )
            topic = await self._service.serve_topic(topic_name, create=command.force_topic_creation)
            await consumer_schema(self._service, topic_name, command.schema, topic)
            name = command.consumer_name or "consumer"

            def make() -> Consumer:
                consumer = Consumer(
                    name=name,
                    priority_level=command.priority_level,
                    partition=topic.partition,
                    flow=flow,
                    sink=sink,
                    unacked_messages_max=settings.consumer_unacked_messages_max,
                    unacked_bytes_max=settings.consumer_unacked_bytes_max,
                    whole_entries=True,
                    key_shared=key_shared,
                )
                consumer.address = conn.address
                consumer.connected_since_ms = topic.now_ms()
                return consumer

            if not command.durable and command.start_message_id is not None:
                subscriber = await binary_consumers.reader(
                    topic, command.subscription, command.start_message_id, make
                )
            else:
                subscriber = await topic.subscribe(
                    command.subscription,
                    make,
                    sub_type,
                    durable=command.durable,
                    start_earliest=command.initial_earliest,
                )
        except (_Refusal, SchemaRefusal) as exc:
            sink.close()  # its hooks on the connection's outbound queue go with it
            conn.send(encode_error(command.request_id, exc.error, exc.message))
            return
        except (InvalidTopicNameError, ServiceError) as exc:
            sink.close()
            conn.send(encode_error(command.request_id, server_error_of(exc), str(exc)))
            return
        consumer_id = command.consumer_id

        def going_away(reason: str) -> None:
            handle = conn.consumers.pop(consumer_id, None)
            if handle is not None:
                handle.close()
                conn.send(encode_close_consumer(consumer_id))

        subscriber.consumer.disconnect = going_away
        conn.consumers[consumer_id] = _ConsumerHandle(subscriber, sink, flow, sub_type)
        conn.send(encode_success(command.request_id))

    def _ack(self, conn: _Connection, command: Ack) -> None:
        handle = conn.consumers.get(command.consumer_id)
        if handle is not None and command.validation_error is None and not command.txn:
            cumulative = command.ack_type is AckType.Cumulative
            if cumulative and (
                len(command.ids) != 1
                or handle.sub_type in (SubscriptionType.SHARED, SubscriptionType.KEY_SHARED)
            ):
                pass  # ignored, as Pulsar does
            else:
                handle.sink.ack(handle.subscriber, command.ids, cumulative=cumulative)
        if command.request_id is not None:
            conn.send(encode_ack_response(command.consumer_id, command.request_id))

    def _close_handle(self, conn: _Connection, command: CloseHandle) -> None:
        if command.producer:
            handle = conn.producers.pop(command.handle_id, None)
            if handle is not None:
                _remove_producer(handle)
            self._producers.close_waiting(conn, command.handle_id)
        else:
            consumer = conn.consumers.pop(command.handle_id, None)
            if consumer is not None:
                consumer.close()
        conn.send(encode_success(command.request_id))

    async def _unsubscribe(self, conn: _Connection, command: Unsubscribe) -> None:
        handle = conn.consumers.get(command.consumer_id)
        if handle is None:
            conn.send(encode_error(command.request_id, ServerError.MetadataError, "Consumer not found"))
            return
        try:
            await handle.subscriber.unsubscribe()
        except ServiceError as exc:
            conn.send(encode_error(command.request_id, server_error_of(exc), str(exc)))
            return
        conn.consumers.pop(command.consumer_id, None)
        handle.close()
        conn.send(encode_success(command.request_id))

    def _release(self, conn: _Connection) -> None:
        for handle in conn.producers.values():
            _remove_producer(handle)
        conn.producers.clear()
        for consumer in conn.consumers.values():
            consumer.close()
        conn.consumers.clear()


def _role(conn: _Connection) -> str:
    return (conn.principal.role if conn.principal is not None else None) or "-"


def _address(stream: trio.SocketStream) -> str:
    try:
        peer = stream.socket.getpeername()
    except OSError:
        return ""
    return f"{peer[0]}:{peer[1]}"


def _key_shared_policy(command: Subscribe) -> KeySharedPolicy | None:
    """SUBSCRIBE's KeySharedMeta as the core's policy (the core checks the ranges)."""
    mode = command.key_shared_mode
    if mode is None or mode == _AUTO_SPLIT:
        return KeySharedPolicy(allow_out_of_order=command.allow_out_of_order)
    if mode != _STICKY:
        raise _Refusal(ServerError.ConsumerAssignError, f"Unknown keySharedMode {mode}")
    return KeySharedPolicy(command.hash_ranges, command.allow_out_of_order)


def _remove_producer(handle: _ProducerHandle) -> None:
    topic = handle.topic
    remove = getattr(topic, "remove_producer", None)
    if remove is not None:
        remove(handle.producer)


class _NoToken(Exception):
    pass


class _Refusal(Exception):
    def __init__(self, error: ServerError, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message

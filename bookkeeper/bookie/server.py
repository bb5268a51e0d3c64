"""The bookie server: the wire protocol over TCP in front of a :class:`~.core.BookieCore`.

Theory of operation (BookKeeper's ``BookieNettyServer`` + ``BookieRequestProcessor``):

* :class:`BookieServer` accepts connections (at most ``connections_max``; more are closed at once) and runs
  each in its own task. A connection decodes requests with :class:`~..protocol.codec.ServerProtocol` and
  hands them to the core; the core answers through a callback, now (reads) or when the store makes the
  change durable (adds, fences). Responses are encoded into the connection's outgoing buffer and one writer
  task sends whatever has accumulated with one ``send_all`` (coalescing, as the client does).
* **Isolation.** A malformed frame is answered EBADREQ and the connection goes on; an unrecoverable framing
  error, an abrupt disconnect or an exception in the request logic ends or fails only that connection or
  request. A client that does not read its responses (slow reader) stops being read once its unsent
  responses exceed ``outgoing_bytes_max``: TCP back-pressure reaches it, nobody else waits; if it reads
  nothing for ``write_timeout_ms`` its connection is closed.
* **Back-pressure.** At most ``inflight_requests_max`` requests of a connection are in the core at once;
  further ones are answered ETOOMANYREQUESTS at once (BookKeeper's ``maxAddsInProgressLimit``).
* **Bursts.** On a plain TCP connection the reader takes what the socket holds without waiting
  (non-blocking reads) and dispatches it as one burst (:meth:`BookieCore.begin_burst`): the disk store
  syncs the burst's journal records when it ends, on the reader's thread, and the reader sends the answers
  that are ready with one non-blocking write before it waits for the socket again; the writer task only
  sends what the socket did not take. Read, append, sync, answer: one step, no task switch (TLS
  connections read by awaiting the stream, and their answers go through the writer task).
* **Drain.** :meth:`BookieServer.drain` stops accepting and reading, lets the in-flight requests finish and
  their responses go out (bounded by ``drain_timeout_ms``), then closes the connections.
* **TLS and authentication** (:mod:`.auth`). With a TLS context each connection's handshake runs in its own
  task within ``tls_handshake_timeout_ms``. With an authenticator a connection must first present a token
  with AUTH: until then every request is answered EUA; a refused AUTH is answered EUA and the connection is
  closed; one that has not authenticated within ``auth_timeout_ms`` is closed.
* **What a stranger may cost.** Until its AUTH is accepted a connection is read at most
  ``unauthenticated_bytes_max`` bytes in all (reads are sized to what is left, so the decoder never holds
  more); one that needs to send more - a large frame, a flood of requests - is answered EUA and closed. At
  most ``unauthenticated_connections_max`` connections wait for their AUTH at once: a new one closes the
  oldest of them. Connections without a valid token therefore hold at most about
  ``unauthenticated_connections_max x unauthenticated_bytes_max`` bytes of input (128 x 16 KiB = 2 MiB by
  default, where a frame of up to ``frame_bytes_max`` - 5 MiB - per connection, 5 GiB for 1,024
  connections, was the bound before).

:class:`Bookie` composes one bookie: read-only state, request core, server, disk monitor and registration in
the metadata store, over an injected :class:`~.ledger_store.LedgerStore` (the owner runs and closes the
store). ``endpoint = await nursery.start(bookie.run)`` returns once it serves and is registered;
:meth:`Bookie.request_stop` begins the orderly shutdown: drain, unregister, return.
"""

from __future__ import annotations

import enum
import logging
import os
import ssl
from dataclasses import dataclass
from time import perf_counter

import trio

from magnetar.bookkeeper.bookie.auth import BookieAuthenticator, bookie_ssl_context
from magnetar.bookkeeper.bookie.core import BookieCore
from magnetar.bookkeeper.bookie.disk_monitor import DiskMonitor, DiskThresholds, ReadOnlyState
from magnetar.bookkeeper.bookie.ledger_store import LedgerStore
from magnetar.bookkeeper.bookie.metrics import BookieMetrics
from magnetar.bookkeeper.bookie.registration import BookieRegistration
from magnetar.bookkeeper.bookie.settings import BookieServerSettings, bookie_id_for
from magnetar.bookkeeper.metadata import BookieServiceInfo, MetadataStore
from magnetar.bookkeeper.protocol import (
    AUTH_PLUGIN_TOKEN,
    NEED_DATA,
    AddRequest,
    AuthRequest,
    AuthResponse,
    BadRequest,
    BookieStatus,
    ErrorResponse,
    FramingError,
    GetBookieInfoRequest,
    ReadLacRequest,
    ReadRequest,
    Request,
    Response,
    ServerProtocol,
    WriteLacRequest,
    response_for_status,
)
from magnetar.bookkeeper.runtime import SendTimer, open_listeners
from magnetar.bookkeeper.runtime.auth.errors import AuthenticationError, AuthorizationError
from magnetar.bookkeeper.runtime.auth.tls import TlsHandshakeError, handshake, peer_address

log = logging.getLogger(__name__)

_OP_NAMES: dict[type, str] = {
    AddRequest: "add_entry",
    ReadRequest: "read_entry",
    ReadLacRequest: "read_lac",
    WriteLacRequest: "write_lac",
    GetBookieInfoRequest: "get_bookie_info",
}
_IO_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
YIELD_EVERY_REQUESTS = 128
"""Requests the reader dispatches in one burst before it lets the other tasks run."""


class _Next(enum.Enum):
    """What the reader does after a burst."""

    RECEIVE = enum.auto()
    """Wait for the socket."""
    YIELD = enum.auto()
    """Let the other tasks run, then go on with what was received."""
    WAIT_FOR_PEER = enum.auto()
    """The peer does not read its answers: wait until they drain below ``outgoing_bytes_max``."""
    CLOSE = enum.auto()
    """End of stream, an unrecoverable frame or a refused AUTH: answer what was accepted, then close."""


@dataclass(frozen=True, slots=True)
class BookieEndpoint:
    bookie_id: str
    """``advertised_host:port``, the name clients and the metadata store use."""
    host: str
    """The address the listener is bound to."""
    port: int


class BookieServer:
    def __init__(
        self,
        core: BookieCore,
        settings: BookieServerSettings,
        metrics: BookieMetrics,
        *,
        ssl_context: ssl.SSLContext | None = None,
        authenticator: BookieAuthenticator | None = None,
    ) -> None:
        self.core = core
        self.settings = settings
        self.metrics = metrics
        self.ssl_context = ssl_context
        self.authenticator = authenticator
        self._connections: set[_Connection] = set()
        self._unauthenticated: dict[_Connection, None] = {}
        """Connections waiting for their AUTH, oldest first (authentication on only)."""
        self._accept_scope = trio.CancelScope()
        self._draining = False
        self._all_closed = trio.Event()

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def serve(
        self,
        listener: trio.SocketListener | None = None,
        *,
        task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen (on ``listener`` if the caller bound it already); ``task_status.started((host, port))``
        gives the bound address (port 0: the real one)."""
        if listener is None:
            listener = await open_bookie_listener(self.settings)
        host, port = listener.socket.getsockname()[:2]
        log.info("bookie protocol listening on %s:%d (%s)", host, port, self._access_summary())
        async with trio.open_nursery() as nursery:
            task_status.started((host, port))
            with self._accept_scope:
                async with listener:
                    await self._accept_loop(listener, nursery)

    def _access_summary(self) -> str:
        """Who may use the protocol, for the start-up log line."""
        tls = ", TLS" if self.ssl_context is not None else ""
        if self.authenticator is None:
            return "authentication off: any client may connect" + tls
        roles = sorted(self.authenticator.allowed_roles)
        if not roles:
            log.warning(
                "authentication is on and no role may use the bookie protocol: set auth_allowed_roles "
                "(the brokers' role) or super_user_roles"
            )
        return f"authentication on, roles admitted: {', '.join(roles) or 'none'}{tls}"

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:  # EMFILE and friends: back off, keep serving
                log.error("accept failed: %s", exc)
                await trio.sleep(0.1)
                continue
            if len(self._connections) >= self.settings.connections_max:
                self.metrics.connections_rejected += 1
                if self.metrics.connections_rejected % 100 == 1:  # the first, then every 100th
                    limit = self.settings.connections_max
                    log.warning("connections_max=%d reached: closing new connections", limit)
                await stream.aclose()
                continue
            peer = peer_address(stream)
            served: trio.abc.Stream = stream
            if self.ssl_context is not None:
                served = trio.SSLStream(stream, self.ssl_context, server_side=True)
            connection = _Connection(self, served, "?" if peer is None else f"{peer[0]}:{peer[1]}")
            self._connections.add(connection)
            self.metrics.connections = len(self._connections)
            if self.authenticator is not None:
                self._admit_unauthenticated(connection)
            nursery.start_soon(connection.run)

    def _admit_unauthenticated(self, connection: _Connection) -> None:
        """Count a new connection as waiting for its AUTH; close the oldest waiting ones above the limit."""
        waiting = self._unauthenticated
        while len(waiting) >= self.settings.unauthenticated_connections_max:
            oldest = next(iter(waiting))
            del waiting[oldest]
            self.metrics.unauthenticated_evicted += 1
            if self.metrics.unauthenticated_evicted % 100 == 1:  # the first, then every 100th
                limit = self.settings.unauthenticated_connections_max
                log.warning(
                    "unauthenticated_connections_max=%d reached: closing the oldest (%s) to admit %s",
                    limit,
                    oldest.peer,
                    connection.peer,
                )
            oldest.abort()
        waiting[connection] = None
        self.metrics.connections_unauthenticated = len(waiting)

    def connection_authenticated(self, connection: _Connection) -> None:
        self._unauthenticated.pop(connection, None)
        self.metrics.connections_unauthenticated = len(self._unauthenticated)

    def connection_closed(self, connection: _Connection) -> None:
        self._connections.discard(connection)
        self.metrics.connections = len(self._connections)
        self.connection_authenticated(connection)  # no longer waiting either
        if self._draining and not self._connections:
            self._all_closed.set()

    async def drain(self, timeout_s: float) -> None:
        """Stop accepting and reading; wait (bounded) for in-flight requests to be answered; close all."""
        self._draining = True
        self._accept_scope.cancel()
        if not self._connections:
            self._all_closed.set()
        for connection in list(self._connections):
            connection.stop_reading()
        with trio.move_on_after(timeout_s):
            await self._all_closed.wait()
        if self._connections:
            log.warning(
                "drain timed out: closing %d connections with requests pending", len(self._connections)
            )
            for connection in list(self._connections):
                connection.abort()


async def open_bookie_listener(settings: BookieServerSettings) -> trio.SocketListener:
    """Bind the bookie's port. A composition root that must know the bookie id (``host:port``) before it
    opens the storage - to check the bookie's cookies with ``--port 0`` - binds first and hands the listener
    to :class:`Bookie`."""
    listeners = await open_listeners(
        settings.port, settings.bind_address, service="bookie protocol", setting="port"
    )
    listener, extra = listeners[0], listeners[1:]
    for other in extra:  # a host name with several addresses: serve the first, one port
        await other.aclose()
    return listener


async def serve_bookie(
    core: BookieCore,
    settings: BookieServerSettings,
    *,
    metrics: BookieMetrics | None = None,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``core`` over TCP until cancelled: ``host, port = await nursery.start(serve_bookie, core, s)``.

    The bare wire server (no registration, no disk monitor); :class:`Bookie` is the whole bookie. TLS and
    authentication follow ``settings`` as in :class:`Bookie`.
    """
    server = BookieServer(
        core,
        settings,
        metrics or BookieMetrics(),
        ssl_context=bookie_ssl_context(settings),
        authenticator=BookieAuthenticator.from_settings(settings),
    )
    await server.serve(task_status=task_status)


class _Connection:
    def __init__(self, server: BookieServer, stream: trio.abc.Stream, peer: str) -> None:
        self.server = server
        self.stream = stream
        settings = server.settings
        self.peer = peer
        self._authenticator = server.authenticator
        self.role: str | None = None
        """The role of the token this connection authenticated with (None: not authenticated)."""
        self._auth_scope = trio.CancelScope()
        self._proto = ServerProtocol(settings.frame_bytes_max)
        self._core = server.core
        self._metrics = server.metrics
        self._inflight_max = settings.inflight_requests_max
        self._out_max = settings.outgoing_bytes_max
        self._chunk = settings.receive_chunk_bytes
        self._unauthenticated_left: int | None = (
            None if self._authenticator is None else settings.unauthenticated_bytes_max
        )
        """Bytes this connection may still send before its AUTH is accepted; None: no limit (authenticated,
        or authentication off)."""
        self.inflight = 0
        self.closed = False
        self._out = bytearray()
        self._writing = False
        self._writer_waiting = False
        self._writer_wakeup = trio.Event()
        self._send_timer = SendTimer(settings.write_timeout_ms / 1000)
        self._progress = trio.Event()  # set after each write and each response, for waiters
        self._read_scope = trio.CancelScope()
        self._io_scope = trio.CancelScope()
        self._bad_requests = 0
        self._fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else None
        """The socket of a plain TCP connection (read and written without waiting, see the module's
        docstring); None for TLS."""
        self._in_burst = False

    async def run(self) -> None:
        log.debug("connection from %s", self.peer)
        try:
            with self._io_scope:
                async with self.stream, trio.open_nursery() as nursery:
                    if not await self._tls_handshake():
                        return
                    if self._authenticator is not None:
                        nursery.start_soon(self._auth_deadline)
                    nursery.start_soon(self._writer)
                    nursery.start_soon(self._send_timer.watch, self._send_stalled)
                    graceful = True  # stopped by drain: answer what was accepted
                    with self._read_scope:
                        graceful = await self._reader()
                    if graceful:
                        await self._flush(self.server.settings.drain_timeout_ms / 1000)
                    nursery.cancel_scope.cancel()
        finally:
            self.closed = True
            self.server.connection_closed(self)
            log.debug("connection from %s closed (%d requests unanswered)", self.peer, self.inflight)

    def stop_reading(self) -> None:
        self._read_scope.cancel()

    async def _tls_handshake(self) -> bool:
        if not isinstance(self.stream, trio.SSLStream):
            return True
        try:
            await handshake(self.stream, self.server.settings.tls_handshake_timeout_ms / 1000)
        except TlsHandshakeError as exc:
            self._metrics.tls_handshake_failures += 1
            log.info("connection from %s: %s", self.peer, exc)
            return False
        return True

    async def _auth_deadline(self) -> None:
        with self._auth_scope:
            await trio.sleep(self.server.settings.auth_timeout_ms / 1000)
            self._metrics.auth_failures += 1
            level = logging.WARNING if self._metrics.auth_failures % 100 == 1 else logging.DEBUG
            log.log(level, "closing connection from %s: no AUTH within auth_timeout_ms", self.peer)
            self.abort()

    def abort(self) -> None:
        self._io_scope.cancel()

    async def _reader(self) -> bool:
        """Read and dispatch until the connection is to close (True: answer what is pending first) or is
        broken (False)."""
        try:
            while True:
                step = self._burst()
                if step is _Next.RECEIVE:
                    data = await self._receive()
                    if not data:
                        return True
                    self._feed(data)
                elif step is _Next.YIELD:
                    await trio.lowlevel.checkpoint()
                elif step is _Next.WAIT_FOR_PEER:
                    while len(self._out) > self._out_max:
                        await self._wait_progress()
                else:
                    return True
        except _IO_ERRORS as exc:
            log.debug("connection from %s lost: %s", self.peer, exc or type(exc).__name__)
            return False

    def _burst(self) -> _Next:
        """Dispatch what was received and what the socket holds now as one burst of the core's work, then
        send the answers that are ready (see the module's docstring)."""
        if self._fd is None:
            return self._dispatch_available()
        core = self._core
        self._in_burst = True
        core.begin_burst()
        try:
            return self._dispatch_available()
        finally:
            try:
                core.end_burst()
            finally:
                self._in_burst = False
                self._send_ready()

    def _dispatch_available(self) -> _Next:
        proto = self._proto
        handled = 0
        while True:
            if len(self._out) > self._out_max:  # slow reader: stop reading until it catches up
                return _Next.WAIT_FOR_PEER
            event = proto.next_event()
            if event is NEED_DATA:
                if self._unauthenticated_left == 0:
                    return self._refuse_unauthenticated_input()
                data = self._read_now()
                if data is None:
                    return _Next.RECEIVE
                if not data:
                    return _Next.CLOSE
                self._feed(data)
            elif isinstance(event, BadRequest):
                self._bad_request(event)
            elif isinstance(event, FramingError):
                log.warning("closing connection from %s: %s", self.peer, event.reason)
                return _Next.CLOSE
            elif isinstance(event, AuthRequest):
                if not self._authenticate(event):
                    return _Next.CLOSE  # answer the refusal, then close
            elif self._authenticator is not None and self.role is None:
                self._metrics.request_done(_OP_NAMES[type(event)], BookieStatus.EUA, 0.0)
                self._send(response_for_status(event, BookieStatus.EUA))
            else:
                self._dispatch(event)
                handled += 1
                if handled >= YIELD_EVERY_REQUESTS:
                    return _Next.YIELD

    def _read_now(self) -> bytes | None:
        """What a plain socket holds now (``b""`` at its end); None when it holds nothing, or for TLS."""
        if self._fd is None:
            return None
        try:
            return os.read(self._fd, self._read_size())
        except BlockingIOError:
            return None

    def _read_size(self) -> int:
        """How much one read may take: a chunk, or what is left of the unauthenticated allowance."""
        left = self._unauthenticated_left
        return self._chunk if left is None else max(1, min(self._chunk, left))

    def _feed(self, data: bytes | bytearray) -> None:
        if self._unauthenticated_left is not None:
            self._unauthenticated_left = max(0, self._unauthenticated_left - len(data))
        self._proto.receive_data(data)

    def _refuse_unauthenticated_input(self) -> _Next:
        """The connection has sent ``unauthenticated_bytes_max`` bytes and still no complete, accepted AUTH:
        answer EUA (to the frame being received, when its header has arrived) and close."""
        self._metrics.auth_failures += 1
        limit = self.server.settings.unauthenticated_bytes_max
        level = logging.WARNING if self._metrics.auth_failures % 100 == 1 else logging.DEBUG
        log.log(level, "closing connection from %s: %d bytes without AUTH", self.peer, limit)
        reason = f"sent more than unauthenticated_bytes_max={limit} bytes before an accepted AUTH"
        rid = self._proto.pending_request_id()
        self._send(
            AuthResponse(0 if rid is None else rid, BookieStatus.EUA, AUTH_PLUGIN_TOKEN, reason.encode())
        )
        return _Next.CLOSE

    async def _receive(self) -> bytes | bytearray:
        """Wait for data (``b""`` at the end of the stream)."""
        if self._fd is None:
            return await self.stream.receive_some(self._read_size())
        while True:
            await trio.lowlevel.wait_readable(self._fd)
            data = self._read_now()
            if data is not None:
                return data

    def _authenticate(self, request: AuthRequest) -> bool:
        """Answer an AUTH; False when it was refused (the connection then closes)."""
        rid = request.request_id
        if self._authenticator is None:
            self._send(AuthResponse(rid, BookieStatus.EOK, request.plugin_name))
            return True
        try:
            role = self._authenticator.authenticate(request)
        except (AuthenticationError, AuthorizationError) as exc:
            self._metrics.auth_failures += 1
            level = logging.WARNING if self._metrics.auth_failures % 100 == 1 else logging.DEBUG
            log.log(level, "connection from %s refused: %s", self.peer, exc.reason)
            reason = exc.reason.encode("utf-8")[:1024]
            self._send(AuthResponse(rid, BookieStatus.EUA, AUTH_PLUGIN_TOKEN, reason))
            return False
        if self.role is None:
            log.debug("connection from %s authenticated as %r", self.peer, role)
        self.role = role
        self._unauthenticated_left = None
        self.server.connection_authenticated(self)
        self._auth_scope.cancel()
        self._send(AuthResponse(rid, BookieStatus.EOK, AUTH_PLUGIN_TOKEN))
        return True

    def _bad_request(self, event: BadRequest) -> None:
        self._bad_requests += 1
        level = logging.WARNING if self._bad_requests == 1 else logging.DEBUG
        log.log(level, "bad request from %s (id %d): %s", self.peer, event.request_id, event.reason)
        self._metrics.request_done("invalid", BookieStatus.EBADREQ, 0.0)
        self._send(ErrorResponse(event.request_id, BookieStatus.EBADREQ, event.reason))

    def _dispatch(self, request: Request) -> None:
        op = _OP_NAMES[type(request)]
        metrics = self._metrics
        if self.inflight >= self._inflight_max:
            metrics.request_done(op, BookieStatus.ETOOMANYREQUESTS, 0.0)
            self._send(response_for_status(request, BookieStatus.ETOOMANYREQUESTS))
            return
        self.inflight += 1
        metrics.requests_in_progress += 1
        if type(request) is AddRequest:
            metrics.write_bytes += len(request.body)
        started = perf_counter()  # latency metric only: no need for trio's clock
        answered = False

        def respond(response: Response) -> None:
            nonlocal answered
            if answered:
                log.error("request %r answered twice; dropping %r", request, response)
                return
            answered = True
            self.inflight -= 1
            metrics.requests_in_progress -= 1
            metrics.request_done(op, response.status, perf_counter() - started)
            if type(request) is ReadRequest and response.status is BookieStatus.EOK:
                metrics.read_bytes += len(getattr(response, "body", b""))
            if not self.closed:
                self._send(response)

        try:
            self._core.handle(request, respond)
        except Exception:
            log.exception("request logic failed on %r", request)
            respond(response_for_status(request, BookieStatus.EIO))

    def _send(self, response: Response | AuthResponse) -> None:
        self._proto.send_into(self._out, response)
        if self._writer_waiting and not self._in_burst:  # a burst sends its answers itself when it ends
            self._writer_waiting = False
            self._writer_wakeup.set()
        self._progress.set()

    def _send_ready(self) -> None:
        """Write the answers that are ready without waiting while the writer is idle; wake the writer for
        what the socket does not take (or when the write fails: the writer meets the error and ends the
        connection)."""
        out = self._out
        if not out:
            return
        if self._fd is not None and not self._writing:
            try:
                sent = os.write(self._fd, out)
            except OSError:  # BlockingIOError (the socket's buffer is full) or a broken connection
                sent = 0
            if sent:
                del out[:sent]
                self._progress.set()
        if out and self._writer_waiting:
            self._writer_waiting = False
            self._writer_wakeup.set()

    async def _wait_progress(self) -> None:
        self._progress = trio.Event()
        await self._progress.wait()

    async def _writer(self) -> None:
        timer = self._send_timer
        try:
            while True:
                if not self._out:
                    self._writer_wakeup = trio.Event()
                    self._writer_waiting = True
                    await self._writer_wakeup.wait()
                    continue
                data, self._out = self._out, bytearray()
                self._writing = True
                timer.sending()
                await self.stream.send_all(data)
                timer.sent()
                self._writing = False
                self._progress.set()
        except _IO_ERRORS as exc:
            log.debug("connection from %s lost while sending: %s", self.peer, exc or type(exc).__name__)
            self._io_scope.cancel()

    def _send_stalled(self) -> None:
        log.warning("closing connection from %s: it read nothing for write_timeout_ms", self.peer)
        self._io_scope.cancel()

    async def _flush(self, timeout_s: float) -> None:
        """Wait until every accepted request is answered and sent (bounded)."""
        with trio.move_on_after(timeout_s) as scope:
            while self.inflight or self._out or self._writing:
                await self._wait_progress()
        if scope.cancelled_caught:
            log.warning("connection from %s: %d requests still pending at close", self.peer, self.inflight)


class Bookie:
    """One bookie: request core, TCP server, disk monitor, registration. The owner runs/closes the store."""

    def __init__(
        self,
        settings: BookieServerSettings,
        store: LedgerStore,
        metadata: MetadataStore | None = None,
        *,
        state: ReadOnlyState | None = None,
        listener: trio.SocketListener | None = None,
    ) -> None:
        self.settings = settings
        self._listener = listener
        """Bound by the caller (see :func:`open_bookie_listener`), or None: :meth:`run` binds."""
        self.store = store
        self.metadata = metadata
        self.state = state or ReadOnlyState()
        self.metrics = BookieMetrics(store_stats=getattr(store, "stats", None))
        self.core = BookieCore(store, is_readonly=lambda: self.state.readonly)
        self.server = BookieServer(
            self.core,
            settings,
            self.metrics,
            ssl_context=bookie_ssl_context(settings),
            authenticator=BookieAuthenticator.from_settings(settings),
        )
        self.monitor = DiskMonitor(
            store.disk_usage,
            self.state,
            DiskThresholds(
                settings.disk_usage_threshold,
                settings.disk_usage_warn_threshold,
                settings.disk_usage_lwm_threshold,
            ),
            interval_ms=settings.disk_check_interval_ms,
            on_usage=self._on_usage,
            journal_probe=store.journal_disk_usage,
            on_journal_usage=self._on_journal_usage,
        )
        self.state.add_listener(self._on_mode)
        self.metrics.readonly = self.state.readonly
        self.registration: BookieRegistration | None = None
        self.endpoint: BookieEndpoint | None = None
        self._stop = trio.Event()
        self.stopped = trio.Event()
        """Set when :meth:`run` has finished (after the orderly shutdown, or when cancelled)."""

    def _on_usage(self, used: float) -> None:
        self.metrics.disk_usage_ratio = used

    def _on_journal_usage(self, used: float) -> None:
        self.metrics.journal_disk_usage_ratio = used

    def _on_mode(self, readonly: bool) -> None:
        self.metrics.readonly = readonly

    def render_metrics(self) -> bytes:
        return self.metrics.render_metrics()

    def request_stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def is_ready(self) -> bool:
        """Serving, registered (when a metadata store is used), not shutting down, and with room in the
        journal (a full journal volume fails every normal add: see the disk monitor)."""
        if self.endpoint is None or self.stopping or self.stopped.is_set() or self.monitor.journal_full:
            return False
        return self.registration is None or self.registration.registered_path is not None

    def service_info(self, readonly: bool) -> BookieServiceInfo:
        assert self.endpoint is not None
        host = self.settings.advertised_host()
        return BookieServiceInfo(
            self.endpoint.bookie_id,
            host,
            self.endpoint.port,
            self.settings.http_port,
            readonly,
            self.settings.rack,
        )

    async def run(self, *, task_status: trio.TaskStatus[BookieEndpoint] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self._run(task_status)
        finally:
            self.stopped.set()

    async def _run(self, task_status: trio.TaskStatus[BookieEndpoint]) -> None:
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(self.server.serve, self._listener)
            bookie_id = bookie_id_for(self.settings.advertised_host(), port)
            self.endpoint = BookieEndpoint(bookie_id, host, port)
            self.monitor.check()  # a full disk registers read-only from the start
            nursery.start_soon(self.monitor.run)
            if self.metadata is not None:
                self.registration = BookieRegistration(
                    self.metadata,
                    self.service_info,
                    self.state,
                    timeout_ms=self.settings.registration_timeout_ms,
                    retry_ms=self.settings.registration_retry_ms,
                )
                await nursery.start(self.registration.run)
            log.info(
                "bookie %s is serving (%s)", bookie_id, "read-only" if self.state.readonly else "writable"
            )
            task_status.started(self.endpoint)
            await self._stop.wait()
            await self._shutdown(nursery)

    async def _shutdown(self, nursery: trio.Nursery) -> None:
        assert self.endpoint is not None
        log.info(
            "bookie %s stopping: draining %d connections",
            self.endpoint.bookie_id,
            self.server.connection_count,
        )
        with trio.CancelScope(shield=True):
            await self.server.drain(self.settings.drain_timeout_ms / 1000)
            if self.registration is not None:
                await self.registration.unregister()
        log.info("bookie %s stopped serving", self.endpoint.bookie_id)
        nursery.cancel_scope.cancel()

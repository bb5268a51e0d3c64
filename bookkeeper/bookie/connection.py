"""One connection to the bookie: reading requests, dispatching them to the core, writing the answers.

Theory of operation (BookKeeper's ``BookieRequestHandler`` and the connection half of
``BookieRequestProcessor``); :class:`~.server.BookieServer` accepts the connection and runs
:meth:`BookieConnection.run` in its own task:

* **Decoding.** Requests are decoded with :class:`~magnetar.bookkeeper.protocol.codec.ServerProtocol` and
  handed to the core; the core answers through a callback, now (reads) or when the store makes the change
  durable (adds, fences). Responses are encoded into the connection's outgoing buffer and one writer task
  sends whatever has accumulated with one ``send_all`` (coalescing, as the client does).
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
* **TLS and authentication** (:mod:`.auth`). With a TLS context the connection's handshake runs in its own
  task within ``tls_handshake_timeout_ms``. With an authenticator a connection must first present a token
  with AUTH: until then every request is answered EUA; a refused AUTH is answered EUA and the connection is
  closed; one that has not authenticated within ``auth_timeout_ms`` is closed.
* **What a stranger may cost.** Until its AUTH is accepted a connection is read at most
  ``unauthenticated_bytes_max`` bytes in all (reads are sized to what is left, so the decoder never holds
  more); one that needs to send more - a large frame, a flood of requests - is answered EUA and closed. At
  most ``unauthenticated_connections_max`` connections wait for their AUTH at once (the server closes the
  oldest of them for a new one). Connections without a valid token therefore hold at most about
  ``unauthenticated_connections_max x unauthenticated_bytes_max`` bytes of input (128 x 16 KiB = 2 MiB by
  default, where a frame of up to ``frame_bytes_max`` - 5 MiB - per connection, 5 GiB for 1,024
  connections, was the bound before).
* **Where an add's payload is copied** (docs/architecture.md §1.4). Each read of the socket is a new
  ``bytes`` chunk; the protocol's decoder hands an add's body out as a ``bytes`` slice of it (one copy, the
  decoder's; a second one when the previous read ended inside a frame: the decoder joins the chunk to it).
  The engine copies a body of 512 bytes or more no further: the journal writes that very object with
  ``pwritev`` (a smaller one it copies into its batch, cheaper than one more buffer) and the write cache
  keeps it until the checkpoint - an immutable ``bytes`` owned by nobody else, never a view into a buffer
  that is reused.
"""

from __future__ import annotations

import enum
import logging
import os
from time import perf_counter
from typing import TYPE_CHECKING

import trio

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
from magnetar.bookkeeper.runtime import SendTimer
from magnetar.bookkeeper.runtime.auth.errors import AuthenticationError, AuthorizationError
from magnetar.bookkeeper.runtime.auth.tls import TlsHandshakeError, handshake

if TYPE_CHECKING:
    from magnetar.bookkeeper.bookie.server import BookieServer

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


class BookieConnection:
    """One client connection: read, dispatch to the core, answer (see the module's docstring)."""

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

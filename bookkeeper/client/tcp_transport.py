"""The TCP implementation of :class:`~.transport.BookieTransport`: one pipelined connection per bookie.

Theory of operation (BookKeeper's ``PerChannelBookieClient``):

* **Connections.** A bookie id is ``host:port``. The connection is opened lazily by the first request, under
  ``connect_timeout_ms``. A connect failure fails every request queued for it with ``CONNECT`` and starts a
  bounded exponential backoff (``reconnect_backoff_initial_ms`` doubling up to ``reconnect_backoff_max_ms``):
  requests sent during the backoff fail at once with ``CONNECT``; the first request after it reconnects. A
  connection that breaks fails its in-flight requests with ``CLOSED``; the next request reconnects at once
  (with backoff when the broken connection never delivered a byte, e.g. a bookie refusing connections).
* **Pipelining.** Any number of requests (up to ``inflight_requests_max``) are in flight on one connection;
  responses are matched by request id and may come back in any order.
* **Write coalescing.** ``send`` encodes the request straight into the connection's outgoing buffer and wakes
  the writer task, which sends everything queued so far with one write: while one write is on the wire, the
  next batch accumulates. This is the main lever on throughput. An add's payload is not copied into that
  buffer: its parts (of ``GATHER_PART_BYTES_MIN`` bytes or more) are queued after it as they are and the
  writer sends buffer and parts with one gather write (:mod:`.gather_write`).
* **Timeouts.** Each request has a deadline (``add_timeout_ms`` for ADD_ENTRY and WRITE_LAC,
  ``read_timeout_ms`` for the others, BookKeeper's ``addEntryTimeoutSec``/``readTimeout``); a request with no
  response by then fails with ``TIMEOUT`` and its late response is dropped. The connection stays up.
  (Use :func:`~.transport.next_request_id`: an id reused after a timeout could meet the old late response.)
  Deadlines are kept in send order per timeout class, so one timer task sleeps until the earliest of them.
  A replication client on this transport hands it its own timeouts (``take_request_timeouts``) and runs no
  timer of its own for these requests: each request has one timeout tracker, here.
  A write that makes no progress for the longer of the two timeouts counts as a lost connection.
* **Back-pressure.** ``send`` cannot wait (it is synchronous), so a request beyond ``inflight_requests_max``
  on one connection is *failed*, not queued: its callback receives ``ErrorResponse(request_id,
  ETOOMANYREQUESTS)``, the same answer a saturated bookie gives.
* **Callbacks** run on the trio thread, exactly once, never synchronously inside ``send`` (immediate
  failures are delivered through ``TrioToken.run_sync_soon``); an exception raised by a callback is logged
  and does not disturb the connection.

* **TLS and authentication.** With an ``ssl_context`` (:func:`~..runtime.auth.tls.client_ssl_context`)
  each connection is TLS, checking the bookie's certificate against the host of its bookie id. With an
  ``auth_token`` the first message on every connection is an AUTH carrying it (BookKeeper's
  ``AuthHandler.ClientSideHandler``); requests wait until the bookie accepts it. Connect, handshake and AUTH
  together are bounded by ``connect_timeout_ms``; a refused token fails the queued requests with ``CONNECT``
  (the detail says why) and backs off like any failed connection.

Lifecycle: ``async with open_tcp_transport(settings) as transport:`` owns a nursery holding one task per
active connection; leaving the block fails every pending request with ``SHUTDOWN`` and closes the sockets.
"""

from __future__ import annotations

import logging
import math
import ssl
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Annotated, Self

import trio
from pydantic import ConfigDict, Field, model_validator

from magnetar.bookkeeper.client.gather_write import Buffer, send_parts
from magnetar.bookkeeper.client.settings import RequestTimeouts
from magnetar.bookkeeper.client.transport import (
    BookieId,
    FailureReason,
    ResponseCallback,
    TransportFailure,
    next_request_id,
)
from magnetar.bookkeeper.protocol import (
    AUTH_PLUGIN_TOKEN,
    FRAME_BYTES_MAX_DEFAULT,
    NEED_DATA,
    AddRequest,
    AuthRequest,
    AuthResponse,
    BookieStatus,
    ClientProtocol,
    ErrorResponse,
    FramingError,
    InvalidMessageError,
    Request,
    Response,
    WriteLacRequest,
)
from magnetar.bookkeeper.runtime import SendTimer

log = logging.getLogger(__name__)

GATHER_PART_BYTES_MIN = 64
"""An add's part smaller than this (the managed ledger's 10-byte index prefix, a tiny payload) is copied into
the coalescing buffer: a separate gather entry would cost more than the copy."""

YIELD_EVERY_RESPONSES = 128


class TcpTransportSettings(RequestTimeouts):
    """The transport's limits; its request timeouts (``add_timeout_ms``, ``read_timeout_ms``) are the
    client's declaration, and a client on this transport hands it its own values."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    connect_timeout_ms: Annotated[int, Field(gt=0)] = 10_000
    inflight_requests_max: Annotated[int, Field(gt=0)] = 10_000
    frame_bytes_max: Annotated[int, Field(ge=64)] = FRAME_BYTES_MAX_DEFAULT
    receive_chunk_bytes: Annotated[int, Field(gt=0)] = 256 * 1024
    reconnect_backoff_initial_ms: Annotated[int, Field(ge=0)] = 100
    reconnect_backoff_max_ms: Annotated[int, Field(ge=0)] = 5_000

    @model_validator(mode="after")
    def _check_backoff(self) -> Self:
        if self.reconnect_backoff_initial_ms > self.reconnect_backoff_max_ms:
            raise ValueError("reconnect_backoff_initial_ms must be <= reconnect_backoff_max_ms")
        return self


def parse_bookie_id(bookie: BookieId) -> tuple[str, int]:
    """``host:port`` (IPv6 as ``[addr]:port``) -> (host, port); ValueError when malformed."""
    host, sep, port_text = bookie.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"bookie id {bookie!r} is not host:port")
    port = int(port_text)
    if not 0 < port < 65536:
        raise ValueError(f"bookie id {bookie!r} has an invalid port")
    return host.removeprefix("[").removesuffix("]"), port


def _safe_call(callback: ResponseCallback, result: Response | TransportFailure) -> None:
    try:
        callback(result)
    except Exception:
        log.exception("bookie response callback failed on %r", result)


class _ConnectFailed(Exception):
    """Internal: the connection could not be set up (handshake or AUTH); the message says why."""


class TcpTransport:
    """Use through :func:`open_tcp_transport`."""

    def __init__(
        self,
        settings: TcpTransportSettings,
        nursery: trio.Nursery,
        *,
        ssl_context: ssl.SSLContext | None = None,
        auth_token: str | None = None,
    ) -> None:
        self.settings = settings
        self.ssl_context = ssl_context
        self.auth_payload = None if auth_token is None else auth_token.encode("ascii")
        self._nursery = nursery
        self._token = trio.lowlevel.current_trio_token()
        self._connections: dict[BookieId, _Connection] = {}
        self._closed = False

    def sends_parts(self) -> bool:
        """An add's payload parts go to the socket as they are (``transport.SendsParts``)."""
        return True

    def send(self, bookie: BookieId, request: Request, callback: ResponseCallback) -> None:
        if self._closed:
            self.defer(callback, TransportFailure(bookie, FailureReason.SHUTDOWN, "transport is closed"))
            return
        connection = self._connections.get(bookie)
        if connection is None:
            connection = self._connections[bookie] = _Connection(self, bookie)
        connection.send(request, callback)

    def take_request_timeouts(self, add_timeout_ms: int, read_timeout_ms: int) -> None:
        """The client's request timeouts replace this transport's (``add_timeout_ms``, ``read_timeout_ms``)
        for requests sent from now on; the client then runs no timer of its own (``TimesOutRequests``)."""
        self.settings = self.settings.model_copy(
            update={"add_timeout_ms": add_timeout_ms, "read_timeout_ms": read_timeout_ms}
        )
        for connection in self._connections.values():
            connection.take_timeouts(self.settings)

    def inflight_count(self, bookie: BookieId) -> int:
        connection = self._connections.get(bookie)
        return 0 if connection is None else len(connection.inflight)

    def defer(self, callback: ResponseCallback, result: Response | TransportFailure) -> None:
        """Deliver ``result`` soon, from the event loop (never inside the caller's frame)."""
        self._token.run_sync_soon(_safe_call, callback, result)

    def start_connection_task(self, connection: _Connection) -> None:
        self._nursery.start_soon(connection.run, name=f"bookie-connection {connection.bookie}")

    def close(self) -> None:
        """Fail everything pending with SHUTDOWN; the caller then cancels the nursery."""
        self._closed = True
        for connection in self._connections.values():
            connection.fail_all(FailureReason.SHUTDOWN, "transport closed")


@asynccontextmanager
async def open_tcp_transport(
    settings: TcpTransportSettings | None = None,
    *,
    ssl_context: ssl.SSLContext | None = None,
    auth_token: str | None = None,
) -> AsyncIterator[TcpTransport]:
    """The transport for the ``async with`` block; ``ssl_context`` for TLS, ``auth_token`` (ASCII JWT) for
    bookies that require authentication."""
    async with trio.open_nursery() as nursery:
        transport = TcpTransport(
            settings or TcpTransportSettings(), nursery, ssl_context=ssl_context, auth_token=auth_token
        )
        try:
            yield transport
        finally:
            transport.close()
            nursery.cancel_scope.cancel()


_Entry = tuple[int, ResponseCallback]  # (sequence number, callback)
_Deadline = tuple[float, int, int]  # (deadline, request id, sequence number)


class _Connection:
    """One bookie's connection: the in-flight table, the outgoing buffer and the tasks that drive them."""

    def __init__(self, transport: TcpTransport, bookie: BookieId) -> None:
        self.transport = transport
        self.bookie = bookie
        settings = transport.settings
        self._inflight_max = settings.inflight_requests_max
        # A write that cannot complete within the longest request timeout means a stuck connection.
        self._send_timer = SendTimer(max(settings.add_timeout_ms, settings.read_timeout_ms) / 1000)
        self.take_timeouts(settings)
        self.inflight: dict[int, _Entry] = {}
        self._add_deadlines: deque[_Deadline] = deque()
        self._read_deadlines: deque[_Deadline] = deque()
        self._seq = 0
        # The run's clock (trio's, or a MockClock in tests), read directly: cheaper than trio.current_time().
        self._now = trio.lowlevel.current_clock().current_time
        self._out = bytearray()
        self._queued: list[Buffer] = []
        """What goes out before ``_out``: coalescing buffers, each followed by an add's payload parts."""
        self._proto = ClientProtocol(settings.frame_bytes_max)
        self._running = False
        self._writer_waiting = False
        self._writer_wakeup = trio.Event()
        self._timer_scope = trio.CancelScope(deadline=math.inf)
        self._failures = 0
        self._retry_at = -math.inf
        self._received_any = False
        self._loss = ""

    def take_timeouts(self, settings: TcpTransportSettings) -> None:
        """Request timeouts (and the stuck-write bound, the longer of them) of requests sent from now on."""
        self._settings = settings
        self._add_timeout_s = settings.add_timeout_ms / 1000
        self._read_timeout_s = settings.read_timeout_ms / 1000
        self._send_timer.timeout_s = max(settings.add_timeout_ms, settings.read_timeout_ms) / 1000

    # -- the caller's side ---------------------------------------------------------------------------

    def send(self, request: Request, callback: ResponseCallback) -> None:
        rid = request.request_id
        transport = self.transport
        if not self._running:
            now = trio.current_time()
            if now < self._retry_at:
                detail = f"reconnect backoff ({self._retry_at - now:.3f}s left) after: {self._loss}"
                transport.defer(callback, TransportFailure(self.bookie, FailureReason.CONNECT, detail))
                return
        inflight = self.inflight
        if rid in inflight:
            raise ValueError(f"request id {rid} is already in flight to {self.bookie}")
        if len(inflight) >= self._inflight_max:
            detail = f"inflight_requests_max={self._inflight_max} reached for bookie {self.bookie}"
            transport.defer(callback, ErrorResponse(rid, BookieStatus.ETOOMANYREQUESTS, detail))
            return
        try:
            tail = self._proto.send_parts(self._out, request)
        except InvalidMessageError as exc:
            transport.defer(callback, ErrorResponse(rid, BookieStatus.EBADREQ, str(exc)))
            return
        if tail:
            out = self._out
            queued = self._queued
            for part in tail:
                if len(part) < GATHER_PART_BYTES_MIN:
                    out += part
                else:
                    queued.append(out)
                    queued.append(part)
                    self._out = out = bytearray()
        self._seq = seq = self._seq + 1
        inflight[rid] = (seq, callback)
        if type(request) is AddRequest or type(request) is WriteLacRequest:
            deadline = self._now() + self._add_timeout_s
            self._add_deadlines.append((deadline, rid, seq))
        else:
            deadline = self._now() + self._read_timeout_s
            self._read_deadlines.append((deadline, rid, seq))
        if deadline < self._timer_scope.deadline:  # noqa: PLR1730 (assigning reschedules the timer)
            self._timer_scope.deadline = deadline
        if self._writer_waiting:
            self._writer_waiting = False
            self._writer_wakeup.set()
        if not self._running:
            self._running = True
            transport.start_connection_task(self)

    def fail_all(self, reason: FailureReason, detail: str) -> None:
        """Fail every in-flight request (called outside ``send``: callbacks may run synchronously)."""
        pending = self.inflight
        self.inflight = {}
        self._add_deadlines.clear()
        self._read_deadlines.clear()
        self._out = bytearray()
        self._queued = []
        failure = TransportFailure(self.bookie, reason, detail)
        for _, callback in pending.values():
            _safe_call(callback, failure)

    # -- the connection task ---------------------------------------------------------------------------

    async def run(self) -> None:
        reason = FailureReason.CLOSED
        self._loss = "connection closed"
        self._received_any = False
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._timer)
                reason = await self._session()
                nursery.cancel_scope.cancel()
        finally:
            self._running = False
            self._send_timer.sent()  # a send this connection broke off must not count against the next one
            self._proto = ClientProtocol(self._settings.frame_bytes_max)
            self._writer_waiting = False
        if reason is FailureReason.CONNECT or not self._received_any:
            self._failures += 1
            initial = self._settings.reconnect_backoff_initial_ms
            delay_ms = min(self._settings.reconnect_backoff_max_ms, initial * 2 ** (self._failures - 1))
            self._retry_at = trio.current_time() + delay_ms / 1000
        else:
            self._failures = 0
            self._retry_at = -math.inf
        if self.inflight:
            log.info("bookie %s: %s; failing %d requests", self.bookie, self._loss, len(self.inflight))
        self.fail_all(reason, self._loss)

    async def _session(self) -> FailureReason:
        try:
            with trio.fail_after(self._settings.connect_timeout_ms / 1000):
                stream = await self._connect()
        except trio.TooSlowError:
            self._loss = f"connect timed out after {self._settings.connect_timeout_ms} ms"
            return FailureReason.CONNECT
        except (OSError, ValueError) as exc:
            self._loss = f"connect failed: {exc}"
            return FailureReason.CONNECT
        except _ConnectFailed as exc:
            self._loss = str(exc)
            log.error("bookie %s: %s", self.bookie, self._loss)
            return FailureReason.CONNECT
        log.debug("connected to bookie %s", self.bookie)
        async with stream, trio.open_nursery() as nursery:
            nursery.start_soon(self._writer, stream, nursery.cancel_scope)
            nursery.start_soon(self._send_timer.watch, partial(self._send_stalled, nursery.cancel_scope))
            await self._reader(stream)
            nursery.cancel_scope.cancel()
        return FailureReason.CLOSED

    async def _connect(self) -> trio.abc.Stream:
        """Open the connection, run the TLS handshake and the AUTH exchange when configured."""
        host, port = parse_bookie_id(self.bookie)
        tcp = await trio.open_tcp_stream(host, port)
        stream: trio.abc.Stream = tcp
        try:
            ssl_context = self.transport.ssl_context
            if ssl_context is not None:
                tls = trio.SSLStream(tcp, ssl_context, server_hostname=host)
                stream = tls
                try:
                    await tls.do_handshake()
                except trio.BrokenResourceError as exc:
                    raise _ConnectFailed(f"TLS handshake failed: {exc.__cause__ or exc}") from None
            if self.transport.auth_payload is not None:
                await self._authenticate(stream, self.transport.auth_payload)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return stream

    async def _authenticate(self, stream: trio.abc.Stream, token: bytes) -> None:
        """Send AUTH first and wait for the bookie's answer; nothing else is sent before it."""
        rid = next_request_id()
        proto = self._proto
        try:
            await stream.send_all(proto.send(AuthRequest(rid, AUTH_PLUGIN_TOKEN, token)))
            while (event := proto.next_event()) is NEED_DATA:
                data = await stream.receive_some(self._settings.receive_chunk_bytes)
                if not data:
                    raise _ConnectFailed("the bookie closed the connection during AUTH")
                proto.receive_data(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise _ConnectFailed(f"connection lost during AUTH: {exc}") from None
        self._received_any = True
        if not isinstance(event, AuthResponse) or event.request_id != rid:
            raise _ConnectFailed(f"the bookie answered AUTH with {type(event).__name__}")
        if event.status is not BookieStatus.EOK:
            raise _ConnectFailed(f"the bookie refused authentication ({event.status.name}): {event.reason}")

    def _send_stalled(self, scope: trio.CancelScope) -> None:
        self._loss = f"the bookie accepted no bytes for {self._send_timer.timeout_s:.1f}s"
        scope.cancel()

    async def _writer(self, stream: trio.abc.Stream, scope: trio.CancelScope) -> None:
        timer = self._send_timer
        try:
            while True:
                if not self._out and not self._queued:
                    self._writer_wakeup = trio.Event()
                    self._writer_waiting = True
                    await self._writer_wakeup.wait()
                    continue
                parts, self._queued = self._queued, []
                if self._out:
                    parts.append(self._out)
                    self._out = bytearray()
                timer.sending()
                await send_parts(stream, parts)
                timer.sent()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._loss = f"connection lost while sending: {exc or type(exc).__name__}"
            scope.cancel()

    async def _reader(self, stream: trio.abc.Stream) -> None:
        proto = self._proto
        chunk = self._settings.receive_chunk_bytes
        try:
            while True:
                data = await stream.receive_some(chunk)
                if not data:
                    self._loss = "connection closed by the bookie"
                    return
                self._received_any = True
                proto.receive_data(data)
                handled = 0
                while (event := proto.next_event()) is not NEED_DATA:
                    if isinstance(event, FramingError):
                        self._loss = f"protocol error from the bookie: {event.reason}"
                        log.warning("bookie %s: %s", self.bookie, self._loss)
                        return
                    if isinstance(event, AuthResponse):
                        log.debug("bookie %s: late AUTH answer %r ignored", self.bookie, event)
                        continue
                    self._on_response(event)
                    handled += 1
                    if handled % YIELD_EVERY_RESPONSES == 0 and self._out:
                        # Let the writer send what the callbacks queued: the bookie starts on it while we
                        # decode the rest of this chunk (the two processes overlap instead of taking turns).
                        await trio.lowlevel.checkpoint()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._loss = f"connection lost while receiving: {exc or type(exc).__name__}"

    def _on_response(self, response: Response) -> None:
        entry = self.inflight.pop(response.request_id, None)
        if entry is None:
            log.debug("bookie %s: response to unknown or timed-out request %r", self.bookie, response)
            return
        _safe_call(entry[1], response)
        if len(self._add_deadlines) + len(self._read_deadlines) > 2 * len(self.inflight) + 1024:
            self._compact_deadlines()

    # -- timeouts -------------------------------------------------------------------------------------------

    async def _timer(self) -> None:
        while True:
            self._timer_scope = trio.CancelScope(deadline=self._next_deadline())
            with self._timer_scope:
                await trio.sleep_forever()
            self._expire(trio.current_time())

    def _next_deadline(self) -> float:
        inflight = self.inflight
        earliest = math.inf
        for queue in (self._add_deadlines, self._read_deadlines):
            while queue:
                deadline, rid, seq = queue[0]
                entry = inflight.get(rid)
                if entry is not None and entry[0] == seq:
                    earliest = min(earliest, deadline)
                    break
                queue.popleft()
        return earliest

    def _expire(self, now: float) -> None:
        inflight = self.inflight
        for queue, setting in ((self._add_deadlines, "add"), (self._read_deadlines, "read")):
            while queue and queue[0][0] <= now:
                _, rid, seq = queue.popleft()
                entry = inflight.get(rid)
                if entry is None or entry[0] != seq:
                    continue
                del inflight[rid]
                timeout_ms = getattr(self._settings, f"{setting}_timeout_ms")
                detail = f"no response within {setting}_timeout_ms={timeout_ms}"
                _safe_call(entry[1], TransportFailure(self.bookie, FailureReason.TIMEOUT, detail))

    def _compact_deadlines(self) -> None:
        inflight = self.inflight

        def live(item: _Deadline) -> bool:
            entry = inflight.get(item[1])
            return entry is not None and entry[0] == item[2]

        self._add_deadlines = deque(filter(live, self._add_deadlines))
        self._read_deadlines = deque(filter(live, self._read_deadlines))
